//! The worker: one per process. It owns every task it starts and returns from
//! [`Worker::run`] only when all of them have finished.
//!
//! Tasks: one host per consumer; one renewer (the worker's heartbeat, and leases no
//! checkpoint wrote since, every `renew_interval`, independent of slow listings); one
//! shard worker per held lease. The main loop's lease cycle runs every
//! `taker_interval` (every `renew_interval` while the worker holds less than its
//! target or waits for a handoff): it reads the worker records, and only when they show
//! something for this worker to take ([`weir_core::policy::census`]), a sample of the
//! leases (one part of them after another, until the sample holds what the worker
//! needs: [`weir_core::policy::plan_from_sample`]), and every
//! [`FULL_LISTING_EVERY`] cycles or so, every lease ([`weir_core::policy::plan_takes`]);
//! then it adopts leases handed to it, takes free or expired leases and requests
//! handoffs for what it still needs. A requested handoff not completed within
//! `handoff_timeout + failover` is forced with a conditional take. Leases are synced
//! with the shard list every `shard_sync_interval` by the leader (the live worker
//! with the smallest id; at once after its first census); a worker whose shard ended
//! creates the children's leases.
//!
//! A worker's leases are valid only while its heartbeat is (see [`Liveness`]), so
//! the others take every lease of a worker whose heartbeat stopped, without waiting
//! for each lease's own counter.
//!
//! Shutdown (cancel the token): shard workers flush their consumers within
//! `shutdown_timeout`, checkpoint and release their leases; then the renewer stops, the
//! worker's heartbeat record is removed (so the others count the leases free), and the
//! hosts stop.
//!
//! One worker id, one process: the worker draws a random instance token at start and
//! its heartbeat record carries it (see [`weir_core::ports::WorkerHeartbeat`]). A
//! record of another instance at start is watched for `failover`: if it moves, a live
//! process has this id and the worker refuses to start
//! ([`WorkerError::DuplicateWorkerId`]); if not, its process is gone (a crash) and the
//! worker takes the record over. A running worker whose record was taken over by
//! another process stops at its next heartbeat and returns the same error.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use futures::FutureExt;
use tokio::sync::{Notify, mpsc};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use weir_core::policy::{
    Census, Observations, census, leases_from_child_shards, leases_to_create, plan_from_sample, plan_takes,
};
use weir_core::ports::{LeaseTable, ShardReader, StreamCatalog, WorkerHeartbeat, WorkerLoad};
use weir_core::{
    ChildShard, Clock, Consumer, ConsumerName, LeaseChange, LeaseError, LeaseMutation, NewLease, ShardId, WorkerId,
};

use crate::config::{ConfigError, RuntimeConfig};
use crate::held_lease::{HeldError, HeldLease};
use crate::host::{HostHandle, run_host};
use crate::liveness::Liveness;
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

