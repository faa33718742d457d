//! Every compression format the archiver writes, read back by the readers users have:
//! Python's `zipfile`, `python-snappy`'s framed and Hadoop stream decompressors, and
//! DuckDB for GZIP and plain NDJSON (`hive_partitioning`). The archiver writes the
//! design note's delivery stream (mcp-normalize, tenant × tool partitions) to a local
//! directory, one run per `CompressionFormat`, with the file extension Firehose uses.
#![allow(clippy::unwrap_used, clippy::print_stdout)] // a test: a failed expectation is a failed test

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use weir_archiver::{Archiver, ArchiverOptions, Transformer};
use weir_core::{
    Clock, CloseReason, Consumer, ExtendedSequenceNumber, Record, RecordBatch, SequenceNumber, ShardId, Timestamp,
};
use weir_e2e::{duckdb, files, readers_python};
use weir_firehose::{Compression, from_json, validate};
use weir_local::FsObjectSink;
use weir_testkit::{CrashSwitch, ManualClock, SimAcks, SimLeases};

const EVENTS: u64 = 3_000;

fn event(n: u64) -> Record {
    let data = format!(
        r#"{{"tenantId":"t{}","toolName":"tool{}","sessionId":"s-{n}","ts":1764400000000,"durationMs":{},"success":true}}"#,
        n % 7,
        n % 3,
        n % 500
    );
    Record {
        partition_key: format!("pk{n}"),
        position: ExtendedSequenceNumber::plain(SequenceNumber::from_u128(u128::from(n))),
        approximate_arrival: Timestamp::from_millis(1_764_400_000_000),
        data: Bytes::from(data),
    }
}

/// Archives [`EVENTS`] events with `format` into `dir`; returns the object paths.
async fn archive(format: &str, dir: &Path) -> Vec<std::path::PathBuf> {
    let text = include_str!("../../crates/weir-firehose/tests/fixtures/mcp-destination.json");
    let mut d = from_json(text).unwrap();
    d.compression_format = Some(format.to_owned());
    let mut settings = validate(&d).unwrap();
    settings.append_delimiter = false; // mcp-normalize ends each line already
    settings.buffer_bytes = 8 * 1024; // several objects per partition
    let clock = ManualClock::new(Timestamp::from_millis(1_764_400_000_000));
    let mut o = ArchiverOptions::new("formats", settings);
    o.transformer = Transformer::McpNormalize;
    let sink = Arc::new(FsObjectSink::new(dir).unwrap());
    let mut a = Archiver::new(o, sink, Arc::new(clock.clone())).unwrap();
    let leases = SimLeases::new();
    let acks = SimAcks::new(leases.clone(), 1, CrashSwitch::after(None));
    let shard = ShardId::new("shard-0");
    a.on_shard_open(&leases.take(&shard, 1)).await.unwrap();
    for chunk in (1..=EVENTS).collect::<Vec<_>>().chunks(500) {
        let batch = RecordBatch {
            shard_id: shard.clone(),
            records: chunk.iter().map(|&n| event(n)).collect(),
            millis_behind_latest: Some(0),
            child_shards: None,
        };
        a.on_batch(&batch, &acks).await.unwrap();
    }
    clock.advance(Duration::from_secs(400));
    a.on_tick(clock.now(), &acks).await.unwrap();
    a.on_shard_close(&shard, CloseReason::Shutdown, &acks).await.unwrap();
    files(dir).into_iter().filter(|p| !p.to_string_lossy().contains("_weir")).collect()
}

/// Lines of every object, read by Python with `reader` (an expression of `body`).
fn python_lines(paths: &[std::path::PathBuf], reader: &str) -> Vec<serde_json::Value> {
    let script = format!(
        "import json, sys, io, zipfile, snappy\nout = []\nfor p in sys.argv[1:]:\n    body = open(p, 'rb').read()\n    text = {reader}\n    out += [json.loads(l) for l in text.decode().splitlines() if l]\nprint(json.dumps(out))"
    );
    serde_json::from_value(readers_python(&script, paths)).unwrap()
}

fn assert_every_event_once(lines: &[serde_json::Value]) {
    let mut ids: Vec<&str> = lines.iter().map(|l| l["session_id"].as_str().unwrap()).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len() as u64, EVENTS, "every event once");
    assert_eq!(lines.len() as u64, EVENTS);
}

#[tokio::test]
async fn each_compression_format_reads_back_with_real_readers() {
    let cases = [
        ("ZIP", ".zip", "zipfile.ZipFile(io.BytesIO(body)).read(zipfile.ZipFile(io.BytesIO(body)).namelist()[0])"),
        ("Snappy", ".snappy", "snappy.StreamDecompressor().decompress(body)"),
        ("HADOOP_SNAPPY", ".hsnappy", "snappy.HadoopStreamDecompressor().decompress(body)"),
    ];
    for (format, ext, reader) in cases {
        let dir = tempfile::tempdir().unwrap();
        let paths = archive(format, dir.path()).await;
        assert!(paths.len() > 21, "{format}: several objects per partition, got {}", paths.len());
        assert!(paths.iter().all(|p| p.to_string_lossy().ends_with(ext)), "{format}: {paths:?}");
        let lines = python_lines(&paths, reader);
        assert_every_event_once(&lines);
        println!("{format}: {} objects, {} lines", paths.len(), lines.len());
    }
    for (format, ext, reader) in [("GZIP", "gz", "read_json_auto"), ("UNCOMPRESSED", "", "read_json_auto")] {
        let dir = tempfile::tempdir().unwrap();
        let paths = archive(format, dir.path()).await;
        let glob = format!("{}/tool-events/**/*{}", dir.path().display(), if ext.is_empty() { "" } else { ".gz" });
        let rows = duckdb(&format!(
            "SELECT count(*), count(DISTINCT session_id), count(DISTINCT tenant) FROM {reader}('{glob}', hive_partitioning = true)"
        ));
        assert_eq!(rows[0][0], serde_json::json!(EVENTS), "{format}: {} objects", paths.len());
        assert_eq!(rows[0][1], serde_json::json!(EVENTS));
        assert_eq!(rows[0][2], serde_json::json!(7), "{format}: hive partitions read as columns");
    }
}

/// A Firehose object key's extension is the format's, or `FileExtension` when given.
#[test]
fn compression_names_and_extensions_follow_firehose() {
    for (name, want, ext) in [
        ("GZIP", Compression::Gzip, ".gz"),
        ("ZIP", Compression::Zip, ".zip"),
        ("Snappy", Compression::Snappy, ".snappy"),
        ("HADOOP_SNAPPY", Compression::HadoopSnappy, ".hsnappy"),
        ("UNCOMPRESSED", Compression::Uncompressed, ""),
    ] {
        let text = format!(r#"{{"CompressionFormat": "{name}"}}"#);
        let s = validate(&from_json(&text).unwrap()).unwrap();
        assert_eq!((s.compression, s.file_extension.as_str()), (want, ext));
        let text = format!(r#"{{"CompressionFormat": "{name}", "FileExtension": ".ndjson.x"}}"#);
        assert_eq!(validate(&from_json(&text).unwrap()).unwrap().file_extension, ".ndjson.x");
    }
}
