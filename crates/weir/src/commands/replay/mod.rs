//! `weir replay`: run chosen consumers over a past window `[from, to)` of the stream,
//! or over the objects an archive holds for that window, in the job's own lease
//! namespace (`<leases.namespace>-replay-<job>`), so live checkpoints never move;
//! resumable (the job's checkpoints), shareable by several workers running the same
//! command, reading by polling unless `--efo`; `--status` and `--cancel` act on a job
//! from anywhere.

pub(crate) mod job;
pub(crate) mod progress;
pub(crate) mod source;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use tokio_util::sync::CancellationToken;
use weir_core::ports::{ShardReader, StreamCatalog};
use weir_core::{Checkpoint, Clock, SystemClock, Timestamp};
use weir_runtime::{TokioClock, WindowReader, Worker};

use crate::config::{Config, StreamKind, load};
use crate::plugin::Registry;
use job::JobState;
use progress::{Measure, Progress, Snapshot};

#[derive(Debug, clap::Args)]
pub struct ReplayArgs {
    /// The TOML config file (stream, leases and the consumers to run).
    #[arg(long, short)]
    config: PathBuf,
    /// The stream to replay (default: the config's `stream.name`).
    #[arg(long)]
    stream: Option<String>,
    /// Window start (RFC 3339, or epoch milliseconds), inclusive.
    #[arg(long)]
    from: Option<String>,
    /// Window end (RFC 3339, epoch milliseconds, or `now`: the time the command
    /// starts), exclusive.
    #[arg(long)]
    to: Option<String>,
    /// Consumers of the config to run, comma-separated.
    #[arg(long)]
    consumers: Option<String>,
    /// Job name (its lease namespace); default from the window.
    #[arg(long)]
    job: Option<String>,
    /// Put this in front of every archiver's prefixes (e.g. `backfill/`).
    #[arg(long)]
    archive_prefix: Option<String>,
    /// Read archived objects instead of the stream: `s3://bucket/prefix` or a directory.
    /// Objects are chosen by the time in their keys.
    #[arg(long, value_name = "s3://BUCKET/PREFIX | DIR")]
    from_archive: Option<String>,
    /// Time zone of the times in the archive's keys (Firehose's CustomTimeZone).
    #[arg(long, default_value = "UTC")]
    archive_time_zone: String,
    /// A shard that stays silent this long after the window's end is done (a shard
    /// with a record at or after the end is done at once).
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    end_idle: Duration,
    /// Read with enhanced fan-out instead of polling.
    #[arg(long)]
    efo: bool,
    /// Print the job's progress and exit.
    #[arg(long)]
    status: bool,
    /// Stop the job on every worker running it (they drain and exit) and keep it from
    /// being started again.
    #[arg(long, conflicts_with = "status")]
    cancel: bool,
    /// Serve `/metrics` and `/readyz` here while the job runs.
    #[arg(long)]
    listen: Option<std::net::SocketAddr>,
}

fn parse_time(field: &str, text: &str) -> Result<Timestamp> {
    if let Ok(ms) = text.parse::<i64>() {
        return Ok(Timestamp::from_millis(ms));
    }
    chrono::DateTime::parse_from_rfc3339(text)
        .map(|t| Timestamp::from_millis(t.timestamp_millis()))
        .with_context(|| format!("{field} {text:?} is neither RFC 3339 nor epoch milliseconds"))
}

/// The window, checked.
fn window(args: &ReplayArgs) -> Result<(Timestamp, Timestamp)> {
    let (Some(from_text), Some(to_text)) = (&args.from, &args.to) else {
        bail!("--from and --to are required (the window [from, to) to replay)");
    };
    let from = parse_time("--from", from_text)?;
    let to = parse_time("--to", to_text)?;
    if to <= from {
        bail!("--to ({to_text}) must be after --from ({from_text})");
    }
    if to > SystemClock.now() {
        bail!("--to ({to_text}) is in the future: a replay reads a past window");
    }
    Ok((from, to))
}

fn job_name(args: &ReplayArgs) -> Result<String> {
    let job = match &args.job {
        Some(j) => j.clone(),
        None if args.from.is_none() || args.to.is_none() => {
            bail!("name the job with --job, or give its window with --from and --to")
        }
        None => {
            // A window that is given but wrong: say what is wrong with it.
            let (from, to) = window(args)?;
            format!("{}-{}", from.as_millis(), to.as_millis())
        }
    };
    if job.is_empty() || !job.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') {
        bail!("--job {job:?}: letters, digits, '-' or '_'");
    }
    Ok(job)
}

/// Keeps the chosen consumers, with the archive prefix override.
fn choose_consumers(config: &mut Config, args: &ReplayArgs) -> Result<()> {
    let list = args.consumers.as_deref().unwrap_or("");
    let wanted: Vec<&str> = list.split(',').map(str::trim).filter(|s| !s.is_empty()).collect();
    if wanted.is_empty() {
        bail!("--consumers: name at least one consumer of {}", args.config.display());
    }
    let known: Vec<String> = config.consumers.iter().map(|c| c.name().to_owned()).collect();
    for w in &wanted {
        if !known.iter().any(|k| k == w) {
            bail!("--consumers: unknown consumer {w:?}; {} has: {}", args.config.display(), known.join(", "));
        }
    }
    config.consumers.retain(|c| wanted.contains(&c.name()));
    Ok(())
}

