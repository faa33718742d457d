//! The Iceberg destination as a consumer: records routed to their table
//! ([`Tables`]) and buffered per shard, committed table by table by
//! [`crate::TableWriter`] when the buffer interval passes, the buffer is full, or a
//! shard closes with a duty to flush; a shard's checkpoint moves only once every table
//! its records went to has a stored commit of them.
//!
//! - **Records a table already has** (committed by an earlier owner that crashed
//!   before its checkpoint) are dropped by the commit, which reads the shard's
//!   position in the table.
//! - **Records that fit no table** (routing failed, no such table) **or do not fit
//!   their table's schema** go to the error output before the shard's checkpoint
//!   passes them: one object per shard and flush, under a key made of the writer's
//!   name for its positions (a replay job's own), the shard and the first and last
//!   rejected positions, written create-only. A record is never lost from it: one
//!   that a stored commit passed is rejected again by the next owner's commit (the
//!   worker that stored it may have died before its error object). It is there more
//!   than once only if a zombie or a crashed worker rejected it in a flush of other
//!   bounds.
//! - **A shard's position in each table** is where the shard's read ended when the
//!   table's commit was made: every record of the shard up to there that routes to
//!   that table is in it. Routing is a function of the record (a transform must route
//!   a record the same way each time: `crate::transform`), so a new owner reading
//!   from the checkpoint finds, table by table, what is already in.
//! - **A lost lease** drops the shard's buffer: its records are the new owner's.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use async_trait::async_trait;
use base64::Engine;
use bytes::Bytes;
use weir_core::ports::{ObjectSink, PutOptions};
use weir_core::{
    Acks, CloseReason, ConsumerError, ExtendedSequenceNumber, RecordBatch, ShardContext, ShardId, Timestamp,
};

use crate::metrics as m;
use crate::status::Status;
use crate::tables::{SCHEMA_MISMATCH, Tables, Unroutable};
use crate::transform::{RecordTransform, Transformed};
use crate::writer::{Rejected, ShardRecords};

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

impl BufferHints {
    /// The most the buffers of all tables hold together before everything is
    /// committed: 32 tables' worth, at most 256 MiB (each table commits on its own
    /// size and interval until then).
    pub fn total_bytes(&self) -> usize {
        self.size_bytes.saturating_mul(32).min(256 << 20).max(self.size_bytes)
    }
}

/// One shard's records since its last commit.
#[derive(Debug, Default)]
struct Pending {
    /// Each record's table (an index of [`Tables`]), position, data and arrival.
    records: Vec<(usize, ExtendedSequenceNumber, Bytes, Timestamp)>,
    /// Records that fit no table, with the reason.
    unroutable: Vec<(ExtendedSequenceNumber, Bytes, Unroutable)>,
    /// Every record read since the shard's checkpoint (buffered, dropped, unroutable
    /// or committed to some tables), by position: its arrival. What a partial
    /// checkpoint is found in.
    arrivals: BTreeMap<ExtendedSequenceNumber, Timestamp>,
    /// The last position received (buffered, skipped or unroutable).
    end: Option<ExtendedSequenceNumber>,
}

/// Where a record read goes.
enum Intake {
    /// To table `.0`, as `.1`.
    Table(usize, Bytes),
    /// To the error output.
    Unroutable(Unroutable),
    /// Nowhere (the transform dropped it).
    Dropped,
}

/// A line of the error output.
struct ErrorLine<'a> {
    position: &'a ExtendedSequenceNumber,
    data: &'a Bytes,
    code: &'static str,
    reason: &'a str,
    table: Option<String>,
}

/// Records of a stream appended to Iceberg tables.
pub struct IcebergConsumer {
    name: String,
    tables: Tables,
    errors: Arc<dyn ObjectSink>,
    error_prefix: String,
    hints: BufferHints,
    shards: BTreeMap<ShardId, Pending>,
    bytes: usize,
    /// Bytes buffered per table (by index), kept as records come so that a batch's
    /// check of the tables' sizes does not count every buffered record.
    table_bytes: Vec<usize>,
    oldest: Option<Timestamp>,
    /// The time of the last tick: when commits are said to happen.
    now: Timestamp,
    status: Status,
    /// Firehose's Lambda processor, in front of the tables.
    transform: Option<Arc<dyn RecordTransform>>,
}

