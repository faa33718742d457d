//! The archiver consumer: stream records → transform → partition → buffers → objects.
//!
//! Per record: split into parts (`RecordDeAggregation`), transform (Lambda contract),
//! partition keys (jq `MetadataExtractionQuery` and/or the transform's keys, each
//! value checked so it cannot leave its place in the key), delimiter, then the buffer
//! of its route (a data partition or an error output type). Sealed buffers are
//! delivered by [`crate::delivery`]; a record is acknowledged once every object
//! holding a part of it is durable. See the crate documentation for the guarantees.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use futures::StreamExt;
use tokio_util::task::AbortOnDropHandle;
use weir_core::ports::ObjectSink;
use weir_core::{
    Acks, Clock, CloseReason, Consumer, ConsumerError, Intent, RecordBatch, ShardContext, ShardId, Timestamp,
};

use crate::buffers::{Appended, BufferError, Buffers, Limits, Overflow, Route, Sealed, encode_data};
use crate::delivery::{BacklogRetry, Delivery, DeliveryError, DeliveryMode};
use crate::error_records::{ErrorOutputType, ErrorRecord};
use crate::fields::FieldIndex;
use crate::firehose_config::ArchiverSettings;
use crate::ledger::Ledger;
use crate::manifest;
use crate::metrics as m;
use crate::naming::Naming;
use crate::partition::{KeyError, KeyQuery, QueryError};
use crate::prefix::check_partition_value;
use crate::resolve::{KeyState, SkipList, resolve};
use crate::route_cache::RouteCache;
use crate::subrecords::split;
use crate::transform::Outcome;
use crate::transformer::{Part, Transformer};

/// Everything the archiver is configured with beyond Firehose's own settings.
#[derive(Clone)]
pub struct ArchiverOptions {
    /// Consumer name (keys its checkpoints and intents); also the object-name prefix
    /// in place of Firehose's delivery stream name.
    pub name: String,
    /// Firehose-compatible settings.
    pub settings: ArchiverSettings,
    /// Exactly-once (default) or Firehose's at-least-once.
    pub mode: DeliveryMode,
    /// Bytes the open buffers may hold together (see [`crate::buffers`]): past it
    /// stages are compressed early, then the largest buffers sealed.
    pub max_buffer_memory: usize,
    /// Most data partitions open at once (`None`, the default: no count limit; Firehose
    /// has 500).
    pub max_active_partitions: Option<usize>,
    /// What happens past `max_active_partitions`.
    pub overflow: Overflow,
    /// Refuse new batches while this many compressed bytes wait for the store (the
    /// stream keeps the records; the runtime offers them again later).
    pub max_backlog_bytes: u64,
    /// GZIP level.
    pub compression_level: u32,
    /// Object puts in flight at once.
    pub put_concurrency: usize,
    /// The transform stage.
    pub transformer: Transformer,
    /// Exactly-once: when a round's intents go inline into the leases rather than into
    /// a manifest object (the defaults keep a lease item far below DynamoDB's 400 KB;
    /// tests lower them to exercise manifests).
    pub inline_intents: manifest::InlineLimits,
    /// Where buffers pushed out of memory spill their compressed bytes instead of
    /// being sealed early (`None`: they are sealed). See [`crate::spill`].
    pub spill_directory: Option<std::path::PathBuf>,
}

impl ArchiverOptions {
    /// Options with weir's defaults for `settings`.
    pub fn new(name: &str, settings: ArchiverSettings) -> Self {
        Self {
            name: name.to_owned(),
            settings,
            mode: DeliveryMode::ExactlyOnce,
            max_buffer_memory: DEFAULT_BUFFER_MEMORY,
            max_active_partitions: None,
            overflow: Overflow::FlushOldest,
            max_backlog_bytes: 256 << 20,
            compression_level: 6,
            put_concurrency: 8,
            transformer: Transformer::None,
            inline_intents: manifest::InlineLimits::default(),
            spill_directory: None,
        }
    }
}

/// Default of [`ArchiverOptions::max_buffer_memory`]: 256 MiB.
pub const DEFAULT_BUFFER_MEMORY: usize = 256 << 20;

/// Why the archiver could not be built.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// The metadata extraction query does not compile.
    #[error(transparent)]
    Query(#[from] QueryError),
    /// The spill directory cannot be used.
    #[error("spill_directory: {0}")]
    Spill(#[from] crate::spill::SpillError),
}

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
}

