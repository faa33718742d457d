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

use crate::fields::FieldIndex;

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

/// Epoch milliseconds of 0000-01-01T00:00:00Z and 10000-01-01T00:00:00Z: the times
/// [`quoted_iso`] writes itself.
const FOUR_DIGIT_YEARS: std::ops::Range<i64> = -62_167_219_200_000..253_402_300_800_000;

/// `"yyyy-MM-ddTHH:mm:ss.SSSZ"` (quoted) of epoch milliseconds `ms`, written into `buf`
/// without the formatting machinery (this runs once per record); years outside
/// 0..=9999 take [`iso`]. `None` when chrono cannot represent the time.
fn quoted_iso<'a>(ms: i64, buf: &'a mut [u8; 26], slow: &'a mut String) -> Option<&'a str> {
    if !FOUR_DIGIT_YEARS.contains(&ms) {
        *slow = format!("\"{}\"", iso(Utc.timestamp_millis_opt(ms).single()?));
        return Some(slow);
    }
    // Days to a proleptic Gregorian date (H. Hinnant's civil_from_days; eras of 400
    // years starting 0000-03-01).
    let (secs, millis) = (ms.div_euclid(1000), ms.rem_euclid(1000));
    let (days, day_secs) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let z = days + 719_468;
    let (era, doe) = (z.div_euclid(146_097), z.rem_euclid(146_097));
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let mut put = |at: usize, value: i64, width: usize| {
        let mut v = value;
        for i in (0..width).rev() {
            buf[at + i] = b'0' + (v % 10) as u8;
            v /= 10;
        }
    };
    put(1, year, 4);
    put(6, month, 2);
    put(9, day, 2);
    put(12, day_secs / 3600, 2);
    put(15, day_secs / 60 % 60, 2);
    put(18, day_secs % 60, 2);
    put(21, millis, 3);
    for (at, b) in
        [(0, b'"'), (5, b'-'), (8, b'-'), (11, b'T'), (14, b':'), (17, b':'), (20, b'.'), (24, b'Z'), (25, b'"')]
    {
        buf[at] = b;
    }
    std::str::from_utf8(buf).ok()
}

/// The fields of a normalised line, in the order [`mcp_normalize`] writes them.
pub const MCP_FIELDS: [&str; 8] =
    ["schema_version", "tenant_id", "tool_name", "session_id", "timestamp_utc", "duration_ms", "success", "error_code"];

/// The built-in `mcp-normalize` transform, record by record, as the design note's
/// normaliser behaves: `schema_version` "1"; `tenant_id` and `tool_name` default to
/// "unknown", `session_id`, `duration_ms`, `success` and `error_code` to null (a
/// missing or null field takes the default, any other value is kept);
/// `timestamp_utc` is ISO-8601 with milliseconds from `ts` (epoch milliseconds, or
/// an RFC 3339 string), else the arrival time; a newline is appended. Input that is
/// not JSON (or not UTF-8), or JSON `null`, fails (and goes to the error output
/// unchanged).
pub fn mcp_normalize(data: &[u8], arrival: Timestamp) -> TransformOutput {
    mcp_normalize_indexed(data, arrival).0
}

/// [`mcp_normalize`], and where each of [`MCP_FIELDS`] lies in the line when the
/// record took the fast path (an object without duplicate, object or array fields).
pub fn mcp_normalize_indexed(data: &[u8], arrival: Timestamp) -> (TransformOutput, Option<FieldIndex>) {
    // Fast path: an object read without building a tree (the text is checked as UTF-8
    // once, so the parser does not check each string again). Anything else (arrays,
    // scalars, duplicates, invalid input) takes the general path, which defines the
    // behaviour.
    if data.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{')
        && let Ok(text) = std::str::from_utf8(data)
        && let Some(ev) = McpEventRef::read(text)
        && let Some(out) = normalize_ref(&ev, arrival)
    {
        return out;
    }
    (mcp_normalize_value(data, arrival), None)
}

/// The input fields the normaliser reads.
const MCP_INPUT: [&str; 7] = ["tenantId", "toolName", "sessionId", "ts", "durationMs", "success", "errorCode"];

/// The raw JSON text of each of [`MCP_INPUT`], borrowed from the record (`None`: absent).
struct McpEventRef<'a>([Option<&'a str>; 7]);

