//! weir-enrichment: normalises MCP tool-call events (the design note's mapping), adds
//! stream metadata, looks up tenant metadata from a JSON or CSV object refreshed on an
//! interval, filters and reshapes with jq, and republishes through the `StreamWriter`
//! port (a second Kinesis stream with per-key order kept across retries, the in-process
//! stream, or an NDJSON file). See [`enricher`].
#![warn(missing_docs)]

pub mod enricher;
pub mod lookup;

pub use enricher::{Enricher, EnrichmentConfig, OutputConfig};