/// A worker reads every lease at least once in this many lease cycles (at least half
/// as many, drawn at random), whatever the worker records show (150 to 300 s at the
/// default `taker_interval`): the net under what the records cannot show. At 10,000
/// shards and 500 workers these readings are most of the lease table's reads.
pub const FULL_LISTING_EVERY: u32 = 60;

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
        let instance = format!("{:032x}", crate::jitter::bits128());
        let registered = tokio::select! {
            biased;
            _ = shutdown.cancelled() => return Ok(()),
            registered = register(self.table.as_ref(), &me, &instance, self.config.failover) => registered?,
        };
        let liveness = Arc::new(Liveness::new(registered, self.config.failover.mul_f64(0.9)));
        let active = Arc::new(AtomicU32::new(0));
        let pending = Arc::new(AtomicU32::new(0));
        let displaced: Arc<Mutex<Option<String>>> = Arc::default();
        let displaced_signal = CancellationToken::new();
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
        let held_changed = Arc::new(Notify::new());
        let heartbeat = Heartbeat {
            held_changed: held_changed.clone(),
            table: self.table.clone(),
            worker: me.clone(),
            instance: instance.clone(),
            liveness: liveness.clone(),
            active: active.clone(),
            pending: pending.clone(),
            displaced: displaced.clone(),
            displaced_signal: displaced_signal.clone(),
        };
        renewer.spawn(renew_loop(
            held.clone(),
            heartbeat,
            self.config.renew_interval,
            self.stats.clone(),
            renewer_stop.clone(),
        ));
        let shard_stop = CancellationToken::new();
        let (shard_ended, mut ended_shards) = mpsc::unbounded_channel();
        let deps = ShardDeps {
            table: self.table.clone(),
            reader: self.reader.clone(),
            hosts,
            config: self.config.clone(),
            stats: self.stats.clone(),
            shard_ended,
            reads: crate::shard::ActiveReads::new(),
        };
        let mut coordinator = Coordinator {
            liveness,
            active,
            pending,
            held_changed: held_changed.clone(),
            census: None,
            // The first full reading comes within FULL_LISTING_EVERY cycles: workers
            // started together (a scale-out, a deploy) do not all read every lease at
            // once; what they need, they find in samples.
            cycles_since_listing: crate::jitter::below(FULL_LISTING_EVERY),
            synced_once: false,
            table: self.table.clone(),
            catalog: self.catalog.clone(),
            config: self.config.clone(),
            clock: self.clock.clone(),
            seen: Observations::default(),
            pending_steals: BTreeMap::new(),
            cycle_error: None,
            takes_holding_nothing: None,
            underloaded: false,
            unborn: VecDeque::new(),
        };
        let mut shards: JoinSet<(ShardId, ShardOutcome)> = JoinSet::new();
        let mut next_take = Instant::now();
        let mut next_poll = Instant::now();
        let mut sync = tokio::time::interval(self.config.shard_sync_interval);
        loop {
            let new_leases = tokio::select! {
                biased;
                _ = shutdown.cancelled() => break,
                _ = displaced_signal.cancelled() => break,
                Some(done) = shards.join_next() => {
                    // The task left the held set itself. Not by key here: this worker
                    // may have taken the shard again meanwhile (a lease lost while its
                    // consumers were still closing), and removing the new lease would
                    // stop its renewals, lose it too, and so on for every new take.
                    match done {
                        Ok((key, outcome)) => tracing::info!(shard = %key, ?outcome, "shard worker finished"),
                        Err(e) => tracing::error!(error = %e, "shard worker task failed"),
                    }
                    continue;
                }
                Some(first) = ended_shards.recv() => {
                    let mut ended = vec![first];
                    while let Ok(more) = ended_shards.try_recv() {
                        ended.push(more);
                    }
                    coordinator.create_children(&ended).await
                }
                // The leader syncs (at once after its first census, below).
                _ = sync.tick() => {
                    if coordinator.census.as_ref().is_some_and(|c| c.leader) {
                        coordinator.sync_shards().await;
                    }
                    continue;
                }
                // A handoff completes when its owner has drained: watch for it a few
                // times a renewal interval (a read of each pending lease, nothing else).
                _ = tokio::time::sleep_until(next_poll), if !coordinator.pending_steals.is_empty() => {
                    next_poll = Instant::now() + self.config.renew_interval / 3;
                    coordinator.poll_handoffs(&held).await
                }
                _ = tokio::time::sleep_until(next_take) => {
                    // Children whose creation failed before, first. Those it takes
                    // are held before the cycle runs (at once, next round): a cycle
                    // that met them owned here but not held would adopt them again.
                    let born = coordinator.create_unborn().await;
                    if !born.is_empty() {
                        next_take = Instant::now();
                        born
                    } else {
                        let mut new_leases = coordinator.cycle(&held).await;
                        // A leader that has not synced yet (a new application's first
                        // worker, or one that became the leader) creates the leases now and
                        // looks again, instead of waiting for the sync interval.
                        if !coordinator.synced_once && coordinator.census.as_ref().is_some_and(|c| c.leader) {
                            coordinator.sync_shards().await;
                            if new_leases.is_empty() {
                                new_leases = coordinator.cycle(&held).await;
                            }
                        }
                        // While this worker holds less than its target (or waits for
                        // handoffs), look again at the renewal interval: what a draining
                        // worker lets go is taken within it.
                        // Up to a tenth shorter, at random: workers started together (a
                        // scale-out, a deploy wave) drift apart instead of reading the table
                        // in the same second.
                        let every = if coordinator.pending_steals.is_empty() && !coordinator.underloaded {
                            self.config.taker_interval
                        } else {
                            self.config.renew_interval
                        };
                        next_take = Instant::now() + every.mul_f64(0.9 + 0.1 * crate::jitter::fraction());
                        if let Some(writes) = coordinator.takes_holding_nothing.take() {
                            self.stats.takes_holding_nothing(writes);
                        }
                        self.stats.lease_cycle(coordinator.cycle_error.take().map_or(Ok(()), Err));
                        new_leases
                    }
                }
            };
            let new_leases_empty = new_leases.is_empty();
            for lease in new_leases {
                let key = lease.key().clone();
                held.lock().unwrap_or_else(|p| p.into_inner()).insert(key.clone(), lease.clone());
                let worker = ShardWorker::new(lease.clone(), deps.clone(), shard_stop.child_token());
                let (held, stats, held_changed) = (held.clone(), self.stats.clone(), held_changed.clone());
                shards.spawn(async move {
                    // A panic in the shard worker still leaves the held set.
                    let outcome = AssertUnwindSafe(worker.run()).catch_unwind().await;
                    // Here, not where this loop joins the task: the loop may be
                    // inside a lease-table call that hangs, and what the worker
                    // reports held must not include a shard it stopped working.
                    // One shard, not the whole set published again: a replay's
                    // thousands of shards end together.
                    {
                        let mut map = held.lock().unwrap_or_else(|p| p.into_inner());
                        if map.get(&key).is_some_and(|l| Arc::ptr_eq(l, &lease)) {
                            map.remove(&key);
                            stats.let_go(&key);
                        }
                        metrics::gauge!(crate::metrics::LEASES_HELD).set(map.len() as f64);
                    }
                    held_changed.notify_one();
                    match outcome {
                        Ok(outcome) => (key, outcome),
                        Err(panic) => std::panic::resume_unwind(panic),
                    }
                });
            }
            if !new_leases_empty {
                held_changed.notify_one();
            }
            publish_held(&held, &self.stats);
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
        coordinator.release_unadopted().await;
        renewer_stop.cancel();
        while renewer.join_next().await.is_some() {}
        // Before the consumers' last flush: the record still reports the leases just
        // let go, and the others count them free only once it goes.
        if let Err(e) = self.table.remove_worker(&me, &instance).await {
            tracing::warn!(worker = %me, error = %e, "could not remove worker record");
        }
        drop(deps);
        while host_tasks.join_next().await.is_some() {}
        let displaced = displaced.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(holder) = displaced {
            tracing::error!(worker = %me, other = holder, "another process took over this worker id; stopped");
            return Err(WorkerError::DuplicateWorkerId { worker: me, instance: holder });
        }
        tracing::info!(worker = %me, "worker stopped");
        Ok(())
    }
}

