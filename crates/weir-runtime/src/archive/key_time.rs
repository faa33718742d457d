//! When an archived object was written, read from its key.
//!
//! The most precise source wins: the `-yyyy-MM-dd-HH-mm-ss-` stamp in a Firehose-style
//! object name (the arrival of the object's oldest record), else the date and hour in
//! its prefix, hive style (`year=2026/month=11/day=29/hour=22/`, `dt=2026-11-29/`) or
//! Firehose's default (`2026/11/29/22/`). Both are local times in the archive's time
//! zone (Firehose's `CustomTimeZone`, UTC by default).

use chrono::{NaiveDate, NaiveDateTime, TimeZone};
use chrono_tz::Tz;
use weir_core::Timestamp;

/// The time an archived object's key names, if it names one.
pub fn key_time(key: &str, zone: Tz) -> Option<Timestamp> {
    let (prefix, name) = key.rsplit_once('/').unwrap_or(("", key));
    let local = name_stamp(name).or_else(|| prefix_time(prefix))?;
    let instant = zone.from_local_datetime(&local).earliest()?;
    Some(Timestamp::from_millis(instant.timestamp_millis()))
}

/// `-yyyy-MM-dd-HH-mm-ss-` anywhere in an object name (the first one).
fn name_stamp(name: &str) -> Option<NaiveDateTime> {
    const SHAPE: &[u8] = b"-####-##-##-##-##-##-";
    let bytes = name.as_bytes();
    (0..=bytes.len().checked_sub(SHAPE.len())?).find_map(|at| {
        let window = &bytes[at..at + SHAPE.len()];
        let fits = window.iter().zip(SHAPE).all(|(b, s)| if *s == b'#' { b.is_ascii_digit() } else { b == s });
        if !fits {
            return None;
        }
        NaiveDateTime::parse_from_str(&name[at + 1..at + SHAPE.len() - 1], "%Y-%m-%d-%H-%M-%S").ok()
    })
}

/// Year, month, day and hour from the prefix's segments.
fn prefix_time(prefix: &str) -> Option<NaiveDateTime> {
    let segments: Vec<&str> = prefix.split('/').collect();
    hive_time(&segments).or_else(|| plain_time(&segments))
}

fn hive_time(segments: &[&str]) -> Option<NaiveDateTime> {
    let mut parts: [Option<u32>; 5] = [None; 5];
    let mut date = None;
    for s in segments {
        let Some((name, value)) = s.split_once('=') else { continue };
        let slot = match name.to_ascii_lowercase().as_str() {
            "year" => 0,
            "month" => 1,
            "day" => 2,
            "hour" => 3,
            "minute" => 4,
            "dt" | "date" => {
                date = date.or_else(|| NaiveDate::parse_from_str(value, "%Y-%m-%d").ok());
                continue;
            }
            _ => continue,
        };
        parts[slot] = parts[slot].or_else(|| value.parse().ok());
    }
    let date = match (parts[0], date) {
        (Some(y), _) => NaiveDate::from_ymd_opt(i32::try_from(y).ok()?, parts[1].unwrap_or(1), parts[2].unwrap_or(1))?,
        (None, Some(d)) => d,
        (None, None) => return None,
    };
    date.and_hms_opt(parts[3].unwrap_or(0), parts[4].unwrap_or(0), 0)
}

fn plain_time(segments: &[&str]) -> Option<NaiveDateTime> {
    let digits = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_digit());
    let start = segments.iter().position(|s| digits(s, 4))?;
    let mut parts = [1u32, 1, 1, 0];
    parts[0] = segments[start].parse().ok()?;
    for (i, s) in segments[start + 1..].iter().take(3).enumerate() {
        if !digits(s, 2) {
            break;
        }
        parts[i + 1] = s.parse().ok()?;
    }
    NaiveDate::from_ymd_opt(i32::try_from(parts[0]).ok()?, parts[1], parts[2])?.and_hms_opt(parts[3], 0, 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn utc(text: &str) -> Option<Timestamp> {
        chrono::DateTime::parse_from_rfc3339(text).ok().map(|t| Timestamp::from_millis(t.timestamp_millis()))
    }

    #[test]
    fn the_name_stamp_is_the_most_precise() {
        let key = "mcp/tenant_id=t-1/tool_name=search/year=2026/month=11/day=29/hour=22/mcp-archive-1-2026-11-29-22-38-24-1a2b3c4d-0000-1111-2222-333344445555.gz";
        assert_eq!(key_time(key, Tz::UTC), utc("2026-11-29T22:38:24Z"));
    }

    #[test]
    fn prefixes_hive_and_plain() {
        assert_eq!(key_time("a/year=2026/month=3/day=7/hour=05/x.gz", Tz::UTC), utc("2026-03-07T05:00:00Z"));
        assert_eq!(key_time("a/dt=2026-03-07/x.gz", Tz::UTC), utc("2026-03-07T00:00:00Z"));
        assert_eq!(key_time("raw/2026/03/07/05/x.gz", Tz::UTC), utc("2026-03-07T05:00:00Z"));
        assert_eq!(key_time("raw/2026/03/x.gz", Tz::UTC), utc("2026-03-01T00:00:00Z"));
    }

    #[test]
    fn local_times_follow_the_zone() {
        let zone: Tz = "Asia/Tokyo".parse().unwrap();
        assert_eq!(key_time("p/s-1-2026-11-30-07-00-00-abc.gz", zone), utc("2026-11-29T22:00:00Z"));
    }

    #[test]
    fn keys_without_a_time_or_with_a_bad_one_have_none() {
        assert_eq!(key_time("notes/readme.txt", Tz::UTC), None);
        assert_eq!(key_time("p/s-1-2026-13-40-99-00-00-abc.gz", Tz::UTC), None);
        assert_eq!(key_time("year=2026/month=13/x", Tz::UTC), None);
        assert_eq!(key_time("", Tz::UTC), None);
    }
}
