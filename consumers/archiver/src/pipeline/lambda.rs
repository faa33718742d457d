//! The Lambda transform, with Firehose's contract.
//!
//! A Lambda receives records as Firehose sends them ([`TransformEvent`]: base64 data,
//! record ids, Kinesis metadata), in invocations of about `BufferSizeInMBs`, retried
//! `NumberOfRetries` times on retryable failures, and answers with one
//! [`TransformResult`] per record: `Ok` (new data, optional partition keys), `Dropped`,
//! or `ProcessingFailed`. [`check_response`] turns a response into per-record outcomes
//! and catches what Firehose lets through silently: data that is not base64 (a Lambda
//! returning plain text), missing, repeated or unknown record ids, a different record
//! count. Those records fail with the reason, and go to the error output.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use weir_core::ShardId;
use weir_core::ports::FunctionInvoker;

use crate::pipeline::outcome::{Failure, OtfMetadata, Outcome, Part};
use weir_firehose::LambdaSettings;

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

/// What a transform returns beside the data (`metadata`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResultMetadata {
    /// Partition keys (`partitionKeys`): key name → value.
    #[serde(default)]
    pub partition_keys: BTreeMap<String, String>,
    /// The record's table, for an Iceberg destination (`otfMetadata`).
    #[serde(default)]
    pub otf_metadata: Option<OtfMetadata>,
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

/// The outcomes of the records of `input` from the function's answer `body`: one per
/// input record, in input order, whatever the body holds (not JSON, the wrong shape,
/// too few or unknown records: the records concerned fail with Firehose's codes).
pub fn decode_response(input: &TransformEvent, body: &[u8]) -> Vec<Outcome> {
    match serde_json::from_slice::<TransformResponse>(body) {
        Ok(resp) => check_response(input, &resp),
        Err(e) => fail_all(
            input.records.len(),
            "Lambda.JsonProcessingException",
            format!("transform response is not the expected JSON: {e}"),
        ),
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
                    Some(Ok(data)) => {
                        let metadata = r.metadata.clone().unwrap_or_default();
                        Outcome::Ok {
                            data: Bytes::from(data),
                            partition_keys: metadata.partition_keys,
                            otf: metadata.otf_metadata,
                        }
                    }
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
    /// Transforms parts of one shard's batch, in invocations of about
    /// `BufferSizeInMBs`; one outcome per part, in order.
    pub async fn run(&self, shard: &ShardId, parts: &[Part<'_>]) -> Vec<Outcome> {
        let mut out = Vec::with_capacity(parts.len());
        for chunk in chunks(parts, self.settings.buffer_bytes) {
            out.extend(self.invoke_chunk(shard, chunk).await);
        }
        out
    }

    /// The function's ARN without its account and name (for logs and error records).
    pub fn redacted_arn(&self) -> String {
        weir_core::redact::arn(&self.settings.arn)
    }

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
                Ok(body) => return decode_response(&ev, &body),
                Err(e) if e.retryable && attempt < self.settings.retries => {
                    attempt += 1;
                    let (function, error) = (self.redacted_arn(), self.redacted(&e.to_string()));
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
        weir_core::redact::scrub(text, &self.settings.arn, &self.redacted_arn())
    }
}

fn fail_all(n: usize, code: &'static str, message: String) -> Vec<Outcome> {
    (0..n).map(|_| Outcome::Failed(Failure::new(code, message.clone()))).collect()
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
        with_keys.metadata =
            Some(ResultMetadata { partition_keys: [("tenantId".into(), "t-1".into())].into(), otf_metadata: None });
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
            Outcome::Ok { data: Bytes::from_static(b"new\n"), partition_keys: BTreeMap::new(), otf: None }
        );
        assert_eq!(out[1], Outcome::Dropped);
        assert!(matches!(&out[2], Outcome::Failed(r) if r.contains("ProcessingFailed")));
        assert!(matches!(&out[3], Outcome::Failed(r) if r.contains("plain text instead of base64")), "{:?}", out[3]);
        assert!(matches!(&out[4], Outcome::Ok { partition_keys, .. } if partition_keys["tenantId"] == "t-1"));
    }

    #[test]
    fn otf_metadata_names_the_records_table() {
        let body = format!(
            r#"{{"records": [{{"recordId": "r0", "result": "Ok", "data": "{}",
                "metadata": {{"otfMetadata": {{"destinationDatabaseName": "mcp", "destinationTableName": "calls", "operation": "insert"}}}}}}]}}"#,
            B64.encode("{}")
        );
        let out = decode_response(&input(1), body.as_bytes());
        let Outcome::Ok { otf: Some(otf), .. } = &out[0] else { panic!("{out:?}") };
        assert_eq!(otf.destination_database_name.as_deref(), Some("mcp"));
        assert_eq!(otf.destination_table_name.as_deref(), Some("calls"));
        assert_eq!(otf.operation.as_deref(), Some("insert"));
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
