//! A one-pass scanner for the shape almost every event has: one JSON object whose
//! members of interest hold scalars, next to anything else (nested `arguments`, say).
//!
//! It is not a JSON parser. It answers "this is such an object, and these are the
//! members you asked for" or "not sure"; on "not sure" the caller takes the reference
//! path, whose parser (serde_json or jaq) decides everything, every error included. It
//! accepts a subset of JSON that both parsers read the same way:
//! - one object, JSON whitespace around it, valid UTF-8 (checked only when a byte is
//!   past ASCII);
//! - top-level keys without escapes (an escaped key could spell a wanted one);
//! - wanted members once each, holding a scalar: `null`, a boolean, a number, or a
//!   string (escapes allowed);
//! - every other value anything JSON allows, nested at most [`MAX_DEPTH`] deep, with
//!   numbers without an exponent and of at most [`MAX_DIGITS`] digits (so neither
//!   parser can find one out of range), and no `\u` escape of a surrogate (which
//!   parsers treat differently when lone).
//!
//! Why it exists: the archiver reads every record's partition-key fields (and
//! `mcp-normalize` its seven fields); through serde's visitors that cost more than the
//! rest of the normaliser (about 0.25 µs of 1.45 µs per record in
//! `cargo bench -p weir-archiver --bench throughput`). A property test checks that the
//! scanner accepts nothing serde_json rejects and reads every wanted value as
//! serde_json does.

