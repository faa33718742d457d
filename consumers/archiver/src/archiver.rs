//! The archiver consumer: stream records → lines and routes (the fast path, or the
//! reference pipeline) → buffers → objects. A record is acknowledged once every object
//! holding a part of it is durable. See the crate documentation for the guarantees.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use std::panic::AssertUnwindSafe;

use futures::{FutureExt, StreamExt};
use tokio_util::task::AbortOnDropHandle;
use weir_core::ports::ObjectSink;
use weir_core::{
    Acks, Clock, CloseReason, Consumer, ConsumerError, Intent, IntentWrite, PartPosition, Record, RecordBatch,
    ShardContext, ShardId, Timestamp,
};

use crate::delivery::body::claim_body;
use crate::delivery::buffers::{Appended, BufferError, Buffers, Limits, Origin};
use crate::delivery::claim::{Claims, KeyState, RESOLVE_CONCURRENCY};
use crate::delivery::deliver::{BacklogRetry, Delivery, DeliveryConfig, DeliveryError, DeliveryMode};
use crate::delivery::expand;
use crate::delivery::ledger::Ledger;
use crate::delivery::manifest;
use crate::delivery::naming::Naming;
use crate::delivery::resolve::{Resolution, Resolved, SkipList, resolve_shard};
use crate::delivery::sealed::Sealed;
use crate::fast::FastPath;
use crate::metrics as m;
use crate::options::{ArchiverOptions, BuildError};
use crate::parquet::ParquetFormat;
use crate::pipeline::error_records::{ConversionFailure, ErrorOutputType, ErrorRecord};
use crate::pipeline::route::Route;
use crate::pipeline::split::SplitError;
use crate::pipeline::transform::{Failure, Outcome, Part};
use crate::pipeline::{Pipeline, Routed, split_failure};

/// Per-shard state.
#[derive(Default)]
struct ShardState {
    /// Exactly-once: an earlier owner's intents not resolved yet.
    unresolved: Option<Vec<Intent>>,
    /// Their resolution, started when the shard opened so that the shards a worker
    /// takes over resolve in parallel; awaited before the shard's first batch, aborted
    /// if the shard closes first.
    resolving: Option<AbortOnDropHandle<Resolution>>,
    /// Records already durable in an earlier owner's objects.
    skip: SkipList,
    /// A batch that ends the shard was buffered: no record of it comes any more.
    read_to_end: bool,
    /// Parts of the shard handled so far (the next part's ordinal, see [`Origin`]).
    parts: u64,
    /// Since when batches of the shard have been tried again for an uncertain part.
    uncertain_since: Option<Timestamp>,
    /// Parts sent to an error output for a reason that can differ between owners (a
    /// failed Lambda, the partition cap), with their ordinals, not yet acknowledged:
    /// the data objects whose range holds them name them as exceptions, so that an
    /// owner for which they go to a data partition does not take them as archived.
    elsewhere: Vec<(u64, PartPosition)>,
}

/// One line to buffer, and where it comes from.
struct Line<'a> {
    /// Its route's key ([`Route::encode`]).
    key: &'a [u8],
    /// The bytes to write.
    bytes: &'a [u8],
    /// The part as it arrived (error records keep it).
    raw: &'a [u8],
    /// The stream record it belongs to.
    record: &'a Record,
    /// Its place among the record's parts, and its number among every part of the
    /// shard handled (see [`Origin`]).
    part: u32,
    ordinal: u64,
    /// It failed a transform that may take it another time (a Lambda): its route may
    /// differ for another owner.
    fickle: bool,
}

/// How long a part whose transform fails now, but that an earlier owner may have
/// archived, is tried again before it goes to the error output anyway (where it may
/// then be twice: counted in `weir_archiver_uncertain_given_up_total`). Only intents
/// without listed parts leave that doubt: those of data objects written before the
/// Lambda was configured, since an archiver with a Lambda lists every object's parts
/// ([`Limits::exact_data`]).
const UNCERTAIN_PATIENCE: Duration = Duration::from_secs(300);

/// What an earlier owner's intents say of a part read again.
enum Seen {
    /// It is in an object already.
    Durable,
    /// It is in no object.
    New,
    /// It failed its transform now, and the earlier owner may have put it in a data
    /// object (one of its written data objects' ranges holds it, and it did not send it
    /// to an output that was never written): tried again later, never sent to the error
    /// output while it may already be archived.
    Uncertain,
}

/// The archiver consumer.
pub struct Archiver {
    pub(crate) name: String,
    pub(crate) pipeline: Pipeline,
    /// The fast path of this configuration, if it has one.
    fast: Option<FastPath>,
    buffers: Buffers,
    ledger: Ledger,
    pub(crate) delivery: Delivery,
    shards: HashMap<ShardId, ShardState>,
    /// Some shard has records to skip (saves a lookup per record otherwise).
    any_skips: bool,
    pub(crate) clock: Arc<dyn Clock>,
    max_backlog_bytes: u64,
    /// When the buffer gauges were last set.
    gauges_at: Option<Timestamp>,
    /// `IntervalInSeconds = 0`: every batch's buffers are sealed when it is processed.
    zero_interval: bool,
    /// The Parquet table, with a format conversion: data lines are converted to its
    /// rows when routed, and buffered as those.
    parquet: Option<Arc<ParquetFormat>>,
    /// Scratch for a line's converted rows.
    converted: Vec<u8>,
    /// `dataCatalogTable` of format conversion error records.
    catalog_table: Option<serde_json::Value>,
    /// Why this archiver stopped: its buffers lost records from memory (a seal that
    /// failed half way, a batch that could not be taken back). Nothing it holds is
    /// acknowledged, so the stream still has every record: it refuses everything, and
    /// a restarted worker (or the shards' next owners) archive them.
    poisoned: Option<String>,
}

