//! The built-in `mcp-normalize` transform: MCP tool-call events to the archive schema
//! of the design note, one line each.
//!
//! Two paths with one behaviour. The general path parses the record into a
//! `serde_json::Value` and defines what the transform does. The fast path, taken by
//! every record that is one object whose keys need no unescaping and whose fields
//! appear once, reads the seven input fields in one pass without building a tree or
//! allocating, writes the line at its exact size, and records where each output field
//! lies ([`FieldIndex`]) so partitioning need not parse the line again. A property test
//! checks that both paths write the same JSON.

use bytes::Bytes;
use chrono::{DateTime, SecondsFormat, TimeZone, Utc};
use serde::Serialize;
use serde_json::Value;
use weir_core::Timestamp;

use crate::fields::FieldIndex;
use crate::flat_scan::{FlatValue, scan_flat};

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
fn quoted_iso<'a>(ms: i64, buf: &'a mut [u8; 26], slow: &'a mut String) -> Option<&'a [u8]> {
    if !FOUR_DIGIT_YEARS.contains(&ms) {
        *slow = format!("\"{}\"", iso(Utc.timestamp_millis_opt(ms).single()?));
        return Some(slow.as_bytes());
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
    Some(buf)
}

/// Whether chrono can represent epoch milliseconds `ms` (asked of chrono only outside
/// four-digit years).
fn representable(ms: i64) -> bool {
    FOUR_DIGIT_YEARS.contains(&ms) || Utc.timestamp_millis_opt(ms).single().is_some()
}

/// The fields of a normalised line, in the order [`mcp_normalize`] writes them.
pub const MCP_FIELDS: [&str; 8] =
    ["schema_version", "tenant_id", "tool_name", "session_id", "timestamp_utc", "duration_ms", "success", "error_code"];

/// The input fields the normaliser reads, in the order of [`MCP_FIELDS`] after
/// `schema_version` (`ts` becomes `timestamp_utc`). [`input_place`] is this list as a
/// match; a test keeps the two equal.
#[cfg_attr(not(test), allow(dead_code))]
const MCP_INPUT: [&str; 7] = ["tenantId", "toolName", "sessionId", "ts", "durationMs", "success", "errorCode"];

/// The place of `key` in [`MCP_INPUT`] (a match: this runs for every key of every
/// record).
fn input_place(key: &[u8]) -> Option<usize> {
    Some(match key {
        b"tenantId" => 0,
        b"toolName" => 1,
        b"sessionId" => 2,
        b"ts" => 3,
        b"durationMs" => 4,
        b"success" => 5,
        b"errorCode" => 6,
        _ => return None,
    })
}

const TS_INVALID: &str = "ts is neither epoch milliseconds nor an RFC 3339 time";

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
/// record took the fast path.
pub fn mcp_normalize_indexed(data: &[u8], arrival: Timestamp) -> (TransformOutput, Option<FieldIndex>) {
    let mut line = Vec::new();
    match mcp_normalize_into(data, arrival, &mut line) {
        Ok(fields) => (TransformOutput::Ok(Bytes::from(line)), fields),
        Err(reason) => (TransformOutput::Failed(reason), None),
    }
}

/// [`mcp_normalize`] appending the line to `out` (several records can share one
/// buffer); on success, where each of [`MCP_FIELDS`] lies in the line (ranges from the
/// line's start) when the record took the fast path. On failure `out` is unchanged.
pub fn mcp_normalize_into(data: &[u8], arrival: Timestamp, out: &mut Vec<u8>) -> Result<Option<FieldIndex>, String> {
    // The scanner checks UTF-8 itself (only when a byte is past ASCII); serde_json reads
    // a text checked once, so that it does not check each string again.
    if data.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{')
        && let mut fields = Default::default()
        && (scan_fields(data, &mut fields) || {
            fields = Default::default();
            std::str::from_utf8(data).is_ok_and(|text| read_fields(text, &mut fields))
        })
    {
        let start = out.len();
        match write_line(&fields, arrival, out) {
            Some(Ok(index)) => return Ok(index),
            Some(Err(reason)) => return Err(reason),
            None => out.truncate(start),
        }
    }
    match mcp_normalize_value(data, arrival) {
        TransformOutput::Ok(line) => {
            out.extend_from_slice(&line);
            Ok(None)
        }
        TransformOutput::Failed(reason) => Err(reason),
    }
}

/// One input field's value: a scalar, read as serde_json reads it for a `Value`.
#[derive(Debug, Clone, PartialEq)]
enum Scalar<'a> {
    Null,
    Bool(bool),
    U64(u64),
    I64(i64),
    F64(f64),
    /// A string without escapes, borrowed from the record (valid UTF-8).
    Str(&'a [u8]),
    /// A string that had escapes, unescaped (boxed, to keep the enum small: seven of
    /// these are read per record).
    Owned(Box<str>),
}

// Seven are read per record; keep them small.
const _: () = assert!(std::mem::size_of::<Option<Scalar<'static>>>() <= 24);

impl Scalar<'_> {
    /// The value as a time in epoch milliseconds, by the general path's rules.
    fn millis(&self) -> Option<i64> {
        let ms = match self {
            Scalar::U64(n) => *n as f64 as i64,
            Scalar::I64(n) => *n as f64 as i64,
            Scalar::F64(f) => *f as i64,
            Scalar::Str(s) => {
                let s = std::str::from_utf8(s).ok()?;
                return DateTime::parse_from_rfc3339(s).ok().map(|t| t.timestamp_millis());
            }
            Scalar::Owned(s) => return DateTime::parse_from_rfc3339(s).ok().map(|t| t.timestamp_millis()),
            Scalar::Null | Scalar::Bool(_) => return None,
        };
        representable(ms).then_some(ms)
    }

    /// Writes the value as JSON, as `serde_json` writes the same `Value`.
    #[inline]
    fn write(&self, out: &mut Vec<u8>) -> Option<()> {
        match self {
            Scalar::Null => out.extend_from_slice(b"null"),
            Scalar::Bool(b) => out.extend_from_slice(if *b { b"true" } else { b"false" }),
            Scalar::Str(s) => {
                out.push(b'"');
                out.extend_from_slice(s);
                out.push(b'"');
            }
            Scalar::U64(n) => serde_json::to_writer(&mut *out, n).ok()?,
            Scalar::I64(n) => serde_json::to_writer(&mut *out, n).ok()?,
            Scalar::F64(f) => serde_json::to_writer(&mut *out, f).ok()?,
            Scalar::Owned(s) => serde_json::to_writer(&mut *out, s).ok()?,
        }
        Some(())
    }

    /// Bytes [`Scalar::write`] writes; a bound for floats and escaped strings.
    fn size(&self) -> usize {
        fn digits(n: u64) -> usize {
            n.checked_ilog10().map_or(1, |d| d as usize + 1)
        }
        match self {
            Scalar::Null | Scalar::Bool(true) => 4,
            Scalar::Bool(false) => 5,
            Scalar::Str(s) => s.len() + 2,
            Scalar::U64(n) => digits(*n),
            Scalar::I64(n) => digits(n.unsigned_abs()) + usize::from(*n < 0),
            Scalar::F64(_) => 24,
            Scalar::Owned(s) => s.len() * 6 + 2,
        }
    }
}

impl<'de> serde::Deserialize<'de> for Scalar<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Scalar<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a scalar")
            }
            fn visit_unit<E>(self) -> Result<Self::Value, E> {
                Ok(Scalar::Null)
            }
            fn visit_bool<E>(self, v: bool) -> Result<Self::Value, E> {
                Ok(Scalar::Bool(v))
            }
            fn visit_u64<E>(self, v: u64) -> Result<Self::Value, E> {
                Ok(Scalar::U64(v))
            }
            fn visit_i64<E>(self, v: i64) -> Result<Self::Value, E> {
                Ok(Scalar::I64(v))
            }
            fn visit_f64<E>(self, v: f64) -> Result<Self::Value, E> {
                Ok(Scalar::F64(v))
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Scalar::Str(v.as_bytes()))
            }
            fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Scalar::Owned(v.into()))
            }
            fn visit_string<E>(self, v: String) -> Result<Self::Value, E> {
                Ok(Scalar::Owned(v.into_boxed_str()))
            }
            // Objects and arrays are refused (the visitor's default): the general
            // path re-serialises them compactly, so no raw newline reaches the line.
        }
        d.deserialize_any(V)
    }
}

