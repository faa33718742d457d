//! Java `DateTimeFormatter` patterns (the `!{timestamp:…}` values of Firehose prefixes).
//!
//! A pattern is compiled once: runs of a pattern letter become fields, text in single
//! quotes is literal (`''` is a quote), other characters are literal. Letters Java
//! reserves but whose output depends on a locale's week rules (`w`, `W`, `Y`, `e`,
//! `c`, `F`) and the optional-section syntax (`[`, `]`, `#`, `{`, `}`) are refused at
//! compile time with their position, so a prefix never evaluates to something Firehose
//! would not produce. Evaluation is in UTC or a named time zone (`CustomTimeZone`).

use std::fmt::Write;

use chrono::{DateTime, Datelike, Offset, TimeZone, Timelike, Utc};
use chrono_tz::Tz;
use weir_core::Timestamp;

/// Why a pattern does not compile.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PatternError {
    /// A letter weir does not evaluate (locale-dependent or unknown).
    #[error("pattern letter '{letter}' at position {position} is not supported")]
    Unsupported {
        /// The letter.
        letter: char,
        /// Character position in the pattern.
        position: usize,
    },
    /// Too many repetitions of a letter.
    #[error("too many pattern letters '{letter}' ({count}) at position {position}")]
    TooMany {
        /// The letter.
        letter: char,
        /// How many.
        count: usize,
        /// Position of the run.
        position: usize,
    },
    /// A quote that is never closed.
    #[error("unterminated quoted text starting at position {0}")]
    UnterminatedQuote(usize),
    /// An optional-section or reserved character.
    #[error("reserved character '{ch}' at position {position}")]
    Reserved {
        /// The character.
        ch: char,
        /// Its position.
        position: usize,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Item {
    Literal(String),
    Field { letter: char, count: usize },
}

/// A compiled pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JavaPattern {
    items: Vec<Item>,
}

/// Most repetitions accepted per letter.
fn max_count(letter: char) -> Option<usize> {
    Some(match letter {
        'y' | 'u' => 9,
        'M' | 'L' | 'E' | 'Q' | 'q' => 5,
        'd' | 'H' | 'h' | 'k' | 'K' | 'm' | 's' => 2,
        'D' => 3,
        'S' => 9,
        'n' | 'N' | 'A' => 19,
        'a' => 1,
        'G' => 5,
        'X' | 'x' => 5,
        'Z' => 5,
        'z' => 4,
        'V' => 2,
        _ => return None,
    })
}

impl JavaPattern {
    /// Compiles a pattern.
    pub fn compile(pattern: &str) -> Result<Self, PatternError> {
        let chars: Vec<char> = pattern.chars().collect();
        let mut items = Vec::new();
        let mut literal = String::new();
        let mut i = 0;
        while i < chars.len() {
            let c = chars[i];
            if c == '\'' {
                if chars.get(i + 1) == Some(&'\'') {
                    literal.push('\'');
                    i += 2;
                    continue;
                }
                let start = i;
                i += 1;
                loop {
                    match chars.get(i) {
                        None => return Err(PatternError::UnterminatedQuote(start)),
                        Some('\'') if chars.get(i + 1) == Some(&'\'') => {
                            literal.push('\'');
                            i += 2;
                        }
                        Some('\'') => {
                            i += 1;
                            break;
                        }
                        Some(ch) => {
                            literal.push(*ch);
                            i += 1;
                        }
                    }
                }
                continue;
            }
            if matches!(c, '[' | ']' | '#' | '{' | '}') {
                return Err(PatternError::Reserved { ch: c, position: i });
            }
            if c.is_ascii_alphabetic() {
                let start = i;
                while i < chars.len() && chars[i] == c {
                    i += 1;
                }
                let count = i - start;
                let Some(max) = max_count(c) else {
                    return Err(PatternError::Unsupported { letter: c, position: start });
                };
                if count > max || (c == 'Z' && count == 4) || (c == 'V' && count != 2) {
                    return Err(PatternError::TooMany { letter: c, count, position: start });
                }
                if !literal.is_empty() {
                    items.push(Item::Literal(std::mem::take(&mut literal)));
                }
                items.push(Item::Field { letter: c, count });
                continue;
            }
            literal.push(c);
            i += 1;
        }
        if !literal.is_empty() {
            items.push(Item::Literal(literal));
        }
        Ok(Self { items })
    }

