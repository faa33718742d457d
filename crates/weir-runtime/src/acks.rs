//! What a consumer host hands its consumer to acknowledge with: [`LaneAcks`] routes
//! acknowledgements, checkpoints and intents to the lane of the shard they name;
//! [`LaneHandle`] is one shard's owned handle ([`Acks::shard`]); [`BatchAcks`] is what
//! `on_batch` sees, adding [`Acks::defer`]; [`BatchEnd`] is how a batch finishes, at
//! once or later through a [`Deferred`] handle.
//!
//! Lane positions while batches are deferred: `handed` is the end of the last batch
//! given to the consumer, `processed` the end of the last one finished in order. A
//! batch finishes only after the one before it (`processed` equals the `handed` it was
//! given after), so a catch-up that resumes after `processed` skips nothing.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use weir_core::{
    Acks, Checkpoint, CheckpointError, Checkpointer, ConsumerError, ConsumerName, DeferredBatch,
    ExtendedSequenceNumber, IntentError, IntentLog, IntentWrite, LeaseChange, RecordBatch, ShardAcks, ShardId,
};

use crate::held_lease::{HeldError, HeldLease};
use crate::lane::LaneShared;
use crate::stats::WorkerStats;

/// A consumer's acknowledgements, routed to the lanes of the shards open for it.
pub(crate) struct LaneAcks {
    pub consumer: ConsumerName,
    pub lanes: HashMap<ShardId, Arc<LaneShared>>,
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
        checkpoint_now(&self.consumer, lane, position).await
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

    fn shard(&self, shard: &ShardId) -> Option<Arc<dyn ShardAcks>> {
        let lane = self.lanes.get(shard)?;
        Some(Arc::new(LaneHandle { consumer: self.consumer.clone(), lane: lane.clone() }))
    }
}

/// Acknowledges `position` and writes it to the lease now, conditioned on the worker
/// still holding it; returns once stored.
async fn checkpoint_now(
    consumer: &ConsumerName,
    lane: &LaneShared,
    position: &ExtendedSequenceNumber,
) -> Result<(), CheckpointError> {
    let shard = &lane.shard;
    if lane.is_closed() {
        return Err(CheckpointError::NotHeld(shard.clone()));
    }
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
    let current = lease.checkpoint_for(consumer);
    if *current == target || !current.can_advance_to(&target) {
        return Ok(());
    }
    let checkpoints = std::collections::BTreeMap::from([(consumer.clone(), target)]);
    match lane.held.checkpoint(checkpoints, None).await {
        Ok(_) => Ok(()),
        Err(HeldError::Lost(_)) => Err(CheckpointError::NotHeld(shard.clone())),
        // The shard worker's own write got there first with this position or later.
        Err(HeldError::Store(weir_core::LeaseError::CheckpointBackwards { .. })) => Ok(()),
        Err(e) => Err(CheckpointError::Store(e.to_string())),
    }
}

/// One shard's owned handle: its lane, for as long as the lane is open.
struct LaneHandle {
    consumer: ConsumerName,
    lane: Arc<LaneShared>,
}

#[async_trait::async_trait]
impl ShardAcks for LaneHandle {
    fn durable(&self, position: &ExtendedSequenceNumber) {
        if self.lane.is_closed() {
            tracing::debug!(shard = %self.lane.shard, %position, "acknowledgement for a closed shard ignored");
            return;
        }
        self.lane.ack(position);
    }

    async fn checkpoint(&self, position: &ExtendedSequenceNumber) -> Result<(), CheckpointError> {
        checkpoint_now(&self.consumer, &self.lane, position).await
    }
}

/// How one batch handed to `on_batch` finishes: what the host does when `on_batch`
/// returns, or, for a deferred batch, when the consumer's task says so.
pub(crate) struct BatchEnd {
    pub lane: Arc<LaneShared>,
    pub consumer: ConsumerName,
    pub stats: WorkerStats,
    /// The lane's epoch when the batch was handed over.
    pub epoch: u64,
    /// `handed` before this batch: the batch before it is finished when `processed`
    /// is there.
    pub after: Option<ExtendedSequenceNumber>,
    pub last: Option<ExtendedSequenceNumber>,
    pub records: u64,
    /// Record data bytes of the batch (the lane's in-flight bytes).
    pub bytes: usize,
}

impl BatchEnd {
    /// Hands `batch` to the consumer: moves the lane's `handed` to its end.
    pub(crate) fn hand_over(
        lane: Arc<LaneShared>,
        consumer: ConsumerName,
        stats: WorkerStats,
        epoch: u64,
        batch: &RecordBatch,
    ) -> Self {
        let last = batch.last_position().cloned();
        let after = std::mem::replace(&mut lane.progress().handed, last.clone());
        Self {
            lane,
            consumer,
            stats,
            epoch,
            after,
            last,
            records: batch.records.len() as u64,
            bytes: batch.data_bytes(),
        }
    }