pub async fn run(mut args: ReplayArgs, registry: &Registry) -> Result<()> {
    if args.to.as_deref() == Some("now") {
        // Fixed once, so the job's name and its window agree.
        args.to = Some(SystemClock.now().as_millis().to_string());
    }
    let mut config = load(&args.config, registry)?;
    config = config.with_one_stream(args.stream.as_deref())?;
    let job = job_name(&args)?;
    // `--efo` reads as the job's own consumer, never the live fleet's (two readers of
    // one consumer take each other's subscriptions); it is deregistered when the job
    // ends. Without `--efo` the replay polls.
    let replay_consumer = match (args.efo, &args.from_archive) {
        (true, None) => {
            let live = config
                .stream
                .efo_consumer
                .clone()
                .unwrap_or_else(|| crate::config::derived_efo_consumer(&config.leases.namespace));
            let name = format!("{live}-replay-{job}");
            if !crate::config::is_efo_consumer_name(&name) {
                bail!(
                    "--efo: {name:?} cannot name an enhanced fan-out consumer (1-128 of A-Z a-z 0-9 _ . -): use a shorter --job"
                );
            }
            config.stream.efo_consumer = Some(name.clone());
            Some(name)
        }
        _ => {
            config.stream.efo = false;
            config.stream.efo_consumer = None;
            None
        }
    };
    config.leases.namespace = format!("{}-replay-{job}", config.leases.namespace);
    if args.status || args.cancel {
        let table = crate::wiring::lease_table(&config).await?;
        if args.cancel {
            job::cancel(table.as_ref()).await?;
            println!("job {job}: cancelled; workers running it drain and stop");
            return Ok(());
        }
        print_status(&job, &job::read(table.as_ref()).await?);
        return Ok(());
    }
    let (from, to) = window(&args)?;
    choose_consumers(&mut config, &args)?;
    if args.from_archive.is_none() && config.stream.kind == StreamKind::Memory {
        bail!(
            "stream.kind = \"memory\": the in-process stream keeps no history to replay; replay a Kinesis stream or --from-archive"
        );
    }
    let clock = Arc::new(TokioClock::new());
    let table = crate::wiring::lease_table(&config).await?;
    let started = job::read(table.as_ref()).await?;
    if started.cancelled {
        bail!("job {job} was cancelled; start the window again under another --job name");
    }
    let (reader, catalog, measure, initial): (Arc<dyn ShardReader>, Arc<dyn StreamCatalog>, _, _) = match &args
        .from_archive
    {
        Some(location) => {
            let source = source::open(&config, location, &args.archive_time_zone, from, to).await?;
            tracing::info!(
                objects = source.objects().len(),
                shards = source.groups().len(),
                "archive objects in the window, read in runs of consecutive objects"
            );
            same_runs(&job, &started, &source)?;
            let source = Arc::new(source);
            (source.clone(), source, Measure::Objects, Checkpoint::TrimHorizon)
        }
        None => {
            let (reader, catalog, _) = crate::wiring::wire_stream(&config, clock.clone()).await?;
            if let Some(start) = retention_start(&config).await?
                && from < start
            {
                bail!(
                    "--from is older than the stream's retention allows (oldest record at about {start:?}); replay from an archive with --from-archive"
                );
            }
            let reader =
                Arc::new(WindowReader::new(reader, to, Arc::new(SystemClock), !args.efo).with_idle(args.end_idle));
            (reader, catalog, Measure::Window { from, to }, Checkpoint::AtTimestamp(from))
        }
    };
    let worker_id = config.worker.id.clone().unwrap_or_else(crate::wiring::default_worker_id);
    let mut env = crate::wiring::build_env(&config, &worker_id, clock.clone());
    env.archive_prefix = args.archive_prefix.clone();
    env.replay_job = Some(job.clone());
    let built = registry.build(&config.consumers, &env).await?;
    let reading = match &args.from_archive {
        Some(location) => format!("archive {location}"),
        None => config.describe_stream(args.efo),
    };
    tracing::info!(
        job = %job,
        worker = %worker_id,
        %reading,
        leases = %config.leases.describe(),
        consumers = %config.consumers.iter().map(|c| c.name()).collect::<Vec<_>>().join(", "),
        "replay starting"
    );
    let mut runtime = config.runtime(&worker_id);
    runtime.initial_position = initial;
    // A replay's shards (archived objects, or the stream's shards at the window's end)
    // end at about the same time, and nothing waits for them: closing each on its own
    // would have the archiver write an object per partition at every shard's end.
    runtime.close_ends_together = true;
    let worker = Worker::new(runtime, table.clone(), reader, catalog.clone(), built.consumers, clock)?;
    let stats = worker.stats();
    let stop = CancellationToken::new();
    crate::wiring::cancel_on_signal(stop.clone());
    let http = match args.listen {
        Some(addr) => Some(
            crate::http::serve(
                addr,
                crate::http::install_recorder()?,
                vec![crate::status::WorkerView {
                    unhealthy_after: config.worker.unhealthy_after,
                    ..crate::status::WorkerView::new(worker_id.clone(), "replay", stats.clone())
                }],
                built.status,
                stop.clone(),
            )
            .await?,
        ),
        None => None,
    };
    // Every shard of a past window is listed now; a shard created later still gets a
    // lease, which the count of leases below takes in.
    let listed = catalog.list_shards().await.map(|s| s.len()).unwrap_or(0);
    let run = tokio::spawn(worker.run(stop.clone()));
    let mut progress = Progress::new(&job, measure);
    let mut cancelled = false;
    let mut complete = false;
    loop {
        tokio::select! {
            _ = stop.cancelled() => break,
            _ = tokio::time::sleep(Duration::from_millis(500)) => {}
        }
        let state = job::read(table.as_ref()).await?;
        if state.cancelled {
            tracing::warn!(job = %job, "job cancelled; draining");
            cancelled = true;
            break;
        }
        let total = listed.max(state.leases.len());
        let reads = stats.reads();
        let unfinished = state.leases.iter().filter(|l| !l.ended).map(|l| &l.key);
        let covered_to = unfinished
            .filter_map(|k| reads.get(k).and_then(|r| r.last_arrival))
            .min()
            .unwrap_or(if state.done() == total { to } else { from });
        progress.update(Snapshot {
            shards_done: state.done() as u64,
            shards: total as u64,
            records: reads.values().map(|r| r.records).sum(),
            bytes: reads.values().map(|r| r.bytes).sum(),
            covered_to,
        });
        if !state.leases.is_empty() && state.leases.len() >= total && state.done() == state.leases.len() {
            complete = true;
            break;
        }
    }
    progress.finish();
    stop.cancel();
    run.await.context("replay worker")??;
    if let Some(h) = http {
        let _ = h.await;
    }
    let state = job::read(table.as_ref()).await?;
    let reads = stats.reads();
    println!(
        "replay {job}: {}{} of {} shards done; this worker read {} records ({} bytes)",
        if cancelled { "cancelled; " } else { "" },
        state.done(),
        state.leases.len(),
        reads.values().map(|r| r.records).sum::<u64>(),
        reads.values().map(|r| r.bytes).sum::<u64>(),
    );
    // The job's consumer is billed while registered: gone once the job is over
    // (interrupted, it stays for the run that resumes the job).
    if let Some(name) = replay_consumer
        && (complete || cancelled)
    {
        let client = weir_aws::clients::kinesis(&config.aws.endpoints()).await;
        match weir_aws::kinesis::deregister_efo_consumer(&client, &config.stream.name, &name).await {
            Ok(true) => println!("deregistered enhanced fan-out consumer {name}"),
            Ok(false) => {}
            Err(e) => {
                tracing::warn!(error = %e, "the job's enhanced fan-out consumer stays registered; `weir efo deregister` removes it")
            }
        }
    }
    Ok(())
}

