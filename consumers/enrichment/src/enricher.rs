//! The enrichment consumer: normalise, add fields, look up tenant metadata, filter,
//! reshape, and write to an output stream through the `StreamWriter` port (a second
//! Kinesis stream, the in-process stream, or an NDJSON file). A batch is acknowledged
//! only after the output accepted every record of it; a failed write fails the batch,
//! which the runtime delivers again (records the output had already accepted are then
//! written twice: the output is at least once across failures, exactly once across
//! throttling, which the writer retries per record).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use weir_core::jq::{Filter, FilterError, key_text, truthy};
use weir_core::ports::{ObjectSink, OutRecord, StreamWriter};
use weir_core::{
    Acks, Clock, CloseReason, Consumer, ConsumerError, Record, RecordBatch, ShardContext, ShardId, Timestamp, WorkerId,
};

use crate::lookup::{Table, parse};

/// Metric: records that could not be enriched (label `reason`).
pub const MALFORMED: &str = "weir_enrichment_malformed_total";
/// Metric: records dropped by the filter.
pub const FILTERED: &str = "weir_enrichment_filtered_total";
/// Metric: records written.
pub const WRITTEN: &str = "weir_enrichment_written_total";
/// Metric: lookups without a row.
pub const LOOKUP_MISSES: &str = "weir_enrichment_lookup_misses_total";

/// Fields the enricher can add.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Added {
    /// The shard the record came from.
    ShardId,
    /// Its sequence number.
    SequenceNumber,
    /// Its arrival time (RFC 3339).
    ArrivalTime,
    /// The worker that processed it.
    WorkerId,
    /// When it was processed (RFC 3339).
    ProcessedAt,
}

/// Where enriched records go (the binary builds the writer).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase", deny_unknown_fields)]
pub enum OutputConfig {
    /// A Kinesis stream (PutRecords; per-key order kept across retries).
    Kinesis {
        /// Stream name.
        stream: String,
    },
    /// An NDJSON file.
    File {
        /// File path.
        path: std::path::PathBuf,
    },
    /// Not configured (tests and embedding code pass their own writer).
    #[default]
    None,
}

/// A lookup source.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LookupConfig {
    /// Directory holding the table (one of `directory` and `bucket`).
    #[serde(default)]
    pub directory: Option<std::path::PathBuf>,
    /// S3 bucket holding the table.
    #[serde(default)]
    pub bucket: Option<String>,
    /// Object key of the table (`.json` or `.csv`) in the lookup store.
    pub object: String,
    /// jq path on the record giving the id to look up.
    #[serde(default = "tenant_path")]
    pub key: String,
    /// Field the row is added under.
    #[serde(default = "tenant_field")]
    pub field: String,
    /// Reload interval.
    #[serde(default = "minute", with = "humantime_serde")]
    pub refresh: Duration,
}

fn tenant_path() -> String {
    ".tenant_id".into()
}
fn tenant_field() -> String {
    "tenant".into()
}
fn minute() -> Duration {
    Duration::from_secs(60)
}
fn yes() -> bool {
    true
}
fn all_added() -> Vec<Added> {
    vec![Added::ShardId, Added::SequenceNumber, Added::ArrivalTime, Added::WorkerId, Added::ProcessedAt]
}

/// `type = "enrichment"`: the pipeline (the output is configured by the caller).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EnrichmentConfig {
    /// Consumer name. In weir's config it comes from the `[[consumers]]` entry's
    /// `name` and is not repeated here.
    #[serde(default)]
    pub name: String,
    /// Apply the design note's MCP mapping first (`tenant_id`, `tool_name`, ...).
    #[serde(default = "yes")]
    pub normalize: bool,
    /// Fields to add.
    #[serde(default = "all_added")]
    pub add: Vec<Added>,
    /// Tenant metadata.
    #[serde(default)]
    pub lookup: Option<LookupConfig>,
    /// jq predicate: records for which it is not truthy are dropped.
    #[serde(default)]
    pub filter: Option<String>,
    /// jq expression building the output record.
    #[serde(default)]
    pub reshape: Option<String>,
    /// jq path (on the enriched record, before reshaping) giving the output partition key;
    /// the input's key when it yields nothing.
    #[serde(default = "tenant_path")]
    pub partition_key: String,
    /// Where records go.
    #[serde(default)]
    pub output: OutputConfig,
}

/// Why the enricher cannot start.
#[derive(Debug, thiserror::Error)]
#[error("enrichment {name:?}: {field}: {message}")]
pub struct ConfigError {
    /// Consumer name.
    pub name: String,
    /// The field.
    pub field: String,
    /// What is wrong.
    pub message: String,
}

