//! How `timestamp` and `date` columns read JSON values.
//!
//! - OpenX JSON SerDe: [`openx_timestamp_micros`] (its `parseTimestamp`: epoch seconds
//!   or milliseconds by length, fractional seconds, or a date and time).
//! - Hive JSON SerDe: [`hive_timestamp_micros`]: the `TimestampFormats` in order —
//!   `millis` (epoch milliseconds, as a number or text) or a Joda pattern
//!   (`yyyy-MM-dd'T'HH:mm:ss.SSSZ`) — then `java.sql.Timestamp.valueOf`
//!   ([`java_timestamp_value_of`]), which is also all there is without formats.
//!
//! [`timestamp_micros`] is the date-and-time text the OpenX SerDe reads (SQL or ISO
//! 8601 with `T` and a zone). Values with a zone are converted to UTC; the column has
//! no zone, as Hive's.

use chrono::{DateTime, NaiveDate, NaiveDateTime};

/// One entry of `TimestampFormats`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TimestampFormat {
    /// `millis`: epoch milliseconds.
    Millis,
    /// A Joda pattern, as chrono's format string, and whether it has a zone.
    Pattern {
        /// The pattern as given.
        joda: String,
        /// The same in chrono's `strftime` syntax.
        chrono: String,
        /// It names an offset (`Z`).
        zoned: bool,
        /// It has a time of day (otherwise midnight).
        timed: bool,
    },
}

impl TimestampFormat {
    /// Compiles one entry; the error says which letter is not supported.
    pub fn parse(text: &str) -> Result<TimestampFormat, String> {
        if text == "millis" {
            return Ok(TimestampFormat::Millis);
        }
        let chars: Vec<char> = text.chars().collect();
        let (mut out, mut zoned, mut timed) = (String::new(), false, false);
        let mut i = 0;
        while i < chars.len() {
            let c = chars[i];
            if c == '\'' {
                let close = chars[i + 1..].iter().position(|&x| x == '\'').ok_or("unterminated quote")?;
                let literal: String = chars[i + 1..i + 1 + close].iter().collect();
                out.push_str(&if literal.is_empty() { "'".to_owned() } else { literal.replace('%', "%%") });
                i += close + 2;
                continue;
            }
            let run = chars[i..].iter().take_while(|&&x| x == c).count();
            let field = match (c, run) {
                ('y', 2) => "%y",
                ('y', _) => "%Y",
                ('M', 1 | 2) => "%m",
                ('M', 3) => "%b",
                ('M', _) => "%B",
                ('d', 1 | 2) => "%d",
                ('E', 1..=3) => "%a",
                ('E', _) => "%A",
                ('H', 1 | 2) => "%H",
                ('h', 1 | 2) => "%I",
                ('m', 1 | 2) => "%M",
                ('s', 1 | 2) => "%S",
                ('S', 3) => "%3f",
                ('S', 6) => "%6f",
                ('S', 9) => "%9f",
                ('a', 1) => "%p",
                ('Z', 1) => "%z",
                ('Z', 2) => "%:z",
                _ if c.is_ascii_alphabetic() => {
                    return Err(format!("pattern letters {:?} at {i} are not supported", c.to_string().repeat(run)));
                }
                _ => {
                    for _ in 0..run {
                        if c == '%' {
                            out.push_str("%%");
                        } else {
                            out.push(c);
                        }
                    }
                    i += run;
                    continue;
                }
            };
            zoned |= c == 'Z';
            timed |= matches!(c, 'H' | 'h' | 'm' | 's' | 'S');
            out.push_str(field);
            i += run;
        }
        Ok(TimestampFormat::Pattern { joda: text.to_owned(), chrono: out, zoned, timed })
    }

    /// Microseconds since the epoch, if `value` has this format.
    fn micros(&self, value: &serde_json::Value) -> Option<i64> {
        match (self, value) {
            (TimestampFormat::Millis, serde_json::Value::Number(n)) => n.as_i64()?.checked_mul(1000),
            (TimestampFormat::Millis, serde_json::Value::String(s)) => s.trim().parse::<i64>().ok()?.checked_mul(1000),
            (TimestampFormat::Pattern { chrono, zoned, timed, .. }, serde_json::Value::String(s)) => {
                let naive = if *zoned {
                    DateTime::parse_from_str(s, chrono).ok()?.naive_utc()
                } else if *timed {
                    NaiveDateTime::parse_from_str(s, chrono).ok()?
                } else {
                    NaiveDate::parse_from_str(s, chrono).ok()?.and_hms_opt(0, 0, 0)?
                };
                Some(naive.and_utc().timestamp_micros())
            }
            _ => None,
        }
    }
}

