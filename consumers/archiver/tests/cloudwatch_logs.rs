//! CloudWatch Logs records through the whole archiver: payloads built as a subscription
//! filter builds them (one gzip-compressed JSON document per record), a control
//! message, a corrupt and a foreign record. Messages become lines, control messages
//! vanish, and the records that do not decompress reach `decompression-failed` exactly
//! as they came; every record is acknowledged.
#![allow(clippy::unwrap_used, clippy::print_stdout)] // a test: a failed expectation is a failed test

mod support;

use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use bytes::Bytes;
use serde_json::{Value, json};
use support::*;
use weir_archiver::{Archiver, ArchiverOptions};
use weir_core::{Clock, Consumer, Record, ShardId, Timestamp};
use weir_firehose::{from_json, validate};
use weir_testkit::{CrashSwitch, ManualClock, MemoryObjectSink, SimAcks, SimLeases};

/// What a subscription filter writes: the document, gzip-compressed.
fn cloudwatch(document: &Value) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(document.to_string().as_bytes()).unwrap();
    e.finish().unwrap()
}

fn data_message(messages: &[&str]) -> Value {
    json!({
        "messageType": "DATA_MESSAGE",
        "owner": "123456789012",
        "logGroup": "/mcp/tool-calls",
        "logStream": "server-1",
        "subscriptionFilters": ["to-kinesis"],
        "logEvents": messages.iter().enumerate().map(|(i, m)| json!({
            "id": format!("3{i:055}"),
            "timestamp": T0 + i as i64,
            "message": m,
        })).collect::<Vec<_>>(),
    })
}

fn record(n: u128, data: Vec<u8>) -> Record {
    Record {
        partition_key: format!("pk{n}"),
        position: pos(n),
        approximate_arrival: Timestamp::from_millis(T0),
        data: Bytes::from(data),
    }
}

async fn archive(extraction: bool, records: Vec<Record>) -> (Vec<String>, Vec<(String, Value)>) {
    let destination = format!(
        r#"{{"Prefix": "logs/", "ErrorOutputPrefix": "errors/!{{firehose:error-output-type}}/",
            "BufferingHints": {{"IntervalInSeconds": 60}}, "CompressionFormat": "GZIP",
            "ProcessingConfiguration": {{"Enabled": true, "Processors": [
              {{"Type": "Decompression", "Parameters": [{{"ParameterName": "CompressionFormat", "ParameterValue": "GZIP"}}]}},
              {{"Type": "CloudWatchLogProcessing", "Parameters": [
                {{"ParameterName": "DataMessageExtraction", "ParameterValue": "{extraction}"}}]}},
              {{"Type": "AppendDelimiterToRecord"}}]}}}}"#
    );
    let settings = validate(&from_json(&destination).unwrap()).unwrap();
    let clock = ManualClock::new(Timestamp::from_millis(T0));
    let sink = Arc::new(MemoryObjectSink::new());
    let mut a = Archiver::new(ArchiverOptions::new("logs", settings), sink.clone(), Arc::new(clock.clone())).unwrap();
    let leases = SimLeases::new();
    let acks = SimAcks::new(leases.clone(), 1, CrashSwitch::after(None));
    let shard = ShardId::new("s");
    a.on_shard_open(&leases.take(&shard, 1)).await.unwrap();
    let last = records.last().unwrap().position.clone();
    a.on_batch(&batch(&shard, records), &acks).await.unwrap();
    clock.advance(Duration::from_secs(61));
    a.on_tick(clock.now(), &acks).await.unwrap();
    assert_eq!(leases.checkpoint(&shard), Some(last), "every record is acknowledged");
    let (mut data, mut errors) = (Vec::new(), Vec::new());
    for (key, body) in sink.snapshot() {
        let text = object_text(&body);
        if key.starts_with("logs/") {
            data.extend(text.lines().map(str::to_owned));
        } else {
            errors.extend(text.lines().map(|l| (key.clone(), serde_json::from_str::<Value>(l).unwrap())));
        }
    }
    (data, errors)
}

#[tokio::test]
async fn log_events_become_lines_and_broken_records_keep_their_bytes() {
    let first = cloudwatch(&data_message(&[r#"{"tenantId":"t1","toolName":"search"}"#, "plain text line"]));
    let control = cloudwatch(&json!({
        "messageType": "CONTROL_MESSAGE", "owner": "CloudwatchLogs", "logGroup": "", "logStream": "",
        "subscriptionFilters": [], "logEvents": [{"id": "", "timestamp": T0,
        "message": "CWL CONTROL MESSAGE: Checking health of destination Kinesis stream."}],
    }));
    let mut corrupt = cloudwatch(&data_message(&["lost"]));
    let cut = corrupt.len() - 12;
    corrupt.truncate(cut);
    let foreign = br#"{"tenantId":"t2","note":"not compressed"}"#.to_vec();
    let second = cloudwatch(&data_message(&["third line"]));
    let records = vec![
        record(1, first),
        record(2, control),
        record(3, corrupt.clone()),
        record(4, foreign.clone()),
        record(5, second),
    ];

    let (data, errors) = archive(true, records.clone()).await;
    assert_eq!(data, [r#"{"tenantId":"t1","toolName":"search"}"#, "plain text line", "third line"]);
    assert_eq!(errors.len(), 2, "{errors:?}");
    for ((key, e), raw) in errors.iter().zip([&corrupt, &foreign]) {
        assert!(key.starts_with("errors/decompression-failed/"), "{key}");
        assert_eq!(e["errorCode"], "Decompression.Failed");
        assert!(e["errorMessage"].as_str().unwrap().contains("does not decompress as GZIP"), "{e}");
        let back = base64::engine::general_purpose::STANDARD.decode(e["rawData"].as_str().unwrap()).unwrap();
        assert_eq!(&back, raw, "the record as it came");
    }

    // Without extraction each data message is delivered whole, decompressed.
    let (data, errors) = archive(false, records).await;
    assert_eq!(data.len(), 2, "{data:?}");
    let docs: Vec<Value> = data.iter().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(docs[0]["logEvents"][1]["message"], "plain text line");
    assert_eq!(docs[1]["logEvents"][0]["message"], "third line");
    assert_eq!(errors.len(), 2);
}

/// With extraction on, a record that decompresses but is not a CloudWatch Logs message
/// has no events to extract: it goes to `processing-failed`, whole.
#[tokio::test]
async fn a_compressed_record_that_is_not_a_logs_message_is_a_processing_failure() {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(b"[1, 2, 3]").unwrap();
    let odd = e.finish().unwrap();
    let (data, errors) = archive(true, vec![record(1, odd.clone())]).await;
    assert!(data.is_empty());
    assert_eq!(errors.len(), 1);
    let (key, e) = &errors[0];
    assert!(key.starts_with("errors/processing-failed/"), "{key}");
    assert_eq!(e["errorCode"], "CloudWatchLogProcessing.Failed");
    let back = base64::engine::general_purpose::STANDARD.decode(e["rawData"].as_str().unwrap()).unwrap();
    assert_eq!(back, odd);
}
