//! Dispatcher throughput: one worker, 4 shards of the in-process stream, 256-byte
//! records, 3 no-op consumers that acknowledge every batch. Runs on a current-thread
//! runtime (one core). Criterion reports records/s (one record = delivered to all 3).
//!
//! cargo bench -p weir-runtime --bench dispatcher
#![allow(clippy::unwrap_used, clippy::print_stdout)] // a test: a failed expectation is a failed test

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bytes::Bytes;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use tokio::sync::Notify;
use weir_core::{Acks, CloseReason, Consumer, ConsumerError, RecordBatch, ShardId};
use weir_local::{MemoryStream, StreamOptions};
use weir_runtime::{RuntimeConfig, TokioClock, Worker};
use weir_testkit::MemoryLeaseTable;

const RECORDS: u64 = 400_000;

struct Noop {
    name: String,
    seen: Arc<AtomicU64>,
    done: Arc<Notify>,
    target: u64,
}

#[async_trait]
impl Consumer for Noop {
    fn name(&self) -> &str {
        &self.name
    }
    async fn on_batch(&mut self, batch: &RecordBatch, acks: &dyn Acks) -> Result<(), ConsumerError> {
        if let Some(last) = batch.last_position() {
            acks.durable(&batch.shard_id, last);
        }
        let n = self.seen.fetch_add(batch.records.len() as u64, Ordering::Relaxed) + batch.records.len() as u64;
        if n >= self.target {
            self.done.notify_one();
        }
        Ok(())
    }
    async fn on_shard_close(&mut self, _: &ShardId, _: CloseReason, _: &dyn Acks) -> Result<(), ConsumerError> {
        Ok(())
    }
}

fn filled_stream() -> MemoryStream {
    let stream = MemoryStream::new(
        StreamOptions { shards: 4, max_batch: 10_000, subscription_lifetime: None },
        Arc::new(weir_core::SystemClock),
    );
    let payload = Bytes::from(vec![b'x'; 256]);
    for i in 0..RECORDS {
        stream.put(&format!("pk-{}", i % 1024), payload.clone());
    }
    stream
}

async fn run_once(stream: MemoryStream) -> Duration {
    let mut consumers: Vec<Box<dyn Consumer>> = Vec::new();
    let mut waits = Vec::new();
    for i in 0..3 {
        let done = Arc::new(Notify::new());
        waits.push(done.clone());
        consumers.push(Box::new(Noop { name: format!("noop-{i}"), seen: Arc::default(), done, target: RECORDS }));
    }
    let mut config = RuntimeConfig::new("bench".into());
    config.queue_capacity = 64;
    let worker = Worker::new(
        config,
        Arc::new(MemoryLeaseTable::new()),
        Arc::new(stream.clone()),
        Arc::new(stream),
        consumers,
        Arc::new(TokioClock::new()),
    )
    .unwrap();
    let stop = tokio_util::sync::CancellationToken::new();
    let token = stop.clone();
    let start = Instant::now();
    let handle = tokio::spawn(async move { worker.run(token).await.unwrap() });
    for w in waits {
        w.notified().await;
    }
    let took = start.elapsed();
    stop.cancel();
    handle.await.unwrap();
    took
}

fn dispatcher(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let mut group = c.benchmark_group("dispatcher");
    group.throughput(Throughput::Elements(RECORDS));
    group.sample_size(10);
    group.bench_function("3 no-op consumers, 256 B records, 4 shards", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let stream = filled_stream();
                total += rt.block_on(run_once(stream));
            }
            total
        })
    });
    group.finish();
}

criterion_group!(benches, dispatcher);
criterion_main!(benches);