impl<'a> McpEventRef<'a> {
    /// `None` for anything but one object whose keys need no unescaping and whose
    /// fields of [`MCP_INPUT`] appear once each (the general path decides those).
    fn read(text: &'a str) -> Option<Self> {
        use serde::Deserializer as _;
        use serde::de::{Error, IgnoredAny, MapAccess, Visitor};
        struct Fields;
        impl<'de> Visitor<'de> for Fields {
            type Value = [Option<&'de str>; 7];
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut found = [None; 7];
                // Keys with escapes fail here (not borrowable) and take the general path.
                while let Some(key) = map.next_key::<&'de str>()? {
                    match MCP_INPUT.iter().position(|name| *name == key) {
                        Some(i) if found[i].is_some() => return Err(A::Error::custom("duplicate field")),
                        Some(i) => found[i] = Some(map.next_value::<&'de serde_json::value::RawValue>()?.get()),
                        None => {
                            map.next_value::<IgnoredAny>()?;
                        }
                    }
                }
                Ok(found)
            }
        }
        let mut de = serde_json::Deserializer::from_str(text);
        let found = de.deserialize_map(Fields).ok()?;
        de.end().ok()?;
        Some(Self(found))
    }

    /// A field's raw text unless it is absent or `null`.
    fn given(&self, field: usize) -> Option<&'a str> {
        self.0[field].filter(|t| *t != "null")
    }
}

const TS_INVALID: &str = "ts is neither epoch milliseconds nor an RFC 3339 time";

/// Epoch milliseconds of a `ts` given as raw JSON text; `None` when it is no time.
fn ts_millis(raw: &str) -> Option<i64> {
    if raw.starts_with('"') {
        let text = serde_json::from_str::<std::borrow::Cow<'_, str>>(raw).ok()?;
        return DateTime::parse_from_rfc3339(&text).ok().map(|t| t.timestamp_millis());
    }
    // Plain integers below 10^15 are exact as f64, so this is the general rule's value.
    let ms = match raw.parse::<i64>() {
        Ok(ms) if raw.len() < 16 => ms,
        _ => raw.parse::<f64>().ok()? as i64,
    };
    (FOUR_DIGIT_YEARS.contains(&ms) || Utc.timestamp_millis_opt(ms).single().is_some()).then_some(ms)
}

