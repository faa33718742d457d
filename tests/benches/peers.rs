//! weir beside its peers, in one run: the same ferrokinesis stream (4 shards, MCP events
//! of about 1 KB, all written before any consumer starts), each consumer reading from
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

use weir_e2e::{KCLPY_CHECKPOINTER, create_stream, emulators_home, kinesis, put_records_of, weir_binary};
use weir_testkit::Emulator;

/// A kcl-rs processor that checkpoints every batch; what it saw is written every 100 ms.
const KCL_RS: &str = r#"
import json, os, sys, threading, time
from kcl_rs import RecordProcessorBase, Scheduler

status, mode, stream = sys.argv[1], sys.argv[2], sys.argv[3]
seen, state = set(), {"total": 0, "first": None, "last": None}

def report():
    with open(status + ".tmp", "w") as f:
        json.dump({"total": state["total"], "unique": len(seen), "first": state["first"], "last": state["last"]}, f)
    os.replace(status + ".tmp", status)

def reporter():
    while True:
        time.sleep(0.1)
        report()

threading.Thread(target=reporter, daemon=True).start()

class Counter(RecordProcessorBase):
    def initialize(self, initialize_input):
        pass
    def process_records(self, process_records_input):
        now = time.time()
        state["first"] = state["first"] or now
        for r in process_records_input.records:
            seen.add(r.sequence_number)
        state["total"] += len(process_records_input.records)
        state["last"] = now
        process_records_input.checkpointer.checkpoint()
    def lease_lost(self, lease_lost_input):
        pass
    def shard_ended(self, shard_ended_input):
        shard_ended_input.checkpointer.checkpoint()
    def shutdown_requested(self, shutdown_requested_input):
        pass

extra = {"max_records": 10000, "idle_time_between_reads_millis": 200} if mode == "POLLING" else {}
Scheduler(stream_name=stream, application_name="peers-kcl-rs-" + mode.lower(), record_processor_factory=Counter,
          region="us-east-1", initial_position="TRIM_HORIZON", retrieval_mode=mode, **extra).run()
"#;

/// A lifion-kinesis consumer that checkpoints every batch (its auto checkpoints); what
/// it saw is written every 100 ms.
const LIFION: &str = r#"
const fs = require('fs');
const Kinesis = require('lifion-kinesis');
const [status, kinesisEndpoint, dynamoEndpoint, stream] = process.argv.slice(2);
const seen = new Set();
const state = { total: 0, first: null, last: null };
const client = new Kinesis({
  streamName: stream, consumerGroup: 'peers-lifion', initialPositionInStream: 'TRIM_HORIZON',
  endpoint: kinesisEndpoint, dynamoDb: { endpoint: dynamoEndpoint }, useEnhancedFanOut: false,
  useAutoCheckpoints: true, createStreamIfNeeded: false, noRecordsPollDelay: 250, pollDelay: 0,
});
client.on('data', (data) => {
  const now = Date.now() / 1000;
  state.first = state.first || now;
  for (const r of data.records) seen.add(r.sequenceNumber);
  state.total += data.records.length;
  state.last = now;
});
setInterval(() => {
  fs.writeFileSync(status + '.tmp', JSON.stringify({ total: state.total, unique: seen.size, first: state.first, last: state.last }));
  fs.renameSync(status + '.tmp', status);
}, 100);
client.on('error', (e) => console.error(e));
client.startConsumer().catch((e) => { console.error(e); process.exit(1); });
"#;

