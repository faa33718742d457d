//! The worker: one per process. It owns every task it starts and returns from
//! [`Worker::run`] only when all of them have finished.
//!
//! Tasks: one host per consumer; one renewer (every `renew_interval` for leases no
//! checkpoint wrote since, independent of slow listings); one shard worker per held lease. The main loop syncs leases with the
//! shard list, and every `taker_interval` heartbeats, adopts leases handed to it, takes
//! free or expired leases and requests at most one handoff (KCL's algorithm, see
//! [`weir_core::policy::plan_takes`]). A requested handoff not completed within
//! `handoff_timeout + failover` is forced with a conditional take.
//!
//! Shutdown (cancel the token): shard workers flush their consumers within
//! `shutdown_timeout`, checkpoint and release their leases; then the renewer and the
//! hosts stop and the worker's heartbeat record is removed.
//!
//! One worker id, one process: the worker draws a random instance token at start and
//! its heartbeat record carries it (see [`weir_core::ports::WorkerHeartbeat`]). A
//! record of another instance at start is watched for `failover`: if it moves, a live
//! process has this id and the worker refuses to start
//! ([`WorkerError::DuplicateWorkerId`]); if not, its process is gone (a crash) and the
//! worker takes the record over. A running worker whose record was taken over by
//! another process stops at its next heartbeat and returns the same error.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};

use futures::FutureExt;
use tokio::sync::{Notify, mpsc};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use weir_core::policy::{Observations, leases_to_create, plan_takes};
use weir_core::ports::{LeaseTable, ShardReader, StreamCatalog};
use weir_core::{Clock, Consumer, ConsumerName, LeaseChange, LeaseError, LeaseMutation, ShardId, WorkerId};

use crate::config::{ConfigError, RuntimeConfig};
use crate::held_lease::{HeldError, HeldLease};
use crate::host::{HostHandle, run_host};
use crate::shard::{ShardDeps, ShardOutcome, ShardWorker};
use crate::stats::{LeaseWrites, WorkerStats};

/// Why a worker cannot start or run.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    /// A runtime setting is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// No consumer was registered.
    #[error("no consumer registered: a worker needs at least one")]
    NoConsumers,
    /// Two consumers share a name (their checkpoints would collide).
    #[error("two consumers are named {0:?}: names key checkpoints and must be unique")]
    DuplicateConsumer(String),
    /// The lease table failed at startup.
    #[error("lease table unavailable at startup: {0}")]
    Lease(#[source] LeaseError),
    /// Another live process runs with this worker id.
    #[error(
        "worker id {worker} is in use by another running process (instance {instance}); give each process its own `worker.id`, or leave it unset for a unique one"
    )]
    DuplicateWorkerId {
        /// The worker id.
        worker: WorkerId,
        /// The other process's instance.
        instance: String,
    },
}

type HeldMap = Arc<Mutex<BTreeMap<ShardId, Arc<HeldLease>>>>;

/// A weir worker. See the module documentation.
pub struct Worker {
    config: Arc<RuntimeConfig>,
    table: Arc<dyn LeaseTable>,
    reader: Arc<dyn ShardReader>,
    catalog: Arc<dyn StreamCatalog>,
    consumers: Vec<Box<dyn Consumer>>,
    clock: Arc<dyn Clock>,
    stats: WorkerStats,
}

