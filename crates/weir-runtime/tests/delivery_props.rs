//! Property: over random batch sizes, acknowledgement modes and crash points, every
//! record reaches every consumer at least once, and no persisted checkpoint ever passes
//! a record its consumer did not acknowledge (checked at the moment of every write).
#![allow(clippy::unwrap_used, clippy::print_stdout)] // a test: a failed expectation is a failed test
mod common;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use common::{config, stream_data};
use proptest::prelude::*;
use weir_core::ports::{LeaseTable, NamespaceMeta, WorkerHeartbeat, WorkerLoad};
use weir_core::{
    Checkpoint, Consumer, ExtendedSequenceNumber, Lease, LeaseChange, LeaseError, LeaseMutation, NewLease, ShardId,
    WorkerId,
};
use weir_local::{MemoryStream, StreamOptions};
use weir_runtime::{TokioClock, Worker};
use weir_testkit::{AckMode, ConsumerControl, MemoryLeaseTable, RecordingConsumer};

type Controls = Arc<Mutex<Vec<(String, ConsumerControl)>>>;

/// A lease table that checks every checkpoint write against the acknowledgements made
/// so far by every incarnation of the consumer.
struct CheckingTable {
    inner: MemoryLeaseTable,
    controls: Controls,
    stream: MemoryStream,
    violations: Mutex<Vec<String>>,
}

impl CheckingTable {
    fn max_ack(&self, consumer: &str, shard: &ShardId) -> Option<ExtendedSequenceNumber> {
        let controls = self.controls.lock().unwrap();
        controls
            .iter()
            .filter(|(n, _)| n == consumer)
            .flat_map(|(_, c)| c.recorded().acks.into_iter().filter(|(s, _)| s == shard).map(|(_, p)| p))
            .max()
    }
}

#[async_trait]
impl LeaseTable for CheckingTable {
    async fn create_if_absent(&self, lease: NewLease) -> Result<bool, LeaseError> {
        self.inner.create_if_absent(lease).await
    }
    async fn list(&self) -> Result<Vec<Lease>, LeaseError> {
        self.inner.list().await
    }
    async fn get(&self, key: &ShardId) -> Result<Option<Lease>, LeaseError> {
        self.inner.get(key).await
    }
    async fn mutate(&self, m: &LeaseMutation) -> Result<Lease, LeaseError> {
        if let LeaseChange::Checkpoint { checkpoints, .. } = &m.change {
            for (consumer, cp) in checkpoints {
                let acked = self.max_ack(consumer.as_str(), &m.key);
                let ok = match cp {
                    Checkpoint::At(p) => acked.as_ref().is_some_and(|a| a >= p),
                    Checkpoint::ShardEnd => {
                        let last = self
                            .stream
                            .all_records()
                            .into_iter()
                            .filter(|(s, _)| s == &m.key)
                            .map(|(_, r)| r.position)
                            .max();
                        last.is_none_or(|l| acked.as_ref().is_some_and(|a| *a >= l))
                    }
                    _ => true,
                };
                if !ok {
                    self.violations
                        .lock()
                        .unwrap()
                        .push(format!("{} {consumer}: wrote {cp:?}, acked {acked:?}", m.key));
                }
            }
        }
        self.inner.mutate(m).await
    }
    async fn mutate_all(&self, mutations: &[LeaseMutation]) -> Result<Vec<Lease>, LeaseError> {
        self.inner.mutate_all(mutations).await
    }
    async fn delete(&self, key: &ShardId) -> Result<(), LeaseError> {
        self.inner.delete(key).await
    }
    async fn delete_ended(&self, seen: &Lease) -> Result<bool, LeaseError> {
        self.inner.delete_ended(seen).await
    }
    async fn heartbeat(&self, w: &WorkerId, instance: &str, load: WorkerLoad) -> Result<(), LeaseError> {
        self.inner.heartbeat(w, instance, load).await
    }
    async fn claim_worker(&self, seen: &WorkerHeartbeat, instance: &str) -> Result<bool, LeaseError> {
        self.inner.claim_worker(seen, instance).await
    }
    async fn namespace_meta(&self) -> Result<Option<NamespaceMeta>, LeaseError> {
        self.inner.namespace_meta().await
    }
    async fn put_namespace_meta(
        &self,
        meta: &NamespaceMeta,
        expected: Option<&NamespaceMeta>,
    ) -> Result<bool, LeaseError> {
        self.inner.put_namespace_meta(meta, expected).await
    }
    async fn list_workers(&self) -> Result<Vec<WorkerHeartbeat>, LeaseError> {
        self.inner.list_workers().await
    }
    async fn remove_worker(&self, w: &WorkerId, instance: &str) -> Result<(), LeaseError> {
        self.inner.remove_worker(w, instance).await
    }
}

#[derive(Debug, Clone)]
enum Crash {
    Kill(u64),
    Graceful(u64),
}

fn ack_mode() -> impl Strategy<Value = AckMode> {
    prop_oneof![Just(AckMode::Immediately), Just(AckMode::OnTick), Just(AckMode::OnClose)]
}

fn crash() -> impl Strategy<Value = Crash> {
    prop_oneof![(500u64..15_000).prop_map(Crash::Kill), (500u64..15_000).prop_map(Crash::Graceful)]
}