/// A job resumed over an archive reads the runs of objects it started with: a listing
/// that changed (objects added to or deleted from the window) cuts other runs, and
/// reading them would write again what the old runs already replayed.
fn same_runs(job: &str, state: &JobState, source: &weir_runtime::archive::ArchiveSource) -> Result<()> {
    let now: std::collections::HashSet<&str> = source.groups().iter().map(|g| g.id.as_str()).collect();
    if let Some(gone) = state.leases.iter().find(|l| !now.contains(l.key.as_str())) {
        bail!(
            "job {job}: the archive's objects in the window are not those the job started with (its run {} is not in the listing now: objects were added or deleted); restore them, or replay under a new --job (what the job already replayed would be written again)",
            gone.key.as_str()
        );
    }
    Ok(())
}

fn print_status(job: &str, state: &JobState) {
    let phase = if state.cancelled {
        "cancelled"
    } else if state.leases.is_empty() {
        "not started"
    } else if state.done() == state.leases.len() {
        "done"
    } else {
        "in progress"
    };
    println!("job {job}: {phase}; {} of {} shards done", state.done(), state.leases.len());
    for l in &state.leases {
        let cps: Vec<String> = l.checkpoints.iter().map(|(c, cp)| format!("{c}={cp:?}")).collect();
        let owner = l.owner.as_ref().map(|o| o.to_string()).unwrap_or_else(|| "-".into());
        println!("  {} {} owner={owner} {}", l.key, if l.ended { "done" } else { "in progress" }, cps.join(" "));
    }
}

/// The oldest arrival time still in the stream, for Kinesis (from its retention).
async fn retention_start(config: &Config) -> Result<Option<Timestamp>> {
    if config.stream.kind != StreamKind::Kinesis {
        return Ok(None);
    }
    let client = weir_aws::clients::kinesis(&config.aws.endpoints()).await;
    let hours = weir_aws::kinesis::retention_hours(&client, &config.stream.name).await?;
    let now = SystemClock.now().as_millis();
    Ok(Some(Timestamp::from_millis(now - i64::from(hours) * 3_600_000)))
}
