//! The archiver consumer: stream records → lines and routes ([`Router`]: the fast path,
//! or the reference pipeline) → the intake ([`crate::intake`]: Parquet check, skip list,
//! partition cap) → buffers → objects. A record is acknowledged once every object
//! holding a part of it is durable. See the crate documentation for the guarantees.
//!
//! This file is the consumer's lifecycle; `build.rs` builds an archiver from its
//! options and `takeover.rs` resolves an earlier owner's intents.

mod build;
mod takeover;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use std::panic::AssertUnwindSafe;

use futures::{FutureExt, StreamExt};
use tokio_util::task::AbortOnDropHandle;
use weir_core::{
    Acks, Clock, CloseReason, Consumer, ConsumerError, Intent, RecordBatch, ShardContext, ShardId, Timestamp,
};

use crate::delivery::buffers::Buffers;
use crate::delivery::claim::RESOLVE_CONCURRENCY;
use crate::delivery::deliver::{BacklogRetry, Delivery, DeliveryError, DeliveryMode};
use crate::delivery::ledger::Ledger;
use crate::delivery::resolve::Resolution;
use crate::delivery::sealed::Sealed;
use crate::intake::{BatchIntake, Before, Conversion, ShardIntake, name_exceptions};
use crate::metrics as m;
use crate::pipeline::batch::Router;

/// Per-shard state.
#[derive(Default)]
struct ShardState {
    /// Exactly-once: an earlier owner's intents not resolved yet.
    unresolved: Option<Vec<Intent>>,
    /// Their resolution, started when the shard opened so that the shards a worker
    /// takes over resolve in parallel; awaited before the shard's first batch, aborted
    /// if the shard closes first.
    resolving: Option<AbortOnDropHandle<Resolution>>,
    /// A batch that ends the shard was buffered: no record of it comes any more.
    read_to_end: bool,
    /// Parts of the shard handled so far (the next part's ordinal, see
    /// [`crate::delivery::buffers::Origin`]).
    parts: u64,
    /// The skip list and the parts sent elsewhere.
    intake: ShardIntake,
}

/// The archiver consumer.
pub struct Archiver {
    name: String,
    pub(crate) router: Router,
    buffers: Buffers,
    ledger: Ledger,
    pub(crate) delivery: Delivery,
    shards: HashMap<ShardId, ShardState>,
    pub(crate) clock: Arc<dyn Clock>,
    max_backlog_bytes: u64,
    /// When the buffer gauges were last set.
    gauges_at: Option<Timestamp>,
    /// `IntervalInSeconds = 0`: every batch's buffers are sealed when it is processed.
    zero_interval: bool,
    /// The format conversion's table, with a `DataFormatConversionConfiguration`.
    conversion: Option<Conversion>,
    /// Why this archiver stopped: its buffers lost records from memory (a seal that
    /// failed half way, a batch that could not be taken back). Nothing it holds is
    /// acknowledged, so the stream still has every record: it refuses everything, and
    /// a restarted worker (or the shards' next owners) archive them.
    poisoned: Option<String>,
}

impl Archiver {
    /// Refuses the call if the archiver stopped (see `poisoned`); stops it if its
    /// buffers broke.
    fn check_health(&mut self) -> Result<(), ConsumerError> {
        if self.poisoned.is_none()
            && let Some(why) = self.buffers.broken()
        {
            self.poison(why.to_owned());
        }
        match &self.poisoned {
            None => Ok(()),
            Some(why) => Err(ConsumerError::msg(format!(
                "archiver {} stopped after an internal error ({why}); restart the worker: nothing it held was acknowledged, so the stream still has those records",
                self.name
            ))),
        }
    }

    fn poison(&mut self, why: String) {
        metrics::counter!(m::INTERNAL_FAILURES).increment(1);
        tracing::error!(consumer = %self.name, why, "the archiver stops: restart the worker");
        self.poisoned = Some(why);
    }