/// Publishes which shards the worker holds (gauge and `/status`).
fn publish_held(held: &HeldMap, stats: &WorkerStats) {
    let keys: std::collections::BTreeSet<ShardId> =
        held.lock().unwrap_or_else(|p| p.into_inner()).keys().cloned().collect();
    metrics::gauge!(crate::metrics::LEASES_HELD).set(keys.len() as f64);
    stats.set_held(keys);
}

/// The worker's heartbeat, written by the renewer.
struct Heartbeat {
    /// Notified when the leases held changed (taken, adopted, let go or lost): the next
    /// heartbeat goes at once, so the others' census counts them without waiting.
    held_changed: Arc<Notify>,
    table: Arc<dyn LeaseTable>,
    worker: WorkerId,
    instance: String,
    /// Extended by every heartbeat that lands.
    liveness: Arc<Liveness>,
    /// The active leases the coordinator last counted (reported with the heartbeat).
    active: Arc<AtomicU32>,
    /// Handoffs the coordinator requested and has not adopted yet, reported with the
    /// held leases: a lease in a handoff is owned by someone the whole time, and a
    /// census that counted it nowhere would count it free.
    pending: Arc<AtomicU32>,
    /// Set (with the other process's instance) when another process took the id over.
    displaced: Arc<Mutex<Option<String>>>,
    displaced_signal: CancellationToken,
}

impl Heartbeat {
    /// Writes one heartbeat reporting `held` leases (and the handoffs on their way to
    /// this worker), waiting for the answer until the heartbeat's validity ends but at
    /// least `patience`; the error, if the store failed or did not answer.
    async fn beat(&self, held: usize, patience: std::time::Duration) -> Option<String> {
        let held = u32::try_from(held).unwrap_or(u32::MAX).saturating_add(self.pending.load(Ordering::Relaxed));
        let load = WorkerLoad { held, active: self.active.load(Ordering::Relaxed) };
        let started = Instant::now();
        let until = self.liveness.until(self.liveness.epoch()).max(started + patience);
        let answer = tokio::time::timeout_at(until, self.table.heartbeat(&self.worker, &self.instance, load)).await;
        match answer {
            Ok(Ok(())) => {
                self.liveness.landed(started);
                None
            }
            Ok(Err(LeaseError::WorkerIdInUse { instance, .. })) => {
                *self.displaced.lock().unwrap_or_else(|p| p.into_inner()) = Some(instance);
                self.displaced_signal.cancel();
                None
            }
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "heartbeat failed");
                Some(format!("heartbeat: {e}"))
            }
            Err(_) => Some("heartbeat: no answer from the lease table".to_owned()),
        }
    }
}

