//! The transform stage, with Firehose's Lambda contract.
//!
//! A transform receives records as a Firehose Lambda does ([`TransformEvent`]: base64
//! data, record ids, Kinesis metadata) and answers with one [`TransformResult`] per
//! record: `Ok` (new data, optional partition keys), `Dropped`, or `ProcessingFailed`.
//! [`check_response`] turns a response into per-record outcomes and catches what
//! Firehose lets through silently: data that is not base64 (a Lambda returning plain
//! text), missing, repeated or unknown record ids, a different record count. Those
//! records become `ProcessingFailed` with the reason, and go to the error output.
//!
//! [`mcp_normalize`] (in [`crate::mcp_normalize`]) is the built-in transform of the
//! design note: it maps MCP tool-call events to the archive schema and appends the
//! newline Athena needs.

use std::collections::BTreeMap;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::fields::FieldIndex;
pub use crate::mcp_normalize::{MCP_FIELDS, TransformOutput, mcp_normalize, mcp_normalize_indexed, mcp_normalize_into};

/// Kinesis metadata of a record, as Firehose passes it to a Lambda.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KinesisRecordMetadata {
    /// Shard id.
    pub shard_id: String,
    /// Partition key.
    pub partition_key: String,
    /// Arrival time, epoch milliseconds.
    pub approximate_arrival_timestamp: i64,
    /// Sequence number.
    pub sequence_number: String,
    /// KPL sub-sequence number.
    pub subsequence_number: u64,
}

/// One record of a transformation event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TransformRecord {
    /// Unique within the event.
    pub record_id: String,
    /// Arrival time, epoch milliseconds.
    pub approximate_arrival_timestamp: i64,
    /// The payload, base64.
    pub data: String,
    /// Where the record came from.
    pub kinesis_record_metadata: KinesisRecordMetadata,
}

/// The event a transformation Lambda receives.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TransformEvent {
    /// Unique per invocation.
    pub invocation_id: String,
    /// The delivery stream (or weir archiver) ARN.
    pub delivery_stream_arn: String,
    /// The source stream ARN.
    pub source_kinesis_stream_arn: String,
    /// The region.
    pub region: String,
    /// The records.
    pub records: Vec<TransformRecord>,
}

/// Partition keys a transform returns (`metadata.partitionKeys`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResultMetadata {
    /// Key name → value.
    #[serde(default)]
    pub partition_keys: BTreeMap<String, String>,
}

/// One record of a transform's response.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TransformResult {
    /// The id of the input record.
    pub record_id: String,
    /// `Ok`, `Dropped` or `ProcessingFailed` (kept as text, so an unknown value fails
    /// its record instead of the whole response).
    pub result: String,
    /// New payload, base64.
    #[serde(default)]
    pub data: Option<String>,
    /// Partition keys (dynamic partitioning with a Lambda).
    #[serde(default)]
    pub metadata: Option<ResultMetadata>,
}

/// A transform's response.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TransformResponse {
    /// One result per input record.
    pub records: Vec<TransformResult>,
}

/// What happens to one input record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Deliver `data`.
    Ok {
        /// The transformed payload.
        data: Bytes,
        /// Partition keys from the transform.
        partition_keys: BTreeMap<String, String>,
        /// Where the fields of `data` lie, when the transform wrote it and says so
        /// (see [`FieldIndex`] for the promise this makes).
        fields: Option<FieldIndex>,
    },
    /// Dropped by the transform.
    Dropped,
    /// To the error output (`processing-failed`), with the reason.
    Failed(Failure),
}

/// Why a transform failed a record: Firehose's error code and a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// Error code written to the error output (e.g. `Lambda.MissingRecordId`).
    pub code: &'static str,
    /// What went wrong.
    pub message: String,
}

impl Failure {
    /// A failure with a code and message.
    pub fn new(code: &'static str, message: impl Into<String>) -> Self {
        Self { code, message: message.into() }
    }
}

