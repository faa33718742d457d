//! The command line (clap).

use std::path::PathBuf;

use clap::{Parser, Subcommand};

use crate::commands::{demo, health, put, replay};
use crate::telemetry;

/// weir: Kinesis consumers with leases, per-consumer checkpoints and Firehose-style archiving.
#[derive(Debug, Parser)]
#[command(name = "weir", version, about)]
pub(crate) struct Cli {
    /// Log format.
    #[arg(long, global = true, value_enum, default_value = "human", env = "WEIR_LOG_FORMAT")]
    pub log_format: telemetry::LogFormat,
    /// Log filter: a level (`debug`) sets weir's own logs, while libraries stay at
    /// `info` at most (the AWS SDK's debug lines quote access key ids and requests);
    /// anything else is a tracing `EnvFilter` directive list used as written, e.g.
    /// `info,weir_runtime=debug,aws_smithy_runtime=debug`. Default `info`, and `warn`
    /// for `demo`, which tells its own story on stdout.
    #[arg(long, global = true, env = "WEIR_LOG")]
    pub log_level: Option<String>,
    /// Log lines held for a slow stderr reader. Logging never waits for the reader:
    /// past this many waiting lines, new ones are dropped and counted in
    /// `weir_log_lines_dropped_total`.
    #[arg(long, global = true, env = "WEIR_LOG_QUEUE", default_value_t = crate::lossy::DEFAULT_QUEUE, value_parser = clap::value_parser!(usize))]
    pub log_queue: usize,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
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
    /// Run a KCL MultiLangDaemon application (its `.properties` file, its record
    /// processor in Python, Node.js, ...) on weir, without a JVM.
    Multilang(crate::multilang::command::MultilangArgs),
    /// Look at the lease table: every lease with its owner, state, checkpoints and
    /// open intents (`list`), or one in full (`show`).
    Leases(crate::commands::leases::LeasesArgs),
    /// The enhanced fan-out consumers of the config's stream(s): `list`, `deregister`
    /// (a registered consumer is billed until it is deregistered).
    Efo(crate::commands::efo::EfoArgs),
    /// Explain why shards are not moving (watches the lease table for --observe);
    /// exit 1 when one is stuck.
    Doctor(crate::commands::doctor::DoctorArgs),
    /// Take over a stopped KCL application in place: write weir leases and
    /// checkpoints from its DynamoDB lease table, so weir continues where it stopped.
    ImportKcl(crate::commands::import_kcl::ImportKclArgs),
    /// Configuration tools.
    #[command(subcommand)]
    Config(ConfigCommand),
    /// Archiver prefix tools.
    #[command(subcommand)]
    Prefix(PrefixCommand),
}

#[derive(Debug, Subcommand)]
pub(crate) enum PrefixCommand {
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
pub(crate) enum ConfigCommand {
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
