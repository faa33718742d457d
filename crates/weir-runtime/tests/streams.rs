//! Several streams in one lease namespace (`weir_runtime::streams`): two workers
//! balance the shards of both streams together, one stream is resharded, a consumer
//! that reads one stream gets exactly its records (and does not hold back the other
//! stream's children), and a worker configured without a stream leaves its leases
//! alone.
#![allow(clippy::unwrap_used, clippy::print_stdout)] // a test: a failed expectation is a failed test
mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use common::{config, eventually};
use tokio_util::sync::CancellationToken;
use weir_core::ports::LeaseTable;
use weir_core::{Checkpoint, Consumer, ConsumerName, ShardId};
use weir_local::{MemoryStream, StreamOptions};
use weir_runtime::consumers::OnlyStreams;
use weir_runtime::streams::{StreamPart, Streams};
use weir_runtime::{TokioClock, Worker};
use weir_testkit::{AckMode, ConsumerControl, MemoryLeaseTable, RecordingConsumer};

fn stream(shards: usize) -> MemoryStream {
    MemoryStream::new(StreamOptions { shards, max_batch: 50, subscription_lifetime: None }, Arc::new(TokioClock::new()))
}

fn part(name: &str, bare: bool, s: &MemoryStream) -> StreamPart {
    StreamPart { name: name.into(), bare, reader: Arc::new(s.clone()), catalog: Arc::new(s.clone()) }
}

struct Running {
    stop: CancellationToken,
    handle: tokio::task::JoinHandle<()>,
    all: ConsumerControl,
    only_a: ConsumerControl,
}

fn start(id: &str, streams: &Streams, table: &Arc<MemoryLeaseTable>) -> Running {
    let (all, all_ctl) = RecordingConsumer::new("all", AckMode::Immediately);
    let (only_a, only_a_ctl) = RecordingConsumer::new("only-a", AckMode::Immediately);
    let consumers: Vec<Box<dyn Consumer>> =
        vec![Box::new(all), Box::new(OnlyStreams::new(Box::new(only_a), streams.clone(), ["a".to_owned()]))];
    let worker = Worker::new(
        config(id),
        table.clone(),
        Arc::new(streams.clone()),
        Arc::new(streams.clone()),
        consumers,
        Arc::new(TokioClock::new()),
    )
    .unwrap();
    let stop = CancellationToken::new();
    let token = stop.clone();
    let handle = tokio::spawn(async move { worker.run(token).await.unwrap() });
    Running { stop, handle, all: all_ctl, only_a: only_a_ctl }
}

/// Every (lease key, data) delivered to one consumer across workers, deduplicated by
/// position (a handoff may deliver a record twice: at least once).
fn delivered(controls: &[&ConsumerControl]) -> BTreeMap<ShardId, BTreeSet<Bytes>> {
    let mut out: BTreeMap<ShardId, BTreeSet<Bytes>> = BTreeMap::new();
    for c in controls {
        for (shard, _, data) in c.recorded().records {
            out.entry(shard).or_default().insert(data);
        }
    }
    out
}

fn put(s: &MemoryStream, tag: &str, n: usize) -> BTreeSet<Bytes> {
    (0..n)
        .map(|i| {
            let data = Bytes::from(format!("{tag}-{i}"));
            s.put(&format!("{tag}-{i}"), data.clone());
            data
        })
        .collect()
}

