//! The transform stage: nothing, an in-process transform (the built-in
//! `mcp-normalize` or a user's Rust plugin), or a Lambda function invoked through the
//! [`FunctionInvoker`] port (weir-aws implements it with aws-sdk-lambda) with
//! Firehose's event and response shapes, batching and retries.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use weir_core::{Record, ShardId};

use crate::firehose_config::LambdaSettings;
use crate::transform::{
    Failure, KinesisRecordMetadata, Outcome, TransformOutput, TransformResponse, check_response, event,
    mcp_normalize_indexed, mcp_normalize_into,
};

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

/// The built-in `mcp-normalize` transform (see [`crate::transform::mcp_normalize`]).
#[derive(Debug, Default, Clone, Copy)]
pub struct McpNormalize;

impl RecordTransform for McpNormalize {
    fn name(&self) -> &str {
        "mcp-normalize"
    }

    fn transform(&self, _shard: &ShardId, record: &Record) -> Outcome {
        match mcp_normalize_indexed(&record.data, record.approximate_arrival) {
            (TransformOutput::Ok(data), fields) => Outcome::Ok { data, partition_keys: BTreeMap::new(), fields },
            (TransformOutput::Failed(m), _) => Outcome::Failed(Failure::new("Transform.McpNormalize", m)),
        }
    }

    /// All lines of the batch go into one buffer; each outcome holds a slice of it
    /// (one allocation per batch instead of one per record).
    fn transform_parts(&self, _shard: &ShardId, parts: &[Part<'_>]) -> Vec<Outcome> {
        let mut lines = Vec::with_capacity(parts.iter().map(|p| p.data().len() + 64).sum());
        let mut ends = Vec::with_capacity(parts.len());
        for p in parts {
            let start = lines.len();
            ends.push(match mcp_normalize_into(p.data(), p.record.approximate_arrival, &mut lines) {
                Ok(fields) => Ok((start..lines.len(), fields)),
                Err(reason) => Err(reason),
            });
        }
        let lines = Bytes::from(lines);
        ends.into_iter()
            .map(|end| match end {
                Ok((range, fields)) => {
                    Outcome::Ok { data: lines.slice(range), partition_keys: BTreeMap::new(), fields }
                }
                Err(reason) => Outcome::Failed(Failure::new("Transform.McpNormalize", reason)),
            })
            .collect()
    }
}

/// A failed invocation.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{code}: {message}")]
pub struct InvokeError {
    /// Error code for the error output (`Lambda.FunctionError`, `Lambda.InvokeFailed`, ...).
    pub code: &'static str,
    /// What went wrong.
    pub message: String,
    /// Whether another attempt may succeed.
    pub retryable: bool,
}

/// Invokes a function synchronously with a JSON payload and returns its JSON result.
#[async_trait]
pub trait FunctionInvoker: Send + Sync {
    /// Invokes `function` (name or ARN).
    async fn invoke(&self, function: &str, payload: Bytes) -> Result<Bytes, InvokeError>;
}

/// A Lambda transform: invoker plus Firehose's processor settings.
#[derive(Clone)]
pub struct LambdaTransform {
    /// The port.
    pub invoker: Arc<dyn FunctionInvoker>,
    /// ARN, retries, buffer size.
    pub settings: LambdaSettings,
    /// ARN used as `deliveryStreamArn` in events.
    pub delivery_arn: String,
    /// ARN used as `sourceKinesisStreamArn`.
    pub source_arn: String,
    /// Region in events.
    pub region: String,
}

/// The transform stage.
#[derive(Clone, Default)]
pub enum Transformer {
    /// Records pass unchanged.
    #[default]
    None,
    /// In-process.
    InProcess(Arc<dyn RecordTransform>),
    /// A Lambda function.
    Lambda(LambdaTransform),
}

/// One record to transform: the stream record or one of its de-aggregated parts.
pub struct Part<'a> {
    /// The stream record.
    pub record: &'a Record,
    /// The part's data when it is a de-aggregated piece; `None` for the whole record.
    pub piece: Option<Bytes>,
}

impl<'a> Part<'a> {
    /// The whole record as one part.
    pub fn whole(record: &'a Record) -> Self {
        Self { record, piece: None }
    }

    /// The part's data.
    pub fn data(&self) -> &Bytes {
        self.piece.as_ref().unwrap_or(&self.record.data)
    }
}

impl Transformer {
    /// The ARN to put in error records, when a Lambda is involved, without its
    /// account and function name ([`weir_core::redact::arn`]): error records are read
    /// by more people than the config.
    pub fn lambda_arn(&self) -> Option<String> {
        match self {
            Transformer::Lambda(l) => Some(weir_core::redact::arn(&l.settings.arn)),
            _ => None,
        }
    }