impl Worker {
    /// A worker over a stream (`reader`, `catalog`) with leases in `table`.
    pub fn new(
        config: RuntimeConfig,
        table: Arc<dyn LeaseTable>,
        reader: Arc<dyn ShardReader>,
        catalog: Arc<dyn StreamCatalog>,
        consumers: Vec<Box<dyn Consumer>>,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, WorkerError> {
        config.validate()?;
        if consumers.is_empty() {
            return Err(WorkerError::NoConsumers);
        }
        let mut names = HashSet::new();
        for c in &consumers {
            if !names.insert(c.name().to_owned()) {
                return Err(WorkerError::DuplicateConsumer(c.name().to_owned()));
            }
        }
        Ok(Self { config: Arc::new(config), table, reader, catalog, consumers, clock, stats: WorkerStats::default() })
    }

    /// Live counters of this worker.
    pub fn stats(&self) -> WorkerStats {
        self.stats.clone()
    }

    /// Runs until `shutdown` is cancelled, then drains gracefully.
    pub async fn run(mut self, shutdown: CancellationToken) -> Result<(), WorkerError> {
        let me = self.config.worker_id.clone();
        let instance = format!("{:032x}", rand::random::<u128>());
        tokio::select! {
            registered = register(self.table.as_ref(), &me, &instance, self.config.failover) => registered?,
            _ = shutdown.cancelled() => return Ok(()),
        }
        tracing::info!(worker = %me, instance, consumers = self.consumers.len(), "worker starting");

        let mut host_tasks = JoinSet::new();
        let mut hosts = Vec::new();
        for consumer in std::mem::take(&mut self.consumers) {
            let (tx, rx) = mpsc::unbounded_channel();
            hosts.push(HostHandle { name: ConsumerName::new(consumer.name()), ctl: tx });
            host_tasks.spawn(run_host(consumer, rx, self.clock.clone(), self.config.tick_interval, self.stats.clone()));
        }

        let held: HeldMap = Arc::default();
        let renewer_stop = CancellationToken::new();
        let mut renewer = JoinSet::new();
        renewer.spawn(renew_loop(held.clone(), self.config.renew_interval, self.stats.clone(), renewer_stop.clone()));
        let shard_stop = CancellationToken::new();
        let shard_ended = Arc::new(Notify::new());
        let deps = ShardDeps {
            table: self.table.clone(),
            reader: self.reader.clone(),
            hosts,
            config: self.config.clone(),
            stats: self.stats.clone(),
            shard_ended: shard_ended.clone(),
            reads: crate::shard::ActiveReads::new(),
        };
        let mut coordinator = Coordinator {
            instance: instance.clone(),
            displaced: None,
            table: self.table.clone(),
            catalog: self.catalog.clone(),
            config: self.config.clone(),
            clock: self.clock.clone(),
            seen: Observations::default(),
            pending_steals: HashMap::new(),
            cycle_error: None,
            takes_holding_nothing: None,
            underloaded: false,
        };
        let mut shards: JoinSet<(ShardId, ShardOutcome)> = JoinSet::new();
        let mut next_take = Instant::now();
        let mut sync = tokio::time::interval(self.config.shard_sync_interval);
        loop {
            tokio::select! {
                biased;
                _ = shutdown.cancelled() => break,
                Some(done) = shards.join_next() => {
                    // The task left the held set itself. Not by key here: this worker
                    // may have taken the shard again meanwhile (a lease lost while its
                    // consumers were still closing), and removing the new lease would
                    // stop its renewals, lose it too, and so on for every new take.
                    match done {
                        Ok((key, outcome)) => tracing::info!(shard = %key, ?outcome, "shard worker finished"),
                        Err(e) => tracing::error!(error = %e, "shard worker task failed"),
                    }
                    publish_held(&held, &self.stats);
                }
                _ = shard_ended.notified() => coordinator.sync_shards().await,
                _ = sync.tick() => coordinator.sync_shards().await,
                _ = tokio::time::sleep_until(next_take) => {
                    let new_leases = coordinator.cycle(&held).await;
                    if coordinator.displaced.is_some() {
                        break;
                    }
                    // While a requested handoff is pending, look again soon: the lease
                    // is idle between the transfer and its adoption here. So too while
                    // this worker holds less than its target: what a draining worker
                    // lets go is taken within a renewal interval, not a taker interval
                    // (workers at their target list no more often than before).
                    next_take = Instant::now() + if coordinator.pending_steals.is_empty() && !coordinator.underloaded {
                        self.config.taker_interval
                    } else {
                        self.config.renew_interval
                    };
                    for lease in new_leases {
                        let key = lease.key().clone();
                        held.lock().unwrap_or_else(|p| p.into_inner()).insert(key.clone(), lease.clone());
                        let worker = ShardWorker::new(lease.clone(), deps.clone(), shard_stop.child_token());
                        let (held, stats) = (held.clone(), self.stats.clone());
                        shards.spawn(async move {
                            // A panic in the shard worker still leaves the held set.
                            let outcome = AssertUnwindSafe(worker.run()).catch_unwind().await;
                            // Here, not where this loop joins the task: the loop may be
                            // inside a lease-table call that hangs, and what the worker
                            // reports held must not include a shard it stopped working.
                            {
                                let mut map = held.lock().unwrap_or_else(|p| p.into_inner());
                                if map.get(&key).is_some_and(|l| Arc::ptr_eq(l, &lease)) {
                                    map.remove(&key);
                                }
                            }
                            publish_held(&held, &stats);
                            match outcome {
                                Ok(outcome) => (key, outcome),
                                Err(panic) => std::panic::resume_unwind(panic),
                            }
                        });
                    }
                    publish_held(&held, &self.stats);
                    if let Some(writes) = coordinator.takes_holding_nothing.take() {
                        self.stats.takes_holding_nothing(writes);
                    }
                    self.stats.lease_cycle(coordinator.cycle_error.take().map_or(Ok(()), Err));
                }
            }
        }
        tracing::info!(worker = %me, shards = shards.len(), "worker shutting down");
        shard_stop.cancel();
        while let Some(done) = shards.join_next().await {
            if let Ok((key, outcome)) = done {
                tracing::info!(shard = %key, ?outcome, "shard worker finished");
            }
        }
        held.lock().unwrap_or_else(|p| p.into_inner()).clear();
        publish_held(&held, &self.stats);
        renewer_stop.cancel();
        while renewer.join_next().await.is_some() {}
        drop(deps);
        while host_tasks.join_next().await.is_some() {}
        if let Err(e) = self.table.remove_worker(&me, &instance).await {
            tracing::warn!(worker = %me, error = %e, "could not remove worker record");
        }
        if let Some(holder) = coordinator.displaced {
            tracing::error!(worker = %me, other = holder, "another process took over this worker id; stopped");
            return Err(WorkerError::DuplicateWorkerId { worker: me, instance: holder });
        }
        tracing::info!(worker = %me, "worker stopped");
        Ok(())
    }
}

/// Publishes which shards the worker holds (gauge and `/status`).
fn publish_held(held: &HeldMap, stats: &WorkerStats) {
    let keys: Vec<ShardId> = held.lock().unwrap_or_else(|p| p.into_inner()).keys().cloned().collect();
    metrics::gauge!(crate::metrics::LEASES_HELD).set(keys.len() as f64);
    stats.set_held(keys);
}

/// Renews every valid held lease about every `every`, and tells `stats` how the
/// renewals of each tick went (see [`WorkerStats::renewals`]).
///
/// A lease whose own checkpoint (or any write of this worker) landed recently needs no
/// renewal: its counter moved then, which is all other workers look at. The loop ticks
/// three times per `every` and renews a lease only when its last landed write started
/// at least five sixths of `every` ago, so a lease written by nothing else is renewed
/// every `every` (every third tick), and one checkpointed at least that often is not
/// renewed at all (at 10,000 shards checkpointing every second, 3,000 writes a second
/// fewer). No lease goes longer than 7/6 of `every` between writes that land while
/// the table answers (the renewal interval is at most half of `failover`).
async fn renew_loop(held: HeldMap, every: std::time::Duration, stats: WorkerStats, stop: CancellationToken) {
    let mut tick = tokio::time::interval(every / 3);
    let fresh = every * 5 / 6;
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tick.tick() => {
                let leases: Vec<Arc<HeldLease>> = held.lock().unwrap_or_else(|p| p.into_inner()).values().cloned().collect();
                let valid: Vec<&Arc<HeldLease>> = leases.iter().filter(|l| l.is_valid()).collect();
                let (recent, due): (Vec<_>, Vec<_>) = valid.into_iter().partition(|l| l.written_within(fresh));
                let renewals = due.into_iter().map(|l| async move {
                    let renewed = l.renew().await;
                    if let Err(e) = &renewed {
                        tracing::debug!(shard = %l.key(), error = %e, "renewal failed");
                    }
                    (l.key().clone(), renewed)
                });
                let mut writes = LeaseWrites::None;
                // A lease written recently was answered by the store.
                for _ in &recent {
                    writes.add(None);
                }
                for (key, renewed) in futures::future::join_all(renewals).await {
                    match renewed {
                        Ok(()) => writes.add(None),
                        Err(HeldError::Store(e)) => writes.add(Some(format!("shard {key}: {e}"))),
                        // Lost: the store answered (another worker has it) or the lease
                        // lapsed; either way there is nothing left to renew.
                        Err(HeldError::Lost(_)) => {}
                    }
                }
                stats.renewals(writes);
            }
        }
    }
}

