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
//! [`mcp_normalize`] is the built-in transform of the design note: it maps MCP tool-call
//! events to the archive schema and appends the newline Athena needs.

use std::collections::BTreeMap;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use bytes::Bytes;
use chrono::{DateTime, SecondsFormat, TimeZone, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use weir_core::Timestamp;

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

/// The archive schema of the design note, in its field order.
#[derive(Serialize)]
struct ArchiveEvent<'a> {
    schema_version: &'static str,
    tenant_id: &'a Value,
    tool_name: &'a Value,
    session_id: &'a Value,
    timestamp_utc: String,
    duration_ms: &'a Value,
    success: &'a Value,
    error_code: &'a Value,
}

fn iso(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// `"yyyy-MM-ddTHH:mm:ss.SSSZ"` (quoted) written into `buf` without the formatting
/// machinery (this runs once per record); years outside 0..=9999 take [`iso`].
fn quoted_iso<'a>(t: DateTime<Utc>, buf: &'a mut [u8; 26], slow: &'a mut String) -> &'a str {
    use chrono::{Datelike, Timelike};
    let year = t.year();
    if !(0..=9999).contains(&year) {
        *slow = format!("\"{}\"", iso(t));
        return slow;
    }
    let mut put = |at: usize, value: u32, width: usize| {
        let mut v = value;
        for i in (0..width).rev() {
            buf[at + i] = b'0' + (v % 10) as u8;
            v /= 10;
        }
    };
    put(1, year as u32, 4);
    put(6, t.month(), 2);
    put(9, t.day(), 2);
    put(12, t.hour(), 2);
    put(15, t.minute(), 2);
    put(18, t.second(), 2);
    put(21, t.timestamp_subsec_millis().min(999), 3);
    for (at, b) in
        [(0, b'"'), (5, b'-'), (8, b'-'), (11, b'T'), (14, b':'), (17, b':'), (20, b'.'), (24, b'Z'), (25, b'"')]
    {
        buf[at] = b;
    }
    match std::str::from_utf8(buf) {
        Ok(text) => text,
        Err(_) => {
            *slow = format!("\"{}\"", iso(t));
            slow
        }
    }
}

/// The built-in `mcp-normalize` transform, record by record, as the design note's
/// normaliser behaves: `schema_version` "1"; `tenant_id` and `tool_name` default to
/// "unknown", `session_id`, `duration_ms`, `success` and `error_code` to null (a
/// missing or null field takes the default, any other value is kept);
/// `timestamp_utc` is ISO-8601 with milliseconds from `ts` (epoch milliseconds, or
/// an RFC 3339 string), else the arrival time; a newline is appended. Input that is
/// not JSON, or JSON `null`, fails (and goes to the error output unchanged).
pub fn mcp_normalize(data: &[u8], arrival: Timestamp) -> TransformOutput {
    // Fast path: an object without duplicate fields, read without building a tree.
    // Anything else (arrays, scalars, duplicates, invalid input) takes the general path,
    // which defines the behaviour.
    if data.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{')
        && let Ok(ev) = serde_json::from_slice::<McpEventRef<'_>>(data)
        && let Some(out) = normalize_ref(&ev, arrival)
    {
        return out;
    }
    mcp_normalize_value(data, arrival)
}

/// The fields the normaliser reads, borrowed from the record.
#[derive(Deserialize)]
struct McpEventRef<'a> {
    #[serde(rename = "tenantId", borrow, default)]
    tenant_id: Option<&'a serde_json::value::RawValue>,
    #[serde(rename = "toolName", borrow, default)]
    tool_name: Option<&'a serde_json::value::RawValue>,
    #[serde(rename = "sessionId", borrow, default)]
    session_id: Option<&'a serde_json::value::RawValue>,
    #[serde(borrow, default)]
    ts: Option<&'a serde_json::value::RawValue>,
    #[serde(rename = "durationMs", borrow, default)]
    duration_ms: Option<&'a serde_json::value::RawValue>,
    #[serde(borrow, default)]
    success: Option<&'a serde_json::value::RawValue>,
    #[serde(rename = "errorCode", borrow, default)]
    error_code: Option<&'a serde_json::value::RawValue>,
}

/// `None` when a field holds an object or array (re-serialised compactly by the
/// general path, so no raw newline can reach the output line).
fn normalize_ref(ev: &McpEventRef<'_>, arrival: Timestamp) -> Option<TransformOutput> {
    fn given(v: Option<&serde_json::value::RawValue>) -> Option<&str> {
        v.map(|r| r.get()).filter(|t| *t != "null")
    }
    let all = [ev.tenant_id, ev.tool_name, ev.session_id, ev.ts, ev.duration_ms, ev.success, ev.error_code];
    if all.iter().flatten().any(|r| r.get().starts_with(['{', '['])) {
        return None;
    }
    let timestamp = match given(ev.ts) {
        None => Utc.timestamp_millis_opt(arrival.as_millis()).single().unwrap_or_default(),
        Some(t) if t.starts_with('"') => match serde_json::from_str::<std::borrow::Cow<'_, str>>(t)
            .ok()
            .and_then(|s| DateTime::parse_from_rfc3339(&s).ok())
        {
            Some(t) => t.with_timezone(&Utc),
            None => {
                return Some(TransformOutput::Failed("ts is neither epoch milliseconds nor an RFC 3339 time".into()));
            }
        },
        Some(t) => match t.parse::<f64>().ok().and_then(|ms| Utc.timestamp_millis_opt(ms as i64).single()) {
            Some(t) => t,
            None => {
                return Some(TransformOutput::Failed("ts is neither epoch milliseconds nor an RFC 3339 time".into()));
            }
        },
    };
    let mut out = Vec::with_capacity(256);
    out.push(b'{');
    let mut field = |name: &str, value: Option<&str>, default: &str, last: bool| {
        out.push(b'"');
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b"\":");
        out.extend_from_slice(value.unwrap_or(default).as_bytes());
        out.push(if last { b'}' } else { b',' });
    };
    field("schema_version", Some("\"1\""), "", false);
    field("tenant_id", given(ev.tenant_id), "\"unknown\"", false);
    field("tool_name", given(ev.tool_name), "\"unknown\"", false);
    field("session_id", given(ev.session_id), "null", false);
    let (mut ts_buf, mut ts_slow) = ([0u8; 26], String::new());
    let ts = quoted_iso(timestamp, &mut ts_buf, &mut ts_slow);
    field("timestamp_utc", Some(ts), "", false);
    field("duration_ms", given(ev.duration_ms), "null", false);
    field("success", given(ev.success), "null", false);
    field("error_code", given(ev.error_code), "null", true);
    out.push(b'\n');
    Some(TransformOutput::Ok(Bytes::from(out)))
}