    /// A batch failed half way: its records are taken out of the buffers again (what
    /// earlier batches put there stays, and buffers sealed meanwhile are delivered),
    /// the skip list is as before, and the batch can come again.
    async fn batch_failed(
        &mut self,
        shard: &ShardId,
        before: Before,
        mut sealed: Vec<Sealed>,
        acks: &dyn Acks,
        why: ConsumerError,
    ) -> Result<(), ConsumerError> {
        if let Err(e) = self.buffers.rollback_batch(&mut sealed) {
            self.poison(format!("a failed batch could not be taken back: {e} (after: {why})"));
            return self.check_health();
        }
        if let Some(state) = self.shards.get_mut(shard) {
            state.intake.take_back(before);
        }
        if let Err(e) = self.deliver(sealed, acks, BacklogRetry::WhenDue).await {
            tracing::warn!(consumer = %self.name, error = %e, "objects wait for the store");
        }
        Err(why)
    }

    /// Compressed bytes held in open buffers.
    pub fn buffered_bytes(&self) -> usize {
        self.buffers.held_bytes()
    }

    /// Compressed bytes in open buffers (without staged records).
    pub fn compressed_bytes(&self) -> usize {
        self.buffers.compressed_bytes()
    }

    /// A handle on the objects waiting for the store (for health endpoints).
    pub fn backlog(&self) -> crate::delivery::deliver::Backlog {
        self.delivery.backlog()
    }

    /// Objects waiting for the store.
    pub fn backlog_objects(&self) -> usize {
        self.delivery.backlog_objects()
    }

    /// Drops everything of `shard` this archiver holds (open buffers, waiting objects,
    /// ledger, resolution state): its lease is gone or being let go unflushed, and the
    /// next owner archives its unacknowledged records.
    fn forget_shard(&mut self, shard: &ShardId) -> Result<(), ConsumerError> {
        self.buffers.forget_shard(shard).map_err(|e| ConsumerError::with_source("cannot rebuild buffers", e))?;
        let deflater = self.buffers.deflater();
        self.delivery.forget_shard(shard, deflater).map_err(|e| ConsumerError::with_source("backlog", e))?;
        self.ledger.forget(shard);
        self.shards.remove(shard);
        Ok(())
    }

    async fn deliver(
        &mut self,
        mut sealed: Vec<Sealed>,
        acks: &dyn Acks,
        backlog: BacklogRetry,
    ) -> Result<(), DeliveryError> {
        let now = self.clock.now();
        let any_sealed = !sealed.is_empty();
        name_exceptions(&mut sealed, |shard| self.shards.get(shard).map(|s| &s.intake));
        let (buffers, ledger, delivery) = (&mut self.buffers, &mut self.ledger, &mut self.delivery);
        let r = delivery.deliver(sealed, now, ledger, acks, buffers.deflater(), backlog).await;
        // Parts sent elsewhere and acknowledged are behind every object still to come.
        // (Only shards that have some: a backfill holds thousands of shards, and this
        // runs after every batch.)
        for (shard, state) in self.shards.iter_mut().filter(|(_, s)| s.intake.sends_elsewhere()) {
            if let Some(acked) = self.ledger.acked(shard) {
                state.intake.acknowledged(acked);
            }
        }
        // At most once a second (and after a shard closes): the gauges walk every open
        // buffer, and with many partitions seals come often.
        let stale = self.gauges_at.is_none_or(|at| now.saturating_since(at) >= Duration::from_secs(1));
        if any_sealed && stale {
            self.set_buffer_gauges(now);
        }
        r
    }

    /// The gauges of open buffers (at ticks and seals, not per batch: they sum every
    /// buffer), and the data freshness: how long the oldest record not yet durable
    /// (buffered, or sealed and waiting for the store) has been in the stream.
    fn set_buffer_gauges(&mut self, now: Timestamp) {
        self.gauges_at = Some(now);
        metrics::gauge!(m::BUFFERED_BYTES, m::ARCHIVER => self.name.clone()).set(self.buffers.held_bytes() as f64);
        metrics::gauge!(m::ACTIVE_PARTITIONS, m::ARCHIVER => self.name.clone()).set(self.buffers.active() as f64);
        let oldest = self.buffers.oldest_arrival().into_iter().chain(self.delivery.oldest_arrival()).min();
        let age_ms = oldest.map_or(0, |t| (now.as_millis() - t.as_millis()).max(0));
        metrics::gauge!(m::DATA_FRESHNESS, m::ARCHIVER => self.name.clone()).set(age_ms as f64 / 1000.0);
    }
}

