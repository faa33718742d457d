//! Records and batches, as a shard reader delivers them.

use bytes::Bytes;
use md5::{Digest, Md5};
use serde::{Deserialize, Serialize};

use crate::ids::ShardId;
use crate::sequence::ExtendedSequenceNumber;
use crate::time::Timestamp;

/// One user record from a shard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// The partition key the producer gave.
    pub partition_key: String,
    /// Sequence number and KPL sub-sequence.
    pub position: ExtendedSequenceNumber,
    /// When Kinesis accepted the record (millisecond precision).
    pub approximate_arrival: Timestamp,
    /// The payload, shared without copying.
    pub data: Bytes,
}

/// An inclusive range of 128-bit hash keys a shard covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct HashKeyRange {
    /// First hash key of the range.
    pub start: u128,
    /// Last hash key of the range (inclusive).
    pub end: u128,
}

impl HashKeyRange {
    /// The whole key space, `0..=2^128-1`.
    pub const FULL: HashKeyRange = HashKeyRange { start: 0, end: u128::MAX };

    /// Whether `key` lies in the range.
    pub fn contains(&self, key: u128) -> bool {
        self.start <= key && key <= self.end
    }
}

/// A shard created by a split or merge of the shard being read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChildShard {
    /// The child's id.
    pub shard_id: ShardId,
    /// All parents of the child (two for a merge).
    pub parents: Vec<ShardId>,
    /// The child's hash key range.
    pub hash_range: HashKeyRange,
}

/// Consecutive records of one shard, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordBatch {
    /// The shard the records come from.
    pub shard_id: ShardId,
    /// The records, in sequence order. May be empty (a read that only advanced).
    pub records: Vec<Record>,
    /// How far the read is behind the tip of the shard, when the reader knows.
    pub millis_behind_latest: Option<u64>,
    /// Set on the last batch of a closed shard: the shard has ended and these are its
    /// children (possibly empty when the stream shrank to nothing).
    pub child_shards: Option<Vec<ChildShard>>,
}

impl RecordBatch {
    /// Whether this batch ends the shard.
    pub fn is_shard_end(&self) -> bool {
        self.child_shards.is_some()
    }

    /// Position of the last record, if any.
    pub fn last_position(&self) -> Option<&ExtendedSequenceNumber> {
        self.records.last().map(|r| &r.position)
    }

    /// Total payload bytes.
    pub fn data_bytes(&self) -> usize {
        self.records.iter().map(|r| r.data.len()).sum()
    }
}

/// Kinesis's partition-key hash: the MD5 of the UTF-8 key as a big-endian 128-bit
/// integer. A record goes to the open shard whose hash key range contains it.
pub fn partition_hash(partition_key: &str) -> u128 {
    u128::from_be_bytes(Md5::digest(partition_key.as_bytes()).into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partition_hash_is_md5_big_endian() {
        // md5("") = d41d8cd98f00b204e9800998ecf8427e
        assert_eq!(partition_hash(""), 0xd41d8cd98f00b204e9800998ecf8427e);
    }
}
