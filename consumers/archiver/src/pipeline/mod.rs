//! The reference path: what Firehose does with one record before it is buffered,
//! readable top to bottom. It is the specification the fast path ([`crate::fast`]) is
//! tested against, and the path every record takes that the fast path is not sure of.
//!
//! 1. **Split**: CloudWatch Logs records decompressed and unpacked
//!    ([`cloudwatch_logs`], `Decompression` / `CloudWatchLogProcessing`), then
//!    ([`split`], `RecordDeAggregation`) one record into parts (concatenated JSON, or
//!    delimited records); a record that cannot be unpacked or split goes to the error
//!    output whole.
//! 2. **Transform** ([`transform`]): nothing, `mcp-normalize`, a Rust plugin, or a
//!    Lambda ([`lambda`]) — each part comes out `Ok`, `Dropped` or failed.
//! 3. **Partition keys** ([`keys`]): the transform's keys, then the
//!    `MetadataExtractionQuery`'s (jq, by jaq).
//! 4. **Route** ([`route`]): the prefix's keys, each value checked so that it cannot
//!    leave its place in the object key; the data partition they name, or the error
//!    output ([`error_records`]) with Firehose's error record and the reason.
//! 5. **Line**: the delimiter appended (`AppendDelimiterToRecord`).
//!
//! [`batch`] runs a whole batch: the fast path where it is sure, these steps otherwise,
//! every line handed in record order to the archiver's intake.

pub mod batch;
pub mod cloudwatch_logs;
pub mod error_records;
pub mod keys;
pub mod lambda;
pub mod outcome;
pub mod route;
pub mod split;
pub mod transform;

use std::collections::BTreeMap;

use bytes::Bytes;
use weir_core::{Record, Timestamp};

use crate::metrics as m;
use error_records::{ErrorOutputType, ErrorRecord};
use keys::{KeyError, KeyQuery, QueryError};
use outcome::{Outcome, Part};
use route::Route;
use transform::Transformer;
use weir_firehose::ArchiverSettings;
use weir_firehose::prefix::check_partition_value;

/// Why a part has no data route (the text goes to its error record).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RouteError {
    /// The record is not one JSON document, so the query cannot run. (Several
    /// documents in one record are partitioned one by one after a `RecordDeAggregation`
    /// processor of type JSON splits them.)
    #[error(
        "record is not one valid JSON document; the metadata extraction query cannot run (split several documents in one record with RecordDeAggregation)"
    )]
    NotJson,
    /// The query failed, or a key it gave is not a scalar.
    #[error("metadata extraction query failed: {0}")]
    Query(KeyError),
    /// A key of the prefix has no value.
    #[error("partition key {0:?} is missing")]
    MissingKey(String),
    /// A key's value could leave its place in the object key.
    #[error("partition key {key:?} value {value:?} {reason}")]
    InvalidValue {
        /// The key.
        key: String,
        /// Its value.
        value: String,
        /// Which rule it breaks.
        reason: &'static str,
    },
}

/// Where one part goes: its line and route, or nowhere (dropped by the transform).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Routed {
    /// Buffer `line` under `route`.
    Line {
        /// The bytes written to the object (delimiter included).
        line: Bytes,
        /// A data partition or an error output.
        route: Route,
    },
    /// Dropped by the transform.
    Dropped,
}

/// The reference pipeline of one archiver.
pub struct Pipeline {
    settings: ArchiverSettings,
    query: Option<KeyQuery>,
    /// The partition keys the data prefix uses, in its order.
    prefix_keys: Vec<String>,
    transformer: Transformer,
}

impl Pipeline {
    /// The pipeline of a destination and its transform.
    pub fn new(settings: &ArchiverSettings, transformer: Transformer) -> Result<Self, QueryError> {
        let query = settings.metadata_query.as_deref().map(KeyQuery::compile).transpose()?;
        let prefix_keys = settings.prefixes.data.partition_keys().into_iter().map(str::to_owned).collect();
        Ok(Self { settings: settings.clone(), query, prefix_keys, transformer })
    }

    /// Whether the transform may fail a record one time and take it another
    /// ([`Transformer::can_change_its_mind`]).
    pub fn transform_can_change_its_mind(&self) -> bool {
        self.transformer.can_change_its_mind()
    }

