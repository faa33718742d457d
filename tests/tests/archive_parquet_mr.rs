//! weir's Parquet objects held against parquet-mr's, the writer under Firehose's record
//! format conversion (Hive's `ParquetHiveSerDe`), for the same events: the archiver's
//! raw MCP events (flat, and with nested `arguments` kept as JSON text), partitioned by
//! tenant and tool, with Firehose's `ParquetSerDe` defaults and with
//! `EnableDictionaryCompression`. DuckDB reads the same rows from both writers' files,
//! finds dictionary pages in the same columns, and weir's objects are no larger than
//! parquet-mr's (counting only its pages and footers: its page indexes, which
//! Firehose's older parquet-mr would not write, are left out). Prints the sizes, beside the same events as GZIP JSON lines
//! (`cargo test -p weir-e2e --test archive_parquet_mr -- --nocapture`).
#![allow(clippy::unwrap_used, clippy::print_stdout)] // a test: a failed expectation is a failed test

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use serde_json::{Value, json};
use weir_archiver::parquet::{Column, ColumnType, Deserializer, ParquetCompression, ParquetOptions};
use weir_archiver::{Archiver, ArchiverOptions};
use weir_core::{
    CloseReason, Consumer, ExtendedSequenceNumber, Record, RecordBatch, SequenceNumber, ShardId, Timestamp,
};
use weir_e2e::{duckdb, files, parquet_mr};
use weir_firehose::conversion::Conversion;
use weir_firehose::{Compression, from_json, validate};
use weir_local::FsObjectSink;
use weir_testkit::fixtures::{BENCH_T0, MCP_BENCH_COLUMNS, mcp_bench_event};
use weir_testkit::{CrashSwitch, ManualClock, SimAcks, SimLeases};

#[derive(Debug, Clone, Copy)]
struct Case {
    events: u64,
    partitions: u64,
    nested: bool,
    dictionary: bool,
}

/// Archives the case's events with weir into `dir`, as Parquet or (`gzip`) as the
/// destination's GZIP JSON lines; the data objects written.
async fn archive_with_weir(case: Case, gzip: bool, dir: &Path) -> Vec<std::path::PathBuf> {
    let text = include_str!("../../crates/weir-firehose/tests/fixtures/mcp-destination.json");
    let mut s = validate(&from_json(text).unwrap()).unwrap();
    s.metadata_query = Some("{tenantId: .tenantId, toolName: .toolName}".into());
    s.append_delimiter = true;
    if !gzip {
        s.compression = Compression::Parquet;
        s.file_extension = ".parquet".into();
        s.conversion = Some(Conversion {
            deserializer: Deserializer::default(),
            parquet: ParquetOptions { dictionary: case.dictionary, ..ParquetOptions::default() },
            table: Default::default(),
            columns: Some(
                MCP_BENCH_COLUMNS
                    .iter()
                    .map(|(n, t)| Column { name: (*n).into(), ty: ColumnType::parse(t).unwrap() })
                    .collect(),
            ),
        });
        let parquet = &s.conversion.as_ref().unwrap().parquet;
        assert_eq!(parquet.compression, ParquetCompression::Snappy, "Firehose's default");
    } else {
        assert_eq!(s.compression, Compression::Gzip);
    }
    let clock = ManualClock::new(Timestamp::from_millis(BENCH_T0));
    let sink = Arc::new(FsObjectSink::new(dir).unwrap());
    let mut a = Archiver::new(ArchiverOptions::new("mcp-archive", s), sink, Arc::new(clock)).unwrap();
    let leases = SimLeases::new();
    let acks = SimAcks::new(leases.clone(), 1, CrashSwitch::after(None));
    let shard = ShardId::new("shardId-000000000000");
    a.on_shard_open(&leases.take(&shard, 1)).await.unwrap();
    let records: Vec<Record> = (0..case.events)
        .map(|j| Record {
            partition_key: format!("pk-{j}"),
            position: ExtendedSequenceNumber::plain(SequenceNumber::from_u128(u128::from(j) + 1)),
            approximate_arrival: Timestamp::from_millis(BENCH_T0 + (j as i64) * 3),
            data: mcp_bench_event(j, case.partitions, case.nested),
        })
        .collect();
    for chunk in records.chunks(500) {
        let batch = RecordBatch {
            shard_id: shard.clone(),
            records: chunk.to_vec(),
            millis_behind_latest: Some(0),
            child_shards: None,
        };
        a.on_batch(&batch, &acks).await.unwrap();
    }
    a.on_shard_close(&shard, CloseReason::Shutdown, &acks).await.unwrap();
    assert!(leases.checkpoint(&shard).is_some(), "every object was delivered");
    files(&dir.join("tool-events"))
}

