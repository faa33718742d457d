//! Taking over a KCL application's lease table (`weir import-kcl`): its leases as KCL
//! 2.x and 3.x store them, and the weir leases and checkpoints that continue where the
//! KCL application stopped.
//!
//! The item shape follows KCL's `DynamoDBLeaseSerializer`: `leaseKey` (the shard id, or
//! `account:stream:creationEpoch:shardId` in a multi-stream application), `leaseOwner`,
//! `leaseCounter`, `checkpoint` (a sequence number or one of the sentinels
//! `TRIM_HORIZON`, `LATEST`, `AT_TIMESTAMP`, `SHARD_END`) with
//! `checkpointSubSequenceNumber`, `pendingCheckpoint*` (a prepared, uncommitted
//! checkpoint), `parentShardId` and `childShardIds` (string sets), and
//! `startingHashKey` / `endingHashKey`. Items whose `entityType` is set and is not
//! `LEASE` are not leases (KCL 3 keeps other entities beside them) and are skipped.
//!
//! A KCL checkpoint at a sequence number means "processed up to and including it",
//! which is what a weir checkpoint means: weir resumes after it, so nothing is skipped
//! and nothing before it is read again.

use crate::position::Checkpoint;
use crate::record::HashKeyRange;
use crate::sequence::{ExtendedSequenceNumber, SequenceNumber};
use crate::{ShardId, Timestamp};

/// One item of a KCL lease table, as read.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct KclLease {
    /// `leaseKey`.
    pub key: String,
    /// `leaseOwner`.
    pub owner: Option<String>,
    /// `leaseCounter`.
    pub counter: u64,
    /// `checkpoint`.
    pub checkpoint: Option<String>,
    /// `checkpointSubSequenceNumber`.
    pub checkpoint_sub: u64,
    /// `pendingCheckpoint`.
    pub pending_checkpoint: Option<String>,
    /// `parentShardId`.
    pub parents: Vec<String>,
    /// `childShardIds`.
    pub children: Vec<String>,
    /// `startingHashKey`, `endingHashKey`.
    pub hash_keys: Option<(String, String)>,
    /// `entityType` (KCL 3).
    pub entity_type: Option<String>,
}

/// What weir writes for one KCL lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Planned {
    /// The shard.
    pub shard: ShardId,
    /// Its parents.
    pub parents: Vec<ShardId>,
    /// Its hash key range.
    pub hash_range: Option<HashKeyRange>,
    /// The checkpoint every imported consumer gets.
    pub checkpoint: Checkpoint,
    /// Something the operator should know (a pending checkpoint left out).
    pub note: Option<String>,
}

/// The result of planning an import.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Plan {
    /// Leases to write.
    pub leases: Vec<Planned>,
    /// Items left out, with the reason.
    pub skipped: Vec<(String, String)>,
}

/// Why an import cannot be planned.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KclImportError {
    /// A lease item weir cannot read.
    #[error("KCL lease {key}: {reason}")]
    Unreadable {
        /// The `leaseKey`.
        key: String,
        /// What is wrong.
        reason: String,
    },
    /// Leases at `AT_TIMESTAMP`: KCL keeps the time in the application's configuration.
    #[error(
        "KCL leases {0} are at AT_TIMESTAMP, whose time is in the KCL application's configuration (initialPositionInStreamExtended), not in the table: pass --at-timestamp"
    )]
    NeedsTimestamp(String),
}

/// The stream and shard of a lease key: `shardId` in a single-stream application,
/// `account:stream:creationEpoch:shardId` in a multi-stream one.
pub fn split_key(key: &str) -> (Option<&str>, &str) {
    let parts: Vec<&str> = key.split(':').collect();
    match parts.as_slice() {
        [_, stream, _, shard] => (Some(stream), shard),
        _ => (None, key),
    }
}

/// The leases weir writes for `items`. In a multi-stream table only the leases of
/// `stream` are taken; `at_timestamp` is the KCL application's initial timestamp, for
/// leases still at `AT_TIMESTAMP`.
pub fn plan(items: &[KclLease], stream: &str, at_timestamp: Option<Timestamp>) -> Result<Plan, KclImportError> {
    let mut out = Plan::default();
    let mut needs_time = Vec::new();
    for item in items {
        if item.entity_type.as_deref().is_some_and(|t| t != "LEASE") {
            out.skipped.push((item.key.clone(), format!("entity type {}", item.entity_type.as_deref().unwrap_or(""))));
            continue;
        }
        let (item_stream, shard) = split_key(&item.key);
        if let Some(s) = item_stream.filter(|s| *s != stream) {
            out.skipped.push((item.key.clone(), format!("a lease of stream {s}")));
            continue;
        }
        let bad = |reason: String| KclImportError::Unreadable { key: item.key.clone(), reason };
        let checkpoint = match item.checkpoint.as_deref() {
            None | Some("") => return Err(bad("no checkpoint attribute".into())),
            Some("TRIM_HORIZON") => Checkpoint::TrimHorizon,
            Some("LATEST") => Checkpoint::Latest,
            Some("SHARD_END") => Checkpoint::ShardEnd,
            Some("AT_TIMESTAMP") => match at_timestamp {
                Some(t) => Checkpoint::AtTimestamp(t),
                None => {
                    needs_time.push(item.key.clone());
                    continue;
                }
            },
            Some(seq) => {
                let sequence = SequenceNumber::parse(seq).map_err(|e| bad(format!("checkpoint {seq:?}: {e}")))?;
                Checkpoint::At(ExtendedSequenceNumber::new(sequence, item.checkpoint_sub))
            }
        };
        let hash_range = match &item.hash_keys {
            None => None,
            Some((start, end)) => {
                let n = |s: &String| s.parse::<u128>().map_err(|_| bad(format!("hash key {s:?} is not a number")));
                Some(HashKeyRange { start: n(start)?, end: n(end)? })
            }
        };
        let note = item.pending_checkpoint.as_ref().map(|p| {
            format!("a pending (prepared, not committed) checkpoint {p} is left out: records after the checkpoint are read again")
        });
        out.leases.push(Planned {
            shard: ShardId::new(shard),
            parents: item.parents.iter().map(|p| ShardId::new(split_key(p).1)).collect(),
            hash_range,
            checkpoint,
            note,
        });
    }
    if !needs_time.is_empty() {
        return Err(KclImportError::NeedsTimestamp(needs_time.join(", ")));
    }
    // Parents before children, so that leases are created in an order the runtime
    // would create them in.
    out.leases.sort_by_key(|p| (!p.parents.is_empty(), p.shard.clone()));
    Ok(out)
}

