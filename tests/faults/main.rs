//! Outages of each dependency while the stream keeps flowing, with real emulators
//! (ferrokinesis, moto) and `weir run` workers whose every AWS endpoint sits behind a
//! [`weir_testkit::FaultProxy`]. Each scenario writes MCP events steadily, injects
//! its fault, heals it, and then checks with DuckDB that the archive is exact
//! (every record once, none lost), that an at-least-once consumer got everything,
//! and how late alerts were while the fault was on. Each prints a row of the table
//! (`WEIR_FAULTS_TABLE=<file>` collects them).
//!
//! CI runs shortened faults (10 s outages, 20 s of a degraded network);
//! `WEIR_FAULTS_FULL=1` runs the full ones (60 s, 5 minutes).
#![allow(clippy::unwrap_used, clippy::print_stdout)] // a test: a failed expectation is a failed test

mod degraded;
mod deleted;
mod dynamodb;
mod harness;
mod hostile;
mod kinesis;
mod lambda;
mod s3;
mod soak;