/// Writes the case's events with parquet-mr into `dir`, one file per partition (as
/// Firehose would deliver them at these volumes: one object each); the files.
fn archive_with_parquet_mr(case: Case, dir: &Path) -> Vec<std::path::PathBuf> {
    let input = dir.join("in");
    let output = dir.join("out");
    std::fs::create_dir_all(&input).unwrap();
    std::fs::create_dir_all(&output).unwrap();
    let mut partitions: BTreeMap<(String, String), String> = BTreeMap::new();
    for j in 0..case.events {
        let e: Value = serde_json::from_slice(&mcp_bench_event(j, case.partitions, case.nested)).unwrap();
        // The cells as the OpenX SerDe reads them: `ts` (13 digits) is epoch
        // milliseconds, here microseconds for the writer; a nested object bound for a
        // string column is its JSON text, keys sorted as weir writes it.
        let row = json!([
            e["tenantId"],
            e["toolName"],
            e["sessionId"],
            e["ts"].as_i64().unwrap() * 1000,
            e["durationMs"],
            e["success"],
            e["errorCode"],
            e.get("arguments").map(Value::to_string),
        ]);
        let key = (e["tenantId"].as_str().unwrap().to_owned(), e["toolName"].as_str().unwrap().to_owned());
        let lines = partitions.entry(key).or_default();
        lines.push_str(&row.to_string());
        lines.push('\n');
    }
    for ((tenant, tool), lines) in &partitions {
        std::fs::write(input.join(format!("{tenant}-{tool}.jsonl")), lines).unwrap();
    }
    let columns: Vec<String> = MCP_BENCH_COLUMNS.iter().map(|(n, t)| format!("{n}:{t}")).collect();
    parquet_mr(&columns.join(","), "SNAPPY", case.dictionary, &input, &output);
    files(&output)
}

fn total_bytes(files: &[std::path::PathBuf]) -> u64 {
    files.iter().map(|f| std::fs::metadata(f).unwrap().len()).sum()
}

/// The bytes of Parquet `files` (DuckDB's file pattern `pattern`) outside their column
/// chunks and footers: the page indexes parquet-mr 1.13 writes after the row groups
/// (the parquet-mr of Hive 2 and 3 wrote none, nor does weir).
fn page_index_bytes(files: &[std::path::PathBuf], pattern: &str) -> u64 {
    let chunks =
        duckdb(&format!("SELECT sum(total_compressed_size) FROM parquet_metadata({pattern})"))[0][0].as_u64().unwrap();
    let footers: u64 = files
        .iter()
        .map(|f| {
            let bytes = std::fs::read(f).unwrap();
            let len = bytes.len();
            assert_eq!(&bytes[len - 4..], b"PAR1", "{}", f.display());
            u64::from(u32::from_le_bytes(bytes[len - 8..len - 4].try_into().unwrap()))
        })
        .sum();
    // Each file's leading and trailing magic and the footer's length.
    total_bytes(files) - chunks - footers - 12 * files.len() as u64
}

