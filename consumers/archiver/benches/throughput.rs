//! Archiver throughput in-process, one core, no network: 1,000,000 synthetic MCP
//! events through the design note's pipeline (mcp-normalize, jq
//! `{tenantId: .tenant_id, toolName: .tool_name}`, hourly prefix, GZIP) into a memory
//! sink, exactly-once mode; against plain gzip of the same output bytes at the same
//! level, measured in the same run (five alternating rounds, each pipeline reported by
//! its fastest). Then memory with 500 active partitions.
//!
//! Time is the thread's CPU time (`CLOCK_THREAD_CPUTIME_ID`), so other processes on the
//! shared machine do not count; wall time is printed beside it.
//!
//! Run: `cargo bench -p weir-archiver --bench throughput` (optionally `-- 200000`).
#![allow(clippy::unwrap_used, clippy::print_stdout)] // a test: a failed expectation is a failed test

use std::io::Write;
use std::sync::Arc;
use std::time::Instant;

use cpu_time::ThreadTime;

use bytes::Bytes;
use weir_archiver::Transformer;
use weir_archiver::{Archiver, ArchiverOptions};
use weir_core::{
    Clock, CloseReason, Consumer, ExtendedSequenceNumber, Record, RecordBatch, SequenceNumber, ShardId, Timestamp,
};
use weir_firehose::{from_json, validate};
use weir_testkit::{CrashSwitch, ManualClock, MemoryObjectSink, SimAcks, SimLeases};

const T0: i64 = 1_764_400_000_000;
const SHARDS: usize = 4;
const BATCH: usize = 500;

fn event(i: u64, tenants: u64) -> Bytes {
    // With 500 tenants (the memory run) one tool, so that exactly 500 partitions are active.
    let all = ["search_docs", "fetch_url", "list_issues", "run_query", "create_ticket", "read_file"];
    let tools = if tenants >= 500 { &all[..1] } else { &all[..] };
    Bytes::from(format!(
        r#"{{"tenantId":"t-{:03}","toolName":"{}","sessionId":"sess-{:08x}","ts":{},"durationMs":{},"success":{},"errorCode":{}}}"#,
        i % tenants,
        tools[(i / 7 % tools.len() as u64) as usize],
        i / 13,
        T0 + (i as i64) * 3,
        (i * 37) % 2000,
        !i.is_multiple_of(17),
        if i.is_multiple_of(17) { "\"E_TIMEOUT\"" } else { "null" }
    ))
}

fn record(i: u64, tenants: u64) -> Record {
    Record {
        partition_key: format!("pk-{i}"),
        position: ExtendedSequenceNumber::plain(SequenceNumber::from_u128(i as u128 + 1)),
        approximate_arrival: Timestamp::from_millis(T0 + (i as i64) * 3),
        data: event(i, tenants),
    }
}

fn destination() -> weir_firehose::ArchiverSettings {
    let text = include_str!("../../../crates/weir-firehose/tests/fixtures/mcp-destination.json");
    let mut s = validate(&from_json(text).unwrap()).unwrap();
    s.append_delimiter = false; // mcp-normalize appends the newline
    s
}

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("VmRSS:")).map(str::to_owned))
        .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        .unwrap_or(0)
}

struct Run {
    /// Thread CPU seconds in the archiver's calls.
    seconds: f64,
    /// Wall seconds in the archiver's calls.
    wall: f64,
    objects: usize,
    bytes_out: usize,
    peak_buffered: usize,
    peak_compressed: usize,
    peak_rss_growth_kib: u64,
    intent_writes: u64,
}

async fn archive(n: u64, tenants: u64, interval_flush: bool) -> Run {
    let sink = Arc::new(MemoryObjectSink::new());
    let clock = ManualClock::new(Timestamp::from_millis(T0));
    let mut options = ArchiverOptions::new("mcp-archive", destination());
    options.transformer = Transformer::McpNormalize;
    let mut archiver = Archiver::new(options, sink.clone(), Arc::new(clock.clone())).unwrap();
    let leases = SimLeases::new();
    let acks = SimAcks::new(leases.clone(), 1, CrashSwitch::after(None));
    let shards: Vec<ShardId> = (0..SHARDS).map(|s| ShardId::new(format!("shardId-{s:012}"))).collect();
    for s in &shards {
        archiver.on_shard_open(&leases.take(s, 1)).await.unwrap();
    }
    // Only the archiver's own calls are timed. Each batch is made just before it is
    // handed over and dropped after, outside the clock, as the runtime hands over a batch
    // it has just decoded (making a million records up front left every record cold in
    // memory, which no consumer sees in production).
    let make = |i: u64| {
        let end = (i + BATCH as u64).min(n);
        let records = (i..end).map(|j| record(j, tenants)).collect();
        RecordBatch {
            shard_id: shards[(i / BATCH as u64) as usize % SHARDS].clone(),
            records,
            millis_behind_latest: Some(0),
            child_shards: None,
        }
    };
    let rss0 = rss_kib();
    let (mut peak_buffered, mut peak_rss, mut peak_compressed) = (0usize, rss0, 0usize);
    let mut timed = std::time::Duration::ZERO;
    let mut wall = std::time::Duration::ZERO;
    let mut i = 0u64;
    let mut batch_no = 0usize;
    while i < n {
        let batch = make(i);
        let (start, cpu) = (Instant::now(), ThreadTime::now());
        archiver.on_batch(&batch, &acks).await.unwrap();
        timed += cpu.elapsed();
        wall += start.elapsed();
        drop(batch);
        i = (i + BATCH as u64).min(n);
        batch_no += 1;
        if batch_no.is_multiple_of(200) {
            peak_buffered = peak_buffered.max(archiver.buffered_bytes());
            peak_compressed = peak_compressed.max(archiver.compressed_bytes());
            peak_rss = peak_rss.max(rss_kib());
            if interval_flush {
                clock.advance(std::time::Duration::from_secs(301));
                let (start, cpu) = (Instant::now(), ThreadTime::now());
                archiver.on_tick(clock.now(), &acks).await.unwrap();
                timed += cpu.elapsed();
                wall += start.elapsed();
            }
        }
    }
    peak_buffered = peak_buffered.max(archiver.buffered_bytes());
    peak_compressed = peak_compressed.max(archiver.compressed_bytes());
    peak_rss = peak_rss.max(rss_kib());
    let (start, cpu) = (Instant::now(), ThreadTime::now());
    for s in &shards {
        archiver.on_shard_close(s, CloseReason::Shutdown, &acks).await.unwrap();
    }
    timed += cpu.elapsed();
    wall += start.elapsed();
    let seconds = timed.as_secs_f64();
    let objects = sink.snapshot();
    Run {
        seconds,
        wall: wall.as_secs_f64(),
        objects: objects.len(),
        bytes_out: objects.values().map(|b| b.len()).sum(),
        peak_buffered,
        peak_compressed,
        peak_rss_growth_kib: peak_rss.saturating_sub(rss0),
        intent_writes: acks.intent_lease_writes(),
    }
}

