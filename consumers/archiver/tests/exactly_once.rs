//! Exactly-once delivery under crashes at every step of the flush protocol, and under
//! zombies: owners die after a random number of operations (intent writes, puts,
//! stats, gets, acknowledgements), a put at the crash point may land with its answer
//! lost, and an old owner may keep writing after a new one took over. Whatever
//! happens, once a last owner runs to the end every record is in exactly one object.
#![allow(clippy::unwrap_used, clippy::print_stdout)] // a test: a failed expectation is a failed test

mod support;

use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use support::*;
use weir_archiver::DeliveryMode;
use weir_archiver::InlineLimits;
use weir_archiver::Transformer;
use weir_archiver::{Archiver, ArchiverOptions};
use weir_core::ports::ObjectSink;
use weir_core::{Clock, CloseReason, Consumer, ShardId, Timestamp};
use weir_firehose::Compression;
use weir_testkit::{CrashSwitch, CrashingSink, ManualClock, MemoryObjectSink, SimAcks, SimLeases};

const SHARDS: usize = 2;
const RECORDS: u128 = 60;

thread_local! {
    /// The buffers' memory budget of this test case (a proptest case runs on one thread).
    static BUDGET: std::cell::Cell<usize> = const { std::cell::Cell::new(usize::MAX) };
    /// When intents go inline rather than into a manifest, (per round, per lease).
    static INLINE: std::cell::Cell<(usize, usize)> = const { std::cell::Cell::new((16, 128)) };
    /// The spill directory of this test case, if it spills.
    static SPILL: std::cell::RefCell<Option<std::path::PathBuf>> = const { std::cell::RefCell::new(None) };
    /// The objects' compression in this test case.
    static COMPRESSION: std::cell::Cell<Compression> = const { std::cell::Cell::new(Compression::Gzip) };
}

fn compression() -> impl Strategy<Value = Compression> {
    prop_oneof![
        Just(Compression::Gzip),
        Just(Compression::Uncompressed),
        Just(Compression::Zip),
        Just(Compression::Snappy),
        Just(Compression::HadoopSnappy),
        Just(Compression::Parquet),
    ]
}

/// Inline limits: the defaults, every intent in a manifest, or a mix.
fn inline_limits() -> impl Strategy<Value = (usize, usize)> {
    prop_oneof![Just((16, 128)), Just((0, 0)), Just((2, 4))]
}

/// Reports the intents checkpoints passed, as the runtime does after its writes.
async fn report_passed(a: &mut Archiver, acks: &SimAcks) {
    for (shard, intents) in acks.take_passed() {
        let _ = a.on_intents_passed(&shard, &intents).await;
    }
}

fn archiver(sink: Arc<dyn ObjectSink>, clock: &ManualClock, mode: DeliveryMode) -> Archiver {
    let mut s = settings(600);
    s.compression = COMPRESSION.get();
    s.file_extension = s.compression.extension().into();
    s.error_compression = s.compression;
    if s.compression == Compression::Parquet {
        s.error_compression = Compression::Uncompressed;
        s.conversion = Some(mcp_table());
    }
    let mut o = ArchiverOptions::new("mcp-archive", s);
    o.mode = mode;
    o.max_active_partitions = Some(5);
    o.max_buffer_memory = BUDGET.get();
    let (per_round, per_lease) = INLINE.get();
    // With few manifests per lease, rounds absorb earlier manifests.
    o.inline_intents = InlineLimits { per_round, per_lease, manifests: per_lease.max(2), ..InlineLimits::default() };
    o.spill_directory = SPILL.with_borrow(Clone::clone);
    o.transformer = Transformer::McpNormalize;
    Archiver::new(o, sink, Arc::new(clock.clone())).unwrap()
}

