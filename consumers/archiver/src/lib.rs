//! weir-archiver: the archiver consumer, which reproduces Amazon Data Firehose's S3
//! delivery. This crate grows in stages; so far it holds:
//!
//! - [`java_time`]: Java `DateTimeFormatter` patterns, compiled once and evaluated at
//!   an instant in UTC or a `CustomTimeZone`.
//! - [`prefix`]: `Prefix` / `ErrorOutputPrefix` expressions (`!{timestamp:…}`,
//!   `!{firehose:random-string}`, `!{firehose:error-output-type}`,
//!   `!{partitionKeyFromQuery:…}`, `!{partitionKeyFromLambda:…}`) with Firehose's
//!   validation rules and defaults.
//! - [`transform`]: Firehose's Lambda transformation contract (event and response
//!   shapes, Ok / Dropped / ProcessingFailed, response validation) and the built-in
//!   `mcp-normalize` transform.
//! - [`firehose_config`]: an existing delivery stream's `ExtendedS3DestinationConfiguration`
//!   (API JSON, CloudFormation YAML, or the same shape in TOML), validated with
//!   Firehose's ranges into [`firehose_config::ArchiverSettings`], every problem named.
//! - [`buffers`]: per-partition buffers, compressed as they fill, flushed on size
//!   (before compression) or interval, with an active-partition cap.
//! - [`error_records`]: Firehose's error output lines (`processing-failed`,
//!   `partitioning-failed`, …) with the raw record in base64.
//! - [`partition`]: partition keys from a `MetadataExtractionQuery` (jaq, JQ-1.6
//!   semantics, scalars only) with a fast path for plain field paths.
#![warn(missing_docs)]

pub mod archiver;
pub mod body;
pub mod buffers;
pub mod delivery;
pub mod error_records;
pub mod firehose_config;
pub mod java_time;
pub mod ledger;
pub mod metrics;
pub mod naming;
pub mod partition;
pub mod prefix;
pub mod resolve;
pub mod subrecords;
pub mod transform;
pub mod transformer;
