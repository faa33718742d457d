//! Reference consumers: `count` (counts records per shard), `log` (logs batches) and
//! `files` (NDJSON objects through an object sink, acknowledged once durable); and
//! [`OnlyStreams`], which gives a consumer the shards of some of a fleet's streams.

mod count;
mod files;
mod log;
mod only_streams;

pub use count::{CountConsumer, Counts};
pub use files::{FilesConsumer, FilesOptions};
pub use log::LogConsumer;
pub use only_streams::OnlyStreams;