fn mcp_normalize_value(data: &[u8], arrival: Timestamp) -> TransformOutput {
    let parsed: Value = match serde_json::from_slice(data) {
        Ok(v) => v,
        Err(e) => return TransformOutput::Failed(format!("not valid JSON: {e}")),
    };
    if parsed.is_null() {
        return TransformOutput::Failed("record is JSON null".into());
    }
    let unknown = Value::String("unknown".into());
    let null = Value::Null;
    let field = |name: &str| parsed.get(name).filter(|v| !v.is_null());
    let arrival_time = Utc.timestamp_millis_opt(arrival.as_millis()).single().unwrap_or_default();
    let ts = match field("ts") {
        Some(Value::Number(n)) => n.as_f64().and_then(|ms| Utc.timestamp_millis_opt(ms as i64).single()),
        Some(Value::String(s)) => DateTime::parse_from_rfc3339(s).ok().map(|t| t.with_timezone(&Utc)),
        _ => None,
    };
    let Some(timestamp) = (match field("ts") {
        None => Some(arrival_time),
        Some(_) => ts,
    }) else {
        return TransformOutput::Failed("ts is neither epoch milliseconds nor an RFC 3339 time".into());
    };
    let out = ArchiveEvent {
        schema_version: "1",
        tenant_id: field("tenantId").unwrap_or(&unknown),
        tool_name: field("toolName").unwrap_or(&unknown),
        session_id: field("sessionId").unwrap_or(&null),
        timestamp_utc: iso(timestamp),
        duration_ms: field("durationMs").unwrap_or(&null),
        success: field("success").unwrap_or(&null),
        error_code: field("errorCode").unwrap_or(&null),
    };
    match serde_json::to_vec(&out) {
        Ok(mut bytes) => {
            bytes.push(b'\n');
            TransformOutput::Ok(Bytes::from(bytes))
        }
        Err(e) => TransformOutput::Failed(format!("cannot encode: {e}")),
    }
}