impl std::ops::Deref for Failure {
    type Target = str;
    fn deref(&self) -> &str {
        &self.message
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

/// Builds the event for `records` (id, arrival, metadata, data).
pub fn event(
    invocation_id: &str,
    arn: &str,
    source: &str,
    region: &str,
    records: Vec<(String, KinesisRecordMetadata, Bytes)>,
) -> TransformEvent {
    TransformEvent {
        invocation_id: invocation_id.to_owned(),
        delivery_stream_arn: arn.to_owned(),
        source_kinesis_stream_arn: source.to_owned(),
        region: region.to_owned(),
        records: records
            .into_iter()
            .map(|(record_id, meta, data)| TransformRecord {
                record_id,
                approximate_arrival_timestamp: meta.approximate_arrival_timestamp,
                data: B64.encode(&data),
                kinesis_record_metadata: meta,
            })
            .collect(),
    }
}

/// Turns a response into one outcome per input record, in input order. A response that
/// breaks the contract fails the records it concerns, never silently.
pub fn check_response(input: &TransformEvent, response: &TransformResponse) -> Vec<Outcome> {
    let count_mismatch = (response.records.len() != input.records.len())
        .then(|| format!("transform returned {} records for {} inputs", response.records.len(), input.records.len()));
    let mut by_id: BTreeMap<&str, Vec<&TransformResult>> = BTreeMap::new();
    for r in &response.records {
        by_id.entry(r.record_id.as_str()).or_default().push(r);
    }
    input
        .records
        .iter()
        .map(|rec| {
            if let Some(reason) = &count_mismatch {
                return Outcome::Failed(Failure::new("Lambda.MismatchedRecordCount", reason.clone()));
            }
            let results = by_id.get(rec.record_id.as_str()).map(Vec::as_slice).unwrap_or_default();
            let r = match results {
                [] => {
                    return Outcome::Failed(Failure::new(
                        "Lambda.MissingRecordId",
                        format!("transform returned no result for recordId {}", rec.record_id),
                    ));
                }
                [one] => *one,
                _ => {
                    return Outcome::Failed(Failure::new(
                        "Lambda.DuplicatedRecordId",
                        format!("transform returned recordId {} more than once", rec.record_id),
                    ));
                }
            };
            match r.result.as_str() {
                "Dropped" => Outcome::Dropped,
                "ProcessingFailed" => Outcome::Failed(Failure::new(
                    "Lambda.ProcessingFailedStatus",
                    "transform reported ProcessingFailed",
                )),
                "Ok" => match r.data.as_deref().map(|d| B64.decode(d)) {
                    Some(Ok(data)) => Outcome::Ok {
                        data: Bytes::from(data),
                        partition_keys: r.metadata.clone().unwrap_or_default().partition_keys,
                        fields: None,
                    },
                    Some(Err(_)) => Outcome::Failed(Failure::new(
                        "Lambda.InvalidBase64",
                        "transform returned data that is not base64 (did it return plain text instead of base64?)",
                    )),
                    None => Outcome::Failed(Failure::new("Lambda.MissingData", "transform returned Ok without data")),
                },
                other => Outcome::Failed(Failure::new(
                    "Lambda.InvalidResult",
                    format!("transform returned unknown result {other:?} (Ok, Dropped, ProcessingFailed)"),
                )),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(i: u64) -> KinesisRecordMetadata {
        KinesisRecordMetadata {
            shard_id: "shardId-000000000000".into(),
            partition_key: "t-1".into(),
            approximate_arrival_timestamp: 1,
            sequence_number: format!("{i}"),
            subsequence_number: 0,
        }
    }

    fn input(n: u64) -> TransformEvent {
        event(
            "inv",
            "arn:weir",
            "arn:stream",
            "us-east-1",
            (0..n).map(|i| (format!("r{i}"), meta(i), Bytes::from(format!("d{i}")))).collect(),
        )
    }

    fn result(id: &str, result: &str, data: Option<&str>) -> TransformResult {
        TransformResult { record_id: id.into(), result: result.into(), data: data.map(str::to_owned), metadata: None }
    }

    #[test]
    fn event_matches_the_lambda_shape() {
        let e = serde_json::to_value(input(1)).unwrap();
        assert_eq!(e["records"][0]["data"], "ZDA=");
        assert_eq!(e["records"][0]["kinesisRecordMetadata"]["shardId"], "shardId-000000000000");
        assert_eq!(e["records"][0]["recordId"], "r0");
        assert!(e.get("invocationId").is_some() && e.get("deliveryStreamArn").is_some());
    }

    #[test]
    fn responses_are_checked_record_by_record() {
        let event = input(5);
        let ok = B64.encode("new\n");
        let mut with_keys = result("r4", "Ok", Some(&ok));
        with_keys.metadata = Some(ResultMetadata { partition_keys: [("tenantId".into(), "t-1".into())].into() });
        let response = TransformResponse {
            records: vec![
                result("r0", "Ok", Some(&ok)),
                result("r1", "Dropped", None),
                result("r2", "ProcessingFailed", Some("ZDI=")),
                result("r3", "Ok", Some("{\"plain\": \"text\"}")),
                with_keys,
            ],
        };
        let out = check_response(&event, &response);
        assert_eq!(
            out[0],
            Outcome::Ok { data: Bytes::from_static(b"new\n"), partition_keys: BTreeMap::new(), fields: None }
        );
        assert_eq!(out[1], Outcome::Dropped);
        assert!(matches!(&out[2], Outcome::Failed(r) if r.contains("ProcessingFailed")));
        assert!(matches!(&out[3], Outcome::Failed(r) if r.contains("plain text instead of base64")), "{:?}", out[3]);
        assert!(matches!(&out[4], Outcome::Ok { partition_keys, .. } if partition_keys["tenantId"] == "t-1"));
    }

    #[test]
    fn contract_violations_fail_the_records_concerned() {
        let event = input(3);
        let ok = B64.encode("x");
        let fewer = TransformResponse { records: vec![result("r0", "Ok", Some(&ok))] };
        assert!(
            check_response(&event, &fewer)
                .iter()
                .all(|o| matches!(o, Outcome::Failed(r) if r.contains("1 records for 3 inputs")))
        );
        let wrong_id = TransformResponse {
            records: vec![result("r0", "Ok", Some(&ok)), result("r0", "Ok", Some(&ok)), result("zz", "Ok", Some(&ok))],
        };
        let out = check_response(&event, &wrong_id);
        assert!(matches!(&out[0], Outcome::Failed(r) if r.contains("more than once")));
        assert!(matches!(&out[1], Outcome::Failed(r) if r.contains("no result for recordId r1")));
        let odd = TransformResponse {
            records: vec![result("r0", "OK", Some(&ok)), result("r1", "Ok", None), result("r2", "Ok", Some(&ok))],
        };
        let out = check_response(&event, &odd);
        assert!(matches!(&out[0], Outcome::Failed(r) if r.contains("unknown result")));
        assert!(matches!(&out[1], Outcome::Failed(r) if r.contains("without data")));
        assert!(matches!(out[2], Outcome::Ok { .. }));
    }
}