/// A shard's resolved intents: what to skip, what each key turned out to be, and how
/// many intents (manifests expanded) there were.
type Resolution = Result<(SkipList, BTreeMap<String, KeyState>, usize), ConsumerError>;

/// The archiver consumer.
pub struct Archiver {
    name: String,
    settings: ArchiverSettings,
    query: Option<KeyQuery>,
    prefix_keys: Vec<String>,
    /// The query's keys are exactly the prefix's (and read plain fields): routes are
    /// made from the fields' raw texts ([`KeyQuery::flat_texts`]), through `route_cache`.
    flat_route: bool,
    /// Route keys of partition-key texts seen before (flat routes only).
    route_cache: std::cell::RefCell<RouteCache>,
    transformer: Transformer,
    buffers: Buffers,
    ledger: Ledger,
    delivery: Delivery,
    shards: HashMap<ShardId, ShardState>,
    /// Some shard has records to skip (saves a lookup per record otherwise).
    any_skips: bool,
    clock: Arc<dyn Clock>,
    max_backlog_bytes: u64,
    /// When the buffer gauges were last set.
    gauges_at: Option<Timestamp>,
}

impl Archiver {
    /// An archiver writing to `sink`; `clock` gives times for buffers and error records.
    pub fn new(options: ArchiverOptions, sink: Arc<dyn ObjectSink>, clock: Arc<dyn Clock>) -> Result<Self, BuildError> {
        let s = &options.settings;
        let query = s.metadata_query.as_deref().map(KeyQuery::compile).transpose()?;
        let prefix_keys: Vec<String> = s.prefixes.data.partition_keys().into_iter().map(str::to_owned).collect();
        let flat_route = query.as_ref().and_then(KeyQuery::flat_names).is_some_and(|names| {
            let wanted: std::collections::BTreeSet<&String> = prefix_keys.iter().collect();
            names.len() == wanted.len() && names.iter().all(|n| wanted.contains(n))
        });
        let limits = Limits {
            size_bytes: s.buffer_bytes,
            interval: s.buffer_interval,
            memory: options.max_buffer_memory,
            max_active: options.max_active_partitions.map(|n| n.max(1)),
            overflow: options.overflow,
            compression: s.compression,
            level: options.compression_level,
        };
        let naming = Naming::new(&options.name, 1, &s.file_extension, s.time_zone);
        let delivery = Delivery::new(
            &options.name,
            sink,
            options.mode,
            naming,
            s.prefixes.clone(),
            s.time_zone,
            s.compression,
            options.put_concurrency,
            options.inline_intents,
        );
        Ok(Self {
            name: options.name.clone(),
            settings: options.settings.clone(),
            query,
            prefix_keys,
            flat_route,
            // Room for about as many partitions as the budget holds open (an entry costs
            // about 100 bytes, an open buffer at least OPEN_COST).
            route_cache: std::cell::RefCell::new(RouteCache::new(
                (options.max_buffer_memory / crate::buffers::OPEN_COST).clamp(4, 1 << 18),
            )),
            transformer: options.transformer,
            buffers: match &options.spill_directory {
                None => Buffers::new(limits),
                Some(dir) => Buffers::new(limits).with_spill(crate::spill::Spill::open(dir, &options.name)?),
            },
            ledger: Ledger::default(),
            delivery,
            shards: HashMap::new(),
            any_skips: false,
            clock,
            max_backlog_bytes: options.max_backlog_bytes,
            gauges_at: None,
        })
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
    pub fn backlog(&self) -> crate::delivery::Backlog {
        self.delivery.backlog()
    }

    /// Objects waiting for the store.
    pub fn backlog_objects(&self) -> usize {
        self.delivery.backlog_objects()
    }

    /// Starts resolving an earlier owner's intents of `shard` in the background.
    fn start_resolving(&self, shard: &ShardId, open: Vec<Intent>) -> AbortOnDropHandle<Resolution> {
        let sink = self.delivery.sink().clone();
        let claim = self.delivery.claim().clone();
        let written = self.delivery.written_keys();
        let shard = shard.clone();
        AbortOnDropHandle::new(tokio::spawn(async move { resolve_shard(sink, &shard, open, &claim, &written).await }))
    }

    /// Waits until an earlier owner's intents for `shard` are resolved, if any are
    /// open (resolving them now if an earlier attempt failed).
    async fn ensure_resolved(&mut self, shard: &ShardId) -> Result<(), ConsumerError> {
        let Some(state) = self.shards.get_mut(shard) else { return Ok(()) };
        let outcome = match state.resolving.take() {
            Some(running) => running.await.unwrap_or_else(|e| {
                Err(ConsumerError::msg(format!("resolving the open intents of {shard} stopped: {e}")))
            }),
            None => {
                let Some(open) = state.unresolved.clone() else { return Ok(()) };
                let (sink, claim) = (self.delivery.sink().clone(), self.delivery.claim().clone());
                resolve_shard(sink, shard, open, &claim, &self.delivery.written_keys()).await
            }
        };
        let (skip, states, intents) = outcome?;
        let claimed = states.values().filter(|s| **s == KeyState::Claimed).count();
        metrics::counter!(m::CLAIMS_MADE).increment(claimed as u64);
        tracing::info!(%shard, intents, objects = states.len(), claimed, skip_ranges = skip.len(), "resolved an earlier owner's open intents");
        if let Some(state) = self.shards.get_mut(shard) {
            state.skip = skip;
            state.unresolved = None;
        }
        self.any_skips = self.shards.values().any(|s| !s.skip.is_empty());
        Ok(())
    }

    /// The line for one transformed part, its route key written into `key`
    /// ([`Route::encode`]); `None` when the transform dropped it.
    fn route(
        &self,
        outcome: Outcome,
        raw: &Bytes,
        arrival: Timestamp,
        now: Timestamp,
        key: &mut Vec<u8>,
    ) -> Option<Bytes> {
        match outcome {
            Outcome::Dropped => {
                metrics::counter!(m::DROPPED).increment(1);
                None
            }
            Outcome::Failed(f) => {
                let mut rec = ErrorRecord::new(raw, arrival, now, f.code, f.message);
                rec.lambda_arn = self.transformer.lambda_arn();
                Some(error_line(ErrorOutputType::ProcessingFailed, rec, key))
            }
            Outcome::Ok { data, partition_keys, fields } => {
                if let Err(reason) = self.partition(&data, partition_keys, fields.as_ref(), key) {
                    let rec =
                        ErrorRecord::new(raw, arrival, now, "DynamicPartitioning.MetadataExtractionFailed", reason);
                    return Some(error_line(ErrorOutputType::PartitioningFailed, rec, key));
                }
                let line = if self.settings.append_delimiter {
                    let mut v = Vec::with_capacity(data.len() + 1);
                    v.extend_from_slice(&data);
                    v.push(b'\n');
                    Bytes::from(v)
                } else {
                    if data.last() != Some(&b'\n') {
                        metrics::counter!(m::RECORDS_WITHOUT_DELIMITER).increment(1);
                    }
                    data
                };
                Some(line)
            }
        }
    }

    /// Writes the key of a record's data route into `key`, or says why it has none.
    fn partition(
        &self,
        data: &[u8],
        from_transform: BTreeMap<String, String>,
        fields: Option<&FieldIndex>,
        key: &mut Vec<u8>,
    ) -> Result<(), String> {
        if self.settings.dynamic_partitioning_retry.is_none() {
            encode_data(key, std::iter::empty());
            return Ok(());
        }
        if let Some(q) = &self.query
            && self.flat_route
            && from_transform.is_empty()
            && let (Some(names), Some(texts)) = (q.flat_names(), q.flat_texts(data, fields))
        {
            // The common case: plain fields that are exactly the prefix's keys, read
            // without building a map (the names come sorted, as a route's keys), and
            // mostly seen before.
            let mut cache = self.route_cache.borrow_mut();
            if cache.get(&texts, key) {
                return Ok(());
            }
            if let Some(values) = KeyQuery::flat_values_of(&texts) {
                for (k, v) in names.iter().zip(&values) {
                    check_partition_value(v).map_err(|reason| format!("partition key {k:?} value {v:?} {reason}"))?;
                }
                encode_data(key, names.iter().map(String::as_str).zip(values.iter().map(|v| v.as_ref())));
                cache.put(key);
                return Ok(());
            }
        }
        let mut keys = from_transform;
        if let Some(q) = &self.query {
            let found = q.keys(data).map_err(|e| match e {
                KeyError::NotJson => "record is not valid JSON; the metadata extraction query cannot run".to_owned(),
                other => format!("metadata extraction query failed: {other}"),
            })?;
            keys.extend(found);
        }
        let mut used = BTreeMap::new();
        for k in &self.prefix_keys {
            let v = keys.remove(k).ok_or_else(|| format!("partition key {k:?} is missing"))?;
            check_partition_value(&v).map_err(|reason| format!("partition key {k:?} value {v:?} {reason}"))?;
            used.insert(k.clone(), v);
        }
        Route::Data(used).encode(key);
        Ok(())
    }

    /// Buffers one line under the route `key` ([`Route::encode`]); the generation of
    /// the buffer that took it (for the ledger), `None` when it was skipped as already
    /// durable.
    #[allow(clippy::too_many_arguments)]
    fn buffer(
        &mut self,
        key: &[u8],
        line: &Bytes,
        raw: &Bytes,
        shard: &ShardId,
        record: &weir_core::Record,
        now: Timestamp,
        sealed: &mut Vec<Sealed>,
    ) -> Result<Option<u64>, ConsumerError> {
        if self.any_skips
            && let Some(state) = self.shards.get_mut(shard)
            && !state.skip.is_empty()
            && let Some(route) = Route::decode(key)
            && state.skip.covers(&route.scope(), &record.position)
        {
            metrics::counter!(m::DUPLICATES_SKIPPED).increment(1);
            return Ok(None);
        }
        if let Some(t) = Route::error_type(key) {
            metrics::counter!(m::ERRORS, "type" => t.as_str()).increment(1);
        }
        let appended =
            match self.buffers.append_key(key, line, shard, &record.position, record.approximate_arrival, now) {
                Ok(a) => a,
                Err(BufferError::TooManyPartitions(n)) => {
                    let rec = ErrorRecord::new(
                        raw,
                        record.approximate_arrival,
                        now,
                        "DynamicPartitioning.ActivePartitionsLimitExceeded",
                        format!("more than {n} active partitions"),
                    );
                    let mut error_key = Vec::new();
                    let line = error_line(ErrorOutputType::ActivePartitionsExceeded, rec, &mut error_key);
                    metrics::counter!(m::ERRORS, "type" => "active-partitions-exceeded").increment(1);
                    self.buffers
                        .append_key(&error_key, &line, shard, &record.position, record.approximate_arrival, now)
                        .map_err(|e| ConsumerError::with_source("cannot buffer an error record", e))?
                }
                Err(e) => return Err(ConsumerError::with_source("cannot buffer a record", e)),
            };
        let Appended { generation, sealed: s } = appended;
        sealed.extend(s);
        Ok(Some(generation))
    }

    async fn deliver(
        &mut self,
        sealed: Vec<Sealed>,
        acks: &dyn Acks,
        backlog: BacklogRetry,
    ) -> Result<(), DeliveryError> {
        let now = self.clock.now();
        let any_sealed = !sealed.is_empty();
        // A close or a drain (delivered now) always updates the gauges.
        let closing = matches!(backlog, BacklogRetry::Now);
        let (buffers, ledger, delivery) = (&mut self.buffers, &mut self.ledger, &mut self.delivery);
        let r = delivery.deliver(sealed, now, ledger, acks, buffers.deflater(), backlog).await;
        // Otherwise at most once a second: the gauges walk every open buffer, and with
        // many partitions seals come often.
        let stale = self.gauges_at.is_none_or(|at| now.saturating_since(at) >= Duration::from_secs(1));
        if any_sealed && (closing || stale) {
            self.set_buffer_gauges(now);
        }
        r
    }

    /// The gauges of open buffers (at ticks and seals, not per batch: they sum every
    /// buffer), and the data freshness: how long the oldest record not yet durable
    /// (buffered, or sealed and waiting for the store) has been in the stream.
    fn set_buffer_gauges(&mut self, now: Timestamp) {
        self.gauges_at = Some(now);
        metrics::gauge!(m::BUFFERED_BYTES).set(self.buffers.held_bytes() as f64);
        metrics::gauge!(m::ACTIVE_PARTITIONS).set(self.buffers.active() as f64);
        let oldest = self.buffers.oldest_arrival().into_iter().chain(self.delivery.oldest_arrival()).min();
        let age_ms = oldest.map_or(0, |t| (now.as_millis() - t.as_millis()).max(0));
        metrics::gauge!(m::DATA_FRESHNESS).set(age_ms as f64 / 1000.0);
    }
}

/// Resolves the open intents of `shard` (manifests expanded); `written` are keys this
/// process wrote itself.
async fn resolve_shard(
    sink: Arc<dyn ObjectSink>,
    shard: &ShardId,
    open: Vec<Intent>,
    claim: &Bytes,
    written: &std::collections::HashSet<Arc<str>>,
) -> Resolution {
    let intents = expand_manifests(sink.clone(), shard, open).await?;
    let own = |key: &str| written.contains(key).then_some(KeyState::Written);
    let (skip, states) = resolve(sink.as_ref(), &intents, claim, own)
        .await
        .map_err(|e| ConsumerError::with_source(format!("cannot resolve open intents of {shard}"), e))?;
    Ok((skip, states, intents.len()))
}

/// Replaces the intents naming manifests with the intents the manifests list. A
/// manifest that is missing or unreadable counts as "nothing written" (its records
/// are archived again) and is reported; a store error fails (retried).
async fn expand_manifests(
    sink: Arc<dyn ObjectSink>,
    shard: &ShardId,
    open: Vec<Intent>,
) -> Result<Vec<Intent>, ConsumerError> {
    let (manifests, mut intents): (Vec<Intent>, Vec<Intent>) = open.into_iter().partition(manifest::is_manifest);
    let sink = sink.as_ref();
    let bodies: Vec<(String, Result<Option<Bytes>, weir_core::ports::SinkError>)> = futures::stream::iter(manifests)
        .map(|m| async move {
            let body = sink.get(&m.target).await;
            (m.target, body)
        })
        .buffer_unordered(crate::resolve::RESOLVE_CONCURRENCY)
        .collect()
        .await;
    for (key, body) in bodies {
        let listed = match body {
            Ok(Some(body)) => manifest::read(&key, shard, &body).map_err(|e| e.to_string()),
            Ok(None) => Err(format!("intent manifest {key} is missing")),
            Err(e) => {
                return Err(ConsumerError::with_source(format!("cannot read intent manifest {key}"), e));
            }
        };
        match listed {
            Ok(listed) => intents.extend(listed),
            Err(reason) => {
                metrics::counter!(m::MANIFESTS_UNREADABLE).increment(1);
                tracing::error!(%shard, %reason, "the records of an open intent manifest will be archived again (they may be duplicated)");
            }
        }
    }
    Ok(intents)
}

/// Where one part of a record would go (`weir prefix eval`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Preview {
    /// Into a data object under this key.
    Data {
        /// A key the object could get (names are random; the prefix is what matters).
        key: String,
        /// The line as written.
        line: String,
    },
    /// Into an error object.
    Error {
        /// A key the error object could get.
        key: String,
        /// The error record.
        record: serde_json::Value,
    },
    /// Dropped by the transform.
    Dropped,
}

