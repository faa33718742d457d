//! `weir demo`: the whole pipeline on embedded defaults, in one process.
//!
//! An in-process stream of synthetic MCP tool-call events (4 shards by default) is read
//! by two workers that share a SQLite lease table. A third of the way in, one shard is
//! split; two thirds in, its children are merged again. Workers balance leases, hand
//! them over gracefully, process parents before children and checkpoint per consumer.
//! At the end the demo drains, stops the workers gracefully and prints where every
//! record went.

use std::collections::BTreeMap;
use std::io::Read;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use tokio_util::sync::CancellationToken;
use weir_core::ports::LeaseTable;
use weir_local::{GeneratorConfig, MemoryStream, SqliteLeaseTable, StreamOptions};
use weir_runtime::{TokioClock, Worker};

use crate::wiring::{cancel_on_signal, spawn_generator};

/// Options of `weir demo`.
#[derive(Debug, clap::Args)]
pub struct DemoArgs {
    /// How long to produce events.
    #[arg(long, default_value = "20s", value_parser = humantime::parse_duration)]
    duration: Duration,
    /// Produce this many events instead of running for `--duration` (the run lasts
    /// records / rate seconds).
    #[arg(long)]
    records: Option<u64>,
    /// Events per second.
    #[arg(long, default_value_t = 2_000)]
    rate: u32,
    /// Open shards at start.
    #[arg(long, default_value_t = 4)]
    shards: usize,
    /// Workers sharing the lease table.
    #[arg(long, default_value_t = 2)]
    workers: usize,
    /// Output directory (leases database, written objects); cleared at start.
    #[arg(long, default_value = "weir-demo-out")]
    out: PathBuf,
    /// Also serve /metrics, /healthz and /readyz here.
    #[arg(long)]
    http: Option<SocketAddr>,
}

fn prepare(out: &Path) -> Result<()> {
    std::fs::create_dir_all(out).with_context(|| format!("cannot create {}", out.display()))?;
    for name in ["leases.db", "leases.db-wal", "leases.db-shm", "catalog.db", "catalog.db-wal", "catalog.db-shm"] {
        let _ = std::fs::remove_file(out.join(name));
    }
    // What an earlier run wrote, so the summary counts this run's output only.
    for dir in ["archive", "enriched", "warehouse", "table-errors"] {
        let dir = out.join(dir);
        if dir.exists() {
            std::fs::remove_dir_all(&dir).with_context(|| format!("cannot clear {}", dir.display()))?;
        }
    }
    Ok(())
}

/// The demo's Iceberg table, in the embedded SQL catalog (`<out>/catalog.db`,
/// warehouse `<out>/warehouse`, catalog name `weir`): the MCP event's columns,
/// partitioned by tenant and day. Made here because weir writes existing tables.
const DEMO_TABLE: (&str, &str) = ("mcp", "tool_calls");

async fn demo_table(out: &Path) -> Result<(Arc<dyn iceberg::Catalog>, iceberg::TableIdent)> {
    use iceberg::spec::{NestedField, PrimitiveType, Schema, Transform, Type, UnboundPartitionSpec};
    let (database, warehouse) =
        (std::path::absolute(out.join("catalog.db"))?, std::path::absolute(out.join("warehouse"))?);
    std::fs::create_dir_all(&warehouse)?;
    let catalog = weir_local::sql_catalog("weir", &database, &warehouse).await?;
    let ns = iceberg::NamespaceIdent::new(DEMO_TABLE.0.into());
    catalog.create_namespace(&ns, Default::default()).await?;
    let string = || Type::Primitive(PrimitiveType::String);
    let schema = Schema::builder()
        .with_fields(vec![
            NestedField::required(1, "tenantId", string()).into(),
            NestedField::optional(2, "toolName", string()).into(),
            NestedField::required(3, "sessionId", string()).into(),
            NestedField::required(4, "ts", Type::Primitive(PrimitiveType::Timestamptz)).into(),
            NestedField::optional(5, "durationMs", Type::Primitive(PrimitiveType::Long)).into(),
            NestedField::optional(6, "success", Type::Primitive(PrimitiveType::Boolean)).into(),
            NestedField::optional(7, "errorCode", string()).into(),
        ])
        .build()?;
    let spec = UnboundPartitionSpec::builder()
        .add_partition_field(1, "tenant", Transform::Identity)?
        .add_partition_field(4, "day", Transform::Day)?
        .build();
    let creation =
        iceberg::TableCreation::builder().name(DEMO_TABLE.1.into()).schema(schema).partition_spec(spec).build();
    catalog.create_table(&ns, creation).await?;
    Ok((catalog, iceberg::TableIdent::new(ns, DEMO_TABLE.1.into())))
}

