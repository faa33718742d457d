use std::io::IsTerminal;

use anyhow::{Result, anyhow};
use tracing_subscriber::EnvFilter;

use crate::lossy::LossyLines;

/// How log lines look.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Human,
    /// One JSON object per line.
    Json,
}

/// weir's own crates (and the example plugin's), which a bare `--log-level` sets.
const OWN: [&str; 9] = [
    "weir",
    "weir_core",
    "weir_runtime",
    "weir_aws",
    "weir_local",
    "weir_archiver",
    "weir_alerting",
    "weir_enrichment",
    "weir_example_tool_minutes",
];

/// The `EnvFilter` directives for `--log-level`: a bare level applies to weir's crates,
/// libraries log at that level or `info`, whichever is less verbose; anything else is
/// used as written.
pub fn directives(filter: &str) -> String {
    const LEVELS: [&str; 6] = ["off", "error", "warn", "info", "debug", "trace"];
    let level = filter.trim().to_ascii_lowercase();
    let Some(rank) = LEVELS.iter().position(|l| *l == level) else { return filter.to_owned() };
    let libraries = LEVELS[rank.min(3)];
    let own: Vec<String> = OWN.iter().map(|c| format!("{c}={level}")).collect();
    format!("{libraries},{}", own.join(","))
}

/// Installs the global tracing subscriber, writing through `stderr` (which never
/// blocks the caller: see [`crate::lossy`]). Write errors are not reported (a report
/// would go to the same stream).
pub fn init(format: LogFormat, filter: &str, stderr: LossyLines) -> Result<()> {
    let filter = EnvFilter::try_new(directives(filter)).map_err(|e| anyhow!("invalid --log-level {filter:?}: {e}"))?;
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(stderr).log_internal_errors(false);
    let installed = match format {
        LogFormat::Human => builder.with_target(false).with_ansi(std::io::stderr().is_terminal()).try_init(),
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
    installed.map_err(|e| anyhow!("cannot install logger: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bare_level_is_weirs_and_libraries_stay_at_info() {
        let d = directives("debug");
        assert!(d.starts_with("info,weir=debug,weir_core=debug,"), "{d}");
        assert!(directives("warn").starts_with("warn,weir=warn,"));
        assert!(directives("TRACE").starts_with("info,weir=trace,"));
        assert_eq!(directives("info,aws_smithy_runtime=debug"), "info,aws_smithy_runtime=debug");
        assert!(EnvFilter::try_new(directives("debug")).is_ok());
    }
}