impl Archiver {
    /// Where `record` would go, part by part, without writing anything.
    pub async fn preview(&self, shard: &ShardId, record: &weir_core::Record) -> Vec<Preview> {
        let now = self.clock.now();
        let mut key = Vec::new();
        let parts: Vec<Part<'_>> = match &self.settings.deaggregation {
            None => vec![Part::whole(record)],
            Some(how) => match split(&record.data, how) {
                Ok(pieces) => pieces.into_iter().map(|piece| Part { record, piece: Some(piece) }).collect(),
                Err(reason) => {
                    let line = split_failure(record, now, reason, &mut key);
                    return vec![self.preview_of(&key, line, record.approximate_arrival)];
                }
            },
        };
        let outcomes = self.transformer.run(shard, &parts).await;
        parts
            .iter()
            .zip(outcomes)
            .map(|(p, o)| match self.route(o, p.data(), record.approximate_arrival, now, &mut key) {
                None => Preview::Dropped,
                Some(line) => self.preview_of(&key, line, record.approximate_arrival),
            })
            .collect()
    }

    fn preview_of(&self, key: &[u8], line: Bytes, arrival: Timestamp) -> Preview {
        match Route::decode(key) {
            Some(route @ Route::Data(_)) => Preview::Data {
                key: self.delivery.key_at(&route, arrival),
                line: String::from_utf8_lossy(&line).into_owned(),
            },
            Some(route) => Preview::Error {
                key: self.delivery.key_at(&route, arrival),
                record: serde_json::from_slice(&line).unwrap_or_default(),
            },
            None => Preview::Dropped,
        }
    }
}