/// One owner's life: takes every shard, feeds records after the checkpoints in
/// batches, ticks, and closes at the end unless it crashes first. Returns the
/// archiver when it is left running as a zombie.
#[allow(clippy::too_many_arguments)]
async fn life(
    owner: u64,
    store: &Arc<MemoryObjectSink>,
    leases: &Arc<SimLeases>,
    clock: &ManualClock,
    crash_after: Option<u64>,
    apply_at_crash: bool,
    batch_size: usize,
    stop_early: bool,
) -> Option<(Archiver, SimAcks)> {
    let switch = CrashSwitch::after(crash_after);
    let sink: Arc<dyn ObjectSink> = Arc::new(CrashingSink::new(store.clone(), switch.clone(), apply_at_crash));
    let acks = SimAcks::new(leases.clone(), owner, switch.clone());
    let mut a = archiver(sink, clock, DeliveryMode::ExactlyOnce);
    let shards: Vec<ShardId> = (0..SHARDS).map(|s| ShardId::new(format!("shard-{s}"))).collect();
    for s in &shards {
        if a.on_shard_open(&leases.take(s, owner)).await.is_err() && switch.dead() {
            return None;
        }
    }
    let mut next: Vec<u128> = shards
        .iter()
        .map(|s| leases.checkpoint(s).map_or(1, |p| p.sequence.to_string().parse::<u128>().unwrap() + 1))
        .collect();
    let mut turn = 0usize;
    loop {
        if switch.dead() {
            return None;
        }
        let i = turn % SHARDS;
        turn += 1;
        if next.iter().all(|n| *n > RECORDS) {
            break;
        }
        if next[i] > RECORDS {
            continue;
        }
        let end = (next[i] + batch_size as u128).min(RECORDS + 1);
        let recs = (next[i]..end).map(|n| record(i, n, 9)).collect();
        if a.on_batch(&batch(&shards[i], recs), &acks).await.is_ok() {
            next[i] = end;
        }
        report_passed(&mut a, &acks).await;
        clock.advance(Duration::from_secs(20));
        let _ = a.on_tick(clock.now(), &acks).await;
        report_passed(&mut a, &acks).await;
        if stop_early && turn == 4 {
            return Some((a, acks));
        }
    }
    for s in &shards {
        for _ in 0..20 {
            if switch.dead() {
                return None;
            }
            clock.advance(Duration::from_secs(40));
            let closed = a.on_shard_close(s, CloseReason::Shutdown, &acks).await.is_ok();
            report_passed(&mut a, &acks).await;
            if closed {
                break;
            }
        }
    }
    None
}