    /// The text of this pattern at `instant` in time zone `tz`.
    pub fn format(&self, instant: Timestamp, tz: Tz) -> String {
        let mut out = String::new();
        self.format_into(&mut out, instant, tz);
        out
    }

    /// [`JavaPattern::format`], appended to `out`.
    pub fn format_into(&self, out: &mut String, instant: Timestamp, tz: Tz) {
        self.format_local(out, &local_time(instant, tz));
    }

    /// [`JavaPattern::format_into`] of a time already in its zone ([`local_time`]): a
    /// key with several timestamp expressions converts its time once.
    pub fn format_local(&self, out: &mut String, t: &DateTime<Tz>) {
        for item in &self.items {
            match item {
                Item::Literal(s) => out.push_str(s),
                Item::Field { letter, count } => field(out, t, *letter, *count),
            }
        }
    }
}

const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];
const DAYS: [&str; 7] = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"];

/// `instant` in time zone `tz` (the epoch for times chrono cannot represent).
pub fn local_time(instant: Timestamp, tz: Tz) -> DateTime<Tz> {
    Utc.timestamp_millis_opt(instant.as_millis()).single().unwrap_or_default().with_timezone(&tz)
}

fn num(out: &mut String, value: i64, width: usize) {
    // The common case (this runs for every timestamp field of every object key): a
    // small non-negative value, written without the formatter.
    if (0..1_000_000).contains(&value) && width <= 6 {
        let mut digits = [b'0'; 6];
        let mut v = value;
        let mut n = 0;
        while v > 0 {
            digits[5 - n] = b'0' + (v % 10) as u8;
            v /= 10;
            n += 1;
        }
        let n = n.max(width).max(1);
        out.push_str(std::str::from_utf8(&digits[6 - n..]).unwrap_or_default());
        return;
    }
    let _ = write!(out, "{value:0width$}");
}

fn text(out: &mut String, full: &str, count: usize) {
    match count {
        1..=3 => out.push_str(&full[..3]),
        4 => out.push_str(full),
        _ => out.push_str(&full[..1]),
    }
}

fn offset(out: &mut String, seconds: i32, colon: bool, minutes: bool, zulu: bool) {
    if seconds == 0 && zulu {
        out.push('Z');
        return;
    }
    let sign = if seconds < 0 { '-' } else { '+' };
    let s = seconds.abs();
    let _ = write!(out, "{sign}{:02}", s / 3600);
    if minutes || s % 3600 != 0 {
        if colon {
            out.push(':');
        }
        let _ = write!(out, "{:02}", (s % 3600) / 60);
    }
}