/// A timestamp in microseconds: with `formats`, the first that reads it; without,
/// date-and-time text (see `date_time_micros`) or a JSON integer as epoch milliseconds.
pub fn timestamp_micros(value: &serde_json::Value, formats: &[TimestampFormat]) -> Option<i64> {
    if !formats.is_empty() {
        return formats.iter().find_map(|f| f.micros(value));
    }
    match value {
        serde_json::Value::Number(n) => n.as_i64()?.checked_mul(1000),
        serde_json::Value::String(s) => date_time_micros(s),
        _ => None,
    }
}

/// Date-and-time text in microseconds: `yyyy-MM-dd HH:mm:ss[.f]` or the same with `T`,
/// without a zone (UTC), with `Z`, or with an offset with or without a colon (`+02:00`,
/// `+0200`, as OpenX's `nonUTCFormat` takes them), converted to UTC.
fn date_time_micros(text: &str) -> Option<i64> {
    let s = text.trim();
    if let Ok(t) = DateTime::parse_from_rfc3339(s) {
        return Some(t.naive_utc().and_utc().timestamp_micros());
    }
    let zoned = ["%Y-%m-%dT%H:%M:%S%.f%z", "%Y-%m-%d %H:%M:%S%.f%z"]
        .iter()
        .find_map(|f| DateTime::parse_from_str(s, f).ok())
        .map(|t| t.naive_utc());
    zoned
        .or_else(|| {
            ["%Y-%m-%d %H:%M:%S%.f", "%Y-%m-%dT%H:%M:%S%.f"]
                .iter()
                .find_map(|f| NaiveDateTime::parse_from_str(s, f).ok())
        })
        .map(|t| t.and_utc().timestamp_micros())
}

/// A timestamp column's value in microseconds as the Hive JSON SerDe reads it: with
/// `TimestampFormats`, the first format that reads it, and otherwise (as without
/// formats) `java.sql.Timestamp.valueOf` of its text (see [`java_timestamp_value_of`]).
/// So `1546760416` or `2019-01-06T07:40:16Z` are refused without a format that reads
/// them (`millis`, a pattern with `'T'` and `Z`), as Firehose refuses them.
pub fn hive_timestamp_micros(value: &serde_json::Value, formats: &[TimestampFormat]) -> Option<i64> {
    if let Some(micros) = formats.iter().find_map(|f| f.micros(value)) {
        return Some(micros);
    }
    match value {
        serde_json::Value::String(s) => java_timestamp_value_of(s),
        serde_json::Value::Number(n) => java_timestamp_value_of(&n.to_string()),
        _ => None,
    }
}

/// `java.sql.Timestamp.valueOf` (which Firehose documents as the Hive SerDe's default),
/// in UTC, in microseconds: the text, trimmed, is `yyyy-[m]m-[d]d hh:mm:ss[.f...]`, a
/// four-digit year, a month 1-12 and a day 1-31 of one or two digits, one space, hours,
/// minutes and seconds as integers, and a fraction of 1-9 digits (to the microsecond
/// here). Like Java it is lenient past the ends of a month or day: `2023-02-30
/// 00:00:00` is 2 March, `2023-01-01 24:00:00` is 2 January. No `T`, no zone, no epoch
/// numbers.
pub fn java_timestamp_value_of(text: &str) -> Option<i64> {
    let text = text.trim();
    let (date, time) = text.split_once(' ')?;
    let mut d = date.splitn(3, '-');
    let (year, month, day) = (d.next()?, d.next()?, d.next()?);
    let digits = |s: &str, lens: std::ops::RangeInclusive<usize>| {
        (lens.contains(&s.len()) && s.bytes().all(|b| b.is_ascii_digit())).then(|| s.parse::<i64>().ok()).flatten()
    };
    let (year, month, day) = (digits(year, 4..=4)?, digits(month, 1..=2)?, digits(day, 1..=2)?);
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) {
        return None;
    }
    let (hour, rest) = time.split_once(':')?;
    let (minute, rest) = rest.split_once(':')?;
    let (second, fraction) = match rest.split_once('.') {
        Some((second, fraction)) => {
            if fraction.is_empty() || fraction.len() > 9 || !fraction.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            let nanos: i64 = format!("{fraction:0<9}").parse().ok()?;
            (second, nanos / 1000)
        }
        None => (rest, 0),
    };
    // Integer.parseInt: an optional sign, then digits.
    let int = |s: &str| {
        let body = s.strip_prefix(['+', '-']).unwrap_or(s);
        (!body.is_empty() && body.bytes().all(|b| b.is_ascii_digit())).then(|| s.parse::<i64>().ok()).flatten()
    };
    let (hour, minute, second) = (int(hour)?, int(minute)?, int(second)?);
    let first = NaiveDate::from_ymd_opt(i32::try_from(year).ok()?, u32::try_from(month).ok()?, 1)?;
    let days = first.signed_duration_since(NaiveDate::from_ymd_opt(1970, 1, 1)?).num_days() + day - 1;
    let seconds = days
        .checked_mul(86_400)?
        .checked_add(hour.checked_mul(3_600)?)?
        .checked_add(minute.checked_mul(60)?)?
        .checked_add(second)?;
    seconds.checked_mul(1_000_000)?.checked_add(fraction)
}

