use std::io::IsTerminal;

use anyhow::{Result, anyhow};
use tracing_subscriber::EnvFilter;

/// How log lines look.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Human,
    /// One JSON object per line.
    Json,
}

/// Installs the global tracing subscriber.
pub fn init(format: LogFormat, filter: &str) -> Result<()> {
    let filter = EnvFilter::try_new(filter).map_err(|e| anyhow!("invalid --log-level {filter:?}: {e}"))?;
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    let installed = match format {
        LogFormat::Human => builder.with_target(false).with_ansi(std::io::stderr().is_terminal()).try_init(),
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
    installed.map_err(|e| anyhow!("cannot install logger: {e}"))
}
