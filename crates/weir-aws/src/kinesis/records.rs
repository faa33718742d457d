//! From the SDK's records to weir's: sequence numbers validated (an invalid one is an
//! error, never a panic), arrival times in milliseconds, KPL aggregates unpacked.

use bytes::Bytes;
use weir_core::kpl::{Aggregation, deaggregate};
use weir_core::ports::ReadError;
use weir_core::{ChildShard, ExtendedSequenceNumber, Record, SequenceNumber, ShardId, Timestamp};

use super::catalog::hash_range;

/// Metric: records that looked like KPL aggregates but failed to decode.
pub const KPL_CORRUPT: &str = "weir_kpl_corrupt_records_total";

/// Takes the SDK's record apart: its data becomes the record's bytes without a copy.
pub(crate) fn convert(r: aws_sdk_kinesis::types::Record, out: &mut Vec<Record>) -> Result<(), ReadError> {
    let sequence = SequenceNumber::parse(r.sequence_number())
        .map_err(|e| ReadError::Fatal(format!("invalid sequence number from service: {e}")))?;
    let arrival = r
        .approximate_arrival_timestamp()
        .and_then(|t| t.to_millis().ok())
        .map(Timestamp::from_millis)
        .unwrap_or_default();
    let record = Record {
        partition_key: r.partition_key.unwrap_or_default(),
        position: ExtendedSequenceNumber::plain(sequence),
        approximate_arrival: arrival,
        data: Bytes::from(r.data.into_inner()),
    };
    let (records, how) = deaggregate(record);
    if let Aggregation::Corrupt(reason) = how {
        metrics::counter!(KPL_CORRUPT, "reason" => reason).increment(1);
        tracing::warn!(reason, "record starts like a KPL aggregate but does not decode; passed through unchanged");
    }
    out.extend(records);
    Ok(())
}

pub(crate) fn children(c: &[aws_sdk_kinesis::types::ChildShard]) -> Result<Vec<ChildShard>, ReadError> {
    c.iter()
        .map(|c| {
            Ok(ChildShard {
                shard_id: ShardId::from(c.shard_id()),
                parents: c.parent_shards().iter().map(|p| ShardId::from(p.as_str())).collect(),
                hash_range: hash_range(c.hash_key_range())?,
            })
        })
        .collect()
}
