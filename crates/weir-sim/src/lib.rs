//! weir-sim: a deterministic simulation of weir workers, their leases and the archiver,
//! in the spirit of FoundationDB's simulation and TigerBeetle's VOPR.
//!
//! One or more real `weir_runtime::Worker`s run the real archivers over an in-memory
//! stream, lease table (with DynamoDB's size limits) and object store, on one thread
//! with paused time. A seed decides everything: the fleet, the records, the archivers'
//! settings, and the faults — crashes at any call (before or after it takes effect),
//! zombies (paused past failover, then resumed), lost replies, failing and slow calls,
//! outages, graceful stops and handoffs, `weir leases release`, splits and merges, a
//! Lambda failing records at times. The invariants (`truth.rs`) are checked at every
//! lease write and at the end; a failing seed replays exactly:
//! `cargo run -p weir-sim --release -- --seed <seed>`.
//!
//! # Map
//! - [`scenario`]: what a seed decides (or a directed test writes by hand).
//! - `sim.rs`: runs a scenario ([`run`]) and reports ([`Report`]).
//! - `node.rs`: a worker process, the real runtime and archivers.
//! - [`faults`]: the outside systems and their fault rates.
//! - [`gate`]: each process's door to the world, where faults happen.
//! - `ports.rs`: the ports a process is built with, through its gate.
//! - `world.rs`: the shared stream, lease table and store, the trace.
//! - `truth.rs`: the invariants; `records.rs`: the records and their ids.
//! - `entropy.rs`: randomness the seed decides (`getrandom` overridden).

pub mod entropy;
pub mod faults;
pub mod gate;
mod node;
mod ports;
pub mod records;
pub mod scenario;
mod sim;
mod traced;
mod truth;
mod world;

pub use scenario::{Event, Scenario, Shape};
pub use sim::{Report, T0_MILLIS, run};
pub use truth::Counts;

/// The command that replays `seed`.
pub fn replay_command(seed: u64) -> String {
    format!("cargo run -p weir-sim --release -- --seed {seed}")
}