#[tokio::test]
async fn objects_hold_the_rows_of_parquet_mr_files_and_are_no_larger() {
    println!(
        "| rows per object | event | EnableDictionaryCompression | objects | GZIP JSON lines bytes | weir Parquet bytes | parquet-mr Parquet bytes (no page index) | weir/parquet-mr | weir/GZIP | parquet-mr/GZIP |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    let mut larger = Vec::new();
    // 66 partitions (11 tenants, 6 tools) of ~180 rows each: the parquet bench's
    // objects at 500 partitions; 6 of 2,000 rows.
    for (events, partitions) in [(12_000, 66), (12_000, 6)] {
        for nested in [false, true] {
            for dictionary in [false, true] {
                let case = Case { events, partitions, nested, dictionary };
                let dir = tempfile::tempdir().unwrap();
                let gzip = total_bytes(&archive_with_weir(case, true, &dir.path().join("gzip")).await);
                let ours = archive_with_weir(case, false, &dir.path().join("weir")).await;
                let theirs = archive_with_parquet_mr(case, &dir.path().join("parquet-mr"));
                assert_eq!(ours.len(), theirs.len(), "{case:?}: one object per partition");
                let pattern = |d: &str| format!("'{}/{d}/**/*.parquet'", dir.path().display());
                let (w, m) = (pattern("weir"), pattern("parquet-mr/out"));
                let rows = |f: &str| format!("read_parquet({f}, hive_partitioning = false)");
                for (a, b) in [(&w, &m), (&m, &w)] {
                    let (a, b) = (rows(a), rows(b));
                    let diff =
                        duckdb(&format!("SELECT count(*) FROM (SELECT * FROM {a} EXCEPT ALL SELECT * FROM {b})"));
                    assert_eq!(json!(diff), json!([[0]]), "{case:?}: rows of {a} not in {b}");
                }
                assert_eq!(json!(duckdb(&format!("SELECT count(*) FROM {}", rows(&w)))), json!([[events]]), "{case:?}");
                // Held against parquet-mr's pages and footers alone: the page indexes
                // of this parquet-mr, which Firehose's may not write, left out.
                assert_eq!(page_index_bytes(&ours, &w), 0, "{case:?}: weir writes no page index");
                let (ours_bytes, theirs_bytes) =
                    (total_bytes(&ours), total_bytes(&theirs) - page_index_bytes(&theirs, &m));
                println!(
                    "| {} | {} | {dictionary} | {} | {gzip} | {ours_bytes} | {theirs_bytes} | {:.3} | {:.2} | {:.2} |",
                    events / ours.len() as u64,
                    if nested { "nested arguments" } else { "flat" },
                    ours.len(),
                    ours_bytes as f64 / theirs_bytes as f64,
                    ours_bytes as f64 / gzip as f64,
                    theirs_bytes as f64 / gzip as f64,
                );
                if ours_bytes > theirs_bytes {
                    larger.push(format!("{case:?}: {ours_bytes} bytes against parquet-mr's {theirs_bytes}"));
                }
                // The same columns keep a dictionary in every object as in parquet-mr's
                // (none without the setting); `ts` aside, INT96 there, whose
                // dictionary parquet-mr keeps however distinct the values.
                let dictionaries = |f: &str| {
                    duckdb(&format!(
                        "SELECT path_in_schema, count(*) FILTER (WHERE encodings LIKE '%DICTIONARY%') \
                         FROM parquet_metadata({f}) WHERE path_in_schema <> 'ts' GROUP BY 1 ORDER BY 1"
                    ))
                };
                let ours_dictionaries = dictionaries(&w);
                assert_eq!(json!(ours_dictionaries), json!(dictionaries(&m)), "{case:?}: dictionary pages");
                let kept = ours_dictionaries.iter().filter(|r| r[1] != json!(0)).count();
                assert_eq!(kept > 0, dictionary, "{case:?}: {ours_dictionaries:?}");
            }
        }
    }
    assert!(larger.is_empty(), "weir's objects are larger than they should be: {larger:#?}");
}