fn check(store: &MemoryObjectSink, leases: &SimLeases) -> Result<(), TestCaseError> {
    let objects = store.snapshot();
    let compression = COMPRESSION.get();
    for (key, body) in objects.iter().filter(|(k, b)| !k.starts_with("_weir/") && !b.is_empty()) {
        let compression = match compression {
            // Error objects beside Parquet are JSON lines.
            Compression::Parquet if key.starts_with("tool-events-errors/") => Compression::Uncompressed,
            c => c,
        };
        prop_assert!(key.ends_with(compression.extension()), "{} is not {:?}", key, compression);
        if compression == Compression::Parquet {
            prop_assert!(body.starts_with(b"PAR1") && body.ends_with(b"PAR1"), "{} is one Parquet file", key);
        }
        if let Some(format) = compression.whole() {
            prop_assert_eq!(weir_core::object_format::ObjectFormat::sniff(body), format, "{}", key);
        }
    }
    let archive = read_archive(&objects);
    for shard in 0..SHARDS {
        for n in 1..=RECORDS {
            let id = format!("s{shard}-{n}");
            prop_assert_eq!(archive.count.get(&id).copied().unwrap_or(0), 1, "record {} archived once", id);
        }
        let cp = leases.checkpoint(&ShardId::new(format!("shard-{shard}")));
        prop_assert_eq!(cp, Some(pos(RECORDS)), "checkpoint at the end");
    }
    prop_assert_eq!(archive.count.len(), SHARDS * RECORDS as usize);
    for (key, v) in &archive.error_lines {
        prop_assert!(key.starts_with("tool-events-errors/processing-failed/"), "{}", key);
        prop_assert_eq!(v["errorCode"].as_str(), Some("Transform.McpNormalize"));
    }
    for (key, v) in &archive.data_lines {
        let tenant = v["tenant_id"].as_str().unwrap();
        prop_assert!(key.starts_with(&format!("tool-events/tenant={tenant}/")), "{} holds {}", key, tenant);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    /// Owners crash at random points, one after another; the last one finishes. With
    /// a small memory budget, buffers are sealed for memory (or spilled to disk)
    /// between the crashes.
    #[test]
    fn crashes_at_any_step(
        crashes in proptest::collection::vec((0u64..60, any::<bool>(), 1usize..9), 1..5),
        final_batch in 1usize..12,
        budget in prop_oneof![Just(usize::MAX), 600usize..6000],
        inline in inline_limits(),
        spill in any::<bool>(),
        compression in compression(),
    ) {
        COMPRESSION.set(compression);
        BUDGET.set(budget);
        INLINE.set(inline);
        let dir = tempfile::tempdir().unwrap();
        SPILL.set(spill.then(|| dir.path().to_path_buf()));
        let rt = tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build().unwrap();
        rt.block_on(async {
            let store = Arc::new(MemoryObjectSink::new());
            let leases = SimLeases::new();
            let clock = ManualClock::new(Timestamp::from_millis(T0));
            for (owner, (after, apply, batch_size)) in crashes.iter().enumerate() {
                life(owner as u64 + 1, &store, &leases, &clock, Some(*after), *apply, *batch_size, false).await;
            }
            life(99, &store, &leases, &clock, None, false, final_batch, false).await;
            check(&store, &leases)
        })?;
    }

    /// An owner stalls with buffered records and failing puts; a new owner takes over
    /// and finishes; then the zombie wakes up and flushes everything it had.
    #[test]
    fn zombies_cannot_duplicate(
        batch_size in 1usize..9,
        failing_puts in 0u32..6,
        zombie_first in any::<bool>(),
        budget in prop_oneof![Just(usize::MAX), 600usize..6000],
        inline in inline_limits(),
        compression in compression(),
    ) {
        COMPRESSION.set(compression);
        BUDGET.set(budget);
        INLINE.set(inline);
        let rt = tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build().unwrap();
        rt.block_on(async {
            let store = Arc::new(MemoryObjectSink::new());
            let leases = SimLeases::new();
            let clock = ManualClock::new(Timestamp::from_millis(T0));
            let (mut zombie, zacks) = life(1, &store, &leases, &clock, None, false, batch_size, true).await.unwrap();
            store.fail_next_puts(failing_puts);
            // The zombie tries (and maybe fails) to write; then loses every lease.
            clock.advance(Duration::from_secs(400));
            let _ = zombie.on_tick(clock.now(), &zacks).await;
            if zombie_first {
                clock.advance(Duration::from_secs(400));
                let _ = zombie.on_tick(clock.now(), &zacks).await;
            }
            life(2, &store, &leases, &clock, None, false, batch_size, false).await;
            // The zombie wakes: flushes, retries, closes.
            for _ in 0..5 {
                clock.advance(Duration::from_secs(400));
                let _ = zombie.on_tick(clock.now(), &zacks).await;
            }
            for s in 0..SHARDS {
                let _ = zombie.on_shard_close(&ShardId::new(format!("shard-{s}")), CloseReason::Shutdown, &zacks).await;
            }
            check(&store, &leases)
        })?;
    }
}

/// Firehose mode is at least once: a crash after a put and before the checkpoint
/// archives the object's records again, and nothing is lost.
#[tokio::test(start_paused = true)]
async fn firehose_mode_is_at_least_once() {
    let store = Arc::new(MemoryObjectSink::new());
    let leases = SimLeases::new();
    let clock = ManualClock::new(Timestamp::from_millis(T0));
    let shard = ShardId::new("shard-0");
    // First owner: puts succeed, acknowledgements are lost (crash after the put).
    let switch = CrashSwitch::after(None);
    let acks = SimAcks::new(leases.clone(), 1, CrashSwitch::after(Some(0)));
    let mut a = archiver(Arc::new(CrashingSink::new(store.clone(), switch, false)), &clock, DeliveryMode::Firehose);
    a.on_shard_open(&leases.take(&shard, 1)).await.unwrap();
    a.on_batch(&batch(&shard, (1..=20).map(|n| record(0, n, 0)).collect()), &acks).await.unwrap();
    a.on_shard_close(&shard, CloseReason::Shutdown, &acks).await.unwrap();
    assert_eq!(leases.checkpoint(&shard), None);
    // Second owner archives everything again.
    let acks2 = SimAcks::new(leases.clone(), 2, CrashSwitch::after(None));
    let mut b = archiver(store.clone(), &clock, DeliveryMode::Firehose);
    b.on_shard_open(&leases.take(&shard, 2)).await.unwrap();
    b.on_batch(&batch(&shard, (1..=20).map(|n| record(0, n, 0)).collect()), &acks2).await.unwrap();
    b.on_shard_close(&shard, CloseReason::Shutdown, &acks2).await.unwrap();
    let archive = read_archive(&store.snapshot());
    assert!((1..=20).all(|n| archive.count[&format!("s0-{n}")] == 2), "every record twice: {:?}", archive.count);
    assert_eq!(leases.checkpoint(&shard), Some(pos(20)));
}

/// Thousands of partitions per shard: intents go into manifests, so no lease holds
/// more than a few kilobytes of them (DynamoDB refuses items over 400 KB), owners that
/// crash with thousands of open intents are resolved exactly, and every manifest is
/// deleted once checkpoints pass it.
#[tokio::test(start_paused = true)]
async fn thousands_of_partitions_keep_leases_small() {
    const TENANTS: u128 = 3_000;
    const PER_SHARD: u128 = 6_000;
    // (crash after this many operations, the put at the crash lands) per owner, then an
    // owner that finishes.
    for crashes in [vec![], vec![(40, true)], vec![(9, false), (400, true)]] {
        let store = Arc::new(MemoryObjectSink::new());
        let leases = SimLeases::new();
        let clock = ManualClock::new(Timestamp::from_millis(T0));
        let shards: Vec<ShardId> = (0..SHARDS).map(|s| ShardId::new(format!("shard-{s}"))).collect();
        let owners = crashes.iter().map(|c| Some(*c)).chain([None]);
        let mut manifests_seen = 0;
        for (owner, crash) in owners.enumerate() {
            let switch = CrashSwitch::after(crash.map(|(after, _)| after));
            let apply = crash.is_some_and(|(_, apply)| apply);
            let sink: Arc<dyn ObjectSink> = Arc::new(CrashingSink::new(store.clone(), switch.clone(), apply));
            let acks = SimAcks::new(leases.clone(), owner as u64 + 1, switch.clone());
            let mut o = ArchiverOptions::new("mcp-archive", settings(64 << 20));
            o.transformer = Transformer::McpNormalize;
            o.max_buffer_memory = 4 << 20;
            let mut a = Archiver::new(o, sink, Arc::new(clock.clone())).unwrap();
            for s in &shards {
                let _ = a.on_shard_open(&leases.take(s, owner as u64 + 1)).await;
            }
            'life: for (i, s) in shards.iter().enumerate() {
                let mut next = leases.checkpoint(s).map_or(1, |p| p.sequence.to_string().parse::<u128>().unwrap() + 1);
                while next <= PER_SHARD {
                    if switch.dead() {
                        break 'life;
                    }
                    let end = (next + 750).min(PER_SHARD + 1);
                    let recs = (next..end).map(|n| record_of_tenant(i, n, TENANTS)).collect();
                    if a.on_batch(&batch(s, recs), &acks).await.is_ok() {
                        next = end;
                    }
                    report_passed(&mut a, &acks).await;
                    manifests_seen =
                        manifests_seen.max(store.snapshot().keys().filter(|k| k.starts_with("_weir/")).count());
                    clock.advance(Duration::from_secs(30));
                    let _ = a.on_tick(clock.now(), &acks).await;
                    report_passed(&mut a, &acks).await;
                }
            }
            for s in &shards {
                if switch.dead() {
                    break;
                }
                let _ = a.on_shard_close(s, CloseReason::Shutdown, &acks).await;
                report_passed(&mut a, &acks).await;
            }
        }
        let objects = store.snapshot();
        let archive = read_archive(&objects);
        for (i, shard) in shards.iter().enumerate() {
            for n in 1..=PER_SHARD {
                assert_eq!(archive.count.get(&format!("s{i}-{n}")).copied(), Some(1), "s{i}-{n} ({crashes:?})");
            }
            assert!(leases.intents(shard).is_empty(), "every intent passed");
        }
        let data_objects = objects.keys().filter(|k| k.starts_with("tool-events/")).count();
        assert!(data_objects >= TENANTS as usize, "{data_objects} objects");
        let (peak_intents, peak_bytes) = leases.peak_intents();
        assert!(peak_bytes < 64 << 10, "a lease held {peak_intents} intents, {peak_bytes} bytes ({crashes:?})");
        assert!(manifests_seen > 0, "rounds of thousands of objects go into manifests");
        if crashes.is_empty() {
            let left: Vec<&String> = objects.keys().filter(|k| k.starts_with("_weir/")).collect();
            assert!(left.is_empty(), "manifests are deleted once passed: {left:?}");
        }
    }
}