fn main() {
    // `cargo bench` passes --bench; `cargo test --all-targets` runs this as a smoke test.
    let smoke = !std::env::args().any(|a| a == "--bench" || a == "--memory" || a == "--archiver-only");
    let n: u64 = std::env::args().skip(1).find_map(|a| a.parse().ok()).unwrap_or(if smoke { 5_000 } else { 1_000_000 });
    let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
    if std::env::args().any(|a| a == "--memory") {
        // In its own process, so the baseline is not the throughput run's heap.
        let mem = rt.block_on(archive(n, 500, false));
        println!(
            "500 active partitions, {n} records (about {} KiB raw per partition): peak bytes held in buffers {:.1} MiB (compressed {:.1} MiB, the rest staged records and bookkeeping); peak RSS growth {:.1} MiB = compressed bytes + {:.1} MiB",
            n * 190 / 500 / 1024,
            mem.peak_buffered as f64 / 1048576.0,
            mem.peak_compressed as f64 / 1048576.0,
            mem.peak_rss_growth_kib as f64 / 1024.0,
            (mem.peak_rss_growth_kib as f64 * 1024.0 - mem.peak_compressed as f64).max(0.0) / 1048576.0
        );
        return;
    }
    if std::env::args().any(|a| a == "--archiver-only") {
        let run = rt.block_on(archive(n, 40, false));
        println!("{:.0} records/s", n as f64 / run.seconds);
        return;
    }
    // The exact bytes the archiver writes, for the plain gzip baseline.
    let mut output = Vec::with_capacity(n as usize * 200);
    for i in 0..n {
        let r = record(i, 40);
        if let Ok(line) = weir_mcp::normalize_line(&r.data, r.approximate_arrival) {
            output.extend_from_slice(&line);
        }
    }
    // The machines are shared and noisy: both pipelines run in alternation, and each
    // is reported by its fastest round (noise only ever adds time).
    let rounds = if smoke { 1 } else { 5 };
    let (mut gzip_s, mut run): (f64, Option<Run>) = (f64::MAX, None);
    let mut plain = Vec::new();
    for round in 1..=rounds {
        let cpu = ThreadTime::now();
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::new(6));
        gz.write_all(&output).unwrap();
        plain = gz.finish().unwrap();
        let g = cpu.elapsed().as_secs_f64();
        let r = rt.block_on(archive(n, 40, false));
        println!(
            "round {round}: plain gzip {g:.2} CPU-s, archiver {:.2} CPU-s ({:.2} s wall), ratio {:.2}",
            r.seconds,
            r.wall,
            g / r.seconds
        );
        gzip_s = gzip_s.min(g);
        if run.as_ref().is_none_or(|best| r.seconds < best.seconds) {
            run = Some(r);
        }
    }
    drop(output);
    let Some(run) = run else { return };
    println!();
    let rate = n as f64 / run.seconds;
    let gzip_rate = n as f64 / gzip_s;
    println!("| pipeline (1 core) | records | CPU-s | records per CPU-s | MB/s out (raw) | objects | bytes out |");
    println!("|---|---|---|---|---|---|---|");
    println!(
        "| archiver: mcp-normalize + jq + hourly prefix + GZIP, exactly-once | {n} | {:.2} | {:.0} | {:.1} | {} | {} |",
        run.seconds,
        rate,
        n as f64 * 190.0 / run.seconds / 1e6,
        run.objects,
        run.bytes_out
    );
    println!(
        "| plain gzip of the same output bytes, level 6 | {n} | {gzip_s:.2} | {gzip_rate:.0} | - | 1 | {} |",
        plain.len()
    );
    println!("\nratio archiver/plain gzip (records/s, fastest round of each): {:.2}", rate / gzip_rate);
    println!("compressed size archiver/plain gzip:    {:.3}", run.bytes_out as f64 / plain.len() as f64);
    let raw_gb = n as f64 * 190.0 / 1e9;
    println!(
        "intent writes (lease items): {} for {:.2} GB raw / {:.1} MB compressed = {:.0} per GB archived (raw)",
        run.intent_writes,
        raw_gb,
        run.bytes_out as f64 / 1e6,
        run.intent_writes as f64 / raw_gb
    );

    let me = std::env::current_exe().unwrap();
    let out = std::process::Command::new(me).args([n.min(400_000).to_string(), "--memory".into()]).output().unwrap();
    print!("\n{}", String::from_utf8_lossy(&out.stdout));
}