impl Archiver {
    /// An archiver writing to `sink`; `clock` gives times for buffers and error records.
    pub fn new(options: ArchiverOptions, sink: Arc<dyn ObjectSink>, clock: Arc<dyn Clock>) -> Result<Self, BuildError> {
        let s = &options.settings;
        let parquet = match &s.conversion {
            None => None,
            Some(c) => {
                let columns = c.columns.clone().ok_or(BuildError::NoColumns)?;
                Some(Arc::new(ParquetFormat::new(columns, c.deserializer.clone(), c.parquet.clone())))
            }
        };
        let limits = Limits {
            size_bytes: s.buffer_bytes,
            interval: s.buffer_interval,
            memory: options.max_buffer_memory,
            max_active: options.max_active_partitions.map(|n| n.max(1)),
            overflow: options.overflow,
            compression: s.compression,
            error_compression: s.error_compression,
            parquet: parquet.clone(),
            level: options.compression_level,
            exact_data: options.transformer.can_change_its_mind(),
        };
        let error_extension = if s.error_compression == s.compression {
            s.file_extension.as_str()
        } else {
            s.error_compression.extension()
        };
        let delivery = Delivery::new(
            DeliveryConfig {
                consumer: options.name.clone(),
                mode: options.mode,
                naming: Naming::new(&options.name, 1, &s.file_extension),
                error_naming: Naming::new(&options.name, 1, error_extension),
                prefixes: s.prefixes.clone(),
                time_zone: s.time_zone,
                claims: Claims {
                    data: claim_body(s.compression, parquet.clone()),
                    error: claim_body(s.error_compression, None),
                },
                concurrency: options.put_concurrency,
                inline: options.inline_intents,
            },
            sink,
        );
        let buffers = match &options.spill_directory {
            None => Buffers::new(limits),
            Some(dir) => Buffers::new(limits).with_spill(crate::delivery::spill::Spill::open(dir, &options.name)?),
        };
        Ok(Self {
            name: options.name.clone(),
            fast: FastPath::new(&options.transformer, s),
            pipeline: Pipeline::new(s, options.transformer)?,
            buffers,
            ledger: Ledger::default(),
            delivery,
            shards: HashMap::new(),
            any_skips: false,
            clock,
            max_backlog_bytes: options.max_backlog_bytes,
            gauges_at: None,
            zero_interval: s.buffer_interval.is_zero(),
            catalog_table: s.conversion.as_ref().and_then(|c| {
                let t = &c.table;
                t.table_name.as_ref()?;
                Some(serde_json::json!({
                    "catalogId": t.catalog_id,
                    "databaseName": t.database_name,
                    "tableName": t.table_name,
                    "region": t.region,
                    "versionId": t.version_id.as_deref().unwrap_or("LATEST"),
                }))
            }),
            parquet,
            converted: Vec::new(),
            poisoned: None,
        })
    }

    /// Refuses the call if the archiver stopped (see `poisoned`); stops it if its
    /// buffers broke.
    fn check_health(&mut self) -> Result<(), ConsumerError> {
        if self.poisoned.is_none()
            && let Some(why) = self.buffers.broken()
        {
            self.poison(why.to_owned());
        }
        match &self.poisoned {
            None => Ok(()),
            Some(why) => Err(ConsumerError::msg(format!(
                "archiver {} stopped after an internal error ({why}); restart the worker: nothing it held was acknowledged, so the stream still has those records",
                self.name
            ))),
        }
    }

    fn poison(&mut self, why: String) {
        metrics::counter!(m::INTERNAL_FAILURES).increment(1);
        tracing::error!(consumer = %self.name, why, "the archiver stops: restart the worker");
        self.poisoned = Some(why);
    }

    /// A batch failed half way: its records are taken out of the buffers again (what
    /// earlier batches put there stays, and buffers sealed meanwhile are delivered),
    /// the skip list is as before, and the batch can come again.
    async fn batch_failed(
        &mut self,
        shard: &ShardId,
        (skip_before, elsewhere_before): (Option<SkipList>, usize),
        mut sealed: Vec<Sealed>,
        acks: &dyn Acks,
        why: ConsumerError,
    ) -> Result<(), ConsumerError> {
        if let Err(e) = self.buffers.rollback_batch(&mut sealed) {
            self.poison(format!("a failed batch could not be taken back: {e} (after: {why})"));
            return self.check_health();
        }
        if let Some(state) = self.shards.get_mut(shard) {
            state.elsewhere.truncate(elsewhere_before);
            if let Some(skip) = skip_before {
                state.skip = skip;
            }
        }
        self.any_skips = self.shards.values().any(|s| !s.skip.is_empty());
        if let Err(e) = self.deliver(sealed, acks, BacklogRetry::WhenDue).await {
            tracing::warn!(consumer = %self.name, error = %e, "objects wait for the store");
        }
        Err(why)
    }

    /// Compressed bytes held in open buffers.
    pub fn buffered_bytes(&self) -> usize {
        self.buffers.held_bytes()
    }

    /// Compressed bytes in open buffers (without staged records).
    pub fn compressed_bytes(&self) -> usize {
        self.buffers.compressed_bytes()
    }

    /// A handle on the objects waiting for the store (for health endpoints).
    pub fn backlog(&self) -> crate::delivery::deliver::Backlog {
        self.delivery.backlog()
    }

    /// Objects waiting for the store.
    pub fn backlog_objects(&self) -> usize {
        self.delivery.backlog_objects()
    }

    /// Starts resolving an earlier owner's intents of `shard` in the background.
    fn start_resolving(&self, shard: &ShardId, open: Vec<Intent>) -> AbortOnDropHandle<Resolution> {
        let sink = self.delivery.sink().clone();
        let claims = self.delivery.claims().clone();
        let written = self.delivery.written_keys();
        let manifests = manifest::prefix(self.delivery.consumer(), shard);
        let shard = shard.clone();
        AbortOnDropHandle::new(tokio::spawn(async move {
            resolve_shard(sink, &shard, open, &claims, &written, &manifests).await
        }))
    }

