//! The shard worker: one task per held lease.
//!
//! Lifecycle ([`ShardState`]):
//! ```text
//! WaitingOnParents ─parents ended─▶ Initializing ─lanes open─▶ Processing
//! Processing ─shard end read, every consumer closed and acknowledged─▶ Draining(ShardEnded) ─▶ Done
//! Processing ─handoff requested / shutdown─▶ Draining(Handoff | Shutdown) ─▶ Done
//! any state ─renewal conflict or validity elapsed─▶ Done (LeaseLost: nothing checkpointed)
//! ```
//! One live read per shard is fanned out to every consumer's lane, starting at the
//! lowest checkpoint; each lane receives only records after its own checkpoint. With
//! [`RuntimeConfig::close_ends_together`], a read that ends with no child shards waits
//! in `Processing` to close its lanes until every other shard of the worker has been
//! read to its end and handed to the consumers too (see [`reads`]).

mod catchup;
mod finish;
mod lanes;
mod reads;

use std::sync::Arc;

use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use weir_core::ports::{LeaseTable, ReadMode, ShardReader};
use weir_core::{Checkpoint, ChildShard, CloseReason, ExtendedSequenceNumber, RecordBatch, ShardContext};

use crate::config::RuntimeConfig;
use crate::held_lease::HeldLease;
use crate::host::{HostCtl, HostHandle};
use crate::lane::LaneShared;
use crate::reader_task::{ReadEvent, spawn_reader};
use crate::stats::WorkerStats;
use catchup::{CatchupMsg, CatchupPlan, run_catchup};
use lanes::{DetachReason, Lane, LaneMode, Room};
pub(crate) use reads::ActiveReads;
use reads::Reading;

/// Lifecycle of a shard worker; see the module documentation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ShardState {
    WaitingOnParents,
    Initializing,
    Processing,
    Draining(CloseReason),
    Done,
}

/// How a shard worker ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ShardOutcome {
    /// Every consumer finished the shard; it is marked ended.
    Ended,
    /// Handed over to the worker that asked.
    HandedOff,
    /// Released at shutdown.
    Released,
    /// The lease was lost; nothing was checkpointed after that.
    Lost,
}

/// What every shard worker of a process shares.
#[derive(Clone)]
pub(crate) struct ShardDeps {
    pub table: Arc<dyn LeaseTable>,
    pub reader: Arc<dyn ShardReader>,
    pub hosts: Vec<HostHandle>,
    pub config: Arc<RuntimeConfig>,
    pub stats: WorkerStats,
    /// Told which shard ended and the children its end named (empty when the read
    /// named none), so leases of its children are created at once.
    pub shard_ended: mpsc::UnboundedSender<(weir_core::ShardId, Vec<ChildShard>)>,
    /// This worker's shards with records left to read or deliver.
    pub reads: ActiveReads,
}

pub(crate) struct ShardWorker {
    held: Arc<HeldLease>,
    deps: ShardDeps,
    shutdown: CancellationToken,
    lanes: Vec<Lane>,
    state: ShardState,
    live_last: Option<ExtendedSequenceNumber>,
    first_live: Option<ExtendedSequenceNumber>,
    live_end: Option<Vec<ChildShard>>,
    catchup_tx: mpsc::UnboundedSender<CatchupMsg>,
    catchup_rx: mpsc::UnboundedReceiver<CatchupMsg>,
    /// Counts this shard in [`ShardDeps::reads`] until its records are read and delivered.
    reading: Reading,
}

enum Step {
    Continue,
    Drain(CloseReason),
    Lost,
}

impl ShardWorker {
    pub(crate) fn new(held: Arc<HeldLease>, deps: ShardDeps, shutdown: CancellationToken) -> Self {
        let (catchup_tx, catchup_rx) = mpsc::unbounded_channel();
        let reading = deps.reads.start();
        Self {
            held,
            deps,
            shutdown,
            lanes: Vec::new(),
            state: ShardState::WaitingOnParents,
            live_last: None,
            first_live: None,
            live_end: None,
            catchup_tx,
            catchup_rx,
            reading,
        }
    }

    fn set_state(&mut self, state: ShardState) {
        tracing::debug!(shard = %self.held.key(), from = ?self.state, to = ?state, "shard state");
        self.state = state;
    }

