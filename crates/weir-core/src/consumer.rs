//! The worker-scoped consumer API.
//!
//! One consumer instance runs per worker process and receives batches from every shard
//! that worker holds (the archiver mixes shards in one object, as Firehose does). The
//! runtime calls the methods of one instance sequentially, never concurrently.
//!
//! A consumer whose work per shard is slow (a child process per shard, a remote call)
//! need not hold the others up: from `on_batch` it may [`Acks::defer`] the batch, hand
//! it to a task of its own for that shard with an owned [`Acks::shard`] handle, and
//! return; the task finishes the batch later, and the shards' tasks run at once.
//!
//! A consumer reports progress with [`Acks::durable`]: "every record of this shard up
//! to and including this position is done for me" - sent, written, or deliberately
//! dropped or routed to an error output. The runtime persists only acknowledged
//! positions, so a checkpoint never passes a record its consumer has not finished.
//!
//! Consumers run on the same async threads as the worker's lease renewals. A method
//! doing long CPU work (a batch of 1 MiB records) must yield between pieces of it,
//! about every [`YIELD_EVERY_BYTES`] of input (`tokio::task::yield_now`): a thread held
//! for seconds delays renewals, and a lease not renewed within the failover time is
//! lost, so the shard's work is thrown away and read again.

use std::sync::Arc;

use async_trait::async_trait;

use crate::ids::{ShardId, WorkerId};
use crate::lease::Intent;
use crate::position::Checkpoint;
use crate::record::RecordBatch;
use crate::sequence::ExtendedSequenceNumber;
use crate::time::Timestamp;

/// How much record data a consumer may process between two yields to the scheduler
/// (see the module documentation): 1 MiB is a few milliseconds of parsing in a
/// release build.
pub const YIELD_EVERY_BYTES: usize = 1 << 20;

/// What a consumer learns when a shard opens for it.
#[derive(Debug, Clone)]
pub struct ShardContext {
    /// The shard.
    pub shard_id: ShardId,
    /// The worker holding the shard's lease.
    pub worker_id: WorkerId,
    /// This consumer's checkpoint: it receives only records after it.
    pub checkpoint: Checkpoint,
    /// Parent shards (already finished).
    pub parents: Vec<ShardId>,
    /// This consumer's open intents on the shard, left by earlier owners (or an earlier
    /// run of this worker): writes that may or may not have happened.
    pub intents: Vec<Intent>,
}

/// Why a shard closes for a consumer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CloseReason {
    /// The shard ended (split or merge). Make everything durable and acknowledge it:
    /// the shard is marked ended and its children start only after that.
    ShardEnded,
    /// Another worker takes the lease for balance. Make buffered records durable and
    /// acknowledge them before the deadline; the lease is handed over after.
    Handoff,
    /// The worker is shutting down. Same duty as `Handoff`.
    Shutdown,
    /// Another worker owns the lease now. Drop this shard's unacknowledged state;
    /// acknowledgements are ignored from here on.
    LeaseLost,
}

impl CloseReason {
    /// Whether the consumer should flush (as opposed to discard) buffered records.
    pub fn should_flush(self) -> bool {
        !matches!(self, CloseReason::LeaseLost)
    }
}

/// Where a consumer reports durable positions.
pub trait Acks: Send + Sync {
    /// Every record of `shard` up to and including `position` is done for this consumer.
    ///
    /// Positions only move forward; a smaller position than one already acknowledged is
    /// ignored, and so is a position beyond the last record delivered to the consumer.
    fn durable(&self, shard: &ShardId, position: &ExtendedSequenceNumber);

    /// Where this consumer stores intents, when the runtime supports them.
    fn intents(&self) -> Option<&dyn IntentLog> {
        None
    }

    /// Where this consumer writes a checkpoint at once and waits for it (a KCL
    /// MultiLang processor's `checkpoint`, answered only once stored), when the runtime
    /// supports it. Not for consumers that record intents: intents a checkpoint written
    /// here passes are not reported to them.
    fn checkpointer(&self) -> Option<&dyn Checkpointer> {
        None
    }