    /// Waits until an earlier owner's intents for `shard` are resolved, if any are
    /// open (resolving them now if an earlier attempt failed).
    /// Drops everything of `shard` this archiver holds (open buffers, waiting objects,
    /// ledger, resolution state): its lease is gone or being let go unflushed, and the
    /// next owner archives its unacknowledged records.
    fn forget_shard(&mut self, shard: &ShardId) -> Result<(), ConsumerError> {
        self.buffers.forget_shard(shard).map_err(|e| ConsumerError::with_source("cannot rebuild buffers", e))?;
        let deflater = self.buffers.deflater();
        self.delivery.forget_shard(shard, deflater).map_err(|e| ConsumerError::with_source("backlog", e))?;
        self.ledger.forget(shard);
        self.shards.remove(shard);
        Ok(())
    }

    async fn ensure_resolved(&mut self, shard: &ShardId, acks: &dyn Acks) -> Result<(), ConsumerError> {
        let Some(state) = self.shards.get_mut(shard) else { return Ok(()) };
        let outcome = match state.resolving.take() {
            Some(running) => running.await.unwrap_or_else(|e| {
                Err(ConsumerError::msg(format!("resolving the open intents of {shard} stopped: {e}")))
            }),
            None => {
                let Some(open) = state.unresolved.clone() else { return Ok(()) };
                let (sink, claims) = (self.delivery.sink().clone(), self.delivery.claims().clone());
                let manifests = manifest::prefix(self.delivery.consumer(), shard);
                resolve_shard(sink, shard, open, &claims, &self.delivery.written_keys(), &manifests).await
            }
        };
        let Resolved { skip, states, intents, leftovers } = outcome?;
        let claimed = states.values().filter(|s| **s == KeyState::Claimed).count();
        metrics::counter!(m::CLAIMS_MADE).increment(claimed as u64);
        if intents > 0 {
            tracing::info!(%shard, intents, objects = states.len(), claimed, skip_ranges = skip.len(), "resolved an earlier owner's open intents");
        }
        self.sweep_leftovers(shard, leftovers, acks).await;
        if let Some(state) = self.shards.get_mut(shard) {
            state.skip = skip;
            state.unresolved = None;
        }
        self.any_skips = self.shards.values().any(|s| !s.skip.is_empty());
        Ok(())
    }

    /// Deletes the leftover manifests resolving listed, once a conditional lease write
    /// (an empty intent write) made after the listing has landed: only then is it known
    /// that this owner still held the lease when it listed, so that no manifest in the
    /// listing was written and named by a later holder. A worker paused while resolving
    /// (a zombie) lists the new holder's manifests; its write fails, and it deletes none.
    async fn sweep_leftovers(&self, shard: &ShardId, leftovers: Vec<String>, acks: &dyn Acks) {
        if leftovers.is_empty() {
            return;
        }
        let Some(log) = acks.intents() else { return };
        let fence = IntentWrite { shard: shard.clone(), add: Vec::new(), replacing: Vec::new() };
        match log.record(vec![fence]).await {
            Ok(()) => expand::delete_manifests(self.delivery.sink().as_ref(), shard, leftovers).await,
            Err(e) => {
                tracing::info!(%shard, manifests = leftovers.len(), error = %e, "leftover intent manifests stay: the lease may have gone before they were listed");
            }
        }
    }

    /// Buffers one line; the generation of the buffer that took it (for the ledger),
    /// `None` when it was skipped as already durable.
    fn buffer(
        &mut self,
        shard: &ShardId,
        line: Line<'_>,
        now: Timestamp,
        sealed: &mut Vec<Sealed>,
    ) -> Result<Option<u64>, ConsumerError> {
        // The route it takes first: a data line that does not fit the Parquet table goes
        // to the error output (for every owner alike); only then is it looked up. One
        // that fits is buffered as its converted rows.
        if let Some(parquet) = &self.parquet
            && Route::error_type(line.key).is_none()
        {
            let mut rows = std::mem::take(&mut self.converted);
            rows.clear();
            let r = match parquet.convert(line.bytes, &mut rows) {
                Err(reason) => self.format_conversion_failed(shard, line, &reason.to_string(), now, sealed),
                Ok(_) => self.buffer_line(shard, Line { bytes: &rows, ..line }, now, sealed),
            };
            self.converted = rows;
            return r;
        }
        self.buffer_line(shard, line, now, sealed)
    }

    /// Buffers one line as it is (see [`Archiver::buffer`]).
    fn buffer_line(
        &mut self,
        shard: &ShardId,
        line: Line<'_>,
        now: Timestamp,
        sealed: &mut Vec<Sealed>,
    ) -> Result<Option<u64>, ConsumerError> {
        let Line { key, bytes, raw, record, part, ordinal, fickle } = line;
        if self.any_skips
            && let Some(state) = self.shards.get_mut(shard)
            && !state.skip.is_empty()
        {
            match seen(&mut state.skip, key, &PartPosition { position: record.position.clone(), part }, fickle) {
                Seen::Durable => {
                    metrics::counter!(m::DUPLICATES_SKIPPED).increment(1);
                    return Ok(None);
                }
                Seen::New => {}
                Seen::Uncertain => {
                    let since = *state.uncertain_since.get_or_insert(now);
                    if now.saturating_since(since) < UNCERTAIN_PATIENCE {
                        metrics::counter!(m::UNCERTAIN_RETRIES).increment(1);
                        return Err(ConsumerError::msg(format!(
                            "a part of record {} of {shard} failed its transform now, and the shard's earlier owner may have archived it: it is tried again, not sent to the error output",
                            record.position
                        )));
                    }
                    metrics::counter!(m::UNCERTAIN_GIVEN_UP).increment(1);
                    tracing::warn!(%shard, position = %record.position, part, "a part's transform kept failing after a takeover; it goes to the error output, and may also be in a data object of the shard's earlier owner");
                }
            }
        }
        match Route::error_type(key) {
            Some(t) => {
                metrics::counter!(m::ERRORS, "type" => t.as_str(), m::ARCHIVER => self.name.clone()).increment(1)
            }
            // `AppendDelimiterToRecord` off and no newline: the record runs into the next.
            None if bytes.last() != Some(&b'\n') && self.parquet.is_none() => {
                metrics::counter!(m::RECORDS_WITHOUT_DELIMITER).increment(1)
            }
            None => {}
        }
        let arrival = record.approximate_arrival;
        let origin = Origin { shard, position: &record.position, part, ordinal };
        let mut elsewhere = fickle;
        let appended = match self.buffers.append_key(key, bytes, origin, arrival, now) {
            Ok(a) => a,
            Err(BufferError::TooManyPartitions(n)) => {
                elsewhere = true;
                let code = "DynamicPartitioning.ActivePartitionsLimitExceeded";
                let rec = ErrorRecord::new(raw, arrival, now, code, format!("more than {n} active partitions"));
                let (mut error_key, line) = (Vec::new(), rec.to_line());
                Route::Error(ErrorOutputType::ActivePartitionsExceeded).encode(&mut error_key);
                metrics::counter!(m::ERRORS, "type" => "active-partitions-exceeded", m::ARCHIVER => self.name.clone())
                    .increment(1);
                self.buffers
                    .append_key(&error_key, &line, origin, arrival, now)
                    .map_err(|e| ConsumerError::with_source("cannot buffer an error record", e))?
            }
            Err(e) => return Err(ConsumerError::with_source("cannot buffer a record", e)),
        };
        let Appended { generation, sealed: s } = appended;
        sealed.extend(s);
        if elsewhere && let Some(state) = self.shards.get_mut(shard) {
            state.elsewhere.push((ordinal, PartPosition { position: record.position.clone(), part }));
        }
        Ok(Some(generation))
    }