/// A timestamp column's value in microseconds as the OpenX JSON SerDe reads it (its
/// `parseTimestamp`, on the value's text): text with a `:` after its first character
/// is a date and time (the forms of [`timestamp_micros`] without formats); text with a
/// `.` is epoch seconds with a fraction, to the millisecond (truncated toward zero, as
/// Java's `(long)` cast); an integer of 13 or more characters (`1518033528123`) is
/// epoch milliseconds, a shorter one (`1518033528`) epoch seconds. Numbers and numeric
/// text read alike.
pub fn openx_timestamp_micros(value: &serde_json::Value) -> Option<i64> {
    let text = match value {
        serde_json::Value::Number(n) => n.to_string(),
        serde_json::Value::String(s) => s.clone(),
        _ => return None,
    };
    openx_text_micros(&text)
}

/// How an integer in a `timestamp` column is read (with the OpenX SerDe's rules for
/// everything else).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum EpochIntegers {
    /// The OpenX SerDe's (Firehose's record format conversion): 13 characters or more
    /// epoch milliseconds, fewer epoch seconds.
    #[default]
    OpenX,
    /// By the number of digits, as the units fall for every instant from September
    /// 2001 to the year 2286: up to 12 epoch seconds, 13–15 milliseconds, 16–18
    /// microseconds (Firehose's Iceberg destination asks for these), 19
    /// nanoseconds. An instant before September 2001 in microseconds (15 digits or
    /// fewer) is misread: give the unit then.
    ByDigits,
    /// Always epoch seconds.
    Seconds,
    /// Always epoch milliseconds.
    Milliseconds,
    /// Always epoch microseconds.
    Microseconds,
}

/// [`openx_timestamp_micros`] of a number's text or a string's content.
pub fn openx_text_micros(text: &str) -> Option<i64> {
    openx_text_micros_with(text, EpochIntegers::OpenX)
}

/// [`openx_text_micros`], integers read as `integers` says.
pub fn openx_text_micros_with(text: &str, integers: EpochIntegers) -> Option<i64> {
    if text.find(':').is_some_and(|i| i > 0) {
        return date_time_micros(text);
    }
    if integers != EpochIntegers::OpenX && !text.contains('.') {
        let n: i64 = text.parse().ok()?;
        let digits = text.trim_start_matches(['-', '+']).len();
        return match integers {
            EpochIntegers::Seconds => n.checked_mul(1_000_000),
            EpochIntegers::Milliseconds => n.checked_mul(1000),
            EpochIntegers::Microseconds => Some(n),
            _ => match digits {
                ..=12 => n.checked_mul(1_000_000),
                13..=15 => n.checked_mul(1000),
                16..=18 => Some(n),
                _ => Some(n / 1000),
            },
        };
    }
    let millis = if text.contains('.') {
        let seconds: f64 = text.parse().ok()?;
        let millis = seconds * 1000.0;
        // Java's cast saturates at the long range; a value past it is no instant here.
        if !millis.is_finite() || millis.abs() >= 9.2e18 {
            return None;
        }
        millis as i64
    } else {
        let n: i64 = text.parse().ok()?;
        if text.len() >= 13 { n } else { n.checked_mul(1000)? }
    };
    millis.checked_mul(1000)
}

