//! Replay throughput of the `weir` binary, pinned to one core (`taskset -c 0`), through
//! the archiver into a new prefix partitioned by tool and day (jq `{tool: .tool_name}`,
//! GZIP, local directory, SQLite leases):
//! - from an archive: gzip NDJSON objects laid out as the design note's archive
//!   (tenant/tool/year/month/day/hour), `weir replay --from-archive`;
//! - from ferrokinesis by polling: the same events put into a 4-shard stream, `weir
//!   replay --from --to`.
//!
//! Prints records/s (wall) and CPU-seconds of the `weir` process per 100k records.
//!
//! Then the objects a backfill writes ([`backfill`]): 300,000 events replayed into the
//! design note's archiver (tenant × tool × hour, 120 or 12,000 partitions) from 1, 15,
//! 150 and 2,000 archived objects, and from an 8-shard stream window of the same events
//! (the live archiver's read, at both partition counts); objects written
//! against partitions × hours present, CPU-seconds and peak RSS of the `weir` process.
//!
//! cargo build --release -p weir && cargo bench -p weir-e2e --bench replay
//!     (1,000,000 archived records; 200,000 in ferrokinesis; the backfills as above)
//! Under `cargo test` it runs once with 5,000 / 2,000 records as a smoke test, and the
//! backfills with 3,000 events at 120 partitions from 1, 15 and 150 objects and a
//! 4-shard window; every backfill must write at most 1.1 objects a partition-hour.
#![allow(clippy::unwrap_used, clippy::print_stdout)] // a test: a failed expectation is a failed test

#[path = "replay/backfill.rs"]
mod backfill;

use std::io::Write;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use bytes::Bytes;
use flate2::Compression;
use flate2::write::GzEncoder;
use weir_aws::kinesis::producer::{Outgoing, Producer};
use weir_core::{Clock, SystemClock, Timestamp};
use weir_e2e::{by_tool_archiver_toml, cpu_seconds, create_stream, gz_lines, kinesis, weir_binary};
use weir_testkit::Emulator;

const TENANTS: u64 = 20;
const TOOLS: [&str; 5] = ["search", "fetch_url", "read_file", "write_file", "run_sql"];

