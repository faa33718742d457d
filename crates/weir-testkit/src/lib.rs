//! weir-testkit: fakes with fault injection, and the conformance suites every port
//! implementation must pass.
//!
//! Map of the crate:
//! - [`MemoryLeaseTable`]: lease table with DynamoDB's conditional semantics.
//! - [`MemoryObjectSink`]: create-only object store in memory.
//! - [`MemoryStreamWriter`]: a stream writer in memory that can refuse writes.
//! - [`MemoryFunctions`]: functions (Lambdas) in memory, closures by name, throttled on
//!   demand.
//! - [`MemoryTopics`]: topics (SNS) in memory, keeping what was published.
//! - [`SlowSink`]: any object sink, each call slowed by a fixed latency.
//! - [`FaultyReader`]: wraps any [`weir_core::ports::ShardReader`] and injects errors,
//!   delays, throttling and resource-in-use.
//! - [`FaultProxy`]: a TCP proxy between weir and an endpoint that takes the link down,
//!   black-holes it, adds latency or resets responses, changed while traffic flows.
//! - [`FaultyLeaseTable`]: one worker's view of a shared table, partitionable, or
//!   with its lease writes refused.
//! - [`RecordingConsumer`]: a consumer that records what it got, with acknowledgement
//!   lag, stalls and failures on demand.
//! - [`CrashSwitch`], [`CrashingSink`], [`SimLeases`], [`SimAcks`]: crash points for
//!   consumers that write intents and objects, and the next owner's view.
//! - [`ManualClock`]: a clock tests move by hand.
//! - [`Emulator`]: a real emulator on a free port for adapter tests; paused and
//!   resumed (SIGSTOP/SIGCONT) for outage tests.
//! - [`fixtures`]: small builders shared by tests.
//! - [`patience`]: deadlines that fail on no progress, not on wall time alone.
//! - [`conformance`]: suites for `LeaseTable`, `ObjectSink`, `ShardReader`, `StreamWriter`,
//!   `FunctionInvoker` and `Publisher`.
#![warn(missing_docs)]
// Test support: a failed expectation is a failed test.
#![allow(clippy::unwrap_used, clippy::print_stdout)]

mod clock;
pub mod conformance;
mod crash;
mod emulator;
mod fault_proxy;
mod faulty_lease_table;
mod faulty_reader;
pub mod fixtures;
mod memory_functions;
mod memory_lease_table;
mod memory_sink;
mod memory_topics;
mod memory_writer;
pub mod patience;
mod recording_consumer;
mod slow_sink;

pub use clock::ManualClock;
pub use crash::{CrashSwitch, CrashingSink, SimAcks, SimLeases};
pub use emulator::Emulator;
pub use fault_proxy::{FaultProxy, Faults, Link, ProxyStats};
pub use faulty_lease_table::FaultyLeaseTable;
pub use faulty_reader::{Fault, FaultPlan, FaultyReader};
pub use memory_functions::MemoryFunctions;
pub use memory_lease_table::MemoryLeaseTable;
pub use memory_sink::MemoryObjectSink;
pub use memory_topics::MemoryTopics;
pub use memory_writer::MemoryStreamWriter;
pub use recording_consumer::{AckMode, ConsumerControl, Event, Recorded, RecordingConsumer};
pub use slow_sink::SlowSink;
