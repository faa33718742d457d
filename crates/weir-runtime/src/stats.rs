use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use weir_core::{ConsumerName, ShardId};

/// Counters of one (shard, consumer) lane.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LaneStats {
    /// Records the consumer processed.
    pub records: u64,
    /// Times the lane was detached.
    pub detaches: u64,
    /// Failed consumer calls.
    pub failures: u64,
}

/// Live counters of a worker, for summaries and readiness. Cheap: updated per batch.
#[derive(Debug, Clone, Default)]
pub struct WorkerStats {
    inner: Arc<Mutex<StatsInner>>,
}

#[derive(Debug, Default)]
struct StatsInner {
    lanes: BTreeMap<(ShardId, ConsumerName), LaneStats>,
    read: BTreeMap<ShardId, u64>,
    held: Vec<ShardId>,
    ready: bool,
}

impl WorkerStats {
    fn with<T>(&self, f: impl FnOnce(&mut StatsInner) -> T) -> T {
        f(&mut self.inner.lock().unwrap_or_else(|p| p.into_inner()))
    }

    pub(crate) fn lane(&self, shard: &ShardId, consumer: &ConsumerName, f: impl FnOnce(&mut LaneStats)) {
        self.with(|s| f(s.lanes.entry((shard.clone(), consumer.clone())).or_default()));
    }

    pub(crate) fn read(&self, shard: &ShardId, n: u64) {
        self.with(|s| *s.read.entry(shard.clone()).or_default() += n);
    }

    pub(crate) fn set_held(&self, held: Vec<ShardId>) {
        self.with(|s| s.held = held);
    }

    pub(crate) fn set_ready(&self) {
        self.with(|s| s.ready = true);
    }

    /// Per-lane counters.
    pub fn lanes(&self) -> BTreeMap<(ShardId, ConsumerName), LaneStats> {
        self.with(|s| s.lanes.clone())
    }

    /// Records read per shard by the live reads.
    pub fn read_per_shard(&self) -> BTreeMap<ShardId, u64> {
        self.with(|s| s.read.clone())
    }

    /// Shards whose leases this worker holds.
    pub fn held(&self) -> Vec<ShardId> {
        self.with(|s| s.held.clone())
    }

    /// Whether the worker completed its first lease cycle.
    pub fn is_ready(&self) -> bool {
        self.with(|s| s.ready)
    }
}
