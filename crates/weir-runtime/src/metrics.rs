//! Every metric weir-runtime emits, named in one place.

/// Records read from a shard (label `shard`).
pub const RECORDS_READ: &str = "weir_records_read_total";
/// Records delivered to a consumer (label `consumer`).
pub const RECORDS_DELIVERED: &str = "weir_records_delivered_total";
/// How far the live read is behind the tip (label `shard`), milliseconds. Not a
/// `metrics` gauge (those cannot be removed): published by the binary from
/// [`crate::WorkerStats::live_reads`], so only shards read now have one.
pub const MILLIS_BEHIND_LATEST: &str = "weir_millis_behind_latest";
/// Shards whose live reads have failed (or not answered) for the health bound;
/// published, like the lag, from [`crate::WorkerStats::health`].
pub const SHARDS_READ_FAILING: &str = "weir_shards_read_failing";
/// Leases held by this worker.
pub const LEASES_HELD: &str = "weir_leases_held";
/// Leases taken (free or expired).
pub const LEASES_TAKEN: &str = "weir_lease_takes_total";
/// Handoffs requested from other workers (steals).
pub const LEASE_STEALS: &str = "weir_lease_steals_total";
/// Leases lost (renewal conflict or validity elapsed).
pub const LEASES_LOST: &str = "weir_leases_lost_total";
/// Checkpoint writes.
pub const CHECKPOINT_WRITES: &str = "weir_checkpoint_writes_total";
/// Consumer lanes detached (label `consumer`, `reason`).
pub const LANE_DETACHED: &str = "weir_consumer_detached_total";
/// Consumer calls that failed or panicked (label `consumer`).
pub const CONSUMER_FAILURES: &str = "weir_consumer_failures_total";
/// Reader errors (label `kind`).
pub const READ_ERRORS: &str = "weir_read_errors_total";
/// Shards finished (ended and checkpointed).
pub const SHARDS_ENDED: &str = "weir_shards_ended_total";
/// Intent writes (one per consumer call, possibly several transactions).
pub const INTENT_WRITES: &str = "weir_intent_writes_total";