/// The error line of a record `RecordDeAggregation` could not split; its route key
/// goes into `key`.
fn split_failure(record: &weir_core::Record, now: Timestamp, reason: String, key: &mut Vec<u8>) -> Bytes {
    let rec = ErrorRecord::new(&record.data, record.approximate_arrival, now, "RecordDeAggregation.Failed", reason);
    error_line(ErrorOutputType::ProcessingFailed, rec, key)
}

/// An error record's line; the error route's key goes into `key`.
fn error_line(kind: ErrorOutputType, rec: ErrorRecord, key: &mut Vec<u8>) -> Bytes {
    Route::Error(kind).encode(key);
    Bytes::from(rec.to_line())
}

#[async_trait]
impl Consumer for Archiver {
    fn name(&self) -> &str {
        &self.name
    }

    async fn on_shard_open(&mut self, shard: &ShardContext) -> Result<(), ConsumerError> {
        let mut state = ShardState::default();
        if self.delivery.mode() == DeliveryMode::ExactlyOnce {
            self.delivery.shard_opened(&shard.shard_id, &shard.intents);
            if !shard.intents.is_empty() {
                state.unresolved = Some(shard.intents.clone());
                state.resolving = Some(self.start_resolving(&shard.shard_id, shard.intents.clone()));
            }
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
        self.shards.entry(shard.clone()).or_default();
        self.ensure_resolved(shard).await?;
        let now = self.clock.now();
        // Split records into parts; records that cannot be split fail whole.
        let mut parts = Vec::with_capacity(batch.records.len());
        let mut owners = Vec::with_capacity(batch.records.len());
        let mut split_failures: Vec<(usize, String)> = Vec::new();
        for (i, record) in batch.records.iter().enumerate() {
            match &self.settings.deaggregation {
                None => {
                    parts.push(Part::whole(record));
                    owners.push(i);
                }
                Some(how) => match split(&record.data, how) {
                    Ok(pieces) => {
                        for piece in pieces {
                            parts.push(Part { record, piece: Some(piece) });
                            owners.push(i);
                        }
                    }
                    Err(reason) => split_failures.push((i, reason)),
                },
            }
        }
        let mut outcomes = self.transformer.run(shard, &parts).await.into_iter();
        let mut sealed = Vec::new();
        let mut key = Vec::with_capacity(128);
        let mut next_part = 0usize;
        let mut failures = split_failures.into_iter().peekable();
        // (record index, generation) of every line buffered, for the ledger.
        let mut placed = Vec::with_capacity(batch.records.len());
        for (i, record) in batch.records.iter().enumerate() {
            if failures.peek().is_some_and(|(j, _)| *j == i) {
                let (_, reason) = failures.next().unwrap_or_default();
                let line = split_failure(record, now, reason, &mut key);
                if let Some(generation) = self.buffer(&key, &line, &record.data, shard, record, now, &mut sealed)? {
                    placed.push((i, generation));
                }
            }
            while next_part < parts.len() && owners[next_part] == i {
                let outcome = outcomes.next().unwrap_or_else(|| {
                    Outcome::Failed(crate::transform::Failure::new(
                        "Transform.MissingOutcome",
                        "transform returned too few outcomes",
                    ))
                });
                let raw = parts[next_part].data();
                if let Some(line) = self.route(outcome, raw, record.approximate_arrival, now, &mut key)
                    && let Some(generation) = self.buffer(&key, &line, raw, shard, record, now, &mut sealed)?
                {
                    placed.push((i, generation));
                }
                next_part += 1;
            }
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
            self.buffers.forget_shard(shard).map_err(|e| ConsumerError::with_source("cannot rebuild buffers", e))?;
            let deflater = self.buffers.deflater();
            self.delivery.forget_shard(shard, deflater).map_err(|e| ConsumerError::with_source("backlog", e))?;
            self.ledger.forget(shard);
            self.shards.remove(shard);
            return Ok(());
        }
        // In chunks: with many partitions, sealing every buffer at once would hold all
        // their objects (and their delivery state) in memory together.
        let mut delivered = Ok(());
        for keys in self.buffers.holding(shard).chunks(CLOSE_CHUNK) {
            let sealed =
                self.buffers.seal_keys(keys).map_err(|e| ConsumerError::with_source("cannot seal buffers", e))?;
            delivered = self.deliver(sealed, acks, BacklogRetry::Now).await;
            if delivered.is_err() {
                break;
            }
        }
        if self.ledger.has_pending(shard) {
            return Err(match delivered {
                Err(e) => ConsumerError::with_source(format!("records of {shard} are not durable yet"), e),
                Ok(()) => ConsumerError::msg(format!("records of {shard} are not durable yet")),
            });
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
            .for_each_concurrent(crate::resolve::RESOLVE_CONCURRENCY, |key| async move {
                delivery.delete_manifest(&key).await;
            })
            .await;
        Ok(())
    }
}

/// Buffers sealed and delivered together when a shard closes.
const CLOSE_CHUNK: usize = 2048;

/// How long [`Archiver`] waits between delivery retries at most.
pub const MAX_RETRY_DELAY: Duration = Duration::from_secs(30);
