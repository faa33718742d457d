//! weir-archiver: the archiver consumer, which reproduces Amazon Data Firehose's S3
//! delivery and goes beyond it: nothing lost, nothing written twice, partition values
//! that cannot escape their prefix.
//!
//! # Pipeline
//! Per record ([`archiver::Archiver`]): split into parts (`RecordDeAggregation`,
//! [`subrecords`]) → transform ([`transformer`]: nothing, the built-in
//! `mcp-normalize` ([`mcp_normalize`]), a Rust [`transformer::RecordTransform`] plugin,
//! or a Lambda function through the [`transformer::FunctionInvoker`] port, with
//! Firehose's event, response and retry rules, [`transform`]) → partition keys
//! ([`partition`]: jq via jaq with JQ-1.6 semantics and a plain-path fast path, which
//! reads a transform's output through its [`fields::FieldIndex`] when it gives one
//! instead of parsing it again; values checked by [`prefix::check_partition_value`])
//! → delimiter → the buffer of its route (found by an encoded key): one per
//! data partition, one per error output type ([`buffers`], bodies compressed as they
//! fill with one shared compressor, [`body`]). Buffers are sealed on size (before
//! compression), interval (from the consumer tick, time passed in), the memory budget
//! (largest first, after compressing stages early and, with a spill directory,
//! moving bytes to local disk, [`spill`]), the optional active partition cap, or shard
//! close; sealed buffers become objects named
//! `<prefix><name>-1-<yyyy-MM-dd-HH-mm-ss>-<uuid><ext>` ([`prefix`], [`naming`]) and
//! are written through the `ObjectSink` port ([`delivery`]). Failures of any stage go
//! to the error output as Firehose error records ([`error_records`]); every input
//! record ends in exactly one data object, one error object, or is counted as
//! `Dropped` by the transform.
//!
//! # Acknowledgement
//! A record is acknowledged only when every object holding a part of it is durable
//! ([`ledger`]): the shard's durable position stops before the oldest record still in
//! a buffer or an unwritten object. Objects that cannot be written are retried with
//! backoff, without limit, and nothing of them is acknowledged; past
//! `max_backlog_bytes` the archiver refuses new batches so the stream keeps them.
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
//! so a lease item stays far below DynamoDB's 400 KB at any partition count
//! ([`manifest`]); a manifest is deleted once a checkpoint passes it.
//!
//! When a shard opens with open intents (an earlier owner crashed, was partitioned
//! away, or handed over with writes in flight), the new owner resolves each key
//! ([`resolve`]; in a task started at open, so the shards a worker takes over resolve
//! in parallel) before the shard's first batch: it *claims* the key by putting an empty object
//! there create-only. If the claim lands, the earlier owner's put can never land after
//! it, and the records are archived again from the stream. If the key holds a real
//! object, its records are durable and are skipped when the stream delivers them again
//! (records of that shard, in that range, routed to that partition — the transform and
//! query must be deterministic, as the built-in ones are). A put that finds a claim,
//! or an intent write refused because a lease is gone, rebuilds the object without
//! the lost shards' records (each buffer keeps 8 bytes of bookkeeping per record for
//! this) and tries again under a new key with new intents. A put whose answer was lost
//! is retried under the same key; finding its own object there counts as success.
//!
//! Claims are empty objects (a valid empty gzip file): readers see zero rows. The
//! proof obligations are checked by property tests that crash owners at every step
//! (`tests/exactly_once.rs`) and by an end-to-end SIGKILL storm read back by DuckDB.
//!
//! `firehose` mode skips intents and claims: at least once, as Firehose.
//!
//! # Hot path
//! Work per record is kept to one pass over its bytes where the design allows:
//! `mcp-normalize` reads the seven input fields of a flat event with a one-pass scanner
//! ([`flat_scan`]; serde_json reads anything else and stays the reference), which checks
//! UTF-8 only when a byte is past ASCII, and writes a batch's lines into one buffer
//! ([`transformer::RecordTransform::transform_parts`]), telling where each output field
//! lies ([`fields::FieldIndex`]); a flat key query reads its keys' raw texts there
//! instead of parsing the line again, and the route key of texts seen before comes from
//! [`route_cache`]; the route is an encoded byte key ([`buffers::encode_data`]) looked
//! up without building the partition map; the ledger takes a batch at once
//! ([`ledger::Ledger::batch`]) and keeps pending buffers in order, so the durable
//! position is read, not searched; the stage of each buffer is compressed 64 KiB at a
//! time by one shared compressor, with its CRC. Buffer gauges are set at ticks and
//! seals, not per batch. `cargo bench -p weir-archiver --bench throughput` measures it
//! against plain gzip.
//!
//! # Modules
//! - [`java_time`]: Java `DateTimeFormatter` patterns in UTC or a `CustomTimeZone`.
//! - [`prefix`]: `Prefix` / `ErrorOutputPrefix` expressions with Firehose's rules.
//! - [`firehose_config`]: an existing delivery stream's `ExtendedS3DestinationConfiguration`
//!   (API JSON, CloudFormation YAML, or TOML), validated with Firehose's ranges.
#![warn(missing_docs)]

pub mod archiver;
pub mod body;
pub mod buffers;
pub mod delivery;
pub mod error_records;
pub mod fields;
pub mod firehose_config;
pub mod flat_scan;
pub mod java_time;
pub mod ledger;
pub mod manifest;
pub mod mcp_normalize;
pub mod metrics;
pub mod naming;
pub mod partition;
pub mod prefix;
pub mod resolve;
pub mod route_cache;
pub mod spill;
pub mod subrecords;
pub mod transform;
pub mod transformer;
