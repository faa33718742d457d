//! The shard worker's view of its lanes: dispatch with per-lane filtering and the
//! backed-up / failing detection that detaches a lane.

use std::sync::Arc;

use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use weir_core::{Checkpoint, RecordBatch};

use crate::Backoff;
use crate::host::HostHandle;
use crate::lane::{LaneMsg, LaneShared};

/// Where a lane stands in the shard worker.
///
/// ```text
/// Attached ──backed up / failing──▶ Idle ──resume time──▶ CatchingUp ──rejoin──▶ Attached
///    │                                                        │
///    └──────────── shard end read ──▶ AtEnd ◀── end read ─────┘
/// AtEnd ──close sent──▶ Closing ──ok──▶ Closed        (failing at any point ──▶ Idle)
/// ```
pub(crate) enum LaneMode {
    Attached,
    Idle { resume_at: Instant },
    CatchingUp(JoinHandle<()>),
    AtEnd { close_at: Instant },
    Closing(oneshot::Receiver<bool>),
    Closed,
}

pub(crate) struct Lane {
    pub host: HostHandle,
    pub shared: Arc<LaneShared>,
    pub tx: mpsc::UnboundedSender<LaneMsg>,
    /// The consumer's checkpoint when the shard opened.
    pub initial: Checkpoint,
    /// Records after this are still owed to the consumer by the live read.
    pub after: Checkpoint,
    pub mode: LaneMode,
    pub full_since: Option<Instant>,
    pub retry: Backoff,
}

impl Drop for Lane {
    fn drop(&mut self) {
        if let LaneMode::CatchingUp(h) = &self.mode {
            h.abort();
        }
    }
}

/// The part of `batch` a consumer at `after` still needs; `None` when nothing.
/// Records are in order, so one boundary search suffices.
pub(crate) fn owed(batch: &Arc<RecordBatch>, after: &Checkpoint) -> Option<Arc<RecordBatch>> {
    let first = batch.records.first()?;
    if after.wants(&first.position, first.approximate_arrival) {
        return Some(batch.clone());
    }
    let cut = batch.records.partition_point(|r| !after.wants(&r.position, r.approximate_arrival));
    if cut == batch.records.len() {
        return None;
    }
    Some(Arc::new(RecordBatch {
        shard_id: batch.shard_id.clone(),
        records: batch.records[cut..].to_vec(),
        millis_behind_latest: batch.millis_behind_latest,
        child_shards: None,
    }))
}

/// How much a lane may hold before it counts as backed up: `batches` batches or
/// `bytes` bytes of record data (`RuntimeConfig::queue_capacity`, `queue_bytes`).
pub(crate) struct Room {
    pub batches: usize,
    pub bytes: usize,
    pub detach_after: std::time::Duration,
}

/// Why a lane was detached (metric label).
#[derive(Debug, Clone, Copy)]
pub(crate) enum DetachReason {
    BackedUp,
    Failing,
}

impl DetachReason {
    fn label(self) -> &'static str {
        match self {
            DetachReason::BackedUp => "backed_up",
            DetachReason::Failing => "failing",
        }
    }
}

impl Lane {
    /// Whether acknowledgements cover every record sent to the lane.
    pub(crate) fn fully_acked(&self) -> bool {
        if self.after == self.initial {
            return true;
        }
        match &self.after {
            Checkpoint::At(last) => self.shared.progress().acked.as_ref().is_some_and(|a| a >= last),
            _ => true,
        }
    }

    pub(crate) fn is_attached(&self) -> bool {
        matches!(self.mode, LaneMode::Attached)
    }

    /// Detaches the lane: its queued batches are skipped and a catch-up read resumes
    /// after the last batch the consumer processed, once the delay has passed.
    pub(crate) fn detach(&mut self, reason: DetachReason, now: Instant) {
        self.shared.bump_epoch();
        let delay = match reason {
            DetachReason::BackedUp => std::time::Duration::ZERO,
            DetachReason::Failing => self.retry.next_delay(),
        };
        if let LaneMode::CatchingUp(h) = &self.mode {
            h.abort();
        }
        self.mode = LaneMode::Idle { resume_at: now + delay };
        self.full_since = None;
        metrics::counter!(crate::metrics::LANE_DETACHED, "consumer" => self.host.name.to_string(), "reason" => reason.label()).increment(1);
        tracing::info!(shard = %self.shared.shard, consumer = %self.host.name, reason = reason.label(), ?delay, "consumer detached from shard; it will catch up");
    }

    /// Offers a live batch to an attached lane. Returns whether the lane was detached.
    ///
    /// A full lane (see [`Room`]) still takes batches for `detach_after`, up to twice
    /// its room; then it is detached, and what it queued is skipped.
    pub(crate) fn offer(&mut self, batch: &Arc<RecordBatch>, room: &Room, now: Instant) -> Option<DetachReason> {
        if self.shared.failed() {
            self.detach(DetachReason::Failing, now);
            return Some(DetachReason::Failing);
        }
        let part = owed(batch, &self.after)?;
        if self.shared.is_full(room.batches, room.bytes) {
            let since = *self.full_since.get_or_insert(now);
            let overfull = self.shared.is_full(room.batches.saturating_mul(2), room.bytes.saturating_mul(2));
            if now.duration_since(since) >= room.detach_after || overfull {
                self.detach(DetachReason::BackedUp, now);
                return Some(DetachReason::BackedUp);
            }
        } else {
            self.full_since = None;
        }
        if let Some(last) = part.last_position() {
            self.after = Checkpoint::At(last.clone());
        }
        let bytes = part.data_bytes();
        self.shared.sent(bytes);
        let msg = LaneMsg::Batch { epoch: self.shared.epoch(), batch: part };
        if self.tx.send(msg).is_err() {
            self.shared.done_one(bytes);
        }
        None
    }
}
