//! The transform stage, with Firehose's Lambda contract: every record comes out `Ok`
//! (new data, optional partition keys), `Dropped`, or failed (to the error output as
//! `processing-failed`, with a reason; [`crate::pipeline::outcome`]).
//!
//! Transforms: none (records pass unchanged), the built-in `mcp-normalize` (the design
//! note's mapping, [`weir_mcp`]), a user's Rust [`RecordTransform`], or a Lambda
//! function ([`crate::pipeline::lambda`]).

use std::sync::Arc;

use bytes::Bytes;
use weir_core::{Record, ShardId};

use crate::pipeline::lambda::LambdaTransform;
use crate::pipeline::outcome::{Failure, Outcome, Part};

/// A transform that runs in the archiver's process: one record in, one outcome out.
/// Implement it to plug your own Rust transform into the archiver. It must be
/// deterministic (same record, same outcome) for exactly-once delivery: a record seen
/// again after a crash must land in the same partition.
pub trait RecordTransform: Send + Sync {
    /// Name for logs and metrics.
    fn name(&self) -> &str;

    /// Transforms one record.
    fn transform(&self, shard: &ShardId, record: &Record) -> Outcome;

    /// Transforms the parts of one batch: one outcome per part, in order. The default
    /// calls [`RecordTransform::transform`] part by part; override it to share work or
    /// memory across a batch.
    fn transform_parts(&self, shard: &ShardId, parts: &[Part<'_>]) -> Vec<Outcome> {
        parts
            .iter()
            .map(|p| match &p.piece {
                None => self.transform(shard, p.record),
                Some(piece) => self.transform(shard, &Record { data: piece.clone(), ..p.record.clone() }),
            })
            .collect()
    }
}

/// The built-in `mcp-normalize` transform ([`weir_mcp::normalize_line`]): MCP tool-call
/// events to the archive schema, one line each (the newline included); records it
/// cannot map fail with code `Transform.McpNormalize`. [`Transformer::McpNormalize`]
/// runs it with the archiver's one-pass writer for the common shape.
#[derive(Debug, Default, Clone, Copy)]
pub struct McpNormalize;

/// The error code of records `mcp-normalize` cannot map.
pub const MCP_NORMALIZE_FAILED: &str = "Transform.McpNormalize";

impl RecordTransform for McpNormalize {
    fn name(&self) -> &str {
        "mcp-normalize"
    }

    fn transform(&self, _shard: &ShardId, record: &Record) -> Outcome {
        mcp_normalize(&record.data, record.approximate_arrival)
    }
}

/// The table of `mcp-normalize`'s lines: [`weir_mcp::ARCHIVE_FIELDS`] with their Hive
/// types, the `columns` for Parquet output behind this transform.
pub fn mcp_normalize_columns() -> Vec<crate::parquet::Column> {
    use crate::parquet::{Column, ColumnType};
    let types = [
        ColumnType::String,
        ColumnType::String,
        ColumnType::String,
        ColumnType::String,
        ColumnType::Timestamp,
        ColumnType::BigInt,
        ColumnType::Boolean,
        ColumnType::String,
    ];
    weir_mcp::ARCHIVE_FIELDS.iter().zip(types).map(|(name, ty)| Column { name: (*name).into(), ty }).collect()
}

/// The outcome of `mcp-normalize` for one record's data.
pub fn mcp_normalize(data: &[u8], arrival: weir_core::Timestamp) -> Outcome {
    match weir_mcp::normalize_line(data, arrival) {
        Ok(line) => Outcome::ok(Bytes::from(line)),
        Err(e) => Outcome::Failed(Failure::new(MCP_NORMALIZE_FAILED, e.to_string())),
    }
}

/// The transform stage.
#[derive(Clone, Default)]
pub enum Transformer {
    /// Records pass unchanged.
    #[default]
    None,
    /// The built-in `mcp-normalize` ([`McpNormalize`]).
    McpNormalize,
    /// A user's transform, in-process.
    InProcess(Arc<dyn RecordTransform>),
    /// A Lambda function.
    Lambda(LambdaTransform),
}

impl Transformer {
    /// Whether it may fail a record one time and take it another, or route it
    /// differently (a Lambda: an invocation that errs, a function that is changed);
    /// the others are deterministic, as the exactly-once protocol asks of them.
    pub fn can_change_its_mind(&self) -> bool {
        matches!(self, Transformer::Lambda(_))
    }

    /// The ARN to put in error records, when a Lambda is involved, without its
    /// account and function name ([`weir_core::redact::arn`]): error records are read
    /// by more people than the config.
    pub fn lambda_arn(&self) -> Option<String> {
        match self {
            Transformer::Lambda(l) => Some(l.redacted_arn()),
            _ => None,
        }
    }

    /// Transforms parts of one shard's batch; one outcome per part, in order.
    pub async fn run(&self, shard: &ShardId, parts: &[Part<'_>]) -> Vec<Outcome> {
        match self {
            Transformer::None => parts.iter().map(|p| Outcome::ok(p.data().clone())).collect(),
            Transformer::McpNormalize => {
                parts.iter().map(|p| mcp_normalize(p.data(), p.record.approximate_arrival)).collect()
            }
            Transformer::InProcess(t) => t.transform_parts(shard, parts),
            Transformer::Lambda(l) => l.run(shard, parts).await,
        }
    }
}
