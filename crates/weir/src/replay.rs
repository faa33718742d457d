//! `weir replay`: run chosen consumers over a past window `[from, to)` of the stream, in
//! the job's own lease namespace (`<leases.namespace>-replay-<job>`), so live
//! checkpoints never move; resumable (the job's checkpoints), shareable by several
//! workers running the same command, reading by polling unless `--efo`.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use tokio_util::sync::CancellationToken;
use weir_core::{Checkpoint, Clock, SystemClock, Timestamp};
use weir_runtime::{TokioClock, WindowReader, Worker};

use crate::config::{ConsumerSection, StreamKind, load};

#[derive(Debug, clap::Args)]
pub struct ReplayArgs {
    /// The TOML config file (stream, leases and the consumers to run).
    #[arg(long, short)]
    config: PathBuf,
    /// Window start (RFC 3339, or epoch milliseconds), inclusive.
    #[arg(long)]
    from: String,
    /// Window end (RFC 3339, or epoch milliseconds), exclusive.
    #[arg(long)]
    to: String,
    /// Consumers of the config to run, comma-separated.
    #[arg(long)]
    consumers: String,
    /// Job name (its lease namespace); default from the window.
    #[arg(long)]
    job: Option<String>,
    /// Put this in front of every archiver's prefixes (e.g. `backfill/`).
    #[arg(long)]
    archive_prefix: Option<String>,
    /// Read with enhanced fan-out instead of polling.
    #[arg(long)]
    efo: bool,
    /// Print the job's progress and exit.
    #[arg(long)]
    status: bool,
}

fn parse_time(field: &str, text: &str) -> Result<Timestamp> {
    if let Ok(ms) = text.parse::<i64>() {
        return Ok(Timestamp::from_millis(ms));
    }
    chrono::DateTime::parse_from_rfc3339(text)
        .map(|t| Timestamp::from_millis(t.timestamp_millis()))
        .with_context(|| format!("{field} {text:?} is neither RFC 3339 nor epoch milliseconds"))
}

pub async fn run(args: ReplayArgs) -> Result<()> {
    let mut config = load(&args.config)?;
    let from = parse_time("--from", &args.from)?;
    let to = parse_time("--to", &args.to)?;
    if to <= from {
        bail!("--to ({}) must be after --from ({})", args.to, args.from);
    }
    if to > SystemClock.now() {
        bail!("--to ({}) is in the future: a replay reads a past window", args.to);
    }
    let wanted: Vec<&str> = args.consumers.split(',').map(str::trim).filter(|s| !s.is_empty()).collect();
    if wanted.is_empty() {
        bail!("--consumers: name at least one consumer");
    }
    let known: Vec<String> = config.consumers.iter().map(|c| c.name().to_owned()).collect();
    for w in &wanted {
        if !known.iter().any(|k| k == w) {
            bail!("--consumers: unknown consumer {w:?}; {} has: {}", args.config.display(), known.join(", "));
        }
    }
    if config.stream.kind == StreamKind::Memory {
        bail!("stream.kind = \"memory\": the in-process stream keeps no history to replay; replay a Kinesis stream");
    }
    config.consumers.retain(|c| wanted.contains(&c.name()));
    for c in &mut config.consumers {
        if let ConsumerSection::Archiver(a) = c {
            a.prefix_prepend = args.archive_prefix.clone();
        }
    }
    let job = args.job.clone().unwrap_or_else(|| format!("{}-{}", from.as_millis(), to.as_millis()));
    if job.is_empty() || !job.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') {
        bail!("--job {job:?}: letters, digits, '-' or '_'");
    }
    config.leases.namespace = format!("{}-replay-{job}", config.leases.namespace);

    let clock = Arc::new(TokioClock::new());
    let wired = crate::run::wire(&config, clock.clone()).await?;
    let shards = wired.catalog.list_shards().await.map_err(|e| anyhow::anyhow!("listing shards: {e}"))?;
    let oldest_start = retention_start(&config).await?;
    if let Some(start) = oldest_start
        && from < start
    {
        bail!(
            "--from ({}) is older than the stream's retention allows (oldest record at about {start:?}); replay from an archive",
            args.from
        );
    }
    if args.status {
        let leases = wired.table.list().await?;
        let done = leases.iter().filter(|l| l.ended).count();
        println!("job {job}: {done} of {} shards done ({} leases)", shards.len(), leases.len());
        for l in &leases {
            let cps: Vec<String> = l.checkpoints.iter().map(|(c, cp)| format!("{c}={cp:?}")).collect();
            println!("  {} {} {}", l.key, if l.ended { "done" } else { "in progress" }, cps.join(" "));
        }
        return Ok(());
    }
    let built = crate::consumers::build(&config.consumers, &wired.clients, clock.clone())?;
    let worker_id = config.worker.id.clone().unwrap_or_else(crate::run::default_worker_id);
    let mut runtime = config.runtime(&worker_id);
    runtime.initial_position = Checkpoint::AtTimestamp(from);
    let reader = Arc::new(WindowReader::new(wired.reader.clone(), to, Arc::new(SystemClock), !args.efo));
    let worker = Worker::new(runtime, wired.table.clone(), reader, wired.catalog.clone(), built.consumers, clock)?;
    let stats = worker.stats();
    let stop = CancellationToken::new();
    crate::run::cancel_on_signal(stop.clone());
    let run = tokio::spawn(worker.run(stop.clone()));
    let bar = crate::replay_progress::Progress::new(shards.len() as u64, &job);
    loop {
        tokio::select! {
            _ = stop.cancelled() => break,
            _ = tokio::time::sleep(Duration::from_millis(500)) => {}
        }
        let leases = wired.table.list().await?;
        let total = wired.catalog.list_shards().await.map(|s| s.len()).unwrap_or(shards.len());
        let done = leases.iter().filter(|l| l.ended).count();
        bar.update(done as u64, total as u64, stats.read_per_shard().values().sum::<u64>());
        if !leases.is_empty() && leases.len() >= total && done == leases.len() {
            break;
        }
    }
    bar.finish();
    stop.cancel();
    run.await.context("replay worker")??;
    let leases = wired.table.list().await?;
    let done = leases.iter().filter(|l| l.ended).count();
    println!(
        "replay {job}: {done} of {} shards done; records read: {}",
        leases.len(),
        stats.read_per_shard().values().sum::<u64>()
    );
    Ok(())
}

/// The oldest arrival time still in the stream, for Kinesis (from its retention).
async fn retention_start(config: &crate::config::Config) -> Result<Option<Timestamp>> {
    if config.stream.kind != StreamKind::Kinesis {
        return Ok(None);
    }
    let client = aws_sdk_kinesis::Client::new(&crate::run::sdk(&config.aws, &config.aws.kinesis_endpoint_url).await);
    let out = client.describe_stream_summary().stream_name(&config.stream.name).send().await;
    let hours = match out {
        Ok(o) => o.stream_description_summary().map(|d| d.retention_period_hours()).unwrap_or(24),
        Err(e) => bail!("stream {}: {}", config.stream.name, aws_sdk_kinesis::error::DisplayErrorContext(&e)),
    };
    let now = SystemClock.now().as_millis();
    Ok(Some(Timestamp::from_millis(now - i64::from(hours) * 3_600_000)))
}
