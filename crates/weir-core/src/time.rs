//! Time as a parameter: [`Timestamp`] values and the [`Clock`] port.

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

/// Milliseconds since the Unix epoch (UTC). Kinesis arrival times have this precision.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Timestamp(i64);

impl Timestamp {
    /// A timestamp from epoch milliseconds.
    pub const fn from_millis(millis: i64) -> Self {
        Self(millis)
    }

    /// Epoch milliseconds.
    pub const fn as_millis(self) -> i64 {
        self.0
    }

    /// This instant plus a duration (saturating).
    pub fn saturating_add(self, d: Duration) -> Self {
        let ms = i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
        Self(self.0.saturating_add(ms))
    }

    /// RFC 3339 text in UTC with milliseconds (`2026-11-29T10:00:00.000Z`); empty
    /// outside chrono's range.
    pub fn to_rfc3339(self) -> String {
        chrono::DateTime::from_timestamp_millis(self.0)
            .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
            .unwrap_or_default()
    }

    /// The duration from `earlier` to `self`; zero when `earlier` is later.
    pub fn saturating_since(self, earlier: Timestamp) -> Duration {
        Duration::from_millis(u64::try_from(self.0.saturating_sub(earlier.0)).unwrap_or(0))
    }
}

impl fmt::Debug for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Timestamp({}ms)", self.0)
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// Source of the current time. Implementations: [`SystemClock`] (wall clock), and in
/// the runtime a clock driven by `tokio::time` so tests can run under paused time.
pub trait Clock: Send + Sync {
    /// The current wall-clock time.
    fn now(&self) -> Timestamp;
}

/// The operating system's wall clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        let ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
            .unwrap_or(0);
        Timestamp(ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_text_has_milliseconds_in_utc() {
        assert_eq!(Timestamp::from_millis(0).to_rfc3339(), "1970-01-01T00:00:00.000Z");
        assert_eq!(Timestamp::from_millis(1_764_410_400_123).to_rfc3339(), "2025-11-29T10:00:00.123Z");
        assert_eq!(Timestamp::from_millis(i64::MAX).to_rfc3339(), "", "outside chrono's range");
    }
}
