//! weir-mcp: the MCP tool-call event of the design note, mapped to its archive schema.
//!
//! MCP servers send one JSON event per tool call: `tenantId`, `toolName`, `sessionId`,
//! `ts`, `durationMs`, `success`, `errorCode`, often with nested `arguments`. The
//! archive schema ([`ArchiveEvent`]) keeps seven of them under snake-case names and a
//! `schema_version`, in a fixed field order, one line per event:
//!
//! ```text
//! {"schema_version":"1","tenant_id":"t-007","tool_name":"search_docs","session_id":"s-1",
//!  "timestamp_utc":"2025-11-29T07:06:40.000Z","duration_ms":412,"success":false,"error_code":"E_TIMEOUT"}
//! ```
//!
//! The rules ([`normalize`]): `tenant_id` and `tool_name` default to "unknown",
//! `session_id`, `duration_ms`, `success` and `error_code` to null (a missing or null
//! field takes the default, any other value is kept as it is, nested values included);
//! `timestamp_utc` is ISO-8601 UTC with milliseconds from `ts` (epoch milliseconds, or
//! an RFC 3339 string), or the record's arrival time when `ts` is missing or null.
//! Input that is not JSON (or not UTF-8), JSON `null`, or a `ts` that is neither fails.
//!
//! This crate is the specification, written on `serde_json::Value`. The archiver
//! (`mcp-normalize`) and the enrichment consumer use it; the archiver also has a
//! one-pass writer of the same line for the common shape, tested byte for byte against
//! [`normalize_line`].
#![warn(missing_docs)]

use chrono::{DateTime, SecondsFormat, TimeZone, Utc};
use serde::Serialize;
use serde_json::{Map, Value};
use weir_core::Timestamp;

/// The fields of the archive schema, in the order a line holds them.
pub const ARCHIVE_FIELDS: [&str; 8] =
    ["schema_version", "tenant_id", "tool_name", "session_id", "timestamp_utc", "duration_ms", "success", "error_code"];

/// The event fields the mapping reads, in the order of [`ARCHIVE_FIELDS`] after
/// `schema_version` (`ts` becomes `timestamp_utc`).
pub const INPUT_FIELDS: [&str; 7] = ["tenantId", "toolName", "sessionId", "ts", "durationMs", "success", "errorCode"];

/// The value of `schema_version`.
pub const SCHEMA_VERSION: &str = "1";

/// What `tenant_id` and `tool_name` are when the event has none.
pub const UNKNOWN: &str = "unknown";

/// One event in the archive schema, fields in line order.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ArchiveEvent {
    /// Always [`SCHEMA_VERSION`].
    pub schema_version: &'static str,
    /// `tenantId`, or "unknown".
    pub tenant_id: Value,
    /// `toolName`, or "unknown".
    pub tool_name: Value,
    /// `sessionId`, or null.
    pub session_id: Value,
    /// `ts` (or the arrival time) as `yyyy-MM-ddTHH:mm:ss.SSSZ`.
    pub timestamp_utc: String,
    /// `durationMs`, or null.
    pub duration_ms: Value,
    /// `success`, or null.
    pub success: Value,
    /// `errorCode`, or null.
    pub error_code: Value,
}

/// Why an event cannot be mapped (the record goes to the error output unchanged).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NormalizeError {
    /// Not JSON, or not UTF-8.
    #[error("not valid JSON: {0}")]
    NotJson(String),
    /// The record is the JSON value `null`.
    #[error("record is JSON null")]
    Null,
    /// `ts` is present but neither epoch milliseconds nor an RFC 3339 time (or out of
    /// the representable range).
    #[error("ts is neither epoch milliseconds nor an RFC 3339 time")]
    InvalidTs,
}