/// Leases a KCL worker renewed between two reads of the table: an owner and a counter
/// that moved. A KCL application still running would keep processing beside weir.
pub fn renewed(before: &[KclLease], after: &[KclLease]) -> Vec<String> {
    after
        .iter()
        .filter(|a| a.owner.is_some())
        .filter(|a| before.iter().find(|b| b.key == a.key).is_some_and(|b| b.counter != a.counter))
        .map(|a| a.key.clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(key: &str, checkpoint: &str) -> KclLease {
        KclLease { key: key.into(), counter: 7, checkpoint: Some(checkpoint.into()), ..Default::default() }
    }

    #[test]
    fn checkpoints_map_to_weir_positions() {
        let seq = "49590338271490256608559692538361571095921575989136588898";
        let mut sub = item("shardId-000000000001", seq);
        sub.checkpoint_sub = 3;
        sub.parents = vec!["shardId-000000000000".into()];
        sub.hash_keys = Some(("0".into(), "170141183460469231731687303715884105727".into()));
        sub.pending_checkpoint = Some("4959".into());
        let items = vec![
            sub,
            item("shardId-000000000000", "SHARD_END"),
            item("shardId-000000000002", "TRIM_HORIZON"),
            item("shardId-000000000003", "LATEST"),
        ];
        let p = plan(&items, "s", None).unwrap();
        let by = |s: &str| p.leases.iter().find(|l| l.shard.as_str() == s).unwrap().clone();
        assert_eq!(by("shardId-000000000000").checkpoint, Checkpoint::ShardEnd);
        let one = by("shardId-000000000001");
        assert_eq!(one.checkpoint, Checkpoint::At(ExtendedSequenceNumber::new(SequenceNumber::parse(seq).unwrap(), 3)));
        assert_eq!(one.parents, vec![ShardId::new("shardId-000000000000")]);
        assert_eq!(one.hash_range, Some(HashKeyRange { start: 0, end: u128::MAX / 2 }));
        assert!(one.note.unwrap().contains("pending"));
        assert_eq!(by("shardId-000000000002").checkpoint, Checkpoint::TrimHorizon);
        assert_eq!(by("shardId-000000000003").checkpoint, Checkpoint::Latest);
        assert_eq!(p.leases.last().unwrap().shard.as_str(), "shardId-000000000001", "children after roots");
    }

    #[test]
    fn multi_stream_keys_and_other_entities_are_filtered() {
        let mut metrics = item("worker-1", "TRIM_HORIZON");
        metrics.entity_type = Some("WORKER_METRICS".into());
        let mut lease = item("123456789012:events:1700000000:shardId-000000000004", "TRIM_HORIZON");
        lease.entity_type = Some("LEASE".into());
        let items = vec![metrics, lease, item("123456789012:other:1700000000:shardId-000000000001", "LATEST")];
        let p = plan(&items, "events", None).unwrap();
        assert_eq!(p.leases.len(), 1);
        assert_eq!(p.leases[0].shard.as_str(), "shardId-000000000004");
        assert_eq!(p.skipped.len(), 2);
        assert!(p.skipped.iter().any(|(_, why)| why == "a lease of stream other"));
    }

    #[test]
    fn at_timestamp_needs_the_applications_time() {
        let items = vec![item("shardId-000000000000", "AT_TIMESTAMP")];
        let e = plan(&items, "s", None).unwrap_err();
        assert!(e.to_string().contains("--at-timestamp"), "{e}");
        let t = Timestamp::from_millis(1_000);
        assert_eq!(plan(&items, "s", Some(t)).unwrap().leases[0].checkpoint, Checkpoint::AtTimestamp(t));
        let bad = plan(&[item("shardId-0", "12x")], "s", None).unwrap_err();
        assert!(bad.to_string().starts_with("KCL lease shardId-0: checkpoint \"12x\""), "{bad}");
    }

    #[test]
    fn renewals_are_seen_only_for_owned_leases() {
        let mut a = item("a", "LATEST");
        a.owner = Some("kcl-worker".into());
        let mut a2 = a.clone();
        a2.counter += 1;
        let free = item("b", "LATEST");
        let mut free2 = free.clone();
        free2.counter += 1;
        assert_eq!(renewed(&[a.clone(), free.clone()], &[a2, free2]), vec!["a".to_owned()]);
        assert!(renewed(&[a.clone()], &[a]).is_empty());
    }
}
