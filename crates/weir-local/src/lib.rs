//! weir-local: the embedded defaults that let weir run on one machine.
//!
//! - [`SqliteLeaseTable`]: leases and checkpoints in a SQLite file; safe for several
//!   worker processes on one host (WAL, immediate transactions).
//! - [`FsObjectSink`]: a local directory as an object store with atomic, create-only
//!   puts.
//! - [`MemoryStream`]: an in-process sharded stream with split and merge, used by
//!   `weir demo` and the runtime's tests.
//! - [`sql_catalog`]: an Iceberg SQL catalog in a SQLite file over a local warehouse
//!   directory, readable by pyiceberg's `SqlCatalog`.
//! - [`McpEventGenerator`]: synthetic MCP tool-call events, with a share of malformed
//!   records.
#![warn(missing_docs)]

mod fs_sink;
mod generator;
mod iceberg_catalog;
mod ndjson_writer;
mod sqlite_leases;
mod stream;

pub use fs_sink::FsObjectSink;
pub use generator::{GeneratorConfig, McpEventGenerator};
pub use iceberg_catalog::{CatalogOpenError, sql_catalog};
pub use ndjson_writer::NdjsonFileWriter;
pub use sqlite_leases::SqliteLeaseTable;
pub use stream::{MemoryStream, StreamOptions};