/// The result of an in-process transform of one record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TransformOutput {
    /// New data.
    Ok(Bytes),
    /// To the error output, with the reason.
    Failed(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    const ARRIVAL: Timestamp = Timestamp::from_millis(1_764_400_000_000);

    fn norm(input: &str) -> Value {
        match mcp_normalize(input.as_bytes(), ARRIVAL) {
            TransformOutput::Ok(b) => {
                assert_eq!(b.last(), Some(&b'\n'), "newline appended");
                serde_json::from_slice(&b).unwrap()
            }
            TransformOutput::Failed(r) => panic!("{input}: {r}"),
        }
    }

    #[test]
    fn normalises_like_the_design_note() {
        let v = norm(
            r#"{"tenantId":"t-007","toolName":"search_docs","sessionId":"s-1","ts":1764400000000,"durationMs":412,"success":false,"errorCode":"E_TIMEOUT"}"#,
        );
        assert_eq!(
            v,
            serde_json::json!({"schema_version":"1","tenant_id":"t-007","tool_name":"search_docs","session_id":"s-1",
                "timestamp_utc":"2025-11-29T07:06:40.000Z","duration_ms":412,"success":false,"error_code":"E_TIMEOUT"})
        );
        let TransformOutput::Ok(raw) = mcp_normalize(br#"{"tenantId":"a"}"#, ARRIVAL) else { panic!() };
        let text = String::from_utf8(raw.to_vec()).unwrap();
        assert!(
            text.starts_with(
                r#"{"schema_version":"1","tenant_id":"a","tool_name":"unknown","session_id":null,"timestamp_utc":"#
            ),
            "field order: {text}"
        );
    }

    proptest::proptest! {
        /// The hand-written timestamp is chrono's RFC 3339 text, in and out of 0..=9999.
        #[test]
        fn quoted_iso_is_chronos_text(ms in -70_000_000_000_000i64..300_000_000_000_000i64) {
            let t = Utc.timestamp_millis_opt(ms).single().unwrap();
            let (mut buf, mut slow) = ([0u8; 26], String::new());
            proptest::prop_assert_eq!(quoted_iso(t, &mut buf, &mut slow), format!("\"{}\"", iso(t)));
        }

        /// The borrowed fast path writes the same JSON as the general path.
        #[test]
        fn fast_path_matches_the_general_path(
            fields in proptest::collection::vec((0usize..8, 0usize..9), 0..9),
        ) {
            let names = ["tenantId", "toolName", "sessionId", "ts", "durationMs", "success", "errorCode", "other"];
            let values = ["\"t-1\"", "\"a\\u00e9\\\"b\"", "null", "42", "1.5e3", "true", "{\"a\": [1, 2]}", "[1,\n2]", "\"2026-11-29T10:00:00Z\""];
            let mut seen = std::collections::BTreeSet::new();
            let body: Vec<String> = fields
                .iter()
                .filter(|(n, _)| seen.insert(*n))
                .map(|(n, v)| format!("\"{}\" : {}", names[*n], values[*v]))
                .collect();
            let input = format!("{{ {} }}", body.join(" ,\n "));
            let fast = mcp_normalize(input.as_bytes(), ARRIVAL);
            let slow = mcp_normalize_value(input.as_bytes(), ARRIVAL);
            match (fast, slow) {
                (TransformOutput::Ok(a), TransformOutput::Ok(b)) => {
                    let (va, vb): (Value, Value) = (serde_json::from_slice(&a).unwrap(), serde_json::from_slice(&b).unwrap());
                    proptest::prop_assert_eq!(va, vb, "{}", input);
                    proptest::prop_assert_eq!(a.iter().filter(|c| **c == b'\n').count(), 1, "one line: {:?}", a);
                }
                (TransformOutput::Failed(_), TransformOutput::Failed(_)) => {}
                (a, b) => proptest::prop_assert!(false, "{input}: {a:?} vs {b:?}"),
            }
        }
    }

    #[test]
    fn defaults_and_time_fallbacks() {
        let v = norm(r#"{"toolName":null,"success":true}"#);
        assert_eq!(v["tenant_id"], "unknown");
        assert_eq!(v["tool_name"], "unknown");
        assert_eq!(v["session_id"], Value::Null);
        assert_eq!(v["success"], true);
        assert_eq!(v["timestamp_utc"], "2025-11-29T07:06:40.000Z", "arrival time when ts is missing");
        assert_eq!(norm(r#"{"ts":"2026-01-02T03:04:05+01:00"}"#)["timestamp_utc"], "2026-01-02T02:04:05.000Z");
        assert_eq!(norm(r#"{"tenantId":""}"#)["tenant_id"], "", "only null or missing take the default");
        assert_eq!(norm("5")["tenant_id"], "unknown", "a JSON scalar has no fields");
    }

    #[test]
    fn bad_input_fails_with_a_reason() {
        for (input, why) in
            [("not json", "not valid JSON"), ("null", "JSON null"), (r#"{"ts":"yesterday"}"#, "ts is neither")]
        {
            match mcp_normalize(input.as_bytes(), ARRIVAL) {
                TransformOutput::Failed(r) => assert!(r.contains(why), "{input}: {r}"),
                TransformOutput::Ok(_) => panic!("{input} accepted"),
            }
        }
        assert!(matches!(mcp_normalize(&[0xff, 0xfe], ARRIVAL), TransformOutput::Failed(_)));
    }

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
        assert_eq!(out[0], Outcome::Ok { data: Bytes::from_static(b"new\n"), partition_keys: BTreeMap::new() });
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
