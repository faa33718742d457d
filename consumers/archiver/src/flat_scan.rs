//! A scanner for the shape almost every event has: one JSON object whose values are
//! strings without escapes, non-negative integers, booleans or null.
//!
//! It is not a JSON parser. It answers "this is such an object, and these are its
//! members" or "not sure"; on "not sure" the caller asks `serde_json`, which stays the
//! reference for everything (escapes, negative or fractional numbers, nested values,
//! and every error). A property test checks that the scanner accepts nothing
//! `serde_json` rejects and reads every value as `serde_json` does.
//!
//! Why it exists: `mcp-normalize` runs once per archived record, and reading an
//! event's seven fields through serde's visitors cost more than the rest of the
//! normaliser (about 0.25 µs of the archiver's 1.45 µs per record in the throughput
//! bench). This scan is one pass over the bytes.

/// A member's value.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum FlatValue<'a> {
    /// `null`.
    Null,
    /// `true` or `false`.
    Bool(bool),
    /// A non-negative integer of at most 19 digits (as `serde_json` reads it: `u64`).
    U64(u64),
    /// A string without escapes, as it stands between its quotes (valid UTF-8).
    Str(&'a [u8]),
}

/// Calls `member` with each key and value of `text`, in order, when `text` is one JSON
/// object of the shape above surrounded by optional JSON whitespace, and valid UTF-8;
/// `member` returns `false` to stop. `true` when the whole text was scanned; `false`
/// means "not sure" (or `member` stopped), never "invalid": the caller must then decide
/// by a full parse. Members may have been reported before `false` (and before the
/// UTF-8 check, which runs at the end, and only when a byte is not ASCII).
pub fn scan_flat<'a>(text: &'a [u8], mut member: impl FnMut(&'a [u8], FlatValue<'a>) -> bool) -> bool {
    let mut high = 0u64;
    scan(text, &mut high, &mut member).is_some()
        // Only strings can hold bytes past ASCII (anything else fails the grammar).
        && (high & HIGH == 0 || std::str::from_utf8(text).is_ok())
}

fn scan<'a>(b: &'a [u8], high: &mut u64, member: &mut impl FnMut(&'a [u8], FlatValue<'a>) -> bool) -> Option<()> {
    let mut i = skip_ws(b, 0);
    expect(b, i, b'{')?;
    i = skip_ws(b, i + 1);
    if b.get(i) == Some(&b'}') {
        return (skip_ws(b, i + 1) == b.len()).then_some(());
    }
    loop {
        let (key, next) = string(b, i, high)?;
        i = skip_ws(b, next);
        expect(b, i, b':')?;
        i = skip_ws(b, i + 1);
        let (value, next) = value(b, i, high)?;
        if !member(key, value) {
            return None;
        }
        i = skip_ws(b, next);
        match b.get(i)? {
            b',' => i = skip_ws(b, i + 1),
            b'}' => return (skip_ws(b, i + 1) == b.len()).then_some(()),
            _ => return None,
        }
    }
}

fn expect(b: &[u8], i: usize, byte: u8) -> Option<()> {
    (b.get(i) == Some(&byte)).then_some(())
}

/// The first position at or after `i` that is not JSON whitespace.
fn skip_ws(b: &[u8], mut i: usize) -> usize {
    while let Some(b' ' | b'\n' | b'\t' | b'\r') = b.get(i) {
        i += 1;
    }
    i
}

/// The string starting at `i` (its opening quote) and the position after it; `None`
/// for escapes and control characters (which JSON forbids unescaped). Bytes past ASCII
/// are or-ed into `high`.
#[inline(always)]
fn string<'a>(b: &'a [u8], i: usize, high: &mut u64) -> Option<(&'a [u8], usize)> {
    expect(b, i, b'"')?;
    let mut j = i + 1;
    // Eight bytes at a time: most of an event's bytes are inside strings.
    while let Some(word) = b.get(j..j + 8) {
        let word = u64::from_le_bytes(word.try_into().ok()?);
        let stops = stops(word);
        if stops != 0 {
            // Only the bytes before the stop are the string's.
            *high |= word & (stops - 1);
            j += (stops.trailing_zeros() / 8) as usize;
            break;
        }
        *high |= word;
        j += 8;
    }
    loop {
        match *b.get(j)? {
            b'"' => return Some((b.get(i + 1..j)?, j + 1)),
            b'\\' | 0..=0x1f => return None,
            c => {
                *high |= u64::from(c);
                j += 1;
            }
        }
    }
}