    /// Transforms parts of one shard's batch; one outcome per part, in order.
    pub async fn run(&self, shard: &ShardId, parts: &[Part<'_>]) -> Vec<Outcome> {
        match self {
            Transformer::None => parts
                .iter()
                .map(|p| Outcome::Ok { data: p.data().clone(), partition_keys: BTreeMap::new(), fields: None })
                .collect(),
            Transformer::InProcess(t) => t.transform_parts(shard, parts),
            Transformer::Lambda(l) => {
                let mut out = Vec::with_capacity(parts.len());
                for chunk in chunks(parts, l.settings.buffer_bytes) {
                    out.extend(l.invoke_chunk(shard, chunk).await);
                }
                out
            }
        }
    }
}

/// Splits parts so each invocation's payload stays near `limit` bytes (base64 grows
/// data by 4/3; each record adds about 300 bytes of metadata).
fn chunks<'p, 'a>(parts: &'p [Part<'a>], limit: u64) -> Vec<&'p [Part<'a>]> {
    let mut out = Vec::new();
    let (mut start, mut size) = (0usize, 0u64);
    for (i, p) in parts.iter().enumerate() {
        let cost = p.data().len() as u64 * 4 / 3 + 300;
        if i > start && size + cost > limit {
            out.push(&parts[start..i]);
            start = i;
            size = 0;
        }
        size += cost;
    }
    if start < parts.len() {
        out.push(&parts[start..]);
    }
    out
}

impl LambdaTransform {
    async fn invoke_chunk(&self, shard: &ShardId, parts: &[Part<'_>]) -> Vec<Outcome> {
        let invocation = format!("{:032x}", rand::random::<u128>());
        let records = parts
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let meta = KinesisRecordMetadata {
                    shard_id: shard.to_string(),
                    partition_key: p.record.partition_key.clone(),
                    approximate_arrival_timestamp: p.record.approximate_arrival.as_millis(),
                    sequence_number: p.record.position.sequence.to_string(),
                    subsequence_number: p.record.position.sub_sequence,
                };
                (format!("{invocation}-{i}"), meta, p.data().clone())
            })
            .collect();
        let ev = event(&invocation, &self.delivery_arn, &self.source_arn, &self.region, records);
        let payload = match serde_json::to_vec(&ev) {
            Ok(p) => Bytes::from(p),
            Err(e) => return fail_all(parts.len(), "Lambda.InvokeFailed", format!("cannot encode event: {e}")),
        };
        let mut attempt = 0u32;
        let mut delay = Duration::from_millis(100);
        loop {
            match self.invoker.invoke(&self.settings.arn, payload.clone()).await {
                Ok(body) => {
                    return match serde_json::from_slice::<TransformResponse>(&body) {
                        Ok(resp) => check_response(&ev, &resp),
                        Err(e) => fail_all(
                            parts.len(),
                            "Lambda.JsonProcessingException",
                            format!("transform response is not the expected JSON: {e}"),
                        ),
                    };
                }
                Err(e) if e.retryable && attempt < self.settings.retries => {
                    attempt += 1;
                    let (function, error) = (weir_core::redact::arn(&self.settings.arn), self.redacted(&e.to_string()));
                    tracing::warn!(function, attempt, error, "transform invocation failed; retrying");
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(Duration::from_secs(5));
                }
                Err(e) => {
                    let message = self.redacted(&e.message);
                    return fail_all(parts.len(), e.code, format!("{message} (after {} attempts)", attempt + 1));
                }
            }
        }
    }

    /// `text` (an invocation error, as logs and error records show it) with the
    /// function's ARN redacted wherever the SDK's message quotes it.
    fn redacted(&self, text: &str) -> String {
        weir_core::redact::scrub(text, &self.settings.arn, &weir_core::redact::arn(&self.settings.arn))
    }
}

fn fail_all(n: usize, code: &'static str, message: String) -> Vec<Outcome> {
    (0..n).map(|_| Outcome::Failed(Failure::new(code, message.clone()))).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_core::{ExtendedSequenceNumber, SequenceNumber, Timestamp};

    /// The default of `transform_parts`, for comparison.
    struct PartByPart;
    impl RecordTransform for PartByPart {
        fn name(&self) -> &str {
            "part-by-part"
        }
        fn transform(&self, shard: &ShardId, record: &Record) -> Outcome {
            McpNormalize.transform(shard, record)
        }
    }

    #[test]
    fn the_batch_normaliser_gives_the_per_record_outcomes() {
        let inputs = [
            r#"{"tenantId":"t-1","toolName":"a","ts":1764400000000,"durationMs":3}"#,
            "not json",
            r#"{"tenantId":{"nested":true}}"#,
            r#"{"ts":"yesterday"}"#,
            "",
            r#"{"tenantId":"t-2","success":true}"#,
        ];
        let records: Vec<Record> = inputs
            .iter()
            .enumerate()
            .map(|(i, d)| Record {
                partition_key: format!("pk-{i}"),
                position: ExtendedSequenceNumber::plain(SequenceNumber::from_u128(i as u128 + 1)),
                approximate_arrival: Timestamp::from_millis(1_764_400_000_000 + i as i64),
                data: Bytes::from(d.to_string()),
            })
            .collect();
        let mut parts: Vec<Part<'_>> = records.iter().map(Part::whole).collect();
        // A de-aggregated piece of the first record, too.
        parts.push(Part { record: &records[0], piece: Some(Bytes::from_static(br#"{"tenantId":"piece"}"#)) });
        let shard = ShardId::new("shardId-000000000000");
        let batch = McpNormalize.transform_parts(&shard, &parts);
        let one_by_one = PartByPart.transform_parts(&shard, &parts);
        assert_eq!(batch, one_by_one);
        assert_eq!(batch.iter().filter(|o| matches!(o, Outcome::Ok { .. })).count(), 4);
    }
}
