//! `weir multilang --properties app.properties`: runs a KCL MultiLangDaemon
//! application on weir, from its unchanged properties file.

use std::path::PathBuf;

use anyhow::{Context, Result};

use super::properties::{Options, parse, translate};
use crate::plugin::Registry;

/// Options of `weir multilang`.
#[derive(Debug, clap::Args)]
pub struct MultilangArgs {
    /// The MultiLangDaemon properties file (`executableName`, `streamName`,
    /// `applicationName`, `initialPositionInStream`, `regionName`, ...).
    #[arg(long)]
    properties: PathBuf,
    /// Keep leases in this SQLite file instead of a DynamoDB table (one host).
    #[arg(long)]
    sqlite: Option<PathBuf>,
    /// Serve `/metrics`, `/healthz` and `/readyz` here (default: none).
    #[arg(long)]
    listen: Option<String>,
    /// Print the equivalent weir config and exit (to move on to `weir run`).
    #[arg(long)]
    print_config: bool,
    /// Exit once every shard has been read up to the start (as `weir run`).
    #[arg(long)]
    until_caught_up: bool,
}

pub async fn run(args: MultilangArgs, registry: &Registry) -> Result<()> {
    let text = std::fs::read_to_string(&args.properties)
        .with_context(|| format!("cannot read {}", args.properties.display()))?;
    let dir = args.properties.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(std::path::Path::new("."));
    let dir = dir.canonicalize().with_context(|| format!("{}", dir.display()))?;
    let options = Options { sqlite: args.sqlite.as_deref(), listen: Some(args.listen.as_deref().unwrap_or("")) };
    let translated =
        translate(&parse(&text), &dir, &options).with_context(|| format!("{}", args.properties.display()))?;
    for w in &translated.warnings {
        tracing::warn!("{}: {w}", args.properties.display());
    }
    if args.print_config {
        print!("{}", translated.toml);
        return Ok(());
    }
    let config = crate::config::load_text(&translated.toml, registry)
        .with_context(|| format!("the config translated from {}", args.properties.display()))?;
    crate::commands::run::run(config, args.until_caught_up, registry).await
}