/// [`read_fields`] for the common shape, without serde ([`scan_flat`]); `false` when not
/// sure (then `found` may hold some fields, and [`read_fields`] decides).
fn scan_fields<'a>(text: &'a [u8], found: &mut [Option<Scalar<'a>>; 7]) -> bool {
    scan_flat(text, |key, value| {
        let Some(i) = input_place(key) else { return true };
        if found[i].is_some() {
            return false;
        }
        found[i] = Some(match value {
            FlatValue::Null => Scalar::Null,
            FlatValue::Bool(b) => Scalar::Bool(b),
            FlatValue::U64(n) => Scalar::U64(n),
            FlatValue::Str(s) => Scalar::Str(s),
        });
        true
    })
}

/// Reads the seven input fields (`None`: absent) into `found` (all `None` on entry) from
/// one object whose keys need no unescaping, whose fields of [`MCP_INPUT`] appear once
/// and hold scalars; `false` for anything else, which the general path decides. The
/// fields are written in place (the array is 168 bytes; returning it by value copied
/// it twice per record).
fn read_fields<'a>(text: &'a str, found: &mut [Option<Scalar<'a>>; 7]) -> bool {
    use serde::Deserializer as _;
    use serde::de::{Error, IgnoredAny, MapAccess, Visitor};
    struct Fields<'f, 'de>(&'f mut [Option<Scalar<'de>>; 7]);
    impl<'de> Visitor<'de> for Fields<'_, 'de> {
        type Value = ();
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("an object")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
            let found = self.0;
            // Keys with escapes fail here (not borrowable).
            while let Some(key) = map.next_key::<&'de str>()? {
                match input_place(key.as_bytes()) {
                    Some(i) if found[i].is_some() => return Err(A::Error::custom("duplicate field")),
                    Some(i) => found[i] = Some(map.next_value::<Scalar<'de>>()?),
                    None => {
                        map.next_value::<IgnoredAny>()?;
                    }
                }
            }
            Ok(())
        }
    }
    let mut de = serde_json::Deserializer::from_str(text);
    de.deserialize_map(Fields(found)).is_ok() && de.end().is_ok()
}

