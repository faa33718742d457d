//! weir-archiver: the archiver consumer, which reproduces Amazon Data Firehose's S3
//! delivery and goes beyond it: nothing lost, nothing written twice, partition values
//! that cannot escape their prefix, any number of partitions within one memory budget.
//!
//! # Public API
//! [`Archiver`] (a `weir_core::Consumer`) built from [`ArchiverOptions`], which hold
//! the Firehose destination read and validated by the `weir-firehose` crate; the transform
//! stage a plugin implements ([`RecordTransform`], [`Outcome`]) or a Lambda
//! ([`LambdaTransform`] over `weir_core::ports::FunctionInvoker`); the metric names
//! ([`metrics`]).
//!
//! # Map
//! A record travels through four rooms:
//! - `pipeline/` — the reference path, readable top to bottom: split
//!   (`RecordDeAggregation`) → transform (none, `mcp-normalize`, a plugin, a Lambda with
//!   Firehose's contract) → partition keys (jq by jaq) → route (values checked so that
//!   they cannot leave their place in the key; failures to the error output as Firehose
//!   error records) → line (delimiter). `pipeline/batch.rs` runs a batch through it and
//!   is the one place that chooses the fast path instead.
//! - `fast/` — one entry point, `FastPath::route`, that gives the reference's answer
//!   for the common configurations in one pass over the bytes, or "not sure" (then the
//!   reference decides). A property test holds the two together as wholes.
//! - `intake.rs` — where lines enter the buffers: the Parquet check (a data line that
//!   does not fit the table goes to the error output), the skip list of an earlier
//!   owner's written objects, the partition cap, and the parts sent elsewhere that data
//!   objects name as exceptions.
//! - `delivery/` — buffers per route within one memory budget (compress early, spill to
//!   disk, seal the largest), gzip bodies built as they fill, object names and prefixes,
//!   the exactly-once protocol (intents, manifests, claims, resolution on takeover),
//!   create-only puts with retries, and the ledger of durable positions.
//!
//! `archiver/` is the consumer's lifecycle (open, batch, tick, close) over them, with
//! the takeover of a shard in `archiver/takeover.rs`; `options.rs` builds an archiver
//! from the destination `weir-firehose` read and validated, `preview.rs` says where a
//! record would go without writing it (`weir prefix eval`), `metrics.rs` names the
//! metrics, and `fuzzing.rs` (feature `fuzzing` only) holds the entry points of the
//! fuzz targets under `fuzz/`.
//!
//! # Guarantees
//! Every input record ends in exactly one data object, one error object, or is counted
//! as `Dropped` by the transform. A record is acknowledged only when every object
//! holding a part of it is durable: the shard's durable position stops before the
//! oldest record still in a buffer or an unwritten object. Objects that cannot be
//! written are retried with backoff, without limit; past `max_backlog_bytes` the
//! archiver refuses new batches so the stream keeps them. A batch is buffered whole or
//! not at all: one that fails half way (a spill read back in error, an encoder error,
//! a panic) is taken out of the buffers again, so when the runtime delivers it again
//! no record is there twice and no earlier record was dropped. If that cannot be done
//! (a seal failed half way and its records left memory), the archiver stops and
//! refuses every call (`weir_archiver_internal_failures_total`): nothing it held was
//! acknowledged, so a restarted worker archives those records from the stream.
//!
//! # Exactly-once protocol (default mode)
//! Objects mix records of every shard the worker holds. For each object, before its
//! put, the archiver stores one *intent* per shard in that shard's lease (through
//! [`weir_core::IntentLog`], fenced by owner and counter like checkpoints; the intents
//! of every object sealed together go in one call, one transaction per 25 leases):
//! "records of this shard in `[first, last]` routed to partition `P` go to key `K`".
//! Then `K` is put create-only (S3 `If-None-Match: *`). Intents disappear when the
//! checkpoint passes them. A round with many objects of a shard stores their intents
//! in one create-only *manifest* object and only the manifest's intent in the lease,
//! and a lease holds a bounded number of manifest intents (the next manifest absorbs
//! the open ones), so one archiver's intents take at most about 34 KB of a lease item
//! at any partition count, interval and rate (`delivery/budget.rs`). A manifest is
//! deleted once a checkpoint passes it; one no open intent names (a round whose intent
//! write never landed) is deleted when its shard next opens.
//!
//! Which records an error output gets can differ between owners (a Lambda that fails
//! a record only at times, a partition cap), so an error output's intents list their
//! records exactly (runs of record parts) rather than by range and partition, and a
//! data object's intent names the parts of its range its owner sent elsewhere
//! (*exceptions*). The parts of one record bound for one partition stay in one object.
//! Intents of several owners can be open at once (each died before its checkpoint):
//! each says what its own objects hold, so a record an earlier owner sent to an error
//! output that never came, and a later owner archived as data, is skipped by the next.
//!
//! When a shard opens with open intents (an earlier owner crashed, was partitioned
//! away, or handed over with writes in flight), the new owner resolves each key (in a
//! task started at open, so the shards a worker takes over resolve in parallel) before
//! the shard's first batch: it *claims* the key by putting an empty object there
//! create-only. If the claim lands, the earlier owner's put can never land after it,
//! and the records are archived again from the stream. If the key holds a real object,
//! its records are durable and are skipped when the stream delivers them again
//! (records of that shard, in that range, routed to that partition — the transform's
//! output and the query must be deterministic, as the built-in ones are; an error
//! output's listed records whatever their route now; behind a Lambda, whose output can
//! differ between owners, every object's listed records). A record whose transform
//! fails now but that may be in a written data object whose intent lists no records
//! (one written before the Lambda was configured: its range holds it and does not name
//! it an exception) is not sent to the error output: its batch is tried again
//! (`weir_archiver_uncertain_retries_total`) until the transform takes it, for at most
//! five minutes, after which it goes to the error output anyway and may then be in both
//! (`weir_archiver_uncertain_given_up_total`). An intent write refused
//! because a lease is gone rebuilds that round's new objects without the lost shards'
//! records (each buffer keeps 8 bytes of bookkeeping per record for this) and tries
//! again under new keys with new intents. An object whose intents are stored never
//! changes key, whatever leases go: its put may have landed with the answer lost, and
//! it is retried under the same key (finding its own object there counts as success);
//! only a claim found at its key makes it go again under a new key, without the
//! records of shards whose leases were lost meanwhile.
//!
//! Claims are empty objects (a valid empty gzip file): readers see zero rows. The
//! proof obligations are checked by property tests that crash owners at every step
//! (`tests/exactly_once.rs`), by the deterministic simulation of workers, leases and
//! archivers (`crates/weir-sim`), and by an end-to-end SIGKILL storm read back by
//! DuckDB.
//!
//! `firehose` mode skips intents and claims: at least once, as Firehose.
#![warn(missing_docs)]

mod archiver;
mod delivery;
mod fast;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
mod hashing;
mod intake;
pub mod metrics;
mod options;
mod pipeline;
mod preview;

pub use archiver::Archiver;
pub use delivery::budget::{InlineLimits, lease_bytes_bound, longest_position};
pub use delivery::buffers::Overflow;
pub use delivery::deliver::{Backlog, DeliveryMode};
pub use options::{ArchiverOptions, BuildError, DEFAULT_BUFFER_MEMORY};
pub use pipeline::keys::QueryError;
pub use pipeline::lambda::LambdaTransform;
pub use pipeline::outcome::{Failure, OtfMetadata, Outcome, Part};
pub use pipeline::transform::{
    MCP_NORMALIZE_FAILED, McpNormalize, RecordTransform, Transformer, mcp_normalize_columns,
};
pub use preview::Preview;
/// Record format conversion to Parquet, a crate of its own (shared with the Iceberg
/// destination).
pub use weir_parquet as parquet;
