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
use weir_archiver::{Archiver, ArchiverOptions, InlineLimits};
use weir_core::ports::{ObjectSink, PutOptions, PutOutcome};
use weir_core::{Checkpoint, CloseReason, Consumer, Intent, ShardContext, ShardId, Timestamp, WorkerId};
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

/// Seed 5511 of the simulator. A worker resolving a shard it took is paused (here: its
/// store answers after a minute) before it lists the shard's intent manifests; the
/// lease goes to another worker, which writes objects and names their intents in
/// manifests, and the checkpoint does not pass them yet. The paused worker resumes and
/// lists those manifests: none is named by the lease it took, so they look like
/// leftovers. Deleted, the next owner reads the lease's manifests as missing, takes
/// their objects as never written, and archives their records a second time. A listing
/// counts only once a conditional lease write made after it lands; the paused worker's
/// fails, and it deletes nothing.
#[tokio::test(start_paused = true)]
async fn a_worker_paused_while_resolving_deletes_no_manifest_of_the_next_holder() {
    let store = Arc::new(MemoryObjectSink::new());
    let shard = ShardId::new("shard-0");
    let clock = ManualClock::new(Timestamp::from_millis(T0));
    let leases = SimLeases::new();
    let archiver = |sink: Arc<dyn ObjectSink>| {
        let mut o = ArchiverOptions::new("mcp-archive", settings(300));
        o.transformer = Transformer::McpNormalize;
        // Every intent in a manifest, as a2 of the seed.
        o.inline_intents = InlineLimits { per_round: 0, per_lease: 0, ..InlineLimits::default() };
        Archiver::new(o, sink, Arc::new(clock.clone())).unwrap()
    };
    // Record 1 (tenant t1) stays buffered, so no checkpoint passes the objects of t0.
    let records = || {
        let mut r = vec![record_of_tenant(0, 1, 2)];
        r.extend((1..=6).map(|n| record_of_tenant(0, 2 * n, 2)));
        r
    };
    // Worker 1 takes the shard and starts resolving; it is paused before it lists.
    let mut paused = archiver(Arc::new(SlowSink::new(store.clone(), Duration::from_secs(60))));
    let paused_acks = SimAcks::new(leases.clone(), 1, CrashSwitch::after(None));
    paused.on_shard_open(&leases.take(&shard, 1)).await.unwrap();
    // Worker 2 takes the lease and archives t0's records; their intents are in manifests.
    let holder_acks = SimAcks::new(leases.clone(), 2, CrashSwitch::after(None));
    let mut holder = archiver(store.clone());
    holder.on_shard_open(&leases.take(&shard, 2)).await.unwrap();
    holder.on_batch(&batch(&shard, records()), &holder_acks).await.unwrap();
    let named: Vec<String> = leases.intents(&shard).into_iter().map(|i| i.target).collect();
    assert!(!named.is_empty() && named.iter().all(|k| k.starts_with("_weir/")), "intents in manifests: {named:?}");
    assert!(read_archive(&store.snapshot()).count.contains_key("s0-2"), "t0's objects are written");
    assert_eq!(leases.checkpoint(&shard), None, "record 1 holds the checkpoint");
    // Worker 2 dies. Worker 1 resumes: it lists the manifests of worker 2.
    drop(holder);
    tokio::time::sleep(Duration::from_secs(600)).await;
    let _ = paused.on_batch(&batch(&shard, records()), &paused_acks).await;
    tokio::time::sleep(Duration::from_secs(600)).await;
    let _ = paused.on_shard_close(&shard, CloseReason::LeaseLost, &paused_acks).await;
    let objects = store.snapshot();
    for key in &named {
        assert!(objects.contains_key(key), "a manifest the lease names was deleted: {key}");
    }
    // Worker 3 takes the shard and archives from the checkpoint: each record once.
    let next_acks = SimAcks::new(leases.clone(), 3, CrashSwitch::after(None));
    let mut next = archiver(store.clone());
    next.on_shard_open(&leases.take(&shard, 3)).await.unwrap();
    next.on_batch(&batch(&shard, records()), &next_acks).await.unwrap();
    next.on_shard_close(&shard, CloseReason::Shutdown, &next_acks).await.unwrap();
    let archive = read_archive(&store.snapshot());
    for n in [1, 2, 4, 6, 8, 10, 12] {
        let id = format!("s0-{n}");
        assert_eq!(archive.count.get(&id), Some(&1), "{id}: {:?}", archive.count);
    }
}

/// A leftover manifest (a round whose intent write never landed) is still deleted by an
/// owner that holds the lease: after its first batch's lease write.
#[tokio::test(start_paused = true)]
async fn a_leftover_manifest_is_deleted_by_the_holder() {
    let store = Arc::new(MemoryObjectSink::new());
    let shard = ShardId::new("shard-0");
    let clock = ManualClock::new(Timestamp::from_millis(T0));
    let leases = SimLeases::new();
    let leftover = format!("_weir/intents/mcp-archive/{shard}/leftover.manifest");
    store.put_if_absent(&leftover, Bytes::from_static(b"x"), &PutOptions::default()).await.unwrap();
    let mut o = ArchiverOptions::new("mcp-archive", settings(1 << 20));
    o.transformer = Transformer::McpNormalize;
    let mut a = Archiver::new(o, store.clone(), Arc::new(clock.clone())).unwrap();
    let acks = SimAcks::new(leases.clone(), 1, CrashSwitch::after(None));
    a.on_shard_open(&leases.take(&shard, 1)).await.unwrap();
    a.on_batch(&batch(&shard, (1..=2).map(|n| record(0, n, 0)).collect()), &acks).await.unwrap();
    assert!(!store.snapshot().contains_key(&leftover), "the leftover is deleted");
    // A zombie's listing deletes nothing: its fencing write fails.
    store.put_if_absent(&leftover, Bytes::from_static(b"x"), &PutOptions::default()).await.unwrap();
    let mut zombie = Archiver::new(
        {
            let mut o = ArchiverOptions::new("mcp-archive", settings(1 << 20));
            o.transformer = Transformer::McpNormalize;
            o
        },
        store.clone(),
        Arc::new(clock.clone()),
    )
    .unwrap();
    zombie.on_shard_open(&leases.take(&shard, 2)).await.unwrap();
    leases.take(&shard, 3);
    let zombie_acks = SimAcks::new(leases.clone(), 2, CrashSwitch::after(None));
    let _ = zombie.on_batch(&batch(&shard, (1..=2).map(|n| record(0, n, 0)).collect()), &zombie_acks).await;
    assert!(store.snapshot().contains_key(&leftover), "a worker that lost the lease deletes no manifest");
}
