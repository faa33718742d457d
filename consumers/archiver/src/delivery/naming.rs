//! Object names: `<stream>-<version>-<yyyy-MM-dd-HH-mm-ss>-<random id><extension>`, as
//! Firehose names the objects of a delivery stream (the time is the arrival of the
//! object's oldest record, in the prefix's time zone).

use chrono::DateTime;
use chrono_tz::Tz;

use weir_firehose::java_time::JavaPattern;

/// Names objects.
#[derive(Debug, Clone)]
pub struct Naming {
    stream: String,
    version: u32,
    extension: String,
    pattern: JavaPattern,
}

impl Naming {
    /// Names for `stream` (the delivery stream's name in Firehose; weir uses the
    /// archiver's `name`), version 1 unless told, with `extension` (e.g. `.gz`).
    pub fn new(stream: &str, version: u32, extension: &str) -> Self {
        let pattern = JavaPattern::compile("yyyy-MM-dd-HH-mm-ss").unwrap_or_else(|_| unreachable!("fixed pattern"));
        Self { stream: stream.to_owned(), version, extension: extension.to_owned(), pattern }
    }

    /// A fresh name for an object whose oldest record arrived at `oldest` (UTC).
    #[cfg(test)]
    pub fn name(&self, oldest: weir_core::Timestamp) -> String {
        let mut out = String::new();
        self.push_name_local(&mut out, &weir_firehose::java_time::local_time(oldest, chrono_tz::UTC));
        out
    }

    /// A fresh name for an object whose oldest record arrived at `oldest` (in the
    /// prefix's time zone), appended to `out` (a key's prefix), without a string of its
    /// own: an archiver at 100,000 partitions names 100,000 objects at a time.
    pub fn push_name_local(&self, out: &mut String, oldest: &DateTime<Tz>) {
        use std::fmt::Write;
        let id: u128 = rand::random();
        out.reserve(self.stream.len() + self.extension.len() + 64);
        let _ = write!(out, "{}-{}-", self.stream, self.version);
        self.pattern.format_local(out, oldest);
        // A UUID's 8-4-4-4-12 hex groups.
        let _ = write!(
            out,
            "-{:08x}-{:04x}-{:04x}-{:04x}-{:012x}{}",
            (id >> 96) as u32,
            (id >> 80) as u16,
            (id >> 64) as u16,
            (id >> 48) as u16,
            id & 0xffff_ffff_ffff,
            self.extension
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_core::Timestamp;

    #[test]
    fn firehose_shape() {
        let n = Naming::new("mcp-tool-events", 1, ".gz");
        let name = n.name(Timestamp::from_millis(1_764_400_000_000));
        assert!(name.starts_with("mcp-tool-events-1-2025-11-29-07-06-40-"), "{name}");
        assert!(name.ends_with(".gz"));
        assert_eq!(name.len(), "mcp-tool-events-1-2025-11-29-07-06-40-".len() + 36 + 3);
        assert_ne!(name, n.name(Timestamp::from_millis(1_764_400_000_000)), "unique");
    }
}
