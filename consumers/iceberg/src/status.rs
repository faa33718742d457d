//! What an Iceberg consumer says on `/readyz`: its tables, when it last committed,
//! what it holds, and, while commits fail, since when and why.

use std::sync::{Arc, Mutex};

use weir_core::Timestamp;

/// The consumer's state as its status line shows it; cheap to clone, shared with the
/// consumer.
#[derive(Debug, Clone, Default)]
pub struct Status(Arc<Mutex<State>>);

#[derive(Debug, Default)]
struct State {
    tables: usize,
    last_commit: Option<Timestamp>,
    buffered_bytes: usize,
    oldest: Option<Timestamp>,
    failing_since: Option<Timestamp>,
    last_error: Option<String>,
}

impl Status {
    fn with<R>(&self, f: impl FnOnce(&mut State) -> R) -> R {
        f(&mut self.0.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// A flush stored every commit it made.
    pub(crate) fn committed(&self, now: Timestamp) {
        self.with(|s| {
            s.last_commit = Some(now);
            s.failing_since = None;
            s.last_error = None;
        });
    }

    /// A commit failed.
    pub(crate) fn failed(&self, now: Timestamp, error: String) {
        self.with(|s| {
            s.failing_since.get_or_insert(now);
            s.last_error = Some(error);
        });
    }

    /// What is held now.
    pub(crate) fn holding(&self, tables: usize, buffered_bytes: usize, oldest: Option<Timestamp>) {
        self.with(|s| {
            s.tables = tables;
            s.buffered_bytes = buffered_bytes;
            s.oldest = oldest;
        });
    }

    /// The line for consumer `name` at `now`.
    pub fn line(&self, name: &str, now: Timestamp) -> String {
        let ago = |t: Timestamp| format!("{} s", now.as_millis().saturating_sub(t.as_millis()) / 1000);
        self.with(|s| {
            let mut line = format!(
                "iceberg {name}: {} table{}, last commit {}, {} bytes buffered",
                s.tables,
                if s.tables == 1 { "" } else { "s" },
                s.last_commit.map_or("none yet".into(), |t| format!("{} ago", ago(t))),
                s.buffered_bytes,
            );
            if let Some(t) = s.oldest {
                line.push_str(&format!(" (oldest {} old)", ago(t)));
            }
            if let (Some(since), Some(e)) = (s.failing_since, &s.last_error) {
                line.push_str(&format!("; commits failing for {}: {e}", ago(since)));
            }
            line
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_says_what_is_held_and_what_fails() {
        let s = Status::default();
        let t = Timestamp::from_millis;
        s.holding(2, 1234, Some(t(1_000)));
        assert_eq!(
            s.line("ev", t(5_000)),
            "iceberg ev: 2 tables, last commit none yet, 1234 bytes buffered (oldest 4 s old)"
        );
        s.failed(t(6_000), "catalog unreachable".into());
        s.failed(t(9_000), "catalog still unreachable".into());
        assert!(s.line("ev", t(16_000)).ends_with("; commits failing for 10 s: catalog still unreachable"));
        s.committed(t(17_000));
        s.holding(1, 0, None);
        assert_eq!(s.line("ev", t(20_000)), "iceberg ev: 1 table, last commit 3 s ago, 0 bytes buffered");
    }
}