/// The error of a lease write that failed in the store; `None` when the store
/// answered (a conflict or a missing lease: the lease moved on, which is churn).
fn store_failure(e: &LeaseError) -> Option<String> {
    (!matches!(e, LeaseError::Conflict { .. } | LeaseError::NotFound(_))).then(|| e.to_string())
}

/// Makes the heartbeat record of `me` this process's (see the module documentation).
async fn register(
    table: &dyn LeaseTable,
    me: &WorkerId,
    instance: &str,
    failover: std::time::Duration,
) -> Result<(), WorkerError> {
    loop {
        let holder = match table.heartbeat(me, instance).await {
            Ok(()) => return Ok(()),
            Err(LeaseError::WorkerIdInUse { instance, .. }) => instance,
            Err(e) => return Err(WorkerError::Lease(e)),
        };
        let listed = table.list_workers().await.map_err(WorkerError::Lease)?;
        let Some(seen) = listed.into_iter().find(|w| w.worker == *me) else { continue };
        tracing::warn!(
            worker = %me, other = holder, wait = ?failover,
            "another process has this worker id's record; waiting to see whether it is alive"
        );
        tokio::time::sleep(failover).await;
        let listed = table.list_workers().await.map_err(WorkerError::Lease)?;
        match listed.into_iter().find(|w| w.worker == *me) {
            None => continue,
            Some(now) if now != seen => {
                return Err(WorkerError::DuplicateWorkerId { worker: me.clone(), instance: now.instance });
            }
            Some(_) => {
                if table.claim_worker(&seen, instance).await.map_err(WorkerError::Lease)? {
                    tracing::info!(worker = %me, previous = seen.instance, "took over the record of a stopped process");
                    return Ok(());
                }
            }
        }
    }
}

