//! A fleet of workers over the in-process stream and an in-memory lease table, under
//! paused tokio time.
#![allow(clippy::unwrap_used, clippy::print_stdout)] // a test: a failed expectation is a failed test
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use weir_core::ports::{LeaseTable, ShardReader};
use weir_core::{Consumer, ConsumerName, Lease, ShardId, WorkerId};
use weir_local::{MemoryStream, StreamOptions};
use weir_runtime::{RuntimeConfig, TokioClock, Worker, WorkerStats};
use weir_testkit::{AckMode, ConsumerControl, FaultyLeaseTable, MemoryLeaseTable, RecordingConsumer};

pub struct RunningWorker {
    pub handle: JoinHandle<()>,
    pub stop: CancellationToken,
    pub controls: BTreeMap<String, ConsumerControl>,
    pub table: FaultyLeaseTable,
    pub stats: WorkerStats,
}

pub struct Fleet {
    pub stream: MemoryStream,
    pub table: Arc<MemoryLeaseTable>,
    pub workers: BTreeMap<String, RunningWorker>,
    pub reader: Arc<dyn ShardReader>,
    pub consumers: Vec<(String, AckMode)>,
}

pub fn config(id: &str) -> RuntimeConfig {
    let mut c = RuntimeConfig::new(WorkerId::new(id));
    c.shard_sync_interval = Duration::from_secs(5);
    c
}

impl Fleet {
    pub fn new(shards: usize, max_batch: usize, consumers: &[(&str, AckMode)]) -> Self {
        let stream = MemoryStream::new(
            StreamOptions { shards, max_batch, subscription_lifetime: None },
            Arc::new(TokioClock::new()),
        );
        Self {
            reader: Arc::new(stream.clone()),
            stream,
            table: Arc::new(MemoryLeaseTable::new()),
            workers: BTreeMap::new(),
            consumers: consumers.iter().map(|(n, m)| (n.to_string(), *m)).collect(),
        }
    }

    pub fn start(&mut self, id: &str) {
        self.start_with(id, config(id));
    }

    pub fn start_with(&mut self, id: &str, config: RuntimeConfig) {
        let mut consumers: Vec<Box<dyn Consumer>> = Vec::new();
        let mut controls = BTreeMap::new();
        for (name, mode) in &self.consumers {
            let (c, ctl) = RecordingConsumer::new(name, *mode);
            consumers.push(Box::new(c));
            controls.insert(name.clone(), ctl);
        }
        let table = FaultyLeaseTable::new(self.table.clone());
        let worker = Worker::new(
            config,
            Arc::new(table.clone()),
            self.reader.clone(),
            Arc::new(self.stream.clone()),
            consumers,
            Arc::new(TokioClock::new()),
        )
        .unwrap();
        let stats = worker.stats();
        let stop = CancellationToken::new();
        let token = stop.clone();
        let handle = tokio::spawn(async move { worker.run(token).await.unwrap() });
        self.workers.insert(id.to_owned(), RunningWorker { handle, stop, controls, table, stats });
    }

    /// Crash: the worker's task is dropped mid-flight, nothing graceful happens.
    pub fn kill(&mut self, id: &str) -> RunningWorker {
        let w = self.workers.remove(id).unwrap();
        w.handle.abort();
        w
    }

    /// Graceful stop.
    pub async fn stop(&mut self, id: &str) -> RunningWorker {
        let mut w = self.workers.remove(id).unwrap();
        w.stop.cancel();
        (&mut w.handle).await.unwrap();
        w
    }

    pub fn control(&self, worker: &str, consumer: &str) -> ConsumerControl {
        self.workers[worker].controls[consumer].clone()
    }

    pub async fn leases(&self) -> Vec<Lease> {
        self.table.list().await.unwrap()
    }

    /// Active (not ended) leases per owner.
    pub async fn owners(&self) -> BTreeMap<String, usize> {
        let mut m = BTreeMap::new();
        for l in self.leases().await {
            if l.ended {
                continue;
            }
            let key = l.owner.map(|o| o.to_string()).unwrap_or_else(|| "-".into());
            *m.entry(key).or_default() += 1;
        }
        m
    }

    /// Puts `n` records, `every` apart (tokio time), in a background task.
    pub fn produce(&self, n: usize, every: Duration) -> JoinHandle<()> {
        let stream = self.stream.clone();
        tokio::spawn(async move {
            for i in 0..n {
                stream.put(&format!("pk-{}", i % 97), Bytes::from(format!("record-{i}")));
                if !every.is_zero() {
                    tokio::time::sleep(every).await;
                }
            }
        })
    }
}

/// Waits (advancing paused time in 100 ms steps) until `cond` holds; panics after
/// `limit` of tokio time. Not a sleep-as-synchronisation: the condition is the signal.
pub async fn eventually<F, Fut>(what: &str, limit: Duration, mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let start = tokio::time::Instant::now();
    loop {
        if cond().await {
            return;
        }
        if start.elapsed() > limit {
            panic!("timed out after {limit:?} waiting for: {what}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Every record data in the stream per shard.
pub fn stream_data(stream: &MemoryStream) -> BTreeMap<ShardId, Vec<Bytes>> {
    let mut m: BTreeMap<ShardId, Vec<Bytes>> = BTreeMap::new();
    for (s, r) in stream.all_records() {
        m.entry(s).or_default().push(r.data);
    }
    m
}

/// Asserts that `rec` holds every record of `stream`, once each, in order per shard.
pub fn assert_exactly_once_in_order(stream: &MemoryStream, rec: &weir_testkit::Recorded, what: &str) {
    for (shard, data) in stream_data(stream) {
        let got: Vec<Bytes> = rec.records.iter().filter(|(s, _, _)| s == &shard).map(|(_, _, d)| d.clone()).collect();
        assert_eq!(got, data, "{what} on {shard}: every record once, in order");
    }
}

pub fn consumer(name: &str) -> ConsumerName {
    ConsumerName::new(name)
}
