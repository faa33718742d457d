//! The cost of a KCL MultiLang processor on weir: `weir run --until-caught-up` over
//! ferrokinesis streams of 1 KB records read by polling, the whole process tree (weir
//! and its children), start to exit; each case on a 4-shard and a 1-shard stream:
//!
//! - weir's no-op Rust `count` consumer (4 shards only);
//! - a Python processor on `amazon_kclpy` that only checkpoints each batch (its cost is
//!   CPU: JSON and base64 on both sides of the pipe, and Python);
//! - a raw-protocol Python processor that sleeps per batch (as one waiting on I/O) and
//!   checkpoints it: 5 ms, and 250 ms, where the processor and not the read is the
//!   bottleneck (a shard is read at most 5 calls a second). One worker runs each
//!   shard's processor at the same time, so there 4 shards go several times as fast
//!   as 1 (3.1× on 2026-12-04); with one batch at a time per worker they could go no
//!   faster than 1.
//!
//! cargo build --release -p weir && cargo bench -p weir-e2e --bench multilang   (100,000 records)
//! Under `cargo test` it runs once with 2,000 records as a smoke test.
#![allow(clippy::unwrap_used, clippy::print_stdout)] // a test: a failed expectation is a failed test

use std::path::Path;
use std::time::Duration;

use weir_e2e::{
    KCLPY_CHECKPOINTER, cpu_seconds, create_stream, emulators_home, kinesis, put_kilobyte_records, timed, weir_command,
};
use weir_testkit::Emulator;

/// A processor on the raw MultiLang protocol (standard library only) that sleeps
/// `$SLEEP_MS` per batch, as one waiting on I/O would, then checkpoints at its last
/// record.
const SLEEPER: &str = r#"
import json, os, sys, time
SLEEP = int(os.environ["SLEEP_MS"]) / 1000
def send(m):
    sys.stdout.write(json.dumps(m) + "\n"); sys.stdout.flush()
for line in sys.stdin:
    m = json.loads(line)
    a = m["action"]
    if a == "processRecords" and m["records"]:
        time.sleep(SLEEP)
        send({"action": "checkpoint", "sequenceNumber": m["records"][-1]["sequenceNumber"], "subSequenceNumber": None})
        sys.stdin.readline()
    elif a in ("shutdownRequested", "shardEnded"):
        send({"action": "checkpoint", "sequenceNumber": None, "subSequenceNumber": None})
        sys.stdin.readline()
    send({"action": "status", "responseFor": a})
"#;

/// One measured run: `consumer` (a `[[consumers]]` table) over `stream`.
struct Case<'a> {
    name: &'a str,
    stream: &'a str,
    consumer: String,
}

/// Runs `weir run --until-caught-up`; returns wall and CPU seconds of weir and its
/// children.
fn run(dir: &Path, endpoint: &str, case: &Case<'_>, n: u64) -> (f64, f64) {
    let file = case.name.replace(|c: char| !c.is_ascii_alphanumeric(), "-");
    let cfg = dir.join(format!("{file}.toml"));
    std::fs::write(
        &cfg,
        format!(
            "[worker]\ninitial_position = \"TRIM_HORIZON\"\n[stream]\nkind = \"kinesis\"\nname = \"{}\"\n\
             [leases]\npath = \"{}\"\n[aws]\nkinesis_endpoint_url = \"{endpoint}\"\n[http]\nlisten = \"\"\n\
             [[consumers]]\n{}\n",
            case.stream,
            dir.join(format!("{file}.db")).display(),
            case.consumer,
        ),
    )
    .unwrap();
    let mut cmd = weir_command();
    cmd.args(["run", "--config", cfg.to_str().unwrap(), "--until-caught-up"]);
    let c0 = cpu_seconds(true);
    let (out, wall) = timed(cmd, Duration::from_secs(900));
    let cpu = cpu_seconds(true) - c0;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains(&format!("({n} records processed)")), "{}: {stdout}", case.name);
    (wall.as_secs_f64(), cpu)
}

/// A `multilang` consumer running `script` in `dir`, with `env` (TOML inline-table
/// entries).
fn multilang(dir: &Path, script: &str, env: &str) -> String {
    format!(
        "type = \"multilang\"\nname = \"py\"\ncommand = [\"python3\", \"{script}\"]\ncwd = \"{}\"\n\
         env = {{ {env} }}",
        dir.display(),
    )
}

#[tokio::main]
async fn main() {
    let full = std::env::args().any(|a| a == "--bench");
    let n: u64 = if full { 100_000 } else { 2_000 };
    let emu = Emulator::start("ferrokinesis", &[]);
    let client = kinesis(&emu.endpoint).await;
    for (stream, shards) in [("kb4", 4), ("kb1", 1)] {
        create_stream(&client, stream, shards).await;
        put_kilobyte_records(&client, stream, n).await;
    }

    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("kclpy.py"), KCLPY_CHECKPOINTER).unwrap();
    std::fs::write(dir.path().join("sleeper.py"), SLEEPER).unwrap();
    let kclpy = format!("PYTHONPATH = \"{}\"", emulators_home().join("amazon_kclpy-3.2.0").display());
    let count = "type = \"count\"\nname = \"count\"".to_owned();
    let cases = [
        Case { name: "count (no-op Rust), 4 shards", stream: "kb4", consumer: count },
        Case { name: "amazon_kclpy, 4 shards", stream: "kb4", consumer: multilang(dir.path(), "kclpy.py", &kclpy) },
        Case { name: "amazon_kclpy, 1 shard", stream: "kb1", consumer: multilang(dir.path(), "kclpy.py", &kclpy) },
        Case {
            name: "sleep 5 ms/batch, 4 shards",
            stream: "kb4",
            consumer: multilang(dir.path(), "sleeper.py", "SLEEP_MS = \"5\""),
        },
        Case {
            name: "sleep 5 ms/batch, 1 shard",
            stream: "kb1",
            consumer: multilang(dir.path(), "sleeper.py", "SLEEP_MS = \"5\""),
        },
        Case {
            name: "sleep 250 ms/batch, 4 shards",
            stream: "kb4",
            consumer: multilang(dir.path(), "sleeper.py", "SLEEP_MS = \"250\""),
        },
        Case {
            name: "sleep 250 ms/batch, 1 shard",
            stream: "kb1",
            consumer: multilang(dir.path(), "sleeper.py", "SLEEP_MS = \"250\""),
        },
    ];
    let rows: Vec<(&str, (f64, f64))> = cases.iter().map(|c| (c.name, run(dir.path(), &emu.endpoint, c, n))).collect();
    println!("\n`weir run --until-caught-up` over {n} records of 1 KB, ferrokinesis, polling");
    println!("(whole process tree, start to exit)");
    println!("{:<30} {:>9} {:>11} {:>22}", "consumer", "seconds", "records/s", "CPU-s per 100k records");
    for (name, (wall, cpu)) in &rows {
        let rate = n as f64 / wall;
        println!("{name:<30} {wall:>9.2} {rate:>11.0} {:>22.2}", cpu * 100_000.0 / n as f64);
    }
    let speedup = |four: usize, one: usize| rows[one].1.0 / rows[four].1.0;
    println!("records/s, 4 shards against 1:");
    println!("  amazon_kclpy {:.2}, sleep 5 ms {:.2}, sleep 250 ms {:.2}", speedup(1, 2), speedup(3, 4), speedup(5, 6));
}
