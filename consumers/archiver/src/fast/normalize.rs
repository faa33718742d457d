//! `mcp-normalize` in one pass: the archive line of [`weir_mcp::normalize_line`]
//! written straight from the scanned fields ([`mod@crate::fast::scan`]), byte for byte,
//! without building a tree, at its exact size, with where each field's value lies (so
//! partition keys are read from the line without parsing it again). Anything it is
//! not sure of (a `ts` it cannot turn into a four-digit-year time, a number or string
//! serde_json would write differently) is left to the reference.

use chrono::{DateTime, Datelike, Timelike};
use weir_core::Timestamp;

use crate::fast::scan::{Scalar, scan};

/// The place of `key` in [`weir_mcp::INPUT_FIELDS`] (a match: this runs for every key
/// of every record; a test keeps the two equal).
pub fn input_place(key: &[u8]) -> Option<usize> {
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

/// Where each of [`weir_mcp::ARCHIVE_FIELDS`]'s values lies in a written line (byte
/// ranges from the line's start).
pub type Places = [(u32, u32); 8];

/// Appends the archive line of event `data` (arrived at `arrival`) to `out`: where its
/// fields' values lie, or `None` when not sure (`out` is then as it was).
pub fn write(data: &[u8], arrival: Timestamp, out: &mut Vec<u8>) -> Option<Places> {
    let mut fields = [None; 7];
    if !scan(data, input_place, &mut fields) {
        return None;
    }
    let start = out.len();
    let places = write_fields(&fields, arrival, out);
    if places.is_none() {
        out.truncate(start);
    }
    places
}

/// The text before each value of a line, and after the last one.
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

fn write_fields(fields: &[Option<Scalar<'_>>; 7], arrival: Timestamp, out: &mut Vec<u8>) -> Option<Places> {
    let given = |i: usize| fields[i].filter(|v| *v != Scalar::Null);
    let millis = match given(3) {
        None => arrival.as_millis(),
        Some(ts) => ts_millis(ts)?,
    };
    let mut ts = [0u8; 26];
    quoted_iso(millis, &mut ts)?;
    // The constants of the schema, as JSON text (a test checks them against weir_mcp).
    const UNKNOWN: Scalar<'static> = Scalar::Str(b"\"unknown\"", false);
    let values: [Scalar<'_>; 8] = [
        Scalar::Str(b"\"1\"", false),
        given(0).unwrap_or(UNKNOWN),
        given(1).unwrap_or(UNKNOWN),
        given(2).unwrap_or(Scalar::Null),
        Scalar::Null, // `timestamp_utc`, written from `ts`
        given(4).unwrap_or(Scalar::Null),
        given(5).unwrap_or(Scalar::Null),
        given(6).unwrap_or(Scalar::Null),
    ];
    let size: usize = GLUE.iter().map(|g| g.len()).sum::<usize>() + values.iter().map(size_of).sum::<usize>() + 26;
    out.reserve(size);
    let line_start = out.len();
    let mut places = [(0u32, 0u32); 8];
    for (i, value) in values.iter().enumerate() {
        out.extend_from_slice(GLUE[i].as_bytes());
        let at = out.len() - line_start;
        if i == 4 {
            out.extend_from_slice(&ts);
        } else {
            write_value(value, out)?;
        }
        places[i] = (u32::try_from(at).ok()?, u32::try_from(out.len() - line_start).ok()?);
    }
    out.extend_from_slice(GLUE[8].as_bytes());
    Some(places)
}

/// Epoch milliseconds of a present `ts`, by the reference's rules (numbers through an
/// `f64`, fractions cut; strings as RFC 3339); `None` when it is not a time.
fn ts_millis(ts: Scalar<'_>) -> Option<i64> {
    match ts {
        Scalar::U64(n) => Some(n as f64 as i64),
        Scalar::Number(text) => serde_json::from_slice::<serde_json::Number>(text).ok()?.as_f64().map(|f| f as i64),
        Scalar::Str(s, escaped) => {
            let text: std::borrow::Cow<'_, str> = if escaped {
                serde_json::from_slice::<String>(s).ok()?.into()
            } else {
                std::str::from_utf8(s.get(1..s.len() - 1)?).ok()?.into()
            };
            let t = DateTime::parse_from_rfc3339(&text).ok()?;
            // A leap second (`:60`) is written as such by the reference.
            (t.timestamp_subsec_nanos() < 1_000_000_000).then(|| t.timestamp_millis())
        }
        Scalar::Null | Scalar::Bool(_) => None,
    }
}

/// Writes `"yyyy-MM-ddTHH:mm:ss.SSSZ"` (quoted) of epoch milliseconds `ms` into `buf`:
/// chrono's date, written without its formatter (this runs once per record). `None`
/// outside chrono's range and outside four-digit years (chrono writes those with a
/// sign and more digits; the reference does it).
fn quoted_iso(ms: i64, buf: &mut [u8; 26]) -> Option<()> {
    let t = DateTime::from_timestamp_millis(ms)?;
    let year = u32::try_from(t.year()).ok().filter(|y| *y <= 9999)?;
    let mut put = |at: usize, value: u32, width: usize| {
        let mut v = value;
        for i in (0..width).rev() {
            buf[at + i] = b'0' + (v % 10) as u8;
            v /= 10;
        }
    };
    put(1, year, 4);
    put(6, t.month(), 2);
    put(9, t.day(), 2);
    put(12, t.hour(), 2);
    put(15, t.minute(), 2);
    put(18, t.second(), 2);
    put(21, t.timestamp_subsec_millis(), 3);
    for (at, b) in
        [(0, b'"'), (5, b'-'), (8, b'-'), (11, b'T'), (14, b':'), (17, b':'), (20, b'.'), (24, b'Z'), (25, b'"')]
    {
        buf[at] = b;
    }
    Some(())
}

/// Writes a value as serde_json writes the same parsed `Value`; `None` when serde_json
/// would not read it (a number out of range).
#[inline]
fn write_value(value: &Scalar<'_>, out: &mut Vec<u8>) -> Option<()> {
    match value {
        Scalar::Null => out.extend_from_slice(b"null"),
        Scalar::Bool(b) => out.extend_from_slice(if *b { b"true" } else { b"false" }),
        // Without escapes the text is what serde_json writes: no quote, backslash or
        // control character, and it leaves every other character as it is.
        Scalar::Str(s, false) => out.extend_from_slice(s),
        Scalar::Str(s, true) => {
            let text: String = serde_json::from_slice(s).ok()?;
            serde_json::to_writer(&mut *out, &text).ok()?;
        }
        Scalar::U64(n) => serde_json::to_writer(&mut *out, n).ok()?,
        Scalar::Number(text) => {
            let n: serde_json::Number = serde_json::from_slice(text).ok()?;
            serde_json::to_writer(&mut *out, &n).ok()?;
        }
    }
    Some(())
}

/// Bytes [`write_value`] writes; a bound for numbers and escaped strings.
fn size_of(value: &Scalar<'_>) -> usize {
    match value {
        Scalar::Null | Scalar::Bool(true) => 4,
        Scalar::Bool(false) => 5,
        Scalar::Str(s, false) => s.len(),
        Scalar::Str(s, true) => s.len() * 6,
        Scalar::U64(n) => n.checked_ilog10().map_or(1, |d| d as usize + 1),
        Scalar::Number(t) => t.len().max(24),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{TimeZone, Utc};

    const ARRIVAL: Timestamp = Timestamp::from_millis(1_764_400_000_000);

    #[test]
    fn input_places_follow_the_input_fields() {
        for (i, name) in weir_mcp::INPUT_FIELDS.iter().enumerate() {
            assert_eq!(input_place(name.as_bytes()), Some(i));
        }
        assert_eq!(input_place(b"tenant_id"), None);
    }

    #[test]
    fn constants_are_the_schemas() {
        assert_eq!(serde_json::to_string(weir_mcp::UNKNOWN).unwrap(), "\"unknown\"");
        assert_eq!(serde_json::to_string(weir_mcp::SCHEMA_VERSION).unwrap(), "\"1\"");
    }

    #[test]
    fn glue_names_the_fields_in_order() {
        for (i, name) in weir_mcp::ARCHIVE_FIELDS.iter().enumerate() {
            let glue = GLUE[i].trim_start_matches(['{', ',']);
            assert_eq!(glue, format!("\"{name}\":"));
        }
        assert_eq!(GLUE[weir_mcp::ARCHIVE_FIELDS.len()], "}\n");
    }

    fn line(input: &str) -> Option<(String, Places)> {
        let mut out = b"before".to_vec();
        let places = write(input.as_bytes(), ARRIVAL, &mut out);
        match places {
            Some(p) => Some((String::from_utf8(out[6..].to_vec()).unwrap(), p)),
            None => {
                assert_eq!(out, b"before", "left as it was");
                None
            }
        }
    }

    #[test]
    fn writes_the_references_bytes_and_says_where_fields_are() {
        for input in [
            r#"{"tenantId":"t-007","toolName":"search_docs","sessionId":"s-1","ts":1764400000000,"durationMs":412,"success":false,"errorCode":"E_TIMEOUT"}"#,
            r#"{"tenantId":"a\"b","ts":"2026-11-29T10:00:00.5+05:30","durationMs":-0,"success":"yes","x":[1,{"y":2}]}"#,
            r#" { "durationMs" : 1.5e3 , "errorCode" : 18446744073709551615, "sessionId": -12 } "#,
            r#"{"ts":1.7644e12,"tenantId":"\u00e9\u007f","arguments":{"q":"caf\u00e9 \"x\""}}"#,
            r#"{"ts":"2026-11-29T10:00:00Z","toolName":"a\/b\n"}"#,
            "{}",
        ] {
            let (text, places) = line(input).unwrap_or_else(|| panic!("not written: {input}"));
            let reference = String::from_utf8(weir_mcp::normalize_line(input.as_bytes(), ARRIVAL).unwrap()).unwrap();
            assert_eq!(text, reference, "{input}");
            let parsed: serde_json::Value = serde_json::from_str(&text).unwrap();
            for (i, name) in weir_mcp::ARCHIVE_FIELDS.iter().enumerate() {
                let (a, b) = places[i];
                let value: serde_json::Value = serde_json::from_str(&text[a as usize..b as usize]).unwrap();
                assert_eq!(value, parsed[name], "{name} of {input}");
            }
        }
    }

    #[test]
    fn leaves_to_the_reference_what_it_is_not_sure_of() {
        for input in [
            r#"{"tenantId":"a","tenantId":"b"}"#,
            r#"{"tenant\u0049d":"a"}"#,
            r#"{"success":[true]}"#,
            r#"{"ts":"yesterday"}"#,
            r#"{"ts":1e400}"#,
            r#"{"durationMs":1e400}"#,
            r#"{"ts":-99999999999999999}"#,
            r#"{"ts":253402300800000}"#,
            "[1]",
            "5",
            "not json",
        ] {
            assert!(line(input).is_none(), "{input}");
        }
    }

    proptest::proptest! {
        /// The timestamp written without the formatter is chrono's RFC 3339 text.
        #[test]
        fn quoted_iso_is_chronos_text(ms in -70_000_000_000_000i64..300_000_000_000_000i64) {
            let t = Utc.timestamp_millis_opt(ms).single().unwrap();
            let mut buf = [0u8; 26];
            let expected = format!("\"{}\"", weir_mcp::timestamp_text(t));
            match quoted_iso(ms, &mut buf) {
                Some(()) => proptest::prop_assert_eq!(&buf[..], expected.as_bytes()),
                None => proptest::prop_assert!(expected.len() != 26, "{}", expected),
            }
        }
    }

    #[test]
    fn quoted_iso_at_the_edges_of_four_digit_years() {
        let mut buf = [0u8; 26];
        for (ms, text) in [
            (-62_167_219_200_000, Some("0000-01-01T00:00:00.000Z")),
            (-62_167_219_200_001, None),
            (253_402_300_799_999, Some("9999-12-31T23:59:59.999Z")),
            (253_402_300_800_000, None),
            (-1, Some("1969-12-31T23:59:59.999Z")),
            (951_782_400_000, Some("2000-02-29T00:00:00.000Z")),
            (i64::MAX, None),
        ] {
            let got = quoted_iso(ms, &mut buf).map(|()| String::from_utf8(buf.to_vec()).unwrap());
            assert_eq!(got, text.map(|t| format!("\"{t}\"")), "{ms}");
        }
    }
}