    /// Buffers the error record of a data line that does not fit the Parquet table:
    /// `rawData` is the line as it would have been converted (after the transform).
    fn format_conversion_failed(
        &mut self,
        shard: &ShardId,
        line: Line<'_>,
        reason: &str,
        now: Timestamp,
        sealed: &mut Vec<Sealed>,
    ) -> Result<Option<u64>, ConsumerError> {
        let arrival = line.record.approximate_arrival;
        let mut rec = ErrorRecord::new(line.bytes, arrival, now, "DataFormatConversion.Failed", reason);
        rec.data_catalog_table = self.catalog_table.clone();
        let position = &line.record.position;
        rec.conversion = Some(ConversionFailure {
            sequence_number: position.sequence.to_string(),
            sub_sequence_number: position.sub_sequence,
        });
        let (mut key, text) = (Vec::new(), rec.to_line());
        Route::Error(ErrorOutputType::FormatConversionFailed).encode(&mut key);
        self.buffer(shard, Line { key: &key, bytes: &text, ..line }, now, sealed)
    }

    /// Buffers what the reference pipeline made of part `part` (`raw`, of `record`),
    /// the shard's part number `ordinal`.
    #[allow(clippy::too_many_arguments)]
    fn buffer_routed(
        &mut self,
        shard: &ShardId,
        routed: Routed,
        raw: &[u8],
        record: &Record,
        (part, ordinal): (u32, u64),
        now: Timestamp,
        sealed: &mut Vec<Sealed>,
    ) -> Result<Option<u64>, ConsumerError> {
        let Routed::Line { line, route } = routed else { return Ok(None) };
        let mut key = Vec::with_capacity(64);
        route.encode(&mut key);
        self.buffer(shard, Line { key: &key, bytes: &line, raw, record, part, ordinal, fickle: false }, now, sealed)
    }

    async fn deliver(
        &mut self,
        mut sealed: Vec<Sealed>,
        acks: &dyn Acks,
        backlog: BacklogRetry,
    ) -> Result<(), DeliveryError> {
        let now = self.clock.now();
        let any_sealed = !sealed.is_empty();
        self.name_exceptions(&mut sealed);
        let (buffers, ledger, delivery) = (&mut self.buffers, &mut self.ledger, &mut self.delivery);
        let r = delivery.deliver(sealed, now, ledger, acks, buffers.deflater(), backlog).await;
        // Parts sent elsewhere and acknowledged are behind every object still to come.
        // (Only shards that have some: a backfill holds thousands of shards, and this
        // runs after every batch.)
        for (shard, state) in self.shards.iter_mut().filter(|(_, s)| !s.elsewhere.is_empty()) {
            if let Some(acked) = self.ledger.acked(shard) {
                state.elsewhere.retain(|(_, p)| p.position > *acked);
            }
        }
        // At most once a second (and after a shard closes): the gauges walk every open
        // buffer, and with many partitions seals come often.
        let stale = self.gauges_at.is_none_or(|at| now.saturating_since(at) >= Duration::from_secs(1));
        if any_sealed && stale {
            self.set_buffer_gauges(now);
        }
        r
    }

    /// Names, in each data object's intents, the parts of its range sent elsewhere (see
    /// `ShardState::elsewhere`).
    fn name_exceptions(&self, sealed: &mut [Sealed]) {
        for s in sealed.iter_mut().filter(|s| s.key.is_data() && s.except.is_empty()) {
            let mut except = Vec::new();
            for (shard, span) in s.spans() {
                let Some(state) = self.shards.get(shard).filter(|st| !st.elsewhere.is_empty()) else { continue };
                let mut runs: Vec<weir_core::PartRun> = Vec::new();
                let mut last_ordinal: Option<u64> = None;
                for (ordinal, part) in &state.elsewhere {
                    if part.position < span.first || part.position > span.last {
                        continue;
                    }
                    match runs.last_mut() {
                        Some(run) if last_ordinal.is_some_and(|o| o + 1 == *ordinal) => run.last = part.clone(),
                        _ => runs.push(weir_core::PartRun { first: part.clone(), last: part.clone() }),
                    }
                    last_ordinal = Some(*ordinal);
                }
                if !runs.is_empty() {
                    except.push((shard.clone(), runs));
                }
            }
            s.except = except;
        }
    }