    /// Runs the shard to completion.
    pub(crate) async fn run(mut self) -> ShardOutcome {
        let outcome = self.run_inner().await;
        self.set_state(ShardState::Done);
        outcome
    }

    async fn run_inner(&mut self) -> ShardOutcome {
        match self.wait_on_parents().await {
            Step::Continue => {}
            Step::Drain(reason) => return self.finish(reason).await,
            Step::Lost => return self.finish(CloseReason::LeaseLost).await,
        }
        self.set_state(ShardState::Initializing);
        let lease = self.held.snapshot().await;
        if lease.ended {
            return ShardOutcome::Ended;
        }
        let start = self.open_lanes(&lease);
        let Some(start) = start else {
            // Every consumer already finished this shard.
            self.live_end = Some(Vec::new());
            return self.finish(CloseReason::ShardEnded).await;
        };
        self.set_state(ShardState::Processing);
        self.deps.stats.reading(self.held.key());
        let step = self.process(start).await;
        self.deps.stats.not_reading(self.held.key());
        match step {
            Step::Drain(reason) => self.finish(reason).await,
            Step::Lost | Step::Continue => self.finish(CloseReason::LeaseLost).await,
        }
    }

    /// Waits until every parent shard has ended (or no longer has a lease).
    async fn wait_on_parents(&mut self) -> Step {
        let parents = self.held.snapshot().await.parents;
        let mut poll = tokio::time::interval(self.deps.config.parent_poll_interval);
        loop {
            let mut pending = false;
            for p in &parents {
                match self.deps.table.get(p).await {
                    Ok(Some(l)) if !l.ended => pending = true,
                    Ok(_) => {}
                    Err(e) => {
                        tracing::warn!(shard = %self.held.key(), parent = %p, error = %e, "cannot read parent lease");
                        pending = true;
                    }
                }
            }
            if !pending {
                return Step::Continue;
            }
            tokio::select! {
                biased;
                _ = self.shutdown.cancelled() => return Step::Drain(CloseReason::Shutdown),
                _ = self.held.lost().cancelled() => return Step::Lost,
                _ = tokio::time::sleep_until(self.held.valid_until()) => {
                    if !self.held.is_valid() { self.held.mark_lost(); return Step::Lost; }
                }
                _ = poll.tick() => {}
            }
        }
    }

    /// Registers a lane with every consumer that has not finished the shard; returns
    /// where the shared read starts (the lowest checkpoint), `None` if nobody needs it.
    fn open_lanes(&mut self, lease: &weir_core::Lease) -> Option<weir_core::StartingPosition> {
        let mut cps = Vec::new();
        for host in &self.deps.hosts {
            let cp = lease.checkpoint_for(&host.name).clone();
            if cp == Checkpoint::ShardEnd {
                continue;
            }
            let shared = LaneShared::new(lease.key.clone(), host.name.clone(), self.held.clone());
            let (tx, rx) = mpsc::unbounded_channel();
            let ctx = ShardContext {
                shard_id: lease.key.clone(),
                worker_id: self.deps.config.worker_id.clone(),
                checkpoint: cp.clone(),
                parents: lease.parents.clone(),
                intents: lease.intents.get(&host.name).cloned().unwrap_or_default(),
            };
            let _ = host.ctl.send(HostCtl::Open { ctx, lane: shared.clone(), rx });
            cps.push(cp.clone());
            self.lanes.push(Lane {
                host: host.clone(),
                shared,
                tx,
                initial: cp.clone(),
                after: cp,
                mode: LaneMode::Attached,
                full_since: None,
                retry: self.deps.config.backoff(),
            });
        }
        Checkpoint::lowest(&cps).and_then(|c| c.start_position())
    }