/// `None` when a field holds an object or array (re-serialised compactly by the
/// general path, so no raw newline can reach the output line).
fn normalize_ref(ev: &McpEventRef<'_>, arrival: Timestamp) -> Option<(TransformOutput, Option<FieldIndex>)> {
    if ev.0.iter().flatten().any(|r| r.starts_with(['{', '['])) {
        return None;
    }
    let millis = match ev.given(3) {
        None => Some(arrival.as_millis()).filter(|ms| Utc.timestamp_millis_opt(*ms).single().is_some()).unwrap_or(0),
        Some(t) => match ts_millis(t) {
            Some(ms) => ms,
            None => return Some((TransformOutput::Failed(TS_INVALID.into()), None)),
        },
    };
    let (mut ts_buf, mut ts_slow) = ([0u8; 26], String::new());
    let Some(ts) = quoted_iso(millis, &mut ts_buf, &mut ts_slow) else {
        return Some((TransformOutput::Failed(TS_INVALID.into()), None));
    };
    let values = [
        "\"1\"",
        ev.given(0).unwrap_or("\"unknown\""),
        ev.given(1).unwrap_or("\"unknown\""),
        ev.given(2).unwrap_or("null"),
        ts,
        ev.given(4).unwrap_or("null"),
        ev.given(5).unwrap_or("null"),
        ev.given(6).unwrap_or("null"),
    ];
    // `{"name":value,...}\n`, allocated at its exact size (so the bytes are not
    // copied again to become `Bytes`).
    let size = 2 + MCP_FIELDS.iter().zip(&values).map(|(n, v)| n.len() + v.len() + 4).sum::<usize>();
    let mut index = FieldIndex::new(&MCP_FIELDS);
    let mut out = Vec::with_capacity(size);
    out.push(b'{');
    for (i, (name, value)) in MCP_FIELDS.iter().zip(values).enumerate() {
        out.push(b'"');
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b"\":");
        let start = out.len();
        out.extend_from_slice(value.as_bytes());
        if let Some(index) = &mut index {
            index.set(i, start..out.len());
        }
        out.push(if i + 1 == MCP_FIELDS.len() { b'}' } else { b',' });
    }
    out.push(b'\n');
    Some((TransformOutput::Ok(Bytes::from(out)), index))
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
        return TransformOutput::Failed(TS_INVALID.into());
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
            let expected = format!("\"{}\"", iso(t));
            proptest::prop_assert_eq!(quoted_iso(ms, &mut buf, &mut slow), Some(expected.as_str()));
        }

        /// The borrowed fast path writes the same JSON as the general path.
        #[test]
        fn fast_path_matches_the_general_path(
            fields in proptest::collection::vec((0usize..8, 0usize..9), 0..10),
        ) {
            // Repeated keys, and a key that only unescaped reads "tenantId", included.
            let names = ["tenantId", "toolName", "sessionId", "ts", "durationMs", "success", "errorCode", "tenant\\u0049d"];
            let values = ["\"t-1\"", "\"a\\u00e9\\\"b\"", "null", "42", "1.5e3", "true", "{\"a\": [1, 2]}", "[1,\n2]", "\"2026-11-29T10:00:00Z\""];
            let body: Vec<String> = fields
                .iter()
                .map(|(n, v)| format!("\"{}\" : {}", names[*n], values[*v]))
                .collect();
            let input = format!("{{ {} }}", body.join(" ,\n "));
            let (fast, index) = mcp_normalize_indexed(input.as_bytes(), ARRIVAL);
            let slow = mcp_normalize_value(input.as_bytes(), ARRIVAL);
            match (fast, slow) {
                (TransformOutput::Ok(a), TransformOutput::Ok(b)) => {
                    let (va, vb): (Value, Value) = (serde_json::from_slice(&a).unwrap(), serde_json::from_slice(&b).unwrap());
                    proptest::prop_assert_eq!(&va, &vb, "{}", input);
                    // The index points at every field's value.
                    if let Some(index) = index {
                        for name in MCP_FIELDS {
                            let raw = index.raw(&a, name).flatten().unwrap();
                            proptest::prop_assert_eq!(&serde_json::from_str::<Value>(raw).unwrap(), &va[name], "{}", name);
                        }
                        proptest::prop_assert_eq!(index.raw(&a, "tenantId"), Some(None));
                    }
                    proptest::prop_assert_eq!(a.iter().filter(|c| **c == b'\n').count(), 1, "one line: {:?}", a);
                }
                (TransformOutput::Failed(_), TransformOutput::Failed(_)) => {}
                (a, b) => proptest::prop_assert!(false, "{input}: {a:?} vs {b:?}"),
            }
        }
    }

    #[test]
    fn quoted_iso_at_the_edges_of_four_digit_years() {
        let (mut buf, mut slow) = ([0u8; 26], String::new());
        for (ms, text) in [
            (-62_167_219_200_000, "0000-01-01T00:00:00.000Z"),
            (-62_167_219_200_001, "-0001-12-31T23:59:59.999Z"),
            (253_402_300_799_999, "9999-12-31T23:59:59.999Z"),
            (253_402_300_800_000, "+10000-01-01T00:00:00.000Z"),
            (-1, "1969-12-31T23:59:59.999Z"),
            (951_782_400_000, "2000-02-29T00:00:00.000Z"),
        ] {
            let expected = format!("\"{text}\"");
            assert_eq!(quoted_iso(ms, &mut buf, &mut slow), Some(expected.as_str()), "{ms}");
        }
        assert_eq!(quoted_iso(i64::MAX, &mut buf, &mut slow), None);
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