/// The demo table's rows (its current snapshot's `total-records`) and snapshots.
async fn table_rows(catalog: &dyn iceberg::Catalog, table: &iceberg::TableIdent) -> Result<(u64, usize)> {
    let t = catalog.load_table(table).await?;
    let rows = match t.metadata().current_snapshot() {
        None => 0,
        Some(s) => s
            .summary()
            .additional_properties
            .get("total-records")
            .context("the snapshot summary has no total-records")?
            .parse()?,
    };
    Ok((rows, t.metadata().snapshots().count()))
}

/// The demo's alert rule: error rate per tenant over a sliding 10 s window.
pub const DEMO_RULES: &str = r#"
name = "alerts"
allowed_lateness = "1s"
[[rules]]
name = "tenant-error-rate"
group_by = [".tenantId"]
window = "6s"
every = "1s"
aggregate = "error_rate"
condition = "> 0.2"
min_events = 20
cooldown = "30s"
"#;

/// Prints alerts as they leave the sink queue, and keeps them for the summary.
struct PrintSink(Arc<std::sync::Mutex<Vec<String>>>);

#[async_trait::async_trait]
impl weir_alerting::sink::AlertSink for PrintSink {
    fn name(&self) -> &str {
        "print"
    }
    async fn send(&self, a: &weir_alerting::Alert) -> Result<(), weir_alerting::sink::SendError> {
        println!("  alert: {}", a.text);
        self.0.lock().unwrap_or_else(|p| p.into_inner()).push(a.text.clone());
        Ok(())
    }
}

fn demo_alerting(clock: Arc<TokioClock>, seen: Arc<std::sync::Mutex<Vec<String>>>) -> Result<weir_alerting::Alerting> {
    let config: weir_alerting::AlertingConfig = toml::from_str(DEMO_RULES).context("demo rules")?;
    let rules = config.rules()?;
    Ok(weir_alerting::Alerting::with_sinks(&config, rules, vec![Arc::new(PrintSink(seen))], clock))
}

/// The demo's enrichment: the design note's normalisation plus stream metadata, as
/// NDJSON files (one per worker).
fn demo_enrichment(path: &Path, clock: Arc<TokioClock>) -> Result<weir_enrichment::Enricher> {
    let config: weir_enrichment::EnrichmentConfig = toml::from_str("name = \"enrich\"\n").context("demo enrichment")?;
    let output = Arc::new(weir_local::NdjsonFileWriter::open(path).with_context(|| format!("{}", path.display()))?);
    Ok(weir_enrichment::Enricher::new(config, output, None, clock)?)
}

fn demo_runtime(id: &str) -> weir_runtime::RuntimeConfig {
    // Shorter timings than production so balancing and handoffs show in seconds.
    let mut c = weir_runtime::RuntimeConfig::new(id.into());
    c.failover = Duration::from_secs(3);
    c.renew_interval = Duration::from_secs(1);
    c.taker_interval = Duration::from_secs(2);
    c.handoff_timeout = Duration::from_secs(3);
    c.shard_sync_interval = Duration::from_secs(2);
    c.checkpoint_interval = Duration::from_millis(500);
    c.tick_interval = Duration::from_millis(500);
    c.parent_poll_interval = Duration::from_millis(250);
    c
}

