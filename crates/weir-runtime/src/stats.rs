use std::collections::{BTreeMap, BTreeSet};
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
    /// Since when its calls fail without a success in between (`None` when the last
    /// call succeeded).
    pub failing_since: Option<tokio::time::Instant>,
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

/// The live read of a shard this worker reads now (from the start of its live read
/// until the shard worker stops; a shard waiting for its parents is not read).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveRead {
    /// When the live read started.
    pub since: tokio::time::Instant,
    /// When it last answered.
    pub last_answer: Option<tokio::time::Instant>,
    /// `MillisBehindLatest` of its last answer that carried one.
    pub millis_behind: Option<u64>,
    /// A failure retrying will not fix quickly (access denied, a deleted stream,
    /// expired credentials), since when, until the read answers again.
    pub failing: Option<(tokio::time::Instant, String)>,
}

impl LiveRead {
    /// Why this read is unhealthy at `now`, if it is: failing, or (when `silence`
    /// counts: reads that answer when there is nothing to read, as enhanced fan-out and
    /// polling do) without an answer, for `bound` or longer.
    pub fn problem(&self, now: tokio::time::Instant, bound: std::time::Duration, silence: bool) -> Option<String> {
        if let Some((since, error)) = &self.failing
            && now.saturating_duration_since(*since) >= bound
        {
            return Some(format!("reads failing for {}s: {error}", now.saturating_duration_since(*since).as_secs()));
        }
        let quiet = now.saturating_duration_since(self.last_answer.unwrap_or(self.since));
        (silence && quiet >= bound).then(|| format!("no answer from reads for {}s", quiet.as_secs()))
    }
}

/// Whether a worker works, as readiness reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Health {
    /// It completed a lease cycle and nothing has been failing for the bound.
    pub ready: bool,
    /// What is wrong, one line each (empty when ready).
    pub problems: Vec<String>,
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
    held: BTreeSet<ShardId>,
    ready: bool,
    live: BTreeMap<ShardId, LiveRead>,
    /// Since when lease cycles fail (reading the worker records or the leases), with
    /// the last error.
    lease_table_failing: Option<(tokio::time::Instant, String)>,
    /// Since when lease renewals fail in the store (or, while the worker holds no
    /// lease, its takes do), with the last error.
    renewals_failing: Option<(tokio::time::Instant, String)>,
    /// Since when the worker's heartbeats fail, with the last error.
    heartbeat_failing: Option<(tokio::time::Instant, String)>,
}

/// What one round of lease writes came to: a renewal tick, or the takes of a lease
/// cycle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum LeaseWrites {
    /// No write was made.
    None,
    /// Every write made was answered: it landed, or it met a lease that moved on (a
    /// lease lost or a take lost to another worker is churn, not a failing store).
    Answered,
    /// At least one failed in the store (this is one of its errors).
    Failed(String),
}

impl LeaseWrites {
    /// Adds one write to the round: `failed` is its store error, `None` when it was
    /// answered.
    pub(crate) fn add(&mut self, failed: Option<String>) {
        match failed {
            Some(error) => *self = LeaseWrites::Failed(error),
            None if *self == LeaseWrites::None => *self = LeaseWrites::Answered,
            None => {}
        }
    }
}

