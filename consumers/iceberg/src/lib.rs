//! weir's Apache Iceberg destination: records appended to Iceberg tables exactly once
//! per shard position, through any catalog the `iceberg` crate speaks to.
//!
//! # Exactly once
//! A record is in the table once or not at all, whatever crashes, zombies (a worker
//! that lost its lease and does not know it yet) and handoffs do:
//! - every commit carries, in its snapshot summary, the position each of its shards
//!   reached ([`positions`]);
//! - a commit drops the records at or before the positions the table already has for
//!   their shards, and is conditional on the snapshot it read them from
//!   (the `pinned` module): a writer that lost the race reads the positions again;
//! - a shard's checkpoint moves only to a position a stored commit carries, after it
//!   is stored, and a new owner starts after the later of the checkpoint and the
//!   table's position.
//!
//! So a zombie cannot commit stale data: whichever of it and the shard's new owner
//! commits second finds the first's position in the table and drops what it has. The
//! lease is not what fences it (a zombie's lease check can pass a moment before it
//! loses the lease); the table's own positions are, read and committed atomically by
//! the catalog's compare-and-swap of the table's metadata. That is what the Kafka
//! Connect Iceberg sink lacked when a zombie's stale commit lost data (apache/iceberg
//! #17551): its commits were conditional on the table, not on where each partition
//! stood in it.

pub mod config;
pub mod consumer;
pub mod file_properties;
pub mod firehose;
mod lambda_config;
pub mod metrics;
mod pinned;
pub mod positions;
mod retag;
pub mod schema;
pub mod status;
pub mod tables;
pub mod transform;
pub mod writer;

pub use config::{CatalogConfig, ErrorOutput, IcebergConfig, Resolved, TimestampIntegers};
pub use consumer::{BufferHints, IcebergConsumer};
pub use tables::{Route, RouteQuery, Tables, Unroutable};
pub use transform::{RecordTransform, Transformed};
pub use writer::{CommitReport, Delivery, IcebergError, Rejected, ShardRecords, TableWriter};
