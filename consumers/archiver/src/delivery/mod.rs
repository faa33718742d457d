//! From routed lines to durable objects: buffers per route within a memory budget,
//! compressed bodies, object names, the exactly-once protocol (intents, manifests,
//! claims, resolution) and which records are durable.
//!
//! - [`buffers`]: one open buffer per route, sealed on size, interval, the budget
//!   ([`relief`]: compress early, spill to disk ([`spill`]), seal the largest), the
//!   optional partition cap, or shard close; [`sealed`]: what a sealed buffer holds.
//! - [`body`]: bodies compressed as they fill, with one shared compressor.
//! - [`deliver`]: keys ([`naming`] and the prefixes), intents ([`manifest`] for large
//!   rounds), create-only puts, retries, the backlog.
//! - [`ledger`]: the durable position of each shard.
//! - [`resolve`]: an earlier owner's open intents, resolved before a shard's first batch
//!   by [`claim`]s; [`expand`]: the manifests they name read, leftover manifests swept.

pub mod body;
pub mod budget;
pub mod buffers;
pub mod claim;
pub mod deliver;
pub mod expand;
pub mod ledger;
pub mod manifest;
pub mod naming;
pub mod relief;
pub mod resolve;
pub mod sealed;
pub mod small_deflate;
pub mod spill;
#[cfg(test)]
mod testing;
