//! `/status`: what each worker of the process is doing, as JSON, for `weir doctor`
//! (and for people): the shards it holds, when each shard's read last answered, and
//! per consumer whether it is detached and its last error.
//!
//! The same types serialise on the worker and deserialise in the doctor, so the two
//! cannot drift apart.

use serde::{Deserialize, Serialize};
use weir_runtime::WorkerStats;

/// A worker of this process, as `/status` shows it.
#[derive(Debug, Clone)]
pub struct WorkerView {
    /// The worker id (as in the lease table's owners).
    pub id: String,
    /// How it reads: `enhanced fan-out`, `polling` or `in-process`.
    pub read: String,
    /// Its live counters.
    pub stats: WorkerStats,
    /// How long a failure lasts before readiness reports it (`[worker]
    /// unhealthy_after`).
    pub unhealthy_after: std::time::Duration,
}

impl WorkerView {
    /// A view of a worker with the default health bound.
    pub fn new(id: impl Into<String>, read: impl Into<String>, stats: WorkerStats) -> Self {
        let unhealthy_after = crate::config::WorkerSection::default().unhealthy_after;
        Self { id: id.into(), read: read.into(), stats, unhealthy_after }
    }

    /// Whether the worker works now (see [`WorkerStats::health`]).
    pub fn health(&self) -> weir_runtime::Health {
        self.stats.health(tokio::time::Instant::now(), self.unhealthy_after, self.silence_counts())
    }

    /// Whether a silent read is a problem: enhanced fan-out and polling answer when
    /// there is nothing to read; the in-process stream's reads wait for records.
    pub fn silence_counts(&self) -> bool {
        matches!(self.read.as_str(), "enhanced fan-out" | "polling")
    }
}

/// One worker's status.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerStatus {
    /// The worker id.
    pub worker: String,
    /// How it reads (see [`WorkerView::read`]).
    pub read: String,
    /// Whether it works: it completed a lease cycle and nothing has failed for its
    /// health bound (what `/readyz` answers).
    pub ready: bool,
    /// What is wrong, one line each; empty when ready.
    #[serde(default)]
    pub problems: Vec<String>,
    /// The shards whose leases it holds.
    pub shards: Vec<ShardStatus>,
}

/// One held shard.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardStatus {
    /// The shard id.
    pub shard: String,
    /// Records read from it by this worker.
    pub records_read: u64,
    /// Milliseconds since its read last answered (a batch, empty or not); `None` when
    /// it never has.
    pub last_answer_ms_ago: Option<u64>,
    /// Per consumer.
    pub consumers: Vec<LaneStatus>,
}

/// One consumer on one shard.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LaneStatus {
    /// The consumer's name.
    pub consumer: String,
    /// Records it processed.
    pub records: u64,
    /// Failed calls.
    pub failures: u64,
    /// Whether it is detached now.
    pub detached: bool,
    /// Its last error, if any.
    pub last_error: Option<String>,
}

/// The status of `view` now.
pub fn report(view: &WorkerView) -> WorkerStatus {
    let now = tokio::time::Instant::now();
    let lanes = view.stats.lanes();
    let reads = view.stats.reads();
    let shards = view
        .stats
        .held()
        .into_iter()
        .map(|shard| {
            let read = reads.get(&shard).cloned().unwrap_or_default();
            let consumers = lanes
                .iter()
                .filter(|((s, _), _)| *s == shard)
                .map(|((_, c), l)| LaneStatus {
                    consumer: c.to_string(),
                    records: l.records,
                    failures: l.failures,
                    detached: l.detached,
                    last_error: l.last_error.clone(),
                })
                .collect();
            ShardStatus {
                shard: shard.to_string(),
                records_read: read.records,
                last_answer_ms_ago: read
                    .last_answer
                    .map(|t| u64::try_from(now.duration_since(t).as_millis()).unwrap_or(u64::MAX)),
                consumers,
            }
        })
        .collect();
    let health = view.health();
    WorkerStatus {
        worker: view.id.clone(),
        read: view.read.clone(),
        ready: health.ready,
        problems: health.problems,
        shards,
    }
}
