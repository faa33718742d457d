//! Conformance suites. Every implementation of a port calls the suite of its port from
//! its own tests; a suite panics (fails the test) on the first broken rule.

mod functions;
mod lease_table;
mod object_sink;
mod reader;
mod stream_writer;
mod topics;

pub use functions::{FunctionHarness, function_invoker_suite};
pub use lease_table::lease_table_suite;
pub use object_sink::{SinkQuirks, object_sink_suite, object_sink_suite_with};
pub use reader::{Quirks, StreamHarness, shard_reader_suite, shard_reader_suite_with};
pub use stream_writer::{WriterHarness, stream_writer_suite};
pub use topics::{TopicHarness, publisher_suite};
