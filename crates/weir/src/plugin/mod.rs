//! The consumer plugin API: a [`Plugin`] is a [`Consumer`] with a config section and a
//! factory; an [`App`](crate::App) registers kinds by their `type` name. The built-in
//! kinds (`count`, `log`, `files`, `archiver`, `alerting`, `enrichment`, `iceberg`, `multilang`)
//! are registered through this same API.
//!
//! What the API promises (semver): the [`Plugin`] trait, [`Context`] and its methods
//! (weir's own ports: object stores, a stream writer, a Lambda invoker, an SNS
//! publisher, the clock), [`App`](crate::App)'s builder methods, and, from
//! `weir-core`, [`Consumer`], [`Acks`](weir_core::Acks),
//! [`RecordBatch`](weir_core::RecordBatch) and the types they name. `Context::aws`
//! (raw AWS SDK clients, feature `aws-sdk`) is an opt-in extension outside the promise.
//! Everything else in this crate may change in any release.

mod context;
mod registry;

use std::future::Future;

use serde::de::DeserializeOwned;
use weir_core::Consumer;

mod named;

pub use context::{Context, StatusLine};
pub(crate) use registry::{BuildEnv, Registry, parse};

/// A consumer kind: its `[[consumers]]` section and how to build one from it.
///
/// A section is the TOML table of one `[[consumers]]` entry without `type` (which
/// picked the kind) and `name` (which keys checkpoints: [`Context::name`]). The built
/// consumer is known by that name whatever its own [`Consumer::name`] says. It is
/// deserialised into [`Plugin::Config`] with serde; use `#[serde(deny_unknown_fields)]`
/// so that typos are errors, which then name the field (`consumers[2].windw`).
///
/// One instance is built per worker process and receives the batches of every shard
/// the worker holds (see [`Consumer`]). It takes part in isolation (a slow or failing
/// consumer is detached and catches up on its own), per-consumer checkpoints and
/// `weir replay --consumers <name>` exactly as the built-ins do.
pub trait Plugin: Consumer + Sized {
    /// The section's fields.
    type Config: DeserializeOwned + Send + 'static;

    /// One line for `weir --help` and `weir config check`.
    const ABOUT: &'static str = "";

    /// Checks serde cannot express, at `weir config check` and at start. `at` is the
    /// section's path (`consumers[2]`), for messages that name a field
    /// (`{at}.window: must be positive`). Returns warnings to print.
    fn check(config: &Self::Config, at: &str) -> anyhow::Result<Vec<String>> {
        let _ = (config, at);
        Ok(Vec::new())
    }

    /// Builds the consumer. `ctx` names it and offers the clock, the worker id, weir's
    /// ports on what the config names, and a line for `/readyz`.
    fn build(config: Self::Config, ctx: &Context) -> impl Future<Output = anyhow::Result<Self>> + Send;
}
