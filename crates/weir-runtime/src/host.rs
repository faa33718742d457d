//! The consumer host: one task per consumer that serialises every call into it.
//!
//! It receives lanes from shard workers (control channel, handled first) and the
//! batches on those lanes, ticks the consumer, catches failures and panics, and routes
//! acknowledgements to the lane of the shard they name.
//!
//! Every shard opened for the consumer is closed for it exactly once before its lane
//! goes: by the close the shard worker queued on the lane, or, when the shard worker
//! let the lease go without that close being served (a handoff or shutdown past its
//! deadline, a close that failed), with [`CloseReason::LeaseLost`] when the lane is
//! removed, so the consumer never keeps state of a shard it no longer has (and a
//! worker that takes the shard again starts it afresh).

use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use tokio::sync::{mpsc, oneshot};
use tokio_stream::StreamExt;
use tokio_stream::StreamMap;
use tokio_stream::wrappers::UnboundedReceiverStream;
use weir_core::{
    Acks, Checkpoint, CheckpointError, Checkpointer, Clock, CloseReason, Consumer, ConsumerError, ConsumerName,
    ExtendedSequenceNumber, Intent, IntentError, IntentLog, IntentWrite, LeaseChange, ShardContext, ShardId,
};

use crate::held_lease::HeldLease;

use crate::lane::{LaneMsg, LaneShared};
use crate::stats::WorkerStats;

/// Control messages to a host.
pub(crate) enum HostCtl {
    /// A shard opens: register its lane.
    Open { ctx: ShardContext, lane: Arc<LaneShared>, rx: mpsc::UnboundedReceiver<LaneMsg> },
    /// The lease is lost: drop queued batches and close with `LeaseLost`.
    Abandon { shard: ShardId, done: oneshot::Sender<()> },
    /// The shard worker is finished with the lane: forget it (closing the shard for
    /// the consumer as lost if no close was served).
    Remove { shard: ShardId },
    /// A checkpoint write dropped these intents of the consumer from the shard's lease.
    IntentsPassed { shard: ShardId, intents: Vec<Intent> },
}

/// The shard worker's handle to a host.
#[derive(Clone)]
pub(crate) struct HostHandle {
    pub name: ConsumerName,
    pub ctl: mpsc::UnboundedSender<HostCtl>,
}

struct LaneAcks {
    consumer: ConsumerName,
    lanes: HashMap<ShardId, Arc<LaneShared>>,
}

#[async_trait::async_trait]
impl IntentLog for LaneAcks {
    async fn record(&self, writes: Vec<IntentWrite>) -> Result<(), IntentError> {
        let mut missing = Vec::new();
        let mut changes = Vec::new();
        for IntentWrite { shard, add, replacing } in writes {
            match self.lanes.get(&shard) {
                Some(lane) => changes.push((
                    lane.held.clone(),
                    LeaseChange::RecordIntents { consumer: self.consumer.clone(), intents: add, replacing },
                )),
                None => missing.push(shard),
            }
        }
        if !missing.is_empty() {
            return Err(IntentError::NotHeld(missing));
        }
        if changes.is_empty() {
            return Ok(());
        }
        metrics::counter!(crate::metrics::INTENT_WRITES).increment(1);
        HeldLease::write_many(changes).await.map_err(|(lost, err)| match err {
            Some(e) => IntentError::Store(e.to_string()),
            None => IntentError::NotHeld(lost),
        })
    }
}