    async fn process(&mut self, start: weir_core::StartingPosition) -> Step {
        let config = self.deps.config.clone();
        let mut reader =
            spawn_reader(self.deps.reader.clone(), self.held.key().clone(), start, ReadMode::Live, config.backoff(), 2);
        let mut checkpoint_tick = tokio::time::interval(config.checkpoint_interval);
        checkpoint_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut handoff = self.held.handoff();
        if handoff.borrow_and_update().is_some() {
            return Step::Drain(CloseReason::Handoff);
        }
        let mut reads_idle = self.deps.reads.idle();
        loop {
            if self.shard_done() {
                return Step::Drain(CloseReason::ShardEnded);
            }
            if self.read_delivered() {
                self.reading.finish();
            }
            let waits_for_reads = self.waits_for_reads();
            let valid_until = self.held.valid_until();
            let step = tokio::select! {
                biased;
                _ = self.shutdown.cancelled() => Step::Drain(CloseReason::Shutdown),
                _ = self.held.lost().cancelled() => Step::Lost,
                _ = tokio::time::sleep_until(valid_until) => {
                    if self.held.is_valid() { Step::Continue } else { self.held.mark_lost(); Step::Lost }
                }
                changed = handoff.changed() => {
                    if changed.is_ok() && handoff.borrow_and_update().is_some() {
                        Step::Drain(CloseReason::Handoff)
                    } else {
                        Step::Continue
                    }
                }
                Some(msg) = self.catchup_rx.recv() => { self.on_catchup(msg); Step::Continue }
                Ok(()) = reads_idle.changed(), if waits_for_reads => {
                    if *reads_idle.borrow_and_update() {
                        self.maintain_lanes();
                    }
                    Step::Continue
                }
                _ = checkpoint_tick.tick() => {
                    self.maintain_lanes();
                    match self.write_checkpoints(None).await {
                        Ok(()) => Step::Continue,
                        Err(_) if !self.held.is_valid() => Step::Lost,
                        Err(_) => Step::Continue,
                    }
                }
                event = reader.rx.recv(), if self.live_end.is_none() => {
                    match event {
                        Some(ReadEvent::Batch(batch)) => self.dispatch(batch),
                        Some(ReadEvent::Failing(e)) => {
                            tracing::error!(shard = %self.held.key(), error = %e, "live read failing; retrying");
                            self.deps.stats.read_failing(self.held.key(), e.to_string().chars().take(500).collect());
                        }
                        None => {}
                    }
                    Step::Continue
                }
            };
            match step {
                Step::Continue => {}
                other => return other,
            }
        }
    }

    /// Fans a live batch out to every attached lane.
    fn dispatch(&mut self, batch: RecordBatch) {
        let shard = self.held.key().clone();
        let n = batch.records.len() as u64;
        if n > 0 {
            metrics::counter!(crate::metrics::RECORDS_READ, "shard" => shard.to_string()).increment(n);
        }
        // Also the shard's lag (`MillisBehindLatest`), which the binary publishes from
        // the stats: a shard's lag goes when its read stops.
        self.deps.stats.read(&shard, &batch);
        if self.first_live.is_none() {
            self.first_live = batch.records.first().map(|r| r.position.clone());
        }
        if let Some(last) = batch.last_position() {
            self.live_last = Some(last.clone());
        }
        let end = batch.child_shards.clone();
        let batch = Arc::new(batch);
        let now = Instant::now();
        let room = Room {
            batches: self.deps.config.queue_capacity,
            bytes: self.deps.config.queue_bytes,
            detach_after: self.deps.config.detach_after,
        };
        for lane in &mut self.lanes {
            if !lane.is_attached() {
                continue;
            }
            if lane.offer(&batch, &room, now).is_some() {
                self.deps.stats.lane(&shard, &lane.host.name, |s| {
                    s.detaches += 1;
                    s.detached = true;
                });
                continue;
            }
            if end.is_some() {
                lane.mode = LaneMode::AtEnd { close_at: now };
            }
        }
        if let Some(children) = end {
            if children.is_empty() {
                // A replay's window end reads this way too (the window reader logs it).
                tracing::info!(%shard, "read ended with no child shards to follow");
            } else {
                tracing::info!(%shard, children = children.len(), "shard end read");
            }
            self.live_end = Some(children);
        }
    }

