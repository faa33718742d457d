//! KCL MultiLang support: the `multilang` consumer kind (the protocol, one child per
//! shard) and `weir multilang --properties`, which runs a MultiLangDaemon `.properties`
//! file.

mod child;
pub mod command;
mod consumer;
mod properties;
mod protocol;

pub use consumer::MultiLang;
