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
}

/// One worker's status.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerStatus {
    /// The worker id.
    pub worker: String,
    /// How it reads (see [`WorkerView::read`]).
    pub read: String,
    /// Whether it finished its first lease cycle.
    pub ready: bool,
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
    WorkerStatus { worker: view.id.clone(), read: view.read.clone(), ready: view.stats.is_ready(), shards }
}
