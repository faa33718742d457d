//! weir beside its peers, in one run: the same ferrokinesis stream (4 shards, MCP events
//! of 1 KB as JSON, [`weir_e2e::mcp_event`], all written before any consumer starts;
//! not filler bytes: lifion-kinesis's decoder spreads a record that is not JSON into an
//! object of one property per character, 12 CPU-s per 100k records of 1 KB, a cost no
//! MCP user's events would pay), each consumer reading from
//! TRIM_HORIZON to the end with a no-op processor that checkpoints every batch, one
//! after another:
//! - weir `run --until-caught-up` with its `count` consumer, polling and enhanced
//!   fan-out;
//! - weir `run` with a KCL MultiLang processor (Python `amazon_kclpy`);
//! - `kcl-rs` 0.1.4 (PyPI; KCL v3 ported to Rust, Python processor), polling and
//!   fan-out;
//! - `lifion-kinesis` 1.3.3 (npm), polling.
//!
//! Per consumer: records read (duplicates counted where the processor sees sequence
//! numbers), CPU-seconds per 100k records (utime + stime of the process and its
//! children, start to exit), seconds to the first record and to the last, and peak RSS
//! (`VmHWM`, sampled every 20 ms). Leases live in moto's DynamoDB for the peers and in
//! SQLite for weir (its DynamoDB figures are in the cost bench). Every figure is
//! emulator-bound.
//!
//! cargo build --release -p weir && cargo bench -p weir-e2e --bench peers   (100,000 records)
//! Under `cargo test` it runs every consumer once over 2,000 records (a smoke test
//! that fails when a peer reads fewer records than were written).
//! The peers come from `tests/emulators/install.sh kcl-rs lifion`.
//! `WEIR_PEERS_ONLY=weir,kcl-rs` picks consumers, `WEIR_PEERS_RECORDS` the count and
//! `WEIR_PEERS_RECORD_BYTES` the size of a record (1024).
#![allow(clippy::unwrap_used, clippy::print_stdout)] // a test: a failed expectation is a failed test

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use weir_e2e::{
    KCLPY_CHECKPOINTER, create_stream, emulators_home, free_port, kinesis, metric_samples, put_mcp_events, weir_binary,
};
use weir_testkit::Emulator;

/// A kcl-rs processor that checkpoints every batch and stops the scheduler once it has
/// seen `n` distinct records; it reports what it saw (and its own CPU time, threads
/// included, at its first and its `n`-th record) every 100 ms and at the end.
/// Settings: the stream, the application name (also its lease table: one per run),
/// TRIM_HORIZON (weir reads the same records from the start) and the retrieval mode
/// (weir runs polling and fan-out); everything else is kcl-rs's default (polling:
/// 10,000 records a call, 1,500 ms between calls). The endpoints come from the
/// `AWS_ENDPOINT_URL_*` variables.
const KCL_RS: &str = r#"
import json, os, sys, threading, time
from kcl_rs import RecordProcessorBase, Scheduler

status, mode, stream, app, n = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
seen, state = set(), {"total": 0, "first": None, "last": None, "cpu_first": None, "cpu_last": None}
lock = threading.Lock()

def report():
    with lock:
        body = json.dumps(dict(state, unique=len(seen)))
    with open(status + ".tmp", "w") as f:
        f.write(body)
    os.replace(status + ".tmp", status)

def reporter():
    while True:
        time.sleep(0.1)
        report()

threading.Thread(target=reporter, daemon=True).start()
done = threading.Event()

class Counter(RecordProcessorBase):
    def initialize(self, initialize_input):
        pass
    def process_records(self, process_records_input):
        with lock:
            if state["first"] is None:
                state["first"], state["cpu_first"] = time.time(), time.process_time()
            for r in process_records_input.records:
                seen.add(r.sequence_number)
            state["total"] += len(process_records_input.records)
            if len(seen) >= n and state["last"] is None:
                state["last"], state["cpu_last"] = time.time(), time.process_time()
                done.set()
        process_records_input.checkpointer.checkpoint()
    def lease_lost(self, lease_lost_input):
        pass
    def shard_ended(self, shard_ended_input):
        shard_ended_input.checkpointer.checkpoint()
    def shutdown_requested(self, shutdown_requested_input):
        shutdown_requested_input.checkpointer.checkpoint()

