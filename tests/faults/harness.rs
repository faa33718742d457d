//! The outage harness: emulators, a fault proxy between each `weir run` worker and
//! each AWS endpoint, a producer writing steadily, an alert receiver timing alerts,
//! and the tally read back with DuckDB at the end.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use serde_json::Value;
use weir_aws::kinesis::producer::{Outgoing, Producer};
use weir_e2e::{KillOnDrop, create_stream, download, duckdb, free_port, gz_lines, kinesis, s3, spawn_weir_with_env};
use weir_testkit::{Emulator, FaultProxy, Faults};

/// `WEIR_FAULTS_FULL=1` runs the issue's full lengths (60 s outages, 5 minutes of a
/// degraded network); CI runs shortened ones.
pub fn full() -> bool {
    std::env::var("WEIR_FAULTS_FULL").is_ok_and(|v| v == "1")
}

/// How long a dependency is down.
pub fn outage() -> Duration {
    if full() { Duration::from_secs(60) } else { Duration::from_secs(10) }
}

/// How long the network is slow and lossy.
pub fn degraded_for() -> Duration {
    if full() { Duration::from_secs(300) } else { Duration::from_secs(20) }
}

/// Milliseconds since the epoch.
pub fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// Emulators and clients of one scenario (each scenario has its own: pausing one
/// must not touch another).
pub struct Env {
    pub name: String,
    pub fk: Emulator,
    pub moto: Emulator,
    pub kinesis: aws_sdk_kinesis::Client,
    pub s3: aws_sdk_s3::Client,
    pub dir: tempfile::TempDir,
    pub alerts: Alerts,
}

/// The fault proxies in front of one worker's endpoints.
pub struct Proxies {
    pub kinesis: FaultProxy,
    pub dynamodb: FaultProxy,
    pub s3: FaultProxy,
}

impl Proxies {
    /// Sets the same faults on every endpoint.
    pub fn set_all(&self, faults: &Faults) {
        for p in [&self.kinesis, &self.dynamodb, &self.s3] {
            p.set(faults.clone());
        }
    }
}

/// One `weir run` process behind its proxies.
pub struct Worker {
    pub id: String,
    pub proxies: Proxies,
    pub http: u16,
    pub log: PathBuf,
    pub files: PathBuf,
    config: PathBuf,
    starts: u32,
    env: Vec<(&'static str, String)>,
    child: KillOnDrop,
}

/// Optional parts of a worker's config.
#[derive(Default)]
pub struct Extra {
    /// The archiver's transform goes to this Lambda endpoint (`transform = "lambda"`).
    pub lambda: Option<String>,
    /// `max_backlog_bytes` of the archiver.
    pub max_backlog_bytes: Option<u64>,
    /// `worker.failover` instead of the fast 3 s of the other scenarios.
    pub failover: Option<&'static str>,
    /// `worker.unhealthy_after` instead of the default 60 s.
    pub unhealthy_after: Option<&'static str>,
    /// `worker.queue_bytes` instead of the default 8 MiB.
    pub queue_bytes: Option<u64>,
    /// Environment variables of the worker's process (kept across restarts).
    pub env: Vec<(&'static str, String)>,
}

pub const LAMBDA_ARN: &str = "arn:aws:lambda:us-east-1:123456789012:function:faults-transform";

impl Env {
    /// Starts ferrokinesis and moto, creates the stream (`shards`) and the bucket.
    pub async fn new(name: &str, shards: i32) -> Env {
        let fk = Emulator::start("ferrokinesis", &[]);
        let moto = Emulator::start("moto", &[]);
        let k = kinesis(&fk.endpoint).await;
        create_stream(&k, name, shards).await;
        let s3c = s3(&moto.endpoint).await;
        s3c.create_bucket().bucket(name).send().await.unwrap();
        let alerts = Alerts::start().await;
        Env { name: name.to_owned(), fk, moto, kinesis: k, s3: s3c, dir: tempfile::tempdir().unwrap(), alerts }
    }

