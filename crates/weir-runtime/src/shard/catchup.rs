//! Catch-up: a detached consumer reads its own way (polling) from after the last batch
//! it processed, then rejoins the live read once it has reached the live position.

use std::sync::Arc;

use tokio::sync::{mpsc, oneshot};
use weir_core::ports::{ReadMode, ShardReader};
use weir_core::{Checkpoint, ExtendedSequenceNumber, StartingPosition};

use super::lanes::owed;
use crate::Backoff;
use crate::lane::{LaneMsg, LaneShared};
use crate::reader_task::{ReadEvent, spawn_reader};

/// Messages from catch-up tasks to their shard worker.
pub(crate) enum CatchupMsg {
    /// The catch-up is at the tip, having sent everything up to `through`. The worker
    /// answers `true` and reattaches the lane if the live read is not past `through`.
    Rejoin { lane: usize, through: Checkpoint, reply: oneshot::Sender<bool> },
    /// The catch-up delivered the shard's last record; `through` is the last position
    /// it sent (what the consumer must acknowledge before the shard counts as done).
    ReachedEnd { lane: usize, through: Checkpoint },
    /// The consumer failed again during the catch-up.
    Failed { lane: usize },
}

pub(crate) struct CatchupPlan {
    pub lane: usize,
    pub shared: Arc<LaneShared>,
    pub tx: mpsc::UnboundedSender<LaneMsg>,
    pub reader: Arc<dyn ShardReader>,
    /// The consumer's checkpoint when the shard opened.
    pub initial: Checkpoint,
    /// First record the live read returned, if any (used when the consumer started at
    /// `Latest` and has processed nothing yet).
    pub first_live: Option<ExtendedSequenceNumber>,
    pub capacity: usize,
    /// Record data bytes the lane may have queued.
    pub queue_bytes: usize,
    pub backoff: Backoff,
    pub events: mpsc::UnboundedSender<CatchupMsg>,
}

/// Where to resume: after the last processed record, or the initial checkpoint.
fn resume_point(p: &CatchupPlan) -> (Checkpoint, StartingPosition) {
    if let Some(done) = p.shared.progress().processed.clone() {
        let start = StartingPosition::AtSequenceNumber(done.sequence.clone());
        return (Checkpoint::At(done), start);
    }
    match (&p.initial, &p.first_live) {
        (Checkpoint::Latest, Some(first)) => {
            (Checkpoint::Latest, StartingPosition::AtSequenceNumber(first.sequence.clone()))
        }
        (cp, _) => (cp.clone(), cp.start_position().unwrap_or(StartingPosition::Latest)),
    }
}

pub(crate) async fn run_catchup(plan: CatchupPlan) {
    let epoch = plan.shared.epoch();
    // Let the host finish (or skip) everything queued before the detach.
    plan.shared.wait_drained().await;
    let (mut after, start) = resume_point(&plan);
    tracing::debug!(shard = %plan.shared.shard, consumer = %plan.shared.consumer, ?start, "catch-up starts");
    let mut read =
        spawn_reader(plan.reader.clone(), plan.shared.shard.clone(), start, ReadMode::Polling, plan.backoff.clone(), 2);
    let failed = |p: &CatchupPlan| p.shared.failed() || p.shared.epoch() != epoch;
    while let Some(event) = read.rx.recv().await {
        let batch = match event {
            ReadEvent::Batch(b) => Arc::new(b),
            ReadEvent::Failing(e) => {
                tracing::warn!(shard = %plan.shared.shard, error = %e, "catch-up read failing");
                continue;
            }
        };
        if let Some(part) = owed(&batch, &after) {
            plan.shared.wait_room(plan.capacity, plan.queue_bytes).await;
            if failed(&plan) {
                let _ = plan.events.send(CatchupMsg::Failed { lane: plan.lane });
                return;
            }
            if let Some(last) = part.last_position() {
                after = Checkpoint::At(last.clone());
            }
            let bytes = part.data_bytes();
            plan.shared.sent(bytes);
            if plan.tx.send(LaneMsg::Batch { epoch, batch: part }).is_err() {
                plan.shared.done_one(bytes);
                return;
            }
        }
        if batch.is_shard_end() {
            let _ = plan.events.send(CatchupMsg::ReachedEnd { lane: plan.lane, through: after.clone() });
            return;
        }
        let at_tip = batch.records.is_empty() || batch.millis_behind_latest == Some(0);
        if at_tip {
            let (reply, answer) = oneshot::channel();
            let msg = CatchupMsg::Rejoin { lane: plan.lane, through: after.clone(), reply };
            if plan.events.send(msg).is_err() {
                return;
            }
            if answer.await.unwrap_or(false) {
                return;
            }
        }
    }
}
