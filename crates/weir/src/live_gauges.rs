//! Gauges of what a worker reads now, published from its [`WorkerStats`] rather than
//! through the `metrics` facade (whose gauges cannot be removed): a shard's lag goes
//! when the worker stops reading it (a handoff, a lost lease, shutdown), and reads that
//! fail are counted instead of leaving the last lag frozen.
//!
//! - `weir_millis_behind_latest{shard}`: the last `MillisBehindLatest` of each shard
//!   read now (the largest, if two workers of the process read one shard for a moment);
//! - `weir_shards_read_failing`: shards whose reads have failed or not answered for
//!   `[worker] unhealthy_after` (always present; 0 when all is well).
//!
//! [`WorkerStats`]: weir_runtime::WorkerStats

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::status::WorkerView;
use weir_runtime::metrics::{MILLIS_BEHIND_LATEST, SHARDS_READ_FAILING};

/// The live gauges of a process's workers at one moment.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LiveGauges {
    /// Shard id → milliseconds behind the tip, for shards read now that reported it.
    pub behind: BTreeMap<String, u64>,
    /// Shards whose reads fail (or stay silent) for the health bound.
    pub read_failing: u64,
}

impl LiveGauges {
    /// The gauges of `workers` now.
    pub fn of(workers: &[WorkerView]) -> Self {
        let now = tokio::time::Instant::now();
        let mut out = Self::default();
        for w in workers {
            for (shard, live) in w.stats.live_reads() {
                if let Some(ms) = live.millis_behind {
                    let slot = out.behind.entry(shard.to_string()).or_default();
                    *slot = (*slot).max(ms);
                }
                if live.problem(now, w.unhealthy_after, w.silence_counts()).is_some() {
                    out.read_failing += 1;
                }
            }
        }
        out
    }

    /// The gauges in Prometheus's text format (appended to the recorder's).
    pub fn prometheus(&self) -> String {
        let mut text = String::new();
        if !self.behind.is_empty() {
            let _ = writeln!(text, "# TYPE {MILLIS_BEHIND_LATEST} gauge");
            for (shard, ms) in &self.behind {
                let _ = writeln!(text, "{MILLIS_BEHIND_LATEST}{{shard=\"{}\"}} {ms}", escape(shard));
            }
        }
        let _ = writeln!(text, "# TYPE {SHARDS_READ_FAILING} gauge");
        let _ = writeln!(text, "{SHARDS_READ_FAILING} {}", self.read_failing);
        text
    }
}

/// A label value escaped as the text format wants (`\`, `"`, newline).
fn escape(value: &str) -> String {
    value.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_text_format_has_one_series_per_shard_and_the_failing_count() {
        let g =
            LiveGauges { behind: BTreeMap::from([("shardId-1".into(), 1500), ("a\"b".into(), 0)]), read_failing: 2 };
        assert_eq!(
            g.prometheus(),
            "# TYPE weir_millis_behind_latest gauge\nweir_millis_behind_latest{shard=\"a\\\"b\"} 0\n\
             weir_millis_behind_latest{shard=\"shardId-1\"} 1500\n\
             # TYPE weir_shards_read_failing gauge\nweir_shards_read_failing 2\n"
        );
        let quiet = LiveGauges::default().prometheus();
        assert_eq!(
            quiet, "# TYPE weir_shards_read_failing gauge\nweir_shards_read_failing 0\n",
            "no lag without reads"
        );
    }
}