/// A date column's value in days since the epoch: `yyyy-MM-dd` text (a timestamp's
/// date part with `formats` set).
pub fn date_days(value: &serde_json::Value, formats: &[TimestampFormat]) -> Option<i32> {
    let epoch = NaiveDate::from_ymd_opt(1970, 1, 1)?;
    if let serde_json::Value::String(s) = value
        && let Ok(d) = NaiveDate::parse_from_str(s.trim(), "%Y-%m-%d")
    {
        return i32::try_from(d.signed_duration_since(epoch).num_days()).ok();
    }
    if formats.is_empty() {
        return None;
    }
    let micros = timestamp_micros(value, formats)?;
    i32::try_from(micros.div_euclid(86_400_000_000)).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn defaults_take_sql_iso_and_millis() {
        let t = |v| timestamp_micros(&v, &[]);
        assert_eq!(t(json!("1970-01-01 00:00:01.5")), Some(1_500_000));
        assert_eq!(t(json!("1970-01-01T00:00:01Z")), Some(1_000_000));
        assert_eq!(t(json!("1970-01-01T01:00:00+01:00")), Some(0));
        assert_eq!(t(json!(1_764_400_000_123i64)), Some(1_764_400_000_123_000));
        assert_eq!(t(json!("yesterday")), None);
        assert_eq!(t(json!(true)), None);
        assert_eq!(t(json!(i64::MAX)), None, "overflow is a mismatch, not a panic");
    }

    #[test]
    fn joda_patterns_and_millis() {
        let f = TimestampFormat::parse("dd/MM/yyyy HH:mm:ss.SSS").unwrap();
        assert_eq!(f.micros(&json!("02/01/1970 00:00:00.250")), Some(86_400_250_000));
        let z = TimestampFormat::parse("yyyy-MM-dd'T'HH:mm:ssZ").unwrap();
        assert_eq!(z.micros(&json!("1970-01-01T02:00:00+0200")), Some(0));
        let d = TimestampFormat::parse("yyyyMMdd").unwrap();
        assert_eq!(d.micros(&json!("19700102")), Some(86_400_000_000));
        let only = [TimestampFormat::Millis];
        assert_eq!(timestamp_micros(&json!("1000"), &only), Some(1_000_000));
        assert_eq!(timestamp_micros(&json!("1970-01-01 00:00:00"), &only), None, "only the formats given");
        assert!(TimestampFormat::parse("yyyy-ww").unwrap_err().contains("\"ww\""));
        assert!(TimestampFormat::parse("'T").is_err());
    }

    #[test]
    fn integers_by_digits_tell_seconds_milliseconds_microseconds_and_nanoseconds() {
        let t = |s: &str| openx_text_micros_with(s, EpochIntegers::ByDigits);
        let at = 1_780_000_000_123_456i64; // 2026-05-28, microseconds
        assert_eq!(t("1780000000"), Some(at / 1_000_000 * 1_000_000), "10 digits: seconds");
        assert_eq!(t("1780000000123"), Some(at / 1000 * 1000), "13: milliseconds");
        assert_eq!(t("1780000000123456"), Some(at), "16: microseconds, as Firehose's Iceberg destination takes");
        assert_eq!(t("1780000000123456789"), Some(at), "19: nanoseconds");
        assert_eq!(t("-86400"), Some(-86_400_000_000), "the sign is no digit");
        assert_eq!(t("1000000000000000"), Some(1_000_000_000_000_000), "the first 16-digit instant: 2001-09-09");
        assert_eq!(t("1780000000.5"), Some(1_780_000_000_500_000), "a fraction: seconds, as OpenX");
        assert_eq!(t("2026-05-28T20:26:40Z"), Some(1_780_000_000_000_000), "text: as OpenX");
        assert_eq!(t("99999999999999999999"), None, "past i64: a mismatch");
        let fixed = |s: &str, u| openx_text_micros_with(s, u);
        assert_eq!(fixed("1780000000", EpochIntegers::Microseconds), Some(1_780_000_000));
        assert_eq!(fixed("17800000001234567", EpochIntegers::Milliseconds), None, "overflows as milliseconds");
        assert_eq!(fixed("1780000000123", EpochIntegers::Milliseconds), Some(1_780_000_000_123_000));
        assert_eq!(fixed("17", EpochIntegers::Seconds), Some(17_000_000));
    }

    #[test]
    fn openx_tells_seconds_from_milliseconds_by_their_digits() {
        let t = |v| openx_timestamp_micros(&v);
        assert_eq!(t(json!(1_546_760_416)), Some(1_546_760_416_000_000), "10 digits: seconds");
        assert_eq!(t(json!("1546760416")), Some(1_546_760_416_000_000));
        assert_eq!(t(json!(1_518_033_528_123i64)), Some(1_518_033_528_123_000), "13 digits: milliseconds");
        assert_eq!(t(json!(999_999_999_999i64)), Some(999_999_999_999_000_000), "12 digits: seconds");
        assert_eq!(t(json!(-86_400)), Some(-86_400_000_000));
        assert_eq!(t(json!(1_518_033_528.5)), Some(1_518_033_528_500_000), "a fraction: seconds");
        assert_eq!(t(json!(0.0015)), Some(1_000), "to the millisecond, truncated");
        assert_eq!(t(json!("2019-01-06 07:40:16")), Some(1_546_760_416_000_000));
        assert_eq!(t(json!("2019-01-06T07:40:16Z")), Some(1_546_760_416_000_000));
        assert_eq!(t(json!("2019-01-06T09:40:16+02:00")), Some(1_546_760_416_000_000), "an offset with a colon");
        assert_eq!(t(json!("2019-01-06T09:40:16.5+0200")), Some(1_546_760_416_500_000), "and without");
        assert_eq!(t(json!("2019-01-06 04:40:16-0300")), Some(1_546_760_416_000_000));
        assert_eq!(t(json!("1e3")), None);
        assert_eq!(t(json!("2019-01-06")), None, "a date alone is not a timestamp");
        assert_eq!(t(json!(1e300)), None, "past the range: a mismatch, not a panic");
        assert_eq!(t(json!(i64::MAX)), None, "overflow: a mismatch");
        assert_eq!(t(json!(true)), None);
    }

    #[test]
    fn hive_reads_what_java_sql_timestamp_value_of_reads() {
        let v = java_timestamp_value_of;
        assert_eq!(v("2019-01-06 07:40:16"), Some(1_546_760_416_000_000));
        assert_eq!(v("  2019-1-6 07:40:16.25 "), Some(1_546_760_416_250_000), "one-digit month and day, trimmed");
        assert_eq!(v("2019-01-06 07:40:16.123456789"), Some(1_546_760_416_123_456), "nanoseconds, to the microsecond");
        assert_eq!(v("2023-02-30 00:00:00"), v("2023-03-02 00:00:00"), "lenient past a month's end");
        assert_eq!(v("2023-01-01 24:00:00"), v("2023-01-02 00:00:00"), "lenient past a day's end");
        for refused in [
            "2019-01-06T07:40:16",
            "2019-01-06 07:40:16Z",
            "2019-01-06",
            "19-01-06 07:40:16",
            "2019-13-06 07:40:16",
            "2019-01-32 07:40:16",
            "2019-01-06 07:40:16.",
            "2019-01-06 07:40:16.1234567890",
            "1546760416",
        ] {
            assert_eq!(v(refused), None, "{refused}");
        }
        let formats = [TimestampFormat::parse("yyyy-MM-dd'T'HH:mm:ssZ").unwrap()];
        let h = |x| hive_timestamp_micros(&x, &formats);
        assert_eq!(h(json!("2019-01-06T09:40:16+0200")), Some(1_546_760_416_000_000), "the format");
        assert_eq!(h(json!("2019-01-06 07:40:16")), Some(1_546_760_416_000_000), "valueOf after the formats");
        assert_eq!(hive_timestamp_micros(&json!(1_546_760_416_000i64), &[]), None, "no epoch without millis");
        assert_eq!(
            hive_timestamp_micros(&json!(1_546_760_416_000i64), &[TimestampFormat::Millis]),
            Some(1_546_760_416_000_000)
        );
    }

    #[test]
    fn dates() {
        assert_eq!(date_days(&json!("1970-01-11"), &[]), Some(10));
        assert_eq!(date_days(&json!("1969-12-31"), &[]), Some(-1));
        assert_eq!(date_days(&json!(5), &[]), None);
        assert_eq!(date_days(&json!(86_400_000), &[TimestampFormat::Millis]), Some(1));
    }
}