scheduler = Scheduler(stream_name=stream, application_name=app, record_processor_factory=Counter,
                      region="us-east-1", initial_position="TRIM_HORIZON", retrieval_mode=mode)

def stopper():
    done.wait()
    scheduler.shutdown()

threading.Thread(target=stopper, daemon=True).start()
scheduler.run()
report()
"#;

/// A lifion-kinesis consumer that exits once it has seen `n` distinct records; it
/// reports what it saw (and its CPU time at its first and `n`-th record) every 100 ms
/// and at the end. Settings: the stream, the consumer group (one per run), the
/// endpoints, TRIM_HORIZON (weir reads the same records from the start) and polling
/// (its default, set to say so: weir's polling row). Everything else is lifion's
/// default: auto checkpoints of the last record of every batch, 10,000 records a
/// call, 250 ms between calls (1,000 ms after an empty one), JSON parsing of records
/// that look like JSON (these do).
const LIFION: &str = r#"
const fs = require('fs');
const Kinesis = require('lifion-kinesis');
const [status, kinesisEndpoint, dynamoEndpoint, stream, group, n] = process.argv.slice(2);
const seen = new Set();
const state = { total: 0, first: null, last: null, cpu_first: null, cpu_last: null };
const cpu = () => { const u = process.cpuUsage(); return (u.user + u.system) / 1e6; };
const report = () => {
  fs.writeFileSync(status + '.tmp', JSON.stringify({ ...state, unique: seen.size }));
  fs.renameSync(status + '.tmp', status);
};
const client = new Kinesis({
  streamName: stream, consumerGroup: group, initialPositionInStream: 'TRIM_HORIZON',
  endpoint: kinesisEndpoint, dynamoDb: { endpoint: dynamoEndpoint }, useEnhancedFanOut: false,
});
client.on('data', (data) => {
  if (state.first === null) { state.first = Date.now() / 1000; state.cpu_first = cpu(); }
  for (const r of data.records) seen.add(r.sequenceNumber);
  state.total += data.records.length;
  if (seen.size >= Number(n) && state.last === null) {
    state.last = Date.now() / 1000; state.cpu_last = cpu();
    client.stopConsumer();
    report();
    process.exit(0);
  }
});
setInterval(report, 100);
client.on('error', (e) => console.error(e));
client.startConsumer().catch((e) => { console.error(e); process.exit(1); });
"#;

/// One consumer's figures.
struct Row {
    consumer: &'static str,
    mode: &'static str,
    read: u64,
    duplicates: Option<u64>,
    /// CPU seconds of the process and its waited-for children, start to exit.
    cpu: f64,
    /// Seconds from start to exit.
    wall: f64,
    /// Seconds from start to the first record.
    first: Option<f64>,
    /// Seconds from the first record to the `n`-th.
    read_wall: Option<f64>,
    /// CPU seconds of the process from the first record to the `n`-th.
    read_cpu: Option<f64>,
    rss_mib: f64,
}

/// A child's peak RSS so far (MiB), from `/proc` (`VmHWM`; 0 once it has exited).
fn peak_rss(child: &Child) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{}/status", child.id())).unwrap_or_default();
    let kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0.0);
    kib / 1024.0
}

/// The `/proc/<pid>/stat` fields after the command name.
fn stat(child: &Child) -> Vec<String> {
    let stat = std::fs::read_to_string(format!("/proc/{}/stat", child.id())).unwrap_or_default();
    stat.rsplit(')').next().unwrap_or("").split_whitespace().map(str::to_owned).collect()
}

/// CPU seconds of `child` so far: utime + stime, and with `children` its waited-for
/// children's cutime + cstime (fields 14-17 of `/proc/<pid>/stat`, in 1/100 s).
fn cpu_so_far(child: &Child, children: bool) -> f64 {
    let f = stat(child);
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    let own = ticks(11) + ticks(12);
    (if children { own + ticks(13) + ticks(14) } else { own }) / 100.0
}

/// Whether `child` has exited (a zombie not yet reaped).
fn exited(child: &Child) -> bool {
    stat(child).first().is_none_or(|state| state == "Z")
}