    /// An owned handle on `shard`'s acknowledgements and checkpoints, for a task of the
    /// consumer's that acknowledges after the call returns; `None` when the shard is not
    /// open for the consumer, or the runtime has no such handles. It speaks for this
    /// opening of the shard only: once the shard closes for the consumer its
    /// acknowledgements no longer count and its checkpoints are refused.
    fn shard(&self, shard: &ShardId) -> Option<Arc<dyn ShardAcks>> {
        let _ = shard;
        None
    }

    /// Called in `on_batch`: the batch being delivered finishes later, when the returned
    /// handle says so, not when `on_batch` returns. Until then it counts as queued for
    /// the consumer (its shard's queue fills, and a consumer that falls behind is
    /// detached from the shard as any slow one is). `None` outside `on_batch`, on a
    /// second call for the same batch, or when the runtime does not support it (then
    /// finish the batch before returning).
    fn defer(&self) -> Option<Box<dyn DeferredBatch>> {
        None
    }
}

/// One shard's acknowledgements, owned (see [`Acks::shard`]).
#[async_trait]
pub trait ShardAcks: Send + Sync {
    /// As [`Acks::durable`] for this shard.
    fn durable(&self, position: &ExtendedSequenceNumber);

    /// As [`Checkpointer::checkpoint`] for this shard: acknowledges, writes and waits.
    async fn checkpoint(&self, position: &ExtendedSequenceNumber) -> Result<(), CheckpointError>;
}

/// A batch that `on_batch` accepted and a task of the consumer's finishes later
/// ([`Acks::defer`]).
///
/// Finish a shard's deferred batches in the order they were delivered. A batch finished
/// `done` while an earlier one of its shard is unfinished or failed counts as failed;
/// one dropped unfinished counts as failed too, unless it was no longer
/// [`wanted`](DeferredBatch::wanted).
pub trait DeferredBatch: Send {
    /// Whether the runtime still wants the batch processed: `false` once it will be
    /// delivered again (an earlier batch of the shard failed, the consumer was detached
    /// from the shard, the shard closed). Such a batch should be dropped unprocessed.
    fn wanted(&self) -> bool;

    /// The batch is processed, as when `on_batch` returns `Ok`.
    fn done(self: Box<Self>);

    /// The batch failed, as when `on_batch` returns this error: nothing of it counts as
    /// delivered, and it is delivered again after the consumer's last finished batch.
    fn failed(self: Box<Self>, error: ConsumerError);
}

/// Writes checkpoints now, as the KCL's checkpointer does.
#[async_trait]
pub trait Checkpointer: Send + Sync {
    /// Acknowledges every record of `shard` up to `position` (as [`Acks::durable`]) and
    /// writes that checkpoint to the lease, conditioned on the worker still holding it;
    /// returns once it is stored. A checkpoint already at or past `position` is not
    /// written again.
    async fn checkpoint(&self, shard: &ShardId, position: &ExtendedSequenceNumber) -> Result<(), CheckpointError>;
}

/// Why a checkpoint was not stored.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CheckpointError {
    /// The lease is no longer held: nothing was stored (the KCL's `ShutdownException`).
    #[error("lease of {0} no longer held")]
    NotHeld(ShardId),
    /// The position is not one delivered to this consumer, or is behind its checkpoint.
    #[error("not a position to checkpoint: {0}")]
    Invalid(String),
    /// The store failed; nothing is known to be stored.
    #[error("checkpoint store error: {0}")]
    Store(String),
}

/// Why intents were not stored.
#[derive(Debug, thiserror::Error)]
pub enum IntentError {
    /// These shards' leases are no longer held (or not valid any more): nothing was
    /// stored for them. Intents of other shards may have been stored.
    #[error("leases no longer held: {0:?}")]
    NotHeld(Vec<ShardId>),
    /// The store failed; nothing is known to be stored. Retry later.
    #[error("intent store error: {0}")]
    Store(String),
}