impl std::fmt::Debug for IcebergConsumer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IcebergConsumer").field("name", &self.name).field("tables", &self.tables).finish()
    }
}

impl IcebergConsumer {
    /// A consumer named `name` (its checkpoints' key) writing `tables`, the records
    /// that fit none to `errors` under `error_prefix`.
    pub fn new(
        name: impl Into<String>,
        tables: Tables,
        errors: Arc<dyn ObjectSink>,
        error_prefix: impl Into<String>,
        hints: BufferHints,
    ) -> Self {
        Self {
            name: name.into(),
            tables,
            errors,
            error_prefix: error_prefix.into(),
            hints,
            shards: BTreeMap::new(),
            bytes: 0,
            table_bytes: Vec::new(),
            oldest: None,
            now: Timestamp::from_millis(0),
            status: Status::default(),
            transform: None,
        }
    }

    /// Records go through `transform` first: its data is written, to the table it
    /// names (else by the consumer's routing); dropped records are passed, failed ones
    /// go to the error output with their original data.
    pub fn with_transform(mut self, transform: Arc<dyn RecordTransform>) -> Self {
        self.transform = Some(transform);
        self
    }

    /// What `/readyz` says of this consumer (shared: it follows the consumer).
    pub fn status(&self) -> Status {
        self.status.clone()
    }