fn signal(child: &Child, sig: &str) {
    let _ = Command::new("kill").arg(format!("-{sig}")).arg(child.id().to_string()).status();
}

/// Runs `cmd` until it exits by itself (SIGKILL after `limit`), calling `watch` with
/// it every 20 ms while it runs: wall seconds from start to exit, CPU seconds (it and
/// its waited-for children, read from the zombie) and peak RSS in MiB.
fn run(name: &str, mut cmd: Command, log: &Path, limit: Duration, mut watch: impl FnMut(&Child)) -> (f64, f64, f64) {
    let started = Instant::now();
    let mut child = cmd
        .env("AWS_ACCESS_KEY_ID", "test")
        .env("AWS_SECRET_ACCESS_KEY", "test")
        .env("AWS_REGION", "us-east-1")
        .stdout(std::fs::File::create(log).unwrap())
        .stderr(std::fs::File::create(log.with_extension("err")).unwrap())
        .spawn()
        .unwrap_or_else(|e| panic!("{name}: cannot start {cmd:?}: {e}"));
    let mut rss: f64 = 0.0;
    while !exited(&child) {
        rss = rss.max(peak_rss(&child));
        watch(&child);
        if started.elapsed() > limit {
            signal(&child, "KILL");
        }
        std::thread::sleep(Duration::from_millis(20)); // sampling a running process
    }
    let wall = started.elapsed().as_secs_f64();
    let cpu = cpu_so_far(&child, true);
    child.wait().unwrap();
    (wall, cpu, rss)
}

fn now() -> f64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64()
}

/// Runs a peer that reports to `status` and exits by itself once it has seen `n`
/// distinct records. Its reading phase (wall and CPU) is what it measured itself.
fn peer(consumer: &'static str, mode: &'static str, cmd: Command, status: &Path, n: u64, log: &Path) -> Row {
    let t0 = now();
    let (wall, cpu, rss_mib) = run(consumer, cmd, log, Duration::from_secs(600), |_| ());
    let seen: serde_json::Value = std::fs::read(status)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_else(|| panic!("{consumer} {mode} reported nothing:\n{}", logs(log)));
    let unique = seen["unique"].as_u64().unwrap();
    assert!(unique >= n, "{consumer} {mode} exited after {unique} of {n} records:\n{}", logs(log));
    let read = seen["total"].as_u64().unwrap();
    let f = |k: &str| seen[k].as_f64();
    Row {
        consumer,
        mode,
        read,
        duplicates: Some(read - unique),
        cpu,
        wall,
        first: f("first").map(|first| first - t0),
        read_wall: f("last").zip(f("first")).map(|(l, f)| l - f),
        read_cpu: f("cpu_last").zip(f("cpu_first")).map(|(l, f)| l - f),
        rss_mib,
    }
}

fn logs(log: &Path) -> String {
    format!(
        "{}\n{}",
        std::fs::read_to_string(log).unwrap_or_default(),
        std::fs::read_to_string(log.with_extension("err")).unwrap_or_default()
    )
}

/// The records weir has delivered to its consumers so far, from its `/metrics` page.
fn delivered(port: u16) -> Option<f64> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").ok()?;
    let mut page = String::new();
    s.read_to_string(&mut page).ok()?;
    Some(metric_samples(&page, "weir_records_delivered_total").iter().map(|(_, v)| v).sum())
}

