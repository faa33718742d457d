//! An unreachable store: objects wait with their records unacknowledged, are retried
//! with backoff from the tick, and past the backlog limit new batches are refused
//! (whole) so the stream keeps them.
#![allow(clippy::unwrap_used, clippy::print_stdout)] // a test: a failed expectation is a failed test

mod support;

use std::sync::Arc;
use std::time::Duration;

use support::*;
use weir_archiver::Transformer;
use weir_archiver::{Archiver, ArchiverOptions};
use weir_core::{Clock, CloseReason, Consumer, ShardId, Timestamp};
use weir_testkit::{CrashSwitch, ManualClock, MemoryObjectSink, SimAcks, SimLeases};

/// An archiver (mcp-normalize, `buffer_bytes` per buffer) on a memory store, with shard
/// `s` open.
struct Setup {
    store: Arc<MemoryObjectSink>,
    clock: ManualClock,
    a: Archiver,
    leases: Arc<SimLeases>,
    acks: SimAcks,
    shard: ShardId,
}

async fn setup(buffer_bytes: u64, max_backlog_bytes: Option<u64>) -> Setup {
    let store = Arc::new(MemoryObjectSink::new());
    let clock = ManualClock::new(Timestamp::from_millis(T0));
    let mut o = ArchiverOptions::new("a", settings(buffer_bytes));
    o.transformer = Transformer::McpNormalize;
    if let Some(max) = max_backlog_bytes {
        o.max_backlog_bytes = max;
    }
    let mut a = Archiver::new(o, store.clone(), Arc::new(clock.clone())).unwrap();
    let leases = SimLeases::new();
    let acks = SimAcks::new(leases.clone(), 1, CrashSwitch::after(None));
    let shard = ShardId::new("s");
    a.on_shard_open(&leases.take(&shard, 1)).await.unwrap();
    Setup { store, clock, a, leases, acks, shard }
}

#[tokio::test(start_paused = true)]
async fn objects_wait_unacknowledged_and_new_records_are_refused_past_the_limit() {
    let Setup { store, clock, mut a, leases, acks, shard } = setup(300, Some(2_000)).await;
    store.fail_next_puts(1_000);
    let backlog = a.backlog();
    a.on_batch(&batch(&shard, (1..=30).map(|n| record(0, n, 0)).collect()), &acks).await.unwrap();
    let (objects, bytes) = backlog.get();
    assert!(objects > 0 && bytes > 0, "objects wait: {objects} / {bytes}");
    assert_eq!(leases.checkpoint(&shard), None, "nothing acknowledged while the store fails");
    // Past the limit the next batch is refused whole.
    let refused = a.on_batch(&batch(&shard, (31..=40).map(|n| record(0, n, 0)).collect()), &acks).await;
    assert!(refused.unwrap_err().to_string().contains("wait for the object store"));
    // The store comes back: the tick retries after the backoff.
    store.fail_next_puts(0);
    clock.advance(Duration::from_secs(60));
    a.on_tick(clock.now(), &acks).await.unwrap();
    assert_eq!(backlog.get(), (0, 0));
    a.on_batch(&batch(&shard, (31..=40).map(|n| record(0, n, 0)).collect()), &acks).await.unwrap();
    a.on_shard_close(&shard, CloseReason::Shutdown, &acks).await.unwrap();
    assert_eq!(leases.checkpoint(&shard), Some(pos(40)));
    let archive = read_archive(&store.snapshot());
    assert!((1..=40).all(|n| archive.count.get(&format!("s0-{n}")) == Some(&1)), "{:?}", archive.count);
}

