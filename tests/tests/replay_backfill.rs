//! A backfill writes what a live archiver would: one object per partition and hour
//! (more only when the size, interval or memory budget force it), however the input is
//! cut. The design note's archiver (tenant × tool × hour, default buffering) is fed by
//! `weir replay` from an archive of an hour in 40 objects, and from a window
//! of an 8-shard stream whose reads all end together; DuckDB reads the output: every
//! record once, and at most 1.1 objects a partition-hour. (Before shard ends of a
//! replay were closed together, every object's end sealed the partitions it touched.)
#![allow(clippy::unwrap_used, clippy::print_stdout)] // a test: a failed expectation is a failed test

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use bytes::Bytes;
use flate2::Compression;
use flate2::write::GzEncoder;
use weir_aws::kinesis::producer::{Outgoing, Producer};
use weir_core::{Clock, SystemClock};
use weir_e2e::{create_stream, duckdb, kinesis, weir_command};
use weir_testkit::Emulator;

const TENANTS: u64 = 4;
const TOOLS: u64 = 3;

fn event(i: u64) -> String {
    format!(
        r#"{{"tenant_id":"t-{}","tool_name":"tool-{}","session_id":"s-{i:08}","request":{{"params":{{"n":{i}}}}}}}"#,
        i % TENANTS,
        (i / TENANTS) % TOOLS
    )
}

fn config(dir: &Path, stream_section: &str) -> PathBuf {
    weir_e2e::backfill_config(dir, stream_section)
}

fn replay(config: &Path, args: &[&str]) -> Output {
    let out = weir_command().args(["replay", "--config"]).arg(config).args(args).output().unwrap();
    assert!(out.status.success(), "weir replay failed\n{}", String::from_utf8_lossy(&out.stderr));
    out
}

/// Objects, partition-hours present, records and distinct sessions of the output, as
/// DuckDB reads them; nothing may be in the error output.
fn read_back(dir: &Path) -> (u64, u64, u64, u64) {
    assert!(!dir.join("out/errors").exists(), "no record failed");
    let glob = format!("{}/out/tool-events/**/*.gz", dir.display());
    let row = &duckdb(&format!(
        "select count(distinct filename), count(distinct (tenant, tool, year, month, day, hour)), count(*), \
         count(distinct session_id) \
         from read_json_auto('{glob}', format = 'newline_delimited', hive_partitioning = true, filename = true) \
         where tenant = tenant_id and tool = tool_name"
    ))[0];
    let n = |i: usize| row[i].as_u64().unwrap();
    (n(0), n(1), n(2), n(3))
}

#[test]
fn a_backfill_from_many_archived_objects_writes_one_object_per_partition_hour() {
    const INPUTS: u64 = 40;
    const EVENTS: u64 = 4_000;
    let dir = tempfile::tempdir().unwrap();
    let archive = dir.path().join("archive");
    std::fs::create_dir_all(&archive).unwrap();
    // 10:00 to 10:58, each object holding every partition's records.
    for k in 0..INPUTS {
        let name = format!("mcp-events-1-2026-11-28-10-{:02}-00-{k:04}.gz", k * 60 / INPUTS);
        let mut gz = GzEncoder::new(Vec::new(), Compression::fast());
        for i in k * EVENTS / INPUTS..(k + 1) * EVENTS / INPUTS {
            writeln!(gz, "{}", event(i)).unwrap();
        }
        std::fs::write(archive.join(name), gz.finish().unwrap()).unwrap();
    }
    let cfg = config(dir.path(), "name = \"unused\"");
    let archive = archive.to_str().unwrap();
    let window = ["--from", "2026-11-28T10:00:00Z", "--to", "2026-11-28T11:00:00Z"];
    replay(&cfg, &[&["--from-archive", archive], &window[..], &["--consumers", "backfill", "--job", "b"]].concat());

    let (objects, partition_hours, records, sessions) = read_back(dir.path());
    assert_eq!((records, sessions), (EVENTS, EVENTS), "every record once, in its own partition");
    assert_eq!(partition_hours, TENANTS * TOOLS, "12 partitions, one hour");
    assert!(
        objects as f64 <= 1.1 * partition_hours as f64,
        "{objects} objects for {partition_hours} partition-hours from {INPUTS} input objects"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_window_ending_many_shards_writes_one_object_per_partition_hour() {
    const SHARDS: i32 = 8;
    const EVENTS: u64 = 4_000;
    let emu = Emulator::start("ferrokinesis", &[]);
    let client = kinesis(&emu.endpoint).await;
    create_stream(&client, "backfill", SHARDS).await;
    let from = SystemClock.now().as_millis() / 1000 * 1000;
    tokio::time::sleep(Duration::from_millis(1_100)).await; // past the (rounded) start edge
    let records =
        (0..EVENTS).map(|i| Outgoing { id: i, partition_key: format!("k{i}"), data: Bytes::from(event(i)) }).collect();
    let report = Producer::new(client.clone(), "backfill").put_all(records).await;
    assert!(report.failed.is_empty(), "{:?}", report.failed.first());
    tokio::time::sleep(Duration::from_millis(1_100)).await; // past the (rounded) end edge
    let to = SystemClock.now().as_millis();

    let dir = tempfile::tempdir().unwrap();
    let stream = format!("kind = \"kinesis\"\nname = \"backfill\"\n[aws]\nkinesis_endpoint_url = \"{}\"", emu.endpoint);
    let cfg = config(dir.path(), &stream);
    let (from, to) = (from.to_string(), to.to_string());
    replay(&cfg, &["--from", &from, "--to", &to, "--consumers", "backfill", "--job", "w", "--end-idle", "1s"]);

    let (objects, partition_hours, records, sessions) = read_back(dir.path());
    assert_eq!((records, sessions), (EVENTS, EVENTS), "every record once, in its own partition");
    assert!(partition_hours >= TENANTS * TOOLS, "{partition_hours}");
    assert!(
        objects as f64 <= 1.1 * partition_hours as f64,
        "{objects} objects for {partition_hours} partition-hours from {SHARDS} shards"
    );
}
