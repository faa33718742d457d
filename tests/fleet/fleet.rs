//! A fleet of real weir containers (the image deploy/Dockerfile builds, run with podman
//! on the host network) against ferrokinesis and moto on the host, while a producer
//! writes MCP events steadily into a 4-shard stream:
//!
//! 1. three workers start;
//! 2. rolling deploy: each worker in turn is replaced (the new one started and ready
//!    first, then the old one stopped with SIGTERM, which must drain and exit 0); a
//!    shard is split;
//! 3. one worker is SIGKILLed and a replacement started;
//! 4. scale 3 -> 5 -> 2 (the three leaving ones stopped with SIGTERM).
//!
//! The workers run with the production timings (failover 10 s, taker cycles 3.3 s) and
//! CloudWatch EMF metrics on.
//!
//! Then: DuckDB finds every produced record in the S3 archive exactly once (archiver in
//! exactly-once mode), every shard's checkpoints are at its end, the longest
//! processing pause of any shard (arrival to processed, from the `log` consumer's batch
//! lines) is printed for the steady state, the rolling deploy and the kill; each shard's
//! pause during the rolling deploy stays under [`ROLLING_PAUSE_BOUND`] beyond the
//! steady state's (target 5 s); malformed events are in the error output once each;
//! and the EMF lines carry every metric the CloudFormation alarms read, in namespace
//! `weir` with dimension `Application` (and per archiver, `Application` + `Archiver`).
//!
//! Needs the image: run through `tests/fleet/run.sh`, which builds it. Settings:
//! `WEIR_FLEET_IMAGE` (default localhost/weir:dev), `WEIR_FLEET_RATE` events/s (default
//! 700), `WEIR_FLEET_MIN_EVENTS` (default 50,000).
#![allow(clippy::unwrap_used, clippy::print_stdout)] // a test: a failed expectation is a failed test

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use weir_aws::DynamoDbLeaseTable;
use weir_aws::kinesis::producer::{Outgoing, Producer};
use weir_core::ports::LeaseTable;
use weir_core::{Checkpoint, ConsumerName, SequenceNumber, ShardId};
use weir_e2e::patience::{Patience, cpu_ticks};
use weir_e2e::{
    archiver_toml, create_stream, download, duckdb, dynamodb, free_port, kinesis, metadata_extraction, s3, weir_command,
};
use weir_testkit::Emulator;

const STREAM: &str = "fleet-events";
const BUCKET: &str = "weir-fleet";
const TABLE: &str = "weir-fleet-leases";

/// The most a shard may go unprocessed during the rolling deploy (arrival to processed;
/// ferrokinesis's arrival times are whole seconds, so the figure is within one) beyond
/// the longest delay of the steady state before it, measured in the same run: that
/// baseline is what this machine's load and the debug build cost every batch (on a
/// quiet machine 2–4 s, on a busy one more), and the rolling deploy must add at most
/// this much to it. The target is 5 s in all; above baseline + bound the test fails.
const ROLLING_PAUSE_BOUND: f64 = 10.0;

/// Every `MALFORMED`-th event (index `MALFORMED - 1`, `2 * MALFORMED - 1`, ...) is not
/// JSON: the archive's error output must hold each of them once, and the data none.
const MALFORMED: u64 = 997;

/// The metrics in namespace `weir` that the CloudFormation template's alarms and
/// scaling policies read (every `MetricName:` after a `Namespace: weir`), so that an
/// alarm added to the template is checked here too.
fn alarm_metrics() -> BTreeSet<String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/cloudformation/weir.yaml");
    let template = std::fs::read_to_string(&path).unwrap();
    let mut metrics = BTreeSet::new();
    let mut in_weir = false;
    for line in template.lines().map(str::trim) {
        if let Some(ns) = line.strip_prefix("Namespace:") {
            in_weir = ns.trim() == "weir";
        } else if let Some(name) = line.strip_prefix("MetricName:")
            && in_weir
        {
            metrics.insert(name.trim().to_owned());
            in_weir = false;
        }
    }
    assert!(metrics.len() >= 5, "alarm metrics of {}: {metrics:?}", path.display());
    metrics
}