#[test]
fn an_unusable_spill_directory_fails_at_start_naming_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("not-a-directory");
    std::fs::write(&file, b"x").unwrap();
    let mut o = ArchiverOptions::new("mcp-archive", settings(600));
    o.spill_directory = Some(file.join("spill"));
    let clock = ManualClock::new(Timestamp::from_millis(T0));
    let e = Archiver::new(o, Arc::new(MemoryObjectSink::new()), Arc::new(clock)).err().expect("refused");
    assert!(e.to_string().starts_with("spill_directory: "), "{e}");
    assert!(e.to_string().contains("not-a-directory/spill"), "{e}");
}

/// An object of two shards is put; the put lands but its answer is lost; then one of
/// its shards' leases goes. The retry must put the same object under the same key
/// (finding it there counts as success), not rebuild it under a new key without the
/// lost shard: that would write the other shard's records twice. The lost shard's next
/// owner finds the key written and skips its records.
#[tokio::test(start_paused = true)]
async fn a_put_whose_answer_was_lost_keeps_its_key_when_a_shard_goes() {
    let store = Arc::new(MemoryObjectSink::new());
    let leases = SimLeases::new();
    let clock = ManualClock::new(Timestamp::from_millis(T0));
    let (s0, s1) = (ShardId::new("shard-0"), ShardId::new("shard-1"));
    let acks = SimAcks::new(leases.clone(), 1, CrashSwitch::after(None));
    let whole = |sink: Arc<MemoryObjectSink>| {
        let mut o = ArchiverOptions::new("mcp-archive", settings(64 << 20));
        o.transformer = Transformer::McpNormalize;
        Archiver::new(o, sink, Arc::new(clock.clone())).unwrap()
    };
    let mut a = whole(store.clone());
    for s in [&s0, &s1] {
        a.on_shard_open(&leases.take(s, 1)).await.unwrap();
    }
    // One partition (tenant t0) holds both shards' records.
    for (i, s) in [&s0, &s1].into_iter().enumerate() {
        a.on_batch(&batch(s, (1..=3).map(|n| record_of_tenant(i, n, 1)).collect()), &acks).await.unwrap();
    }
    store.lose_next_replies(1);
    clock.advance(Duration::from_secs(600));
    let _ = a.on_tick(clock.now(), &acks).await;
    assert_eq!(read_archive(&store.snapshot()).count.len(), 6, "the put landed");
    // Shard 1 goes to another owner.
    let ctx = leases.take(&s1, 2);
    a.on_shard_close(&s1, CloseReason::LeaseLost, &acks).await.unwrap();
    for _ in 0..3 {
        clock.advance(Duration::from_secs(30));
        let _ = a.on_tick(clock.now(), &acks).await;
    }
    a.on_shard_close(&s0, CloseReason::Shutdown, &acks).await.unwrap();
    let acks2 = SimAcks::new(leases.clone(), 2, CrashSwitch::after(None));
    let mut b = whole(store.clone());
    b.on_shard_open(&ctx).await.unwrap();
    b.on_batch(&batch(&s1, (1..=3).map(|n| record_of_tenant(1, n, 1)).collect()), &acks2).await.unwrap();
    b.on_shard_close(&s1, CloseReason::Shutdown, &acks2).await.unwrap();
    let archive = read_archive(&store.snapshot());
    for id in ["s0-1", "s0-2", "s0-3", "s1-1", "s1-2", "s1-3"] {
        assert_eq!(archive.count.get(id), Some(&1), "{id}: {:?}", archive.count);
    }
    assert_eq!(leases.checkpoint(&s0), Some(pos(3)));
    assert_eq!(leases.checkpoint(&s1), Some(pos(3)));
}