const ONES: u64 = 0x0101_0101_0101_0101;
const HIGH: u64 = ONES * 0x80;

/// The high bit of each byte of `word` (little-endian) that is `"`, `\` or below 0x20,
/// exact up to the first such byte (the usual "has zero byte" test: borrows can only
/// mark bytes after a true one).
fn stops(word: u64) -> u64 {
    let zero = |x: u64| x.wrapping_sub(ONES) & !x;
    let quote = zero(word ^ (ONES * u64::from(b'"')));
    let backslash = zero(word ^ (ONES * u64::from(b'\\')));
    let control = word.wrapping_sub(ONES * 0x20) & !word;
    (quote | backslash | control) & HIGH
}

/// The value starting at `i` and the position after it.
#[inline(always)]
fn value<'a>(b: &'a [u8], i: usize, high: &mut u64) -> Option<(FlatValue<'a>, usize)> {
    let literal = |word: &[u8], v: FlatValue<'static>| {
        b.get(i..i + word.len()).filter(|w| *w == word).map(|_| (v, i + word.len()))
    };
    match *b.get(i)? {
        b'"' => string(b, i, high).map(|(s, next)| (FlatValue::Str(s), next)),
        b't' => literal(b"true", FlatValue::Bool(true)),
        b'f' => literal(b"false", FlatValue::Bool(false)),
        b'n' => literal(b"null", FlatValue::Null),
        b'0' => match b.get(i + 1) {
            // A fraction, an exponent or a leading zero: serde_json decides.
            Some(b'0'..=b'9' | b'.' | b'e' | b'E') => None,
            _ => Some((FlatValue::U64(0), i + 1)),
        },
        b'1'..=b'9' => {
            let mut n = 0u64;
            let mut j = i;
            while let Some(d @ b'0'..=b'9') = b.get(j) {
                // 19 digits always fit in a u64; longer numbers go to serde_json.
                if j - i == 19 {
                    return None;
                }
                n = n * 10 + u64::from(d - b'0');
                j += 1;
            }
            match b.get(j) {
                Some(b'.' | b'e' | b'E') => None,
                _ => Some((FlatValue::U64(n), j)),
            }
        }
        // Negative numbers, nested values, anything else: serde_json decides.
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn members(text: &str) -> Option<Vec<(String, FlatValue<'_>)>> {
        members_of(text.as_bytes())
    }

    fn members_of(text: &[u8]) -> Option<Vec<(String, FlatValue<'_>)>> {
        let mut out = Vec::new();
        // Keys are reported before the UTF-8 check: converted only once it passed.
        let done = scan_flat(text, |k, v| {
            out.push((k, v));
            true
        });
        done.then(|| out.into_iter().map(|(k, v)| (String::from_utf8(k.to_vec()).unwrap(), v)).collect())
    }

    #[test]
    fn reads_an_event() {
        let text = r#" {"tenantId":"t-1","toolName":"search","ts":1764400000000,"durationMs":0,"success":true,"errorCode":null,"x":false}
"#;
        let got = members(text).unwrap();
        assert_eq!(got[0], ("tenantId".into(), FlatValue::Str(b"t-1")));
        assert_eq!(got[2], ("ts".into(), FlatValue::U64(1_764_400_000_000)));
        assert_eq!(got[3], ("durationMs".into(), FlatValue::U64(0)));
        assert_eq!(got[4].1, FlatValue::Bool(true));
        assert_eq!(got[5].1, FlatValue::Null);
        assert_eq!(got[6].1, FlatValue::Bool(false));
        assert_eq!(members("{}"), Some(vec![]));
        assert_eq!(members(" { } \r\n\t"), Some(vec![]));
    }

    #[test]
    fn is_not_sure_of_anything_else() {
        for text in [
            "",
            "{",
            "}",
            "[]",
            "null",
            r#"{"a":1,}"#,
            r#"{"a":1 "b":2}"#,
            r#"{"a" 1}"#,
            r#"{"a":-1}"#,
            r#"{"a":01}"#,
            r#"{"a":1.5}"#,
            r#"{"a":1e3}"#,
            r#"{"a":0.5}"#,
            r#"{"a":12345678901234567890}"#,
            r#"{"a":"x\"y"}"#,
            r#"{"a\u0041":1}"#,
            "{\"a\":\"tab\there\"}",
            r#"{"a":{"b":1}}"#,
            r#"{"a":[1]}"#,
            r#"{"a":tru}"#,
            r#"{"a":nul}"#,
            r#"{"a":1} x"#,
            r#"{"a":1}{"#,
            r#"{"a":"unterminated}"#,
            "\u{feff}{}",
        ] {
            assert_eq!(members(text), None, "{text:?}");
        }
    }

    #[test]
    fn finds_the_first_stop_at_every_offset() {
        for at in 0..24 {
            let filler = "a".repeat(at);
            let text = format!("\"{filler}\"\u{1}\\\"");
            assert_eq!(string(text.as_bytes(), 0, &mut 0), Some((filler.as_bytes(), at + 2)), "{text:?}");
            for stop in ['\\', '\u{1}', '\u{1f}'] {
                let text = format!("\"{filler}{stop}\"{}\"", "b".repeat(9));
                assert_eq!(string(text.as_bytes(), 0, &mut 0), None, "{text:?}");
            }
            let text = format!("\"{filler}\u{7f}é😀 \"");
            let mut high = 0;
            assert_eq!(string(text.as_bytes(), 0, &mut high).map(|(s, _)| s.len()), Some(at + 8), "{text:?}");
            assert_ne!(high & HIGH, 0, "bytes past ASCII are seen at offset {at}");
            let mut high = 0;
            string(format!("\"{filler}\"é").as_bytes(), 0, &mut high);
            assert_eq!(high & HIGH, 0, "bytes after the string are not its own (offset {at})");
        }
    }

    #[test]
    fn stops_when_asked() {
        assert!(!scan_flat(br#"{"a":1,"b":2}"#, |k, _| k != b"b"));
    }

    /// Texts near the scanner's shape: flat objects of chosen keys and values, with
    /// whitespace, and sometimes a byte changed.
    fn near_events() -> impl Strategy<Value = String> {
        let key = prop_oneof![
            Just("tenantId".to_owned()),
            Just("ts".to_owned()),
            Just("".to_owned()),
            "[a-z\\\\\"\u{0}-\u{1f}é]{0,6}".prop_map(|s| s),
        ];
        let value = prop_oneof![
            "\"[a-z0-9 /.\\\\\"\u{0}-\u{1f}\u{7f}é😀]{0,8}\"",
            "\"[a-z0-9-]{0,30}[\\\\\"\u{0}-\u{1f}\u{7f}é😀]?[a-z0-9-]{0,20}\"",
            any::<u64>().prop_map(|n| n.to_string()),
            any::<i64>().prop_map(|n| n.to_string()),
            "-?[0-9]{1,22}(\\.[0-9]{0,3})?([eE][+-]?[0-9]{0,3})?",
            Just("true".to_owned()),
            Just("false".to_owned()),
            Just("null".to_owned()),
            Just("nul".to_owned()),
            Just("{}".to_owned()),
            Just("[1,2]".to_owned()),
            Just("-0".to_owned()),
        ];
        let ws = "[ \t\r\n]{0,2}";
        let member = (key, ws, ws, value).prop_map(|(k, a, b, v)| format!("\"{k}\"{a}:{b}{v}"));
        (ws, proptest::collection::vec((member, ws), 0..6), ws, any::<Option<(prop::sample::Index, u8)>>()).prop_map(
            |(lead, members, trail, change)| {
                let body: Vec<String> = members.into_iter().map(|(m, w)| format!("{m}{w}")).collect();
                let mut text = format!("{lead}{{{}}}{trail}", body.join(","));
                if let Some((at, byte)) = change {
                    let mut bytes = text.into_bytes();
                    let at = at.index(bytes.len());
                    bytes[at] = byte;
                    text = String::from_utf8_lossy(&bytes).into_owned();
                }
                text
            },
        )
    }

    /// What serde_json makes of `text` as one object of scalar members.
    fn serde_members(text: &str) -> Option<Vec<(String, serde_json::Value)>> {
        serde_members_of(text.as_bytes())
    }

    fn serde_members_of(text: &[u8]) -> Option<Vec<(String, serde_json::Value)>> {
        use serde::de::{Deserializer as _, MapAccess, Visitor};
        struct Members;
        impl<'de> Visitor<'de> for Members {
            type Value = Vec<(String, serde_json::Value)>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut out = Vec::new();
                while let Some(entry) = map.next_entry::<String, serde_json::Value>()? {
                    out.push(entry);
                }
                Ok(out)
            }
        }
        // from_str, as the normaliser's general path reads text (from_slice would not
        // check the UTF-8 of strings it skips).
        let mut de = serde_json::Deserializer::from_str(std::str::from_utf8(text).ok()?);
        let members = de.deserialize_map(Members).ok()?;
        de.end().ok()?;
        Some(members)
    }

    fn as_value(v: FlatValue<'_>) -> serde_json::Value {
        match v {
            FlatValue::Null => serde_json::Value::Null,
            FlatValue::Bool(b) => b.into(),
            FlatValue::U64(n) => n.into(),
            FlatValue::Str(s) => String::from_utf8(s.to_vec()).unwrap().into(),
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4000))]
        /// Whatever the scanner accepts, serde_json accepts with the same members and
        /// values (numbers of the same kind: a u64).
        #[test]
        fn accepts_only_what_serde_json_reads_the_same(text in near_events()) {
            if let Some(got) = members(&text) {
                let want = serde_members(&text);
                prop_assert!(want.is_some(), "scanner accepted what serde_json rejects: {text:?}");
                let got: Vec<(String, serde_json::Value)> = got.into_iter().map(|(k, v)| (k, as_value(v))).collect();
                let want = want.unwrap_or_default();
                prop_assert_eq!(&got, &want, "{:?}", text);
                for (_, v) in &want {
                    if let serde_json::Value::Number(n) = v {
                        prop_assert!(n.is_u64(), "{text:?}");
                    }
                }
            }
        }

        /// The same with bytes that need not be UTF-8: a changed byte anywhere, or a
        /// cut inside a character.
        #[test]
        fn accepts_no_invalid_utf8(text in near_events(), at in any::<prop::sample::Index>(), byte in 0x80u8..) {
            let mut bytes = text.into_bytes();
            let at = at.index(bytes.len());
            bytes[at] = byte;
            for text in [&bytes[..], &bytes[..at]] {
                if let Some(got) = members_of(text) {
                    let want = serde_members_of(text);
                    prop_assert!(want.is_some(), "scanner accepted what serde_json rejects: {text:?}");
                    let got: Vec<(String, serde_json::Value)> = got.into_iter().map(|(k, v)| (k, as_value(v))).collect();
                    prop_assert_eq!(got, want.unwrap_or_default());
                }
            }
        }

        /// Plain events are always scanned (the fast path is the common path).
        #[test]
        fn scans_plain_events(tenant in "[a-z0-9-]{0,12}", ts in 0..10u64.pow(19), ok in any::<bool>()) {
            let text = format!(r#"{{"tenantId":"{tenant}","ts":{ts},"success":{ok},"errorCode":null}}"#);
            prop_assert_eq!(members(&text).map(|m| m.len()), Some(4));
        }
    }
}
