//! `BufferingHints.IntervalInSeconds = 0`: a batch's records are in the store when the
//! batch has been processed, without waiting for a tick, with dynamic partitioning too
//! (one object per partition the batch touched).
#![allow(clippy::unwrap_used, clippy::print_stdout)] // a test: a failed expectation is a failed test

mod support;

use std::sync::Arc;

use support::*;
use weir_archiver::{Archiver, ArchiverOptions, Transformer};
use weir_core::{Consumer, ShardId, Timestamp};
use weir_firehose::{from_json, validate};
use weir_testkit::{CrashSwitch, ManualClock, MemoryObjectSink, SimAcks, SimLeases};

#[tokio::test]
async fn each_batch_is_delivered_when_processed() {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../crates/weir-firehose/tests/fixtures/mcp-destination.json"
    ))
    .unwrap();
    let mut d = from_json(&text).unwrap();
    d.buffering_hints.interval_in_seconds = Some(0);
    let mut settings = validate(&d).unwrap();
    settings.append_delimiter = false; // mcp-normalize ends each line already
    assert!(settings.buffer_interval.is_zero());
    let clock = ManualClock::new(Timestamp::from_millis(T0));
    let sink = Arc::new(MemoryObjectSink::new());
    let mut o = ArchiverOptions::new("a", settings);
    o.transformer = Transformer::McpNormalize;
    let mut a = Archiver::new(o, sink.clone(), Arc::new(clock)).unwrap();
    let leases = SimLeases::new();
    let acks = SimAcks::new(leases.clone(), 1, CrashSwitch::after(None));
    let shard = ShardId::new("s");
    a.on_shard_open(&leases.take(&shard, 1)).await.unwrap();

    // 4 tenants: one object each, no tick in between.
    a.on_batch(&batch(&shard, (1..=8).map(|n| record_of_tenant(0, n, 4)).collect()), &acks).await.unwrap();
    let objects = sink.snapshot();
    let data: Vec<_> = objects.keys().filter(|k| !k.starts_with("_weir/")).collect();
    assert_eq!(data.len(), 4, "{data:?}");
    assert_eq!(leases.checkpoint(&shard), Some(pos(8)), "checkpointed at once");
    assert_eq!(read_archive(&objects).data_lines.len(), 8);

    a.on_batch(&batch(&shard, (9..=10).map(|n| record_of_tenant(0, n, 4)).collect()), &acks).await.unwrap();
    let objects = sink.snapshot();
    assert_eq!(objects.keys().filter(|k| !k.starts_with("_weir/")).count(), 6);
    assert_eq!(read_archive(&objects).data_lines.len(), 10);
    assert_eq!(leases.checkpoint(&shard), Some(pos(10)));
}