/// The same through the other path that rebuilds objects: a round whose intents are
/// refused because a lease is gone (`NotHeld`) rebuilds that round's new objects, and
/// must leave alone a waiting object whose earlier put may have landed.
#[tokio::test(start_paused = true)]
async fn a_refused_intent_write_leaves_earlier_puts_their_keys() {
    let store = Arc::new(MemoryObjectSink::new());
    let leases = SimLeases::new();
    let clock = ManualClock::new(Timestamp::from_millis(T0));
    let (s0, s1) = (ShardId::new("shard-0"), ShardId::new("shard-1"));
    let acks = SimAcks::new(leases.clone(), 1, CrashSwitch::after(None));
    let whole = |sink: Arc<MemoryObjectSink>| {
        let mut o = ArchiverOptions::new("mcp-archive", settings(64 << 20));
        o.transformer = Transformer::McpNormalize;
        Archiver::new(o, sink, Arc::new(clock.clone())).unwrap()
    };
    let mut a = whole(store.clone());
    for s in [&s0, &s1] {
        a.on_shard_open(&leases.take(s, 1)).await.unwrap();
    }
    a.on_batch(&batch(&s0, (1..=3).map(|n| record_of_tenant(0, n, 1)).collect()), &acks).await.unwrap();
    store.lose_next_replies(1);
    clock.advance(Duration::from_secs(600));
    let _ = a.on_tick(clock.now(), &acks).await;
    assert_eq!(read_archive(&store.snapshot()).count.len(), 3, "the put landed, its answer lost");
    // A record of shard 1 opens another object; then shard 1's lease is taken.
    a.on_batch(&batch(&s1, vec![record_of_tenant(1, 1, 1)]), &acks).await.unwrap();
    let ctx = leases.take(&s1, 2);
    clock.advance(Duration::from_secs(600));
    let _ = a.on_tick(clock.now(), &acks).await;
    a.on_shard_close(&s1, CloseReason::LeaseLost, &acks).await.unwrap();
    a.on_shard_close(&s0, CloseReason::Shutdown, &acks).await.unwrap();
    let acks2 = SimAcks::new(leases.clone(), 2, CrashSwitch::after(None));
    let mut b = whole(store.clone());
    b.on_shard_open(&ctx).await.unwrap();
    b.on_batch(&batch(&s1, vec![record_of_tenant(1, 1, 1)]), &acks2).await.unwrap();
    b.on_shard_close(&s1, CloseReason::Shutdown, &acks2).await.unwrap();
    let archive = read_archive(&store.snapshot());
    for id in ["s0-1", "s0-2", "s0-3", "s1-1"] {
        assert_eq!(archive.count.get(id), Some(&1), "{id}: {:?}", archive.count);
    }
}