#[async_trait]
impl Consumer for Archiver {
    fn name(&self) -> &str {
        &self.name
    }

    async fn on_shard_open(&mut self, shard: &ShardContext) -> Result<(), ConsumerError> {
        let id = &shard.shard_id;
        if self.shards.contains_key(id) || self.ledger.has_pending(id) || !self.buffers.holding(id).is_empty() {
            // The runtime closes a shard before it opens it again; should a close ever
            // go missing, what is held of the last tenure goes as for a lost lease: kept,
            // its records would be buffered twice and its ledger would acknowledge this
            // tenure's records before they are durable.
            metrics::counter!(m::INTERNAL_FAILURES).increment(1);
            tracing::error!(consumer = %self.name, shard = %shard.shard_id, "a shard opened again without being closed; dropping what was held of it (read again from the checkpoint)");
            self.forget_shard(&shard.shard_id)?;
        }
        let mut state = ShardState::default();
        if self.delivery.mode() == DeliveryMode::ExactlyOnce {
            self.delivery.shard_opened(&shard.shard_id, &shard.intents);
            // Even with no open intent: leftover manifests are swept before this owner
            // writes any of its own.
            state.unresolved = Some(shard.intents.clone());
            state.resolving = Some(self.start_resolving(&shard.shard_id, shard.intents.clone()));
        }
        self.shards.insert(shard.shard_id.clone(), state);
        Ok(())
    }

    async fn on_batch(&mut self, batch: &RecordBatch, acks: &dyn Acks) -> Result<(), ConsumerError> {
        let shard = &batch.shard_id;
        if self.delivery.backlog_bytes() > self.max_backlog_bytes {
            return Err(ConsumerError::msg(format!(
                "{} bytes wait for the object store; refusing records until they are written (the stream keeps them)",
                self.delivery.backlog_bytes()
            )));
        }
        if let Some(reason) = self.buffers.spill_failure() {
            return Err(ConsumerError::msg(format!(
                "spill_directory cannot be written ({reason}); refusing records until it can (the stream keeps them)"
            )));
        }
        self.check_health()?;
        self.shards.entry(shard.clone()).or_default().read_to_end |= batch.is_shard_end();
        self.ensure_resolved(shard, acks).await?;
        let now = self.clock.now();
        let mut sealed = Vec::new();
        // All of the batch is buffered, or none of it (see `Buffers::begin_batch`).
        let state = self.shards.entry(shard.clone()).or_default();
        let before = state.intake.before_batch();
        self.buffers.begin_batch();
        let mut intake = BatchIntake {
            name: &self.name,
            shard,
            now,
            buffers: &mut self.buffers,
            state: &mut state.intake,
            conversion: self.conversion.as_mut(),
            sealed: &mut sealed,
        };
        let routed =
            AssertUnwindSafe(self.router.route_batch(batch, state.parts, now, &mut intake)).catch_unwind().await;
        let placed = match routed {
            Ok(Ok((placed, parts))) => {
                state.parts += parts;
                placed
            }
            Ok(Err(e)) => return self.batch_failed(shard, before, sealed, acks, e).await,
            Err(panic) => {
                let why =
                    ConsumerError::msg(format!("the archiver panicked buffering a batch: {}", panic_text(&panic)));
                return self.batch_failed(shard, before, sealed, acks, why).await;
            }
        };
        self.buffers.commit_batch();
        state.intake.batch_taken();
        if self.zero_interval {
            // Zero buffering: no buffer outlives the batch that filled it (one object per
            // partition the batch touched).
            sealed.extend(self.buffers.due(now).map_err(|e| ConsumerError::with_source("cannot seal buffers", e))?);
        }
        // Before delivery, which settles generations. (A batch that fails above leaves
        // the ledger as it was: its records are then not acknowledged.)
        self.ledger.batch(shard, batch.records.iter().map(|r| &r.position), &placed);
        // Delivery failures leave objects in the backlog; the records stay
        // unacknowledged and the batch itself was taken in full.
        if let Err(e) = self.deliver(sealed, acks, BacklogRetry::WhenDue).await {
            tracing::warn!(consumer = %self.name, error = %e, "objects wait for the store");
        }
        Ok(())
    }