async fn scenario(shards: usize, max_batch: usize, modes: [AckMode; 2], crashes: Vec<Crash>, split_at: Option<u64>) {
    let stream = MemoryStream::new(
        StreamOptions { shards, max_batch, subscription_lifetime: None },
        Arc::new(TokioClock::new()),
    );
    let controls: Controls = Arc::default();
    let table = Arc::new(CheckingTable {
        inner: MemoryLeaseTable::new(),
        controls: controls.clone(),
        stream: stream.clone(),
        violations: Mutex::new(Vec::new()),
    });
    let start = |generation: usize| {
        let mut consumers: Vec<Box<dyn Consumer>> = Vec::new();
        for (name, mode) in ["x", "y"].iter().zip(modes) {
            let (c, ctl) = RecordingConsumer::new(name, mode);
            controls.lock().unwrap().push((name.to_string(), ctl));
            consumers.push(Box::new(c));
        }
        let w = Worker::new(
            config(&format!("w{generation}")),
            table.clone(),
            Arc::new(stream.clone()),
            Arc::new(stream.clone()),
            consumers,
            Arc::new(TokioClock::new()),
        )
        .unwrap();
        let stop = tokio_util::sync::CancellationToken::new();
        let t = stop.clone();
        (tokio::spawn(async move { w.run(t).await.unwrap() }), stop)
    };
    let total = 400;
    let producer = {
        let stream = stream.clone();
        tokio::spawn(async move {
            for i in 0..total {
                stream.put(&format!("k{}", i % 31), bytes::Bytes::from(format!("r{i}")));
                tokio::time::sleep(Duration::from_millis(25)).await;
            }
        })
    };
    if let Some(at) = split_at {
        let stream = stream.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(at)).await;
            let s = stream.open_shards()[0].clone();
            stream.split(&s);
        });
    }
    let mut generation = 0;
    let mut current = start(generation);
    for c in crashes {
        let (Crash::Kill(ms) | Crash::Graceful(ms)) = c;
        tokio::time::sleep(Duration::from_millis(ms)).await;
        match c {
            Crash::Kill(_) => current.0.abort(),
            Crash::Graceful(_) => {
                current.1.cancel();
                (&mut current.0).await.unwrap();
            }
        }
        generation += 1;
        current = start(generation);
    }
    producer.await.unwrap();
    let want = stream_data(&stream);
    let delivered = |name: &str| {
        let mut m: BTreeMap<ShardId, std::collections::BTreeSet<bytes::Bytes>> = BTreeMap::new();
        for (n, c) in controls.lock().unwrap().iter() {
            if n == name {
                for (s, _, d) in c.recorded().records {
                    m.entry(s).or_default().insert(d);
                }
            }
        }
        m
    };
    let limit = tokio::time::Instant::now() + Duration::from_secs(600);
    loop {
        let done = ["x", "y"].iter().all(|n| {
            let got = delivered(n);
            want.iter().all(|(s, d)| got.get(s).is_some_and(|g| g.len() == d.len()))
        });
        if done {
            break;
        }
        assert!(tokio::time::Instant::now() < limit, "not everything delivered");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // The last incarnation must own every live lease and have caught up before the
    // graceful stop: leases of a killed worker are taken only after failover.
    let last_id = format!("w{generation}");
    let last_of =
        |shard: &ShardId| stream.all_records().into_iter().filter(|(s, _)| s == shard).map(|(_, r)| r.position).max();
    loop {
        let leases = table.inner.list().await.unwrap();
        let controls_now = controls.lock().unwrap().clone();
        let mine = &controls_now[controls_now.len() - 2..];
        let caught_up = leases.iter().all(|l| {
            l.ended
                || (l.owner.as_ref().is_some_and(|o| o.as_str() == last_id)
                    && mine.iter().all(|(name, c)| match last_of(&l.key) {
                        None => true,
                        Some(last) => {
                            l.checkpoint_for(&name.as_str().into()) == &Checkpoint::At(last.clone())
                                || c.recorded().records.iter().any(|(s, p, _)| s == &l.key && *p == last)
                        }
                    }))
        });
        if caught_up {
            break;
        }
        assert!(tokio::time::Instant::now() < limit, "last worker never caught up");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    current.1.cancel();
    current.0.await.unwrap();
    let v = table.violations.lock().unwrap().clone();
    assert!(v.is_empty(), "checkpoints passed acknowledgements: {v:?}");
    // After the graceful stop every consumer's checkpoint is at the end of its data.
    for l in table.inner.list().await.unwrap() {
        for name in ["x", "y"] {
            let cp = l.checkpoint_for(&name.into());
            match last_of(&l.key) {
                Some(last) => assert!(
                    cp == &Checkpoint::ShardEnd || cp == &Checkpoint::At(last.clone()),
                    "{} {name}: {cp:?}, last record {last:?}",
                    l.key
                ),
                None => assert!(matches!(cp, Checkpoint::ShardEnd | Checkpoint::TrimHorizon)),
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, .. ProptestConfig::default() })]
    #[test]
    fn at_least_once_and_checkpoints_never_pass_acks(
        shards in 1usize..4,
        max_batch in 1usize..40,
        modes in [ack_mode(), ack_mode()],
        crashes in proptest::collection::vec(crash(), 0..3),
        split_at in proptest::option::of(1_000u64..9_000),
    ) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().start_paused(true).build().unwrap();
        rt.block_on(scenario(shards, max_batch, modes, crashes, split_at));
    }
}