/// A record of several parts (`RecordDeAggregation`) whose parts go to one partition,
/// past the buffer size: its parts stay in one object. Split across two objects, the
/// first written and the second never (the owner crashed), the next owner took the
/// record as archived (its first object covers it) and the other parts were lost.
#[tokio::test(start_paused = true)]
async fn the_parts_of_a_record_stay_in_one_object() {
    let store = Arc::new(MemoryObjectSink::new());
    let leases = SimLeases::new();
    let clock = ManualClock::new(Timestamp::from_millis(T0));
    let shard = ShardId::new("shard-0");
    let build = || {
        // About two normalized parts fill a buffer.
        let mut s = settings(400);
        s.deaggregation = Some(weir_firehose::SubRecords::Json);
        let mut o = ArchiverOptions::new("mcp-archive", s);
        o.transformer = Transformer::McpNormalize;
        Archiver::new(o, store.clone(), Arc::new(clock.clone())).unwrap()
    };
    // One record of five parts, all of tenant t0.
    let parts: String =
        (0..5).map(|k| record_of_tenant(0, 10 + k, 1).data).map(|d| String::from_utf8(d.to_vec()).unwrap()).collect();
    let record = weir_core::Record { data: bytes::Bytes::from(parts), ..record_of_tenant(0, 1, 1) };
    // The owner stores its intents and puts its objects, then dies before its
    // acknowledgement reaches the lease.
    let acks = SimAcks::new(leases.clone(), 1, CrashSwitch::after(Some(1)));
    let mut a = build();
    a.on_shard_open(&leases.take(&shard, 1)).await.unwrap();
    a.on_batch(&batch(&shard, vec![record.clone()]), &acks).await.unwrap();
    drop(a);
    assert_eq!(leases.checkpoint(&shard), None, "nothing acknowledged");
    assert!(!read_archive(&store.snapshot()).count.is_empty(), "something was written");
    let acks = SimAcks::new(leases.clone(), 2, CrashSwitch::after(None));
    let mut b = build();
    b.on_shard_open(&leases.take(&shard, 2)).await.unwrap();
    b.on_batch(&batch(&shard, vec![record]), &acks).await.unwrap();
    b.on_shard_close(&shard, CloseReason::Shutdown, &acks).await.unwrap();
    let archive = read_archive(&store.snapshot());
    for k in 10..15 {
        assert_eq!(archive.count.get(&format!("s0-{k}")), Some(&1), "part s0-{k}: {:?}", archive.count);
    }
    assert_eq!(leases.checkpoint(&shard), Some(pos(1)));
}