/// A wanted member's value.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Scalar<'a> {
    /// `null`.
    Null,
    /// `true` or `false`.
    Bool(bool),
    /// A non-negative integer of at most 19 digits (as serde_json reads it: a `u64`).
    U64(u64),
    /// Any other number: its text, which serde_json reads.
    Number(&'a [u8]),
    /// A string's JSON text, quotes included (valid UTF-8 once the scan returns), and
    /// whether it holds escapes (all valid, none of a surrogate).
    Str(&'a [u8], bool),
}

/// Deepest nesting of a skipped value (serde_json refuses past 128).
pub const MAX_DEPTH: u32 = 64;

/// Most digits of a skipped number (so no number is out of an `f64`'s range).
pub const MAX_DIGITS: usize = 300;

/// Scans `text` (see the module docs): `place` names the slot in `found` of each
/// wanted key. `true` when the whole text was scanned; `found` then holds the wanted
/// members present (`None` for absent ones; `found` must be all `None` on entry).
/// `false` means "not sure", never "invalid": the caller must decide by a full parse
/// (`found` may then hold some members).
pub fn scan<'a>(text: &'a [u8], place: impl Fn(&[u8]) -> Option<usize>, found: &mut [Option<Scalar<'a>>]) -> bool {
    let mut high = 0u64;
    object(text, &place, found, &mut high).is_some()
        // Only strings can hold bytes past ASCII (anything else fails the grammar).
        && (high & HIGH == 0 || std::str::from_utf8(text).is_ok())
}

fn object<'a>(
    b: &'a [u8],
    place: &impl Fn(&[u8]) -> Option<usize>,
    found: &mut [Option<Scalar<'a>>],
    high: &mut u64,
) -> Option<()> {
    let mut i = skip_ws(b, 0);
    expect(b, i, b'{')?;
    i = skip_ws(b, i + 1);
    if b.get(i) == Some(&b'}') {
        return (skip_ws(b, i + 1) == b.len()).then_some(());
    }
    loop {
        let (key, escaped, next) = string(b, i, high)?;
        if escaped {
            return None;
        }
        i = skip_ws(b, next);
        expect(b, i, b':')?;
        i = skip_ws(b, i + 1);
        i = match place(key) {
            Some(slot) => {
                let (value, next) = scalar(b, i, high)?;
                let slot = found.get_mut(slot)?;
                if slot.is_some() {
                    return None;
                }
                *slot = Some(value);
                next
            }
            None => skip_value(b, i, high)?,
        };
        i = skip_ws(b, i);
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

/// The string starting at `i` (its opening quote): its content, whether it holds
/// escapes, and the position after it; `None` for control characters (which JSON
/// forbids unescaped), invalid escapes and escapes of surrogates. Bytes past ASCII are
/// or-ed into `high`.
#[inline(always)]
fn string<'a>(b: &'a [u8], i: usize, high: &mut u64) -> Option<(&'a [u8], bool, usize)> {
    expect(b, i, b'"')?;
    let mut j = i + 1;
    let mut escaped = false;
    loop {
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
        match *b.get(j)? {
            b'"' => return Some((b.get(i + 1..j)?, escaped, j + 1)),
            b'\\' => {
                escaped = true;
                j = escape(b, j + 1)?;
            }
            0..=0x1f => return None,
            c => {
                *high |= u64::from(c);
                j += 1;
            }
        }
    }
}

/// The position after the escape whose letter is at `i`; `None` for invalid escapes
/// and `\u` escapes of a surrogate.
fn escape(b: &[u8], i: usize) -> Option<usize> {
    match *b.get(i)? {
        b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => Some(i + 1),
        b'u' => {
            let hex = std::str::from_utf8(b.get(i + 1..i + 5)?).ok()?;
            if !hex.bytes().all(|c| c.is_ascii_hexdigit()) {
                return None;
            }
            let unit = u16::from_str_radix(hex, 16).ok()?;
            (!(0xd800..=0xdfff).contains(&unit)).then_some(i + 5)
        }
        _ => None,
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

/// A number's shape, from [`number`].
struct Num {
    end: usize,
    digits: usize,
    plain: bool,
    exponent: bool,
}

/// The number starting at `i`, by JSON's grammar
/// (`-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`).
fn number(b: &[u8], i: usize) -> Option<Num> {
    let mut j = i;
    let negative = b.get(j) == Some(&b'-');
    j += usize::from(negative);
    let int_start = j;
    match *b.get(j)? {
        b'0' => j += 1,
        b'1'..=b'9' => {
            while let Some(b'0'..=b'9') = b.get(j) {
                j += 1;
            }
        }
        _ => return None,
    }
    let int_digits = j - int_start;
    let mut digits = int_digits;
    let mut fraction = false;
    if b.get(j) == Some(&b'.') {
        fraction = true;
        let start = j + 1;
        j = start;
        while let Some(b'0'..=b'9') = b.get(j) {
            j += 1;
        }
        if j == start {
            return None;
        }
        digits += j - start;
    }
    let mut exponent = false;
    if let Some(b'e' | b'E') = b.get(j) {
        exponent = true;
        j += 1;
        if let Some(b'+' | b'-') = b.get(j) {
            j += 1;
        }
        let start = j;
        while let Some(b'0'..=b'9') = b.get(j) {
            j += 1;
        }
        if j == start {
            return None;
        }
    }
    let plain = !negative && !fraction && !exponent && int_digits <= 19;
    Some(Num { end: j, digits, plain, exponent })
}

/// A wanted member's value at `i` and the position after it; `None` for nested
/// values and anything invalid.
#[inline(always)]
fn scalar<'a>(b: &'a [u8], i: usize, high: &mut u64) -> Option<(Scalar<'a>, usize)> {
    let literal =
        |word: &[u8], v: Scalar<'static>| b.get(i..i + word.len()).filter(|w| *w == word).map(|_| (v, i + word.len()));
    match *b.get(i)? {
        b'"' => string(b, i, high).map(|(_, escaped, next)| (Scalar::Str(&b[i..next], escaped), next)),
        b't' => literal(b"true", Scalar::Bool(true)),
        b'f' => literal(b"false", Scalar::Bool(false)),
        b'n' => literal(b"null", Scalar::Null),
        b'-' | b'0'..=b'9' => {
            let n = number(b, i)?;
            let text = b.get(i..n.end)?;
            if n.plain {
                // At most 19 digits: always a u64.
                let v = text.iter().fold(0u64, |v, d| v * 10 + u64::from(d - b'0'));
                Some((Scalar::U64(v), n.end))
            } else {
                // Rare: ask serde_json whether it reads it (an exponent out of range).
                serde_json::from_slice::<serde_json::Number>(text).ok()?;
                Some((Scalar::Number(text), n.end))
            }
        }
        _ => None,
    }
}

/// The position after the value at `i`, checked but not read (see the module docs for
/// what is accepted).
fn skip_value(b: &[u8], mut i: usize, high: &mut u64) -> Option<usize> {
    // One bit per open container, innermost lowest: 1 for an object, 0 for an array.
    let (mut stack, mut depth) = (0u64, 0u32);
    loop {
        // A value starts at `i`.
        match *b.get(i)? {
            b'"' => i = string(b, i, high)?.2,
            b't' | b'f' | b'n' => {
                let word: &[u8] = match b[i] {
                    b't' => b"true",
                    b'f' => b"false",
                    _ => b"null",
                };
                b.get(i..i + word.len()).filter(|w| *w == word)?;
                i += word.len();
            }
            b'-' | b'0'..=b'9' => {
                let n = number(b, i)?;
                if n.exponent || n.digits > MAX_DIGITS {
                    return None;
                }
                i = n.end;
            }
            open @ (b'{' | b'[') => {
                depth += 1;
                if depth > MAX_DEPTH {
                    return None;
                }
                let is_object = open == b'{';
                stack = (stack << 1) | u64::from(is_object);
                i = skip_ws(b, i + 1);
                let close = if is_object { b'}' } else { b']' };
                if b.get(i) == Some(&close) {
                    depth -= 1;
                    stack >>= 1;
                    i += 1;
                } else {
                    if is_object {
                        i = member_key(b, i, high)?;
                    }
                    continue;
                }
            }
            _ => return None,
        }
        // After a value: close what ends here, or go on to the next value.
        loop {
            if depth == 0 {
                return Some(i);
            }
            i = skip_ws(b, i);
            let in_object = stack & 1 == 1;
            match (*b.get(i)?, in_object) {
                (b',', _) => {
                    i = skip_ws(b, i + 1);
                    if in_object {
                        i = member_key(b, i, high)?;
                    }
                    break;
                }
                (b'}', true) | (b']', false) => {
                    depth -= 1;
                    stack >>= 1;
                    i += 1;
                }
                _ => return None,
            }
        }
    }
}

/// Reads `"key":` of a nested object's member at `i` (escapes allowed); the position
/// of its value.
fn member_key(b: &[u8], i: usize, high: &mut u64) -> Option<usize> {
    let (_, _, next) = string(b, i, high)?;
    let i = skip_ws(b, next);
    expect(b, i, b':')?;
    Some(skip_ws(b, i + 1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const NAMES: [&str; 3] = ["tenantId", "ts", "a"];

    fn place(key: &[u8]) -> Option<usize> {
        NAMES.iter().position(|n| n.as_bytes() == key)
    }

    fn wanted(text: &[u8]) -> Option<[Option<Scalar<'_>>; 3]> {
        let mut found = [None; 3];
        scan(text, place, &mut found).then_some(found)
    }

    fn ok(text: &str) -> bool {
        wanted(text.as_bytes()).is_some()
    }

    #[test]
    fn reads_an_event() {
        let text = r#" {"tenantId":"t-1","toolName":"search","ts":1764400000000,"durationMs":0,"success":true,"x":[1,{"y":"\u00e9\n"}]}
"#;
        let got = wanted(text.as_bytes()).unwrap();
        assert_eq!(got[0], Some(Scalar::Str(b"\"t-1\"", false)));
        assert_eq!(got[1], Some(Scalar::U64(1_764_400_000_000)));
        assert_eq!(got[2], None);
        assert_eq!(wanted(br#"{"a":"x\"y"}"#).unwrap()[2], Some(Scalar::Str(br#""x\"y""#, true)));
        assert_eq!(wanted(br#"{"a":-1.5e3}"#).unwrap()[2], Some(Scalar::Number(b"-1.5e3")));
        assert_eq!(wanted(br#"{"a":12345678901234567890}"#).unwrap()[2], Some(Scalar::Number(b"12345678901234567890")));
        assert_eq!(wanted(br#"{"a":null}"#).unwrap()[2], Some(Scalar::Null));
        assert!(ok("{}"));
        assert!(ok(" { } \r\n\t"));
        assert!(ok(r#"{"x":{},"y":[],"z":[[],{}],"w":{"a":{"b":[1,2.5,-0,"s",true,null]}}}"#));
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
            r#"{"a":01}"#,
            r#"{"a":1.}"#,
            r#"{"a":.5}"#,
            r#"{"a":1e}"#,
            r#"{"a":-}"#,
            r#"{"a\u0041":1}"#,
            "{\"a\":\"tab\there\"}",
            r#"{"a":"\x"}"#,
            r#"{"a":"\u12"}"#,
            r#"{"a":"\ud800"}"#,
            r#"{"x":"\udfff"}"#,
            r#"{"a":{"b":1}}"#,
            r#"{"a":[1]}"#,
            r#"{"a":1,"a":2}"#,
            r#"{"a":tru}"#,
            r#"{"x":nul}"#,
            r#"{"a":1} x"#,
            r#"{"a":1}{"#,
            r#"{"a":"unterminated}"#,
            r#"{"x":1e5}"#,
            r#"{"x":[1,]}"#,
            r#"{"x":{"a":1,}}"#,
            r#"{"x":{"a" 1}}"#,
            r#"{"x":{1:2}}"#,
            r#"{"x":[1}"#,
            r#"{"x":{"a":1]}"#,
            r#"{"x":[1 2]}"#,
            "\u{feff}{}",
        ] {
            assert!(!ok(text), "{text:?}");
        }
        let deep = format!("{{\"x\":{}{}}}", "[".repeat(MAX_DEPTH as usize), "]".repeat(MAX_DEPTH as usize));
        assert!(ok(&deep));
        let deeper = format!("{{\"x\":{}{}}}", "[".repeat(MAX_DEPTH as usize + 1), "]".repeat(MAX_DEPTH as usize + 1));
        assert!(!ok(&deeper));
        assert!(ok(&format!("{{\"x\":{}}}", "9".repeat(MAX_DIGITS))));
        assert!(!ok(&format!("{{\"x\":{}}}", "9".repeat(MAX_DIGITS + 1))));
    }

    #[test]
    fn finds_the_first_stop_at_every_offset() {
        for at in 0..24 {
            let filler = "a".repeat(at);
            let text = format!("\"{filler}\"\u{1}\\\"");
            assert_eq!(string(text.as_bytes(), 0, &mut 0), Some((filler.as_bytes(), false, at + 2)), "{text:?}");
            for stop in ['\u{1}', '\u{1f}'] {
                let text = format!("\"{filler}{stop}\"{}\"", "b".repeat(9));
                assert_eq!(string(text.as_bytes(), 0, &mut 0), None, "{text:?}");
            }
            let text = format!("\"{filler}\\\"{}\"", "b".repeat(9));
            assert_eq!(string(text.as_bytes(), 0, &mut 0).map(|(_, e, end)| (e, end)), Some((true, text.len())));
            let text = format!("\"{filler}\u{7f}é😀 \"");
            let mut high = 0;
            assert_eq!(string(text.as_bytes(), 0, &mut high).map(|(s, ..)| s.len()), Some(at + 8), "{text:?}");
            assert_ne!(high & HIGH, 0, "bytes past ASCII are seen at offset {at}");
            let mut high = 0;
            string(format!("\"{filler}\"é").as_bytes(), 0, &mut high);
            assert_eq!(high & HIGH, 0, "bytes after the string are not its own (offset {at})");
        }
    }

    /// Texts near the scanner's shape: objects of chosen keys and values (nested ones
    /// too), with whitespace, and sometimes a byte changed.
    fn near_events() -> impl Strategy<Value = String> {
        let key = prop_oneof![
            Just("tenantId".to_owned()),
            Just("ts".to_owned()),
            Just("a".to_owned()),
            Just("".to_owned()),
            "[a-z\\\\\"\u{0}-\u{1f}é]{0,6}".prop_map(|s| s),
        ];
        let leaf = prop_oneof![
            "\"[a-z0-9 /.\\\\\"\u{0}-\u{1f}\u{7f}é😀]{0,8}\"",
            "\"[a-z0-9-]{0,30}[\\\\\"\u{0}-\u{1f}\u{7f}é😀]?[a-z0-9-]{0,20}\"",
            "\"(\\\\[\"\\\\/bfnrtux]|\\\\u[0-9a-fA-F]{4}|\\\\u[dD][89abAB][0-9a-f]{2}|[a-z])*\"",
            any::<u64>().prop_map(|n| n.to_string()),
            any::<i64>().prop_map(|n| n.to_string()),
            "-?[0-9]{1,22}(\\.[0-9]{0,3})?([eE][+-]?[0-9]{0,3})?",
            Just("true".to_owned()),
            Just("false".to_owned()),
            Just("null".to_owned()),
            Just("nul".to_owned()),
            Just("-0".to_owned()),
            Just("1e400".to_owned()),
        ];
        let value = leaf.prop_recursive(3, 12, 3, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..3).prop_map(|v| format!("[{}]", v.join(","))),
                proptest::collection::vec(("[a-c\\\\\"]{0,2}", inner), 0..3).prop_map(|v| format!(
                    "{{{}}}",
                    v.iter().map(|(k, v)| format!("\"{k}\":{v}")).collect::<Vec<_>>().join(",")
                )),
            ]
        });
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

    /// What serde_json reads of a wanted member's value.
    fn as_value(v: Scalar<'_>) -> serde_json::Value {
        match v {
            Scalar::Null => serde_json::Value::Null,
            Scalar::Bool(b) => b.into(),
            Scalar::U64(n) => n.into(),
            Scalar::Number(t) => serde_json::from_slice(t).unwrap(),
            Scalar::Str(s, false) => String::from_utf8(s[1..s.len() - 1].to_vec()).unwrap().into(),
            Scalar::Str(s, true) => serde_json::from_slice(s).unwrap(),
        }
    }

    /// Whatever the scanner accepts, serde_json reads as a `Value` (every string
    /// checked), with the same wanted members, and jaq reads too.
    fn agrees_with_the_parsers(text: &[u8]) -> Result<(), TestCaseError> {
        let Some(got) = wanted(text) else { return Ok(()) };
        let parsed: Result<serde_json::Value, _> = serde_json::from_slice(text);
        prop_assert!(parsed.is_ok(), "scanner accepted what serde_json rejects: {:?}", String::from_utf8_lossy(text));
        prop_assert!(jaq_json::read::parse_single(text).is_ok(), "jaq rejects {:?}", String::from_utf8_lossy(text));
        let parsed = parsed.unwrap_or_default();
        for (slot, name) in NAMES.iter().enumerate() {
            let want = parsed.get(name).cloned();
            let got = got[slot].map(as_value);
            // (Numbers compare by kind too: a u64 is not the float of the same value.)
            prop_assert_eq!(&got, &want, "{} in {:?}", name, String::from_utf8_lossy(text));
        }
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4000))]
        #[test]
        fn accepts_only_what_serde_json_reads_the_same(text in near_events()) {
            agrees_with_the_parsers(text.as_bytes())?;
        }

        /// The same with bytes that need not be UTF-8: a changed byte anywhere, or a
        /// cut inside a character.
        #[test]
        fn accepts_no_invalid_utf8(text in near_events(), at in any::<prop::sample::Index>(), byte in 0x80u8..) {
            let mut bytes = text.into_bytes();
            let at = at.index(bytes.len());
            bytes[at] = byte;
            agrees_with_the_parsers(&bytes)?;
            agrees_with_the_parsers(&bytes[..at])?;
        }

        /// Plain events are always scanned (the fast path is the common path).
        #[test]
        fn scans_plain_events(tenant in "[a-z0-9-]{0,12}", ts in 0..10u64.pow(19), ok in any::<bool>(), args in "[a-z \\\\\"é]{0,20}") {
            let args = serde_json::to_string(&args).unwrap();
            let text = format!(r#"{{"tenantId":"{tenant}","ts":{ts},"success":{ok},"errorCode":null,"arguments":{{"q":{args},"n":[1.5,-2]}}}}"#);
            prop_assert!(wanted(text.as_bytes()).is_some(), "{}", text);
        }
    }
}
