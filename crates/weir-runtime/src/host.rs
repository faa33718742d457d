//! The consumer host: one task per consumer that serialises every call into it.
//!
//! It receives lanes from shard workers (control channel, handled first) and the
//! batches on those lanes, ticks the consumer, catches failures and panics, and routes
//! acknowledgements to the lane of the shard they name. A batch finishes when
//! `on_batch` returns, or, when the consumer deferred it, when the consumer's own task
//! says so (`acks.rs`), so a consumer's shards can be processed at once.
//!
//! Every shard opened for the consumer is closed for it exactly once before its lane
//! goes: by the close the shard worker queued on the lane, or, when the shard worker
//! let the lease go without that close being served (a handoff or shutdown past its
//! deadline, a close that failed), with [`CloseReason::LeaseLost`] when the lane is
//! removed, so the consumer never keeps state of a shard it no longer has (and a
//! worker that takes the shard again starts it afresh).

use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::FutureExt;
use tokio::sync::{mpsc, oneshot};
use tokio_stream::StreamExt;
use tokio_stream::StreamMap;
use tokio_stream::wrappers::UnboundedReceiverStream;
use weir_core::{Clock, CloseReason, Consumer, ConsumerError, ConsumerName, Intent, ShardContext, ShardId};

use crate::acks::{BatchAcks, BatchEnd, LaneAcks, failure};
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
                        lane.close();
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
                        lane.close();
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
                        lane.done_one(batch.data_bytes());
                        continue;
                    }
                    // Finished when on_batch returns, or later if the consumer defers it.
                    let end = BatchEnd::hand_over(lane, name.clone(), stats.clone(), epoch, &batch);
                    let batch_acks = BatchAcks { acks: &acks, end: Arc::new(Mutex::new(Some(end))), deferred: false.into() };
                    let result = guarded(consumer.on_batch(&batch, &batch_acks)).await;
                    batch_acks.returned(result);
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