    /// Whether the batch is still wanted (its epoch current and not failed).
    fn wanted(&self) -> bool {
        self.lane.epoch() == self.epoch && !self.lane.failed() && !self.lane.is_closed()
    }

    pub(crate) fn finish(self, result: Result<(), ConsumerError>) {
        let shard = self.lane.shard.clone();
        let mut p = self.lane.progress();
        let result = match result {
            Ok(()) if p.processed != self.after => {
                Err(ConsumerError::msg("a deferred batch finished before the batch delivered ahead of it"))
            }
            other => other,
        };
        match result {
            Ok(()) => {
                p.processed = self.last.clone();
                drop(p);
                let n = self.records;
                metrics::counter!(crate::metrics::RECORDS_DELIVERED, "consumer" => self.consumer.to_string())
                    .increment(n);
                let last = self.last;
                self.stats.lane(&shard, &self.consumer, |s| {
                    s.records += n;
                    s.last = last.or(s.last.take());
                    s.failing_since = None;
                });
            }
            Err(e) => {
                // Nothing of the batch counts as delivered: it will be read again.
                p.handed = p.processed.clone();
                drop(p);
                // A batch no longer wanted was given up, not failed: it is counted once,
                // when the failure or detach that made it unwanted happened.
                let given_up = !self.wanted();
                self.lane.mark_failed(self.epoch);
                if given_up {
                    tracing::debug!(consumer = %self.consumer, %shard, error = %e, "batch of an older epoch not finished");
                } else {
                    failure(&self.consumer, &shard, &self.stats, &e, "on_batch");
                }
            }
        }
        self.lane.done_one(self.bytes);
    }
}

/// What `on_batch` is given: the consumer's acknowledgements and the batch's end, which
/// the consumer may [defer](Acks::defer).
pub(crate) struct BatchAcks<'a> {
    pub acks: &'a LaneAcks,
    pub end: Arc<Mutex<Option<BatchEnd>>>,
    pub deferred: std::sync::atomic::AtomicBool,
}

impl BatchAcks<'_> {
    /// After `on_batch` returned `result`: finishes the batch unless it was deferred and
    /// `on_batch` succeeded (then the consumer's handle finishes it).
    pub(crate) fn returned(self, result: Result<(), ConsumerError>) {
        let deferred = self.deferred.into_inner();
        if deferred && result.is_ok() {
            return;
        }
        let end = self.end.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(end) = end {
            end.finish(result);
        }
    }
}

impl Acks for BatchAcks<'_> {
    fn durable(&self, shard: &ShardId, position: &ExtendedSequenceNumber) {
        self.acks.durable(shard, position);
    }

    fn intents(&self) -> Option<&dyn IntentLog> {
        self.acks.intents()
    }

    fn checkpointer(&self) -> Option<&dyn Checkpointer> {
        self.acks.checkpointer()
    }

    fn shard(&self, shard: &ShardId) -> Option<Arc<dyn ShardAcks>> {
        self.acks.shard(shard)
    }

    fn defer(&self) -> Option<Box<dyn DeferredBatch>> {
        if self.deferred.swap(true, std::sync::atomic::Ordering::SeqCst) {
            return None;
        }
        Some(Box::new(Deferred { end: self.end.clone() }))
    }
}

/// The consumer's handle on a deferred batch; dropped unfinished, the batch failed.
struct Deferred {
    end: Arc<Mutex<Option<BatchEnd>>>,
}

impl Deferred {
    fn take(&self) -> Option<BatchEnd> {
        self.end.lock().unwrap_or_else(|p| p.into_inner()).take()
    }
}

impl DeferredBatch for Deferred {
    fn wanted(&self) -> bool {
        self.end.lock().unwrap_or_else(|p| p.into_inner()).as_ref().is_some_and(BatchEnd::wanted)
    }

    fn done(self: Box<Self>) {
        if let Some(end) = self.take() {
            end.finish(Ok(()));
        }
    }

    fn failed(self: Box<Self>, error: ConsumerError) {
        if let Some(end) = self.take() {
            end.finish(Err(error));
        }
    }
}

impl Drop for Deferred {
    fn drop(&mut self) {
        if let Some(end) = self.take() {
            end.finish(Err(ConsumerError::msg("deferred batch dropped unfinished")));
        }
    }
}

/// Counts and logs a failed consumer call.
pub(crate) fn failure(name: &ConsumerName, shard: &ShardId, stats: &WorkerStats, e: &ConsumerError, call: &str) {
    metrics::counter!(crate::metrics::CONSUMER_FAILURES, "consumer" => name.to_string()).increment(1);
    let text: String = e.to_string().chars().take(500).collect();
    stats.lane(shard, name, |s| {
        s.failures += 1;
        s.last_error = Some(format!("{call}: {text}"));
        s.failing_since = s.failing_since.or_else(|| Some(tokio::time::Instant::now()));
    });
    tracing::warn!(consumer = %name, %shard, call, error = %e, "consumer call failed");
}