    /// Starts `weir run` as worker `id`, every AWS endpoint behind its own proxy.
    pub async fn worker(&self, id: &str, extra: &Extra) -> Worker {
        let seed = id.bytes().fold(17u64, |h, b| h.wrapping_mul(31).wrapping_add(u64::from(b)));
        let proxies = Proxies {
            kinesis: FaultProxy::in_front_of(&self.fk.endpoint, seed).await.unwrap(),
            dynamodb: FaultProxy::in_front_of(&self.moto.endpoint, seed + 1).await.unwrap(),
            s3: FaultProxy::in_front_of(&self.moto.endpoint, seed + 2).await.unwrap(),
        };
        let http = free_port();
        let files = self.dir.path().join("files").join(id);
        let config = self.dir.path().join(format!("{id}.toml"));
        std::fs::write(&config, self.config(id, &proxies, http, &files, extra)).unwrap();
        let log = self.dir.path().join(format!("{id}.log"));
        let child = KillOnDrop(spawn_weir_with_env(&config, &log, &extra.env));
        Worker { id: id.to_owned(), proxies, http, log, files, config, starts: 1, env: extra.env.clone(), child }
    }

    fn config(&self, id: &str, p: &Proxies, http: u16, files: &Path, extra: &Extra) -> String {
        let name = &self.name;
        let (transform, lambda_endpoint, prefix, processors) = match &extra.lambda {
            Some(url) => (
                "lambda",
                format!("lambda_endpoint_url = \"{url}\"\n"),
                "events/tenant=!{partitionKeyFromLambda:tenantId}/",
                format!(
                    r#"[
  {{ Type = "Lambda", Parameters = [
    {{ ParameterName = "LambdaArn", ParameterValue = "{LAMBDA_ARN}" }},
    {{ ParameterName = "NumberOfRetries", ParameterValue = "2" }} ] }}
]"#
                ),
            ),
            None => (
                "mcp-normalize",
                String::new(),
                "events/tenant=!{partitionKeyFromQuery:tenantId}/",
                weir_e2e::metadata_extraction("{tenantId: .tenant_id}", false),
            ),
        };
        let backlog = extra.max_backlog_bytes.map(|b| format!("max_backlog_bytes = {b}\n")).unwrap_or_default();
        let archiver = weir_e2e::archiver_toml(
            "archive",
            &format!("bucket = \"{name}\"\n{backlog}"),
            transform,
            prefix,
            "errors/!{firehose:error-output-type}/",
            2,
            &processors,
        );
        format!(
            r#"{worker}
[stream]
kind = "kinesis"
name = "{name}"
efo_consumer = "faults-{name}"

[leases]
kind = "dynamodb"
table = "{name}-leases"
create_table = true
namespace = "{name}"

[aws]
kinesis_endpoint_url = "{kinesis}"
dynamodb_endpoint_url = "{dynamodb}"
s3_endpoint_url = "{s3}"
s3_force_path_style = true
{lambda_endpoint}
[http]
listen = "127.0.0.1:{http}"

[[consumers]]
type = "files"
name = "files"
directory = "{files}"
max_age = "1s"

[[consumers]]
type = "alerting"
name = "alerts"
time_field = "ts"
allowed_lateness = "200ms"
[[consumers.sinks]]
type = "webhook"
url = "{alerts}"
timeout = "2s"
[[consumers.rules]]
name = "traffic"
group_by = []
window = "1s"
aggregate = "count"
condition = "> 0"
cooldown = "1s"
{archiver}"#,
            worker = {
                let mut w = match extra.failover {
                    Some(f) => {
                        weir_e2e::worker_toml(Some(id)).replace("failover = \"3s\"", &format!("failover = \"{f}\""))
                    }
                    None => weir_e2e::worker_toml(Some(id)),
                };
                if let Some(u) = extra.unhealthy_after {
                    w.push_str(&format!("unhealthy_after = \"{u}\"\n"));
                }
                if let Some(b) = extra.queue_bytes {
                    w.push_str(&format!("queue_bytes = {b}\n"));
                }
                w
            },
            kinesis = p.kinesis.endpoint(),
            dynamodb = p.dynamodb.endpoint(),
            s3 = p.s3.endpoint(),
            files = files.display(),
            alerts = self.alerts.url(),
        )
    }