struct Compiled {
    filter: Option<Filter>,
    reshape: Option<Filter>,
    partition_key: Filter,
    lookup_key: Option<Filter>,
}

impl EnrichmentConfig {
    fn compile(&self) -> Result<Compiled, ConfigError> {
        let jq = |field: &str, src: &str| {
            Filter::compile(src).map_err(|e: FilterError| ConfigError {
                name: self.name.clone(),
                field: field.into(),
                message: e.to_string(),
            })
        };
        Ok(Compiled {
            filter: self.filter.as_deref().map(|f| jq("filter", f)).transpose()?,
            reshape: self.reshape.as_deref().map(|f| jq("reshape", f)).transpose()?,
            partition_key: jq("partition_key", &self.partition_key)?,
            lookup_key: self.lookup.as_ref().map(|l| jq("lookup.key", &l.key)).transpose()?,
        })
    }

    /// Checks the configuration (every jq expression compiles).
    pub fn check(&self) -> Result<(), ConfigError> {
        self.compile().map(|_| ())
    }
}

/// The enrichment consumer.
pub struct Enricher {
    config: EnrichmentConfig,
    compiled: Compiled,
    output: Arc<dyn StreamWriter>,
    lookup_store: Option<Arc<dyn ObjectSink>>,
    table: Option<Table>,
    next_refresh: Option<Timestamp>,
    workers: HashMap<ShardId, WorkerId>,
    clock: Arc<dyn Clock>,
}

fn to_val(v: &Value) -> Option<jaq_json::Val> {
    // `v` came through serde_json, whose reader refuses nesting past 128 levels, so
    // jaq's reader is safe on it without weir_core::jq::parse's extra scan.
    jaq_json::read::parse_single(&serde_json::to_vec(v).ok()?).ok()
}

fn from_val(v: &jaq_json::Val) -> Option<Value> {
    serde_json::from_str(&v.to_string()).ok()
}

