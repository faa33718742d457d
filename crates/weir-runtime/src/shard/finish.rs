//! The end of a shard worker: checkpoints, closing consumers, letting the lease go.

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::sync::oneshot;
use weir_core::{Checkpoint, CloseReason};

use super::lanes::LaneMode;
use super::{ShardOutcome, ShardWorker};
use crate::held_lease::HeldError;
use crate::host::HostCtl;
use crate::lane::LaneMsg;

impl ShardWorker {
    /// Writes every acknowledged position that moved, and with `end` the shard end for
    /// every consumer. Never writes past an acknowledgement.
    pub(super) async fn write_checkpoints(&self, end: Option<Vec<weir_core::ShardId>>) -> Result<(), HeldError> {
        let lease = self.held.snapshot().await;
        let mut changes = BTreeMap::new();
        if end.is_some() {
            for host in &self.deps.hosts {
                changes.insert(host.name.clone(), Checkpoint::ShardEnd);
            }
        } else {
            for lane in &self.lanes {
                let Some(acked) = lane.shared.progress().acked.clone() else {
                    continue;
                };
                let cp = Checkpoint::At(acked);
                let current = lease.checkpoint_for(&lane.host.name);
                if *current != cp && current.can_advance_to(&cp) {
                    changes.insert(lane.host.name.clone(), cp);
                }
            }
        }
        if changes.is_empty() {
            return Ok(());
        }
        match self.held.checkpoint(changes, end).await {
            Ok(passed) => {
                for (consumer, intents) in passed {
                    if let Some(lane) = self.lanes.iter().find(|l| l.host.name == consumer) {
                        let shard = self.held.key().clone();
                        let _ = lane.host.ctl.send(HostCtl::IntentsPassed { shard, intents });
                    }
                }
                Ok(())
            }
            Err(e) => {
                tracing::warn!(shard = %self.held.key(), error = %e, "checkpoint write failed");
                Err(e)
            }
        }
    }

    pub(super) async fn finish(&mut self, reason: CloseReason) -> ShardOutcome {
        self.set_state(super::ShardState::Draining(reason));
        for lane in &mut self.lanes {
            if let LaneMode::CatchingUp(h) = &lane.mode {
                h.abort();
            }
        }
        let outcome = match reason {
            CloseReason::LeaseLost => {
                self.abandon().await;
                ShardOutcome::Lost
            }
            CloseReason::ShardEnded => self.finish_ended().await,
            CloseReason::Handoff | CloseReason::Shutdown => self.finish_graceful(reason).await,
        };
        if outcome != ShardOutcome::Lost {
            for lane in &self.lanes {
                let _ = lane.host.ctl.send(HostCtl::Remove { shard: self.held.key().clone() });
            }
        }
        outcome
    }

    /// Lease lost: consumers drop the shard's state; nothing is written.
    async fn abandon(&mut self) {
        let limit = self.deps.config.handoff_timeout;
        for lane in &self.lanes {
            let (done, rx) = oneshot::channel();
            let shard = self.held.key().clone();
            if lane.host.ctl.send(HostCtl::Abandon { shard, done }).is_ok()
                && tokio::time::timeout(limit, rx).await.is_err()
            {
                tracing::warn!(shard = %self.held.key(), consumer = %lane.host.name, "consumer did not confirm abandoning the shard in time");
            }
        }
    }

    async fn finish_ended(&mut self) -> ShardOutcome {
        let named = self.live_end.clone().unwrap_or_default();
        let children: Vec<_> = named.iter().map(|c| c.shard_id.clone()).collect();
        let mut retry = self.deps.config.backoff();
        loop {
            match self.write_checkpoints(Some(children.clone())).await {
                Ok(()) => break,
                Err(HeldError::Lost(_)) => return ShardOutcome::Lost,
                Err(HeldError::Store(_)) => tokio::time::sleep(retry.next_delay()).await,
            }
        }
        metrics::counter!(crate::metrics::SHARDS_ENDED).increment(1);
        tracing::info!(shard = %self.held.key(), ?children, "shard finished by every consumer");
        // The end's write let the lease go. The worker outlives its shard workers; a
        // send fails only while it stops.
        let _ = self.deps.shard_ended.send((self.held.key().clone(), named));
        ShardOutcome::Ended
    }

    /// Handoff or shutdown: consumers flush within the deadline, acknowledged positions
    /// are checkpointed, then the lease is handed over or released.
    async fn finish_graceful(&mut self, reason: CloseReason) -> ShardOutcome {
        let limit = match reason {
            CloseReason::Handoff => self.deps.config.handoff_timeout,
            _ => self.deps.config.shutdown_timeout,
        };
        let deadline = tokio::time::Instant::now() + limit;
        let mut waits = Vec::new();
        for lane in &self.lanes {
            if matches!(lane.mode, LaneMode::Closed) {
                continue;
            }
            let (done, rx) = oneshot::channel();
            if lane.tx.send(LaneMsg::Close { epoch: lane.shared.epoch(), reason, done }).is_ok() {
                waits.push((lane.host.name.clone(), rx));
            }
        }
        for (name, rx) in waits {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            if tokio::time::timeout(left.max(Duration::from_millis(1)), rx).await.is_err() {
                tracing::warn!(shard = %self.held.key(), consumer = %name, ?reason, "consumer did not flush before the deadline; its unacknowledged records will be read again");
            }
        }
        if let Err(e) = self.write_checkpoints(None).await {
            tracing::warn!(shard = %self.held.key(), error = %e, "final checkpoint failed");
            if !self.held.is_valid() {
                return ShardOutcome::Lost;
            }
        }
        // A handoff to RELEASE_REQUEST is an operator's release: the lease goes free.
        let to = match reason {
            CloseReason::Handoff => {
                self.held.snapshot().await.handoff_to.filter(|w| w.as_str() != weir_core::lease::RELEASE_REQUEST)
            }
            _ => None,
        };
        let handed = to.is_some();
        match self.held.let_go(to).await {
            Ok(()) if handed => ShardOutcome::HandedOff,
            Ok(()) => ShardOutcome::Released,
            Err(e) => {
                tracing::warn!(shard = %self.held.key(), error = %e, "could not let go of the lease; it will expire");
                ShardOutcome::Lost
            }
        }
    }
}