fn field(out: &mut String, t: &DateTime<Tz>, letter: char, count: usize) {
    let off = t.offset().fix().local_minus_utc();
    match letter {
        'y' | 'u' if count == 2 => num(out, i64::from(t.year()).rem_euclid(100), 2),
        'y' | 'u' => num(out, i64::from(t.year()), count),
        'M' | 'L' if count <= 2 => num(out, i64::from(t.month()), count),
        'M' | 'L' => text(out, MONTHS[t.month0() as usize], count),
        'd' => num(out, i64::from(t.day()), count),
        'D' => num(out, i64::from(t.ordinal()), count),
        'H' => num(out, i64::from(t.hour()), count),
        'k' => num(out, i64::from(if t.hour() == 0 { 24 } else { t.hour() }), count),
        'h' => num(out, i64::from(if t.hour12().1 == 0 { 12 } else { t.hour12().1 }), count),
        'K' => num(out, i64::from(t.hour() % 12), count),
        'm' => num(out, i64::from(t.minute()), count),
        's' => num(out, i64::from(t.second()), count),
        'S' => {
            let nanos = format!("{:09}", t.nanosecond() % 1_000_000_000);
            out.push_str(&nanos[..count.min(9)]);
        }
        'n' => num(out, i64::from(t.nanosecond() % 1_000_000_000), count),
        'N' => num(
            out,
            i64::from(t.num_seconds_from_midnight()) * 1_000_000_000 + i64::from(t.nanosecond() % 1_000_000_000),
            count,
        ),
        'A' => {
            num(out, i64::from(t.num_seconds_from_midnight()) * 1_000 + i64::from(t.nanosecond() / 1_000_000), count)
        }
        'a' => out.push_str(if t.hour() < 12 { "AM" } else { "PM" }),
        'E' => text(out, DAYS[t.weekday().num_days_from_monday() as usize], count),
        'G' => out.push_str(if count == 4 {
            "Anno Domini"
        } else if count == 5 {
            "A"
        } else {
            "AD"
        }),
        'Q' | 'q' => {
            let q = (t.month0() / 3 + 1) as usize;
            match count {
                1 | 2 => num(out, q as i64, count),
                3 => {
                    let _ = write!(out, "Q{q}");
                }
                4 => out.push_str(["1st quarter", "2nd quarter", "3rd quarter", "4th quarter"][q - 1]),
                _ => num(out, q as i64, 1),
            }
        }
        'X' | 'x' => {
            let zulu = letter == 'X';
            match count {
                1 => offset(out, off, false, false, zulu),
                2 | 4 => offset(out, off, false, true, zulu),
                _ => offset(out, off, true, true, zulu),
            }
        }
        'Z' if count <= 3 => offset(out, off, false, true, false),
        'Z' => offset(out, off, true, true, true),
        'z' => {
            let _ = write!(out, "{}", t.format("%Z"));
        }
        'V' => out.push_str(t.timezone().name()),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2018-08-27T10:30:05.123Z, the instant of Firehose's documented examples.
    const T: Timestamp = Timestamp::from_millis(1_535_365_805_123);

    fn f(p: &str) -> String {
        JavaPattern::compile(p).unwrap().format(T, Tz::UTC)
    }

    #[test]
    fn golden_patterns() {
        assert_eq!(f("yyyy"), "2018");
        assert_eq!(f("yyyy/MM/dd/HH/"), "2018/08/27/10/");
        assert_eq!(f("yy-M-d H:m:s"), "18-8-27 10:30:5");
        assert_eq!(f("yyyy-MM-dd'T'HH:mm:ss.SSSXXX"), "2018-08-27T10:30:05.123Z");
        assert_eq!(f("'year='yyyy'/month='MM'/day='dd'/hour='HH"), "year=2018/month=08/day=27/hour=10");
        assert_eq!(f("MMM MMMM EEE EEEE"), "Aug August Mon Monday");
        assert_eq!(f("D DDD hh a kk KK"), "239 239 10 AM 10 10");
        assert_eq!(f("QQQ qq"), "Q3 03");
        assert_eq!(f("uuuu"), "2018");
        assert_eq!(f("'It''s' HH 'o''clock'"), "It's 10 o'clock");
        assert_eq!(f("''"), "'");
        assert_eq!(f("dd.MM.yyyy - HH"), "27.08.2018 - 10");
    }

    #[test]
    fn numbers_are_the_formatters() {
        for value in [0i64, 1, 9, 10, 59, 99, 100, 2018, 9999, 99_999, 999_999, 1_000_000, -1, -2018] {
            for width in 1..=9 {
                let mut out = String::new();
                num(&mut out, value, width);
                assert_eq!(out, format!("{value:0width$}"), "{value} in {width}");
            }
        }
    }

    #[test]
    fn time_zones() {
        let p = JavaPattern::compile("yyyy/MM/dd/HH xxx VV").unwrap();
        assert_eq!(p.format(T, Tz::Asia__Tokyo), "2018/08/27/19 +09:00 Asia/Tokyo");
        assert_eq!(p.format(T, Tz::America__New_York), "2018/08/27/06 -04:00 America/New_York");
        let p = JavaPattern::compile("Z X").unwrap();
        assert_eq!(p.format(T, Tz::UTC), "+0000 Z");
        assert_eq!(p.format(T, Tz::Asia__Kolkata), "+0530 +0530");
    }

    #[test]
    fn bad_patterns_name_the_position() {
        assert_eq!(JavaPattern::compile("yyyy-ww"), Err(PatternError::Unsupported { letter: 'w', position: 5 }));
        assert_eq!(JavaPattern::compile("YYYY"), Err(PatternError::Unsupported { letter: 'Y', position: 0 }));
        assert_eq!(JavaPattern::compile("ddd"), Err(PatternError::TooMany { letter: 'd', count: 3, position: 0 }));
        assert_eq!(JavaPattern::compile("HH 'x"), Err(PatternError::UnterminatedQuote(3)));
        assert_eq!(JavaPattern::compile("yyyy[MM]"), Err(PatternError::Reserved { ch: '[', position: 4 }));
        assert!(JavaPattern::compile("bb").is_err());
    }
}