/// What became of one record.
#[derive(Debug, PartialEq)]
pub enum Enriched {
    /// Write this.
    Out(OutRecord),
    /// The filter dropped it.
    Filtered,
    /// It could not be enriched (reason).
    Malformed(&'static str),
}

impl Enricher {
    /// An enricher writing to `output`; `lookup_store` holds the lookup object.
    pub fn new(
        config: EnrichmentConfig,
        output: Arc<dyn StreamWriter>,
        lookup_store: Option<Arc<dyn ObjectSink>>,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, ConfigError> {
        let compiled = config.compile()?;
        if config.lookup.is_some() && lookup_store.is_none() {
            return Err(ConfigError {
                name: config.name.clone(),
                field: "lookup".into(),
                message: "needs a store".into(),
            });
        }
        Ok(Self {
            config,
            compiled,
            output,
            lookup_store,
            table: None,
            next_refresh: None,
            workers: HashMap::new(),
            clock,
        })
    }

    async fn refresh(&mut self, now: Timestamp, force: bool) -> Result<(), ConsumerError> {
        let (Some(l), Some(store)) = (&self.config.lookup, &self.lookup_store) else { return Ok(()) };
        if !force && self.next_refresh.is_some_and(|t| now < t) {
            return Ok(());
        }
        self.next_refresh = Some(now.saturating_add(l.refresh));
        let loaded = match store.get(&l.object).await {
            Ok(Some(body)) => parse(&l.object, &body),
            Ok(None) => Err(format!("lookup object {} does not exist in {}", l.object, store.location())),
            Err(e) => Err(e.to_string()),
        };
        match loaded {
            Ok(t) => {
                tracing::info!(consumer = %self.config.name, rows = t.len(), "lookup table loaded");
                self.table = Some(t);
                Ok(())
            }
            Err(e) if self.table.is_some() => {
                tracing::warn!(consumer = %self.config.name, error = %e, "lookup refresh failed; keeping the previous table");
                Ok(())
            }
            Err(e) => Err(ConsumerError::msg(format!("lookup table: {e}"))),
        }
    }

    /// Enriches one record.
    pub fn enrich(&self, shard: &ShardId, record: &Record, now: Timestamp) -> Enriched {
        let mut value: Value = if self.config.normalize {
            match weir_mcp::normalize(&record.data, record.approximate_arrival) {
                Ok(event) => Value::Object(event.into_object()),
                Err(_) => return Enriched::Malformed("not_normalizable"),
            }
        } else {
            match serde_json::from_slice(&record.data) {
                Ok(v @ Value::Object(_)) => v,
                Ok(_) => return Enriched::Malformed("not_object"),
                Err(_) => return Enriched::Malformed("not_json"),
            }
        };
        let Value::Object(map) = &mut value else { return Enriched::Malformed("not_object") };
        for a in &self.config.add {
            let (k, v) = match a {
                Added::ShardId => ("shard_id", Value::String(shard.to_string())),
                Added::SequenceNumber => ("sequence_number", Value::String(record.position.to_string())),
                Added::ArrivalTime => ("arrival_time", Value::String(record.approximate_arrival.to_rfc3339())),
                Added::WorkerId => {
                    ("worker_id", self.workers.get(shard).map_or(Value::Null, |w| Value::String(w.to_string())))
                }
                Added::ProcessedAt => ("processed_at", Value::String(now.to_rfc3339())),
            };
            map.insert(k.into(), v);
        }
        let Some(mut val) = to_val(&value) else { return Enriched::Malformed("not_json") };
        if let (Some(l), Some(key), Some(table)) = (&self.config.lookup, &self.compiled.lookup_key, &self.table) {
            let id = key.first(val.clone()).ok().flatten().map(|v| key_text(&v));
            let row = id.as_deref().and_then(|id| table.get(id));
            if row.is_none() {
                metrics::counter!(LOOKUP_MISSES).increment(1);
            }
            if let Value::Object(m) = &mut value {
                m.insert(l.field.clone(), row.map_or(Value::Null, |r| Value::Object(r.clone())));
            }
            match to_val(&value) {
                Some(v) => val = v,
                None => return Enriched::Malformed("not_json"),
            }
        }
        if let Some(f) = &self.compiled.filter {
            match f.first(val.clone()) {
                Ok(Some(v)) if truthy(&v) => {}
                Ok(_) => return Enriched::Filtered,
                Err(_) => return Enriched::Malformed("filter_error"),
            }
        }
        let partition_key = match self.compiled.partition_key.first(val.clone()) {
            Ok(Some(v)) if !matches!(v, jaq_json::Val::Null) => key_text(&v),
            _ => record.partition_key.clone(),
        };
        let partition_key = if partition_key.is_empty() || partition_key.chars().count() > 256 {
            record.partition_key.clone()
        } else {
            partition_key
        };
        let out = match &self.compiled.reshape {
            None => value,
            Some(r) => match r.first(val) {
                Ok(Some(v)) => match from_val(&v) {
                    Some(v) => v,
                    None => return Enriched::Malformed("reshape_error"),
                },
                _ => return Enriched::Malformed("reshape_error"),
            },
        };
        let mut line = match serde_json::to_vec(&out) {
            Ok(l) => l,
            Err(_) => return Enriched::Malformed("reshape_error"),
        };
        line.push(b'\n');
        Enriched::Out(OutRecord { partition_key, data: Bytes::from(line) })
    }
}

#[async_trait]
impl Consumer for Enricher {
    fn name(&self) -> &str {
        &self.config.name
    }

    async fn on_shard_open(&mut self, shard: &ShardContext) -> Result<(), ConsumerError> {
        self.workers.insert(shard.shard_id.clone(), shard.worker_id.clone());
        Ok(())
    }

    async fn on_batch(&mut self, batch: &RecordBatch, acks: &dyn Acks) -> Result<(), ConsumerError> {
        let now = self.clock.now();
        if self.table.is_none() {
            self.refresh(now, true).await?;
        }
        let mut out = Vec::with_capacity(batch.records.len());
        let mut since_yield = 0;
        for r in &batch.records {
            since_yield += r.data.len();
            if since_yield >= weir_core::YIELD_EVERY_BYTES {
                since_yield = 0;
                tokio::task::yield_now().await;
            }
            match self.enrich(&batch.shard_id, r, now) {
                Enriched::Out(o) => out.push(o),
                Enriched::Filtered => metrics::counter!(FILTERED).increment(1),
                Enriched::Malformed(reason) => metrics::counter!(MALFORMED, "reason" => reason).increment(1),
            }
        }
        let n = out.len() as u64;
        if !out.is_empty() {
            self.output
                .write(out)
                .await
                .map_err(|e| ConsumerError::with_source(format!("writing to {}", self.output.location()), e))?;
        }
        metrics::counter!(WRITTEN).increment(n);
        if let Some(last) = batch.last_position() {
            acks.durable(&batch.shard_id, last);
        }
        Ok(())
    }

    async fn on_tick(&mut self, now: Timestamp, _acks: &dyn Acks) -> Result<(), ConsumerError> {
        self.refresh(now, false).await
    }

    async fn on_shard_close(
        &mut self,
        shard: &ShardId,
        _reason: CloseReason,
        _acks: &dyn Acks,
    ) -> Result<(), ConsumerError> {
        self.workers.remove(shard);
        Ok(())
    }
}
