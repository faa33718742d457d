//! The Iceberg destination as a consumer: records buffered per shard, committed to the
//! table by [`TableWriter`] when the buffer interval passes, the buffer is full, or a
//! shard closes with a duty to flush; checkpoints only to the positions a stored
//! commit carries.
//!
//! - **Opening a shard** reads the shard's position in the table: records at or
//!   before it (committed by an earlier owner that crashed before its checkpoint)
//!   are not buffered again.
//! - **Records that do not fit the table** go to the error output before the shard's
//!   checkpoint passes them: one object per shard and commit, under a key made of the
//!   writer's name for its positions (a replay job's own), the shard and the first and
//!   last rejected positions. A zombie that rejects the same
//!   records writes the same key, and the create-only put keeps the first: each
//!   rejected record is in the error output once.
//! - **A lost lease** drops the shard's buffer: its records are the new owner's.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use async_trait::async_trait;
use base64::Engine;
use bytes::Bytes;
use weir_core::ports::{ObjectSink, PutOptions};
use weir_core::{
    Acks, CloseReason, ConsumerError, ExtendedSequenceNumber, RecordBatch, ShardContext, ShardId, Timestamp,
};

use crate::metrics as m;
use crate::writer::{Rejected, ShardRecords, TableWriter};

/// When a buffer is committed (Firehose's `BufferingHints` for Iceberg: 300 s and
/// 128 MiB at most, 60 s / 1 MiB here by default as a smaller commit cadence keeps the
/// table fresh; each commit is one snapshot).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BufferHints {
    /// Commit once the oldest buffered record waited this long.
    pub interval_millis: i64,
    /// Commit once this many bytes of records are buffered.
    pub size_bytes: usize,
}

impl Default for BufferHints {
    fn default() -> Self {
        Self { interval_millis: 60_000, size_bytes: 1 << 20 }
    }
}

/// One shard's records since its last commit.
#[derive(Debug, Default)]
struct Pending {
    /// The table's position for the shard when it opened: records up to it are in.
    committed: Option<ExtendedSequenceNumber>,
    records: Vec<(ExtendedSequenceNumber, Bytes)>,
    arrivals: HashMap<ExtendedSequenceNumber, Timestamp>,
    /// The last position received (buffered or skipped).
    end: Option<ExtendedSequenceNumber>,
}

/// Records of a stream appended to one Iceberg table.
pub struct IcebergConsumer {
    name: String,
    writer: TableWriter,
    errors: Arc<dyn ObjectSink>,
    error_prefix: String,
    hints: BufferHints,
    shards: BTreeMap<ShardId, Pending>,
    bytes: usize,
    oldest: Option<Timestamp>,
}

impl std::fmt::Debug for IcebergConsumer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IcebergConsumer").field("name", &self.name).field("table", self.writer.table()).finish()
    }
}

impl IcebergConsumer {
    /// A consumer named `name` (its checkpoints' and table positions' key) writing
    /// with `writer`, its records that do not fit the table to `errors` under
    /// `error_prefix`.
    pub fn new(
        name: impl Into<String>,
        writer: TableWriter,
        errors: Arc<dyn ObjectSink>,
        error_prefix: impl Into<String>,
        hints: BufferHints,
    ) -> Self {
        Self {
            name: name.into(),
            writer,
            errors,
            error_prefix: error_prefix.into(),
            hints,
            shards: BTreeMap::new(),
            bytes: 0,
            oldest: None,
        }
    }

    /// Commits every shard's buffer; checkpoints what the commit stored.
    async fn flush(&mut self, only: Option<&ShardId>, acks: &dyn Acks) -> Result<(), ConsumerError> {
        let batches: Vec<ShardRecords> = self
            .shards
            .iter()
            .filter(|(id, _)| only.is_none_or(|o| o == *id))
            .filter_map(|(id, p)| {
                Some(ShardRecords { shard: id.clone(), end: p.end.clone()?, records: p.records.clone() })
            })
            .collect();
        if batches.is_empty() {
            return Ok(());
        }
        let labels = self.labels();
        let report = match self.writer.commit(&batches).await {
            Ok(r) => r,
            Err(e) => {
                metrics::counter!(m::COMMIT_FAILURES, &labels).increment(1);
                return Err(ConsumerError::with_source(format!("commit to {}", self.writer.table()), e));
            }
        };
        self.write_rejected(&report.rejected).await?;
        metrics::counter!(m::COMMITS, &labels).increment(u64::from(report.snapshot.is_some()));
        metrics::counter!(m::COMMIT_CONFLICTS, &labels).increment(u64::from(report.conflicts));
        metrics::counter!(m::ROWS, &labels).increment(report.rows);
        metrics::counter!(m::DATA_FILES, &labels).increment(report.data_files as u64);
        metrics::counter!(m::ALREADY_COMMITTED, &labels).increment(report.already_committed);
        metrics::counter!(m::REJECTED, &labels).increment(report.rejected.len() as u64);
        for b in &batches {
            let Some(p) = self.shards.get_mut(&b.shard) else { continue };
            let position = report.positions.get(&b.shard).unwrap_or(&b.end);
            acks.durable(&b.shard, position);
            p.committed = Some(position.clone());
            p.records.clear();
            p.arrivals.clear();
            p.end = None;
        }
        self.bytes = self.shards.values().flat_map(|p| &p.records).map(|(_, d)| d.len()).sum();
        self.oldest = None;
        Ok(())
    }