    async fn on_tick(&mut self, now: Timestamp, acks: &dyn Acks) -> Result<(), ConsumerError> {
        self.check_health()?;
        let due = self.buffers.due(now).map_err(|e| ConsumerError::with_source("cannot seal buffers", e))?;
        if due.is_empty() && !self.delivery.retry_due(now) {
            self.set_buffer_gauges(now);
            return Ok(());
        }
        self.deliver(due, acks, BacklogRetry::WhenDue)
            .await
            .map_err(|e| ConsumerError::with_source("archive delivery", e))
    }

    async fn on_shard_close(
        &mut self,
        shard: &ShardId,
        reason: CloseReason,
        acks: &dyn Acks,
    ) -> Result<(), ConsumerError> {
        if !reason.should_flush() {
            // Lease lost: the next owner archives this shard's unacknowledged records.
            return self.forget_shard(shard);
        }
        self.check_health()?;
        // When every other shard open here has been read to its end too (a replay's
        // last shards, closed together), every buffer goes now, in one round, rather
        // than a round for each shard's close.
        let keys = if reason == CloseReason::ShardEnded
            && self.shards.iter().all(|(id, state)| id == shard || state.read_to_end)
        {
            self.buffers.keys()
        } else {
            self.buffers.holding(shard)
        };
        // In chunks: with many partitions, sealing every buffer at once would hold all
        // their objects (and their delivery state) in memory together.
        let mut delivered = Ok(());
        for keys in keys.chunks(CLOSE_CHUNK) {
            let sealed =
                self.buffers.seal_keys(keys).map_err(|e| ConsumerError::with_source("cannot seal buffers", e))?;
            delivered = self.deliver(sealed, acks, BacklogRetry::Now).await;
            if delivered.is_err() {
                break;
            }
        }
        self.set_buffer_gauges(self.clock.now());
        if self.ledger.has_pending(shard) {
            let err = match delivered {
                Err(e) => ConsumerError::with_source(format!("records of {shard} are not durable yet"), e),
                Ok(()) => ConsumerError::msg(format!("records of {shard} are not durable yet")),
            };
            // A handoff or shutdown goes on without us: the lease is checkpointed at what
            // was acknowledged and let go, and its next owner reads the rest again. What
            // is left of the shard here must go as for a lost lease: kept, it would be
            // written later (twice, if the shard comes back to this worker and is read
            // again) and its stale ledger would acknowledge the next tenure's records
            // before they are durable. (A shard end is retried by the runtime instead.)
            if reason != CloseReason::ShardEnded {
                self.forget_shard(shard)?;
            }
            return Err(err);
        }
        if let Some(pos) = self.ledger.advance(shard) {
            acks.durable(shard, &pos);
        }
        self.ledger.forget(shard);
        self.shards.remove(shard);
        Ok(())
    }

    async fn on_intents_passed(&mut self, shard: &ShardId, intents: &[Intent]) -> Result<(), ConsumerError> {
        let doomed = self.delivery.intents_passed(shard, intents);
        let delivery = &self.delivery;
        futures::stream::iter(doomed)
            .for_each_concurrent(RESOLVE_CONCURRENCY, |doomed| async move {
                delivery.delete_manifest(doomed).await;
            })
            .await;
        Ok(())
    }
}

/// Buffers sealed and delivered together when a shard closes.
const CLOSE_CHUNK: usize = 2048;

/// What a caught panic said.
fn panic_text(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".into())
}