/// Intents to store in one shard's lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IntentWrite {
    /// The shard.
    pub shard: ShardId,
    /// The new intents.
    pub add: Vec<Intent>,
    /// Targets of this consumer's open intents of the shard that `add` replaces (they
    /// go in the same write).
    pub replacing: Vec<String>,
}

/// Stores [`Intent`]s in the leases of the shards they name, each conditioned on the
/// worker still holding that lease (the same fencing as checkpoints).
#[async_trait]
pub trait IntentLog: Send + Sync {
    /// Stores the intents (any number of shards this worker holds, each shard once).
    /// Returns only when they are durable, or with the shards that are not held.
    async fn record(&self, writes: Vec<IntentWrite>) -> Result<(), IntentError>;
}

/// A consumer failure. There is no retry flag: a failed `on_batch` counts nothing of
/// its batch as delivered, stops the consumer's lane for that shard, and the consumer
/// catches up from its own checkpoint on its own read, so the records are delivered
/// again (the consumer must not keep any part of a batch whose `on_batch` failed). A
/// failed `on_tick` or `on_intents_passed` is logged and counted.
#[derive(Debug, thiserror::Error)]
#[error("consumer error: {message}")]
pub struct ConsumerError {
    /// What went wrong.
    pub message: String,
    /// The cause.
    #[source]
    pub source: Option<Box<dyn std::error::Error + Send + Sync>>,
}

impl ConsumerError {
    /// An error with a message only.
    pub fn msg(message: impl Into<String>) -> Self {
        Self { message: message.into(), source: None }
    }

    /// An error wrapping a cause.
    pub fn with_source(message: impl Into<String>, source: impl std::error::Error + Send + Sync + 'static) -> Self {
        Self { message: message.into(), source: Some(Box::new(source)) }
    }
}

/// A record consumer. See the module documentation for the contract.
#[async_trait]
pub trait Consumer: Send + 'static {
    /// Stable name; keys this consumer's checkpoints in every lease.
    fn name(&self) -> &str;

    /// A shard opens for this consumer (lease taken, or caught up after a detach).
    async fn on_shard_open(&mut self, shard: &ShardContext) -> Result<(), ConsumerError> {
        let _ = shard;
        Ok(())
    }

    /// Records of one shard, in order, all after this consumer's checkpoint and after
    /// every record delivered before. On error nothing of the batch may be kept: it is
    /// delivered again later. Yield about every [`YIELD_EVERY_BYTES`] of records. A
    /// batch [deferred](Acks::defer) finishes when its handle says so.
    async fn on_batch(&mut self, batch: &RecordBatch, acks: &dyn Acks) -> Result<(), ConsumerError>;

    /// Time-driven work such as buffer interval flushes. Called periodically.
    async fn on_tick(&mut self, now: Timestamp, acks: &dyn Acks) -> Result<(), ConsumerError> {
        let _ = (now, acks);
        Ok(())
    }

    /// The shard closes for this consumer; see [`CloseReason`] for the duty per reason.
    /// Batches of the shard it [deferred](Acks::defer) are finished (or, on `LeaseLost`,
    /// dropped) before it returns; a `ShardEnded` close after one of them failed is an
    /// error (the failed records are delivered again before the shard can end).
    async fn on_shard_close(
        &mut self,
        shard: &ShardId,
        reason: CloseReason,
        acks: &dyn Acks,
    ) -> Result<(), ConsumerError>;

    /// A stored checkpoint of this consumer passed these intents of `shard`: they are
    /// gone from the lease and no owner will ever resolve them, so whatever they point
    /// at that exists only for resolution may be deleted. Called after the checkpoint
    /// write, possibly after the shard closed; best effort (a crash between the write
    /// and this call leaves the intents unreported).
    async fn on_intents_passed(&mut self, shard: &ShardId, intents: &[Intent]) -> Result<(), ConsumerError> {
        let _ = (shard, intents);
        Ok(())
    }
}
