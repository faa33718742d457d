//! Several JSON documents in one record, as Firehose's record format conversion takes
//! them: `{"a":1}{"a":2}` and `{"a":1}\n{"a":2}` are correct input, one row per
//! document. The records are written by Python's json module, the Parquet objects read
//! back with DuckDB. A record one of whose documents does not fit the table goes to
//! `format-conversion-failed` whole, the message naming the document. With jq
//! partitioning (`MetadataExtractionQuery`), such a record is not one document for jq
//! to read: it goes to `partitioning-failed`, and a `RecordDeAggregation` processor
//! (JSON) splits it so that each document is partitioned, and converted, on its own.
#![allow(clippy::unwrap_used, clippy::print_stdout)] // a test: a failed expectation is a failed test

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use weir_archiver::parquet::{Column, ColumnType};
use weir_archiver::{Archiver, ArchiverOptions};
use weir_core::{
    Clock, CloseReason, Consumer, ExtendedSequenceNumber, Record, RecordBatch, SequenceNumber, ShardId, Timestamp,
};
use weir_e2e::duckdb;
use weir_firehose::{from_json, validate};
use weir_local::FsObjectSink;
use weir_testkit::{CrashSwitch, ManualClock, SimAcks, SimLeases};

/// Python writes the records: each a list of documents joined as the case says.
const PYTHON: &str = r#"
import json
def doc(session, n):
    return json.dumps({"tenantId": "t-1", "sessionId": session, "n": n}, separators=(",", ":"))
records = [
    doc("one", 1),
    doc("back-to-back", 1) + doc("back-to-back", 2),
    doc("lines", 1) + "\n" + doc("lines", 2) + "\n" + doc("lines", 3) + "\n",
    " " + doc("spaced", 1) + " \t " + doc("spaced", 2) + " ",
    doc("bad-second", 1) + json.dumps({"tenantId": "t-1", "sessionId": "bad-second", "n": "many"}),
]
for r in records:
    print(json.dumps(r))
"#;

