//! A lane: the queue and progress of one consumer on one shard.
//!
//! The shard worker (or its catch-up task) sends batches; the consumer host processes
//! them. Batches carry the lane's epoch: when the shard worker detaches a lane it bumps
//! the epoch, and the host skips every batch of an older epoch, so a catch-up read can
//! restart cleanly after the last batch the consumer actually processed.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::held_lease::HeldLease;
use tokio::sync::{Notify, oneshot};
use weir_core::{CloseReason, ConsumerName, ExtendedSequenceNumber, RecordBatch, ShardId};

/// Messages on a lane, in order.
pub(crate) enum LaneMsg {
    Batch {
        epoch: u64,
        batch: Arc<RecordBatch>,
    },
    /// Close the shard for the consumer. A shard-end close sent in an epoch that has
    /// since failed or ended is not served (answered `false`): the consumer failed a
    /// batch queued before it, so it has not finished the shard, and its lane goes on
    /// (catch-up) after it.
    Close {
        epoch: u64,
        reason: CloseReason,
        done: oneshot::Sender<bool>,
    },
}

/// Positions of a lane; `None` means "nothing in this session".
#[derive(Debug, Default, Clone)]
pub(crate) struct Progress {
    /// Last position handed to `on_batch` (acknowledgements are clamped to it).
    pub handed: Option<ExtendedSequenceNumber>,
    /// Last position of a batch `on_batch` finished successfully.
    pub processed: Option<ExtendedSequenceNumber>,
    /// Highest position the consumer acknowledged.
    pub acked: Option<ExtendedSequenceNumber>,
}

pub(crate) struct LaneShared {
    pub shard: ShardId,
    pub consumer: ConsumerName,
    /// The lease the lane's records come from (intents are written through it).
    pub held: Arc<HeldLease>,
    epoch: AtomicU64,
    failed_epoch: AtomicU64,
    inflight: AtomicUsize,
    /// Record data bytes of the batches in `inflight`.
    inflight_bytes: AtomicUsize,
    drained: Notify,
    progress: Mutex<Progress>,
    /// The host let the lane go: the consumer's handles on it no longer count.
    closed: AtomicBool,
}

impl LaneShared {
    pub(crate) fn new(shard: ShardId, consumer: ConsumerName, held: Arc<HeldLease>) -> Arc<Self> {
        Arc::new(Self {
            shard,
            consumer,
            held,
            epoch: AtomicU64::new(1),
            failed_epoch: AtomicU64::new(0),
            inflight: AtomicUsize::new(0),
            inflight_bytes: AtomicUsize::new(0),
            drained: Notify::new(),
            progress: Mutex::new(Progress::default()),
            closed: AtomicBool::new(false),
        })
    }

    pub(crate) fn progress(&self) -> MutexGuard<'_, Progress> {
        self.progress.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::SeqCst)
    }

    /// Starts a new epoch: queued batches of older epochs will be skipped.
    pub(crate) fn bump_epoch(&self) -> u64 {
        self.epoch.fetch_add(1, Ordering::SeqCst) + 1
    }

    /// The host lets the lane go: nothing more is processed on it (a catch-up waiting
    /// on it wakes), and the consumer's acknowledgements through it no longer count.
    pub(crate) fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        self.bump_epoch();
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }

    pub(crate) fn mark_failed(&self, epoch: u64) {
        self.failed_epoch.fetch_max(epoch, Ordering::SeqCst);
    }

    /// Whether the current epoch failed.
    pub(crate) fn failed(&self) -> bool {
        self.failed_epoch.load(Ordering::SeqCst) >= self.epoch()
    }

    pub(crate) fn inflight(&self) -> usize {
        self.inflight.load(Ordering::SeqCst)
    }

    /// Record data bytes queued on the lane or being processed.
    pub(crate) fn inflight_bytes(&self) -> usize {
        self.inflight_bytes.load(Ordering::SeqCst)
    }

    /// Whether the lane holds `capacity` batches or `bytes` bytes of record data.
    pub(crate) fn is_full(&self, capacity: usize, bytes: usize) -> bool {
        self.inflight() >= capacity || self.inflight_bytes() >= bytes
    }

    /// A batch of `bytes` record data bytes was queued on the lane.
    pub(crate) fn sent(&self, bytes: usize) {
        self.inflight.fetch_add(1, Ordering::SeqCst);
        self.inflight_bytes.fetch_add(bytes, Ordering::SeqCst);
    }

    /// A batch of `bytes` record data bytes was processed (or skipped).
    pub(crate) fn done_one(&self, bytes: usize) {
        self.inflight_bytes.fetch_sub(bytes, Ordering::SeqCst);
        self.inflight.fetch_sub(1, Ordering::SeqCst);
        self.drained.notify_waiters();
    }

    /// Waits until the lane has room: fewer than `capacity` batches and fewer than
    /// `bytes` bytes queued. An empty lane always has room, so a batch larger than
    /// `bytes` still goes through, alone.
    pub(crate) async fn wait_room(&self, capacity: usize, bytes: usize) {
        self.wait_until(|l| l.inflight() == 0 || !l.is_full(capacity, bytes)).await;
    }

    /// Waits until nothing is queued or being processed.
    pub(crate) async fn wait_drained(&self) {
        self.wait_until(|l| l.inflight() == 0).await;
    }

    /// Waits until `ready` holds, checked after every finished batch.
    async fn wait_until(&self, ready: impl Fn(&Self) -> bool) {
        loop {
            let notified = self.drained.notified();
            if ready(self) {
                return;
            }
            notified.await;
        }
    }

    /// Records an acknowledgement, clamped to what was handed to the consumer.
    pub(crate) fn ack(&self, position: &ExtendedSequenceNumber) {
        let mut p = self.progress();
        let Some(handed) = p.handed.clone() else {
            tracing::warn!(shard = %self.shard, consumer = %self.consumer, %position, "acknowledgement before any delivery ignored");
            return;
        };
        let pos = if *position > handed {
            tracing::warn!(shard = %self.shard, consumer = %self.consumer, %position, %handed, "acknowledgement beyond delivered records clamped");
            handed
        } else {
            position.clone()
        };
        if p.acked.as_ref().is_none_or(|a| pos > *a) {
            p.acked = Some(pos);
        }
    }
}