/// Appends the normalised line of the fast path's fields to `out`: the field index, or
/// why the record fails; `None` if a value cannot be written (serde_json does not fail
/// for these types; the general path then decides).
fn write_line(
    fields: &[Option<Scalar<'_>>; 7],
    arrival: Timestamp,
    out: &mut Vec<u8>,
) -> Option<Result<Option<FieldIndex>, String>> {
    let given = |i: usize| fields[i].as_ref().filter(|v| **v != Scalar::Null);
    let millis = match given(3) {
        None => Some(arrival.as_millis()).filter(|ms| representable(*ms)).unwrap_or(0),
        Some(ts) => match ts.millis() {
            Some(ms) => ms,
            None => return Some(Err(TS_INVALID.into())),
        },
    };
    let (mut ts_buf, mut ts_slow) = ([0u8; 26], String::new());
    let Some(ts) = quoted_iso(millis, &mut ts_buf, &mut ts_slow) else {
        return Some(Err(TS_INVALID.into()));
    };
    const UNKNOWN: Scalar<'static> = Scalar::Str(b"unknown");
    // `timestamp_utc` (place 4) is written from `ts`.
    let values: [&Scalar<'_>; 8] = [
        &Scalar::Str(b"1"),
        given(0).unwrap_or(&UNKNOWN),
        given(1).unwrap_or(&UNKNOWN),
        given(2).unwrap_or(&Scalar::Null),
        &Scalar::Null,
        given(4).unwrap_or(&Scalar::Null),
        given(5).unwrap_or(&Scalar::Null),
        given(6).unwrap_or(&Scalar::Null),
    ];
    // `{"name":value,...}\n`; exactly sized unless floats or escapes are involved. The
    // text between values is constant (see `GLUE`).
    let size = GLUE.iter().map(|g| g.len()).sum::<usize>()
        + values.iter().enumerate().map(|(i, v)| if i == 4 { ts.len() } else { v.size() }).sum::<usize>();
    let mut index = FieldIndex::new(&MCP_FIELDS);
    out.reserve(size);
    let line_start = out.len();
    // Unrolled, so each glue is a copy of known length (this runs once per record).
    macro_rules! field {
        ($i:literal, $write:expr) => {{
            out.extend_from_slice(GLUE[$i].as_bytes());
            let start = out.len() - line_start;
            $write;
            if let Some(index) = &mut index {
                index.set($i, start..out.len() - line_start);
            }
        }};
    }
    field!(0, out.extend_from_slice(b"\"1\""));
    field!(1, values[1].write(out)?);
    field!(2, values[2].write(out)?);
    field!(3, values[3].write(out)?);
    field!(4, out.extend_from_slice(ts));
    field!(5, values[5].write(out)?);
    field!(6, values[6].write(out)?);
    field!(7, values[7].write(out)?);
    out.extend_from_slice(GLUE[8].as_bytes());
    Some(Ok(index))
}

/// The text before each value of a normalised line, and after the last one.
const GLUE: [&str; 9] = [
    "{\"schema_version\":",
    ",\"tenant_id\":",
    ",\"tool_name\":",
    ",\"session_id\":",
    ",\"timestamp_utc\":",
    ",\"duration_ms\":",
    ",\"success\":",
    ",\"error_code\":",
    "}\n",
];

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

    #[test]
    fn input_places_follow_the_input_fields() {
        for (i, name) in MCP_INPUT.iter().enumerate() {
            assert_eq!(input_place(name.as_bytes()), Some(i));
        }
        assert_eq!(input_place(b"tenant_id"), None);
    }

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
            proptest::prop_assert_eq!(quoted_iso(ms, &mut buf, &mut slow), Some(expected.as_bytes()));
        }

        /// The borrowed fast path writes the same JSON as the general path.
        #[test]
        fn fast_path_matches_the_general_path(
            fields in proptest::collection::vec((0usize..8, 0usize..18), 0..10),
        ) {
            // Repeated keys, and a key that only unescaped reads "tenantId", included.
            let names = ["tenantId", "toolName", "sessionId", "ts", "durationMs", "success", "errorCode", "tenant\\u0049d"];
            let values = [
                "\"t-1\"", "\"a\\u00e9\\\"b\"", "null", "42", "1.5e3", "true", "{\"a\": [1, 2]}", "[1,\n2]",
                "\"2026-11-29T10:00:00Z\"", "-0", "18446744073709551615", "-9223372036854775808", "0.1", "\"\"",
                "\"\u{7f}é\"", "1764400000000", "-1.5e300", "\"2026-11-29T10:00:00.123456+05:30\"",
            ];
            let body: Vec<String> = fields
                .iter()
                .map(|(n, v)| format!("\"{}\" : {}", names[*n], values[*v]))
                .collect();
            let input = format!("{{ {} }}", body.join(" ,\n "));
            let (fast, index) = mcp_normalize_indexed(input.as_bytes(), ARRIVAL);
            let slow = mcp_normalize_value(input.as_bytes(), ARRIVAL);
            match (fast, slow) {
                (TransformOutput::Ok(a), TransformOutput::Ok(b)) => {
                    // Byte for byte: the fast path writes numbers and strings as
                    // serde_json writes the parsed values.
                    proptest::prop_assert_eq!(String::from_utf8_lossy(&a), String::from_utf8_lossy(&b), "{}", input);
                    let va: Value = serde_json::from_slice(&a).unwrap();
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
    fn fast_path_is_taken_and_writes_the_general_paths_bytes() {
        for input in [
            r#"{"tenantId":"t-007","toolName":"search_docs","sessionId":"s-1","ts":1764400000000,"durationMs":412,"success":false,"errorCode":"E_TIMEOUT"}"#,
            r#"{"tenantId":"a\"b","ts":"2026-11-29T10:00:00.5+05:30","durationMs":-0,"success":"yes","x":[1,{"y":2}]}"#,
            r#" { "durationMs" : 1.5e3 , "errorCode" : 18446744073709551615, "sessionId": -12 } "#,
            r#"{"ts":1.7644e12,"tenantId":"\u00e9\u007f"}"#,
        ] {
            let (fast, index) = mcp_normalize_indexed(input.as_bytes(), ARRIVAL);
            assert!(index.is_some(), "fast path not taken for {input}");
            assert_eq!(fast, mcp_normalize_value(input.as_bytes(), ARRIVAL), "{input}");
        }
        for slow in [r#"{"tenantId":"a","tenantId":"b"}"#, r#"{"tenant\u0049d":"a"}"#, r#"{"success":[true]}"#, "[1]"] {
            assert!(mcp_normalize_indexed(slow.as_bytes(), ARRIVAL).1.is_none(), "{slow}");
        }
    }

    #[test]
    fn glue_names_the_fields_in_order() {
        for (i, name) in MCP_FIELDS.iter().enumerate() {
            let glue = GLUE[i].trim_start_matches(['{', ',']);
            assert_eq!(glue, format!("\"{name}\":"));
        }
        assert_eq!(GLUE[MCP_FIELDS.len()], "}\n");
    }

    #[test]
    fn sizes_are_exact_for_all_but_floats_and_escapes() {
        for v in [
            Scalar::Null,
            Scalar::Bool(true),
            Scalar::Bool(false),
            Scalar::Str(b"abc"),
            Scalar::U64(0),
            Scalar::U64(9),
            Scalar::U64(10),
            Scalar::U64(u64::MAX),
            Scalar::I64(-1),
            Scalar::I64(-10),
            Scalar::I64(i64::MIN),
        ] {
            let mut out = Vec::new();
            v.write(&mut out).unwrap();
            assert_eq!(out.len(), v.size(), "{v:?}");
        }
        for v in [Scalar::F64(-1.2345678901234567e-300), Scalar::Owned("\u{1}\"".into())] {
            let mut out = Vec::new();
            v.write(&mut out).unwrap();
            assert!(out.len() <= v.size(), "{v:?}");
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
            assert_eq!(quoted_iso(ms, &mut buf, &mut slow), Some(expected.as_bytes()), "{ms}");
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
}