/// A long buffer interval with a round of many objects every second, while one
/// partition's first record holds the checkpoint back for the whole interval: every
/// round's intents stay open. A lease must not grow with the rounds (at 900 s and a round
/// a second, one manifest intent per round was about 225 KB, past DynamoDB's 400 KB with
/// a second archiver): manifests absorb earlier ones, and a lease stays within its
/// bound (about 34 KB per archiver).
#[tokio::test(start_paused = true)]
async fn intents_stay_within_a_bound_of_bytes_per_lease() {
    let store = Arc::new(ManifestReads::default());
    let leases = SimLeases::new();
    let clock = ManualClock::new(Timestamp::from_millis(T0));
    let shard = ShardId::new("shard-0");
    let acks = SimAcks::new(leases.clone(), 1, CrashSwitch::after(None));
    let mut s = settings(300);
    s.buffer_interval = Duration::from_secs(900);
    let mut o = ArchiverOptions::new("mcp-archive", s);
    o.transformer = Transformer::McpNormalize;
    let mut a = Archiver::new(o, store.clone(), Arc::new(clock.clone())).unwrap();
    a.on_shard_open(&leases.take(&shard, 1)).await.unwrap();
    // A tenant of its own opens a buffer that stays open the whole interval.
    let mut n = 1u128;
    let first = record_of_tenant(0, n, 1);
    let data = String::from_utf8(first.data.to_vec()).unwrap().replace("\"tenantId\":\"t0\"", "\"tenantId\":\"slow\"");
    a.on_batch(&batch(&shard, vec![weir_core::Record { data: data.into(), ..first }]), &acks).await.unwrap();
    for _ in 0..400 {
        // 40 records of 20 tenants: each tenant's buffer passes 300 bytes and is sealed.
        let records = (n + 1..n + 41).map(|i| record_of_tenant(0, i, 20)).collect();
        n += 40;
        a.on_batch(&batch(&shard, records), &acks).await.unwrap();
        clock.advance(Duration::from_secs(1));
        a.on_tick(clock.now(), &acks).await.unwrap();
        report_passed(&mut a, &acks).await;
    }
    assert_eq!(leases.checkpoint(&shard), None, "the first record holds the checkpoint back");
    let (intents, bytes) = leases.peak_intents();
    assert!(bytes < 40 << 10, "a lease held {intents} intents, {bytes} bytes");
    a.on_shard_close(&shard, CloseReason::Shutdown, &acks).await.unwrap();
    report_passed(&mut a, &acks).await;
    let archive = read_archive(&store.snapshot());
    assert_eq!(archive.count.len() as u128, n, "every record");
    assert!(archive.count.values().all(|c| *c == 1));
    let left: Vec<String> = store.snapshot().into_keys().filter(|k| k.starts_with("_weir/")).collect();
    assert!(left.is_empty(), "every manifest, absorbed ones too, is deleted once passed: {} left", left.len());
    let reads = store.reads.load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(reads, 0, "the manifests this archiver wrote are deleted without reading them back");
}

