//! Parquet (SNAPPY) beside GZIP NDJSON, in the same run: the archiver in-process on one
//! core, no network, exactly-once mode, writing to a memory sink. Raw MCP events (no
//! transform; jq `{tenantId: .tenantId, toolName: .toolName}`) at three partition
//! counts (42, 500, 5,000) and two event shapes: the flat tool-call event (~200 bytes)
//! and the same with nested `arguments` (~1 KB), kept as JSON text in a `string`
//! column. Each case runs both formats in alternation, three rounds, each reported by
//! its fastest (noise only adds time); time is thread CPU time.
//!
//! Run: `cargo bench -p weir-archiver --bench parquet` (optionally `-- 300000`;
//! `WEIR_BENCH_PARTITIONS=5000` for one partition count).
#![allow(clippy::unwrap_used, clippy::print_stdout)] // a bench: a failed expectation is a failed run

use std::sync::Arc;

use cpu_time::ThreadTime;
use weir_archiver::parquet::{Column, ColumnType, Deserializer, ParquetOptions};
use weir_archiver::{Archiver, ArchiverOptions};
use weir_core::{
    CloseReason, Consumer, ExtendedSequenceNumber, Record, RecordBatch, SequenceNumber, ShardId, Timestamp,
};
use weir_firehose::conversion::Conversion;
use weir_firehose::{ArchiverSettings, Compression, from_json, validate};
use weir_testkit::fixtures::{BENCH_T0 as T0, MCP_BENCH_COLUMNS, mcp_bench_event};
use weir_testkit::{CrashSwitch, ManualClock, MemoryObjectSink, SimAcks, SimLeases};

const BATCH: usize = 500;

fn settings(parquet: bool) -> ArchiverSettings {
    let text = include_str!("../../../crates/weir-firehose/tests/fixtures/mcp-destination.json");
    let mut s = validate(&from_json(text).unwrap()).unwrap();
    s.metadata_query = Some("{tenantId: .tenantId, toolName: .toolName}".into());
    s.append_delimiter = true;
    if parquet {
        s.compression = Compression::Parquet;
        s.error_compression = Compression::Uncompressed;
        s.file_extension = ".parquet".into();
        s.conversion = Some(Conversion {
            deserializer: Deserializer::default(),
            // `WEIR_BENCH_DICTIONARY=1`: `EnableDictionaryCompression` (default false).
            parquet: ParquetOptions {
                dictionary: std::env::var("WEIR_BENCH_DICTIONARY").is_ok_and(|v| v == "1"),
                ..ParquetOptions::default()
            },
            table: Default::default(),
            columns: Some(
                MCP_BENCH_COLUMNS
                    .iter()
                    .map(|(n, t)| Column { name: (*n).into(), ty: ColumnType::parse(t).unwrap() })
                    .collect(),
            ),
        });
    }
    s
}

struct Run {
    seconds: f64,
    objects: usize,
    bytes_out: usize,
    raw_bytes: u64,
}