    /// The gauges of open buffers (at ticks and seals, not per batch: they sum every
    /// buffer), and the data freshness: how long the oldest record not yet durable
    /// (buffered, or sealed and waiting for the store) has been in the stream.
    fn set_buffer_gauges(&mut self, now: Timestamp) {
        self.gauges_at = Some(now);
        metrics::gauge!(m::BUFFERED_BYTES, m::ARCHIVER => self.name.clone()).set(self.buffers.held_bytes() as f64);
        metrics::gauge!(m::ACTIVE_PARTITIONS, m::ARCHIVER => self.name.clone()).set(self.buffers.active() as f64);
        let oldest = self.buffers.oldest_arrival().into_iter().chain(self.delivery.oldest_arrival()).min();
        let age_ms = oldest.map_or(0, |t| (now.as_millis() - t.as_millis()).max(0));
        metrics::gauge!(m::DATA_FRESHNESS, m::ARCHIVER => self.name.clone()).set(age_ms as f64 / 1000.0);
    }

    /// Routes and buffers the parts of one batch, in record order; returns (record
    /// index, generation) of every line buffered, for the ledger.
    async fn route_batch(
        &mut self,
        batch: &RecordBatch,
        now: Timestamp,
        sealed: &mut Vec<Sealed>,
    ) -> Result<Vec<(usize, u64)>, ConsumerError> {
        let shard = &batch.shard_id;
        // Parts in record order, with their record's index; a record that cannot be
        // split is one entry with its reason.
        let mut parts: Vec<(usize, Result<Part<'_>, SplitError>)> = Vec::with_capacity(batch.records.len());
        for (i, record) in batch.records.iter().enumerate() {
            match self.pipeline.split(record) {
                Ok(pieces) => parts.extend(pieces.into_iter().map(|p| (i, Ok(p)))),
                Err(reason) => parts.push((i, Err(reason))),
            }
        }
        // Without a fast path the transform runs once for the batch (a Lambda takes
        // many records per invocation); with one, the transform runs in place for the
        // parts the fast path is not sure of.
        let mut outcomes = match self.fast {
            Some(_) => None,
            None => {
                let whole: Vec<Part<'_>> = parts
                    .iter()
                    .filter_map(|(_, p)| p.as_ref().ok())
                    .map(|p| Part { record: p.record, piece: p.piece.clone() })
                    .collect();
                Some(self.pipeline.transform(shard, &whole).await.into_iter())
            }
        };
        let mut placed = Vec::with_capacity(batch.records.len());
        let (mut line, mut key) = (Vec::with_capacity(1024), Vec::with_capacity(128));
        let mut since_yield = 0;
        // The record of several parts being buffered: its parts of one route go into one
        // object (see `Buffers::start_record`).
        let mut several: Option<usize> = None;
        // The part's place in its record, and the shard's parts handled before this batch.
        let mut place = 0u32;
        let first_ordinal = self.shards.get(shard).map_or(0, |s| s.parts);
        for (n, (i, part)) in parts.iter().enumerate() {
            place = if n > 0 && parts[n - 1].0 == *i { place + 1 } else { 0 };
            let at = (place, first_ordinal + n as u64);
            if several != Some(*i) {
                if several.take().is_some() {
                    sealed.extend(
                        self.buffers
                            .finish_record()
                            .map_err(|e| ConsumerError::with_source("cannot seal buffers", e))?,
                    );
                }
                if parts.get(n + 1).is_some_and(|(next, _)| next == i) {
                    self.buffers.start_record();
                    several = Some(*i);
                }
            }
            let record = &batch.records[*i];
            since_yield += record.data.len();
            if since_yield >= weir_core::YIELD_EVERY_BYTES {
                since_yield = 0;
                tokio::task::yield_now().await;
            }
            let part = match part {
                Ok(part) => part,
                Err(reason) => {
                    let routed = split_failure(record, now, reason);
                    if let Some(g) = self.buffer_routed(shard, routed, &record.data, record, at, now, sealed)? {
                        placed.push((*i, g));
                    }
                    continue;
                }
            };
            let raw = part.data();
            if let Some(fast) = &self.fast {
                line.clear();
                if fast.route(raw, record.approximate_arrival, &mut line, &mut key) {
                    let line = Line { key: &key, bytes: &line, raw, record, part: at.0, ordinal: at.1, fickle: false };
                    if let Some(g) = self.buffer(shard, line, now, sealed)? {
                        placed.push((*i, g));
                    }
                    continue;
                }
            }
            let outcome = match &mut outcomes {
                Some(outcomes) => outcomes.next(),
                None => self.pipeline.transform(shard, std::slice::from_ref(part)).await.pop(),
            };
            let outcome = outcome.unwrap_or_else(|| {
                Outcome::Failed(Failure::new("Transform.MissingOutcome", "transform returned too few outcomes"))
            });
            let fickle = matches!(outcome, Outcome::Failed(_)) && self.pipeline.transform_can_change_its_mind();
            let routed = self.pipeline.route(outcome, raw, record.approximate_arrival, now);
            let g = match routed {
                Routed::Line { line, route } if fickle => {
                    let mut key = Vec::with_capacity(64);
                    route.encode(&mut key);
                    let (part, ordinal) = at;
                    self.buffer(
                        shard,
                        Line { key: &key, bytes: &line, raw, record, part, ordinal, fickle },
                        now,
                        sealed,
                    )?
                }
                routed => self.buffer_routed(shard, routed, raw, record, at, now, sealed)?,
            };
            if let Some(g) = g {
                placed.push((*i, g));
            }
        }
        if several.is_some() {
            sealed.extend(
                self.buffers.finish_record().map_err(|e| ConsumerError::with_source("cannot seal buffers", e))?,
            );
        }
        if let Some(state) = self.shards.get_mut(shard) {
            state.parts = first_ordinal + parts.len() as u64;
        }
        Ok(placed)
    }
}

#[async_trait]
impl Consumer for Archiver {
    fn name(&self) -> &str {
        &self.name
    }