/// One consumer's figures.
struct Row {
    consumer: &'static str,
    mode: &'static str,
    read: u64,
    duplicates: Option<u64>,
    cpu: f64,
    first: Option<f64>,
    last: f64,
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

/// Whether `child` has exited (a zombie not yet reaped).
fn exited(child: &Child) -> bool {
    stat(child).first().is_none_or(|state| state == "Z")
}

/// Waits for `child` to exit, sampling its peak RSS, and reaps it: CPU seconds (it and
/// its waited-for children: utime, stime, cutime, cstime, read from the zombie) and
/// peak RSS in MiB (sampled every 20 ms while it ran).
fn reap(mut child: Child, limit: Duration) -> (f64, f64) {
    let started = Instant::now();
    let mut rss: f64 = 0.0;
    while !exited(&child) {
        rss = rss.max(peak_rss(&child));
        if started.elapsed() > limit {
            signal(&child, "KILL");
        }
        std::thread::sleep(Duration::from_millis(20)); // sampling a running process
    }
    let f = stat(&child);
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // After the command name: utime, stime, cutime, cstime are fields 14-17, in 1/100 s.
    let cpu = (ticks(11) + ticks(12) + ticks(13) + ticks(14)) / 100.0;
    child.wait().unwrap();
    (cpu, rss)
}

fn signal(child: &Child, sig: &str) {
    let _ = Command::new("kill").arg(format!("-{sig}")).arg(child.id().to_string()).status();
}

/// Runs a peer that reports to `status` until it has seen `n` distinct records, then
/// stops it (SIGTERM, SIGKILL after 10 s) and reaps it.
fn peer(consumer: &'static str, mode: &'static str, mut cmd: Command, status: &Path, n: u64, log: &Path) -> Row {
    let started = Instant::now();
    let child = cmd
        .env("AWS_ACCESS_KEY_ID", "test")
        .env("AWS_SECRET_ACCESS_KEY", "test")
        .env("AWS_REGION", "us-east-1")
        .stdout(std::fs::File::create(log).unwrap())
        .stderr(std::fs::File::create(log.with_extension("err")).unwrap())
        .spawn()
        .unwrap_or_else(|e| panic!("{consumer}: cannot start {cmd:?}: {e}"));
    let mut rss: f64 = 0.0;
    let t0 = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64();
    let limit = Duration::from_secs(600);
    let seen = loop {
        let seen: Option<serde_json::Value> = std::fs::read(status).ok().and_then(|b| serde_json::from_slice(&b).ok());
        if let Some(s) = seen.filter(|s| s["unique"].as_u64() >= Some(n)) {
            break s;
        }
        let log_text = || {
            format!(
                "{}\n{}",
                std::fs::read_to_string(log).unwrap_or_default(),
                std::fs::read_to_string(log.with_extension("err")).unwrap_or_default()
            )
        };
        if exited(&child) {
            panic!("{consumer} {mode} exited before reading {n} records:\n{}", log_text());
        }
        assert!(started.elapsed() < limit, "{consumer} {mode} read too little in {limit:?}:\n{}", log_text());
        rss = rss.max(peak_rss(&child));
        std::thread::sleep(Duration::from_millis(50)); // polling the peer's report, not synchronising
    };
    // The peer's own shutdown is not in its wall time, but its CPU counts.
    signal(&child, "TERM");
    let (cpu, during_shutdown) = reap(child, Duration::from_secs(10));
    let rss_mib = rss.max(during_shutdown);
    let read = seen["total"].as_u64().unwrap();
    let unique = seen["unique"].as_u64().unwrap();
    Row {
        consumer,
        mode,
        read,
        duplicates: Some(read - unique),
        cpu,
        first: seen["first"].as_f64().map(|f| f - t0),
        last: seen["last"].as_f64().map_or(0.0, |l| l - t0),
        rss_mib,
    }
}

/// `weir run --until-caught-up` with `consumer`; it exits by itself.
fn weir(mode: &'static str, dir: &Path, endpoint: &str, consumer: &str, efo: bool) -> Row {
    let name = format!("weir-{mode}").replace([' ', '(', ')'], "");
    let cfg = dir.join(format!("{name}.toml"));
    let efo = if efo { "efo_consumer = \"weir-peers\"\n" } else { "" };
    std::fs::write(
        &cfg,
        format!(
            "[worker]\ninitial_position = \"TRIM_HORIZON\"\n[stream]\nkind = \"kinesis\"\nname = \"peers\"\n{efo}\
             [leases]\npath = \"{}\"\n[aws]\nkinesis_endpoint_url = \"{endpoint}\"\n[http]\nlisten = \"\"\n\
             [[consumers]]\n{consumer}\n",
            dir.join(format!("{name}.db")).display()
        ),
    )
    .unwrap();
    let started = Instant::now();
    let child = Command::new(weir_binary())
        .args(["run", "--config", cfg.to_str().unwrap(), "--until-caught-up"])
        .current_dir(dir)
        .env("AWS_ACCESS_KEY_ID", "test")
        .env("AWS_SECRET_ACCESS_KEY", "test")
        .env("AWS_REGION", "us-east-1")
        .stdout(std::fs::File::create(dir.join(format!("{name}.out"))).unwrap())
        .stderr(std::fs::File::create(dir.join(format!("{name}.err"))).unwrap())
        .spawn()
        .unwrap();
    let (cpu, rss_mib) = reap(child, Duration::from_secs(900));
    let last = started.elapsed().as_secs_f64();
    let out = std::fs::read_to_string(dir.join(format!("{name}.out"))).unwrap();
    let read: u64 = out
        .split_once("caught up: every shard read to the start (")
        .and_then(|(_, rest)| rest.split(' ').next()?.parse().ok())
        .unwrap_or_else(|| {
            panic!("weir {mode}: {out}\n{}", std::fs::read_to_string(dir.join(format!("{name}.err"))).unwrap())
        });
    Row { consumer: "weir", mode, read, duplicates: None, cpu, first: None, last, rss_mib }
}

fn table(rows: &[Row], n: u64) -> String {
    let mut out = String::from(
        "| consumer | mode | records read | duplicates | CPU-s per 100k records | first record (s) | last record (s) | peak RSS (MiB) |\n\
         |---|---|---|---|---|---|---|---|\n",
    );
    for r in rows {
        out.push_str(&format!(
            "| {} | {} | {} | {} | {:.2} | {} | {:.1} | {:.0} |\n",
            r.consumer,
            r.mode,
            r.read,
            r.duplicates.map_or("-".to_owned(), |d| d.to_string()),
            r.cpu * 100_000.0 / n as f64,
            r.first.map_or("-".to_owned(), |f| format!("{f:.1}")),
            r.last,
            r.rss_mib
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
    put_records_of(&client, "peers", n, size).await;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let home = emulators_home();
    let mut rows = Vec::new();

    if want("weir") {
        rows.push(weir("polling", d, &fk.endpoint, "type = \"count\"\nname = \"count\"", false));
        rows.push(weir("enhanced fan-out", d, &fk.endpoint, "type = \"count\"\nname = \"count\"", true));
    }
    if want("multilang") {
        std::fs::write(d.join("processor.py"), KCLPY_CHECKPOINTER).unwrap();
        let consumer = format!(
            "type = \"multilang\"\nname = \"py\"\ncommand = [\"python3\", \"processor.py\"]\ncwd = \"{}\"\n\
             env = {{ PYTHONPATH = \"{}\" }}",
            d.display(),
            home.join("amazon_kclpy-3.2.0").display()
        );
        let mut row = weir("polling, MultiLang Python", d, &fk.endpoint, &consumer, false);
        row.consumer = "weir + amazon_kclpy";
        rows.push(row);
    }
    if want("kcl-rs") {
        std::fs::write(d.join("kcl_rs_peer.py"), KCL_RS).unwrap();
        for (mode, label) in [("POLLING", "polling"), ("FANOUT", "enhanced fan-out")] {
            let status = d.join(format!("kcl-rs-{mode}.json"));
            let mut cmd = Command::new(python(&home.join("kcl-rs-0.1.4")));
            cmd.arg(d.join("kcl_rs_peer.py"))
                .args([status.to_str().unwrap(), mode, "peers"])
                .env("AWS_ENDPOINT_URL_KINESIS", &fk.endpoint)
                .env("AWS_ENDPOINT_URL_DYNAMODB", &moto.endpoint)
                .env("AWS_ENDPOINT_URL_CLOUDWATCH", &moto.endpoint);
            rows.push(peer("kcl-rs 0.1.4", label, cmd, &status, n, &d.join(format!("kcl-rs-{mode}.log"))));
        }
    }
    if want("lifion") {
        let script = d.join("lifion_peer.js");
        std::fs::write(&script, LIFION).unwrap();
        let status = d.join("lifion.json");
        let mut cmd = Command::new("node");
        cmd.arg(&script)
            .args([status.to_str().unwrap(), &fk.endpoint, &moto.endpoint, "peers"])
            .env("NODE_PATH", home.join("lifion-kinesis-1.3.3/node_modules"));
        rows.push(peer("lifion-kinesis 1.3.3", "polling", cmd, &status, n, &d.join("lifion.log")));
    }

    println!("\n{n} records of {size} bytes, 4 shards, ferrokinesis (emulator-bound)\n");
    print!("{}", table(&rows, n));
    for r in &rows {
        assert!(r.read >= n, "{} {} read {} of {n} records", r.consumer, r.mode, r.read);
    }
}