/// Writes the worker's heartbeat and renews every valid held lease about every
/// `every`, and tells `stats` how the writes of each tick went (see
/// [`WorkerStats::renewals`] and [`WorkerStats::heartbeat`]).
///
/// A lease whose own checkpoint (or any write of this worker) landed recently needs no
/// renewal: its counter moved then, which is all other workers look at. The loop ticks
/// three times per `every` and renews a lease only when its last landed write started
/// at least five sixths of `every` ago, so a lease written by nothing else is renewed
/// every `every` (every third tick), and one checkpointed at least that often is not
/// renewed at all (at 10,000 shards checkpointing every second, 3,000 writes a second
/// fewer). No lease goes longer than 7/6 of `every` between writes that land while
/// the table answers (the renewal interval is at most half of `failover`).
async fn renew_loop(
    held: HeldMap,
    heartbeat: Heartbeat,
    every: std::time::Duration,
    stats: WorkerStats,
    stop: CancellationToken,
) {
    let mut tick = tokio::time::interval(every / 3);
    let fresh = every * 5 / 6;
    loop {
        // In this order, so that one seed gives one run (`jitter`): stop, renewals, then
        // a heartbeat for a changed held set.
        tokio::select! {
            biased;
            _ = stop.cancelled() => return,
            _ = tick.tick() => {
                let leases: Vec<Arc<HeldLease>> = held.lock().unwrap_or_else(|p| p.into_inner()).values().cloned().collect();
                let beat = async {
                    if heartbeat.liveness.written_within(fresh) { None } else { Some(heartbeat.beat(leases.len(), every).await) }
                };
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
                let (beat, renewed) = futures::future::join(beat, futures::future::join_all(renewals)).await;
                if let Some(beat) = beat {
                    stats.heartbeat(beat.map_or(Ok(()), Err));
                }
                for (key, renewed) in renewed {
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
            // After the renewals: a held set changing during every beat (shard tasks
            // ending by the thousand) must not keep leases from being renewed.
            _ = heartbeat.held_changed.notified() => {
                let held = held.lock().unwrap_or_else(|p| p.into_inner()).len();
                let beat = heartbeat.beat(held, every).await;
                stats.heartbeat(beat.map_or(Ok(()), Err));
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
/// Returns when the write that made it so started.
async fn register(
    table: &dyn LeaseTable,
    me: &WorkerId,
    instance: &str,
    failover: std::time::Duration,
) -> Result<Instant, WorkerError> {
    loop {
        let started = Instant::now();
        let holder = match table.heartbeat(me, instance, WorkerLoad::default()).await {
            Ok(()) => return Ok(started),
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
                let started = Instant::now();
                if table.claim_worker(&seen, instance).await.map_err(WorkerError::Lease)? {
                    tracing::info!(worker = %me, previous = seen.instance, "took over the record of a stopped process");
                    return Ok(started);
                }
            }
        }
    }
}

/// What a lease cycle read of the leases.
enum Reading {
    /// Every lease of the streams read.
    All(Vec<weir_core::Lease>),
    /// Some of them (parts of a spread table).
    Sample(Vec<weir_core::Lease>),
}

struct Coordinator {
    /// This worker's heartbeat validity, which every lease it takes shares.
    liveness: Arc<Liveness>,
    /// Active leases as this worker last counted them (listing or shard sync),
    /// reported with its heartbeats.
    active: Arc<AtomicU32>,
    /// How many handoffs are pending (`pending_steals`), reported with its heartbeats.
    pending: Arc<AtomicU32>,
    /// Wakes the heartbeat when what it reports changed.
    held_changed: Arc<Notify>,
    /// The fleet as the worker records showed it in the last cycle.
    census: Option<Census>,
    /// Lease cycles since this worker last read every lease.
    cycles_since_listing: u32,
    /// Whether this worker has synced leases with the shards since it started.
    synced_once: bool,
    table: Arc<dyn LeaseTable>,
    catalog: Arc<dyn StreamCatalog>,
    config: Arc<RuntimeConfig>,
    clock: Arc<dyn Clock>,
    seen: Observations,
    /// Handoffs this worker requested, with the time after which it forces them.
    pending_steals: BTreeMap<ShardId, Instant>,
    /// Why the last lease cycle could not read the worker records or the leases
    /// (`None`: it could).
    cycle_error: Option<String>,
    /// How the lease writes of the last cycle went, when it began with no lease held
    /// and got as far as its takes (see [`WorkerStats::takes_holding_nothing`]).
    takes_holding_nothing: Option<LeaseWrites>,
    /// After the last cycle, this worker held fewer leases than its target: it looks
    /// again at the renewal interval.
    underloaded: bool,
    /// Children of shards that ended here whose leases are still to be created (a
    /// creation failed), each with whether it is created taken.
    unborn: VecDeque<(NewLease, bool)>,
}

impl Coordinator {
    /// Creates leases for shards that have none, parents first.
    async fn sync_shards(&mut self) {
        self.synced_once = true;
        let shards = match self.catalog.list_shards().await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, "shard sync: cannot list shards");
                return;
            }
        };
        // Relaxed: a lease created within the last second and missed is created
        // again conditionally, which leaves it as it is.
        let listed = match self.table.list_relaxed().await {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!(error = %e, "shard sync: cannot list leases");
                return;
            }
        };
        let active = listed.iter().filter(|l| !l.ended && self.catalog.covers(&l.key)).count();
        let existing: HashSet<ShardId> = listed.into_iter().map(|l| l.key).collect();
        let missing = leases_to_create(&shards, &existing, &self.config.initial_position);
        let mut missing = missing.into_iter().map(|l| (l, false)).collect();
        let (created, _) = self.create(&mut missing, "shard sync: cannot create lease").await;
        self.active.store(u32::try_from(active).unwrap_or(u32::MAX).saturating_add(created), Ordering::Relaxed);
    }

    /// Creates `leases` in order (parents before children) unless they exist, each
    /// marked `true` already taken by this worker; stops at the first failure, logged
    /// with `failed`, leaving it and the rest in `leases`: a child must not be created
    /// before its parents. Returns how many it created, and the leases it took.
    async fn create(&self, leases: &mut VecDeque<(NewLease, bool)>, failed: &str) -> (u32, Vec<Arc<HeldLease>>) {
        let me = self.config.worker_id.clone();
        let (mut created, mut taken) = (0u32, Vec::new());
        while let Some((lease, mine)) = leases.pop_front() {
            let key = lease.key.clone();
            let since = Instant::now();
            let result = if mine {
                self.table.create_taken(lease.clone(), &me).await.map(|taken| taken.map(Some))
            } else {
                self.table.create_if_absent(lease.clone()).await.map(|made| made.then_some(None))
            };
            match result {
                Ok(Some(Some(lease))) => {
                    created += 1;
                    metrics::counter!(crate::metrics::LEASES_TAKEN).increment(1);
                    tracing::info!(shard = %key, "lease created, taken");
                    self.adopt(lease, since, &mut taken);
                }
                Ok(Some(None)) => {
                    created += 1;
                    tracing::info!(shard = %key, "lease created");
                }
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(shard = %key, error = %e, "{failed}");
                    leases.push_front((lease, mine));
                    break;
                }
            }
        }
        (created, taken)
    }

    /// Creates the leases of the children of `ended` (shards this worker just
    /// finished, with the children their ends named) without reading the leases: each
    /// creation is conditional on the lease not existing, so a child the leader or a
    /// merged sibling created already stays. Children come from the ends' `ChildShards`;
    /// only for an end that named none (an end found without reading it) are the
    /// stream's shards listed.
    ///
    /// The children whose parents all ended here (both halves of a split; a merge
    /// whose two parents this worker held) it creates already taken: one conditional
    /// write each, and no reading. A worker's load follows its shards
    /// through a reshard (doubling a stream doubles every worker's leases), where
    /// leaving the children free would send every worker whose shard ended to read
    /// every lease at once. A creation that fails (throttled) is tried again at the
    /// next lease cycle, not left to the leader's sync. Returns the leases taken.
    async fn create_children(&mut self, ended: &[(ShardId, Vec<ChildShard>)]) -> Vec<Arc<HeldLease>> {
        let ids: Vec<&ShardId> = ended.iter().map(|(s, _)| s).collect();
        let mut births = leases_from_child_shards(ended.iter().flat_map(|(_, c)| c));
        let unnamed: Vec<&ShardId> = ended.iter().filter(|(_, c)| c.is_empty()).map(|(s, _)| s).collect();
        if !unnamed.is_empty() {
            match self.catalog.list_shards().await {
                Ok(shards) => {
                    let children: HashSet<&ShardId> = shards
                        .iter()
                        .filter(|s| s.parents.iter().any(|p| unnamed.contains(&p)))
                        .map(|s| &s.id)
                        .collect();
                    let others: HashSet<ShardId> =
                        shards.iter().filter(|s| !children.contains(&s.id)).map(|s| s.id.clone()).collect();
                    let named: HashSet<ShardId> = births.iter().map(|b| b.key.clone()).collect();
                    let listed = leases_to_create(&shards, &others, &self.config.initial_position);
                    births.extend(listed.into_iter().filter(|l| !named.contains(&l.key)));
                }
                Err(e) => {
                    tracing::warn!(error = %e, "after a shard's end: cannot list shards; the leader's sync creates its children");
                }
            }
        }
        for lease in births {
            let mine = !lease.parents.is_empty() && lease.parents.iter().all(|p| ids.contains(&p));
            self.unborn.push_back((lease, mine));
        }
        // What this worker reports as active until its next listing: the ended shards
        // are no longer, their children are (counted as they are created).
        let ended_count = u32::try_from(ended.len()).unwrap_or(u32::MAX);
        let _ = self.active.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |a| Some(a.saturating_sub(ended_count)));
        self.create_unborn().await
    }

    /// Creates the children's leases waiting in `unborn` (see [`Self::create`]); what
    /// fails waits for the next lease cycle. Returns the leases taken.
    async fn create_unborn(&mut self) -> Vec<Arc<HeldLease>> {
        if self.unborn.is_empty() {
            return Vec::new();
        }
        let mut unborn = std::mem::take(&mut self.unborn);
        let (created, taken) =
            self.create(&mut unborn, "cannot create a child's lease yet; tried again at the next lease cycle").await;
        self.unborn = unborn;
        let _ = self.active.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |a| Some(a.saturating_add(created)));
        taken
    }

    fn adopt(&self, lease: weir_core::Lease, since: Instant, out: &mut Vec<Arc<HeldLease>>) {
        out.push(HeldLease::new(lease, since, self.table.clone(), self.config.failover, self.liveness.clone()));
    }

    /// Reads the worker records and, when they call for it, a sample of the leases
    /// (parts of them, until the sample holds what this worker needs), or, when the
    /// periodic full reading is due, every lease of the streams read. `None` when the
    /// records show nothing to take and no full reading is due, or when the table
    /// could not be read (then `cycle_error` says why). Pending handoffs are watched
    /// apart ([`Self::poll_handoffs`]).
    async fn read_leases(&mut self, mine: usize) -> Option<(Reading, Vec<WorkerHeartbeat>)> {
        let me = self.config.worker_id.clone();
        let now = self.clock.now();
        // Relaxed reads (half the units): a heartbeat read late makes its worker look
        // alive longer, never gone sooner; every take and handoff request is a write
        // conditioned on the lease as read, which fails on a lease that moved since.
        let workers = match self.table.list_workers_relaxed().await {
            Ok(w) => w,
            Err(e) => {
                tracing::warn!(error = %e, "taker: cannot read the worker records");
                self.cycle_error = Some(format!("reading worker records: {e}"));
                return None;
            }
        };
        self.seen.observe_workers(&workers, now);
        let my_active = self.active.load(Ordering::Relaxed) as usize;
        let fleet = census(&me, mine, my_active, &workers, &self.seen, now, self.config.failover);
        self.underloaded = mine < fleet.target;
        self.cycles_since_listing += 1;
        // A worker waiting for handoffs it requested watches those leases instead,
        // unless leases are free (a worker left): those it can take at once.
        let wanted = fleet.list && (self.pending_steals.is_empty() || fleet.free > 0);
        let due = self.cycles_since_listing >= FULL_LISTING_EVERY;
        self.census = Some(fleet.clone());
        // A store that reads its leases in one part gives all of them to a sample.
        let parts = self.table.lease_parts().max(1);
        if due || (wanted && parts == 1) {
            let leases = match self.table.list_relaxed().await {
                Ok(l) => l,
                Err(e) => {
                    tracing::warn!(error = %e, "taker: cannot list leases");
                    self.cycle_error = Some(format!("listing leases: {e}"));
                    return None;
                }
            };
            // The next full reading comes after FULL_LISTING_EVERY / 2 to
            // FULL_LISTING_EVERY cycles, so that workers started together spread theirs.
            self.cycles_since_listing = crate::jitter::below(FULL_LISTING_EVERY / 2);
            // Leases of streams this fleet does not read (any more) are left alone.
            let leases: Vec<weir_core::Lease> = leases.into_iter().filter(|l| self.catalog.covers(&l.key)).collect();
            self.seen.observe_leases(&leases, now);
            let active = leases.iter().filter(|l| !l.ended).count();
            self.active.store(u32::try_from(active).unwrap_or(u32::MAX), Ordering::Relaxed);
            return Some((Reading::All(leases), workers));
        }
        if !wanted {
            return None;
        }
        // A sample: parts of the leases, from one that follows this worker's id (so
        // that needy workers start in different parts), until it holds what this
        // worker needs.
        let start = weir_core::ports::lease_partition(me.as_str(), parts);
        let needed = fleet.target.saturating_sub(mine);
        let mut sample = Vec::new();
        for i in 0..parts {
            let part = match self.table.list_part_relaxed((start + i) % parts).await {
                Ok(l) => l,
                Err(e) => {
                    tracing::warn!(error = %e, "taker: cannot read leases");
                    self.cycle_error = Some(format!("reading leases: {e}"));
                    return None;
                }
            };
            let part: Vec<weir_core::Lease> = part.into_iter().filter(|l| self.catalog.covers(&l.key)).collect();
            self.seen.observe_some_leases(&part, now);
            sample.extend(part);
            let plan = plan_from_sample(&me, mine, &sample, &fleet, &workers, &self.seen, now, self.config.failover);
            // While the census shows free leases, look for those (a handoff waits for
            // its owner to drain; a free lease is taken at once).
            let enough = if fleet.free > 0 {
                plan.take.len() >= needed.min(fleet.free)
            } else {
                plan.take.len() + plan.steal.len() >= needed
            };
            if enough {
                break;
            }
        }
        Some((Reading::Sample(sample), workers))
    }

    /// Adopts the leases of `leases` owned by this worker but not held (a completed
    /// handoff, or left by an earlier run), and settles pending handoff requests:
    /// dropped when overtaken, forced when overdue or their owner is gone. Returns the
    /// keys adopted.
    async fn settle_handoffs(
        &mut self,
        leases: &[weir_core::Lease],
        complete: bool,
        held_keys: &HashSet<ShardId>,
        now: weir_core::Timestamp,
        writes: &mut LeaseWrites,
        out: &mut Vec<Arc<HeldLease>>,
    ) -> HashSet<ShardId> {
        let me = self.config.worker_id.clone();
        // Leases handed to this worker (or left owned by it by an earlier run). Held
        // only after a write of this worker's own: a lease's validity runs from the
        // start of its holder's last write, and the transfer (or the earlier run's last
        // renewal) may be most of a failover old already, so others may count it
        // expired soon.
        for l in leases {
            if l.is_owned_by(&me) && !l.ended && !held_keys.contains(&l.key) {
                self.pending_steals.remove(&l.key);
                let since = Instant::now();
                match self.table.mutate(&LeaseMutation::on(l, LeaseChange::Renew)).await {
                    Ok(renewed) => {
                        tracing::info!(shard = %l.key, "lease adopted");
                        writes.add(None);
                        self.adopt(renewed, since, out);
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
                // Gone from a reading of every lease; a sample may just not hold it.
                if complete {
                    self.pending_steals.remove(&key);
                }
                continue;
            };
            if l.handoff_to.as_ref() != Some(&me) || l.ended {
                self.pending_steals.remove(&key);
            } else if Instant::now() >= deadline || self.seen.is_expired(l, now, self.config.failover) {
                // Overdue, or its owner is gone (crashed after the request): nobody
                // will hand it over.
                self.pending_steals.remove(&key);
                let since = Instant::now();
                match self.table.mutate(&LeaseMutation::on(l, LeaseChange::Take { owner: me.clone() })).await {
                    Ok(taken) => {
                        tracing::warn!(shard = %key, "handoff not completed in time; lease taken");
                        writes.add(None);
                        self.adopt(taken, since, out);
                    }
                    Err(e) => {
                        tracing::debug!(shard = %key, error = %e, "forced take lost a race");
                        writes.add(store_failure(&e).map(|e| format!("taking shard {key}: {e}")));
                    }
                }
            }
        }
        adopted
    }

    /// While handoffs this worker requested are pending: reads
    /// those leases and adopts the ones handed over (the lease is idle from the
    /// transfer to its adoption here). Returns leases newly held.
    async fn poll_handoffs(&mut self, held: &HeldMap) -> Vec<Arc<HeldLease>> {
        let held_keys: HashSet<ShardId> = held.lock().unwrap_or_else(|p| p.into_inner()).keys().cloned().collect();
        let mut pending = Vec::new();
        for key in self.pending_steals.keys().cloned().collect::<Vec<_>>() {
            match self.table.get(&key).await {
                Ok(Some(l)) => pending.push(l),
                Ok(None) => {
                    self.pending_steals.remove(&key);
                }
                Err(e) => tracing::debug!(shard = %key, error = %e, "cannot read a lease handed over; next poll"),
            }
        }
        let (mut writes, mut out) = (LeaseWrites::None, Vec::new());
        let now = self.clock.now();
        self.settle_handoffs(&pending, false, &held_keys, now, &mut writes, &mut out).await;
        self.publish_pending();
        out
    }

    /// At shutdown: releases the leases handed over to this worker that it has not
    /// adopted yet (the owner completed a requested handoff between two polls), so
    /// the others take them at once instead of after their own counters expire.
    async fn release_unadopted(&mut self) {
        let me = self.config.worker_id.clone();
        for key in std::mem::take(&mut self.pending_steals).into_keys() {
            let Ok(Some(lease)) = self.table.get(&key).await else { continue };
            if lease.is_owned_by(&me) && !lease.ended {
                match self.table.mutate(&LeaseMutation::on(&lease, LeaseChange::Release)).await {
                    Ok(_) => tracing::info!(shard = %key, "lease handed over during shutdown released"),
                    Err(e) => tracing::debug!(shard = %key, error = %e, "cannot release a lease handed over"),
                }
            }
        }
    }

    /// Publishes how many handoffs are pending for the heartbeat, which goes at once
    /// when the count changed.
    fn publish_pending(&self) {
        let now = u32::try_from(self.pending_steals.len()).unwrap_or(u32::MAX);
        if self.pending.swap(now, Ordering::Relaxed) != now {
            self.held_changed.notify_one();
        }
    }

    /// One taker cycle; returns leases newly held.
    async fn cycle(&mut self, held: &HeldMap) -> Vec<Arc<HeldLease>> {
        let out = self.cycle_inner(held).await;
        self.publish_pending();
        out
    }

    async fn cycle_inner(&mut self, held: &HeldMap) -> Vec<Arc<HeldLease>> {
        let me = self.config.worker_id.clone();
        let now = self.clock.now();
        self.takes_holding_nothing = None;
        let held_keys: HashSet<ShardId> = held.lock().unwrap_or_else(|p| p.into_inner()).keys().cloned().collect();
        let Some((reading, workers)) = self.read_leases(held_keys.len()).await else {
            // Nothing to take (not a failure: a worker holding nothing is not needed).
            if held_keys.is_empty() && self.cycle_error.is_none() {
                self.takes_holding_nothing = Some(LeaseWrites::None);
            }
            return Vec::new();
        };
        let mut out = Vec::new();
        let mut writes = LeaseWrites::None;

        let (leases, complete) = match reading {
            Reading::All(l) => (l, true),
            Reading::Sample(l) => (l, false),
        };
        let adopted = self.settle_handoffs(&leases, complete, &held_keys, now, &mut writes, &mut out).await;

        let failover = self.config.failover;
        let plan = match &self.census {
            Some(fleet) if !complete => {
                plan_from_sample(&me, held_keys.len(), &leases, fleet, &workers, &self.seen, now, failover)
            }
            _ => plan_takes(&me, &leases, &workers, &self.seen, now, failover),
        };
        let target = plan.target;
        for l in plan.take {
            if held_keys.contains(&l.key) || adopted.contains(&l.key) {
                continue;
            }
            let since = Instant::now();
            // Written from the listed lease (one conditional put; a read only when it
            // changed since, and then the take is judged again).
            match self.table.mutate_seen(&l, LeaseChange::Take { owner: me.clone() }).await {
                Ok(taken) => {
                    metrics::counter!(crate::metrics::LEASES_TAKEN).increment(1);
                    tracing::info!(shard = %l.key, previous = ?l.owner, "lease taken");
                    writes.add(None);
                    self.adopt(taken, since, &mut out);
                }
                Err(e) => {
                    tracing::debug!(shard = %l.key, error = %e, "take lost a race");
                    writes.add(store_failure(&e).map(|e| format!("taking shard {}: {e}", l.key)));
                }
            }
        }
        // Handoffs are requested when none is pending: the leases of the last requests
        // are not in the listing's load yet.
        let steals = if self.pending_steals.is_empty() { plan.steal } else { Vec::new() };
        for l in steals {
            match self.table.mutate_seen(&l, LeaseChange::RequestHandoff { to: me.clone() }).await {
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

    fn unending() -> Arc<Liveness> {
        Arc::new(Liveness::new(Instant::now(), std::time::Duration::from_secs(1 << 30)))
    }

    fn coordinator(table: Arc<dyn LeaseTable>, me: &str) -> Coordinator {
        let stream = weir_local::MemoryStream::new(Default::default(), Arc::new(crate::TokioClock::new()));
        Coordinator {
            liveness: unending(),
            active: Arc::default(),
            pending: Arc::default(),
            held_changed: Arc::default(),
            census: None,
            // The first cycle reads every lease.
            cycles_since_listing: FULL_LISTING_EVERY,
            synced_once: false,
            table,
            catalog: Arc::new(stream),
            config: Arc::new(RuntimeConfig::new(WorkerId::new(me))),
            clock: Arc::new(weir_testkit::ManualClock::new(Timestamp::from_millis(0))),
            seen: Observations::default(),
            pending_steals: BTreeMap::new(),
            cycle_error: None,
            takes_holding_nothing: None,
            underloaded: false,
            unborn: VecDeque::new(),
        }
    }

    fn heartbeat(table: Arc<dyn LeaseTable>, me: &str, liveness: Arc<Liveness>) -> Heartbeat {
        Heartbeat {
            table,
            worker: WorkerId::new(me),
            instance: "i".into(),
            liveness,
            active: Arc::default(),
            pending: Arc::default(),
            displaced: Arc::default(),
            displaced_signal: CancellationToken::new(),
            held_changed: Arc::default(),
        }
    }

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
        let mut c = coordinator(table.clone(), "me");
        let held = c.cycle(&HeldMap::default()).await;
        assert_eq!(held.len(), 1, "adopted");
        let stored = table.get(&ShardId::new("s-1")).await.unwrap().unwrap();
        assert_eq!(stored.counter, handed.counter + 1, "written once by the adopter");
        assert_eq!(held[0].snapshot().await, stored, "held as written");
        tokio::time::advance(std::time::Duration::from_secs(8)).await;
        assert!(held[0].is_valid(), "valid from the adopter's own write");
    }

    /// The children of a shard that ended here come from the children its end named
    /// (none of these shards is in the stream's listing), both halves of a split taken
    /// at once, a merge whose other parent is elsewhere created free; a creation the
    /// table refuses waits for the next lease cycle, not for the leader's sync.
    #[tokio::test(start_paused = true)]
    async fn children_named_by_a_shard_end_are_created_and_retried_until_they_are() {
        let table = weir_testkit::FaultyLeaseTable::new(Arc::new(MemoryLeaseTable::new()));
        let table: Arc<weir_testkit::FaultyLeaseTable> = Arc::new(table);
        let mut c = coordinator(table.clone(), "me");
        let child = |id: &str, parents: &[&str]| ChildShard {
            shard_id: ShardId::new(id),
            parents: parents.iter().map(|p| ShardId::new(*p)).collect(),
            hash_range: weir_core::HashKeyRange::FULL,
        };
        let ended = [
            (ShardId::new("p"), vec![child("p-1", &["p"]), child("p-2", &["p"])]),
            (ShardId::new("a"), vec![child("m", &["a", "b"])]),
        ];
        table.set_down(true);
        assert!(c.create_children(&ended).await.is_empty(), "nothing created while the table refuses");
        assert_eq!(c.unborn.len(), 3, "all wait");
        table.set_down(false);
        let taken = c.create_unborn().await;
        let mut keys: Vec<String> = taken.iter().map(|h| h.key().to_string()).collect();
        keys.sort();
        assert_eq!(keys, ["p-1", "p-2"], "the split's halves are taken here");
        assert!(c.unborn.is_empty());
        for (key, owner) in [("p-1", Some("me")), ("p-2", Some("me")), ("m", None)] {
            let l = table.get(&ShardId::new(key)).await.unwrap().unwrap_or_else(|| panic!("{key} not created"));
            assert_eq!(l.owner.as_ref().map(WorkerId::as_str), owner, "{key}");
            assert_eq!(l.checkpoint_for(&ConsumerName::new("x")), &weir_core::Checkpoint::TrimHorizon, "{key}");
        }
        assert_eq!(c.active.load(Ordering::Relaxed), 3, "the children count as active once created");
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
            let h = HeldLease::new(lease, Instant::now(), table.clone(), failover, unending());
            held.lock().unwrap().insert(ShardId::new(key), h);
        }
        let stop = CancellationToken::new();
        let liveness = Arc::new(Liveness::new(Instant::now(), failover.mul_f64(0.9)));
        let beats = heartbeat(table.clone(), "me", liveness);
        let renewer = tokio::spawn(renew_loop(held.clone(), beats, every, WorkerStats::default(), stop.clone()));
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
        let beats = table.list_workers().await.unwrap().remove(0);
        assert!((29..=31).contains(&beats.counter), "a heartbeat every 3.3 s: {} in 100 s", beats.counter);
        assert_eq!(beats.load.held, 2, "reporting the leases held");
    }
}
