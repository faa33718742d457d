//! Timestamps under the OpenX JSON SerDe (Firehose's default deserialiser), as its
//! `parseTimestamp` reads them: an integer of fewer than 13 characters is epoch
//! seconds (`1518033528`), of 13 or more epoch milliseconds (`1518033528123`), a number
//! with a fraction is epoch seconds to the millisecond (`1518033528.123`, truncated as
//! Java's `(long)` cast does), the same as JSON text, and text with a `:` a date and
//! time. The records are written by Python's json module and the expected instants
//! computed by Python; DuckDB reads the Parquet objects back. Before, a 10-digit
//! integer was stored as milliseconds: 1970-01-18.
#![allow(clippy::unwrap_used, clippy::print_stdout)] // a test: a failed expectation is a failed test

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use weir_archiver::parquet::timestamp::TimestampFormat;
use weir_archiver::parquet::{Column, ColumnType, Deserializer};
use weir_archiver::{Archiver, ArchiverOptions};
use weir_core::{
    Clock, CloseReason, Consumer, ExtendedSequenceNumber, Record, RecordBatch, SequenceNumber, ShardId, Timestamp,
};
use weir_e2e::duckdb;
use weir_firehose::{from_json, validate};
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

/// Archives `lines` as Parquet (columns `session_id`, `ts`) with `deserializer`; the
/// `ts` DuckDB reads per session id (epoch microseconds), and how many records went to
/// the error output.
async fn archive_and_read(lines: &[String], deserializer: Option<Deserializer>) -> (BTreeMap<String, i64>, usize) {
    let dir = tempfile::tempdir().unwrap();
    let text = include_str!("../../crates/weir-firehose/tests/fixtures/parquet-destination.json");
    let mut settings = validate(&from_json(text).unwrap()).unwrap();
    let conversion = settings.conversion.as_mut().unwrap();
    conversion.columns = Some(vec![
        Column { name: "session_id".into(), ty: ColumnType::parse("string").unwrap() },
        Column { name: "ts".into(), ty: ColumnType::parse("timestamp").unwrap() },
    ]);
    if let Some(d) = deserializer {
        conversion.deserializer = d;
    }
    let clock = ManualClock::new(Timestamp::from_millis(1_764_400_000_000));
    let sink = Arc::new(FsObjectSink::new(dir.path()).unwrap());
    let mut a = Archiver::new(ArchiverOptions::new("epoch", settings), sink, Arc::new(clock.clone())).unwrap();
    let leases = SimLeases::new();
    let acks = SimAcks::new(leases.clone(), 1, CrashSwitch::after(None));
    let shard = ShardId::new("shard-0");
    a.on_shard_open(&leases.take(&shard, 1)).await.unwrap();
    let records = lines
        .iter()
        .enumerate()
        .map(|(i, line)| Record {
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
    let errors = weir_e2e::files(&dir.path().join("tool-events-errors"))
        .iter()
        .map(|p| std::fs::read_to_string(p).unwrap().lines().count())
        .sum();
    let glob = format!("{}/tool-events/**/*.parquet", dir.path().display());
    let rows = if weir_e2e::files(&dir.path().join("tool-events")).is_empty() {
        Vec::new()
    } else {
        duckdb(&format!("SELECT session_id, epoch_us(ts) FROM read_parquet('{glob}') ORDER BY session_id"))
    };
    (rows.iter().map(|r| (r[0].as_str().unwrap().to_owned(), r[1].as_i64().unwrap())).collect(), errors)
}

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

    let lines: Vec<String> = cases.iter().map(|(l, _)| l.clone()).collect();
    let (got, errors) = archive_and_read(&lines, None).await;
    assert_eq!(errors, 0, "no case goes to the error output");
    for (line, micros) in &cases {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        let name = v["sessionId"].as_str().unwrap();
        assert_eq!(got.get(name), Some(micros), "{line}");
    }
    assert_eq!(got["secs"], 1_546_760_416_000_000, "2019-01-06 07:40:16, not 1970-01-18");
}

/// The Hive JSON SerDe: its `TimestampFormats` first, then `java.sql.Timestamp.valueOf`
/// (one-digit months and days, a fraction to nine digits, lenient past a month's end);
/// an epoch number or ISO 8601 with `T` no format reads goes to the error output.
#[tokio::test]
async fn hive_reads_its_formats_then_java_sql_timestamp_value_of() {
    let python = r#"
import json, datetime
utc = datetime.timezone.utc
def us(t):
    return int((t - datetime.datetime(1970, 1, 1, tzinfo=utc)) / datetime.timedelta(microseconds=1))
cases = [
    ("pattern", "2019-01-06T09:40:16.250+0200", us(datetime.datetime(2019, 1, 6, 7, 40, 16, 250000, tzinfo=utc))),
    ("value-of", "2019-01-06 07:40:16", us(datetime.datetime(2019, 1, 6, 7, 40, 16, tzinfo=utc))),
    ("value-of-short", "2019-1-6 7:40:16.123456789", us(datetime.datetime(2019, 1, 6, 7, 40, 16, 123456, tzinfo=utc))),
    ("value-of-lenient", "2023-02-30 00:00:00", us(datetime.datetime(2023, 3, 2, tzinfo=utc))),
    ("epoch", 1546760416000, None),
    ("iso-no-zone-format", "2019-01-06T07:40:16", None),
]
for name, v, expected in cases:
    print(json.dumps({"line": json.dumps({"session_id": name, "tenantId": "t", "ts": v}), "micros": expected}))
"#;
    let out = std::process::Command::new("python3").args(["-c", python]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let cases: Vec<(String, Option<i64>)> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            (v["line"].as_str().unwrap().to_owned(), v["micros"].as_i64())
        })
        .collect();
    let hive =
        Deserializer::Hive { timestamp_formats: vec![TimestampFormat::parse("yyyy-MM-dd'T'HH:mm:ss.SSSZ").unwrap()] };
    let lines: Vec<String> = cases.iter().map(|(l, _)| l.clone()).collect();
    let (got, errors) = archive_and_read(&lines, Some(hive)).await;
    for (line, micros) in &cases {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        assert_eq!(got.get(v["session_id"].as_str().unwrap()), micros.as_ref(), "{line}");
    }
    assert_eq!(errors, 2, "the epoch number and the ISO text without a format that reads them");
}
