//! KCL MultiLang support: the `multilang` consumer kind (the protocol, one child per
//! shard, each served by its shard's task) and `weir multilang --properties`, which runs a MultiLangDaemon `.properties`
//! file.

mod child;
pub mod command;
mod consumer;
mod properties;
mod protocol;
mod shard_task;

pub use consumer::MultiLang;