/// `weir run --until-caught-up` with `consumer`; it exits by itself. Its reading phase
/// is seen from outside: its delivered-records counter on `/metrics` and its CPU in
/// `/proc` (its own threads only), read together every 20 ms.
fn weir(mode: &'static str, dir: &Path, endpoint: &str, consumer: &str, efo: Option<&str>, n: u64) -> Row {
    let name = format!("weir-{mode}").replace([' ', '(', ')', ','], "");
    let cfg = dir.join(format!("{name}.toml"));
    let efo = efo.map_or(String::new(), |c| format!("efo_consumer = \"{c}\"\n"));
    let port = free_port();
    let db = dir.join(format!("{name}.db"));
    let _ = std::fs::remove_file(&db); // every run starts from TRIM_HORIZON
    std::fs::write(
        &cfg,
        format!(
            "[worker]\ninitial_position = \"TRIM_HORIZON\"\n[stream]\nkind = \"kinesis\"\nname = \"peers\"\n{efo}\
             [leases]\npath = \"{}\"\n[aws]\nkinesis_endpoint_url = \"{endpoint}\"\n\
             [http]\nlisten = \"127.0.0.1:{port}\"\n[[consumers]]\n{consumer}\n",
            db.display()
        ),
    )
    .unwrap();
    let mut cmd = Command::new(weir_binary());
    cmd.args(["run", "--config", cfg.to_str().unwrap(), "--until-caught-up"]).current_dir(dir);
    let out = dir.join(format!("{name}.out"));
    let started = Instant::now();
    // (seconds since start, CPU seconds) at the first delivered record and the n-th.
    type At = Option<(f64, f64)>;
    let (mut first, mut last): (At, At) = (None, None);
    let (wall, cpu, rss_mib) = run("weir", cmd, &out, Duration::from_secs(900), |child| {
        if last.is_some() {
            return;
        }
        let Some(count) = delivered(port) else { return };
        let at = (started.elapsed().as_secs_f64(), cpu_so_far(child, false));
        if count > 0.0 && first.is_none() {
            first = Some(at);
        }
        if count >= n as f64 {
            last = Some(at);
        }
    });
    let text = std::fs::read_to_string(&out).unwrap();
    let read: u64 = text
        .split_once("caught up: every shard read to the start (")
        .and_then(|(_, rest)| rest.split(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("weir {mode}: {}", logs(&out)));
    Row {
        consumer: "weir",
        mode,
        read,
        duplicates: None,
        cpu,
        wall,
        first: first.map(|f| f.0),
        read_wall: first.zip(last).map(|(f, l)| l.0 - f.0),
        read_cpu: first.zip(last).map(|(f, l)| l.1 - f.1),
        rss_mib,
    }
}

/// The median of `v` and its range, formatted with `digits` decimals.
fn median(mut v: Vec<f64>, digits: usize) -> String {
    if v.is_empty() {
        return "-".to_owned();
    }
    v.sort_by(f64::total_cmp);
    let m = v[v.len() / 2];
    if v.len() == 1 {
        format!("{m:.digits$}")
    } else {
        format!("{m:.digits$} ({:.digits$}–{:.digits$})", v[0], v[v.len() - 1])
    }
}

/// One line per consumer and mode: the median over its runs and, in brackets, the range.
fn table(rows: &[Row], n: u64) -> String {
    let mut out = String::from(
        "| consumer | mode | runs | records read | duplicates | process CPU-s | process wall s | first record (s) | \
         reading wall s | reading CPU-s | peak RSS (MiB) |\n|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    let per = |v: f64| v * 100_000.0 / n as f64;
    let mut seen: Vec<(&str, &str)> = Vec::new();
    for r in rows {
        if seen.contains(&(r.consumer, r.mode)) {
            continue;
        }
        seen.push((r.consumer, r.mode));
        let runs: Vec<&Row> = rows.iter().filter(|o| (o.consumer, o.mode) == (r.consumer, r.mode)).collect();
        let col = |f: &dyn Fn(&Row) -> Option<f64>, d: usize| median(runs.iter().filter_map(|r| f(r)).collect(), d);
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
            r.consumer,
            r.mode,
            runs.len(),
            runs.iter().map(|r| r.read).max().unwrap_or(0),
            runs.iter().filter_map(|r| r.duplicates).max().map_or("-".to_owned(), |d| d.to_string()),
            col(&|r| Some(per(r.cpu)), 2),
            col(&|r| Some(r.wall), 1),
            col(&|r| r.first, 1),
            col(&|r| r.read_wall, 1),
            col(&|r| r.read_cpu.map(per), 2),
            col(&|r| Some(r.rss_mib), 0),
        ));
    }
    out
}

fn python(venv: &Path) -> PathBuf {
    venv.join("bin/python")
}

