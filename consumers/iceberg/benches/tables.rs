//! The Iceberg destination beside the S3 archiver's GZIP NDJSON, in the same run, on
//! one core: raw MCP events (the parquet bench's two shapes: flat ~200 bytes, nested
//! `arguments` ~1 KB kept as JSON text) routed by `tenantId` into 1, 20 or 200 tables
//! of the embedded SQL catalog (SQLite, a local warehouse in a temp dir), each table
//! partitioned by `toolName` (6 tools); GZIP partitioned by tenant and tool the same
//! way (so both write the same number of partition directories). weir's default
//! buffer hints for Iceberg (1 MiB / 60 s per table; every table at 32 MiB together),
//! Firehose's for GZIP (64 MiB, as in the archiver's fixture).
//!
//! Reported per case, fastest of the rounds: events per CPU-second (process CPU time:
//! the SQL catalog's SQLite connection runs on a thread of its own), its ratio to
//! GZIP's, commits (snapshots, all tables) and the commits one CPU-minute makes, data
//! files, bytes out (data files only; metadata beside).
//!
//! Run: `cargo bench -p weir-iceberg --bench tables` (optionally `-- 200000`;
//! `WEIR_BENCH_TABLES=200`, `WEIR_BENCH_EVENTS=flat|nested` for one case).
#![allow(clippy::unwrap_used, clippy::print_stdout)] // a bench: a failed expectation is a failed run

use std::collections::HashMap;
use std::sync::Arc;

use cpu_time::ProcessTime;
use iceberg::spec::{NestedField, PrimitiveType, Schema, Transform, Type, UnboundPartitionSpec};
use iceberg::{NamespaceIdent, TableCreation, TableIdent};
use weir_archiver::{Archiver, ArchiverOptions};
use weir_core::{
    CloseReason, Consumer, ExtendedSequenceNumber, Record, RecordBatch, SequenceNumber, ShardId, Timestamp,
};
use weir_firehose::{from_json, validate};
use weir_iceberg::{BufferHints, IcebergConsumer, RouteQuery, TableWriter, Tables};
use weir_testkit::fixtures::{BENCH_T0, mcp_bench_event};
use weir_testkit::{CrashSwitch, ManualClock, MemoryObjectSink, SimAcks, SimLeases};

const BATCH: usize = 500;

struct Run {
    seconds: f64,
    commits: usize,
    files: usize,
    bytes_out: u64,
}

/// Batches of events `0..n` over `tables` tenants × 6 tools.
fn batches(n: u64, tables: u64, nested: bool) -> Vec<RecordBatch> {
    let shard = ShardId::new("shardId-000000000000");
    (0..n)
        .step_by(BATCH)
        .map(|i| RecordBatch {
            shard_id: shard.clone(),
            records: (i..(i + BATCH as u64).min(n))
                .map(|j| Record {
                    partition_key: format!("pk-{j}"),
                    position: ExtendedSequenceNumber::plain(SequenceNumber::from_u128(u128::from(j) + 1)),
                    approximate_arrival: Timestamp::from_millis(BENCH_T0 + (j as i64) * 3),
                    data: mcp_bench_event(j, tables * 6, nested),
                })
                .collect(),
            millis_behind_latest: Some(0),
            child_shards: None,
        })
        .collect()
}

/// Feeds `batches` to `consumer` and closes the shard: the process CPU time it took.
async fn feed(consumer: &mut dyn Consumer, batches: &[RecordBatch]) -> f64 {
    let leases = SimLeases::new();
    let acks = SimAcks::new(leases.clone(), 1, CrashSwitch::after(None));
    let shard = batches[0].shard_id.clone();
    consumer.on_shard_open(&leases.take(&shard, 1)).await.unwrap();
    let cpu = ProcessTime::now();
    for b in batches {
        consumer.on_batch(b, &acks).await.unwrap();
    }
    consumer.on_shard_close(&shard, CloseReason::Shutdown, &acks).await.unwrap();
    let seconds = cpu.elapsed().as_secs_f64();
    assert_eq!(
        leases.checkpoint(&shard).map(|p| p.sequence),
        batches.last().unwrap().records.last().map(|r| r.position.sequence.clone())
    );
    seconds
}

async fn gzip(batches: &[RecordBatch]) -> Run {
    let mut s = validate(
        &from_json(include_str!("../../../crates/weir-firehose/tests/fixtures/mcp-destination.json")).unwrap(),
    )
    .unwrap();
    s.metadata_query = Some("{tenantId: .tenantId, toolName: .toolName}".into());
    let sink = Arc::new(MemoryObjectSink::new());
    let mut options = ArchiverOptions::new("mcp-archive", s);
    options.max_buffer_memory = 1 << 30;
    let clock = ManualClock::new(Timestamp::from_millis(BENCH_T0));
    let mut a = Archiver::new(options, sink.clone(), Arc::new(clock)).unwrap();
    let seconds = feed(&mut a, batches).await;
    let objects = sink.snapshot();
    let data: Vec<_> = objects.iter().filter(|(k, _)| k.starts_with("tool-events/")).collect();
    Run { seconds, commits: data.len(), files: data.len(), bytes_out: data.iter().map(|(_, b)| b.len() as u64).sum() }
}

