//! What the design note's pipeline asks of AWS, and what it costs a month: one `weir run`
//! worker with production defaults (no test timings) reads a 4-shard ferrokinesis
//! stream by enhanced fan-out, keeps leases in moto's DynamoDB and archives with the
//! design note's archiver (`mcp-normalize`, tenant × tool × hour partitions, GZIP,
//! 300 s buffers) to moto's S3, while a producer writes 1,000 MCP events/s over 200
//! tenants × 10 tools. The worker's own request counters (`weir_aws_requests_total`
//! on `/metrics`) are read at the start and the end of a steady window and turned
//! into requests per shard-hour by operation, then into a monthly bill at the list
//! prices in [`PRICES`], beside what Firehose would bill for the same records and what
//! the KCL's documented defaults would write to DynamoDB.
//!
//! cargo build --release -p weir && cargo bench -p weir-e2e --bench cost   (a 660 s window)
//! Under `cargo test` it runs a 20 s window with 5 s buffers (a smoke test that the
//! counters move; its figures mean nothing).
#![allow(clippy::unwrap_used, clippy::print_stdout)] // a test: a failed expectation is a failed test

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use bytes::Bytes;
use weir_aws::kinesis::producer::{Outgoing, Producer};
use weir_core::Timestamp;
use weir_e2e::{KillOnDrop, create_stream, free_port, kinesis, metadata_extraction, metric_samples, s3, spawn_weir};
use weir_local::{GeneratorConfig, McpEventGenerator};
use weir_testkit::Emulator;

/// List prices, us-east-1, as published by AWS on the date below; update in one place.
/// (name, unit, USD)
const PRICES_DATE: &str = "2026-12-03";
const PRICES: &[(&str, &str, f64)] = &[
    ("kinesis_shard_hour", "shard-hour (provisioned)", 0.015),
    ("kinesis_put_unit", "million PUT payload units (25 KB)", 0.014),
    ("efo_consumer_shard_hour", "EFO consumer-shard-hour", 0.015),
    ("efo_gb", "GB retrieved by EFO", 0.013),
    ("dynamodb_write", "million write request units (on-demand)", 0.625),
    ("dynamodb_read", "million read request units (on-demand)", 0.125),
    ("s3_put", "thousand PUT/COPY/POST/LIST requests", 0.005),
    ("s3_get", "thousand GET and other requests", 0.0004),
    ("firehose_gb", "GB ingested (records rounded up to 5 KB)", 0.029),
    ("firehose_dp_gb", "GB processed by dynamic partitioning", 0.02),
    ("firehose_dp_objects", "thousand objects delivered by dynamic partitioning", 0.005),
    ("firehose_jq_hour", "JQ processing hour", 0.07),
    ("fargate_vcpu_hour", "Fargate vCPU-hour", 0.04048),
    ("fargate_gb_hour", "Fargate GB-hour", 0.004445),
];
const HOURS_A_MONTH: f64 = 730.0;
const SHARDS: i32 = 4;
const EVENTS_PER_SECOND: u64 = 1_000;

fn price(name: &str) -> f64 {
    PRICES.iter().find(|p| p.0 == name).map(|p| p.2).unwrap()
}

/// `weir_aws_requests_total` by (service, operation), summed over outcomes, plus
/// retries, from a `/metrics` page.
fn requests(metrics: &str) -> BTreeMap<(String, String), f64> {
    let mut out = BTreeMap::new();
    for metric in ["weir_aws_requests_total", "weir_aws_request_retries_total"] {
        for (labels, value) in metric_samples(metrics, metric) {
            if let (Some(s), Some(o)) = (labels.get("service"), labels.get("operation")) {
                *out.entry((s.clone(), o.clone())).or_default() += value;
            }
        }
    }
    out
}

async fn get(port: u16, path: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let Ok(mut s) = tokio::net::TcpStream::connect(("127.0.0.1", port)).await else { return String::new() };
    let req = format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    if s.write_all(req.as_bytes()).await.is_err() {
        return String::new();
    }
    let mut body = String::new();
    let _ = s.read_to_string(&mut body).await;
    body
}

fn cpu_of(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let f: Vec<&str> = stat.rsplit(')').next().unwrap_or("").split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    (ticks(11) + ticks(12)) / 100.0
}

