//! Timestamps under the OpenX JSON SerDe (Firehose's default deserialiser), as its
//! `parseTimestamp` reads them: an integer of fewer than 13 characters is epoch
//! seconds (`1518033528`), of 13 or more epoch milliseconds (`1518033528123`), a number
//! with a fraction is epoch seconds to the millisecond (`1518033528.123`, truncated as
//! Java's `(long)` cast does), the same as JSON text, and text with a `:` a date and
//! time. The records are written by Python's json module and the expected instants
//! computed by Python; DuckDB reads the Parquet objects back. Before, a 10-digit
//! integer was stored as milliseconds: 1970-01-18.
#![allow(clippy::unwrap_used, clippy::print_stdout)] // a test: a failed expectation is a failed test

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use weir_archiver::firehose_config::{from_json, validate};
use weir_archiver::parquet::{Column, ColumnType};
use weir_archiver::{Archiver, ArchiverOptions};
use weir_core::{
    Clock, CloseReason, Consumer, ExtendedSequenceNumber, Record, RecordBatch, SequenceNumber, ShardId, Timestamp,
};
use weir_e2e::duckdb;
use weir_local::FsObjectSink;
use weir_testkit::{CrashSwitch, ManualClock, SimAcks, SimLeases};

/// Python writes one JSON line per case and the instant it means, in epoch
/// microseconds, computed from the documented forms.
const PYTHON: &str = r#"
import json, sys, datetime
cases = [
    ("secs", 1546760416),
    ("secs-text", "1546760416"),
    ("secs-small", 86400),
    ("secs-negative", -86400),
    ("millis", 1518033528123),
    ("millis-text", "1518033528123"),
    ("float", 1518033528.123),
    ("float-text", "1518033528.5"),
    ("sql", "2019-01-06 07:40:16.25"),
    ("iso", "2019-01-06T07:40:16Z"),
]
def micros(v):
    s = v if isinstance(v, str) else json.dumps(v)
    if ":" in s:
        t = datetime.datetime.fromisoformat(s.replace("Z", "+00:00"))
        if t.tzinfo is None:
            t = t.replace(tzinfo=datetime.timezone.utc)
        return int((t - datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)) / datetime.timedelta(microseconds=1))
    if "." in s:
        return int(float(s) * 1000) * 1000
    n = int(s)
    return (n if len(s) >= 13 else n * 1000) * 1000
for name, v in cases:
    print(json.dumps({"line": json.dumps({"sessionId": name, "tenantId": "t", "ts": v}), "micros": micros(v)}))
"#;

#[tokio::test]
async fn openx_reads_epoch_seconds_milliseconds_and_fractions_as_documented() {
    let out = std::process::Command::new("python3").args(["-c", PYTHON]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let cases: Vec<(String, i64)> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            (v["line"].as_str().unwrap().to_owned(), v["micros"].as_i64().unwrap())
        })
        .collect();
    assert_eq!(cases.len(), 10);

    let dir = tempfile::tempdir().unwrap();
    let text = include_str!("../../consumers/archiver/tests/fixtures/parquet-destination.json");
    let mut settings = validate(&from_json(text).unwrap()).unwrap();
    settings.conversion.as_mut().unwrap().columns = Some(vec![
        Column { name: "session_id".into(), ty: ColumnType::parse("string").unwrap() },
        Column { name: "ts".into(), ty: ColumnType::parse("timestamp").unwrap() },
    ]);
    let clock = ManualClock::new(Timestamp::from_millis(1_764_400_000_000));
    let sink = Arc::new(FsObjectSink::new(dir.path()).unwrap());
    let mut a = Archiver::new(ArchiverOptions::new("epoch", settings), sink, Arc::new(clock.clone())).unwrap();
    let leases = SimLeases::new();
    let acks = SimAcks::new(leases.clone(), 1, CrashSwitch::after(None));
    let shard = ShardId::new("shard-0");
    a.on_shard_open(&leases.take(&shard, 1)).await.unwrap();
    let records = cases
        .iter()
        .enumerate()
        .map(|(i, (line, _))| Record {
            partition_key: "pk".into(),
            position: ExtendedSequenceNumber::plain(SequenceNumber::from_u128(i as u128 + 1)),
            approximate_arrival: clock.now(),
            data: Bytes::from(line.clone()),
        })
        .collect();
    let batch = RecordBatch { shard_id: shard.clone(), records, millis_behind_latest: Some(0), child_shards: None };
    a.on_batch(&batch, &acks).await.unwrap();
    clock.advance(Duration::from_secs(400));
    a.on_tick(clock.now(), &acks).await.unwrap();
    a.on_shard_close(&shard, CloseReason::Shutdown, &acks).await.unwrap();

    let errors = dir.path().join("tool-events-errors");
    assert!(!errors.exists(), "no case goes to the error output");
    let glob = format!("{}/tool-events/**/*.parquet", dir.path().display());
    let rows = duckdb(&format!("SELECT session_id, epoch_us(ts) FROM read_parquet('{glob}') ORDER BY session_id"));
    let got: std::collections::BTreeMap<String, i64> =
        rows.iter().map(|r| (r[0].as_str().unwrap().to_owned(), r[1].as_i64().unwrap())).collect();
    for (line, micros) in &cases {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        let name = v["sessionId"].as_str().unwrap();
        assert_eq!(got.get(name), Some(micros), "{line}");
    }
    assert_eq!(got["secs"], 1_546_760_416_000_000, "2019-01-06 07:40:16, not 1970-01-18");
}