#[async_trait::async_trait]
impl Checkpointer for LaneAcks {
    async fn checkpoint(&self, shard: &ShardId, position: &ExtendedSequenceNumber) -> Result<(), CheckpointError> {
        let Some(lane) = self.lanes.get(shard) else { return Err(CheckpointError::NotHeld(shard.clone())) };
        let handed = lane.progress().handed.clone();
        if handed.as_ref().is_none_or(|h| position > h) {
            return Err(CheckpointError::Invalid(format!("{position} was not delivered")));
        }
        lane.ack(position);
        if !lane.held.is_valid() {
            return Err(CheckpointError::NotHeld(shard.clone()));
        }
        // The same write the shard worker makes every checkpoint_interval, now: it only
        // moves forward, and the shard worker's next one finds nothing to change.
        let lease = lane.held.snapshot().await;
        let target = Checkpoint::At(position.clone());
        let current = lease.checkpoint_for(&self.consumer);
        if *current == target || !current.can_advance_to(&target) {
            return Ok(());
        }
        let checkpoints = std::collections::BTreeMap::from([(self.consumer.clone(), target)]);
        match lane.held.checkpoint(checkpoints, None).await {
            Ok(_) => Ok(()),
            Err(crate::held_lease::HeldError::Lost(_)) => Err(CheckpointError::NotHeld(shard.clone())),
            // The shard worker's own write got there first with this position or later.
            Err(crate::held_lease::HeldError::Store(weir_core::LeaseError::CheckpointBackwards { .. })) => Ok(()),
            Err(e) => Err(CheckpointError::Store(e.to_string())),
        }
    }
}

impl Acks for LaneAcks {
    fn durable(&self, shard: &ShardId, position: &ExtendedSequenceNumber) {
        match self.lanes.get(shard) {
            Some(lane) => lane.ack(position),
            None => {
                tracing::debug!(%shard, %position, "acknowledgement for a shard not held ignored")
            }
        }
    }

    fn intents(&self) -> Option<&dyn IntentLog> {
        Some(self)
    }

    fn checkpointer(&self) -> Option<&dyn Checkpointer> {
        Some(self)
    }
}

async fn guarded<F>(fut: F) -> Result<(), ConsumerError>
where
    F: std::future::Future<Output = Result<(), ConsumerError>>,
{
    match AssertUnwindSafe(fut).catch_unwind().await {
        Ok(r) => r,
        Err(panic) => {
            let msg = panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "non-string panic".into());
            Err(ConsumerError::msg(format!("consumer panicked: {msg}")))
        }
    }
}

