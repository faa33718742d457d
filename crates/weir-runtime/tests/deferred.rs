//! Deferred batches (`Acks::defer`): a consumer hands each shard's batches to a task of
//! its own and returns, so its shards are processed at once; each shard stays in
//! order, checkpoints go through the owned shard handle, and a batch that fails later
//! is delivered again with nothing lost or repeated.
#![allow(clippy::unwrap_used, clippy::print_stdout)] // a test: a failed expectation is a failed test
mod common;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use common::{eventually, stream_data};
use tokio::sync::{Barrier, mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use weir_core::ports::LeaseTable;
use weir_core::{
    Acks, Checkpoint, CloseReason, Consumer, ConsumerError, ConsumerName, DeferredBatch, RecordBatch, ShardAcks,
    ShardId,
};
use weir_local::{MemoryStream, StreamOptions};
use weir_runtime::{TokioClock, Worker};
use weir_testkit::MemoryLeaseTable;

enum Job {
    Batch { batch: RecordBatch, deferred: Box<dyn DeferredBatch>, acks: Arc<dyn ShardAcks> },
    Close { reply: oneshot::Sender<()> },
}

/// What every shard task shares: the records each finished, in order, and the plan.
#[derive(Default)]
struct Shared {
    finished: Mutex<BTreeMap<ShardId, Vec<Bytes>>>,
    /// Shards whose second batch failed once.
    failed: Mutex<HashSet<ShardId>>,
    fail_second_batch: bool,
    /// Each shard's first batch waits here until every shard's task holds one.
    first_batches: Option<Barrier>,
    /// Shards closed as ended, in order, with the records their task had finished then.
    ended: Mutex<Vec<(ShardId, usize)>>,
}

/// Defers every batch to its shard's task, which takes 10 ms a batch.
struct Deferring {
    shared: Arc<Shared>,
    tasks: HashMap<ShardId, (mpsc::UnboundedSender<Job>, JoinHandle<()>)>,
}

async fn shard_task(shard: ShardId, shared: Arc<Shared>, mut jobs: mpsc::UnboundedReceiver<Job>) {
    let mut batches = 0;
    while let Some(job) = jobs.recv().await {
        let (batch, deferred, acks) = match job {
            Job::Batch { batch, deferred, acks } => (batch, deferred, acks),
            Job::Close { reply } => {
                let _ = reply.send(());
                return;
            }
        };
        if !deferred.wanted() {
            continue;
        }
        batches += 1;
        if batches == 1
            && let Some(barrier) = &shared.first_batches
        {
            barrier.wait().await;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
        if batches == 2 && shared.fail_second_batch && shared.failed.lock().unwrap().insert(shard.clone()) {
            deferred.failed(ConsumerError::msg("injected"));
            continue;
        }
        // Odd batches are written at once, even ones with the shard worker's next write.
        let last = batch.last_position().unwrap().clone();
        if batches % 2 == 1 {
            acks.checkpoint(&last).await.unwrap();
        } else {
            acks.durable(&last);
        }
        let data = batch.records.iter().map(|r| r.data.clone());
        shared.finished.lock().unwrap().entry(shard.clone()).or_default().extend(data);
        deferred.done();
    }
}

#[async_trait]
impl Consumer for Deferring {
    fn name(&self) -> &str {
        "deferring"
    }

    async fn on_batch(&mut self, batch: &RecordBatch, acks: &dyn Acks) -> Result<(), ConsumerError> {
        let deferred = acks.defer().ok_or_else(|| ConsumerError::msg("no deferral"))?;
        let handle = acks.shard(&batch.shard_id).ok_or_else(|| ConsumerError::msg("no shard handle"))?;
        let (tx, _) = self.tasks.entry(batch.shard_id.clone()).or_insert_with(|| {
            let (tx, rx) = mpsc::unbounded_channel();
            (tx, tokio::spawn(shard_task(batch.shard_id.clone(), self.shared.clone(), rx)))
        });
        let job = Job::Batch { batch: batch.clone(), deferred, acks: handle };
        tx.send(job).map_err(|_| ConsumerError::msg("shard task gone"))
    }

    async fn on_shard_close(
        &mut self,
        shard: &ShardId,
        reason: CloseReason,
        _: &dyn Acks,
    ) -> Result<(), ConsumerError> {
        // The task finishes what it was given, then ends.
        if let Some((tx, task)) = self.tasks.remove(shard) {
            let (reply, done) = oneshot::channel();
            let _ = tx.send(Job::Close { reply });
            let _ = done.await;
            task.await.map_err(|e| ConsumerError::with_source("shard task", e))?;
        }
        if reason == CloseReason::ShardEnded {
            let finished = self.shared.finished.lock().unwrap().get(shard).map_or(0, Vec::len);
            self.shared.ended.lock().unwrap().push((shard.clone(), finished));
        }
        Ok(())
    }
}

struct Run {
    stream: MemoryStream,
    table: Arc<MemoryLeaseTable>,
    shared: Arc<Shared>,
    stop: CancellationToken,
    worker: JoinHandle<()>,
}

fn put(stream: &MemoryStream, from: usize, n: usize) {
    for i in from..from + n {
        stream.put(&format!("pk-{}", i % 97), Bytes::from(format!("record-{i}")));
    }
}

fn start(shards: usize, shared: Shared) -> Run {
    let stream = MemoryStream::new(
        StreamOptions { shards, max_batch: 20, subscription_lifetime: None },
        Arc::new(TokioClock::new()),
    );
    put(&stream, 0, 400);
    let table = Arc::new(MemoryLeaseTable::new());
    let shared = Arc::new(shared);
    let consumer = Deferring { shared: shared.clone(), tasks: HashMap::new() };
    let worker = Worker::new(
        common::config("w1"),
        table.clone(),
        Arc::new(stream.clone()),
        Arc::new(stream.clone()),
        vec![Box::new(consumer)],
        Arc::new(TokioClock::new()),
    )
    .unwrap();
    let stop = CancellationToken::new();
    let token = stop.clone();
    let worker = tokio::spawn(async move { worker.run(token).await.unwrap() });
    Run { stream, table, shared, stop, worker }
}

impl Run {
    async fn all_finished(&self) {
        let expected = stream_data(&self.stream);
        eventually("every record finished", Duration::from_secs(120), || async {
            let got = self.shared.finished.lock().unwrap();
            expected.iter().all(|(s, d)| got.get(s).is_some_and(|g| g.len() >= d.len()))
        })
        .await;
        let got = self.shared.finished.lock().unwrap().clone();
        for (shard, data) in expected {
            assert_eq!(got.get(&shard), Some(&data), "{shard}: every record once, in order");
        }
    }

    /// Stops the worker gracefully; every lease holds its shard's last record.
    async fn stop_checkpointed(self) {
        self.stop.cancel();
        self.worker.await.unwrap();
        let name = ConsumerName::new("deferring");
        let last: BTreeMap<ShardId, _> = self.stream.all_records().into_iter().map(|(s, r)| (s, r.position)).collect();
        for lease in self.table.list().await.unwrap() {
            let want = if lease.ended { Checkpoint::ShardEnd } else { Checkpoint::At(last[&lease.key].clone()) };
            assert_eq!(lease.checkpoint_for(&name), &want, "{}", lease.key);
        }
    }
}

/// Every shard's first batch waits until all four shards' tasks hold one: it passes only
/// because deferred batches of different shards are processed at the same time.
#[tokio::test(start_paused = true)]
async fn deferred_batches_of_every_shard_are_processed_at_once() {
    let run = start(4, Shared { first_batches: Some(Barrier::new(4)), ..Shared::default() });
    run.all_finished().await;
    run.stop_checkpointed().await;
}

/// A deferred batch that fails after `on_batch` returned is delivered again, with the
/// batches queued behind it (dropped as no longer wanted): nothing lost or repeated.
#[tokio::test(start_paused = true)]
async fn a_deferred_batch_that_fails_later_is_delivered_again() {
    let run = start(2, Shared { fail_second_batch: true, ..Shared::default() });
    run.all_finished().await;
    assert_eq!(run.shared.failed.lock().unwrap().len(), 2, "each shard failed a batch once");
    run.stop_checkpointed().await;
}

/// A shard that ends is closed for the consumer only after its task finished every
/// batch it was given; its children are processed after it.
#[tokio::test(start_paused = true)]
async fn a_shard_ends_after_its_deferred_batches() {
    let run = start(1, Shared::default());
    run.all_finished().await;
    let parent = run.stream.open_shards()[0].clone();
    run.stream.split(&parent).unwrap();
    put(&run.stream, 400, 400);
    run.all_finished().await;
    let ended = run.shared.ended.lock().unwrap().clone();
    let parent_records = stream_data(&run.stream)[&parent].len();
    assert_eq!(ended, [(parent.clone(), parent_records)], "the parent closed once every batch was finished");
    let lease = run.table.get(&parent).await.unwrap().unwrap();
    assert!(lease.ended, "the parent is marked ended");
    run.stop_checkpointed().await;
}
