use std::time::Duration;

use weir_core::{Checkpoint, WorkerId};

/// Default of [`RuntimeConfig::queue_bytes`]: 8 MiB, as KCL's prefetch.
pub const DEFAULT_QUEUE_BYTES: usize = 8 * 1024 * 1024;

/// Tuning of the runtime. Defaults follow KCL where KCL has a default.
#[derive(Debug, Clone)]
pub struct RuntimeConfig {
    /// This worker's id; unique per process.
    pub worker_id: WorkerId,
    /// A lease whose counter has not changed for this long is expired (KCL: 10 s).
    pub failover: Duration,
    /// How often held leases are renewed (KCL: failover / 3).
    pub renew_interval: Duration,
    /// How often the worker looks for leases to take or steal (reading the worker
    /// records; every lease only when they call for it).
    pub taker_interval: Duration,
    /// How often the shard list is read to create leases for new shards.
    pub shard_sync_interval: Duration,
    /// How long a graceful handoff may take before the stealer forces it.
    pub handoff_timeout: Duration,
    /// How long consumers get to flush at shutdown.
    pub shutdown_timeout: Duration,
    /// Batches a consumer may have queued per shard before it counts as backed up.
    pub queue_capacity: usize,
    /// Record data bytes a consumer may have queued per shard before it counts as
    /// backed up (KCL's prefetch holds at most 8 MiB per shard, `maxByteSize`). With
    /// `queue_capacity` it bounds what a slow consumer makes the worker hold: about
    /// twice this per shard, plus one batch.
    pub queue_bytes: usize,
    /// A consumer backed up this long is detached for the shard and catches up later.
    pub detach_after: Duration,
    /// How often acknowledged positions are written as checkpoints.
    pub checkpoint_interval: Duration,
    /// How often consumers get `on_tick`.
    pub tick_interval: Duration,
    /// How often a shard waiting on its parents checks them.
    pub parent_poll_interval: Duration,
    /// Where consumers start on shards with no checkpoint (root shards only; children
    /// always start at their beginning).
    pub initial_position: Checkpoint,
    /// First delay after a read or consumer failure.
    pub retry_initial: Duration,
    /// Longest delay between retries.
    pub retry_max: Duration,
    /// A shard whose read ends with no child shards to follow (a replay's window end,
    /// an archived object's end) is closed for its consumers only once every other shard
    /// of this worker has been read to its end and its records handed to them, or once
    /// they acknowledged all of it on their own (an interval flush). Consumers that buffer across shards, as the
    /// archiver does, then write one object where each shard's close would have sealed
    /// one each. For replays, whose shards end together; off by default (a live shard
    /// ends with children, which wait for its close).
    pub close_ends_together: bool,
}

/// A runtime setting that does not make sense.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("runtime setting {field}: {reason}")]
pub struct ConfigError {
    /// The setting.
    pub field: &'static str,
    /// What is wrong.
    pub reason: String,
}

impl RuntimeConfig {
    /// Defaults for a worker id.
    pub fn new(worker_id: WorkerId) -> Self {
        let failover = Duration::from_secs(10);
        Self {
            worker_id,
            failover,
            renew_interval: failover / 3,
            taker_interval: failover / 3,
            shard_sync_interval: Duration::from_secs(60),
            handoff_timeout: failover,
            shutdown_timeout: Duration::from_secs(30),
            queue_capacity: 16,
            queue_bytes: DEFAULT_QUEUE_BYTES,
            detach_after: Duration::from_secs(5),
            checkpoint_interval: Duration::from_secs(1),
            tick_interval: Duration::from_secs(1),
            parent_poll_interval: Duration::from_secs(1),
            initial_position: Checkpoint::TrimHorizon,
            retry_initial: Duration::from_millis(100),
            retry_max: Duration::from_secs(10),
            close_ends_together: false,
        }
    }

    /// Checks the relations between settings.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let err = |field, reason: &str| Err(ConfigError { field, reason: reason.to_owned() });
        if self.failover < Duration::from_millis(100) {
            return err("failover", "must be at least 100ms");
        }
        if self.renew_interval.is_zero() || self.renew_interval * 2 > self.failover {
            return err("renew_interval", "must be positive and at most half of failover");
        }
        if self.taker_interval.is_zero() {
            return err("taker_interval", "must be positive");
        }
        if self.queue_capacity == 0 {
            return err("queue_capacity", "must be at least 1");
        }
        if self.queue_bytes == 0 {
            return err("queue_bytes", "must be at least 1");
        }
        for (field, d) in [
            ("checkpoint_interval", self.checkpoint_interval),
            ("tick_interval", self.tick_interval),
            ("shard_sync_interval", self.shard_sync_interval),
            ("parent_poll_interval", self.parent_poll_interval),
            ("retry_initial", self.retry_initial),
        ] {
            if d.is_zero() {
                return err(field, "must be positive");
            }
        }
        if self.retry_max < self.retry_initial {
            return err("retry_max", "must not be below retry_initial");
        }
        Ok(())
    }

    pub(crate) fn backoff(&self) -> crate::Backoff {
        crate::Backoff::new(self.retry_initial, self.retry_max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_bad_values_name_the_field() {
        let c = RuntimeConfig::new(WorkerId::new("w"));
        c.validate().unwrap();
        let mut bad = c.clone();
        bad.renew_interval = Duration::from_secs(9);
        assert_eq!(bad.validate().unwrap_err().field, "renew_interval");
        let mut bad = c;
        bad.queue_capacity = 0;
        assert_eq!(bad.validate().unwrap_err().field, "queue_capacity");
    }
}
