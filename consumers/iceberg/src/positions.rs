//! Where each shard stands in a table: the positions weir's commits carry in their
//! snapshot summaries.
//!
//! A commit of consumer `c` that holds rows of shard `s` puts
//! `weir.position:c:s = <sequence>/<sub-sequence>` in its snapshot's summary: every
//! record of `s` up to and including that position is handled by a commit of `c` (in
//! the table, or deliberately not: it did not fit and went to the error output). The
//! committed position of a shard is the one in the newest snapshot on the current
//! snapshot's line of ancestors that names it. Snapshot summaries live in the table's
//! metadata file, so reading positions costs no request beyond loading the table.

use std::collections::BTreeMap;

use iceberg::spec::TableMetadata;
use weir_core::{ExtendedSequenceNumber, SequenceNumber, ShardId};

/// The summary key of a consumer's position in a shard.
pub fn key(consumer: &str, shard: &ShardId) -> String {
    format!("weir.position:{consumer}:{}", shard.as_str())
}

/// A position as a summary value: `<sequence>/<sub-sequence>`.
pub fn encode(position: &ExtendedSequenceNumber) -> String {
    format!("{}/{}", position.sequence, position.sub_sequence)
}

/// A summary value back as a position.
pub fn decode(text: &str) -> Option<ExtendedSequenceNumber> {
    let (sequence, sub) = text.split_once('/')?;
    Some(ExtendedSequenceNumber::new(SequenceNumber::parse(sequence).ok()?, sub.parse().ok()?))
}

/// A summary value under weir's key that is not a position: someone else wrote it,
/// and no commit may guess where the shard stands.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("snapshot {snapshot} has {key} = {value:?}, which is not a position (<sequence>/<sub-sequence>)")]
pub struct UnreadablePosition {
    /// The snapshot.
    pub snapshot: i64,
    /// The key.
    pub key: String,
    /// What it holds.
    pub value: String,
}

/// The committed position of each of `shards` for `consumer`: the newest on the
/// current snapshot's line of ancestors. A shard no commit names (or whose commits
/// have all been expired) is absent.
pub fn committed<'a>(
    metadata: &TableMetadata,
    consumer: &str,
    shards: impl IntoIterator<Item = &'a ShardId>,
) -> Result<BTreeMap<ShardId, ExtendedSequenceNumber>, UnreadablePosition> {
    let mut wanted: BTreeMap<String, ShardId> = shards.into_iter().map(|s| (key(consumer, s), s.clone())).collect();
    let mut found = BTreeMap::new();
    let mut next = metadata.current_snapshot().map(|s| s.snapshot_id());
    // A parent that is no longer in the metadata (expired) ends the line; the count
    // bounds a walk over metadata whose parents form a cycle.
    let mut steps = metadata.snapshots().len();
    while let Some(id) = next
        && !wanted.is_empty()
        && steps > 0
    {
        let Some(snapshot) = metadata.snapshot_by_id(id) else { break };
        let summary = &snapshot.summary().additional_properties;
        let mut hits = Vec::new();
        for (k, shard) in &wanted {
            if let Some(value) = summary.get(k) {
                let position = decode(value).ok_or_else(|| UnreadablePosition {
                    snapshot: id,
                    key: k.clone(),
                    value: value.clone(),
                })?;
                found.insert(shard.clone(), position);
                hits.push(k.clone());
            }
        }
        for k in hits {
            wanted.remove(&k);
        }
        next = snapshot.parent_snapshot_id();
        steps -= 1;
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_read_back_as_written() {
        for (seq, sub) in [("0", 0), ("49590338271490256608559692538361571095921575989136588898", 7)] {
            let p = ExtendedSequenceNumber::new(SequenceNumber::parse(seq).unwrap(), sub);
            assert_eq!(decode(&encode(&p)), Some(p));
        }
        for bad in ["", "12", "12/", "/3", "x/1", "12/-1", "12/1/2"] {
            assert_eq!(decode(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn keys_name_consumer_and_shard() {
        assert_eq!(key("events", &ShardId::new("shardId-000000000001")), "weir.position:events:shardId-000000000001");
    }
}