#[tokio::test(start_paused = true)]
async fn two_streams_one_namespace() {
    let (a, b) = (stream(2), stream(1));
    let table = Arc::new(MemoryLeaseTable::new());
    let streams = Streams::new(vec![part("a", true, &a), part("b", false, &b)]);
    let mut a_data = put(&a, "a1", 100);
    let mut b_data = put(&b, "b1", 60);
    let w1 = start("w1", &streams, &table);
    let w2 = start("w2", &streams, &table);
    let (children_1, children_2) = b.split(&ShardId::new("shardId-000000000000")).unwrap();
    b_data.extend(put(&b, "b2", 60));
    a_data.extend(put(&a, "a2", 40));

    let total = a_data.len() + b_data.len();
    eventually("every record of both streams reaches `all`", Duration::from_secs(120), || {
        let d = delivered(&[&w1.all, &w2.all]);
        async move { d.values().map(BTreeSet::len).sum::<usize>() == total }
    })
    .await;
    let all = delivered(&[&w1.all, &w2.all]);
    let on = |prefix: &str| -> BTreeSet<Bytes> {
        all.iter().filter(|(k, _)| k.as_str().starts_with(prefix)).flat_map(|(_, d)| d.iter().cloned()).collect()
    };
    assert_eq!(on("b:"), b_data, "stream b's records on b:… keys");
    assert_eq!(on("shardId-"), a_data, "stream a's records on bare keys");
    let only_a: BTreeSet<Bytes> = delivered(&[&w1.only_a, &w2.only_a]).into_values().flatten().collect();
    assert_eq!(only_a, a_data, "only-a gets stream a's records and nothing else");

    // Both workers took part; b's parent ended for both consumers (only-a, which does
    // not read b, did not hold its children back).
    let leases = table.list().await.unwrap();
    let keys: BTreeSet<String> = leases.iter().map(|l| l.key.to_string()).collect();
    let expected: BTreeSet<String> = [
        "shardId-000000000000".to_owned(),
        "shardId-000000000001".to_owned(),
        "b:shardId-000000000000".to_owned(),
        format!("b:{children_1}"),
        format!("b:{children_2}"),
    ]
    .into();
    assert_eq!(keys, expected);
    let parent = leases.iter().find(|l| l.key.as_str() == "b:shardId-000000000000").unwrap();
    assert!(parent.ended, "{parent:?}");
    for c in ["all", "only-a"] {
        assert_eq!(*parent.checkpoint_for(&ConsumerName::new(c)), Checkpoint::ShardEnd, "{c}: {parent:?}");
    }
    let child = leases.iter().find(|l| l.key.as_str() == format!("b:{children_1}")).unwrap();
    assert_eq!(child.parents, vec![ShardId::new("b:shardId-000000000000")]);
    // The worker that ended b's parent took both children; the fleet balances.
    eventually("both workers hold leases", Duration::from_secs(120), || {
        let table = table.clone();
        async move {
            let leases = table.list().await.unwrap();
            leases.iter().filter_map(|l| l.owner.clone()).collect::<BTreeSet<_>>().len() == 2
        }
    })
    .await;

    for w in [w1, w2] {
        w.stop.cancel();
        w.handle.await.unwrap();
    }

    // Stream b is dropped from the config: a worker reading only `a` never takes or
    // touches b's leases, though b keeps receiving records.
    let only_a_streams = Streams::new(vec![part("a", true, &a)]);
    put(&b, "b3", 30);
    let before: BTreeMap<String, u64> =
        table.list().await.unwrap().iter().map(|l| (l.key.to_string(), l.counter)).collect();
    let w3 = start("w3", &only_a_streams, &table);
    a_data.extend(put(&a, "a3", 20));
    eventually("w3 reads stream a's new records", Duration::from_secs(60), || {
        let got: usize = delivered(&[&w3.all]).values().map(BTreeSet::len).sum();
        async move { got >= 20 }
    })
    .await;
    // Several taker cycles more.
    tokio::time::sleep(Duration::from_secs(10)).await;
    let leases = table.list().await.unwrap();
    for l in leases.iter().filter(|l| l.key.as_str().starts_with("b:")) {
        assert_eq!(l.owner, None, "{l:?}");
        assert_eq!(Some(&l.counter), before.get(l.key.as_str()), "untouched: {l:?}");
    }
    assert!(delivered(&[&w3.all]).keys().all(|k| !k.as_str().starts_with("b:")));
    w3.stop.cancel();
    w3.handle.await.unwrap();
}
