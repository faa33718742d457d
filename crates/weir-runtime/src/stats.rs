use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use weir_core::{ConsumerName, ExtendedSequenceNumber, RecordBatch, ShardId, Timestamp};

/// Counters of one (shard, consumer) lane.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LaneStats {
    /// Records the consumer processed.
    pub records: u64,
    /// Times the lane was detached.
    pub detaches: u64,
    /// Failed consumer calls.
    pub failures: u64,
    /// The last position the consumer processed.
    pub last: Option<ExtendedSequenceNumber>,
    /// Whether the lane is detached now (failing or backed up; it catches up or
    /// retries on its own).
    pub detached: bool,
    /// The last failed call's error, secrets redacted as in logs.
    pub last_error: Option<String>,
}

/// What the live reads of one shard delivered.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ShardRead {
    /// Records read.
    pub records: u64,
    /// Payload bytes read.
    pub bytes: u64,
    /// Arrival time of the last record read.
    pub last_arrival: Option<Timestamp>,
    /// Position of the last record read.
    pub last_position: Option<ExtendedSequenceNumber>,
    /// When a read last came back empty at the stream's tip (`MillisBehindLatest` 0):
    /// everything in the shard then had been read. (A non-empty batch's
    /// `MillisBehindLatest` is not trusted for this; emulators report 0 early.)
    pub at_tip: Option<tokio::time::Instant>,
    /// When the last read answered (a batch, empty or not; an EFO event).
    pub last_answer: Option<tokio::time::Instant>,
}

/// Live counters of a worker, for summaries and readiness. Cheap: updated per batch.
#[derive(Debug, Clone, Default)]
pub struct WorkerStats {
    inner: Arc<Mutex<StatsInner>>,
}

#[derive(Debug, Default)]
struct StatsInner {
    lanes: BTreeMap<(ShardId, ConsumerName), LaneStats>,
    read: BTreeMap<ShardId, ShardRead>,
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

    pub(crate) fn read(&self, shard: &ShardId, batch: &RecordBatch) {
        let bytes = batch.data_bytes() as u64;
        let last = batch.records.last().map(|r| r.approximate_arrival);
        self.with(|s| {
            let r = s.read.entry(shard.clone()).or_default();
            r.records += batch.records.len() as u64;
            r.bytes += bytes;
            r.last_arrival = last.or(r.last_arrival);
            r.last_answer = Some(tokio::time::Instant::now());
            if let Some(p) = batch.last_position() {
                r.last_position = Some(p.clone());
            }
            if batch.records.is_empty() && batch.millis_behind_latest == Some(0) {
                r.at_tip = Some(tokio::time::Instant::now());
            }
        });
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
        self.with(|s| s.read.iter().map(|(k, r)| (k.clone(), r.records)).collect())
    }

    /// Records, bytes and the last arrival time read per shard.
    pub fn reads(&self) -> BTreeMap<ShardId, ShardRead> {
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
