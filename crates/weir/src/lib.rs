//! weir as a library: the whole `weir` command line ([`App`]) with the consumer kinds
//! registered on it. The `weir` binary is `App::new().run()`; a plugin crate adds its
//! own kinds first:
//!
//! ```no_run
//! # use weir_runtime::consumers::CountConsumer as TopTools;
//! fn main() -> std::process::ExitCode {
//!     weir::App::new().consumer::<TopTools>("top-tools").run()
//! }
//! ```
//!
//! See [`Plugin`] for what a kind implements and what the API promises.
// The command line: standard output is where its answers go.
#![allow(clippy::print_stdout)]
#![warn(missing_docs)]

mod app;
mod builtin;
mod catch_up;
mod cli;
mod cloudwatch;
mod commands;
mod config;
mod consumers;
mod http;
mod live_gauges;
mod lossy;
mod multilang;
mod namespace;
mod status;
mod summary;
mod telemetry;
mod wiring;

pub mod plugin;

pub use app::App;
pub use plugin::{Context, Plugin};
pub use weir_core::{self, Acks, CloseReason, Consumer, ConsumerError, RecordBatch, ShardContext};