struct Coordinator {
    /// This process's instance token.
    instance: String,
    /// Set when another process took over this worker id (its instance).
    displaced: Option<String>,
    table: Arc<dyn LeaseTable>,
    catalog: Arc<dyn StreamCatalog>,
    config: Arc<RuntimeConfig>,
    clock: Arc<dyn Clock>,
    seen: Observations,
    /// Handoffs this worker requested, with the time after which it forces them.
    pending_steals: HashMap<ShardId, Instant>,
    /// Why the last lease cycle could not heartbeat or list (`None`: it could).
    cycle_error: Option<String>,
    /// How the lease writes of the last cycle went, when it began with no lease held
    /// and got as far as its takes (see [`WorkerStats::takes_holding_nothing`]).
    takes_holding_nothing: Option<LeaseWrites>,
    /// After the last cycle, this worker held fewer leases than its target: it looks
    /// again at the renewal interval.
    underloaded: bool,
}

impl Coordinator {
    /// Creates leases for shards that have none, parents first.
    async fn sync_shards(&self) {
        let shards = match self.catalog.list_shards().await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, "shard sync: cannot list shards");
                return;
            }
        };
        let existing: HashSet<ShardId> = match self.table.list().await {
            Ok(l) => l.into_iter().map(|l| l.key).collect(),
            Err(e) => {
                tracing::warn!(error = %e, "shard sync: cannot list leases");
                return;
            }
        };
        for lease in leases_to_create(&shards, &existing, &self.config.initial_position) {
            let key = lease.key.clone();
            match self.table.create_if_absent(lease).await {
                Ok(true) => tracing::info!(shard = %key, "lease created"),
                Ok(false) => {}
                Err(e) => {
                    // Stop here: children must not be created before their parents.
                    tracing::warn!(shard = %key, error = %e, "shard sync: cannot create lease");
                    return;
                }
            }
        }
    }

    /// One taker cycle; returns leases newly held.
    async fn cycle(&mut self, held: &HeldMap) -> Vec<Arc<HeldLease>> {
        let me = self.config.worker_id.clone();
        let now = self.clock.now();
        self.takes_holding_nothing = None;
        match self.table.heartbeat(&me, &self.instance).await {
            Ok(()) => {}
            Err(LeaseError::WorkerIdInUse { instance, .. }) => {
                self.displaced = Some(instance);
                return Vec::new();
            }
            Err(e) => {
                tracing::warn!(error = %e, "heartbeat failed");
                self.cycle_error = Some(format!("heartbeat: {e}"));
            }
        }
        let (leases, workers) = match (self.table.list().await, self.table.list_workers().await) {
            (Ok(l), Ok(w)) => (l, w),
            (Err(e), _) | (_, Err(e)) => {
                tracing::warn!(error = %e, "taker: cannot list leases");
                self.cycle_error = Some(format!("listing leases: {e}"));
                return Vec::new();
            }
        };
        // Leases of streams this fleet does not read (any more) are left alone.
        let leases: Vec<weir_core::Lease> = leases.into_iter().filter(|l| self.catalog.covers(&l.key)).collect();
        self.seen.observe(&leases, &workers, now);
        let held_keys: HashSet<ShardId> = held.lock().unwrap_or_else(|p| p.into_inner()).keys().cloned().collect();
        let mut out = Vec::new();
        let mut writes = LeaseWrites::None;
        let adopt = |lease: weir_core::Lease, since: Instant, out: &mut Vec<Arc<HeldLease>>| {
            out.push(HeldLease::new(lease, since, self.table.clone(), self.config.failover));
        };

        // Leases handed to this worker (or left owned by it by an earlier run). Held
        // only after a write of this worker's own: a lease's validity runs from the
        // start of its holder's last write, and the transfer (or the earlier run's last
        // renewal) may be most of a failover old already, so others may count it
        // expired soon.
        for l in &leases {
            if l.is_owned_by(&me) && !l.ended && !held_keys.contains(&l.key) {
                self.pending_steals.remove(&l.key);
                let since = Instant::now();
                match self.table.mutate(&LeaseMutation::on(l, LeaseChange::Renew)).await {
                    Ok(renewed) => {
                        tracing::info!(shard = %l.key, "lease adopted");
                        writes.add(None);
                        adopt(renewed, since, &mut out);
                    }
                    Err(e) => {
                        tracing::debug!(shard = %l.key, error = %e, "adopting a lease failed; next cycle");
                        writes.add(store_failure(&e).map(|e| format!("adopting shard {}: {e}", l.key)));
                    }
                }
            }
        }
        let adopted: HashSet<ShardId> = out.iter().map(|h| h.key().clone()).collect();

        // Requested handoffs: drop the ones overtaken, force the ones overdue.
        let by_key: HashMap<&ShardId, &weir_core::Lease> = leases.iter().map(|l| (&l.key, l)).collect();
        for (key, deadline) in self.pending_steals.clone() {
            let Some(l) = by_key.get(&key) else {
                self.pending_steals.remove(&key);
                continue;
            };
            if l.handoff_to.as_ref() != Some(&me) || l.ended {
                self.pending_steals.remove(&key);
            } else if Instant::now() >= deadline {
                self.pending_steals.remove(&key);
                let since = Instant::now();
                match self.table.mutate(&LeaseMutation::on(l, LeaseChange::Take { owner: me.clone() })).await {
                    Ok(taken) => {
                        tracing::warn!(shard = %key, "handoff not completed in time; lease taken");
                        writes.add(None);
                        adopt(taken, since, &mut out);
                    }
                    Err(e) => {
                        tracing::debug!(shard = %key, error = %e, "forced take lost a race");
                        writes.add(store_failure(&e).map(|e| format!("taking shard {key}: {e}")));
                    }
                }
            }
        }

        let plan = plan_takes(&me, &leases, &workers, &self.seen, now, self.config.failover);
        let target = plan.target;
        for l in plan.take {
            if held_keys.contains(&l.key) || adopted.contains(&l.key) {
                continue;
            }
            let since = Instant::now();
            match self.table.mutate(&LeaseMutation::on(&l, LeaseChange::Take { owner: me.clone() })).await {
                Ok(taken) => {
                    metrics::counter!(crate::metrics::LEASES_TAKEN).increment(1);
                    tracing::info!(shard = %l.key, previous = ?l.owner, "lease taken");
                    writes.add(None);
                    adopt(taken, since, &mut out);
                }
                Err(e) => {
                    tracing::debug!(shard = %l.key, error = %e, "take lost a race");
                    writes.add(store_failure(&e).map(|e| format!("taking shard {}: {e}", l.key)));
                }
            }
        }
        if let Some(l) = plan.steal
            && self.pending_steals.is_empty()
        {
            match self.table.mutate(&LeaseMutation::on(&l, LeaseChange::RequestHandoff { to: me.clone() })).await {
                Ok(_) => {
                    writes.add(None);
                    metrics::counter!(crate::metrics::LEASE_STEALS).increment(1);
                    tracing::info!(shard = %l.key, from = ?l.owner, "handoff requested");
                    let deadline = Instant::now() + self.config.handoff_timeout + self.config.failover;
                    self.pending_steals.insert(l.key.clone(), deadline);
                }
                Err(e) => {
                    tracing::debug!(shard = %l.key, error = %e, "handoff request refused");
                    writes.add(store_failure(&e).map(|e| format!("requesting shard {}: {e}", l.key)));
                }
            }
        }
        self.underloaded = held_keys.len() + out.len() < target;
        if held_keys.is_empty() {
            self.takes_holding_nothing = Some(writes);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_core::Timestamp;
    use weir_testkit::MemoryLeaseTable;
    use weir_testkit::fixtures::taken_lease;

    /// A lease found owned by this worker (handed over, or left by an earlier run) is
    /// held only after a write of this worker's own: its counter moves, so a worker that
    /// has watched it unchanged since the transfer does not count it expired while this
    /// one uses it; its validity runs from that write.
    #[tokio::test(start_paused = true)]
    async fn an_adopted_lease_is_written_before_it_is_held() {
        let table = Arc::new(MemoryLeaseTable::new());
        let handed = taken_lease(table.as_ref(), "s-1", "me").await;
        // Most of a failover passes before the taker cycle finds the lease.
        tokio::time::advance(std::time::Duration::from_secs(9)).await;
        let stream = weir_local::MemoryStream::new(Default::default(), Arc::new(crate::TokioClock::new()));
        let mut c = Coordinator {
            instance: "i".into(),
            displaced: None,
            table: table.clone(),
            catalog: Arc::new(stream),
            config: Arc::new(RuntimeConfig::new(WorkerId::new("me"))),
            clock: Arc::new(weir_testkit::ManualClock::new(Timestamp::from_millis(0))),
            seen: Observations::default(),
            pending_steals: HashMap::new(),
            cycle_error: None,
            takes_holding_nothing: None,
            underloaded: false,
        };
        let held = c.cycle(&HeldMap::default()).await;
        assert_eq!(held.len(), 1, "adopted");
        let stored = table.get(&ShardId::new("s-1")).await.unwrap().unwrap();
        assert_eq!(stored.counter, handed.counter + 1, "written once by the adopter");
        assert_eq!(held[0].snapshot().await, stored, "held as written");
        tokio::time::advance(std::time::Duration::from_secs(8)).await;
        assert!(held[0].is_valid(), "valid from the adopter's own write");
    }

    /// A lease checkpointed every second needs no renewal (its counter moves with each
    /// checkpoint); an idle one is renewed every `renew_interval`; and no lease goes
    /// longer than 7/6 of the interval between writes.
    #[tokio::test(start_paused = true)]
    async fn renewals_skip_leases_a_checkpoint_wrote_recently() {
        let table: Arc<dyn LeaseTable> = Arc::new(MemoryLeaseTable::new());
        let failover = std::time::Duration::from_secs(10);
        let every = failover / 3;
        let held = HeldMap::default();
        for key in ["busy", "idle"] {
            let lease = taken_lease(table.as_ref(), key, "me").await;
            let h = HeldLease::new(lease, Instant::now(), table.clone(), failover);
            held.lock().unwrap().insert(ShardId::new(key), h);
        }
        let stop = CancellationToken::new();
        let renewer = tokio::spawn(renew_loop(held.clone(), every, WorkerStats::default(), stop.clone()));
        let busy = held.lock().unwrap()[&ShardId::new("busy")].clone();
        let counter = |key: &'static str| {
            let table = table.clone();
            async move { table.get(&ShardId::new(key)).await.unwrap().unwrap().counter }
        };
        let (busy_start, idle_start) = (counter("busy").await, counter("idle").await);
        let (mut last_idle, mut idle_moved_at, mut longest) = (idle_start, Instant::now(), std::time::Duration::ZERO);
        for second in 1..=100u64 {
            for _ in 0..10 {
                tokio::time::advance(std::time::Duration::from_millis(100)).await;
                let now = counter("idle").await;
                if now != last_idle {
                    longest = longest.max(idle_moved_at.elapsed());
                    (last_idle, idle_moved_at) = (now, Instant::now());
                }
            }
            let cp = weir_core::Checkpoint::At(weir_core::ExtendedSequenceNumber::plain(
                weir_core::SequenceNumber::from_u128(u128::from(second)),
            ));
            busy.checkpoint(BTreeMap::from([(weir_core::ConsumerName::new("c"), cp)]), None).await.unwrap();
        }
        stop.cancel();
        renewer.await.unwrap();
        assert_eq!(counter("busy").await - busy_start, 100, "100 checkpoints and no renewal");
        let idle_writes = counter("idle").await - idle_start;
        assert!((29..=31).contains(&idle_writes), "an idle lease renewed every 3.3 s: {idle_writes} in 100 s");
        assert!(longest <= every * 7 / 6, "an idle lease went {longest:?} between writes");
    }
}