#[tokio::main]
async fn main() {
    let full = std::env::args().any(|a| a == "--bench");
    let (window, interval) = if full { (Duration::from_secs(660), 300) } else { (Duration::from_secs(20), 5) };
    let fk = Emulator::start("ferrokinesis", &[]);
    let moto = Emulator::start("moto", &[]);
    let k = kinesis(&fk.endpoint).await;
    create_stream(&k, "cost", SHARDS).await;
    s3(&moto.endpoint).await.create_bucket().bucket("archive").send().await.unwrap();

    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let cfg = dir.path().join("weir.toml");
    std::fs::write(
        &cfg,
        format!(
            r#"[worker]
initial_position = "TRIM_HORIZON"
[stream]
kind = "kinesis"
name = "cost"
efo_consumer = "weir-cost"
[leases]
kind = "dynamodb"
table = "weir-leases"
create_table = true
[aws]
kinesis_endpoint_url = "{kinesis}"
dynamodb_endpoint_url = "{moto}"
s3_endpoint_url = "{moto}"
s3_force_path_style = true
[http]
listen = "127.0.0.1:{port}"
[[consumers]]
type = "archiver"
name = "archive"
bucket = "archive"
transform = "mcp-normalize"
[consumers.destination]
Prefix = "tool-events/tenant=!{{partitionKeyFromQuery:tenantId}}/tool=!{{partitionKeyFromQuery:toolName}}/year=!{{timestamp:yyyy}}/month=!{{timestamp:MM}}/day=!{{timestamp:dd}}/hour=!{{timestamp:HH}}/"
ErrorOutputPrefix = "errors/!{{firehose:error-output-type}}/"
CompressionFormat = "GZIP"
BufferingHints = {{ SizeInMBs = 64, IntervalInSeconds = {interval} }}
DynamicPartitioningConfiguration = {{ Enabled = true }}
[consumers.destination.ProcessingConfiguration]
Enabled = true
Processors = {processors}
"#,
            kinesis = fk.endpoint,
            moto = moto.endpoint,
            processors = metadata_extraction("{tenantId: .tenant_id, toolName: .tool_name}", false),
        ),
    )
    .unwrap();
    let log = dir.path().join("weir.log");
    let worker = KillOnDrop(spawn_weir(&cfg, &log));

    // The producer: 1,000 events/s in 10 PutRecords calls a second.
    let producer = Producer::new(k.clone(), "cost");
    let stop = tokio_util::sync::CancellationToken::new();
    let produced = {
        let stop = stop.clone();
        tokio::spawn(async move {
            let mut generator =
                McpEventGenerator::new(GeneratorConfig { tenants: 200, tools: 10, ..GeneratorConfig::default() });
            let (mut events, mut bytes) = (0u64, 0u64);
            let mut tick = tokio::time::interval(Duration::from_millis(100));
            while !stop.is_cancelled() {
                tick.tick().await;
                let now = Timestamp::from_millis(chrono::Utc::now().timestamp_millis());
                let records: Vec<Outgoing> = (0..EVENTS_PER_SECOND / 10)
                    .map(|i| {
                        let (key, data): (String, Bytes) = generator.next_event(now);
                        bytes += data.len() as u64;
                        Outgoing { id: events + i, partition_key: key, data }
                    })
                    .collect();
                events += records.len() as u64;
                producer.put_all(records).await;
            }
            (events, bytes)
        })
    };

    // Steady state: the worker holds every shard and has archived once.
    let started = Instant::now();
    loop {
        let m = get(port, "/metrics").await;
        let r = requests(&m);
        if r.get(&("s3".to_owned(), "PutObject".to_owned())).copied().unwrap_or(0.0) > 0.0 {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(120) + Duration::from_secs(interval),
            "no object archived:\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(500)).await; // polling the worker, not synchronising
    }
    let before = requests(&get(port, "/metrics").await);
    let cpu_before = cpu_of(worker.0.id());
    let t0 = Instant::now();
    tokio::time::sleep(window).await; // the measured window
    let after = requests(&get(port, "/metrics").await);
    let cpu = cpu_of(worker.0.id()) - cpu_before;
    let seconds = t0.elapsed().as_secs_f64();
    stop.cancel();
    let (events, bytes) = produced.await.unwrap();
    drop(worker);

    let shard_hours = f64::from(SHARDS) * seconds / 3600.0;
    let per_shard_hour: BTreeMap<(String, String), f64> = after
        .iter()
        .map(|(k, v)| (k.clone(), (v - before.get(k).copied().unwrap_or(0.0)) / shard_hours))
        .filter(|(_, v)| *v > 0.0)
        .collect();
    println!(
        "\n## Requests per shard-hour (measured over {seconds:.0} s, {SHARDS} shards, {EVENTS_PER_SECOND} events/s)\n"
    );
    println!("| service | operation | requests per shard-hour |\n|---|---|---|");
    for ((s, o), v) in &per_shard_hour {
        println!("| {s} | {o} | {v:.0} |");
    }
    let sum = |service: &str, ops: &[&str]| -> f64 {
        per_shard_hour
            .iter()
            .filter(|((s, o), _)| s == service && (ops.is_empty() || ops.contains(&o.as_str())))
            .map(|(_, v)| v)
            .sum()
    };
    let month = |per_shard_hour: f64| per_shard_hour * f64::from(SHARDS) * HOURS_A_MONTH;
    let avg_event = bytes as f64 / events.max(1) as f64;
    let events_month = EVENTS_PER_SECOND as f64 * 3600.0 * HOURS_A_MONTH;
    let gb_month = events_month * avg_event / 1e9;
    let ddb_writes =
        month(sum("dynamodb", &["PutItem", "UpdateItem", "DeleteItem", "BatchWriteItem", "TransactWriteItems"]));
    let ddb_reads = month(sum("dynamodb", &["GetItem", "Query", "Scan", "BatchGetItem"]));
    let s3_puts = month(sum(
        "s3",
        &["PutObject", "CreateMultipartUpload", "UploadPart", "CompleteMultipartUpload", "ListObjectsV2", "CopyObject"],
    ));
    let s3_gets = month(sum("s3", &[])) - s3_puts;
    let objects_month = month(sum("s3", &["PutObject", "CompleteMultipartUpload"]));
    let cpu_share = cpu / seconds;

    // Shared by both designs: the stream itself and the producers' PUT units.
    let stream = f64::from(SHARDS) * HOURS_A_MONTH * price("kinesis_shard_hour")
        + events_month * (avg_event / 25_600.0).ceil() / 1e6 * price("kinesis_put_unit");
    let weir_rows = [
        ("EFO consumer-shard-hours", f64::from(SHARDS) * HOURS_A_MONTH * price("efo_consumer_shard_hour")),
        ("EFO data retrieved", gb_month * price("efo_gb")),
        ("DynamoDB writes (leases, checkpoints, intents)", ddb_writes / 1e6 * price("dynamodb_write")),
        ("DynamoDB reads", ddb_reads / 1e6 * price("dynamodb_read")),
        ("S3 PUT and LIST", s3_puts / 1e3 * price("s3_put")),
        ("S3 GET and HEAD", s3_gets.max(0.0) / 1e3 * price("s3_get")),
        (
            "the worker: the smallest Fargate task that holds it (0.25 vCPU, 0.5 GB)",
            HOURS_A_MONTH * (cpu_share.max(0.25) * price("fargate_vcpu_hour") + 0.5 * price("fargate_gb_hour")),
        ),
    ];
    let billed_gb = events_month * (avg_event / 5_120.0).ceil() * 5_120.0 / 1e9;
    let firehose_rows = [
        ("ingestion (5 KB rounding)", billed_gb * price("firehose_gb")),
        ("dynamic partitioning, per GB", gb_month * price("firehose_dp_gb")),
        ("dynamic partitioning, per object (same objects as weir)", objects_month / 1e3 * price("firehose_dp_objects")),
        ("JQ processing hours (one a stream)", HOURS_A_MONTH * price("firehose_jq_hour")),
        ("S3 PUTs (Firehose's own, not billed to you)", 0.0),
    ];
    println!(
        "\n## A month at {EVENTS_PER_SECOND} events/s ({avg_event:.0} B average, {gb_month:.0} GB), {SHARDS} shards, list prices of {PRICES_DATE}\n"
    );
    println!("Both: the stream ({SHARDS} shards) and its PUT units, ${stream:.2}.\n");
    println!("| weir (one worker, EFO) | USD a month |\n|---|---|");
    let mut weir_total = 0.0;
    for (what, usd) in weir_rows {
        weir_total += usd;
        println!("| {what} | {usd:.2} |");
    }
    println!("| **total beyond the stream** | **{weir_total:.2}** |");
    println!("\n| Firehose (reading the same stream) | USD a month |\n|---|---|");
    let mut firehose_total = 0.0;
    for (what, usd) in firehose_rows {
        firehose_total += usd;
        println!("| {what} | {usd:.2} |");
    }
    println!("| **total beyond the stream** | **{firehose_total:.2}** |");

    // The KCL's documented defaults: failoverTimeMillis 10 s with a renewal every
    // third of it; a checkpoint per batch at one batch a second (polling,
    // idleTimeBetweenReads 1 s); the lease taker scans the table every 2 × failover
    // (one worker, so a scan is shared by the 4 shards).
    let kcl_writes = 3600.0 / (10.0 / 3.0) + 3600.0;
    let kcl_reads = 3600.0 / 20.0 / f64::from(SHARDS);
    println!("\n## DynamoDB requests per shard-hour (a request is one unit while its item is under 1 KB)\n");
    println!("| | writes | reads |\n|---|---|---|");
    println!("| KCL defaults (documented; checkpoint per batch) | {kcl_writes:.0} | {kcl_reads:.0} |");
    println!(
        "| weir defaults (measured) | {:.0} | {:.0} |",
        ddb_writes / f64::from(SHARDS) / HOURS_A_MONTH,
        ddb_reads / f64::from(SHARDS) / HOURS_A_MONTH
    );
    let weir_ddb = sum("dynamodb", &[]);
    println!("\nworker CPU: {cpu:.1} s over {seconds:.0} s ({:.1}% of one core)", cpu_share * 100.0);

    assert!(weir_ddb > 0.0 && sum("s3", &["PutObject"]) > 0.0, "the counters did not move: {per_shard_hour:?}");
}