    /// Waits until every id `produced` holds is in the archive or the error output, and
    /// has reached the workers' `files` consumers (at-least-once, flushed on their own
    /// timer), or none of them grew for `limit` (not on wall time alone); reads the
    /// archive back with DuckDB, and tallies it with what the `files` consumers
    /// received.
    pub async fn tally(&self, scenario: &str, produced: &Produced, workers: &[&Worker], limit: Duration) -> Tally {
        let started = Instant::now();
        let mut patience = weir_e2e::patience::Patience::new(limit);
        loop {
            let (seen, errors) = (self.archived_ids().await, self.error_ids().await);
            let delivered = delivered(workers);
            let archived = produced.ids.iter().all(|id| seen.contains_key(id) || errors.contains_key(id));
            let received = produced.ids.iter().all(|id| delivered.contains_key(id));
            if (archived && received) || patience.observe((seen.len(), errors.len(), delivered.len())).is_err() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        let recovered_in = started.elapsed();
        let (seen, errors) = (self.archived_ids().await, self.error_ids().await);
        let out = self.dir.path().join("archive");
        let objects_read = download(&self.s3, &self.name, "events/", &out).await;
        let (rows_total, distinct) = if objects_read == 0 {
            (0, 0)
        } else {
            let glob = format!("{}/events/**/*.gz", out.display());
            let rows = duckdb(&format!(
                "SELECT count(*), count(DISTINCT session_id), count(*) FILTER (WHERE tenant <> tenant_id) \
                 FROM read_json_auto('{glob}', hive_partitioning = true, format = 'newline_delimited')"
            ));
            assert_eq!(rows[0][2].as_u64().unwrap(), 0, "records in another tenant's partition");
            (rows[0][0].as_u64().unwrap(), rows[0][1].as_u64().unwrap())
        };
        assert_eq!(distinct as usize, seen.len(), "DuckDB and the SDK read the archive differently");
        let strangers = seen.keys().chain(errors.keys()).filter(|id| !produced.ids.contains(*id)).count();
        assert_eq!(strangers, 0, "the archive holds ids nobody produced");
        let lost = produced.ids.iter().filter(|id| !seen.contains_key(*id) && !errors.contains_key(*id)).count() as u64;
        if lost > 0 || seen.values().any(|n| *n > 1) {
            self.explain(&seen, workers).await;
        }
        let both = seen.keys().filter(|id| errors.contains_key(*id)).count() as u64;
        let error_repeats: u64 = errors.values().map(|n| n - 1).sum();
        let delivered = delivered(workers);
        let files_lost = produced.ids.iter().filter(|id| !delivered.contains_key(*id)).count() as u64;
        Tally {
            scenario: scenario.to_owned(),
            produced: produced.ids.len() as u64,
            archived_once: seen.values().filter(|n| **n == 1).count() as u64,
            to_error_output: errors.len() as u64,
            lost,
            duplicated: (rows_total - distinct) + both + error_repeats,
            redelivered: delivered.values().map(|n| n - 1).sum(),
            files_lost,
            max_alert_delay: self.alerts.max_delay(produced.fault_from, produced.fault_to),
            recovered_in,
        }
    }

    /// Prints, for a few ids archived more than once, the objects holding them, and the
    /// workers' warnings and status (a failing run then shows how it happened).
    async fn explain(&self, seen: &BTreeMap<String, u64>, workers: &[&Worker]) {
        use std::io::Read;
        let dups: Vec<&String> = seen.iter().filter(|(_, n)| **n > 1).map(|(id, _)| id).take(5).collect();
        let mut holders: BTreeMap<&String, Vec<String>> = BTreeMap::new();
        for (key, body) in weir_e2e::objects(&self.s3, &self.name, "events/").await {
            let mut text = String::new();
            flate2::read::GzDecoder::new(&body[..]).read_to_string(&mut text).unwrap();
            for id in &dups {
                if text.contains(&format!("\"{id}\"")) {
                    holders.entry(id).or_default().push(key.clone());
                }
            }
        }
        println!("ids archived more than once, with the objects holding them: {holders:#?}");
        for w in workers {
            let log = w.log();
            let warnings: Vec<&str> = log.lines().filter(|l| !l.contains(" INFO ")).collect();
            let status = w.get("/status").await.map(|(_, b)| b).unwrap_or_default();
            println!("--- {} warnings:\n{}\n--- {} /status:\n{status}", w.id, warnings.join("\n"), w.id);
        }
    }

    /// Every session id in the archive, with how often it appears.
    pub async fn archived_ids(&self) -> BTreeMap<String, u64> {
        let mut seen = BTreeMap::new();
        for line in weir_e2e::archived_lines(&self.s3, &self.name, "events/").await {
            let v: Value = serde_json::from_str(&line).unwrap();
            *seen.entry(v["session_id"].as_str().unwrap().to_owned()).or_default() += 1;
        }
        seen
    }

    /// Every session id in the error output (its `rawData`), with how often it appears.
    pub async fn error_ids(&self) -> BTreeMap<String, u64> {
        use base64::Engine;
        let mut seen = BTreeMap::new();
        for line in weir_e2e::archived_lines(&self.s3, &self.name, "errors/").await {
            let v: Value = serde_json::from_str(&line).unwrap();
            let raw = base64::engine::general_purpose::STANDARD.decode(v["rawData"].as_str().unwrap()).unwrap();
            let record: Value = serde_json::from_slice(&raw).unwrap();
            *seen.entry(record["sessionId"].as_str().unwrap().to_owned()).or_default() += 1;
        }
        seen
    }
}

impl Worker {
    /// `GET path` on the worker's HTTP listener: status and body (`None` when it does
    /// not answer).
    pub async fn get(&self, path: &str) -> Option<(u16, String)> {
        let addr: SocketAddr = ([127, 0, 0, 1], self.http).into();
        let ask = async {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            let mut s = tokio::net::TcpStream::connect(addr).await.ok()?;
            s.write_all(format!("GET {path} HTTP/1.0\r\nHost: x\r\n\r\n").as_bytes()).await.ok()?;
            let mut text = String::new();
            s.read_to_string(&mut text).await.ok()?;
            let status = text.split_whitespace().nth(1)?.parse().ok()?;
            let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_owned()).unwrap_or_default();
            Some((status, body))
        };
        tokio::time::timeout(Duration::from_secs(5), ask).await.ok().flatten()
    }

