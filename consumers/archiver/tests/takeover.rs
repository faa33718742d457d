//! Taking over shards with many open intents: the shards a worker takes resolve in
//! parallel (each up to 128 keys at a time), so four shards with 1,000 open intents
//! each and 100 ms per store call are ready in about the time of one.
#![allow(clippy::unwrap_used, clippy::print_stdout)] // a test: a failed expectation is a failed test

mod support;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use support::*;
use weir_archiver::Transformer;
use weir_archiver::{Archiver, ArchiverOptions};
use weir_core::ports::{ObjectSink, PutOptions, PutOutcome};
use weir_core::{Checkpoint, Consumer, Intent, ShardContext, ShardId, Timestamp, WorkerId};
use weir_testkit::{CrashSwitch, ManualClock, MemoryObjectSink, SimAcks, SimLeases, SlowSink};

const LATENCY: Duration = Duration::from_millis(100);

#[tokio::test(start_paused = true)]
async fn four_shards_with_a_thousand_open_intents_each_resolve_in_parallel() {
    const SHARDS: usize = 4;
    const INTENTS: u128 = 1_000;
    let store = Arc::new(MemoryObjectSink::new());
    let scope = r#"{"tenantId":"t1","toolName":"tool1"}"#;
    let shards: Vec<ShardId> = (0..SHARDS).map(|s| ShardId::new(format!("shard-{s}"))).collect();
    let mut contexts = Vec::new();
    for (s, shard) in shards.iter().enumerate() {
        let mut intents = Vec::new();
        for i in 0..INTENTS {
            let key = format!("earlier/{s}/{i}.gz");
            // Every other object was written before the earlier owner died.
            if i % 2 == 0 {
                store.put_if_absent(&key, Bytes::from_static(b"data"), &PutOptions::default()).await.unwrap();
            }
            intents.push(Intent {
                target: key,
                scope: scope.into(),
                first: pos(i + 1),
                last: pos(i + 1),
                parts: vec![],
                except: vec![],
            });
        }
        contexts.push(ShardContext {
            shard_id: shard.clone(),
            worker_id: WorkerId::new("w2"),
            checkpoint: Checkpoint::TrimHorizon,
            parents: Vec::new(),
            intents,
        });
    }
    let clock = ManualClock::new(Timestamp::from_millis(T0));
    let mut o = ArchiverOptions::new("mcp-archive", settings(1 << 20));
    o.transformer = Transformer::McpNormalize;
    let mut a = Archiver::new(o, Arc::new(SlowSink::new(store.clone(), LATENCY)), Arc::new(clock.clone())).unwrap();
    let leases = SimLeases::new();
    let acks = SimAcks::new(leases.clone(), 2, CrashSwitch::after(None));
    let started = tokio::time::Instant::now();
    for ctx in &contexts {
        a.on_shard_open(ctx).await.unwrap();
    }
    for (s, shard) in shards.iter().enumerate() {
        leases.take(shard, 2);
        a.on_batch(&batch(shard, (1..=4).map(|n| record(s, n, 0)).collect()), &acks).await.unwrap();
    }
    let took = started.elapsed();
    assert!(took <= Duration::from_millis(2_500), "took {took:?} (one shard alone takes about 2 s)");
    // Each shard's missing keys are claimed: a zombie's late put cannot land.
    for s in 0..SHARDS {
        let key = format!("earlier/{s}/1.gz");
        let late = store.put_if_absent(&key, Bytes::from_static(b"late"), &PutOptions::default()).await.unwrap();
        assert_eq!(late, PutOutcome::AlreadyExists, "shard {s}: the missing key was claimed");
    }
}

/// A key past the stores' 1,024 bytes (512 characters of four-byte text fit the
/// prefix's character limit) would be refused by every put and retried forever: the
/// object goes under the error prefix instead.
#[tokio::test]
async fn a_key_no_store_accepts_falls_back_to_the_error_prefix() {
    let clock = ManualClock::new(Timestamp::from_millis(T0));
    let mut o = ArchiverOptions::new("mcp-archive", settings(1 << 20));
    o.transformer = Transformer::McpNormalize;
    let a = Archiver::new(o, Arc::new(MemoryObjectSink::new()), Arc::new(clock)).unwrap();
    let wide = "😀".repeat(150);
    let data = format!(r#"{{"tenantId":"{wide}","toolName":"{wide}","sessionId":"s","ts":{T0}}}"#);
    let record = weir_core::Record {
        partition_key: "pk".into(),
        position: pos(1),
        approximate_arrival: Timestamp::from_millis(T0),
        data: Bytes::from(data),
    };
    let preview = a.preview(&ShardId::new("s"), &record).await;
    let [weir_archiver::Preview::Data { key, .. }] = preview.as_slice() else {
        panic!("one data line expected: {preview:?}");
    };
    assert!(key.starts_with("tool-events-errors/prefix-evaluation-failed/"), "{key}");
    weir_core::ports::validate_key(key).unwrap();
}

/// The runtime closes a shard before it opens it again (a release or a steal brings it
/// back to the same worker). Should a close go missing, the archiver drops what it held
/// of the last tenure: its records come again from the checkpoint and are archived
/// once, and no checkpoint passes a record that is only in memory.
#[tokio::test(start_paused = true)]
async fn a_shard_opened_again_without_a_close_starts_afresh() {
    let store = Arc::new(MemoryObjectSink::new());
    let shard = ShardId::new("shard-0");
    let clock = ManualClock::new(Timestamp::from_millis(T0));
    let mut o = ArchiverOptions::new("mcp-archive", settings(1 << 20));
    o.transformer = Transformer::McpNormalize;
    let mut a = Archiver::new(o, store.clone(), Arc::new(clock.clone())).unwrap();
    let leases = SimLeases::new();
    let first = SimAcks::new(leases.clone(), 1, CrashSwitch::after(None));
    a.on_shard_open(&leases.take(&shard, 1)).await.unwrap();
    a.on_batch(&batch(&shard, (1..=3).map(|n| record(0, n, 0)).collect()), &first).await.unwrap();
    assert!(a.buffered_bytes() > 0, "held in memory");
    // No close: the shard opens again at the checkpoint (nothing acknowledged).
    let second = SimAcks::new(leases.clone(), 2, CrashSwitch::after(None));
    a.on_shard_open(&leases.take(&shard, 2)).await.unwrap();
    assert_eq!(a.buffered_bytes(), 0, "the last tenure's buffers are dropped");
    a.on_batch(&batch(&shard, (1..=5).map(|n| record(0, n, 0)).collect()), &second).await.unwrap();
    assert_eq!(leases.checkpoint(&shard), None, "nothing is durable yet");
    a.on_shard_close(&shard, weir_core::CloseReason::Shutdown, &second).await.unwrap();
    assert_eq!(leases.checkpoint(&shard), Some(pos(5)));
    let archive = read_archive(&store.snapshot());
    for n in 1..=5 {
        assert_eq!(archive.count.get(&format!("s0-{n}")), Some(&1), "record {n}: {:?}", archive.count);
    }
}