    /// Commits the buffers of every shard (or `only` one) to every table (or the
    /// tables `due`), table by table; writes what fits nowhere to the error output;
    /// then checkpoints each shard: where its read ended (or where the tables say it
    /// stands, if further) when nothing of it is left buffered, else just before its
    /// first record still buffered for a table not committed now.
    async fn flush(
        &mut self,
        only: Option<&ShardId>,
        due: Option<&BTreeSet<usize>>,
        acks: &dyn Acks,
    ) -> Result<(), ConsumerError> {
        let shards: Vec<ShardId> = self
            .shards
            .iter()
            .filter(|(id, p)| only.is_none_or(|o| o == *id) && p.end.is_some())
            .map(|(id, _)| id.clone())
            .collect();
        if shards.is_empty() {
            return Ok(());
        }
        // Per table, each shard's records; a single-table consumer commits every shard
        // (one without records too: the commit reports where the table stands).
        let mut per_table: BTreeMap<usize, Vec<ShardRecords>> = BTreeMap::new();
        let single = self.tables.is_single() && due.is_none_or(|d| d.contains(&0));
        for id in &shards {
            let p = &self.shards[id];
            let Some(end) = p.end.clone() else { continue };
            if single {
                per_table.entry(0).or_default();
            }
            for (table, position, data, _) in &p.records {
                if due.is_some_and(|d| !d.contains(table)) {
                    continue;
                }
                let batches = per_table.entry(*table).or_default();
                match batches.last_mut() {
                    Some(b) if b.shard == *id => b.records.push((position.clone(), data.clone())),
                    _ => batches.push(ShardRecords {
                        shard: id.clone(),
                        end: end.clone(),
                        records: vec![(position.clone(), data.clone())],
                    }),
                }
            }
            if single && p.records.is_empty() {
                per_table.entry(0).or_default().push(ShardRecords { shard: id.clone(), end, records: Vec::new() });
            }
        }
        // Where each shard stands in every table it went to: the least of them.
        let mut stands: BTreeMap<ShardId, ExtendedSequenceNumber> = BTreeMap::new();
        let mut rejected: Vec<(Rejected, String)> = Vec::new();
        let mut vanished = Vec::new();
        for (table, batches) in per_table.iter().filter(|(_, b)| !b.is_empty()) {
            let writer = self.tables.writer(*table);
            let labels = self.labels(*table);
            let report = match writer.commit(batches).await {
                Ok(r) => r,
                Err(e) if !self.tables.is_single() && e.is_no_such_table() => {
                    // A routed table dropped since records were routed to it: they fit
                    // no table now (a configured table that vanishes is an outage).
                    metrics::counter!(m::COMMIT_FAILURES, &labels).increment(1);
                    vanished.push(*table);
                    continue;
                }
                Err(e) => {
                    metrics::counter!(m::COMMIT_FAILURES, &labels).increment(1);
                    self.status.failed(self.now, format!("{}: {e}", writer.table()));
                    return Err(ConsumerError::with_source(format!("commit to {}", writer.table()), e));
                }
            };
            metrics::counter!(m::COMMITS, &labels).increment(u64::from(report.snapshot.is_some()));
            metrics::counter!(m::COMMIT_CONFLICTS, &labels).increment(u64::from(report.conflicts));
            metrics::counter!(m::ROWS, &labels).increment(report.rows);
            metrics::counter!(m::DATA_FILES, &labels).increment(report.data_files as u64);
            metrics::counter!(m::ALREADY_COMMITTED, &labels).increment(report.already_committed);
            metrics::counter!(m::REJECTED, &labels).increment(report.rejected.len() as u64);
            for b in batches {
                let at = report.positions.get(&b.shard).unwrap_or(&b.end);
                let least = stands.entry(b.shard.clone()).or_insert_with(|| at.clone());
                if at < least {
                    *least = at.clone();
                }
            }
            let name = writer.table().to_string();
            rejected.extend(report.rejected.into_iter().map(|r| (r, name.clone())));
        }
        for table in vanished {
            let why = self.tables.forget(table);
            for id in &shards {
                let Some(p) = self.shards.get_mut(id) else { continue };
                let (gone, kept) = std::mem::take(&mut p.records).into_iter().partition(|r| r.0 == table);
                p.records = kept;
                let gone: Vec<_> = gone;
                p.unroutable.extend(gone.into_iter().map(|(_, position, data, _)| (position, data, why.clone())));
            }
        }
        self.write_errors(&shards, &rejected).await?;
        if per_table.values().any(|b| !b.is_empty()) {
            self.status.committed(self.now);
        }
        let committed: BTreeSet<usize> = per_table.keys().copied().collect();
        for id in &shards {
            let Some(p) = self.shards.get_mut(id) else { continue };
            p.records.retain(|(table, ..)| !committed.contains(table));
            p.unroutable.clear();
            match p.records.first() {
                None => {
                    let Some(end) = p.end.take() else { continue };
                    let position = stands.remove(id).filter(|s| *s > end).unwrap_or(end);
                    acks.durable(id, &position);
                    p.arrivals.clear();
                }
                // Records for tables not committed now: the checkpoint stops before the
                // first of them (read again by a new owner; the tables committed now
                // skip theirs by their positions).
                Some((_, first, ..)) => {
                    let first = first.clone();
                    if let Some(before) = p.arrivals.range(..&first).next_back().map(|(at, _)| at.clone()) {
                        acks.durable(id, &before);
                    }
                    p.arrivals = p.arrivals.split_off(&first);
                }
            }
        }
        self.recount();
        Ok(())
    }

    /// The bytes buffered and the oldest buffered record's arrival, counted again.
    fn recount(&mut self) {
        let records = self.shards.values().flat_map(|p| &p.records);
        self.bytes = records.clone().map(|(_, _, d, _)| d.len()).sum();
        self.table_bytes = vec![0; self.tables.writers().len()];
        for (table, _, data, _) in records.clone() {
            self.table_bytes[*table] += data.len();
        }
        let unroutable = self.shards.values().flat_map(|p| p.unroutable.iter().filter_map(|u| p.arrivals.get(&u.0)));
        self.oldest = records.map(|r| r.3).chain(unroutable.copied()).min();
    }

    /// Per table: the oldest buffered record's arrival.
    fn oldest_per_table(&self) -> Vec<Option<Timestamp>> {
        let mut out = vec![None::<Timestamp>; self.tables.writers().len()];
        for (table, _, _, arrival) in self.shards.values().flat_map(|p| &p.records) {
            let oldest = &mut out[*table];
            *oldest = Some(oldest.map_or(*arrival, |o| o.min(*arrival)));
        }
        out
    }