/// `t` as the archive writes times: RFC 3339 in UTC with milliseconds and `Z`.
pub fn timestamp_text(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// Maps one event (see the crate documentation); `arrival` stands in for a missing
/// `ts`. An event that is valid JSON but not an object has no fields: every field
/// takes its default.
pub fn normalize(data: &[u8], arrival: Timestamp) -> Result<ArchiveEvent, NormalizeError> {
    let parsed: Value = serde_json::from_slice(data).map_err(|e| NormalizeError::NotJson(e.to_string()))?;
    let mut fields = match parsed {
        Value::Null => return Err(NormalizeError::Null),
        Value::Object(map) => map,
        _ => Map::new(),
    };
    let mut take = |name: &str| fields.remove(name).filter(|v| !v.is_null());
    let timestamp = match take("ts") {
        None => Utc.timestamp_millis_opt(arrival.as_millis()).single().unwrap_or_default(),
        Some(ts) => ts_time(&ts).ok_or(NormalizeError::InvalidTs)?,
    };
    let unknown = || Value::String(UNKNOWN.to_owned());
    Ok(ArchiveEvent {
        schema_version: SCHEMA_VERSION,
        tenant_id: take("tenantId").unwrap_or_else(unknown),
        tool_name: take("toolName").unwrap_or_else(unknown),
        session_id: take("sessionId").unwrap_or_default(),
        timestamp_utc: timestamp_text(timestamp),
        duration_ms: take("durationMs").unwrap_or_default(),
        success: take("success").unwrap_or_default(),
        error_code: take("errorCode").unwrap_or_default(),
    })
}

/// The time a present, non-null `ts` stands for: a number of epoch milliseconds
/// (fractions cut), or an RFC 3339 string.
fn ts_time(ts: &Value) -> Option<DateTime<Utc>> {
    match ts {
        Value::Number(n) => n.as_f64().and_then(|ms| Utc.timestamp_millis_opt(ms as i64).single()),
        Value::String(s) => DateTime::parse_from_rfc3339(s).ok().map(|t| t.with_timezone(&Utc)),
        _ => None,
    }
}

/// [`normalize`] as the archive line: compact JSON in field order and a newline.
pub fn normalize_line(data: &[u8], arrival: Timestamp) -> Result<Vec<u8>, NormalizeError> {
    Ok(normalize(data, arrival)?.to_line())
}

impl ArchiveEvent {
    /// The event as one line of the archive: compact JSON in field order and a newline.
    pub fn to_line(&self) -> Vec<u8> {
        let mut line = Vec::with_capacity(256);
        // Writing into a Vec cannot fail, nor can serialising strings and parsed values
        // (their map keys are strings).
        let _ = serde_json::to_writer(&mut line, self);
        line.push(b'\n');
        line
    }

    /// The event as a JSON object (keyed by [`ARCHIVE_FIELDS`]), to add fields to.
    pub fn into_object(self) -> Map<String, Value> {
        let values = [
            Value::String(self.schema_version.to_owned()),
            self.tenant_id,
            self.tool_name,
            self.session_id,
            Value::String(self.timestamp_utc),
            self.duration_ms,
            self.success,
            self.error_code,
        ];
        ARCHIVE_FIELDS.iter().map(|f| (*f).to_owned()).zip(values).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ARRIVAL: Timestamp = Timestamp::from_millis(1_764_400_000_000);

    fn norm(input: &str) -> Value {
        let line = normalize_line(input.as_bytes(), ARRIVAL).unwrap_or_else(|e| panic!("{input}: {e}"));
        assert_eq!(line.last(), Some(&b'\n'), "newline appended");
        serde_json::from_slice(&line).unwrap()
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
        let text = String::from_utf8(normalize_line(br#"{"tenantId":"a"}"#, ARRIVAL).unwrap()).unwrap();
        assert!(
            text.starts_with(
                r#"{"schema_version":"1","tenant_id":"a","tool_name":"unknown","session_id":null,"timestamp_utc":"#
            ),
            "field order: {text}"
        );
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
        assert_eq!(norm(r#"{"tenantId":{"b":[1,2]}}"#)["tenant_id"], serde_json::json!({"b":[1,2]}), "kept as is");
    }

    #[test]
    fn bad_input_fails_with_a_reason() {
        for (input, why) in
            [("not json", "not valid JSON"), ("null", "JSON null"), (r#"{"ts":"yesterday"}"#, "ts is neither")]
        {
            match normalize_line(input.as_bytes(), ARRIVAL) {
                Err(e) => assert!(e.to_string().contains(why), "{input}: {e}"),
                Ok(_) => panic!("{input} accepted"),
            }
        }
        assert!(matches!(normalize(&[0xff, 0xfe], ARRIVAL), Err(NormalizeError::NotJson(_))));
        assert_eq!(normalize(br#"{"ts":1e300}"#, ARRIVAL), Err(NormalizeError::InvalidTs), "out of range");
    }

    #[test]
    fn the_object_holds_the_fields_of_the_line() {
        let event = normalize(br#"{"tenantId":"t","durationMs":3}"#, ARRIVAL).unwrap();
        let line: Value = serde_json::from_slice(&event.to_line()).unwrap();
        assert_eq!(Value::Object(event.into_object()), line);
    }
}