    /// Step 1: the parts of `record`, or why it cannot be unpacked or split.
    pub fn split<'r>(&self, record: &'r Record) -> Result<Vec<Part<'r>>, split::SplitError> {
        let pieces = match (&self.settings.decompression, &self.settings.deaggregation) {
            (None, None) => return Ok(vec![Part::whole(record)]),
            (None, Some(how)) => split::split(&record.data, how)?,
            (Some(d), how) => {
                let unpacked = cloudwatch_logs::unpack(&record.data, d.message_extraction)?;
                if unpacked.is_empty() {
                    metrics::counter!(m::CONTROL_MESSAGES).increment(1);
                }
                match how {
                    None => unpacked,
                    Some(how) => {
                        let mut pieces = Vec::new();
                        for p in &unpacked {
                            pieces.extend(split::split(p, how)?);
                        }
                        pieces
                    }
                }
            }
        };
        Ok(pieces.into_iter().map(|piece| Part { record, piece: Some(piece) }).collect())
    }

    /// Step 2: transforms parts of one shard's batch; one outcome per part, in order.
    pub async fn transform(&self, shard: &weir_core::ShardId, parts: &[Part<'_>]) -> Vec<Outcome> {
        self.transformer.run(shard, parts).await
    }

    /// Steps 3 to 5 for one part whose transform gave `outcome`: `raw` is the part as
    /// it arrived (error records keep it), `now` the time failures are stamped with.
    pub fn route(&self, outcome: Outcome, raw: &[u8], arrival: Timestamp, now: Timestamp) -> Routed {
        match outcome {
            Outcome::Dropped => {
                metrics::counter!(m::DROPPED).increment(1);
                Routed::Dropped
            }
            Outcome::Failed(f) => {
                let mut rec = ErrorRecord::new(raw, arrival, now, f.code, f.message);
                rec.lambda_arn = self.transformer.lambda_arn();
                error_line(ErrorOutputType::ProcessingFailed, &rec)
            }
            Outcome::Ok { data, partition_keys, .. } => match self.partition(&data, partition_keys) {
                Err(reason) => {
                    let code = "DynamicPartitioning.MetadataExtractionFailed";
                    let rec = ErrorRecord::new(raw, arrival, now, code, reason.to_string());
                    error_line(ErrorOutputType::PartitioningFailed, &rec)
                }
                Ok(route) => {
                    let line = if self.settings.append_delimiter {
                        let mut v = Vec::with_capacity(data.len() + 1);
                        v.extend_from_slice(&data);
                        v.push(b'\n');
                        Bytes::from(v)
                    } else {
                        data
                    };
                    Routed::Line { line, route }
                }
            },
        }
    }

    /// Steps 3 and 4: the data route of a transformed part.
    fn partition(&self, data: &[u8], from_transform: BTreeMap<String, String>) -> Result<Route, RouteError> {
        if self.settings.dynamic_partitioning_retry.is_none() {
            return Ok(Route::Data(BTreeMap::new()));
        }
        let mut keys = from_transform;
        if let Some(q) = &self.query {
            let found = q.keys(data).map_err(|e| match e {
                KeyError::NotJson => RouteError::NotJson,
                other => RouteError::Query(other),
            })?;
            keys.extend(found);
        }
        let mut used = BTreeMap::new();
        for k in &self.prefix_keys {
            let value = keys.remove(k).ok_or_else(|| RouteError::MissingKey(k.clone()))?;
            check_partition_value(&value).map_err(|reason| RouteError::InvalidValue {
                key: k.clone(),
                value: value.clone(),
                reason,
            })?;
            used.insert(k.clone(), value);
        }
        Ok(Route::Data(used))
    }
}

/// The error line of a record that could not be decompressed, unpacked or split: the
/// record as it came, under `decompression-failed` or `processing-failed`.
pub fn split_failure(record: &Record, now: Timestamp, reason: &split::SplitError) -> Routed {
    use cloudwatch_logs::UnpackError;
    let (kind, code) = match reason {
        split::SplitError::NotJsonSequence(_) => (ErrorOutputType::ProcessingFailed, "RecordDeAggregation.Failed"),
        split::SplitError::Unpack(UnpackError::Decompression(_)) => {
            (ErrorOutputType::DecompressionFailed, "Decompression.Failed")
        }
        split::SplitError::Unpack(UnpackError::NotLogsMessage(_)) => {
            (ErrorOutputType::ProcessingFailed, "CloudWatchLogProcessing.Failed")
        }
    };
    let rec = ErrorRecord::new(&record.data, record.approximate_arrival, now, code, reason.to_string());
    error_line(kind, &rec)
}

/// An error record's line, routed to its error output.
pub fn error_line(kind: ErrorOutputType, rec: &ErrorRecord) -> Routed {
    Routed::Line { line: Bytes::from(rec.to_line()), route: Route::Error(kind) }
}
