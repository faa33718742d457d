//! The archiver's lifecycle in process: shard ends, failed batches, spill failures.

use super::*;
use crate::options::ArchiverOptions;
use crate::pipeline::transform::Transformer;
use bytes::Bytes;
use weir_core::{ExtendedSequenceNumber, Record, SequenceNumber};
use weir_firehose::{from_json, validate};
use weir_testkit::{CrashSwitch, ManualClock, MemoryObjectSink, SimAcks, SimLeases};

const T0: i64 = 1_764_400_000_000;

/// Records of 2,000 tenants, one partition each: `n` to `n + count`.
fn batch(shard: &ShardId, n: u64, count: u64) -> RecordBatch {
    let records = (n..n + count)
        .map(|i| Record {
            partition_key: format!("pk{i}"),
            position: ExtendedSequenceNumber::plain(SequenceNumber::from_u128(i as u128 + 1)),
            approximate_arrival: Timestamp::from_millis(T0),
            data: Bytes::from(format!(r#"{{"tenantId":"t{}","toolName":"x","sessionId":"r{i}","ts":{T0}}}"#, i % 2000)),
        })
        .collect();
    RecordBatch { shard_id: shard.clone(), records, millis_behind_latest: Some(0), child_shards: None }
}

/// Records `n..n + count` of ten tenants (objects fill quickly with a small size).
fn few_tenants(shard: &ShardId, n: u64, count: u64) -> RecordBatch {
    let mut b = batch(shard, n, count);
    for (r, i) in b.records.iter_mut().zip(n..) {
        r.data = Bytes::from(format!(r#"{{"tenantId":"t{}","toolName":"x","sessionId":"r{i}","ts":{T0}}}"#, i % 10));
    }
    b
}

/// Session ids in the objects of `sink`, with how often each is there.
fn archived(sink: &MemoryObjectSink) -> std::collections::BTreeMap<String, usize> {
    let mut seen = std::collections::BTreeMap::new();
    for (key, body) in sink.snapshot() {
        if key.starts_with("_weir/") {
            continue;
        }
        let mut text = String::new();
        std::io::Read::read_to_string(&mut flate2::read::MultiGzDecoder::new(&body[..]), &mut text).unwrap();
        for line in text.lines() {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            *seen.entry(v["session_id"].as_str().unwrap().to_owned()).or_insert(0) += 1;
        }
    }
    seen
}

/// A shard's end seals the buffers holding its records; when every other shard open
/// here has been read to its end too, every buffer, so that the shards of a replay,
/// closed together, are written in one round.
#[tokio::test(start_paused = true)]
async fn the_last_shard_end_seals_every_buffer() {
    for other_ended in [false, true] {
        let text = include_str!("../../../../crates/weir-firehose/tests/fixtures/mcp-destination.json");
        let mut o = ArchiverOptions::new("a", validate(&from_json(text).unwrap()).unwrap());
        o.transformer = Transformer::McpNormalize;
        let sink = Arc::new(MemoryObjectSink::new());
        let mut a = Archiver::new(o, sink.clone(), Arc::new(ManualClock::new(Timestamp::from_millis(T0)))).unwrap();
        let leases = SimLeases::new();
        let acks = SimAcks::new(leases.clone(), 1, CrashSwitch::after(None));
        let (first, second) = (ShardId::new("a"), ShardId::new("b"));
        a.on_shard_open(&leases.take(&first, 1)).await.unwrap();
        a.on_shard_open(&leases.take(&second, 1)).await.unwrap();
        let ended = |mut b: RecordBatch, end: bool| {
            b.child_shards = end.then(Vec::new);
            b
        };
        // Ten tenants each, apart.
        a.on_batch(&ended(batch(&first, 0, 10), true), &acks).await.unwrap();
        a.on_batch(&ended(batch(&second, 10, 10), other_ended), &acks).await.unwrap();
        a.on_shard_close(&first, CloseReason::ShardEnded, &acks).await.unwrap();
        let objects = sink.snapshot().keys().filter(|k| !k.starts_with("_weir/")).count();
        assert_eq!(objects, if other_ended { 20 } else { 10 }, "other shard read to its end: {other_ended}");
    }
}

/// A batch that fails half way (an error, or a panic, while it is buffered, after
/// buffers were sealed for size during it) is taken back whole: given again, each
/// of its records is archived once, every earlier record too, and the checkpoint
/// reaches the end (no sealed buffer of earlier records is dropped).
#[tokio::test(start_paused = true)]
async fn a_batch_that_fails_half_way_is_taken_back_whole() {
    for panic in [false, true] {
        let text = include_str!("../../../../crates/weir-firehose/tests/fixtures/mcp-destination.json");
        let mut settings = validate(&from_json(text).unwrap()).unwrap();
        settings.append_delimiter = false;
        settings.buffer_bytes = 3_000;
        let mut o = ArchiverOptions::new("a", settings);
        o.transformer = Transformer::McpNormalize;
        let sink = Arc::new(MemoryObjectSink::new());
        let mut a = Archiver::new(o, sink.clone(), Arc::new(ManualClock::new(Timestamp::from_millis(T0)))).unwrap();
        let leases = SimLeases::new();
        let acks = SimAcks::new(leases.clone(), 1, CrashSwitch::after(None));
        let shard = ShardId::new("s");
        a.on_shard_open(&leases.take(&shard, 1)).await.unwrap();
        a.on_batch(&few_tenants(&shard, 0, 100), &acks).await.unwrap();
        let objects_before = sink.snapshot().len();
        a.buffers.inject = Some((150, panic));
        let failed = a.on_batch(&few_tenants(&shard, 100, 200), &acks).await;
        assert!(failed.is_err(), "the injected fault fails the batch");
        assert!(sink.snapshot().len() > objects_before, "buffers sealed during the batch were delivered");
        a.on_batch(&few_tenants(&shard, 100, 200), &acks).await.unwrap();
        a.on_batch(&few_tenants(&shard, 300, 50), &acks).await.unwrap();
        a.on_shard_close(&shard, CloseReason::Shutdown, &acks).await.unwrap();
        let seen = archived(&sink);
        assert_eq!(seen.len(), 350, "every record (panic: {panic})");
        assert!(
            seen.values().all(|c| *c == 1),
            "once (panic: {panic}): {:?}",
            seen.iter().filter(|(_, c)| **c > 1).collect::<Vec<_>>()
        );
        let last = ExtendedSequenceNumber::plain(SequenceNumber::from_u128(350));
        assert_eq!(leases.checkpoint(&shard), Some(last), "the checkpoint reaches the end");
    }
}

/// A spill directory that cannot be written: the batch in which a spill fails is
/// taken whole (its buffers sealed early), later batches are refused naming the
/// directory while it still fails, and once it works every record is archived once.
#[tokio::test]
async fn a_spill_directory_that_fails_refuses_batches_until_it_works() {
    let dir = tempfile::tempdir().unwrap();
    let text = include_str!("../../../../crates/weir-firehose/tests/fixtures/mcp-destination.json");
    let mut settings = validate(&from_json(text).unwrap()).unwrap();
    settings.append_delimiter = false;
    let mut o = ArchiverOptions::new("a", settings);
    o.transformer = Transformer::McpNormalize;
    o.max_buffer_memory = 1 << 20;
    o.spill_directory = Some(dir.path().to_path_buf());
    let sink = Arc::new(MemoryObjectSink::new());
    let mut a = Archiver::new(o, sink.clone(), Arc::new(ManualClock::new(Timestamp::from_millis(T0)))).unwrap();
    let leases = SimLeases::new();
    let acks = SimAcks::new(leases.clone(), 1, CrashSwitch::after(None));
    let shard = ShardId::new("s");
    a.on_shard_open(&leases.take(&shard, 1)).await.unwrap();
    a.buffers.spill_mut().unwrap().fail_writes(true);
    // 2,000 partitions of about 1 KiB each: past the 1 MiB budget, spills fail.
    let mut n = 0;
    while a.buffers.spill_failure.is_none() {
        a.on_batch(&batch(&shard, n, 500), &acks).await.unwrap();
        n += 500;
        assert!(n < 40_000, "the budget was never reached");
    }
    let refused = a.on_batch(&batch(&shard, n, 500), &acks).await.unwrap_err().to_string();
    assert!(refused.contains("spill_directory cannot be written") && refused.contains("injected"), "{refused}");
    a.buffers.spill_mut().unwrap().fail_writes(false);
    a.on_batch(&batch(&shard, n, 500), &acks).await.unwrap();
    a.on_shard_close(&shard, CloseReason::Shutdown, &acks).await.unwrap();
    let mut seen = std::collections::BTreeMap::new();
    for (key, body) in sink.snapshot() {
        if key.starts_with("_weir/") {
            continue;
        }
        let mut text = String::new();
        std::io::Read::read_to_string(&mut flate2::read::MultiGzDecoder::new(&body[..]), &mut text).unwrap();
        for line in text.lines() {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            *seen.entry(v["session_id"].as_str().unwrap().to_owned()).or_insert(0) += 1;
        }
    }
    assert_eq!(seen.len() as u64, n + 500, "every record taken is archived");
    assert!(seen.values().all(|c| *c == 1), "once");
}