fn is_malformed(i: u64) -> bool {
    i % MALFORMED == MALFORMED - 1
}

fn env_or<T: std::str::FromStr>(key: &str, default: T) -> T {
    std::env::var(key).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64
}

fn podman() -> Command {
    let mut c = Command::new("podman");
    let conf = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/container/containers.conf");
    c.env("CONTAINERS_CONF", conf);
    c
}

fn podman_ok(args: &[&str]) -> String {
    let out = podman().args(args).output().expect("podman");
    assert!(out.status.success(), "podman {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// The containers of one test run; every one is removed when the fleet drops.
struct Fleet {
    image: String,
    run: String,
    config: PathBuf,
    /// worker id -> (container name, metrics port)
    workers: BTreeMap<String, (String, u16)>,
    live: BTreeSet<String>,
}

impl Fleet {
    fn start(&mut self, id: &str) {
        let port = free_port();
        let name = format!("weir-fleet-{}-{id}", self.run);
        let mount = format!("{}:/etc/weir/weir.toml:ro", self.config.display());
        podman_ok(&[
            "run",
            "-d",
            "--name",
            &name,
            "--network=host",
            "--read-only",
            "-v",
            &mount,
            "-e",
            "AWS_ACCESS_KEY_ID=test",
            "-e",
            "AWS_SECRET_ACCESS_KEY=test",
            "-e",
            "AWS_REGION=us-east-1",
            "-e",
            &format!("WEIR_WORKER__ID={id}"),
            "-e",
            &format!("WEIR_HTTP__LISTEN=127.0.0.1:{port}"),
            "-e",
            &format!("WEIR_HEALTH_URL=http://127.0.0.1:{port}/readyz"),
            "-e",
            "WEIR_LOG_FORMAT=json",
            "-e",
            "WEIR_LOG=info,weir_runtime::consumers::log=debug",
            &self.image,
        ]);
        self.workers.insert(id.to_owned(), (name, port));
        self.live.insert(id.to_owned());
    }

    /// Waits until the worker answers `/readyz` with 200 (through `weir health`).
    fn wait_ready(&self, id: &str) {
        let (name, port) = &self.workers[id];
        // Its CPU time and log move while it starts.
        let mut patience = Patience::new(Duration::from_secs(90));
        loop {
            let out = weir_command()
                .args(["health", "--timeout", "2s", "--url", &format!("http://127.0.0.1:{port}/readyz")])
                .output()
                .unwrap();
            if out.status.success() {
                return;
            }
            let running = podman_ok(&["inspect", name, "--format", "{{.State.Running}}"]);
            assert!(running == "true", "{id} exited before it was ready:\n{}", self.tail(id, 30));
            let pid = podman_ok(&["inspect", name, "--format", "{{.State.Pid}}"]).parse().unwrap_or(0);
            if let Err(why) = patience.observe((cpu_ticks(pid), self.logs(id).len())) {
                panic!("{id} not ready: {why}:\n{}", self.tail(id, 30));
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    /// SIGTERM (the image's STOPSIGNAL) and wait; returns how long the drain took.
    /// The worker must exit 0 well within podman's 60 s grace.
    fn stop(&mut self, id: &str) -> Duration {
        let name = self.workers[id].0.clone();
        let started = Instant::now();
        podman_ok(&["stop", "-t", "60", &name]);
        let took = started.elapsed();
        let code = podman_ok(&["inspect", &name, "--format", "{{.State.ExitCode}}"]);
        assert_eq!(code, "0", "{id} did not exit 0 after SIGTERM:\n{}", self.tail(id, 30));
        assert!(took < Duration::from_secs(45), "{id} took {took:?} to drain");
        self.live.remove(id);
        took
    }

    fn kill(&mut self, id: &str) {
        podman_ok(&["kill", "-s", "KILL", &self.workers[id].0]);
        podman_ok(&["wait", &self.workers[id].0]);
        self.live.remove(id);
    }

    fn logs(&self, id: &str) -> String {
        let out = podman().args(["logs", &self.workers[id].0]).output().expect("podman logs");
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
    }

    fn tail(&self, id: &str, n: usize) -> String {
        let logs = self.logs(id);
        let lines: Vec<&str> = logs.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        for (name, _) in self.workers.values() {
            let _ = podman().args(["rm", "-f", "-t", "0", name]).stdout(Stdio::null()).stderr(Stdio::null()).status();
        }
    }
}

fn config(dir: &Path, kinesis: &str, moto: &str) -> PathBuf {
    let path = dir.join("weir.toml");
    let text = format!(
        r#"
# Production timings: failover, renewals and taker cycles at their defaults (10 s,
# 3.3 s, 3.3 s); only the shard sync is sooner, so that the split is seen at once.
[worker]
shard_sync_interval = "5s"
shutdown_timeout = "30s"

[stream]
kind = "kinesis"
name = "{STREAM}"
efo = true

[metrics]
cloudwatch = true
interval = "5s"

[leases]
kind = "dynamodb"
table = "{TABLE}"
create_table = true
namespace = "fleet"

[aws]
kinesis_endpoint_url = "{kinesis}"
dynamodb_endpoint_url = "{moto}"
s3_endpoint_url = "{moto}"
s3_force_path_style = true

{archiver}
[[consumers]]
type = "alerting"
name = "alerts"
time_field = "ts"
sinks = [ {{ type = "log" }} ]
[[consumers.rules]]
name = "tenant-error-rate"
group_by = [".tenantId"]
window = "10s"
aggregate = "error_rate"
condition = "> 0.5"
min_events = 20

[[consumers]]
type = "log"
name = "latency"
"#,
        archiver = archiver_toml(
            "archive",
            &format!("bucket = \"{BUCKET}\"\nmode = \"exactly-once\""),
            "mcp-normalize",
            "events/tenant=!{partitionKeyFromQuery:tenantId}/tool=!{partitionKeyFromQuery:toolName}/",
            "errors/!{firehose:error-output-type}/",
            10,
            &metadata_extraction("{tenantId: .tenant_id, toolName: .tool_name}", false),
        ),
    );
    std::fs::write(&path, text).unwrap();
    path
}

/// One MCP tool-call event, as an MCP server would log it; a line that is not JSON
/// where [`is_malformed`].
fn event(i: u64) -> Bytes {
    if is_malformed(i) {
        return Bytes::from(format!("not json {i}"));
    }
    let tools = ["search_docs", "read_file", "run_query", "create_issue", "send_email", "fetch_url"];
    Bytes::from(format!(
        r#"{{"tenantId":"t-{:02}","toolName":"{}","sessionId":"fleet-{i}","ts":{},"durationMs":{},"success":{},"errorCode":{},"arguments":{{"query":"q {i}","limit":{}}}}}"#,
        i % 8,
        tools[(i % 6) as usize],
        now_ms(),
        i * 37 % 900,
        !i.is_multiple_of(23),
        if i.is_multiple_of(23) { "\"E_TIMEOUT\"" } else { "null" },
        i % 50
    ))
}

/// Writes `rate` events/s in batches of a tenth of a second until `stop` and at least
/// `min` events; returns the last sequence number accepted per shard.
async fn produce(
    producer: Producer,
    rate: u64,
    min: u64,
    stop: Arc<AtomicBool>,
    sent: Arc<AtomicU64>,
) -> BTreeMap<ShardId, SequenceNumber> {
    let mut last: BTreeMap<ShardId, SequenceNumber> = BTreeMap::new();
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    let per_tick = (rate / 10).max(1);
    let mut next = 0u64;
    while !(stop.load(Ordering::SeqCst) && next >= min) {
        tick.tick().await;
        let batch = (next..next + per_tick)
            .map(|i| Outgoing { id: i, partition_key: format!("session-{}", i % 257), data: event(i) })
            .collect();
        let report = producer.put_all(batch).await;
        assert!(report.failed.is_empty(), "records refused: {:?}", report.failed);
        for a in report.accepted {
            let slot = last.entry(a.shard).or_insert_with(|| a.sequence.clone());
            if a.sequence > *slot {
                *slot = a.sequence;
            }
        }
        next += per_tick;
        sent.store(next, Ordering::SeqCst);
    }
    last
}

/// A batch the `log` consumer saw: when it was processed, the shard, and the arrival
/// time of its first record.
struct BatchLine {
    processed_ms: i64,
    shard: String,
    first_arrival_ms: i64,
}

fn batch_lines(logs: &str) -> Vec<BatchLine> {
    logs.lines()
        .filter(|l| l.contains("\"message\":\"batch\""))
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["consumer"] == "latency")
        .filter_map(|v| {
            let ts = chrono::DateTime::parse_from_rfc3339(v["timestamp"].as_str()?).ok()?.timestamp_millis();
            Some(BatchLine {
                processed_ms: ts,
                shard: v["shard"].as_str()?.to_owned(),
                first_arrival_ms: v["first_arrival_ms"].as_i64()?,
            })
        })
        .collect()
}

/// The longest arrival-to-processed delay of each shard's batches processed in
/// [from, to).
fn pause_per_shard(lines: &[BatchLine], from: i64, to: i64) -> BTreeMap<String, f64> {
    let mut out: BTreeMap<String, f64> = BTreeMap::new();
    for b in lines.iter().filter(|b| b.processed_ms >= from && b.processed_ms < to) {
        let d = (b.processed_ms - b.first_arrival_ms) as f64 / 1000.0;
        let slot = out.entry(b.shard.clone()).or_default();
        *slot = slot.max(d);
    }
    out
}

/// The EMF documents in a worker's output: (namespace, dimension sets, metric names,
/// the document).
fn emf_documents(logs: &str) -> Vec<(String, serde_json::Value, BTreeSet<String>, serde_json::Value)> {
    logs.lines()
        .filter(|l| l.contains("\"_aws\""))
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|doc| {
            let d = doc["_aws"]["CloudWatchMetrics"].get(0)?.clone();
            let names = d["Metrics"].as_array()?.iter().filter_map(|m| m["Name"].as_str().map(str::to_owned)).collect();
            Some((d["Namespace"].as_str()?.to_owned(), d["Dimensions"].clone(), names, doc))
        })
        .collect()
}

/// The longest arrival-to-processed delay of any batch processed in [from, to), with
/// its shard.
fn longest_pause(lines: &[BatchLine], from: i64, to: i64) -> (f64, String) {
    lines
        .iter()
        .filter(|b| b.processed_ms >= from && b.processed_ms < to)
        .map(|b| ((b.processed_ms - b.first_arrival_ms) as f64 / 1000.0, b.shard.clone()))
        .fold((0.0, String::from("-")), |a, b| if b.0 > a.0 { b } else { a })
}

/// Waits until `done`, failing once no lease changed owner and no checkpoint moved for
/// `limit` (records flow throughout, so a working fleet moves its checkpoints). Whole
/// leases are not watched: renewals change their counters all the time.
async fn wait_for(
    what: &str,
    limit: Duration,
    fleet: &Fleet,
    table: &DynamoDbLeaseTable,
    mut done: impl AsyncFnMut() -> bool,
) {
    let mut patience = Patience::new(limit);
    while !done().await {
        let seen: Vec<(String, Option<String>, String)> = table
            .list()
            .await
            .unwrap()
            .iter()
            .map(|l| (l.key.to_string(), l.owner.as_ref().map(|o| o.to_string()), format!("{:?}", l.checkpoints)))
            .collect();
        if let Err(why) = patience.observe(&seen) {
            let tails: Vec<String> = fleet.live.iter().map(|id| format!("--- {id}\n{}", fleet.tail(id, 20))).collect();
            panic!("waiting for {what}: {why}; leases (shard, owner, checkpoints): {seen:#?}\n{}", tails.join("\n"));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the container image: run tests/fleet/run.sh"]
async fn a_fleet_of_containers_deploys_loses_workers_and_scales_without_losing_a_record() {
    let image = std::env::var("WEIR_FLEET_IMAGE").unwrap_or_else(|_| "localhost/weir:dev".into());
    let rate: u64 = env_or("WEIR_FLEET_RATE", 700);
    let min_events: u64 = env_or("WEIR_FLEET_MIN_EVENTS", 50_000);
    let fk = Emulator::start("ferrokinesis", &[]);
    let moto = Emulator::start("moto", &[]);
    let k = kinesis(&fk.endpoint).await;
    create_stream(&k, STREAM, 4).await;
    let s3c = s3(&moto.endpoint).await;
    s3c.create_bucket().bucket(BUCKET).send().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut fleet = Fleet {
        image,
        run: format!("{:x}", now_ms() % 0xffffff),
        config: config(dir.path(), &fk.endpoint, &moto.endpoint),
        workers: BTreeMap::new(),
        live: BTreeSet::new(),
    };
    let t_start = now_ms();

    let stop = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicU64::new(0));
    let producer =
        tokio::spawn(produce(Producer::new(k.clone(), STREAM), rate, min_events, stop.clone(), sent.clone()));

    let table = DynamoDbLeaseTable::open(dynamodb(&moto.endpoint).await, TABLE, "fleet", true).await.unwrap();
    let owners = async || -> BTreeMap<String, usize> {
        let mut by: BTreeMap<String, usize> = BTreeMap::new();
        for l in table.list().await.unwrap().into_iter().filter(|l| !l.ended) {
            *by.entry(l.owner.map(|o| o.to_string()).unwrap_or_default()).or_default() += 1;
        }
        by
    };

    // 1. Three workers.
    for id in ["w1", "w2", "w3"] {
        fleet.start(id);
    }
    for id in ["w1", "w2", "w3"] {
        fleet.wait_ready(id);
    }
    let health = podman().args(["healthcheck", "run", &fleet.workers["w1"].0]).output().unwrap();
    assert!(
        health.status.success(),
        "the image's HEALTHCHECK: {}{}",
        String::from_utf8_lossy(&health.stdout),
        String::from_utf8_lossy(&health.stderr)
    );
    wait_for("three workers to hold the four leases", Duration::from_secs(60), &fleet, &table, async || {
        let by = owners().await;
        by.len() == 3 && !by.contains_key("") && by.values().sum::<usize>() == 4
    })
    .await;
    let t_steady = now_ms();
    tokio::time::sleep(Duration::from_secs(5)).await; // steady state, for the baseline figure
    let t_rolling = now_ms();

    // 2. Rolling deploy, as ECS (MaximumPercent 200) and Kubernetes (maxSurge 1) do it.
    let mut drains = Vec::new();
    for (old, new) in [("w1", "w4"), ("w2", "w5"), ("w3", "w6")] {
        fleet.start(new);
        fleet.wait_ready(new);
        drains.push((old, fleet.stop(old)));
    }
    wait_for("the new workers to hold every lease", Duration::from_secs(60), &fleet, &table, async || {
        let by = owners().await;
        !by.contains_key("") && by.keys().all(|o| ["w4", "w5", "w6"].contains(&o.as_str()))
    })
    .await;
    let t_rolled = now_ms();
    let first = weir_e2e::open_shards(&k, STREAM).await[0].0.clone();
    weir_e2e::split_shard(&k, STREAM, &first).await;

    // 3. SIGKILL one worker; a replacement starts.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let t_kill = now_ms();
    fleet.kill("w4");
    fleet.start("w7");
    fleet.wait_ready("w7");
    wait_for("the killed worker's leases to be taken", Duration::from_secs(60), &fleet, &table, async || {
        let by = owners().await;
        !by.contains_key("") && !by.contains_key("w4")
    })
    .await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let t_killed = now_ms();

    // 4. Scale 3 -> 5 -> 2.
    for id in ["w8", "w9"] {
        fleet.start(id);
    }
    for id in ["w8", "w9"] {
        fleet.wait_ready(id);
    }
    wait_for("five workers to share the leases", Duration::from_secs(90), &fleet, &table, async || {
        owners().await.len() == 5
    })
    .await;
    for id in ["w5", "w6", "w7"] {
        drains.push((id, fleet.stop(id)));
    }
    wait_for("two workers to hold every lease", Duration::from_secs(60), &fleet, &table, async || {
        let by = owners().await;
        !by.contains_key("") && by.keys().all(|o| ["w8", "w9"].contains(&o.as_str()))
    })
    .await;

    // The end: the producer stops (once it wrote at least min_events), the archive fills.
    stop.store(true, Ordering::SeqCst);
    let last = producer.await.unwrap();
    let produced = sent.load(Ordering::SeqCst);
    let t_produced = now_ms();
    // A checkpoint passes only records durable in S3: at the end, the archive is complete.
    let archive = ConsumerName::new("archive");
    wait_for("checkpoints at every shard's end", Duration::from_secs(120), &fleet, &table, async || {
        table.list().await.unwrap().iter().all(|l| match l.checkpoint_for(&archive) {
            Checkpoint::ShardEnd => l.ended,
            Checkpoint::At(p) => last.get(&l.key).is_some_and(|s| p.sequence >= *s),
            _ => false,
        })
    })
    .await;
    for id in ["w8", "w9"] {
        drains.push((id, fleet.stop(id)));
    }
    let leases = table.list().await.unwrap();
    let latency = ConsumerName::new("latency");
    for l in &leases {
        for c in [&archive, &latency] {
            let cp = l.checkpoint_for(c);
            let at_end = match cp {
                Checkpoint::ShardEnd => l.ended,
                Checkpoint::At(p) => !l.ended && last.get(&l.key).is_some_and(|s| p.sequence >= *s),
                _ => false,
            };
            assert!(at_end, "{} {c}: checkpoint {cp:?} is not at the shard's end", l.key);
        }
        assert!(l.owner.is_none(), "{} still owned by {:?} after every worker stopped", l.key, l.owner);
    }
    assert_eq!(leases.iter().filter(|l| l.ended).count(), 1, "the split parent ended");

    // DuckDB: every record exactly once.
    let local = dir.path().join("archive");
    let objects = download(&s3c, BUCKET, "events/", &local).await;
    let rows = duckdb(&format!(
        "select count(*), count(distinct session_id), count(*) filter (where tenant <> tenant_id or tool <> tool_name) \
         from read_json_auto('{}/events/**/*.gz', hive_partitioning = true, format = 'newline_delimited')",
        local.display()
    ));
    let got: Vec<u64> = rows[0].iter().map(|v| v.as_u64().unwrap()).collect();
    let malformed = (0..produced).filter(|i| is_malformed(*i)).count() as u64;
    let valid = produced - malformed;
    assert_eq!(got, vec![valid, valid, 0], "rows, distinct events, misplaced");
    assert!(produced >= min_events);
    // The error output: each malformed line once, as Firehose's error records.
    download(&s3c, BUCKET, "errors/", &local).await;
    let errors = duckdb(&format!(
        "select count(*), count(distinct rawData) from read_json_auto('{}/errors/**/*.gz', format = 'newline_delimited')",
        local.display()
    ));
    let got: Vec<u64> = errors[0].iter().map(|v| v.as_u64().unwrap()).collect();
    assert_eq!(got, vec![malformed, malformed], "error records, distinct");

    let lines: Vec<BatchLine> = fleet.workers.keys().flat_map(|id| batch_lines(&fleet.logs(id))).collect();
    assert!(!lines.is_empty(), "no batch lines from the log consumer");
    let (steady, steady_shard) = longest_pause(&lines, t_steady, t_rolling);
    let (rolling, rolling_shard) = longest_pause(&lines, t_rolling, t_rolled);
    let (killed, killed_shard) = longest_pause(&lines, t_kill, t_killed);
    let (scaling, scaling_shard) = longest_pause(&lines, t_killed, t_produced);
    println!(
        "\nfleet: {produced} events at {rate}/s over {:.0} s, 4 shards (one split), 9 containers",
        (t_produced - t_start) as f64 / 1000.0
    );
    println!("archive: {objects} objects, {valid} rows, {valid} distinct, {malformed} error records, exactly once");
    println!("| phase | longest arrival-to-processed delay of any shard | shard |");
    println!("|---|---|---|");
    println!("| steady state (3 workers) | {steady:.1} s | {steady_shard} |");
    println!("| rolling deploy (3 workers replaced) | {rolling:.1} s | {rolling_shard} |");
    println!("| SIGKILL + replacement (failover 10 s) | {killed:.1} s | {killed_shard} |");
    println!("| scale 3 -> 5 -> 2 | {scaling:.1} s | {scaling_shard} |");
    println!(
        "SIGTERM drains: {}",
        drains.iter().map(|(id, d)| format!("{id} {:.1} s", d.as_secs_f64())).collect::<Vec<_>>().join(", ")
    );
    println!("(ferrokinesis gives arrival times in whole seconds: delays are within a second)");

    // Each shard's pause during the rolling deploy, at production timings.
    let per_shard = pause_per_shard(&lines, t_rolling, t_rolled);
    let bound = steady + ROLLING_PAUSE_BOUND;
    println!(
        "rolling deploy, longest pause per shard (target 5 s, bound {bound:.1} s: steady state's {steady:.1} s + {ROLLING_PAUSE_BOUND} s):"
    );
    for (shard, pause) in &per_shard {
        println!("  {shard}: {pause:.1} s");
    }
    assert_eq!(per_shard.len(), 4, "every shard processed during the rolling deploy: {per_shard:?}");
    for (shard, pause) in &per_shard {
        assert!(*pause <= bound, "{shard} paused {pause:.1} s in the rolling deploy (bound {bound:.1} s)");
    }

    // The alarms' metrics, as CloudWatch would extract them from the logs.
    let docs: Vec<_> = fleet.workers.keys().flat_map(|id| emf_documents(&fleet.logs(id))).collect();
    let app: Vec<_> = docs.iter().filter(|(_, dims, ..)| *dims == serde_json::json!([["Application"]])).collect();
    assert!(!app.is_empty(), "no EMF line with dimension Application");
    for (namespace, _, _, doc) in &app {
        assert_eq!(namespace, "weir");
        assert_eq!(doc["Application"], "fleet");
    }
    let alarm_metrics = alarm_metrics();
    for metric in &alarm_metrics {
        assert!(
            app.iter().any(|(_, _, names, _)| names.contains(metric)),
            "no EMF {metric} with dimension Application"
        );
    }
    let per_archiver = docs.iter().any(|(_, dims, names, doc)| {
        *dims == serde_json::json!([["Application", "Archiver"]])
            && doc["Archiver"] == "archive"
            && names.contains("ArchiveDataFreshness")
    });
    assert!(per_archiver, "no EMF line of the archiver with dimensions Application, Archiver");
    let read_failures: f64 = app.iter().filter_map(|(_, _, _, doc)| doc["ReadFailures"].as_f64()).sum();
    assert_eq!(read_failures, 0.0, "reads failed in a healthy fleet");
    let errors: f64 = app.iter().filter_map(|(_, _, _, doc)| doc["ArchiveErrorRecords"].as_f64()).sum();
    // Counted by whoever buffered them: a SIGKILLed worker's last counts are never
    // emitted and its successor counts again, so only "some" is exact here.
    assert!(malformed == 0 || errors > 0.0, "ArchiveErrorRecords never moved ({malformed} error records)");
    println!("EMF: {} lines with dimension Application carry {alarm_metrics:?}", app.len());
}