fn records() -> Vec<String> {
    let out = std::process::Command::new("python3").args(["-c", PYTHON]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap().lines().map(|l| serde_json::from_str::<String>(l).unwrap()).collect()
}

/// Archives `records` as Parquet (columns `session_id`, `n`) with the fixture's
/// destination changed by `edit`; returns the error lines per error type.
async fn archive(dir: &Path, records: &[String], edit: impl FnOnce(&mut serde_json::Value)) -> Vec<serde_json::Value> {
    let text = include_str!("../../crates/weir-firehose/tests/fixtures/parquet-destination.json");
    let mut json: serde_json::Value = serde_json::from_str(text).unwrap();
    edit(&mut json["ExtendedS3DestinationConfiguration"]);
    let mut settings = validate(&from_json(&json.to_string()).unwrap()).unwrap();
    settings.conversion.as_mut().unwrap().columns = Some(vec![
        Column { name: "session_id".into(), ty: ColumnType::parse("string").unwrap() },
        Column { name: "n".into(), ty: ColumnType::parse("bigint").unwrap() },
    ]);
    let clock = ManualClock::new(Timestamp::from_millis(1_764_400_000_000));
    let sink = Arc::new(FsObjectSink::new(dir).unwrap());
    let mut a = Archiver::new(ArchiverOptions::new("documents", settings), sink, Arc::new(clock.clone())).unwrap();
    let leases = SimLeases::new();
    let acks = SimAcks::new(leases.clone(), 1, CrashSwitch::after(None));
    let shard = ShardId::new("shard-0");
    a.on_shard_open(&leases.take(&shard, 1)).await.unwrap();
    let batch = RecordBatch {
        shard_id: shard.clone(),
        records: records
            .iter()
            .enumerate()
            .map(|(i, r)| Record {
                partition_key: "pk".into(),
                position: ExtendedSequenceNumber::plain(SequenceNumber::from_u128(i as u128 + 1)),
                approximate_arrival: clock.now(),
                data: Bytes::from(r.clone()),
            })
            .collect(),
        millis_behind_latest: Some(0),
        child_shards: None,
    };
    a.on_batch(&batch, &acks).await.unwrap();
    clock.advance(Duration::from_secs(400));
    a.on_tick(clock.now(), &acks).await.unwrap();
    a.on_shard_close(&shard, CloseReason::Shutdown, &acks).await.unwrap();
    weir_e2e::files(&dir.join("tool-events-errors"))
        .iter()
        .flat_map(|p| {
            let kind = p.strip_prefix(dir.join("tool-events-errors")).unwrap().iter().next().unwrap();
            let kind = kind.to_string_lossy().into_owned();
            std::fs::read_to_string(p)
                .unwrap()
                .lines()
                .map(|l| {
                    let mut v: serde_json::Value = serde_json::from_str(l).unwrap();
                    v["type"] = kind.clone().into();
                    v
                })
                .collect::<Vec<_>>()
        })
        .collect()
}

fn rows(dir: &Path) -> Vec<(String, i64)> {
    let glob = format!("{}/tool-events/**/*.parquet", dir.display());
    duckdb(&format!("SELECT session_id, n FROM read_parquet('{glob}') ORDER BY session_id, n"))
        .iter()
        .map(|r| (r[0].as_str().unwrap().to_owned(), r[1].as_i64().unwrap()))
        .collect()
}

fn message(e: &serde_json::Value) -> &str {
    e.get("lastErrorMessage").or_else(|| e.get("errorMessage")).and_then(|m| m.as_str()).unwrap()
}

#[tokio::test]
async fn several_documents_in_a_record_are_a_row_each() {
    let records = records();
    let dir = tempfile::tempdir().unwrap();
    // A static prefix: no query to read the record.
    let errors = archive(dir.path(), &records, |d| {
        d["Prefix"] = "tool-events/".into();
        d["DynamicPartitioningConfiguration"] = serde_json::json!({ "Enabled": false });
        d.as_object_mut().unwrap().remove("ProcessingConfiguration");
    })
    .await;
    let want: Vec<(String, i64)> = [
        ("back-to-back", 1),
        ("back-to-back", 2),
        ("lines", 1),
        ("lines", 2),
        ("lines", 3),
        ("one", 1),
        ("spaced", 1),
        ("spaced", 2),
    ]
    .iter()
    .map(|(s, n)| ((*s).to_owned(), *n))
    .collect();
    assert_eq!(rows(dir.path()), want);
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(errors[0]["type"], "format-conversion-failed");
    assert_eq!(message(&errors[0]), "document 2 of the record: column n: expected bigint, found \"many\"");
    assert_eq!(errors[0]["sequenceNumber"], "5", "the whole record, not one document of it");
}

#[tokio::test]
async fn jq_partitioning_needs_several_documents_split_first() {
    let records = records();
    let dir = tempfile::tempdir().unwrap();
    let errors = archive(dir.path(), &records, |_| {}).await;
    let kinds: Vec<&str> = errors.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(kinds, vec!["partitioning-failed"; 4], "{errors:?}");
    assert!(message(&errors[0]).contains("RecordDeAggregation"), "{}", message(&errors[0]));
    assert_eq!(rows(dir.path()), vec![("one".to_owned(), 1)]);

    // Split by RecordDeAggregation (JSON): every document is partitioned and converted.
    let dir = tempfile::tempdir().unwrap();
    let errors = archive(dir.path(), &records, |d| {
        let processors = d["ProcessingConfiguration"]["Processors"].as_array_mut().unwrap();
        processors.insert(
            0,
            serde_json::json!({ "Type": "RecordDeAggregation", "Parameters": [
                { "ParameterName": "SubRecordType", "ParameterValue": "JSON" } ] }),
        );
    })
    .await;
    assert_eq!(rows(dir.path()).len(), 9, "every document of every record but the bad one");
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(errors[0]["type"], "format-conversion-failed");
}