    /// Commits what is due: every table whose buffer holds `buffer_size_mib` or whose
    /// oldest record waited `buffer_interval_seconds` (each table on its own, so a
    /// busy table does not commit the quiet ones on every flush); everything when the
    /// buffers together hold [`BufferHints::total_bytes`] or records that fit no table
    /// waited the interval.
    async fn flush_due(&mut self, now: Option<Timestamp>, acks: &dyn Acks) -> Result<(), ConsumerError> {
        let waited = |t: Option<Timestamp>| match (now, t) {
            (Some(now), Some(t)) => now.as_millis().saturating_sub(t.as_millis()) >= self.hints.interval_millis,
            _ => false,
        };
        let errors_due = now.is_some()
            && self.shards.values().any(|p| p.unroutable.iter().any(|u| waited(p.arrivals.get(&u.0).copied())));
        let nothing_left = now.is_some()
            && self.shards.values().any(|p| p.records.is_empty() && p.unroutable.is_empty() && p.end.is_some());
        if self.bytes >= self.hints.total_bytes() || errors_due || nothing_left && self.bytes == 0 {
            return self.flush(None, None, acks).await;
        }
        let full = self.table_bytes.iter().enumerate().filter(|(_, b)| **b >= self.hints.size_bytes).map(|(i, _)| i);
        let mut due: BTreeSet<usize> = full.collect();
        if now.is_some() {
            let waiting = self.oldest_per_table().into_iter().enumerate().filter(|(_, oldest)| waited(*oldest));
            due.extend(waiting.map(|(i, _)| i));
        }
        if !due.is_empty() || nothing_left {
            self.flush(None, Some(&due), acks).await?;
        }
        Ok(())
    }

