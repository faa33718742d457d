//! What the KCL 3.x's lease management asks of DynamoDB in a steady state, from its
//! defaults: an analytic model, for the column beside weir's.
//!
//! Read from awslabs/amazon-kinesis-client (master, July 2026): `LeaseManagementConfig`,
//! `DynamoDBLeaseCoordinator`, `DynamoDBLeaseRenewer`, `DynamoDBLeaseDiscoverer`,
//! `LeaseAssignmentManager`, `WorkerMetricStatsReporter`,
//! `DynamoDBLockBasedLeaderDecider`.
//!
//! Defaults: `failoverTimeMillis` F = 10 s; renewer every F/3 − 25 ms (3.308 s);
//! `leaseAssignmentIntervalMillis` A = 2F = 20 s; lease discovery every A/2 − 25 ms
//! (9.975 s); worker metrics reported every 30 s; leader lock heartbeat every 30 s.
//! `consistentReads` defaults to false (scans are eventually consistent).
//!
//! Requests per second, S shards, W workers, one checkpoint a second per shard:
//! - checkpoints: S `UpdateItem`s conditioned on owner and counter, no read first;
//! - renewals: S / 3.308 `UpdateItem`s, no read first;
//! - lease discovery: W / 9.975 `Query`s of the `leaseOwner` index (keys only), each
//!   returning the worker's S/W keys (about 100 bytes each), eventually consistent;
//! - assignment (leader only): every 20 s a `Scan` of the lease table (S items of about
//!   [`KCL_LEASE_ITEM_BYTES`]) and of the worker-metrics table (W items of about
//!   [`KCL_WORKER_METRICS_BYTES`]), eventually consistent;
//! - worker metrics: W / 30 `UpdateItem`s;
//! - leader election: every worker that is not the leader reads the lock item at most
//!   twice per 30 s heartbeat period (`getLock`, then `tryAcquireLock`), strongly
//!   consistent; the leader writes it once per period.
//!
//! Every lease is its own partition-key value (`leaseKey`), so the busiest one takes a
//! checkpoint a second and a renewal every 3.3 s; the leader lock item takes every
//! worker's lock reads. After a crash, a lease expires F after its last renewal, the
//! leader assigns it at its next run (at most A later) and its new owner finds it at
//! its next discovery (at most 9.975 s later): at most F + A + 9.975 s ≈ 40 s.
//! Assignment writes, the lease-owner index's writes when an owner changes, shard sync
//! and cleanup are left out (not steady-state traffic).

use crate::units::{Consistency, read_half_units};

/// Lease item bytes assumed for the KCL (key, owner, counter, checkpoint and
/// sub-sequence, parent, hash range, throughput, owner switches).
pub const KCL_LEASE_ITEM_BYTES: usize = 450;

/// Worker-metrics item bytes assumed (metric stats and operating range of one worker).
pub const KCL_WORKER_METRICS_BYTES: usize = 600;

/// Lease-owner index item bytes (keys only: lease key, owner).
const INDEX_ITEM_BYTES: usize = 100;

const FAILOVER_SECS: f64 = 10.0;
const RENEW_SECS: f64 = FAILOVER_SECS / 3.0 - 0.025;
const ASSIGN_SECS: f64 = 2.0 * FAILOVER_SECS;
const DISCOVER_SECS: f64 = ASSIGN_SECS / 2.0 - 0.025;
const METRICS_SECS: f64 = 30.0;
const LOCK_SECS: f64 = 30.0;

/// The model's numbers for one application.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct KclEstimate {
    /// Read units a second, all tables.
    pub read_units: f64,
    /// Write units a second, all tables.
    pub write_units: f64,
    /// Requests a second.
    pub requests: f64,
    /// Read units a second on the busiest partition-key value (the leader lock item).
    pub busiest_read_units: f64,
    /// Write units a second on the busiest partition-key value (one lease).
    pub busiest_write_units: f64,
    /// Longest time after a crash until its leases have owners again, seconds.
    pub takeover_bound_secs: f64,
}

/// The KCL 3.x estimate for `shards` shards and `workers` workers.
pub fn estimate(shards: usize, workers: usize) -> KclEstimate {
    let (s, w) = (shards as f64, workers.max(1) as f64);
    let half = |bytes: usize| read_half_units(bytes, Consistency::Eventual) as f64 / 2.0;
    let strong = |bytes: usize| read_half_units(bytes, Consistency::Strong) as f64 / 2.0;
    let per_worker_keys = shards.div_ceil(workers.max(1));
    let writes = s + s / RENEW_SECS + w / METRICS_SECS + 1.0 / LOCK_SECS;
    let discovery = w / DISCOVER_SECS * half(per_worker_keys * INDEX_ITEM_BYTES);
    let scans = (half(shards * KCL_LEASE_ITEM_BYTES) + half(workers * KCL_WORKER_METRICS_BYTES)) / ASSIGN_SECS;
    let lock_reads = 2.0 * (w - 1.0).max(0.0) / LOCK_SECS * strong(200);
    let scan_pages = (shards * KCL_LEASE_ITEM_BYTES).div_ceil(1 << 20) as f64;
    KclEstimate {
        read_units: discovery + scans + lock_reads,
        write_units: writes,
        requests: writes + w / DISCOVER_SECS + (scan_pages + 1.0) / ASSIGN_SECS + 2.0 * (w - 1.0) / LOCK_SECS,
        busiest_read_units: lock_reads,
        busiest_write_units: 1.0 + 1.0 / RENEW_SECS,
        takeover_bound_secs: FAILOVER_SECS + ASSIGN_SECS + DISCOVER_SECS,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_are_a_checkpoint_a_second_and_a_renewal_every_3_3_s_per_shard() {
        let e = estimate(10_000, 500);
        let per_shard = e.write_units / 10_000.0;
        assert!(per_shard > 1.30 && per_shard < 1.31, "{per_shard}");
        assert!(e.busiest_write_units < 1.31);
        assert!(e.read_units < 0.05 * e.write_units, "reads are a small part: {e:?}");
        assert!((e.takeover_bound_secs - 39.975).abs() < 1e-9);
    }
}