fn schema() -> Schema {
    let s = |id, name| NestedField::optional(id, name, Type::Primitive(PrimitiveType::String)).into();
    Schema::builder()
        .with_fields(vec![
            NestedField::required(1, "tenantId", Type::Primitive(PrimitiveType::String)).into(),
            s(2, "toolName"),
            s(3, "sessionId"),
            NestedField::optional(4, "ts", Type::Primitive(PrimitiveType::Timestamptz)).into(),
            NestedField::optional(5, "durationMs", Type::Primitive(PrimitiveType::Long)).into(),
            NestedField::optional(6, "success", Type::Primitive(PrimitiveType::Boolean)).into(),
            s(7, "errorCode"),
            s(8, "arguments"),
        ])
        .build()
        .unwrap()
}

async fn iceberg(batches: &[RecordBatch], tables: u64) -> Run {
    let dir = tempfile::tempdir().unwrap();
    let warehouse = dir.path().join("warehouse");
    std::fs::create_dir_all(&warehouse).unwrap();
    let catalog = weir_local::sql_catalog("weir", &dir.path().join("catalog.db"), &warehouse).await.unwrap();
    let ns = NamespaceIdent::new("mcp".into());
    catalog.create_namespace(&ns, HashMap::new()).await.unwrap();
    let spec = UnboundPartitionSpec::builder().add_partition_field(2, "tool", Transform::Identity).unwrap().build();
    let names: Vec<String> = (0..tables).map(|t| format!("t-{t:04}")).collect();
    for name in &names {
        let creation =
            TableCreation::builder().name(name.clone()).schema(schema()).partition_spec(spec.clone()).build();
        catalog.create_table(&ns, creation).await.unwrap();
    }
    let first = TableIdent::new(ns.clone(), names[0].clone());
    let writer = TableWriter::new(catalog.clone(), first, "events");
    let routed = if tables == 1 {
        Tables::single(writer)
    } else {
        let query =
            RouteQuery::compile(r#"{destinationDatabaseName: "mcp", destinationTableName: .tenantId}"#).unwrap();
        Tables::routed(writer, Some(query), None)
    };
    let errors = Arc::new(MemoryObjectSink::new());
    let mut c = IcebergConsumer::new("events", routed, errors.clone(), "failed/", BufferHints::default());
    let seconds = feed(&mut c, batches).await;
    assert!(errors.snapshot().is_empty(), "every event fits its table");
    let (mut commits, mut files, mut bytes_out, mut rows) = (0, 0, 0, 0);
    for name in names {
        let t = catalog.load_table(&TableIdent::new(ns.clone(), name)).await.unwrap();
        commits += t.metadata().snapshots().count();
        if let Some(s) = t.metadata().current_snapshot() {
            let p = &s.summary().additional_properties;
            let n = |k: &str| p.get(k).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
            files += n("total-data-files") as usize;
            bytes_out += n("total-files-size");
            rows += n("total-records");
        }
    }
    let events: usize = batches.iter().map(|b| b.records.len()).sum();
    assert_eq!(rows, events as u64, "every event once");
    Run { seconds, commits, files, bytes_out }
}

fn main() {
    // `cargo bench` passes --bench; `cargo test --all-targets` runs this as a smoke test.
    let smoke = !std::env::args().any(|a| a == "--bench");
    let n: u64 = std::env::args().skip(1).find_map(|a| a.parse().ok()).unwrap_or(if smoke { 3_000 } else { 100_000 });
    let rounds = if smoke { 1 } else { 2 };
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let only: Option<u64> = std::env::var("WEIR_BENCH_TABLES").ok().and_then(|v| v.parse().ok());
    let shape = std::env::var("WEIR_BENCH_EVENTS").ok();
    println!(
        "| tables | event | GZIP NDJSON events/CPU-s | Iceberg events/CPU-s | speed Iceberg/GZIP | commits | commits per CPU-minute | data files (GZIP objects) | GZIP bytes out | Iceberg bytes out |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for tables in [1u64, 20, 200].into_iter().filter(|t| only.is_none_or(|o| o == *t)) {
        for nested in [false, true].into_iter().filter(|n| shape.as_deref().is_none_or(|s| (s == "nested") == *n)) {
            let batches = batches(n, tables, nested);
            let (mut g, mut i): (Option<Run>, Option<Run>) = (None, None);
            for _ in 0..rounds {
                let run = rt.block_on(gzip(&batches));
                if g.as_ref().is_none_or(|b| run.seconds < b.seconds) {
                    g = Some(run);
                }
                let run = rt.block_on(iceberg(&batches, tables));
                if i.as_ref().is_none_or(|b| run.seconds < b.seconds) {
                    i = Some(run);
                }
            }
            let (g, i) = (g.unwrap(), i.unwrap());
            let (gr, ir) = (n as f64 / g.seconds, n as f64 / i.seconds);
            println!(
                "| {tables} | {} | {gr:.0} | {ir:.0} | {:.2} | {} | {:.0} | {} ({}) | {} | {} |",
                if nested { "nested" } else { "flat" },
                ir / gr,
                i.commits,
                i.commits as f64 / (i.seconds / 60.0),
                i.files,
                g.files,
                g.bytes_out,
                i.bytes_out,
            );
        }
    }
}
