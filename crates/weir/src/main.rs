//! `weir`: the binary. Commands: `demo` (everything on embedded defaults), `run`
//! (a worker from a config file), `config check`.

mod archiver;
mod catch_up;
mod cloudwatch;
mod config;
mod consumers;
mod demo;
mod firehose_check;
mod health;
mod http;
mod lambda;
mod prefix_eval;
mod put;
mod replay;
mod replay_job;
mod replay_progress;
mod replay_source;
mod run;
mod sns;
mod summary;
mod telemetry;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// weir: Kinesis consumers with leases, per-consumer checkpoints and Firehose-style archiving.
#[derive(Debug, Parser)]
#[command(name = "weir", version, about)]
struct Cli {
    /// Log format.
    #[arg(long, global = true, value_enum, default_value = "human", env = "WEIR_LOG_FORMAT")]
    log_format: telemetry::LogFormat,
    /// Log filter (tracing `EnvFilter` syntax), e.g. `info` or `weir_runtime=debug`;
    /// default `info`, and `warn` for `demo`, which tells its own story on stdout.
    #[arg(long, global = true, env = "WEIR_LOG")]
    log_level: Option<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the whole pipeline on embedded defaults: an in-process sharded stream of
    /// synthetic MCP tool-call events (with a split and a merge), two workers sharing
    /// SQLite leases, and every built-in consumer; then print a summary.
    Demo(demo::DemoArgs),
    /// Run a worker from a config file until SIGTERM or Ctrl-C.
    Run {
        /// The TOML config file.
        #[arg(long, short, required_unless_present = "config_toml")]
        config: Option<PathBuf>,
        /// The config as TOML text instead of a file (e.g. an ECS task's environment).
        #[arg(long, env = "WEIR_CONFIG_TOML", hide_env_values = true, conflicts_with = "config")]
        config_toml: Option<String>,
        /// Exit 0 once every shard has been read up to the time the command started
        /// (from each consumer's checkpoint, or the initial position) and processed by
        /// every consumer, with checkpoints written: for batch jobs and cron backfills.
        /// Waits for shards other workers hold.
        #[arg(long)]
        until_caught_up: bool,
    },
    /// Write NDJSON lines (file or stdin) into a Kinesis stream with PutRecords:
    /// batches of at most 500 records / 5 MiB, only failed records retried.
    Put(put::PutArgs),
    /// Run chosen consumers over a past window [--from, --to) of the stream, in the
    /// job's own lease namespace (live checkpoints never move); resumable and shareable.
    Replay(replay::ReplayArgs),
    /// Ask a worker's health endpoint (`/readyz` by default): exit 0 when it answers
    /// 2xx, 1 otherwise. For container health checks without curl.
    Health(health::HealthArgs),
    /// Configuration tools.
    #[command(subcommand)]
    Config(ConfigCommand),
    /// Archiver prefix tools.
    #[command(subcommand)]
    Prefix(PrefixCommand),
}

#[derive(Debug, Subcommand)]
enum PrefixCommand {
    /// Print the object key (and line) a record would get from an archiver, or the
    /// error output and reason.
    Eval {
        /// The TOML config file.
        #[arg(long, short)]
        config: PathBuf,
        /// The record, as produced to the stream.
        #[arg(long)]
        record: String,
        /// Which archiver, when the config has several.
        #[arg(long)]
        consumer: Option<String>,
        /// Arrival time (RFC 3339); default now.
        #[arg(long)]
        arrival: Option<String>,
    },
}

#[derive(Debug, Subcommand)]
enum ConfigCommand {
    /// Parse and validate a config file (with `WEIR_` overrides) and explain every problem.
    Check {
        /// The TOML config file, or with `--firehose` a Firehose destination.
        file: PathBuf,
        /// The file is an existing Firehose delivery stream's S3 destination: API JSON
        /// (`.json`), a CloudFormation template (`.yaml`, `.yml`) or TOML (`.toml`).
        #[arg(long)]
        firehose: bool,
        /// With `--firehose` and a CloudFormation template: the resource to read.
        #[arg(long, requires = "firehose")]
        resource: Option<String>,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let default_level = if matches!(cli.command, Command::Demo(_)) { "warn" } else { "info" };
    if let Err(e) = telemetry::init(cli.log_format, cli.log_level.as_deref().unwrap_or(default_level)) {
        eprintln!("error: {e:#}");
        return ExitCode::from(2);
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Demo(args) => demo::run(args).await,
            Command::Put(args) => put::run(args).await,
            Command::Replay(args) => replay::run(args).await,
            Command::Health(args) => health::run(args).await,
            Command::Run { config: Some(path), until_caught_up, .. } => {
                run::run(config::load(&path)?, until_caught_up).await
            }
            Command::Run { config_toml, until_caught_up, .. } => {
                run::run(config::load_text(&config_toml.unwrap_or_default())?, until_caught_up).await
            }
            Command::Config(ConfigCommand::Check { file, firehose: true, resource }) => {
                firehose_check::run(&file, resource.as_deref())
            }
            Command::Config(ConfigCommand::Check { file, .. }) => {
                let c = config::load(&file)?;
                println!(
                    "{}: ok ({} consumers: {}; reading {}; leases in {})",
                    file.display(),
                    c.consumers.len(),
                    c.consumers.iter().map(|c| c.name()).collect::<Vec<_>>().join(", "),
                    c.stream.describe(true),
                    c.leases.describe()
                );
                for section in &c.consumers {
                    if let config::ConsumerSection::Archiver(a) = section {
                        for w in archiver::warnings(a)? {
                            println!("warning: archiver {:?}: {w}", a.name);
                        }
                    }
                }
                Ok(())
            }
            Command::Prefix(PrefixCommand::Eval { config, record, consumer, arrival }) => {
                prefix_eval::run(&config, consumer.as_deref(), &record, arrival.as_deref()).await
            }
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