    /// The labels of table `i`'s series.
    fn labels(&self, i: usize) -> [(&'static str, String); 2] {
        [(m::CONSUMER, self.name.clone()), (m::TABLE, self.tables.writer(i).table().to_string())]
    }

    /// The records of `shards` that fit no table and the `rejected` ones (each with its
    /// table), one object per shard, before any checkpoint passes them.
    async fn write_errors(&self, shards: &[ShardId], rejected: &[(Rejected, String)]) -> Result<(), ConsumerError> {
        let mut by_shard: BTreeMap<&ShardId, Vec<ErrorLine<'_>>> = BTreeMap::new();
        for id in shards {
            for (position, data, why) in &self.shards[id].unroutable {
                by_shard.entry(id).or_default().push(ErrorLine {
                    position,
                    data,
                    code: why.code,
                    reason: &why.reason,
                    table: None,
                });
            }
        }
        for (r, table) in rejected {
            by_shard.entry(&r.shard).or_default().push(ErrorLine {
                position: &r.position,
                data: &r.data,
                code: SCHEMA_MISMATCH,
                reason: &r.reason,
                table: Some(table.clone()),
            });
        }
        for (shard, mut lines) in by_shard {
            lines.sort_by(|a, b| a.position.cmp(b.position));
            let arrivals = self.shards.get(shard).map(|p| &p.arrivals);
            let mut body = Vec::new();
            for l in &lines {
                let arrival = arrivals.and_then(|a| a.get(l.position)).map_or(0, |t| t.as_millis());
                let mut line = serde_json::json!({
                    "attemptsMade": 1,
                    "arrivalTimestamp": arrival,
                    "errorCode": l.code,
                    "errorMessage": l.reason,
                    "rawData": base64::engine::general_purpose::STANDARD.encode(l.data),
                    "sequenceNumber": l.position.sequence.to_string(),
                    "subSequenceNumber": l.position.sub_sequence,
                });
                if let Some(t) = &l.table {
                    line["destinationTable"] = serde_json::Value::String(t.clone());
                }
                body.extend_from_slice(line.to_string().as_bytes());
                body.push(b'\n');
            }
            let (first, last) = (lines[0].position, lines[lines.len() - 1].position);
            let key = format!(
                "{}{}/{}/{}.{}-{}.{}.ndjson",
                self.error_prefix,
                self.tables.positions_name(),
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
        // Records the tables already have are buffered again and dropped by the
        // commit, which reads each table's position for the shard: the ones among them
        // that do not fit are rejected again, for the worker that committed them may
        // have died before it wrote them to the error output.
        if self.shards.insert(shard.shard_id.clone(), Pending::default()).is_some() {
            // Reopened (after a failed batch) without a close: its records are read again.
            self.recount();
        }
        Ok(())
    }

    async fn on_batch(&mut self, batch: &RecordBatch, acks: &dyn Acks) -> Result<(), ConsumerError> {
        let transformed = match &self.transform {
            Some(t) => {
                let out = t.transform(&batch.shard_id, &batch.records).await;
                if out.len() != batch.records.len() {
                    return Err(ConsumerError::msg(format!(
                        "the transform gave {} answers for {} records",
                        out.len(),
                        batch.records.len()
                    )));
                }
                out
            }
            None => batch.records.iter().map(|r| Transformed::Ok { data: r.data.clone(), route: None }).collect(),
        };
        // Every record's table first: a catalog that cannot be reached fails the batch
        // before any of it is buffered (it is read again).
        let mut refused = BTreeMap::new();
        let mut intake = Vec::with_capacity(batch.records.len());
        for t in transformed {
            intake.push(match t {
                Transformed::Ok { data, route } => {
                    let routed = self
                        .tables
                        .route(&data, route.as_ref(), &mut refused)
                        .await
                        .map_err(|e| ConsumerError::with_source("the catalog, routing a record", e))?;
                    match routed {
                        Ok(table) => Intake::Table(table, data),
                        Err(why) => Intake::Unroutable(why),
                    }
                }
                Transformed::Dropped => Intake::Dropped,
                Transformed::Failed { code, reason } => Intake::Unroutable(Unroutable { code, reason }),
            });
        }
        let pending = self.shards.entry(batch.shard_id.clone()).or_default();
        for (r, intake) in batch.records.iter().zip(intake) {
            pending.end = Some(r.position.clone());
            pending.arrivals.insert(r.position.clone(), r.approximate_arrival);
            self.oldest.get_or_insert(r.approximate_arrival);
            match intake {
                Intake::Table(table, data) => {
                    self.bytes += data.len();
                    if self.table_bytes.len() <= table {
                        self.table_bytes.resize(table + 1, 0);
                    }
                    self.table_bytes[table] += data.len();
                    pending.records.push((table, r.position.clone(), data, r.approximate_arrival));
                }
                // The error output has the record as it was read.
                Intake::Unroutable(why) => pending.unroutable.push((r.position.clone(), r.data.clone(), why)),
                Intake::Dropped => {}
            }
        }
        if batch.is_shard_end() {
            self.flush(Some(&batch.shard_id), None, acks).await?;
        }
        self.flush_due(None, acks).await
    }

    async fn on_tick(&mut self, now: Timestamp, acks: &dyn Acks) -> Result<(), ConsumerError> {
        self.now = now;
        self.status.holding(self.tables.writers().len(), self.bytes, self.oldest);
        for (i, oldest) in self.oldest_per_table().into_iter().enumerate() {
            let bytes = self.table_bytes.get(i).copied().unwrap_or(0);
            let labels = self.labels(i);
            let age = oldest.map_or(0, |t| now.as_millis().saturating_sub(t.as_millis()));
            metrics::gauge!(m::DATA_FRESHNESS, &labels).set(age as f64 / 1000.0);
            metrics::gauge!(m::BUFFERED_BYTES, &labels).set(bytes as f64);
        }
        self.flush_due(Some(now), acks).await
    }

    async fn on_shard_close(
        &mut self,
        shard: &ShardId,
        reason: CloseReason,
        acks: &dyn Acks,
    ) -> Result<(), ConsumerError> {
        if reason.should_flush() {
            self.flush(Some(shard), None, acks).await?;
        }
        if self.shards.remove(shard).is_some() {
            self.recount();
        }
        Ok(())
    }
}
