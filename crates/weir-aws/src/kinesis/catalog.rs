use aws_sdk_kinesis::Client;
use weir_core::ports::{ReadError, ShardInfo};
use weir_core::{HashKeyRange, ShardId};

use crate::error::{ErrorClass, classify, describe};

pub(crate) fn hash_range(r: Option<&aws_sdk_kinesis::types::HashKeyRange>) -> Result<HashKeyRange, ReadError> {
    let r = r.ok_or_else(|| ReadError::Fatal("shard without hash key range".into()))?;
    let parse =
        |s: &str| s.parse::<u128>().map_err(|_| ReadError::Fatal(format!("invalid hash key {s:?} from service")));
    Ok(HashKeyRange { start: parse(r.starting_hash_key())?, end: parse(r.ending_hash_key())? })
}

/// Every shard of the stream (ListShards, all pages).
pub(crate) async fn list_shards(client: &Client, stream: &str) -> Result<Vec<ShardInfo>, ReadError> {
    let mut out = Vec::new();
    let mut token: Option<String> = None;
    loop {
        // With a NextToken, ListShards must not name the stream.
        let req = match &token {
            Some(t) => client.list_shards().next_token(t),
            None => client.list_shards().stream_name(stream),
        };
        let page = req.send().await.map_err(|e| match classify(&e) {
            ErrorClass::Throttling => ReadError::Throttled(describe(&e)),
            ErrorClass::Transient => ReadError::Transient(describe(&e)),
            ErrorClass::Permanent => ReadError::Fatal(format!("list shards of {stream}: {}", describe(&e))),
        })?;
        for s in page.shards() {
            let parents =
                [s.parent_shard_id(), s.adjacent_parent_shard_id()].into_iter().flatten().map(ShardId::from).collect();
            out.push(ShardInfo {
                id: ShardId::from(s.shard_id()),
                parents,
                hash_range: hash_range(s.hash_key_range())?,
                closed: s.sequence_number_range().and_then(|r| r.ending_sequence_number()).is_some(),
            });
        }
        match page.next_token() {
            Some(t) if !t.is_empty() => token = Some(t.to_owned()),
            _ => return Ok(out),
        }
    }
}
