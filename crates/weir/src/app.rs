//! [`App`]: the `weir` command line with a set of registered consumer kinds.

use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;

use clap::{CommandFactory, FromArgMatches};

use crate::cli::{Cli, Command};
use crate::lossy::{LossyLines, Output};
use crate::plugin::{Plugin, Registry};
use crate::telemetry;

/// The whole `weir` command line (`run`, `replay`, `demo`, `config check`,
/// `prefix eval`, `put`, `health`, `multilang`) over the registered consumer kinds.
///
/// [`App::new`] registers the built-ins; [`App::consumer`] adds (or replaces) a kind.
pub struct App {
    registry: Registry,
}

impl Default for App {
    fn default() -> Self {
        Self::new()
    }
}

impl App {
    /// The built-in kinds: `count`, `log`, `files`, `archiver`, `alerting`,
    /// `enrichment`, `iceberg`, `multilang`.
    pub fn new() -> Self {
        let mut registry = Registry::default();
        crate::builtin::register(&mut registry);
        Self { registry }
    }

    /// Registers `P` as the consumer kind `kind` (`type = "<kind>"` in `[[consumers]]`);
    /// a built-in of the same name is replaced.
    pub fn consumer<P: Plugin>(mut self, kind: &str) -> Self {
        self.registry.register::<P>(kind);
        self
    }

    /// The registered kinds (the config loader's tests).
    #[cfg(test)]
    pub(crate) fn registry(&self) -> &Registry {
        &self.registry
    }

    /// Loads a config from `text` as `weir run --config` would (every consumer section
    /// checked by its kind), and runs nothing: `Err` names every problem. Not part of
    /// the plugin API's promise: `crates/weir/tests/docs.rs` checks the configs the docs
    /// show with it, and a fuzz target feeds it arbitrary text.
    #[doc(hidden)]
    pub fn check_config(&self, text: &str) -> std::result::Result<(), String> {
        crate::config::load_text(text, &self.registry).map(|_| ()).map_err(|e| format!("{e:#}"))
    }

    /// Parses a command line (the program's name first) as [`App::run`] would, and runs
    /// nothing: `Err` holds clap's message (an unknown command or flag, a missing or
    /// malformed value). Not part of the plugin API's promise: `crates/weir/tests/docs.rs`
    /// checks the commands the docs show with it.
    #[doc(hidden)]
    pub fn check_args<I, T>(&self, args: I) -> std::result::Result<(), String>
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString> + Clone,
    {
        let matches = Cli::command().try_get_matches_from(args).map_err(|e| e.to_string())?;
        Cli::from_arg_matches(&matches).map(|_| ()).map_err(|e| e.to_string())
    }

    /// Parses the process's arguments and runs the command; the exit code says how it
    /// went (errors are printed to stderr).
    pub fn run(self) -> ExitCode {
        let help = format!("Consumer kinds (`type` in [[consumers]]):\n{}", self.registry.describe());
        let matches = Cli::command().after_help(help).get_matches();
        let cli = match Cli::from_arg_matches(&matches) {
            Ok(cli) => cli,
            Err(e) => e.exit(),
        };
        let default_level = if matches!(cli.command, Command::Demo(_)) { "warn" } else { "info" };
        let stderr = match LossyLines::start(Output::Stderr, cli.log_queue) {
            Ok(s) => s,
            Err(e) => {
                let _ = writeln!(std::io::stderr(), "error: cannot start the log writer: {e}");
                return ExitCode::FAILURE;
            }
        };
        let code = Self::run_logged(cli, self.registry, &stderr, default_level);
        // What was logged reaches stderr before the process ends, unless its reader
        // stalled (then it is not waited for).
        stderr.flush_for(FINAL_FLUSH);
        code
    }

    fn run_logged(cli: Cli, registry: Registry, stderr: &LossyLines, default_level: &str) -> ExitCode {
        if let Err(e) =
            telemetry::init(cli.log_format, cli.log_level.as_deref().unwrap_or(default_level), stderr.clone())
        {
            stderr.line(&format!("error: {e:#}"));
            return ExitCode::from(2);
        }
        let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
            Ok(r) => r,
            Err(e) => {
                stderr.line(&format!("error: cannot start the async runtime: {e}"));
                return ExitCode::FAILURE;
            }
        };
        let registry = Arc::new(registry);
        match runtime.block_on(crate::commands::dispatch(cli.command, registry)) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                stderr.line(&format!("error: {e:#}"));
                ExitCode::FAILURE
            }
        }
    }
}

/// How long the process waits at exit for its last lines to reach stderr.
const FINAL_FLUSH: std::time::Duration = std::time::Duration::from_secs(2);
