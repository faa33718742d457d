//! weir-runtime: runs consumers over a sharded stream with leases and checkpoints.
//!
//! Map of the crate:
//! - [`Worker`] (`worker.rs`): one per process. Takes, steals and renews leases
//!   ([`weir_core::policy`] decides), creates leases from the shard list, runs one
//!   shard worker per held lease, owns every task, shuts down gracefully.
//! - `held_lease.rs`: a lease this worker holds: conditional writes, fencing, validity.
//! - `shard/`: the shard worker (lifecycle enum, dispatch, catch-up, drain).
//! - `host.rs`: one task per consumer; serialises calls into the consumer and routes
//!   its acknowledgements to the shard it names.
//! - `lane.rs`: the per-(shard, consumer) queue and progress shared by both sides.
//! - `acks.rs`: what a consumer acknowledges with (per shard, owned handles) and how
//!   a batch finishes, at once or later when the consumer deferred it.
//! - `reader_task.rs`: a shard read that survives errors, expiry and throttling.
//! - [`streams`]: several streams as one reader and catalog (multi-stream fleets).
//! - [`WindowReader`]: a reader bounded by the end of a past window (replays).
//! - [`archive`]: an archive's objects in a window read as a stream (replays from
//!   the archive).
//! - [`consumers`]: reference consumers (`count`, `log`, `files`).
//! - [`metrics`]: every metric name, in one place.
#![warn(missing_docs)]

mod acks;
pub mod archive;
mod backoff;
mod clock;
mod config;
pub mod consumers;
mod held_lease;
mod host;
pub mod jitter;
mod lane;
mod liveness;
pub mod metrics;
mod reader_task;
mod shard;
mod stats;
pub mod streams;
mod window;
mod worker;

pub use backoff::Backoff;
pub use clock::TokioClock;
pub use config::{ConfigError, DEFAULT_QUEUE_BYTES, RuntimeConfig};
pub use stats::{Health, LaneStats, LiveRead, ShardRead, WorkerStats};
pub use window::WindowReader;
pub use worker::{Worker, WorkerError};