async fn archive(n: u64, partitions: u64, nested: bool, parquet: bool) -> Run {
    let sink = Arc::new(MemoryObjectSink::new());
    let clock = ManualClock::new(Timestamp::from_millis(T0));
    let mut options = ArchiverOptions::new("mcp-archive", settings(parquet));
    options.max_buffer_memory = 1 << 30;
    let mut a = Archiver::new(options, sink.clone(), Arc::new(clock.clone())).unwrap();
    let leases = SimLeases::new();
    let acks = SimAcks::new(leases.clone(), 1, CrashSwitch::after(None));
    let shard = ShardId::new("shardId-000000000000");
    a.on_shard_open(&leases.take(&shard, 1)).await.unwrap();
    let (mut timed, mut raw_bytes) = (std::time::Duration::ZERO, 0u64);
    let mut i = 0;
    while i < n {
        let end = (i + BATCH as u64).min(n);
        let records: Vec<Record> = (i..end)
            .map(|j| Record {
                partition_key: format!("pk-{j}"),
                position: ExtendedSequenceNumber::plain(SequenceNumber::from_u128(u128::from(j) + 1)),
                approximate_arrival: Timestamp::from_millis(T0 + (j as i64) * 3),
                data: mcp_bench_event(j, partitions, nested),
            })
            .collect();
        raw_bytes += records.iter().map(|r| r.data.len() as u64).sum::<u64>();
        let batch = RecordBatch { shard_id: shard.clone(), records, millis_behind_latest: Some(0), child_shards: None };
        let cpu = ThreadTime::now();
        a.on_batch(&batch, &acks).await.unwrap();
        timed += cpu.elapsed();
        i = end;
    }
    let cpu = ThreadTime::now();
    a.on_shard_close(&shard, CloseReason::Shutdown, &acks).await.unwrap();
    timed += cpu.elapsed();
    let objects = sink.snapshot();
    let data: Vec<_> = objects.iter().filter(|(k, _)| k.starts_with("tool-events/")).collect();
    assert!(!objects.keys().any(|k| k.starts_with("tool-events-errors/")), "every event fits the table");
    Run {
        seconds: timed.as_secs_f64(),
        objects: data.len(),
        bytes_out: data.iter().map(|(_, b)| b.len()).sum(),
        raw_bytes,
    }
}

fn main() {
    // `cargo bench` passes --bench; `cargo test --all-targets` runs this as a smoke test.
    let smoke = !std::env::args().any(|a| a == "--bench");
    let n: u64 = std::env::args().skip(1).find_map(|a| a.parse().ok()).unwrap_or(if smoke { 6_000 } else { 200_000 });
    let rounds = if smoke { 1 } else { 3 };
    let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
    println!(
        "| partitions | event | GZIP NDJSON events/CPU-s | Parquet SNAPPY events/CPU-s | speed Parquet/GZIP | GZIP bytes out | Parquet bytes out | size Parquet/GZIP | objects |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    // `WEIR_BENCH_PARTITIONS=5000` runs one partition count, `WEIR_BENCH_EVENTS=flat`
    // (or `nested`) one event shape, and `WEIR_BENCH_FORMAT=parquet` (or `gzip`) one
    // format (for profiling).
    let only: Option<u64> = std::env::var("WEIR_BENCH_PARTITIONS").ok().and_then(|v| v.parse().ok());
    let shape = std::env::var("WEIR_BENCH_EVENTS").ok();
    let format = std::env::var("WEIR_BENCH_FORMAT").ok();
    for partitions in [42, 500, 5_000].into_iter().filter(|p| only.is_none_or(|o| o == *p)) {
        for nested in [false, true].into_iter().filter(|n| shape.as_deref().is_none_or(|s| (s == "nested") == *n)) {
            let (mut gzip, mut parquet): (Option<Run>, Option<Run>) = (None, None);
            for _ in 0..rounds {
                for p in [false, true] {
                    if format.as_deref().is_some_and(|f| (f == "parquet") != p) {
                        continue;
                    }
                    let run = rt.block_on(archive(n, partitions, nested, p));
                    let best = if p { &mut parquet } else { &mut gzip };
                    if best.as_ref().is_none_or(|b| run.seconds < b.seconds) {
                        *best = Some(run);
                    }
                }
            }
            let (Some(g), Some(p)) = (gzip, parquet) else { continue };
            let (gr, pr) = (n as f64 / g.seconds, n as f64 / p.seconds);
            println!(
                "| {partitions} | {} ({} B avg) | {gr:.0} | {pr:.0} | {:.2} | {} | {} | {:.3} | {} / {} |",
                if nested { "nested arguments" } else { "flat" },
                g.raw_bytes / n,
                pr / gr,
                g.bytes_out,
                p.bytes_out,
                p.bytes_out as f64 / g.bytes_out as f64,
                g.objects,
                p.objects
            );
        }
    }
}