    /// The labels of every series.
    fn labels(&self) -> [(&'static str, String); 2] {
        [(m::CONSUMER, self.name.clone()), (m::TABLE, self.writer.table().to_string())]
    }

    /// The records that did not fit, one object per shard, before any checkpoint
    /// passes them.
    async fn write_rejected(&self, rejected: &[Rejected]) -> Result<(), ConsumerError> {
        let mut by_shard: BTreeMap<&ShardId, Vec<&Rejected>> = BTreeMap::new();
        for r in rejected {
            by_shard.entry(&r.shard).or_default().push(r);
        }
        for (shard, rs) in by_shard {
            let pending = self.shards.get(shard);
            let mut body = Vec::new();
            for r in &rs {
                let arrival = pending.and_then(|p| p.arrivals.get(&r.position)).map_or(0, |t| t.as_millis());
                let line = serde_json::json!({
                    "attemptsMade": 1,
                    "arrivalTimestamp": arrival,
                    "errorCode": "Iceberg.SchemaMismatch",
                    "errorMessage": r.reason,
                    "rawData": base64::engine::general_purpose::STANDARD.encode(&r.data),
                    "sequenceNumber": r.position.sequence.to_string(),
                    "subSequenceNumber": r.position.sub_sequence,
                    "destinationTable": self.writer.table().to_string(),
                });
                body.extend_from_slice(line.to_string().as_bytes());
                body.push(b'\n');
            }
            let (first, last) = (&rs[0].position, &rs[rs.len() - 1].position);
            let key = format!(
                "{}{}/{}/{}.{}-{}.{}.ndjson",
                self.error_prefix,
                self.writer.consumer(),
                shard.as_str().replace('/', "_"),
                first.sequence,
                first.sub_sequence,
                last.sequence,
                last.sub_sequence
            );
            let options = PutOptions { content_type: Some("application/x-ndjson".into()), ..PutOptions::default() };
            self.errors
                .put_if_absent(&key, Bytes::from(body), &options)
                .await
                .map_err(|e| ConsumerError::with_source(format!("error output {key}"), e))?;
        }
        Ok(())
    }
}

#[async_trait]
impl weir_core::Consumer for IcebergConsumer {
    fn name(&self) -> &str {
        &self.name
    }

    async fn on_shard_open(&mut self, shard: &ShardContext) -> Result<(), ConsumerError> {
        let id = shard.shard_id.clone();
        let committed = self
            .writer
            .positions(std::slice::from_ref(&id))
            .await
            .map_err(|e| ConsumerError::with_source(format!("positions in {}", self.writer.table()), e))?
            .remove(&id);
        self.shards.insert(id, Pending { committed, ..Pending::default() });
        Ok(())
    }

    async fn on_batch(&mut self, batch: &RecordBatch, acks: &dyn Acks) -> Result<(), ConsumerError> {
        let pending = self.shards.entry(batch.shard_id.clone()).or_default();
        for r in &batch.records {
            pending.end = Some(r.position.clone());
            if pending.committed.as_ref().is_some_and(|c| r.position <= *c) {
                continue;
            }
            pending.records.push((r.position.clone(), r.data.clone()));
            pending.arrivals.insert(r.position.clone(), r.approximate_arrival);
            self.bytes += r.data.len();
            self.oldest.get_or_insert(r.approximate_arrival);
        }
        if self.bytes >= self.hints.size_bytes || batch.is_shard_end() {
            self.flush(None, acks).await?;
        }
        Ok(())
    }

    async fn on_tick(&mut self, now: Timestamp, acks: &dyn Acks) -> Result<(), ConsumerError> {
        let age = self.oldest.map_or(0, |t| now.as_millis().saturating_sub(t.as_millis()));
        let labels = self.labels();
        metrics::gauge!(m::DATA_FRESHNESS, &labels).set(age as f64 / 1000.0);
        metrics::gauge!(m::BUFFERED_BYTES, &labels).set(self.bytes as f64);
        let due = self.oldest.is_some() && age >= self.hints.interval_millis;
        if due || self.shards.values().any(|p| p.records.is_empty() && p.end.is_some()) {
            self.flush(None, acks).await?;
        }
        Ok(())
    }

    async fn on_shard_close(
        &mut self,
        shard: &ShardId,
        reason: CloseReason,
        acks: &dyn Acks,
    ) -> Result<(), ConsumerError> {
        if reason.should_flush() {
            self.flush(Some(shard), acks).await?;
        }
        if let Some(p) = self.shards.remove(shard) {
            self.bytes -= p.records.iter().map(|(_, d)| d.len()).sum::<usize>();
        }
        Ok(())
    }
}