    async fn on_shard_open(&mut self, shard: &ShardContext) -> Result<(), ConsumerError> {
        let id = &shard.shard_id;
        if self.shards.contains_key(id) || self.ledger.has_pending(id) || !self.buffers.holding(id).is_empty() {
            // The runtime closes a shard before it opens it again; should a close ever
            // go missing, what is held of the last tenure goes as for a lost lease: kept,
            // its records would be buffered twice and its ledger would acknowledge this
            // tenure's records before they are durable.
            metrics::counter!(m::INTERNAL_FAILURES).increment(1);
            tracing::error!(consumer = %self.name, shard = %shard.shard_id, "a shard opened again without being closed; dropping what was held of it (read again from the checkpoint)");
            self.forget_shard(&shard.shard_id)?;
        }
        let mut state = ShardState::default();
        if self.delivery.mode() == DeliveryMode::ExactlyOnce {
            self.delivery.shard_opened(&shard.shard_id, &shard.intents);
            // Even with no open intent: leftover manifests are swept before this owner
            // writes any of its own.
            state.unresolved = Some(shard.intents.clone());
            state.resolving = Some(self.start_resolving(&shard.shard_id, shard.intents.clone()));
        }
        self.shards.insert(shard.shard_id.clone(), state);
        Ok(())
    }

    async fn on_batch(&mut self, batch: &RecordBatch, acks: &dyn Acks) -> Result<(), ConsumerError> {
        let shard = &batch.shard_id;
        if self.delivery.backlog_bytes() > self.max_backlog_bytes {
            return Err(ConsumerError::msg(format!(
                "{} bytes wait for the object store; refusing records until they are written (the stream keeps them)",
                self.delivery.backlog_bytes()
            )));
        }
        if let Some(reason) = self.buffers.spill_failure() {
            return Err(ConsumerError::msg(format!(
                "spill_directory cannot be written ({reason}); refusing records until it can (the stream keeps them)"
            )));
        }
        self.check_health()?;
        self.shards.entry(shard.clone()).or_default().read_to_end |= batch.is_shard_end();
        self.ensure_resolved(shard, acks).await?;
        let now = self.clock.now();
        let mut sealed = Vec::new();
        // All of the batch is buffered, or none of it (see `Buffers::begin_batch`).
        let skip_before = self.shards.get(shard).filter(|s| !s.skip.is_empty()).map(|s| s.skip.clone());
        let elsewhere_before = self.shards.get(shard).map_or(0, |s| s.elsewhere.len());
        self.buffers.begin_batch();
        let routed = AssertUnwindSafe(self.route_batch(batch, now, &mut sealed)).catch_unwind().await;
        let placed = match routed {
            Ok(Ok(placed)) => placed,
            Ok(Err(e)) => return self.batch_failed(shard, (skip_before, elsewhere_before), sealed, acks, e).await,
            Err(panic) => {
                let why =
                    ConsumerError::msg(format!("the archiver panicked buffering a batch: {}", panic_text(&panic)));
                return self.batch_failed(shard, (skip_before, elsewhere_before), sealed, acks, why).await;
            }
        };
        self.buffers.commit_batch();
        if let Some(state) = self.shards.get_mut(shard) {
            state.uncertain_since = None;
        }
        if self.zero_interval {
            // Zero buffering: no buffer outlives the batch that filled it (one object per
            // partition the batch touched).
            sealed.extend(self.buffers.due(now).map_err(|e| ConsumerError::with_source("cannot seal buffers", e))?);
        }
        // Before delivery, which settles generations. (A batch that fails above leaves
        // the ledger as it was: its records are then not acknowledged.)
        self.ledger.batch(shard, batch.records.iter().map(|r| &r.position), &placed);
        // Delivery failures leave objects in the backlog; the records stay
        // unacknowledged and the batch itself was taken in full.
        if let Err(e) = self.deliver(sealed, acks, BacklogRetry::WhenDue).await {
            tracing::warn!(consumer = %self.name, error = %e, "objects wait for the store");
        }
        Ok(())
    }

    async fn on_tick(&mut self, now: Timestamp, acks: &dyn Acks) -> Result<(), ConsumerError> {
        self.check_health()?;
        let due = self.buffers.due(now).map_err(|e| ConsumerError::with_source("cannot seal buffers", e))?;
        if due.is_empty() && !self.delivery.retry_due(now) {
            self.set_buffer_gauges(now);
            return Ok(());
        }
        self.deliver(due, acks, BacklogRetry::WhenDue)
            .await
            .map_err(|e| ConsumerError::with_source("archive delivery", e))
    }

    async fn on_shard_close(
        &mut self,
        shard: &ShardId,
        reason: CloseReason,
        acks: &dyn Acks,
    ) -> Result<(), ConsumerError> {
        if !reason.should_flush() {
            // Lease lost: the next owner archives this shard's unacknowledged records.
            return self.forget_shard(shard);
        }
        self.check_health()?;
        // When every other shard open here has been read to its end too (a replay's
        // last shards, closed together), every buffer goes now, in one round, rather
        // than a round for each shard's close.
        let keys = if reason == CloseReason::ShardEnded
            && self.shards.iter().all(|(id, state)| id == shard || state.read_to_end)
        {
            self.buffers.keys()
        } else {
            self.buffers.holding(shard)
        };
        // In chunks: with many partitions, sealing every buffer at once would hold all
        // their objects (and their delivery state) in memory together.
        let mut delivered = Ok(());
        for keys in keys.chunks(CLOSE_CHUNK) {
            let sealed =
                self.buffers.seal_keys(keys).map_err(|e| ConsumerError::with_source("cannot seal buffers", e))?;
            delivered = self.deliver(sealed, acks, BacklogRetry::Now).await;
            if delivered.is_err() {
                break;
            }
        }
        self.set_buffer_gauges(self.clock.now());
        if self.ledger.has_pending(shard) {
            let err = match delivered {
                Err(e) => ConsumerError::with_source(format!("records of {shard} are not durable yet"), e),
                Ok(()) => ConsumerError::msg(format!("records of {shard} are not durable yet")),
            };
            // A handoff or shutdown goes on without us: the lease is checkpointed at what
            // was acknowledged and let go, and its next owner reads the rest again. What
            // is left of the shard here must go as for a lost lease: kept, it would be
            // written later (twice, if the shard comes back to this worker and is read
            // again) and its stale ledger would acknowledge the next tenure's records
            // before they are durable. (A shard end is retried by the runtime instead.)
            if reason != CloseReason::ShardEnded {
                self.forget_shard(shard)?;
            }
            return Err(err);
        }
        if let Some(pos) = self.ledger.advance(shard) {
            acks.durable(shard, &pos);
        }
        self.ledger.forget(shard);
        self.shards.remove(shard);
        Ok(())
    }