    /// Shards this worker holds now, from `/status`.
    pub async fn held(&self) -> Vec<String> {
        let Some((200, body)) = self.get("/status").await else { return Vec::new() };
        let v: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
        v.as_array()
            .into_iter()
            .flatten()
            .flat_map(|w| w["shards"].as_array().cloned().unwrap_or_default())
            .filter_map(|s| s["shard"].as_str().map(str::to_owned))
            .collect()
    }

    /// Stops the process with SIGTERM (a graceful shutdown: it drains, checkpoints
    /// and frees its leases), waits for it to exit, and starts it again with the
    /// same config and worker id (a rolling restart) on a new HTTP port. Its log goes
    /// to a new file.
    pub async fn restart(&mut self) {
        let pid = self.child.0.id().to_string();
        let status = std::process::Command::new("kill").args(["-TERM", &pid]).status().unwrap();
        assert!(status.success(), "cannot signal worker {}", self.id);
        let started = Instant::now();
        while self.child.0.try_wait().unwrap().is_none() {
            assert!(started.elapsed() < Duration::from_secs(60), "worker {} ignored SIGTERM:\n{}", self.id, self.log());
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        // A new HTTP port: the old one was free while the worker was down, and another
        // test's worker (or an outgoing connection) may have taken it.
        let http = free_port();
        let (old, new) = (format!("listen = \"127.0.0.1:{}\"", self.http), format!("listen = \"127.0.0.1:{http}\""));
        let config = std::fs::read_to_string(&self.config).unwrap();
        assert!(config.contains(&old), "worker {}'s config has no {old}", self.id);
        std::fs::write(&self.config, config.replace(&old, &new)).unwrap();
        self.http = http;
        self.starts += 1;
        self.log = self.config.with_extension(format!("{}.log", self.starts));
        self.child = KillOnDrop(spawn_weir_with_env(&self.config, &self.log, &self.env));
    }

    /// The process's resident memory (bytes), open file descriptors and live tokio
    /// tasks (from `/metrics`; `None` when the worker does not answer).
    pub async fn resources(&self) -> (u64, u64, Option<u64>) {
        let pid = self.child.0.id();
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        let rss_kib: u64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or(0);
        let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).map(|d| d.count() as u64).unwrap_or(0);
        let tasks = match self.get("/metrics").await {
            Some((200, body)) => body
                .lines()
                .find_map(|l| l.strip_prefix("weir_runtime_alive_tasks "))
                .and_then(|v| v.trim().parse::<f64>().ok())
                .map(|v| v as u64),
            _ => None,
        };
        (rss_kib * 1024, fds, tasks)
    }