pub async fn run(args: DemoArgs, registry: &crate::plugin::Registry) -> Result<()> {
    if args.shards == 0 || args.workers == 0 || args.rate == 0 {
        bail!("--shards, --workers and --rate must be positive");
    }
    let duration = match args.records {
        Some(n) => Duration::from_secs_f64(n as f64 / f64::from(args.rate)),
        None => args.duration,
    };
    prepare(&args.out)?;
    let db = args.out.join("leases.db");
    let files_dir = args.out.join("archive");
    let clock = Arc::new(TokioClock::new());
    let stream = MemoryStream::new(StreamOptions { shards: args.shards, ..StreamOptions::default() }, clock.clone());
    let mut sections = crate::consumers::demo_sections(&files_dir);
    let (catalog, table_ident) = demo_table(&args.out).await.context("the demo's Iceberg table")?;
    sections.push(crate::config::ConsumerEntry::new(
        "iceberg",
        "mcp-table",
        serde_json::json!({
            "table": format!("{}.{}", DEMO_TABLE.0, DEMO_TABLE.1),
            "catalog": {"type": "sql", "database": args.out.join("catalog.db"), "warehouse": args.out.join("warehouse")},
            "buffer_interval_seconds": crate::consumers::DEMO_INTERVAL.as_secs(),
            "error_output": {"directory": args.out.join("table-errors")},
        }),
    ));
    let names: Vec<String> = sections.iter().map(|s| s.name().to_owned()).collect();

    let shutdown = CancellationToken::new();
    cancel_on_signal(shutdown.clone());
    let stop_workers = CancellationToken::new();
    let mut workers = Vec::new();
    let mut stats: Vec<crate::status::WorkerView> = Vec::new();
    let mut status = Vec::new();
    let alerts_seen = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    for i in 1..=args.workers {
        let id = format!("demo-worker-{i}");
        let table = SqliteLeaseTable::open(&db, "demo")?;
        let env = crate::plugin::BuildEnv {
            worker_id: id.clone(),
            clock: clock.clone(),
            aws: Default::default(),
            stream_name: "demo".into(),
            archive_prefix: None,
            replay_job: None,
        };
        let mut built = registry.build(&sections, &env).await?;
        built.consumers.push(Box::new(demo_alerting(clock.clone(), alerts_seen.clone())?));
        built
            .consumers
            .push(Box::new(demo_enrichment(&args.out.join("enriched").join(format!("{id}.ndjson")), clock.clone())?));
        status.extend(built.status);
        let w = Worker::new(
            demo_runtime(&id),
            Arc::new(table),
            Arc::new(stream.clone()),
            Arc::new(stream.clone()),
            built.consumers,
            clock.clone(),
        )?;
        stats.push(crate::status::WorkerView::new(id.clone(), "in-process", w.stats()));
        let token = stop_workers.clone();
        workers.push(tokio::spawn(async move { w.run(token).await }));
    }
    if let Some(addr) = args.http {
        crate::http::serve(addr, crate::http::install_recorder()?, stats.clone(), status.clone(), stop_workers.clone())
            .await?;
    }
    println!(
        "weir demo: {} shards, {} workers, {} events/s for {:?}; output in {}",
        args.shards,
        args.workers,
        args.rate,
        args.duration,
        args.out.display()
    );

    let produce_stop = CancellationToken::new();
    let generator = GeneratorConfig::default();
    // Mid-run incident: one tenant starts failing half its calls; the alert rule fires.
    let incident = Some((duration / 3, 3, 0.5));
    let producer = spawn_generator(stream.clone(), generator, args.rate, args.records, incident, produce_stop.clone());
    let third = duration / 3;
    let reshard = async {
        tokio::time::sleep(third).await;
        let first = stream.open_shards()[0].clone();
        let (a, b) = stream.split(&first).context("split")?;
        println!("  resharding: split {first} into {a} and {b}");
        tokio::time::sleep(third).await;
        let merged = stream.merge(&a, &b).context("merge")?;
        println!("  resharding: merged {a} and {b} into {merged}");
        tokio::time::sleep(duration.saturating_sub(third * 2)).await;
        // With --records, let the generator finish its last events.
        while args.records.is_some_and(|n| stream.record_counts().iter().map(|(_, c)| *c as u64).sum::<u64>() < n) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        anyhow::Ok(())
    };
    tokio::select! {
        r = reshard => r?,
        _ = shutdown.cancelled() => println!("  interrupted: draining"),
    }
    produce_stop.cancel();
    let produced = producer.await.unwrap_or(0);

    // Drain: wait until the count consumers have seen every record.
    // Records the `count` consumer processed, over every worker.
    let total_counted = || {
        stats
            .iter()
            .flat_map(|s| s.stats.lanes())
            .filter(|(k, _)| k.1.as_str() == "count")
            .map(|(_, v)| v.records)
            .sum::<u64>()
    };
    let drain_deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while total_counted() < produced && tokio::time::Instant::now() < drain_deadline && !shutdown.is_cancelled() {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    stop_workers.cancel();
    for w in workers {
        w.await.context("worker task")??;
    }

    let table = SqliteLeaseTable::open(&db, "demo")?;
    let leases = table.list().await?;
    let stream_counts: BTreeMap<_, _> = stream.record_counts().into_iter().collect();
    let mut lanes = BTreeMap::new();
    for s in &stats {
        for (k, v) in s.stats.lanes() {
            let e: &mut weir_runtime::LaneStats = lanes.entry(k).or_default();
            e.records += v.records;
            e.detaches += v.detaches;
            e.failures += v.failures;
        }
    }
    println!("\nShards, leases and checkpoints (records processed per consumer, summed over workers):");
    println!("{}", crate::summary::shards_table(&leases, &stream_counts, &lanes, &names));
    let (objects, lines) = count_output(&files_dir.join("tool-events"))?;
    let (error_objects, error_lines) = count_output(&files_dir.join("tool-events-errors"))?;
    println!("\nRecords produced:           {produced}");
    println!("Records counted (count):    {}", total_counted());
    println!("Archived (mcp-archive):     {lines} records in {objects} gzip NDJSON objects (exactly once)");
    println!(
        "Error output:               {error_lines} malformed records in {error_objects} objects (with the reason)"
    );
    let (rows, snapshots) = table_rows(catalog.as_ref(), &table_ident).await?;
    let table_errors = count_lines(&args.out.join("table-errors"))?;
    println!(
        "Iceberg table (mcp-table):  {rows} rows in {snapshots} snapshots of {}.{}, {table_errors} records in its error output (exactly once)",
        DEMO_TABLE.0, DEMO_TABLE.1
    );
    let enriched_lines: usize = std::fs::read_dir(args.out.join("enriched"))
        .map(|d| d.flatten().map(|e| std::fs::read_to_string(e.path()).map(|t| t.lines().count()).unwrap_or(0)).sum())
        .unwrap_or(0);
    println!("Enriched (enrich):          {enriched_lines} records in {}/enriched/*.ndjson", args.out.display());
    let alerts = alerts_seen.lock().unwrap_or_else(|p| p.into_inner()).len();
    println!("Alerts (tenant-error-rate): {alerts} (t-003 starts failing half its calls a third of the way in)");
    println!("\nOutput:");
    println!("  leases and checkpoints    {} (SQLite, namespace \"demo\")", db.display());
    println!(
        "  archive                   {}/tool-events/tenant=<t>/tool=<tool>/year=/month=/day=/hour=/mcp-archive-1-<time>-<id>.gz",
        files_dir.display()
    );
    println!("  error output              {}/tool-events-errors/processing-failed/...", files_dir.display());
    println!(
        "  try: duckdb -c \"select tenant, count(*) from read_json_auto('{}/tool-events/*/*/*/*/*/*/*.gz', hive_partitioning=true) group by 1\"",
        files_dir.display()
    );
    println!(
        "  table                     {}.{} in {}/catalog.db (Iceberg SQL catalog \"weir\", warehouse {}/warehouse)",
        DEMO_TABLE.0,
        DEMO_TABLE.1,
        args.out.display(),
        args.out.display()
    );
    println!(
        "  try: python -c \"from pyiceberg.catalog.sql import SqlCatalog; c = SqlCatalog('weir', uri='sqlite:///{db}', warehouse='file://{wh}'); print(c.load_table('{}.{}').scan().to_arrow().group_by('tenantId').aggregate([('sessionId', 'count')]))\"",
        DEMO_TABLE.0,
        DEMO_TABLE.1,
        db = std::path::absolute(args.out.join("catalog.db"))?.display(),
        wh = std::path::absolute(args.out.join("warehouse"))?.display(),
    );
    if total_counted() < produced || lines + error_lines != produced {
        bail!("archived {lines} + {error_lines} error records for {produced} produced");
    }
    if rows + table_errors != produced {
        bail!("the table has {rows} rows and its error output {table_errors} records for {produced} produced");
    }
    Ok(())
}

/// NDJSON lines in the (uncompressed) files under `dir`.
fn count_lines(dir: &Path) -> Result<u64> {
    let mut lines = 0u64;
    for path in files_under(dir)? {
        lines += std::fs::read(&path)?.iter().filter(|b| **b == b'\n').count() as u64;
    }
    Ok(lines)
}

/// Objects and NDJSON lines under `dir`.
fn count_output(dir: &Path) -> Result<(usize, u64)> {
    let files = files_under(dir)?;
    let mut lines = 0u64;
    for path in &files {
        let mut text = Vec::new();
        flate2::read::GzDecoder::new(std::fs::File::open(path)?)
            .read_to_end(&mut text)
            .with_context(|| format!("{} is not valid gzip", path.display()))?;
        lines += text.iter().filter(|b| **b == b'\n').count() as u64;
    }
    Ok((files.len(), lines))
}

/// The files under `dir`, at any depth (none when it does not exist).
fn files_under(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries {
            let path = e?.path();
            if path.is_dir() {
                stack.push(path);
            } else {
                files.push(path);
            }
        }
    }
    Ok(files)
}
