//! Taking over shards whose earlier owner died with many open intents, on a store that
//! answers every call after 100 ms (S3 across a region, or a slow day): wall time from
//! the shards opening until each has processed its first batch, for 1 and 4 shards of
//! 1,000 open intents each (half of the objects written, half to claim). The target of
//! the cardinality issue: one shard in at most 2 s.
//!
//! cargo bench -p weir-archiver --bench takeover
//! Under `cargo test` it runs once with 100 intents and 10 ms calls as a smoke test.
#![allow(clippy::unwrap_used, clippy::print_stdout)] // a bench: a failed expectation is a failed run

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use weir_archiver::{Archiver, ArchiverOptions, Transformer};
use weir_core::ports::{ObjectSink, PutOptions};
use weir_core::{
    Checkpoint, Consumer, ExtendedSequenceNumber, Intent, Record, RecordBatch, SequenceNumber, ShardContext, ShardId,
    Timestamp, WorkerId,
};
use weir_firehose::{from_json, validate};
use weir_testkit::{CrashSwitch, ManualClock, MemoryObjectSink, SimAcks, SimLeases, SlowSink};

const T0: i64 = 1_764_400_000_000;

fn pos(n: u128) -> ExtendedSequenceNumber {
    ExtendedSequenceNumber::plain(SequenceNumber::from_u128(n))
}

async fn takeover(shards: usize, intents: u128, latency: Duration) -> Duration {
    let store = Arc::new(MemoryObjectSink::new());
    let scope = r#"{"tenantId":"t1","toolName":"tool1"}"#;
    let ids: Vec<ShardId> = (0..shards).map(|s| ShardId::new(format!("shardId-{s:012}"))).collect();
    let mut contexts = Vec::new();
    for (s, shard) in ids.iter().enumerate() {
        let mut open = Vec::new();
        for i in 0..intents {
            let key = format!("tool-events/tenant=t1/tool=tool1/earlier-{s}-{i}.gz");
            if i % 2 == 0 {
                store.put_if_absent(&key, Bytes::from_static(b"data"), &PutOptions::default()).await.unwrap();
            }
            open.push(Intent {
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
            intents: open,
        });
    }
    let text = include_str!("../../../crates/weir-firehose/tests/fixtures/mcp-destination.json");
    let mut settings = validate(&from_json(text).unwrap()).unwrap();
    settings.append_delimiter = false;
    let mut o = ArchiverOptions::new("mcp-archive", settings);
    o.transformer = Transformer::McpNormalize;
    let sink: Arc<dyn ObjectSink> = Arc::new(SlowSink::new(store, latency));
    let mut a = Archiver::new(o, sink, Arc::new(ManualClock::new(Timestamp::from_millis(T0)))).unwrap();
    let leases = SimLeases::new();
    let acks = SimAcks::new(leases.clone(), 2, CrashSwitch::after(None));
    let started = Instant::now();
    for ctx in &contexts {
        a.on_shard_open(ctx).await.unwrap();
    }
    for shard in &ids {
        leases.take(shard, 2);
        let records = (intents + 1..=intents + 4)
            .map(|n| Record {
                partition_key: format!("pk{n}"),
                position: pos(n),
                approximate_arrival: Timestamp::from_millis(T0),
                data: Bytes::from(format!(r#"{{"tenantId":"t1","toolName":"tool1","ts":{T0}}}"#)),
            })
            .collect();
        let batch = RecordBatch { shard_id: shard.clone(), records, millis_behind_latest: Some(0), child_shards: None };
        a.on_batch(&batch, &acks).await.unwrap();
    }
    started.elapsed()
}

fn main() {
    let full = std::env::args().any(|a| a == "--bench");
    let (intents, latency) = if full { (1_000, Duration::from_millis(100)) } else { (100, Duration::from_millis(10)) };
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_time().build().unwrap();
    println!("\n| shards | open intents each | store latency | wall seconds to the first batch |");
    println!("|---|---|---|---|");
    for shards in [1, 4] {
        let took = rt.block_on(takeover(shards, intents, latency));
        println!("| {shards} | {intents} | {latency:?} | {:.2} |", took.as_secs_f64());
        if full && shards == 1 {
            assert!(took <= Duration::from_secs(2), "one shard took {took:?}, over the 2 s target");
        }
    }
}
