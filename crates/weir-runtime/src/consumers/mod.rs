//! Reference consumers: `count` (counts records per shard), `log` (logs batches) and
//! `files` (NDJSON objects through an object sink, acknowledged once durable).

mod count;
mod files;
mod log;

pub use count::{CountConsumer, Counts};
pub use files::{FilesConsumer, FilesOptions};
pub use log::LogConsumer;
