//! The commands of `weir`, one file each: [`dispatch`] runs the one the command line
//! names. The worker's wiring they share is in `crate::wiring`.

pub(crate) mod check;
pub(crate) mod check_firehose;
pub(crate) mod demo;
pub(crate) mod doctor;
pub(crate) mod efo;
pub(crate) mod health;
pub(crate) mod import_kcl;
pub(crate) mod leases;
pub(crate) mod prefix_eval;
pub(crate) mod put;
pub(crate) mod replay;
pub(crate) mod run;

use std::sync::Arc;

use anyhow::Result;

use crate::cli::{Command, ConfigCommand, PrefixCommand};
use crate::config;
use crate::plugin::Registry;

/// Runs `command`.
pub(crate) async fn dispatch(command: Command, registry: Arc<Registry>) -> Result<()> {
    match command {
        Command::Demo(args) => demo::run(args, &registry).await,
        Command::Put(args) => put::run(args).await,
        Command::Replay(args) => replay::run(args, &registry).await,
        Command::Health(args) => health::run(args).await,
        Command::Multilang(args) => crate::multilang::command::run(args, &registry).await,
        Command::Leases(args) => leases::run(args, &registry).await,
        Command::Efo(args) => efo::run(args, &registry).await,
        Command::ImportKcl(args) => import_kcl::run(args, &registry).await,
        Command::Doctor(args) => doctor::run(args, &registry).await,
        Command::Run { config: Some(path), until_caught_up, .. } => {
            run::run(config::load(&path, &registry)?, until_caught_up, &registry).await
        }
        Command::Run { config_toml, until_caught_up, .. } => {
            let config = config::load_text(&config_toml.unwrap_or_default(), &registry)?;
            run::run(config, until_caught_up, &registry).await
        }
        Command::Config(ConfigCommand::Check { file, firehose: true, resource }) => {
            check_firehose::run(&file, resource.as_deref())
        }
        Command::Config(ConfigCommand::Check { file, .. }) => check::run(&file, &registry),
        Command::Prefix(PrefixCommand::Eval { config, record, consumer, arrival }) => {
            prefix_eval::run(&config, &registry, consumer.as_deref(), &record, arrival.as_deref()).await
        }
    }
}
