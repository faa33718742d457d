//! Taking over a shard (exactly-once mode): an earlier owner's open intents resolved
//! before the shard's first batch (see [`crate::delivery::resolve`]), in a task started
//! when the shard opens, so that the shards a worker takes over resolve in parallel;
//! leftover manifests swept once this owner is known to hold the lease.

use tokio_util::task::AbortOnDropHandle;
use weir_core::{Acks, ConsumerError, Intent, IntentWrite, ShardId};

use super::Archiver;
use crate::delivery::claim::KeyState;
use crate::delivery::expand;
use crate::delivery::manifest;
use crate::delivery::resolve::{Resolution, Resolved, resolve_shard};
use crate::metrics as m;

impl Archiver {
    /// Starts resolving an earlier owner's intents of `shard` in the background.
    pub(super) fn start_resolving(&self, shard: &ShardId, open: Vec<Intent>) -> AbortOnDropHandle<Resolution> {
        let sink = self.delivery.sink().clone();
        let claims = self.delivery.claims().clone();
        let written = self.delivery.written_keys();
        let manifests = manifest::prefix(self.delivery.consumer(), shard);
        let shard = shard.clone();
        AbortOnDropHandle::new(tokio::spawn(async move {
            resolve_shard(sink, &shard, open, &claims, &written, &manifests).await
        }))
    }

    /// Waits until an earlier owner's intents for `shard` are resolved, if any are
    /// open (resolving them now if an earlier attempt failed).
    pub(super) async fn ensure_resolved(&mut self, shard: &ShardId, acks: &dyn Acks) -> Result<(), ConsumerError> {
        let Some(state) = self.shards.get_mut(shard) else { return Ok(()) };
        let outcome = match state.resolving.take() {
            Some(running) => running.await.unwrap_or_else(|e| {
                Err(ConsumerError::msg(format!("resolving the open intents of {shard} stopped: {e}")))
            }),
            None => {
                let Some(open) = state.unresolved.clone() else { return Ok(()) };
                let (sink, claims) = (self.delivery.sink().clone(), self.delivery.claims().clone());
                let manifests = manifest::prefix(self.delivery.consumer(), shard);
                resolve_shard(sink, shard, open, &claims, &self.delivery.written_keys(), &manifests).await
            }
        };
        let Resolved { skip, states, intents, leftovers } = outcome?;
        let claimed = states.values().filter(|s| **s == KeyState::Claimed).count();
        metrics::counter!(m::CLAIMS_MADE).increment(claimed as u64);
        if intents > 0 {
            tracing::info!(%shard, intents, objects = states.len(), claimed, skip_ranges = skip.len(), "resolved an earlier owner's open intents");
        }
        self.sweep_leftovers(shard, leftovers, acks).await;
        if let Some(state) = self.shards.get_mut(shard) {
            state.intake.skip = skip;
            state.unresolved = None;
        }
        Ok(())
    }

    /// Deletes the leftover manifests resolving listed, once a conditional lease write
    /// (an empty intent write) made after the listing has landed: only then is it known
    /// that this owner still held the lease when it listed, so that no manifest in the
    /// listing was written and named by a later holder. A worker paused while resolving
    /// (a zombie) lists the new holder's manifests; its write fails, and it deletes none.
    async fn sweep_leftovers(&self, shard: &ShardId, leftovers: Vec<String>, acks: &dyn Acks) {
        if leftovers.is_empty() {
            return;
        }
        let Some(log) = acks.intents() else { return };
        let fence = IntentWrite { shard: shard.clone(), add: Vec::new(), replacing: Vec::new() };
        match log.record(vec![fence]).await {
            Ok(()) => expand::delete_manifests(self.delivery.sink().as_ref(), shard, leftovers).await,
            Err(e) => {
                tracing::info!(%shard, manifests = leftovers.len(), error = %e, "leftover intent manifests stay: the lease may have gone before they were listed");
            }
        }
    }
}
