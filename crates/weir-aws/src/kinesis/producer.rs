//! A producer: PutRecords in batches of at most 500 records and 5 MiB, each record at
//! most 1 MiB (data plus partition key). When a call reports `FailedRecordCount > 0`,
//! only the failed records are sent again, with backoff and jitter; a record is never
//! sent twice after it was accepted.

use std::time::Duration;

use aws_sdk_kinesis::Client;
use aws_sdk_kinesis::primitives::Blob;
use aws_sdk_kinesis::types::PutRecordsRequestEntry;
use bytes::Bytes;
use rand::Rng;
use weir_core::{SequenceNumber, ShardId};

use crate::error::{ErrorClass, classify, describe};

/// Most records per PutRecords call.
pub const MAX_BATCH_RECORDS: usize = 500;
/// Most bytes per PutRecords call.
pub const MAX_BATCH_BYTES: usize = 5 * 1024 * 1024;
/// Most bytes per record (data plus partition key).
pub const MAX_RECORD_BYTES: usize = 1024 * 1024;

/// A record to put.
#[derive(Debug, Clone)]
pub struct Outgoing {
    /// Caller's reference (e.g. a line number), echoed in results.
    pub id: u64,
    /// Partition key (1–256 characters).
    pub partition_key: String,
    /// Payload.
    pub data: Bytes,
}

/// Where a record landed.
#[derive(Debug, Clone)]
pub struct Accepted {
    /// The caller's reference.
    pub id: u64,
    /// The shard.
    pub shard: ShardId,
    /// Its sequence number.
    pub sequence: SequenceNumber,
}

/// What a put did.
#[derive(Debug, Default)]
pub struct PutReport {
    /// Accepted records.
    pub accepted: Vec<Accepted>,
    /// Records given up on, with the reason (permanent errors).
    pub failed: Vec<(u64, String)>,
    /// PutRecords calls made.
    pub calls: u64,
    /// Records sent again after a per-record failure or a throttled call.
    pub retried_records: u64,
}

/// Why a record cannot be sent at all.
pub fn check(record: &Outgoing) -> Result<(), String> {
    let pk = record.partition_key.chars().count();
    if pk == 0 || pk > 256 {
        return Err(format!("partition key must have 1 to 256 characters, has {pk}"));
    }
    let size = record.data.len() + record.partition_key.len();
    if size > MAX_RECORD_BYTES {
        return Err(format!(
            "record is {size} bytes with its partition key; Kinesis accepts at most {MAX_RECORD_BYTES}"
        ));
    }
    Ok(())
}

/// Splits records into PutRecords batches (≤ 500 records, ≤ 5 MiB), keeping order.
pub fn batches(records: Vec<Outgoing>) -> Vec<Vec<Outgoing>> {
    let mut out = Vec::new();
    let mut current = Vec::new();
    let mut bytes = 0;
    for r in records {
        let size = r.data.len() + r.partition_key.len();
        if !current.is_empty() && (current.len() == MAX_BATCH_RECORDS || bytes + size > MAX_BATCH_BYTES) {
            out.push(std::mem::take(&mut current));
            bytes = 0;
        }
        bytes += size;
        current.push(r);
    }
    if !current.is_empty() {
        out.push(current);
    }
    out
}

/// Puts records into one stream.
#[derive(Debug, Clone)]
pub struct Producer {
    client: Client,
    stream: String,
    /// Give up on a record after this long of retrying.
    pub deadline: Duration,
}

impl Producer {
    /// A producer for `stream`.
    pub fn new(client: Client, stream: &str) -> Self {
        Self { client, stream: stream.to_owned(), deadline: Duration::from_secs(300) }
    }

    /// Puts every record (already [`check`]ed), batch by batch.
    pub async fn put_all(&self, records: Vec<Outgoing>) -> PutReport {
        let mut report = PutReport::default();
        for batch in batches(records) {
            self.put_batch(batch, &mut report).await;
        }
        report
    }

    async fn put_batch(&self, mut pending: Vec<Outgoing>, report: &mut PutReport) {
        let start = tokio::time::Instant::now();
        let mut attempt = 0u32;
        while !pending.is_empty() {
            if attempt > 0 {
                let cap = Duration::from_millis(100u64 << attempt.min(6)).min(Duration::from_secs(5));
                let delay = Duration::from_millis(
                    rand::rng().random_range(cap.as_millis() as u64 / 2..=cap.as_millis() as u64),
                );
                if start.elapsed() + delay > self.deadline {
                    for r in pending.drain(..) {
                        report.failed.push((r.id, "gave up after the retry deadline".into()));
                    }
                    return;
                }
                report.retried_records += pending.len() as u64;
                tokio::time::sleep(delay).await;
            }
            attempt += 1;
            let entries: Vec<PutRecordsRequestEntry> = pending
                .iter()
                .filter_map(|r| {
                    PutRecordsRequestEntry::builder()
                        .partition_key(&r.partition_key)
                        .data(Blob::new(r.data.to_vec()))
                        .build()
                        .ok()
                })
                .collect();
            report.calls += 1;
            let out = match self.client.put_records().stream_name(&self.stream).set_records(Some(entries)).send().await
            {
                Ok(out) => out,
                Err(e) => {
                    if classify(&e) == ErrorClass::Permanent {
                        let reason = describe(&e);
                        for r in pending.drain(..) {
                            report.failed.push((r.id, reason.clone()));
                        }
                        return;
                    }
                    continue;
                }
            };
            let mut retry = Vec::new();
            for (r, result) in pending.drain(..).zip(out.records()) {
                match (result.error_code(), result.shard_id(), result.sequence_number()) {
                    (None, Some(shard), Some(seq)) => match SequenceNumber::parse(seq) {
                        Ok(sequence) => {
                            report.accepted.push(Accepted { id: r.id, shard: ShardId::from(shard), sequence })
                        }
                        Err(e) => report.failed.push((r.id, format!("accepted with an invalid sequence number: {e}"))),
                    },
                    // ProvisionedThroughputExceeded or InternalFailure: only these go again.
                    _ => retry.push(r),
                }
            }
            pending = retry;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(id: u64, size: usize) -> Outgoing {
        Outgoing { id, partition_key: "k".into(), data: Bytes::from(vec![b'x'; size]) }
    }

    #[test]
    fn batches_respect_count_and_size_limits() {
        let b = batches((0..1_201).map(|i| rec(i, 10)).collect());
        assert_eq!(b.iter().map(Vec::len).collect::<Vec<_>>(), vec![500, 500, 201]);
        let b = batches((0..12).map(|i| rec(i, 1024 * 1024 - 1)).collect());
        assert!(b.iter().all(|b| b.iter().map(|r| r.data.len() + 1).sum::<usize>() <= MAX_BATCH_BYTES));
        assert_eq!(b.iter().map(Vec::len).sum::<usize>(), 12);
        let ids: Vec<u64> = b.into_iter().flatten().map(|r| r.id).collect();
        assert_eq!(ids, (0..12).collect::<Vec<_>>(), "order kept");
    }

    #[test]
    fn oversize_and_bad_keys_are_refused() {
        assert!(check(&rec(1, MAX_RECORD_BYTES)).is_err());
        assert!(check(&rec(1, MAX_RECORD_BYTES - 1)).is_ok());
        let mut r = rec(1, 1);
        r.partition_key = String::new();
        assert!(check(&r).is_err());
        r.partition_key = "k".repeat(257);
        assert!(check(&r).is_err());
    }
}