/// New batches do not make a failing store try anything before its backoff runs
/// out (their objects join the backlog); once it has, the next batch (or tick)
/// retries them.
#[tokio::test(start_paused = true)]
async fn batches_do_not_retry_waiting_objects_before_the_backoff() {
    let Setup { store, clock, mut a, leases, acks, shard } = setup(100, None).await;
    store.fail_next_puts(10_000);
    let backlog = a.backlog();
    let tries = |store: &MemoryObjectSink| 10_000 - store.failures_left();
    a.on_batch(&batch(&shard, (1..=10).map(|n| record(0, n, 0)).collect()), &acks).await.unwrap();
    let (waiting, _) = backlog.get();
    assert!(waiting > 0 && u64::from(tries(&store)) == waiting, "{waiting} objects wait after {} tries", tries(&store));
    // A second batch right away: nothing is tried (the store is failing); its own
    // objects join the backlog and wait for the retry.
    let tried = tries(&store);
    a.on_batch(&batch(&shard, (11..=20).map(|n| record(0, n, 0)).collect()), &acks).await.unwrap();
    let (waiting_now, _) = backlog.get();
    assert_eq!(tries(&store), tried, "nothing tried during the backoff");
    assert!(waiting_now > waiting, "the new objects wait too: {waiting_now} after {waiting}");
    // After the backoff, the next batch tries everything once more.
    clock.advance(Duration::from_secs(1));
    let before = u64::from(tries(&store));
    a.on_batch(&batch(&shard, (21..=30).map(|n| record(0, n, 0)).collect()), &acks).await.unwrap();
    let (waiting_last, _) = backlog.get();
    // Tried again: many new objects need an intent manifest first, whose put fails
    // first; either way every object still waits.
    assert!(u64::from(tries(&store)) > before, "the waiting objects were retried");
    assert!(waiting_last > waiting_now, "{waiting_last} objects wait");
    // The store comes back: nothing lost, nothing twice.
    store.fail_next_puts(0);
    clock.advance(Duration::from_secs(60));
    a.on_tick(clock.now(), &acks).await.unwrap();
    assert_eq!(backlog.get(), (0, 0));
    a.on_shard_close(&shard, CloseReason::Shutdown, &acks).await.unwrap();
    assert_eq!(leases.checkpoint(&shard), Some(pos(30)));
    let archive = read_archive(&store.snapshot());
    assert!((1..=30).all(|n| archive.count.get(&format!("s0-{n}")) == Some(&1)), "{:?}", archive.count);
}

/// A handoff whose flush fails (the store is down) goes on without the archiver: the
/// lease is let go at the last acknowledged position. Its open buffers go with it;
/// objects whose intents are stored stay under their keys (their puts may have landed).
/// When the shard comes back to this worker and is read again, every record is archived
/// once: the new tenure resolves those keys first, and an object of the old tenure that
/// meets the claim is dropped, not written again under a new key (a fault scenario
/// found records written twice when the backlog of the first tenure was delivered after
/// the second had read them).
#[tokio::test(start_paused = true)]
async fn an_unflushed_handoff_forgets_the_shard() {
    let Setup { store, clock, mut a, leases, acks, shard } = setup(1_000_000, None).await;
    let records = || batch(&shard, (1..=20).map(|n| record(0, n, 0)).collect());
    store.fail_next_puts(1_000);
    a.on_batch(&records(), &acks).await.unwrap();
    let closed = a.on_shard_close(&shard, CloseReason::Handoff, &acks).await;
    assert!(closed.is_err(), "the flush cannot succeed while the store fails");
    assert_eq!(leases.checkpoint(&shard), None);
    assert!(a.backlog().get().0 > 0, "objects with stored intents wait under their keys");
    // The store is back; the lease comes back to this worker (a new tenure), and the
    // shard is read again from its checkpoint.
    store.fail_next_puts(0);
    let acks = SimAcks::new(leases.clone(), 3, CrashSwitch::after(None));
    a.on_shard_open(&leases.take(&shard, 3)).await.unwrap();
    a.on_batch(&records(), &acks).await.unwrap();
    clock.advance(Duration::from_secs(60));
    a.on_tick(clock.now(), &acks).await.unwrap();
    a.on_shard_close(&shard, CloseReason::Shutdown, &acks).await.unwrap();
    assert_eq!(leases.checkpoint(&shard), Some(pos(20)));
    assert_eq!(a.backlog().get(), (0, 0), "the first tenure's objects met their claims and went");
    let archive = read_archive(&store.snapshot());
    assert!((1..=20).all(|n| archive.count.get(&format!("s0-{n}")) == Some(&1)), "{:?}", archive.count);
}
