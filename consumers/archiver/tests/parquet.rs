//! Parquet output at cardinality: 500 active tenant partitions under a small buffer
//! budget. Open partitions hold their records' JSON (no Arrow builders, no writer), so
//! the buffers stay within `max_buffer_memory` as in every other format; every object
//! is one Parquet file and every record is in exactly one row.
#![allow(clippy::unwrap_used, clippy::print_stdout)] // a test: a failed expectation is a failed test

mod support;

use std::sync::Arc;
use std::time::Duration;

use support::*;
use weir_archiver::{Archiver, ArchiverOptions, Transformer};
use weir_core::{Clock, CloseReason, Consumer, ShardId, Timestamp};
use weir_firehose::Compression;
use weir_testkit::{CrashSwitch, ManualClock, MemoryObjectSink, SimAcks, SimLeases};

#[tokio::test(start_paused = true)]
async fn five_hundred_parquet_partitions_stay_within_the_buffer_budget() {
    const TENANTS: u128 = 500;
    const RECORDS: u128 = 30_000;
    const BUDGET: usize = 2 << 20;
    let mut s = settings(64 << 20);
    s.compression = Compression::Parquet;
    s.error_compression = Compression::Uncompressed;
    s.file_extension = ".parquet".into();
    s.conversion = Some(mcp_table());
    let mut o = ArchiverOptions::new("mcp-archive", s);
    o.transformer = Transformer::McpNormalize;
    o.max_buffer_memory = BUDGET;
    let store = Arc::new(MemoryObjectSink::new());
    let clock = ManualClock::new(Timestamp::from_millis(T0));
    let mut a = Archiver::new(o, store.clone(), Arc::new(clock.clone())).unwrap();
    let leases = SimLeases::new();
    let acks = SimAcks::new(leases.clone(), 1, CrashSwitch::after(None));
    let shard = ShardId::new("shard-0");
    a.on_shard_open(&leases.take(&shard, 1)).await.unwrap();
    let mut peak = 0;
    for start in (1..=RECORDS).step_by(1000) {
        let recs = (start..start + 1000).map(|n| record_of_tenant(0, n, TENANTS)).collect();
        a.on_batch(&batch(&shard, recs), &acks).await.unwrap();
        peak = peak.max(a.buffered_bytes());
        clock.advance(Duration::from_secs(5));
        a.on_tick(clock.now(), &acks).await.unwrap();
    }
    a.on_shard_close(&shard, CloseReason::Shutdown, &acks).await.unwrap();
    assert!(peak <= BUDGET, "open buffers held {peak} bytes, budget {BUDGET}");
    assert!(peak > BUDGET / 2, "the budget was reached ({peak} bytes): the test measures something");

    let objects = store.snapshot();
    let data: Vec<_> = objects.iter().filter(|(k, _)| k.starts_with("tool-events/")).collect();
    assert!(data.len() >= TENANTS as usize, "{} objects", data.len());
    for (key, body) in &data {
        assert!(key.ends_with(".parquet"), "{key}");
        assert!(body.starts_with(b"PAR1") && body.ends_with(b"PAR1"), "{key} is one Parquet file");
    }
    let archive = read_archive(&objects);
    for n in 1..=RECORDS {
        assert_eq!(archive.count.get(&format!("s0-{n}")).copied(), Some(1), "s0-{n} once");
    }
    let tenants: std::collections::BTreeSet<&str> =
        archive.data_lines.iter().map(|(_, v)| v["tenant_id"].as_str().unwrap()).collect();
    assert_eq!(tenants.len(), TENANTS as usize);
    println!("{} Parquet objects for {RECORDS} records, peak open buffers {peak} bytes", data.len());
}