/// A memory store that counts the reads of intent manifests.
#[derive(Default)]
struct ManifestReads {
    inner: MemoryObjectSink,
    reads: std::sync::atomic::AtomicUsize,
}

impl ManifestReads {
    fn snapshot(&self) -> std::collections::BTreeMap<String, bytes::Bytes> {
        self.inner.snapshot()
    }
}

#[async_trait::async_trait]
impl ObjectSink for ManifestReads {
    async fn put_if_absent(
        &self,
        key: &str,
        body: bytes::Bytes,
        options: &weir_core::ports::PutOptions,
    ) -> Result<weir_core::ports::PutOutcome, weir_core::ports::SinkError> {
        self.inner.put_if_absent(key, body, options).await
    }

    async fn get(&self, key: &str) -> Result<Option<bytes::Bytes>, weir_core::ports::SinkError> {
        if key.starts_with("_weir/") {
            self.reads.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        self.inner.get(key).await
    }

    async fn stat(&self, key: &str) -> Result<Option<weir_core::ports::ObjectMeta>, weir_core::ports::SinkError> {
        self.inner.stat(key).await
    }

    async fn list(&self, prefix: &str) -> Result<Vec<weir_core::ports::ObjectMeta>, weir_core::ports::SinkError> {
        self.inner.list(prefix).await
    }

    async fn delete(&self, key: &str) -> Result<(), weir_core::ports::SinkError> {
        self.inner.delete(key).await
    }

    fn location(&self) -> String {
        self.inner.location()
    }
}