/// Records `error` as the latest of a failure, keeping when it began (now, if it had
/// not).
fn still_failing(slot: &mut Option<(tokio::time::Instant, String)>, error: String) {
    let since = slot.take().map_or_else(tokio::time::Instant::now, |(since, _)| since);
    *slot = Some((since, error));
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
            if let Some(live) = s.live.get_mut(shard) {
                live.last_answer = Some(tokio::time::Instant::now());
                live.millis_behind = batch.millis_behind_latest.or(live.millis_behind);
                live.failing = None;
            }
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

    pub(crate) fn set_held(&self, held: BTreeSet<ShardId>) {
        // A set: a worker holding thousands of leases (the first one of a fleet's cold
        // start takes them all, a replay from an archive of thousands of objects).
        self.with(|s| {
            s.live.retain(|k, _| held.contains(k));
            s.held = held;
        });
    }

    /// The worker let `shard` go (its shard worker ended): one shard, not the whole
    /// set again, since thousands of shards of a replay end together.
    pub(crate) fn let_go(&self, shard: &ShardId) {
        self.with(|s| {
            s.live.remove(shard);
            s.held.remove(shard);
        });
    }

    /// The shard's live read started.
    pub(crate) fn reading(&self, shard: &ShardId) {
        let live =
            LiveRead { since: tokio::time::Instant::now(), last_answer: None, millis_behind: None, failing: None };
        self.with(|s| {
            s.live.insert(shard.clone(), live);
            // A failure of an earlier time this worker held the shard is not news.
            for ((k, _), lane) in s.lanes.iter_mut() {
                if k == shard {
                    lane.failing_since = None;
                }
            }
        });
    }

    /// The shard's live read reported a failure retrying will not fix quickly.
    pub(crate) fn read_failing(&self, shard: &ShardId, error: String) {
        self.with(|s| {
            if let Some(live) = s.live.get_mut(shard) {
                still_failing(&mut live.failing, error);
            }
        });
    }

    /// The shard's live read stopped (the shard worker is finishing): its lag and
    /// read health go with it.
    pub(crate) fn not_reading(&self, shard: &ShardId) {
        self.with(|s| s.live.remove(shard));
    }

    /// A lease cycle listed the table (`Ok`) or could not (`Err`, the error).
    pub(crate) fn lease_cycle(&self, outcome: Result<(), String>) {
        self.with(|s| match outcome {
            Ok(()) => {
                s.ready = true;
                s.lease_table_failing = None;
            }
            Err(error) => {
                still_failing(&mut s.lease_table_failing, error);
            }
        });
    }

    /// A renewal tick's writes. Renewals failing keep the failure's start; one tick
    /// whose renewals all land ends it; a tick with nothing to renew changes nothing
    /// (the leases may have gone because their renewals failed).
    pub(crate) fn renewals(&self, writes: LeaseWrites) {
        self.with(|s| match writes {
            LeaseWrites::None => {}
            LeaseWrites::Answered => s.renewals_failing = None,
            LeaseWrites::Failed(error) => still_failing(&mut s.renewals_failing, error),
        });
    }

    /// A heartbeat landed (`Ok`) or failed (`Err`, the error). While heartbeats fail,
    /// the worker's leases lapse with them (others take them).
    pub(crate) fn heartbeat(&self, outcome: Result<(), String>) {
        self.with(|s| match outcome {
            Ok(()) => s.heartbeat_failing = None,
            Err(error) => still_failing(&mut s.heartbeat_failing, error),
        });
    }

    /// The writes (takes, adoptions, handoff requests) of a lease cycle that began with
    /// no lease held. Such a worker renews nothing, and one whose renewals failed until
    /// its leases lapsed is as stuck when it cannot take them back: a failing take
    /// keeps (or starts) the failure. A take that lands, or a cycle with nothing to
    /// take (the worker is not needed), ends it.
    pub(crate) fn takes_holding_nothing(&self, writes: LeaseWrites) {
        self.with(|s| match writes {
            LeaseWrites::None | LeaseWrites::Answered => s.renewals_failing = None,
            LeaseWrites::Failed(error) => still_failing(&mut s.renewals_failing, error),
        });
    }

    /// The live reads of the shards this worker reads now.
    pub fn live_reads(&self) -> BTreeMap<ShardId, LiveRead> {
        self.with(|s| s.live.clone())
    }

    /// Whether the worker works at `now`: it completed a lease cycle, and no lease
    /// cycle, lease renewal (see [`Self::renewals`]), live read or consumer of a held
    /// shard has been failing (or a read silent, when `silence` counts: see
    /// [`LiveRead::problem`]) for `bound` or longer. A problem shorter than `bound` (a throttled read, a lease table blip, a
    /// consumer retrying) does not count.
    pub fn health(&self, now: tokio::time::Instant, bound: std::time::Duration, silence: bool) -> Health {
        self.with(|s| {
            let mut problems = Vec::new();
            if !s.ready {
                problems.push("starting: no lease cycle completed yet".to_owned());
            }
            if let Some((since, error)) = &s.lease_table_failing {
                let for_ = now.saturating_duration_since(*since);
                if for_ >= bound {
                    problems.push(format!("lease table failing for {}s: {error}", for_.as_secs()));
                }
            }
            if let Some((since, error)) = &s.renewals_failing {
                let for_ = now.saturating_duration_since(*since);
                if for_ >= bound {
                    problems.push(format!("lease renewals failing for {}s: {error}", for_.as_secs()));
                }
            }
            if let Some((since, error)) = &s.heartbeat_failing {
                let for_ = now.saturating_duration_since(*since);
                if for_ >= bound {
                    problems.push(format!("worker heartbeat failing for {}s: {error}", for_.as_secs()));
                }
            }
            for (shard, live) in &s.live {
                if let Some(p) = live.problem(now, bound, silence) {
                    problems.push(format!("shard {shard}: {p}"));
                }
            }
            for ((shard, consumer), lane) in &s.lanes {
                if !s.held.contains(shard) {
                    continue;
                }
                if let Some(since) = lane.failing_since {
                    let for_ = now.saturating_duration_since(since);
                    if for_ >= bound {
                        let error = lane.last_error.as_deref().unwrap_or("");
                        problems
                            .push(format!("consumer {consumer} on {shard}: failing for {}s: {error}", for_.as_secs()));
                    }
                }
            }
            Health { ready: problems.is_empty(), problems }
        })
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
        self.with(|s| s.held.iter().cloned().collect())
    }

    /// Whether the worker completed its first lease cycle (see [`Self::health`] for
    /// whether it works).
    pub fn is_ready(&self) -> bool {
        self.with(|s| s.ready)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    const BOUND: Duration = Duration::from_secs(60);

    fn renewal_problem(stats: &WorkerStats) -> Option<String> {
        let health = stats.health(tokio::time::Instant::now(), BOUND, false);
        health.problems.into_iter().find(|p| p.starts_with("lease renewals failing"))
    }

    /// A shard let go leaves the held set and its live read goes with it; the others
    /// stay, and a set published later replaces the whole.
    #[tokio::test(start_paused = true)]
    async fn a_shard_let_go_leaves_the_held_set_alone() {
        let stats = WorkerStats::default();
        let (a, b) = (ShardId::new("shard-a"), ShardId::new("shard-b"));
        stats.set_held([a.clone(), b.clone()].into_iter().collect());
        stats.reading(&a);
        stats.reading(&b);
        stats.let_go(&a);
        assert_eq!(stats.held(), vec![b.clone()]);
        assert_eq!(stats.live_reads().keys().collect::<Vec<_>>(), vec![&b]);
        stats.let_go(&a);
        assert_eq!(stats.held(), vec![b.clone()], "letting go twice changes nothing");
        stats.set_held(BTreeSet::new());
        assert!(stats.held().is_empty() && stats.live_reads().is_empty());
    }

    /// Renewals failing count from the first failure until one tick's renewals all land;
    /// ticks with nothing to renew (the leases lapsed) change nothing; a lease cycle of
    /// a worker holding nothing ends the failure when its takes land or it has nothing
    /// to take, and keeps it when they fail.
    #[tokio::test(start_paused = true)]
    async fn renewal_failures_last_until_a_write_lands_or_nothing_is_wanted() {
        let stats = WorkerStats::default();
        stats.lease_cycle(Ok(()));
        stats.renewals(LeaseWrites::Failed("shard s-1: refused".into()));
        tokio::time::advance(BOUND / 2).await;
        stats.renewals(LeaseWrites::None);
        stats.takes_holding_nothing(LeaseWrites::Failed("taking shard s-1: refused".into()));
        assert_eq!(renewal_problem(&stats), None, "not before the bound");
        tokio::time::advance(BOUND / 2).await;
        let problem = renewal_problem(&stats).expect("counted from the first failure");
        assert_eq!(problem, "lease renewals failing for 60s: taking shard s-1: refused", "with the last error");

        stats.renewals(LeaseWrites::Answered);
        assert_eq!(renewal_problem(&stats), None, "a tick whose renewals all land ends it");

        stats.renewals(LeaseWrites::Failed("shard s-1: refused".into()));
        tokio::time::advance(BOUND).await;
        assert!(renewal_problem(&stats).is_some());
        stats.takes_holding_nothing(LeaseWrites::None);
        assert_eq!(renewal_problem(&stats), None, "a worker with nothing to take is not stuck");
    }

    /// Heartbeats failing for the bound make the worker unhealthy (its leases lapse
    /// with them); one that lands ends it.
    #[tokio::test(start_paused = true)]
    async fn failing_heartbeats_count_from_the_first_failure() {
        let stats = WorkerStats::default();
        stats.lease_cycle(Ok(()));
        stats.heartbeat(Err("throttled".into()));
        tokio::time::advance(BOUND / 2).await;
        stats.heartbeat(Err("still throttled".into()));
        assert!(stats.health(tokio::time::Instant::now(), BOUND, false).ready, "not yet the bound");
        tokio::time::advance(BOUND / 2).await;
        let health = stats.health(tokio::time::Instant::now(), BOUND, false);
        assert_eq!(health.problems, ["worker heartbeat failing for 60s: still throttled"]);
        stats.heartbeat(Ok(()));
        assert!(stats.health(tokio::time::Instant::now(), BOUND, false).ready);
    }

    #[test]
    fn one_failed_write_fails_the_round() {
        let mut writes = LeaseWrites::None;
        writes.add(None);
        assert_eq!(writes, LeaseWrites::Answered);
        writes.add(Some("refused".into()));
        writes.add(None);
        assert_eq!(writes, LeaseWrites::Failed("refused".into()));
    }
}