    async fn on_intents_passed(&mut self, shard: &ShardId, intents: &[Intent]) -> Result<(), ConsumerError> {
        let doomed = self.delivery.intents_passed(shard, intents);
        let delivery = &self.delivery;
        futures::stream::iter(doomed)
            .for_each_concurrent(RESOLVE_CONCURRENCY, |doomed| async move {
                delivery.delete_manifest(doomed).await;
            })
            .await;
        Ok(())
    }
}

/// Buffers sealed and delivered together when a shard closes.
const CLOSE_CHUNK: usize = 2048;

/// What the earlier owner's intents (`skip`) say of `part`, bound for route `key`.
fn seen(skip: &mut SkipList, key: &[u8], part: &PartPosition, fickle: bool) -> Seen {
    if skip.exactly(part) {
        return Seen::Durable;
    }
    match Route::error_type(key) {
        // A data object of this partition whose range holds it holds it, unless its
        // writer named the part an exception (sent elsewhere: a partition cap, a failed
        // transform). Claimed error objects say nothing: intents of several owners stay
        // open until a checkpoint passes them, and a part one owner sent to an error
        // output that never came may be in a later owner's data object.
        None => match Route::decode(key) {
            Some(route) if skip.covers(&route.scope(), part) => Seen::Durable,
            _ => Seen::New,
        },
        Some(t) => {
            // An intent of an earlier weir (no parts listed) names the records of its
            // range routed to its output.
            if skip.covers(&Route::Error(t).scope(), part) {
                return Seen::Durable;
            }
            // A failed transform can succeed for another owner (a Lambda failing at
            // times): the part may be in any partition's object of the range.
            if fickle && skip.any_range_holds(part) {
                return Seen::Uncertain;
            }
            Seen::New
        }
    }
}

/// What a caught panic said.
fn panic_text(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::transform::Transformer;
    use bytes::Bytes;
    use weir_core::{ExtendedSequenceNumber, SequenceNumber};
    use weir_firehose::{from_json, validate};
    use weir_testkit::{CrashSwitch, ManualClock, MemoryObjectSink, SimAcks, SimLeases};

    const T0: i64 = 1_764_400_000_000;

    /// Records of 2,000 tenants, one partition each: `n` to `n + count`.
    fn batch(shard: &ShardId, n: u64, count: u64) -> RecordBatch {
        let records = (n..n + count)
            .map(|i| Record {
                partition_key: format!("pk{i}"),
                position: ExtendedSequenceNumber::plain(SequenceNumber::from_u128(i as u128 + 1)),
                approximate_arrival: Timestamp::from_millis(T0),
                data: Bytes::from(format!(
                    r#"{{"tenantId":"t{}","toolName":"x","sessionId":"r{i}","ts":{T0}}}"#,
                    i % 2000
                )),
            })
            .collect();
        RecordBatch { shard_id: shard.clone(), records, millis_behind_latest: Some(0), child_shards: None }
    }

    /// Records `n..n + count` of ten tenants (objects fill quickly with a small size).
    fn few_tenants(shard: &ShardId, n: u64, count: u64) -> RecordBatch {
        let mut b = batch(shard, n, count);
        for (r, i) in b.records.iter_mut().zip(n..) {
            r.data =
                Bytes::from(format!(r#"{{"tenantId":"t{}","toolName":"x","sessionId":"r{i}","ts":{T0}}}"#, i % 10));
        }
        b
    }

    /// Session ids in the objects of `sink`, with how often each is there.
    fn archived(sink: &MemoryObjectSink) -> std::collections::BTreeMap<String, usize> {
        let mut seen = std::collections::BTreeMap::new();
        for (key, body) in sink.snapshot() {
            if key.starts_with("_weir/") {
                continue;
            }
            let mut text = String::new();
            std::io::Read::read_to_string(&mut flate2::read::MultiGzDecoder::new(&body[..]), &mut text).unwrap();
            for line in text.lines() {
                let v: serde_json::Value = serde_json::from_str(line).unwrap();
                *seen.entry(v["session_id"].as_str().unwrap().to_owned()).or_insert(0) += 1;
            }
        }
        seen
    }

    /// A shard's end seals the buffers holding its records; when every other shard open
    /// here has been read to its end too, every buffer, so that the shards of a replay,
    /// closed together, are written in one round.
    #[tokio::test(start_paused = true)]
    async fn the_last_shard_end_seals_every_buffer() {
        for other_ended in [false, true] {
            let text = include_str!("../../../crates/weir-firehose/tests/fixtures/mcp-destination.json");
            let mut o = ArchiverOptions::new("a", validate(&from_json(text).unwrap()).unwrap());
            o.transformer = Transformer::McpNormalize;
            let sink = Arc::new(MemoryObjectSink::new());
            let mut a = Archiver::new(o, sink.clone(), Arc::new(ManualClock::new(Timestamp::from_millis(T0)))).unwrap();
            let leases = SimLeases::new();
            let acks = SimAcks::new(leases.clone(), 1, CrashSwitch::after(None));
            let (first, second) = (ShardId::new("a"), ShardId::new("b"));
            a.on_shard_open(&leases.take(&first, 1)).await.unwrap();
            a.on_shard_open(&leases.take(&second, 1)).await.unwrap();
            let ended = |mut b: RecordBatch, end: bool| {
                b.child_shards = end.then(Vec::new);
                b
            };
            // Ten tenants each, apart.
            a.on_batch(&ended(batch(&first, 0, 10), true), &acks).await.unwrap();
            a.on_batch(&ended(batch(&second, 10, 10), other_ended), &acks).await.unwrap();
            a.on_shard_close(&first, CloseReason::ShardEnded, &acks).await.unwrap();
            let objects = sink.snapshot().keys().filter(|k| !k.starts_with("_weir/")).count();
            assert_eq!(objects, if other_ended { 20 } else { 10 }, "other shard read to its end: {other_ended}");
        }
    }

    /// A batch that fails half way (an error, or a panic, while it is buffered, after
    /// buffers were sealed for size during it) is taken back whole: given again, each
    /// of its records is archived once, every earlier record too, and the checkpoint
    /// reaches the end (no sealed buffer of earlier records is dropped).
    #[tokio::test(start_paused = true)]
    async fn a_batch_that_fails_half_way_is_taken_back_whole() {
        for panic in [false, true] {
            let text = include_str!("../../../crates/weir-firehose/tests/fixtures/mcp-destination.json");
            let mut settings = validate(&from_json(text).unwrap()).unwrap();
            settings.append_delimiter = false;
            settings.buffer_bytes = 3_000;
            let mut o = ArchiverOptions::new("a", settings);
            o.transformer = Transformer::McpNormalize;
            let sink = Arc::new(MemoryObjectSink::new());
            let mut a = Archiver::new(o, sink.clone(), Arc::new(ManualClock::new(Timestamp::from_millis(T0)))).unwrap();
            let leases = SimLeases::new();
            let acks = SimAcks::new(leases.clone(), 1, CrashSwitch::after(None));
            let shard = ShardId::new("s");
            a.on_shard_open(&leases.take(&shard, 1)).await.unwrap();
            a.on_batch(&few_tenants(&shard, 0, 100), &acks).await.unwrap();
            let objects_before = sink.snapshot().len();
            a.buffers.inject = Some((150, panic));
            let failed = a.on_batch(&few_tenants(&shard, 100, 200), &acks).await;
            assert!(failed.is_err(), "the injected fault fails the batch");
            assert!(sink.snapshot().len() > objects_before, "buffers sealed during the batch were delivered");
            a.on_batch(&few_tenants(&shard, 100, 200), &acks).await.unwrap();
            a.on_batch(&few_tenants(&shard, 300, 50), &acks).await.unwrap();
            a.on_shard_close(&shard, CloseReason::Shutdown, &acks).await.unwrap();
            let seen = archived(&sink);
            assert_eq!(seen.len(), 350, "every record (panic: {panic})");
            assert!(
                seen.values().all(|c| *c == 1),
                "once (panic: {panic}): {:?}",
                seen.iter().filter(|(_, c)| **c > 1).collect::<Vec<_>>()
            );
            let last = ExtendedSequenceNumber::plain(SequenceNumber::from_u128(350));
            assert_eq!(leases.checkpoint(&shard), Some(last), "the checkpoint reaches the end");
        }
    }

    /// A spill directory that cannot be written: the batch in which a spill fails is
    /// taken whole (its buffers sealed early), later batches are refused naming the
    /// directory while it still fails, and once it works every record is archived once.
    #[tokio::test]
    async fn a_spill_directory_that_fails_refuses_batches_until_it_works() {
        let dir = tempfile::tempdir().unwrap();
        let text = include_str!("../../../crates/weir-firehose/tests/fixtures/mcp-destination.json");
        let mut settings = validate(&from_json(text).unwrap()).unwrap();
        settings.append_delimiter = false;
        let mut o = ArchiverOptions::new("a", settings);
        o.transformer = Transformer::McpNormalize;
        o.max_buffer_memory = 1 << 20;
        o.spill_directory = Some(dir.path().to_path_buf());
        let sink = Arc::new(MemoryObjectSink::new());
        let mut a = Archiver::new(o, sink.clone(), Arc::new(ManualClock::new(Timestamp::from_millis(T0)))).unwrap();
        let leases = SimLeases::new();
        let acks = SimAcks::new(leases.clone(), 1, CrashSwitch::after(None));
        let shard = ShardId::new("s");
        a.on_shard_open(&leases.take(&shard, 1)).await.unwrap();
        a.buffers.spill_mut().unwrap().fail_writes(true);
        // 2,000 partitions of about 1 KiB each: past the 1 MiB budget, spills fail.
        let mut n = 0;
        while a.buffers.spill_failure.is_none() {
            a.on_batch(&batch(&shard, n, 500), &acks).await.unwrap();
            n += 500;
            assert!(n < 40_000, "the budget was never reached");
        }
        let refused = a.on_batch(&batch(&shard, n, 500), &acks).await.unwrap_err().to_string();
        assert!(refused.contains("spill_directory cannot be written") && refused.contains("injected"), "{refused}");
        a.buffers.spill_mut().unwrap().fail_writes(false);
        a.on_batch(&batch(&shard, n, 500), &acks).await.unwrap();
        a.on_shard_close(&shard, CloseReason::Shutdown, &acks).await.unwrap();
        let mut seen = std::collections::BTreeMap::new();
        for (key, body) in sink.snapshot() {
            if key.starts_with("_weir/") {
                continue;
            }
            let mut text = String::new();
            std::io::Read::read_to_string(&mut flate2::read::MultiGzDecoder::new(&body[..]), &mut text).unwrap();
            for line in text.lines() {
                let v: serde_json::Value = serde_json::from_str(line).unwrap();
                *seen.entry(v["session_id"].as_str().unwrap().to_owned()).or_insert(0) += 1;
            }
        }
        assert_eq!(seen.len() as u64, n + 500, "every record taken is archived");
        assert!(seen.values().all(|c| *c == 1), "once");
    }
}
