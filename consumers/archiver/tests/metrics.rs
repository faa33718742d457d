//! The archiver's metrics as a recorder sees them: records that run into the next one
//! (no trailing newline, no AppendDelimiterToRecord) are counted, and the buffer
//! gauges are set at ticks.
#![allow(clippy::unwrap_used, clippy::print_stdout)] // a test: a failed expectation is a failed test

mod support;

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use support::*;
use weir_archiver::{Archiver, ArchiverOptions};
use weir_core::{Clock, Consumer, Record, ShardId, Timestamp};
use weir_testkit::{CrashSwitch, ManualClock, MemoryObjectSink, SimAcks, SimLeases};

/// Every metric by name (a snapshot resets what it read, so there is one).
fn values(snapshotter: &Snapshotter) -> HashMap<String, DebugValue> {
    snapshotter.snapshot().into_vec().into_iter().map(|(k, .., v)| (k.key().name().to_owned(), v)).collect()
}

fn raw(n: u128, data: &str) -> Record {
    Record {
        partition_key: format!("pk{n}"),
        position: pos(n),
        approximate_arrival: Timestamp::from_millis(T0),
        data: Bytes::from(data.to_owned()),
    }
}

#[test]
fn records_without_a_delimiter_are_counted_and_gauges_set_at_ticks() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    metrics::with_local_recorder(&recorder, || {
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        rt.block_on(async {
            // No transform and no AppendDelimiterToRecord: records are written as they are.
            let clock = ManualClock::new(Timestamp::from_millis(T0));
            let o = ArchiverOptions::new("a", settings(1 << 20));
            let mut a = Archiver::new(o, Arc::new(MemoryObjectSink::new()), Arc::new(clock.clone())).unwrap();
            let leases = SimLeases::new();
            let acks = SimAcks::new(leases.clone(), 1, CrashSwitch::after(None));
            let shard = ShardId::new("s");
            a.on_shard_open(&leases.take(&shard, 1)).await.unwrap();
            let records = vec![
                raw(1, r#"{"tenant_id":"t1","tool_name":"x"}"#),
                raw(2, "{\"tenant_id\":\"t1\",\"tool_name\":\"x\"}\n"),
                raw(3, r#"{"tenant_id":"t2","tool_name":"x"}"#),
            ];
            a.on_batch(&batch(&shard, records), &acks).await.unwrap();
            a.on_tick(clock.now(), &acks).await.unwrap();
        });
    });
    let values = values(&snapshotter);
    assert_eq!(values.get("weir_archiver_records_without_delimiter_total"), Some(&DebugValue::Counter(2)));
    assert_eq!(
        values.get("weir_archiver_active_partitions"),
        Some(&DebugValue::Gauge(2.0.into())),
        "two partitions open"
    );
    match values.get("weir_archiver_buffered_bytes") {
        Some(DebugValue::Gauge(bytes)) => assert!(bytes.into_inner() > 0.0),
        other => panic!("buffered bytes: {other:?}"),
    }
}

/// Data freshness (Firehose's `DeliveryToS3.DataFreshness`): the age of the oldest
/// record not yet in the store, set at ticks; back to zero once everything is written.
#[test]
fn data_freshness_is_the_age_of_the_oldest_record_not_yet_written() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let freshness = || match values(&snapshotter).get("weir_archiver_data_freshness_seconds") {
        Some(DebugValue::Gauge(v)) => v.into_inner(),
        other => panic!("freshness gauge: {other:?}"),
    };
    let (clock, mut a, leases, acks, shard) = metrics::with_local_recorder(&recorder, || {
        let clock = ManualClock::new(Timestamp::from_millis(T0));
        let o = ArchiverOptions::new("a", settings(1 << 20));
        let a = Archiver::new(o, Arc::new(MemoryObjectSink::new()), Arc::new(clock.clone())).unwrap();
        let leases = SimLeases::new();
        let acks = SimAcks::new(leases.clone(), 1, CrashSwitch::after(None));
        (clock, a, leases, acks, ShardId::new("s"))
    });
    let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    let mut step = |advance: std::time::Duration, records: Vec<Record>| {
        metrics::with_local_recorder(&recorder, || {
            rt.block_on(async {
                if !records.is_empty() {
                    a.on_shard_open(&leases.take(&shard, 1)).await.unwrap();
                    a.on_batch(&batch(&shard, records), &acks).await.unwrap();
                }
                clock.advance(advance);
                a.on_tick(clock.now(), &acks).await.unwrap();
            })
        })
    };
    step(std::time::Duration::from_secs(7), vec![raw(1, r#"{"tenant_id":"t1","tool_name":"x"}"#)]);
    assert_eq!(freshness(), 7.0, "one record buffered for 7 s");
    step(std::time::Duration::from_secs(3600), Vec::new());
    assert_eq!(freshness(), 0.0, "the interval passed: the object is written");
}
