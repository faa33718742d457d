//! Reading a KCL application's DynamoDB lease table (for `weir import-kcl`): every item,
//! as [`weir_core::kcl::KclLease`]. Read-only; the attribute names are KCL's
//! `DynamoDBLeaseSerializer`'s.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;
use weir_core::LeaseError;
use weir_core::kcl::KclLease;

/// Every item of the KCL lease table `table` (a full scan, consistent reads).
pub async fn read_kcl_leases(client: &aws_sdk_dynamodb::Client, table: &str) -> Result<Vec<KclLease>, LeaseError> {
    let mut out = Vec::new();
    let mut start: Option<HashMap<String, AttributeValue>> = None;
    loop {
        let page = client
            .scan()
            .table_name(table)
            .consistent_read(true)
            .set_exclusive_start_key(start.take())
            .send()
            .await
            .map_err(|e| crate::dynamodb::store_err("scan (KCL lease table)", table, e))?;
        out.extend(page.items().iter().map(from_item));
        match page.last_evaluated_key() {
            Some(k) if !k.is_empty() => start = Some(k.clone()),
            _ => break,
        }
    }
    out.sort_by(|a, b| a.key.cmp(&b.key));
    Ok(out)
}

fn from_item(item: &HashMap<String, AttributeValue>) -> KclLease {
    let s = |k: &str| item.get(k).and_then(|v| v.as_s().ok()).cloned();
    let n = |k: &str| item.get(k).and_then(|v| v.as_n().ok()).and_then(|n| n.parse::<u64>().ok());
    let ss = |k: &str| item.get(k).and_then(|v| v.as_ss().ok()).cloned().unwrap_or_default();
    KclLease {
        key: s("leaseKey").unwrap_or_default(),
        owner: s("leaseOwner"),
        counter: n("leaseCounter").unwrap_or(0),
        checkpoint: s("checkpoint"),
        checkpoint_sub: n("checkpointSubSequenceNumber").unwrap_or(0),
        pending_checkpoint: s("pendingCheckpoint").filter(|p| !p.is_empty()),
        parents: ss("parentShardId"),
        children: ss("childShardIds"),
        hash_keys: s("startingHashKey").zip(s("endingHashKey")),
        entity_type: s("entityType"),
    }
}