#[tokio::main]
async fn main() {
    let full = std::env::args().any(|a| a == "--bench");
    let n: u64 = std::env::var("WEIR_PEERS_RECORDS").ok().and_then(|v| v.parse().ok()).unwrap_or(if full {
        100_000
    } else {
        2_000
    });
    let only = std::env::var("WEIR_PEERS_ONLY").unwrap_or_default();
    let want = |name: &str| only.is_empty() || only.split(',').any(|o| name.starts_with(o));
    let fk = Emulator::start("ferrokinesis", &[]);
    let moto = Emulator::start("moto", &[]);
    let client = kinesis(&fk.endpoint).await;
    create_stream(&client, "peers", 4).await;
    let size: usize = std::env::var("WEIR_PEERS_RECORD_BYTES").ok().and_then(|v| v.parse().ok()).unwrap_or(1024);
    put_mcp_events(&client, "peers", n, size).await;
    let runs: usize =
        std::env::var("WEIR_PEERS_RUNS").ok().and_then(|v| v.parse().ok()).unwrap_or(if full { 3 } else { 1 });
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let home = emulators_home();
    let mut rows = Vec::new();
    std::fs::write(d.join("processor.py"), KCLPY_CHECKPOINTER).unwrap();
    std::fs::write(d.join("kcl_rs_peer.py"), KCL_RS).unwrap();
    std::fs::write(d.join("lifion_peer.js"), LIFION).unwrap();
    // Each run reads every consumer once, in turn; a run's names (lease tables, consumer
    // groups, fan-out consumers) are its own, so each starts from TRIM_HORIZON.
    for run in 0..runs {
        let count = "type = \"count\"\nname = \"count\"";
        if want("weir") {
            rows.push(weir("polling", d, &fk.endpoint, count, None, n));
            rows.push(weir("enhanced fan-out", d, &fk.endpoint, count, Some(&format!("weir-peers-{run}")), n));
        }
        if want("multilang") {
            let consumer = format!(
                "type = \"multilang\"\nname = \"py\"\ncommand = [\"python3\", \"processor.py\"]\ncwd = \"{}\"\n\
                 env = {{ PYTHONPATH = \"{}\" }}",
                d.display(),
                home.join("amazon_kclpy-3.2.0").display()
            );
            let mut row = weir("polling, MultiLang Python", d, &fk.endpoint, &consumer, None, n);
            row.consumer = "weir + amazon_kclpy";
            rows.push(row);
        }
        if want("kcl-rs") {
            for (mode, label) in [("POLLING", "polling"), ("FANOUT", "enhanced fan-out")] {
                let status = d.join(format!("kcl-rs-{mode}-{run}.json"));
                let app = format!("peers-kcl-rs-{}-{run}", mode.to_lowercase());
                let mut cmd = Command::new(python(&home.join("kcl-rs-0.1.4")));
                cmd.arg(d.join("kcl_rs_peer.py"))
                    .args([status.to_str().unwrap(), mode, "peers", &app, &n.to_string()])
                    .env("AWS_ENDPOINT_URL_KINESIS", &fk.endpoint)
                    .env("AWS_ENDPOINT_URL_DYNAMODB", &moto.endpoint)
                    .env("AWS_ENDPOINT_URL_CLOUDWATCH", &moto.endpoint);
                rows.push(peer("kcl-rs 0.1.4", label, cmd, &status, n, &d.join(format!("kcl-rs-{mode}-{run}.log"))));
            }
        }
        if want("lifion") {
            let status = d.join(format!("lifion-{run}.json"));
            let mut cmd = Command::new("node");
            cmd.arg(d.join("lifion_peer.js"))
                .args([status.to_str().unwrap(), &fk.endpoint, &moto.endpoint, "peers"])
                .args([format!("peers-lifion-{run}"), n.to_string()])
                .env("NODE_PATH", home.join("lifion-kinesis-1.3.3/node_modules"));
            rows.push(peer("lifion-kinesis 1.3.3", "polling", cmd, &status, n, &d.join(format!("lifion-{run}.log"))));
        }
    }

    println!("\n{n} records of {size} bytes, 4 shards, ferrokinesis (emulator-bound), median (range) of {runs} runs\n");
    print!("{}", table(&rows, n));
    for r in &rows {
        assert!(r.read >= n, "{} {} read {} of {n} records", r.consumer, r.mode, r.read);
    }
}