fn event(i: u64, ts: i64) -> String {
    let iso = Timestamp::from_millis(ts).to_rfc3339();
    format!(
        r#"{{"schema_version":"1","tenant_id":"t-{:03}","tool_name":"{}","session_id":"s-{i:016x}","timestamp_utc":"{iso}","duration_ms":{},"success":{},"error_code":{}}}"#,
        i % TENANTS,
        TOOLS[(i / TENANTS) as usize % TOOLS.len()],
        (i * 7) % 900,
        !i.is_multiple_of(13),
        if i.is_multiple_of(13) { r#""E_TIMEOUT""# } else { "null" }
    )
}

/// Writes `n` events as the archiver would: one object per tenant and tool, at most
/// 10,000 lines each, named with the hour's first second. Returns the raw bytes.
fn write_archive(root: &Path, n: u64, t0: i64) -> u64 {
    let mut raw = 0;
    let per_object = 10_000u64;
    let mut groups: std::collections::BTreeMap<(u64, usize), Vec<String>> = Default::default();
    for i in 0..n {
        groups.entry((i % TENANTS, (i / TENANTS) as usize % TOOLS.len())).or_default().push(event(i, t0 + i as i64));
    }
    for ((tenant, tool), lines) in groups {
        for (part, chunk) in lines.chunks(per_object as usize).enumerate() {
            let dir = root.join(format!("tenant=t-{tenant:03}/tool={}/year=2026/month=11/day=28/hour=10", TOOLS[tool]));
            std::fs::create_dir_all(&dir).unwrap();
            let mut gz = GzEncoder::new(Vec::new(), Compression::default());
            for l in chunk {
                gz.write_all(l.as_bytes()).unwrap();
                gz.write_all(b"\n").unwrap();
                raw += l.len() as u64 + 1;
            }
            let name = format!("mcp-archive-1-2026-11-28-10-00-00-{tenant:03}{tool}{part:04}.gz");
            std::fs::write(dir.join(name), gz.finish().unwrap()).unwrap();
        }
    }
    raw
}

fn config(dir: &Path, stream: &str, kinesis: Option<&str>) -> std::path::PathBuf {
    let path = dir.join("replay.toml");
    let stream_section = match kinesis {
        Some(endpoint) => {
            format!("kind = \"kinesis\"\nname = \"{stream}\"\n[aws]\nkinesis_endpoint_url = \"{endpoint}\"")
        }
        None => format!("name = \"{stream}\""),
    };
    std::fs::write(
        &path,
        format!(
            r#"
[worker]
checkpoint_interval = "1s"
tick_interval = "250ms"
[leases]
path = "{leases}"
namespace = "bench"
[stream]
{stream_section}
{archiver}
"#,
            leases = dir.join("leases.db").display(),
            archiver = by_tool_archiver_toml(&dir.join("out")),
        ),
    )
    .unwrap();
    path
}

/// Runs `weir replay` on one core; wall time and CPU seconds.
fn replay(config: &Path, args: &[&str]) -> (Duration, f64) {
    let pinned = Command::new("taskset").arg("-V").output().is_ok();
    let mut cmd = if pinned {
        let mut c = Command::new("taskset");
        c.args(["-c", "0"]).arg(weir_binary());
        c
    } else {
        Command::new(weir_binary())
    };
    cmd.args(["replay", "--config"]).arg(config).args(args);
    cmd.env("AWS_ACCESS_KEY_ID", "test").env("AWS_SECRET_ACCESS_KEY", "test").env("AWS_REGION", "us-east-1");
    let (t0, c0) = (Instant::now(), cpu_seconds(true));
    let out = cmd.output().expect("run weir replay");
    let (wall, cpu) = (t0.elapsed(), cpu_seconds(true) - c0);
    assert!(out.status.success(), "weir replay failed:\n{}", String::from_utf8_lossy(&out.stderr));
    (wall, cpu)
}

#[tokio::main]
async fn main() {
    let full = std::env::args().any(|a| a == "--bench");
    let (n_archive, n_stream): (u64, u64) = if full { (1_000_000, 200_000) } else { (5_000, 2_000) };
    let mut rows = Vec::new();

    // From the archive.
    let dir = tempfile::tempdir().unwrap();
    let archive = dir.path().join("archive");
    let t0 = 1_795_000_000_000; // any past instant; the records carry their own times
    let raw = write_archive(&archive, n_archive, t0);
    let cfg = config(dir.path(), "unused", None);
    let (wall, cpu) = replay(
        &cfg,
        &[
            "--from-archive",
            archive.to_str().unwrap(),
            "--from",
            "2026-11-28T00:00:00Z",
            "--to",
            "2026-11-29T00:00:00Z",
            "--consumers",
            "by-tool",
            "--job",
            "bench",
        ],
    );
    assert_eq!(gz_lines(&dir.path().join("out/by-tool")).len() as u64, n_archive, "every archived record replayed");
    rows.push(("archive (local gzip)", n_archive, raw, wall, cpu));

    // From ferrokinesis, polling.
    let emu = Emulator::start("ferrokinesis", &[]);
    let client = kinesis(&emu.endpoint).await;
    create_stream(&client, "bench", 4).await;
    let from = SystemClock.now().as_millis() / 1000 * 1000;
    tokio::time::sleep(Duration::from_millis(1_100)).await; // past the (rounded) start edge
    let mut raw = 0;
    let producer = Producer::new(client.clone(), "bench");
    for chunk in (0..n_stream).collect::<Vec<_>>().chunks(50_000) {
        let records = chunk
            .iter()
            .map(|&i| {
                let line = event(i, t0 + i as i64);
                raw += line.len() as u64;
                Outgoing { id: i, partition_key: format!("k{i}"), data: Bytes::from(line) }
            })
            .collect();
        let report = producer.put_all(records).await;
        assert!(report.failed.is_empty(), "{:?}", report.failed.first());
    }
    tokio::time::sleep(Duration::from_millis(1_100)).await; // past the (rounded) end edge
    let to = SystemClock.now().as_millis();
    let kdir = tempfile::tempdir().unwrap();
    let cfg = config(kdir.path(), "bench", Some(&emu.endpoint));
    let (wall, cpu) = replay(
        &cfg,
        &[
            "--from",
            &from.to_string(),
            "--to",
            &to.to_string(),
            "--consumers",
            "by-tool",
            "--job",
            "bench",
            "--end-idle",
            "1s",
        ],
    );
    assert_eq!(
        gz_lines(&kdir.path().join("out/by-tool")).len() as u64,
        n_stream,
        "every record of the window replayed"
    );
    rows.push(("ferrokinesis (polling)", n_stream, raw, wall, cpu));

    println!("\nweir replay through the archiver into a new partitioning (one core: taskset -c 0)");
    println!(
        "{:<24} {:>10} {:>10} {:>9} {:>11} {:>10} {:>20}",
        "source", "records", "raw MB", "seconds", "records/s", "MB/s raw", "CPU-s per 100k rec"
    );
    for (source, n, raw, wall, cpu) in rows {
        let s = wall.as_secs_f64();
        println!(
            "{source:<24} {n:>10} {:>10.1} {s:>9.2} {:>11.0} {:>10.1} {:>20.2}",
            raw as f64 / 1e6,
            n as f64 / s,
            raw as f64 / 1e6 / s,
            cpu * 100_000.0 / n as f64
        );
    }
    println!("(wall time includes process start, lease set-up and the end-of-window wait of 1 s for the stream)");

    // Backfills: objects a partition-hour, whatever the input's cut.
    let (n, sizes, inputs, shards): (u64, &[(u64, u64)], &[u64], i32) = if full {
        (300_000, &[(12, 10), (300, 40)], &[1, 15, 150, 2_000], 8)
    } else {
        (3_000, &[(12, 10)], &[1, 15, 150], 4)
    };
    let mut rows = Vec::new();
    for &(tenants, tools) in sizes {
        for &k in inputs {
            rows.push(backfill::from_archive(n, k, tenants, tools));
            backfill::print(&rows[rows.len() - 1..]);
        }
    }
    drop(emu);
    for &(tenants, tools) in sizes {
        rows.push(backfill::from_stream(n, shards, tenants, tools).await);
        backfill::print(&rows[rows.len() - 1..]);
    }
    backfill::print(&rows);
    for r in &rows {
        assert!(r.ratio() <= 1.1, "{}: {} objects for {} partition-hours", r.source, r.objects, r.partition_hours);
    }
}