    /// Periodic lane upkeep: detach failing lanes, start catch-ups, close lanes at end.
    fn maintain_lanes(&mut self) {
        let now = Instant::now();
        let waits_for_reads = self.waits_for_reads();
        for idx in 0..self.lanes.len() {
            let lane = &mut self.lanes[idx];
            let failing = lane.shared.failed();
            // What a lane's consumer acknowledged on its own needs no close to flush.
            let close_waits = waits_for_reads && !lane.fully_acked();
            match &mut lane.mode {
                LaneMode::Attached | LaneMode::AtEnd { .. } | LaneMode::Closing(_) if failing => {
                    lane.detach(DetachReason::Failing, now);
                    let name = lane.host.name.clone();
                    self.deps.stats.lane(self.held.key(), &name, |s| {
                        s.detaches += 1;
                        s.detached = true;
                    });
                }
                LaneMode::Idle { resume_at } if *resume_at <= now => {
                    let plan = CatchupPlan {
                        lane: idx,
                        shared: lane.shared.clone(),
                        tx: lane.tx.clone(),
                        reader: self.deps.reader.clone(),
                        initial: lane.initial.clone(),
                        first_live: self.first_live.clone(),
                        capacity: self.deps.config.queue_capacity,
                        queue_bytes: self.deps.config.queue_bytes,
                        backoff: self.deps.config.backoff(),
                        events: self.catchup_tx.clone(),
                    };
                    lane.mode = LaneMode::CatchingUp(tokio::spawn(run_catchup(plan)));
                }
                LaneMode::AtEnd { close_at } if *close_at <= now && !close_waits => {
                    let (done, rx) = tokio::sync::oneshot::channel();
                    let epoch = lane.shared.epoch();
                    let msg = crate::lane::LaneMsg::Close { epoch, reason: CloseReason::ShardEnded, done };
                    if lane.tx.send(msg).is_ok() {
                        lane.mode = LaneMode::Closing(rx);
                    }
                }
                LaneMode::Closing(rx) => match rx.try_recv() {
                    Ok(true) => lane.mode = LaneMode::Closed,
                    Ok(false) | Err(tokio::sync::oneshot::error::TryRecvError::Closed) => {
                        lane.mode = LaneMode::AtEnd { close_at: now + lane.retry.next_delay() };
                    }
                    Err(tokio::sync::oneshot::error::TryRecvError::Empty) => {}
                },
                _ => {}
            }
        }
    }

    fn on_catchup(&mut self, msg: CatchupMsg) {
        let now = Instant::now();
        match msg {
            CatchupMsg::Rejoin { lane, through, reply } => {
                let live_ahead = match (&self.live_last, &through) {
                    (None, _) => false,
                    (Some(live), Checkpoint::At(t)) => live > t,
                    (Some(_), _) => true,
                };
                let ok = self.live_end.is_none() && !live_ahead;
                if ok {
                    let l = &mut self.lanes[lane];
                    l.mode = LaneMode::Attached;
                    l.after = through;
                    l.full_since = None;
                    l.retry.reset();
                    self.deps.stats.lane(self.held.key(), &l.host.name, |s| s.detached = false);
                    tracing::info!(shard = %self.held.key(), consumer = %l.host.name, "consumer caught up and rejoined the live read");
                }
                let _ = reply.send(ok);
            }
            CatchupMsg::ReachedEnd { lane, through } => {
                // What the catch-up sent is owed to the consumer now: the shard is done
                // only once it is acknowledged (`Lane::fully_acked`).
                self.lanes[lane].after = through;
                self.lanes[lane].mode = LaneMode::AtEnd { close_at: now };
            }
            CatchupMsg::Failed { lane } => {
                let l = &mut self.lanes[lane];
                l.mode = LaneMode::Attached; // so detach() below starts from a clean state
                l.detach(DetachReason::Failing, now);
                self.deps.stats.lane(self.held.key(), &l.host.name, |s| s.detached = true);
            }
        }
    }

    /// Every record of the shard has been read and handed to its consumers (their
    /// `on_batch` returned); a lane that is catching up has not.
    fn read_delivered(&self) -> bool {
        self.live_end.is_some()
            && self.lanes.iter().all(|l| {
                matches!(l.mode, LaneMode::AtEnd { .. } | LaneMode::Closing(_) | LaneMode::Closed)
                    && l.shared.inflight() == 0
            })
    }

    /// The read ended with no child shards, and the lanes' closes wait for the worker's
    /// other shards to be read and delivered ([`RuntimeConfig::close_ends_together`]).
    fn waits_for_reads(&self) -> bool {
        self.deps.config.close_ends_together
            && self.live_end.as_ref().is_some_and(Vec::is_empty)
            && !self.deps.reads.is_idle()
    }

    /// The shard end was read and every lane closed with its records acknowledged.
    fn shard_done(&self) -> bool {
        self.live_end.is_some()
            && self
                .lanes
                .iter()
                .all(|l| matches!(l.mode, LaneMode::Closed) && l.shared.inflight() == 0 && l.fully_acked())
    }
}