    /// `weir_aws_requests_total` from `/metrics`, by (service, operation, outcome).
    pub async fn aws_requests(&self) -> std::collections::BTreeMap<(String, String, String), u64> {
        let body = match self.get("/metrics").await {
            Some((200, body)) => body,
            other => panic!("worker {}: /metrics answered {other:?}", self.id),
        };
        weir_e2e::metric_samples(&body, "weir_aws_requests_total")
            .into_iter()
            .filter_map(|(labels, value)| {
                let label = |name: &str| labels.get(name).cloned();
                Some(((label("service")?, label("operation")?, label("outcome")?), value as u64))
            })
            .collect()
    }

    /// The worker's process id.
    pub fn pid(&self) -> u32 {
        self.child.0.id()
    }

    /// The worker's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits until the worker holds a lease (it is reading), failing with its log.
    /// Fails once the worker neither used CPU nor logged for `limit` while holding
    /// nothing (not on wall time alone).
    pub async fn wait_reading(&self, limit: Duration) {
        let mut patience = weir_e2e::patience::Patience::new(limit);
        while self.held().await.is_empty() {
            let seen = (weir_e2e::patience::cpu_ticks(self.child.0.id()), weir_e2e::patience::file_len(&self.log));
            if let Err(why) = patience.observe(seen) {
                panic!("worker {} holds no shard: {why}:\n{}", self.id, self.log());
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

/// What the producer wrote, and when the fault was on (epoch ms).
pub struct Produced {
    pub ids: std::collections::BTreeSet<String>,
    pub fault_from: i64,
    pub fault_to: i64,
}

/// A producer writing `rate` MCP events per second straight to the emulator (not
/// through a proxy: the outage is between weir and AWS, the stream keeps flowing).
pub struct Traffic {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<Vec<String>>,
}

impl Traffic {
    pub fn start(client: aws_sdk_kinesis::Client, stream: &str, rate: u64) -> Traffic {
        let stop = Arc::new(AtomicBool::new(false));
        let producer = Producer::new(client, stream);
        let flag = Arc::clone(&stop);
        let task = tokio::spawn(async move {
            let mut ids = Vec::new();
            let mut tick = tokio::time::interval(Duration::from_millis(100));
            let per_tick = (rate / 10).max(1);
            while !flag.load(Ordering::Relaxed) {
                tick.tick().await;
                let ts = now_ms();
                let batch: Vec<Outgoing> = (0..per_tick)
                    .map(|_| {
                        let i = ids.len() as u64;
                        let id = format!("s-{i:07}");
                        ids.push(id.clone());
                        Outgoing {
                            id: i,
                            partition_key: format!("pk-{}", i % 97),
                            data: Bytes::from(format!(
                                r#"{{"tenantId":"t-{}","toolName":"tool-{}","sessionId":"{id}","ts":{ts},"durationMs":{},"success":{},"arguments":{{"q":"caf\u00e9 \"x\"","n":{i}}}}}"#,
                                i % 5,
                                i % 3,
                                i % 250,
                                !i.is_multiple_of(17)
                            )),
                        }
                    })
                    .collect();
                let report = producer.put_all(batch).await;
                assert!(report.failed.is_empty(), "the producer could not write: {:?}", report.failed.first());
            }
            ids
        });
        Traffic { stop, task }
    }

    /// Stops writing; returns every id written.
    pub async fn stop(self, fault_from: i64, fault_to: i64) -> Produced {
        self.stop.store(true, Ordering::Relaxed);
        let ids = self.task.await.unwrap().into_iter().collect();
        Produced { ids, fault_from, fault_to }
    }
}

/// A webhook endpoint for the alerting consumer: records when each firing alert
/// arrived, against the end of its window.
pub struct Alerts {
    port: u16,
    seen: Arc<Mutex<Vec<(i64, i64)>>>,
    _server: tokio::task::JoinHandle<()>,
}

impl Alerts {
    async fn start() -> Alerts {
        use axum::routing::post;
        let seen: Arc<Mutex<Vec<(i64, i64)>>> = Arc::default();
        let state = Arc::clone(&seen);
        let app = axum::Router::new().route(
            "/",
            post(move |body: Bytes| {
                let state = Arc::clone(&state);
                async move {
                    let received = now_ms();
                    if let Ok(v) = serde_json::from_slice::<Value>(&body)
                        && v["state"] == "firing"
                        && let Some(end) = v["window_end"].as_str()
                        && let Ok(end) = chrono::DateTime::parse_from_rfc3339(end)
                    {
                        state.lock().unwrap().push((end.timestamp_millis(), received));
                    }
                    "ok"
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Alerts { port, seen, _server: server }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}/", self.port)
    }

    /// Firing alerts received.
    pub fn count(&self) -> usize {
        self.seen.lock().unwrap().len()
    }

    /// The longest time from a window's end to its alert, over windows ending while
    /// the fault was on (`None`: no alert for such a window arrived at all).
    pub fn max_delay(&self, from: i64, to: i64) -> Option<Duration> {
        let seen = self.seen.lock().unwrap();
        seen.iter()
            .filter(|(end, _)| (from..=to).contains(end))
            .map(|(end, received)| Duration::from_millis((received - end).max(0) as u64))
            .max()
    }

    /// Windows that ended while the fault was on and got an alert.
    pub fn windows_alerted(&self, from: i64, to: i64) -> usize {
        let seen = self.seen.lock().unwrap();
        let mut ends: Vec<i64> = seen.iter().map(|(e, _)| *e).filter(|e| (from..=to).contains(e)).collect();
        ends.sort_unstable();
        ends.dedup();
        ends.len()
    }
}

/// One row of the result table.
#[derive(Debug)]
pub struct Tally {
    pub scenario: String,
    pub produced: u64,
    pub archived_once: u64,
    pub to_error_output: u64,
    pub lost: u64,
    pub duplicated: u64,
    pub redelivered: u64,
    pub files_lost: u64,
    pub max_alert_delay: Option<Duration>,
    pub recovered_in: Duration,
}

/// How many times each session id reached the `files` consumers of `workers`.
fn delivered(workers: &[&Worker]) -> BTreeMap<String, u64> {
    let mut delivered = BTreeMap::new();
    for w in workers {
        for line in gz_lines(&w.files) {
            let v: Value = serde_json::from_str(&line).unwrap();
            *delivered.entry(v["sessionId"].as_str().unwrap().to_owned()).or_default() += 1;
        }
    }
    delivered
}

impl Tally {
    /// The table's header.
    pub const HEADER: &str = "| scenario | records produced | archived exactly once | to the error output | lost | duplicated | redelivered to an at-least-once consumer | max alert delay during the fault |\n|---|---|---|---|---|---|---|---|";

    /// Prints the row (and appends it to `$WEIR_FAULTS_TABLE` when set), then checks
    /// the guarantees: every record archived or in the error output exactly once
    /// (the error output only when `errors_expected`), the at-least-once consumer
    /// complete.
    pub fn report_and_check(&self, errors_expected: bool) {
        let delay = self.max_alert_delay.map(|d| format!("{:.1} s", d.as_secs_f64())).unwrap_or_else(|| "none".into());
        let row = format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} |",
            self.scenario,
            self.produced,
            self.archived_once,
            self.to_error_output,
            self.lost,
            self.duplicated,
            self.redelivered,
            delay
        );
        println!(
            "{}\n{row}\n(complete {:.1} s after the producer stopped)",
            Self::HEADER,
            self.recovered_in.as_secs_f64()
        );
        if let Ok(path) = std::env::var("WEIR_FAULTS_TABLE") {
            use std::io::Write;
            let mut f = std::fs::OpenOptions::new().create(true).append(true).open(path).unwrap();
            writeln!(f, "{row}").unwrap();
        }
        assert_eq!(self.lost, 0, "{self:?}");
        assert_eq!(self.duplicated, 0, "{self:?}");
        assert_eq!(self.archived_once + self.to_error_output, self.produced, "{self:?}");
        if !errors_expected {
            assert_eq!(self.to_error_output, 0, "records went to the error output: {self:?}");
        }
        assert_eq!(self.files_lost, 0, "the at-least-once consumer missed records: {self:?}");
    }
}

impl Alerts {
    /// Waits until `n` firing alerts arrived in all (the pipeline is flowing).
    /// Fails once no alert arrived for `limit` (not on wall time alone).
    pub async fn wait_for(&self, n: usize, limit: Duration) {
        let mut patience = weir_e2e::patience::Patience::new(limit);
        while self.count() < n {
            if let Err(why) = patience.observe(self.count()) {
                panic!("{} alerts, waiting for {n}: {why}", self.count());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}
