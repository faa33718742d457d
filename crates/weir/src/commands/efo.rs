//! `weir efo`: the enhanced fan-out consumers of the config's stream(s). `list` shows
//! every consumer registered on each stream and marks the config's own; `deregister`
//! removes one (the config's by default). A registered consumer is billed per
//! shard-hour whether anything reads through it: deleting a stack or dropping
//! `efo = true` leaves it registered until this command (or the console) removes it.
//! Deregistering the consumer of a running fleet cuts its subscriptions: its reads
//! fail and it goes unready until restarted.

use std::path::PathBuf;

use anyhow::{Result, bail};
use clap::{Args, Subcommand};

use crate::config::{Config, StreamKind};
use crate::plugin::Registry;

/// `weir efo …`.
#[derive(Debug, Args)]
pub(crate) struct EfoArgs {
    #[command(subcommand)]
    command: EfoCommand,
}

#[derive(Debug, Subcommand)]
enum EfoCommand {
    /// Every enhanced fan-out consumer of the config's Kinesis stream(s): name, status,
    /// registration time; the config's own is marked.
    List {
        /// The TOML config file.
        #[arg(long, short)]
        config: PathBuf,
    },
    /// Deregister an enhanced fan-out consumer: the config's own (`efo = true` or
    /// `efo_consumer`), or the one `--consumer` names (e.g. a finished replay job's).
    Deregister {
        /// The TOML config file.
        #[arg(long, short)]
        config: PathBuf,
        /// The consumer to deregister; default the config's own.
        #[arg(long)]
        consumer: Option<String>,
        /// The stream, when the config names several.
        #[arg(long)]
        stream: Option<String>,
    },
}

pub(crate) async fn run(args: EfoArgs, registry: &Registry) -> Result<()> {
    match args.command {
        EfoCommand::List { config } => {
            let config = crate::config::load(&config, registry)?;
            let client = weir_aws::clients::kinesis(&config.aws.endpoints()).await;
            for section in kinesis_streams(&config)? {
                let own = section.efo_consumer_name(&config.leases.namespace);
                let consumers = weir_aws::kinesis::list_efo_consumers(&client, &section.name).await?;
                println!("stream {} ({} enhanced fan-out consumers)", section.name, consumers.len());
                for c in consumers {
                    let created = c
                        .created_ms
                        .and_then(chrono::DateTime::from_timestamp_millis)
                        .map(|t| t.format("%Y-%m-%dT%H:%M:%SZ").to_string())
                        .unwrap_or_default();
                    let mark = if own.as_deref() == Some(c.name.as_str()) { "  (this config's)" } else { "" };
                    println!("  {:<48} {:<9} {created}{mark}", c.name, c.status);
                }
            }
            Ok(())
        }
        EfoCommand::Deregister { config, consumer, stream } => {
            let config = crate::config::load(&config, registry)?.with_one_stream(stream.as_deref())?;
            if config.stream.kind != StreamKind::Kinesis {
                bail!("the config reads the in-process stream: it has no enhanced fan-out consumers");
            }
            let Some(name) = consumer.or_else(|| config.stream.efo_consumer_name(&config.leases.namespace)) else {
                bail!(
                    "the config reads {} by polling: name the consumer to deregister with --consumer (`weir efo list` shows them)",
                    config.stream.name
                );
            };
            let client = weir_aws::clients::kinesis(&config.aws.endpoints()).await;
            if weir_aws::kinesis::deregister_efo_consumer(&client, &config.stream.name, &name).await? {
                println!("{}: deregistered enhanced fan-out consumer {name}", config.stream.name);
            } else {
                println!("{}: no enhanced fan-out consumer {name} (nothing to do)", config.stream.name);
            }
            Ok(())
        }
    }
}

fn kinesis_streams(config: &Config) -> Result<Vec<crate::config::StreamSection>> {
    let streams: Vec<_> = config.stream_list().into_iter().filter(|s| s.kind == StreamKind::Kinesis).cloned().collect();
    if streams.is_empty() {
        bail!("the config reads the in-process stream: it has no enhanced fan-out consumers");
    }
    Ok(streams)
}