/// Runs a consumer until the control channel closes.
pub(crate) async fn run_host(
    mut consumer: Box<dyn Consumer>,
    mut ctl: mpsc::UnboundedReceiver<HostCtl>,
    clock: Arc<dyn Clock>,
    tick_every: Duration,
    stats: WorkerStats,
) {
    let name = ConsumerName::new(consumer.name());
    let mut lanes: StreamMap<ShardId, UnboundedReceiverStream<LaneMsg>> = StreamMap::new();
    let mut acks = LaneAcks { consumer: name.clone(), lanes: HashMap::new() };
    // Shards opened for the consumer and not closed since.
    let mut open: std::collections::HashSet<ShardId> = std::collections::HashSet::new();
    let mut tick = tokio::time::interval(tick_every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            biased;
            msg = ctl.recv() => match msg {
                None => break,
                Some(HostCtl::Open { ctx, lane, rx }) => {
                    let shard = ctx.shard_id.clone();
                    if let Err(e) = guarded(consumer.on_shard_open(&ctx)).await {
                        failure(&name, &shard, &stats, &e, "on_shard_open");
                    }
                    acks.lanes.insert(shard.clone(), lane);
                    open.insert(shard.clone());
                    lanes.insert(shard, UnboundedReceiverStream::new(rx));
                }
                Some(HostCtl::Abandon { shard, done }) => {
                    lanes.remove(&shard);
                    if let Some(lane) = acks.lanes.remove(&shard) {
                        // Nothing more will be processed; wake any catch-up waiting on it.
                        lane.bump_epoch();
                    }
                    open.remove(&shard);
                    if let Err(e) = guarded(consumer.on_shard_close(&shard, CloseReason::LeaseLost, &acks)).await {
                        failure(&name, &shard, &stats, &e, "on_shard_close");
                    }
                    let _ = done.send(());
                }
                Some(HostCtl::Remove { shard }) => {
                    lanes.remove(&shard);
                    if let Some(lane) = acks.lanes.remove(&shard) {
                        lane.bump_epoch();
                    }
                    if open.remove(&shard) {
                        // The lease went without the consumer closing the shard (its close
                        // was still queued, or failed): it drops what it holds of it.
                        tracing::warn!(consumer = %name, %shard, "shard let go before the consumer closed it; dropping its state");
                        if let Err(e) = guarded(consumer.on_shard_close(&shard, CloseReason::LeaseLost, &acks)).await {
                            failure(&name, &shard, &stats, &e, "on_shard_close");
                        }
                    }
                }
                Some(HostCtl::IntentsPassed { shard, intents }) => {
                    if let Err(e) = guarded(consumer.on_intents_passed(&shard, &intents)).await {
                        failure(&name, &shard, &stats, &e, "on_intents_passed");
                    }
                }
            },
            Some((shard, msg)) = lanes.next() => match msg {
                LaneMsg::Batch { epoch, batch } => {
                    let Some(lane) = acks.lanes.get(&shard).cloned() else { continue };
                    if epoch != lane.epoch() || lane.failed() {
                        lane.done_one();
                        continue;
                    }
                    lane.progress().handed = batch.last_position().cloned();
                    match guarded(consumer.on_batch(&batch, &acks)).await {
                        Ok(()) => {
                            let mut p = lane.progress();
                            p.processed = p.handed.clone();
                            drop(p);
                            let n = batch.records.len() as u64;
                            metrics::counter!(crate::metrics::RECORDS_DELIVERED, "consumer" => name.to_string()).increment(n);
                            let last = batch.last_position().cloned();
                            stats.lane(&shard, &name, |s| {
                                s.records += n;
                                s.last = last.or(s.last.take());
                                s.failing_since = None;
                            });
                        }
                        Err(e) => {
                            // Nothing of the batch counts as delivered: it will be read again.
                            let mut p = lane.progress();
                            p.handed = p.processed.clone();
                            drop(p);
                            lane.mark_failed(epoch);
                            failure(&name, &shard, &stats, &e, "on_batch");
                        }
                    }
                    lane.done_one();
                }
                LaneMsg::Close { epoch, reason, done } => {
                    let stale = acks.lanes.get(&shard).is_none_or(|l| epoch != l.epoch() || l.failed());
                    if reason == CloseReason::ShardEnded && stale {
                        let _ = done.send(false);
                        continue;
                    }
                    let r = guarded(consumer.on_shard_close(&shard, reason, &acks)).await;
                    match &r {
                        Ok(()) => {
                            open.remove(&shard);
                        }
                        Err(e) => failure(&name, &shard, &stats, e, "on_shard_close"),
                    }
                    let _ = done.send(r.is_ok());
                }
            },
            _ = tick.tick() => {
                if let Err(e) = guarded(consumer.on_tick(clock.now(), &acks)).await {
                    metrics::counter!(crate::metrics::CONSUMER_FAILURES, "consumer" => name.to_string()).increment(1);
                    tracing::warn!(consumer = %name, error = %e, "on_tick failed");
                }
            }
        }
    }
}

fn failure(name: &ConsumerName, shard: &ShardId, stats: &WorkerStats, e: &ConsumerError, call: &str) {
    metrics::counter!(crate::metrics::CONSUMER_FAILURES, "consumer" => name.to_string()).increment(1);
    let text: String = e.to_string().chars().take(500).collect();
    stats.lane(shard, name, |s| {
        s.failures += 1;
        s.last_error = Some(format!("{call}: {text}"));
        s.failing_since = s.failing_since.or_else(|| Some(tokio::time::Instant::now()));
    });
    tracing::warn!(consumer = %name, %shard, call, error = %e, "consumer call failed");
}
