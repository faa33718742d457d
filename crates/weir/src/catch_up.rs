//! `weir run --until-caught-up`: read to the present, then drain and exit.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use tokio_util::sync::CancellationToken;
use weir_core::ports::{LeaseTable, StreamCatalog};

/// `weir run --until-caught-up`: what the worker must have done before it stops.
pub struct CatchUp {
    pub table: Arc<dyn LeaseTable>,
    pub catalog: Arc<dyn StreamCatalog>,
    pub me: weir_core::WorkerId,
    pub consumers: Vec<weir_core::ConsumerName>,
    pub started: tokio::time::Instant,
    pub started_at: weir_core::Timestamp,
}

impl CatchUp {
    /// Cancels `stop` (the worker then drains and checkpoints) once every shard is
    /// caught up; returns the records processed, or `None` if the worker stopped first.
    ///
    /// A shard is caught up when its lease has ended, or when this worker holds it and
    /// (a) read a record that arrived after the start, or a read came back empty at the
    /// tip after the start, and (b) every consumer processed up to the last record the
    /// live read delivered. Every shard the stream lists must have a
    /// lease, so children created by a split are not missed.
    pub async fn stop_when_done(self, stats: weir_runtime::WorkerStats, stop: CancellationToken) -> Option<u64> {
        let mut tick = tokio::time::interval(Duration::from_millis(500));
        loop {
            tokio::select! {
                _ = stop.cancelled() => return None,
                _ = tick.tick() => {}
            }
            match self.done(&stats).await {
                Ok(true) => {
                    tracing::info!("caught up: every shard read to the time the command started; draining");
                    stop.cancel();
                    // What the busiest consumer processed (a record at a checkpoint is
                    // read again, not processed again).
                    let mut per_consumer: std::collections::BTreeMap<_, u64> = Default::default();
                    for ((_, consumer), lane) in stats.lanes() {
                        *per_consumer.entry(consumer).or_default() += lane.records;
                    }
                    return Some(per_consumer.into_values().max().unwrap_or(0));
                }
                Ok(false) => {}
                Err(e) => tracing::warn!(error = %e, "until-caught-up: cannot read leases or shards"),
            }
        }
    }

    async fn done(&self, stats: &weir_runtime::WorkerStats) -> Result<bool> {
        let leases = self.table.list().await?;
        let shards = self.catalog.list_shards().await?;
        if let Some(s) = shards.iter().find(|s| !leases.iter().any(|l| l.key == s.id)) {
            tracing::debug!(shard = %s.id, "until-caught-up: a shard without a lease yet");
            return Ok(false);
        }
        let (reads, lanes) = (stats.reads(), stats.lanes());
        // Leases of streams this fleet does not read are not waited for.
        Ok(leases.iter().filter(|l| self.catalog.covers(&l.key)).all(|l| {
            if l.ended {
                return true;
            }
            if l.owner.as_ref() != Some(&self.me) {
                return false;
            }
            let Some(read) = reads.get(&l.key) else { return false };
            let at_start = read.at_tip.is_some_and(|t| t >= self.started)
                || read.last_arrival.is_some_and(|a| a >= self.started_at);
            // Positions, not counts: the record at a checkpoint is read again but not
            // handed to the consumer, whose checkpoint already covers it.
            let processed = self.consumers.iter().all(|c| {
                let Some(read_to) = &read.last_position else { return true };
                let handled = lanes.get(&(l.key.clone(), c.clone())).and_then(|lane| lane.last.as_ref());
                let checkpointed = match l.checkpoint_for(c) {
                    weir_core::Checkpoint::At(p) => Some(p),
                    _ => None,
                };
                handled.max(checkpointed).is_some_and(|done| done >= read_to)
            });
            at_start && processed
        }))
    }
}
