//! A checkpoint inside a KPL aggregate: after a restart the consumer receives exactly
//! the user records after the checkpointed sub-record (ferrokinesis, polling and EFO).
#![allow(clippy::unwrap_used, clippy::print_stdout)] // a test: a failed expectation is a failed test

use std::sync::Arc;
use std::time::Duration;

use weir_e2e::patience::{Patience, cpu_ticks};

use async_trait::async_trait;
use bytes::Bytes;
use weir_aws::kinesis::producer::{Outgoing, Producer};
use weir_aws::{KinesisOptions, KinesisStream};
use weir_core::kpl::aggregate;
use weir_core::ports::LeaseTable;
use weir_core::{Acks, Checkpoint, CloseReason, Consumer, ConsumerError, ConsumerName, RecordBatch, ShardId};
use weir_e2e::{create_stream, kinesis};
use weir_runtime::{RuntimeConfig, TokioClock, Worker};
use weir_testkit::{AckMode, Emulator, MemoryLeaseTable, RecordingConsumer};

/// Acknowledges up to the user record with this data, and nothing after.
struct AckUpTo(&'static [u8]);

#[async_trait]
impl Consumer for AckUpTo {
    fn name(&self) -> &str {
        "c"
    }
    async fn on_batch(&mut self, b: &RecordBatch, acks: &dyn Acks) -> Result<(), ConsumerError> {
        if let Some(r) = b.records.iter().find(|r| r.data.as_ref() == self.0) {
            acks.durable(&b.shard_id, &r.position);
        }
        Ok(())
    }
    async fn on_shard_close(&mut self, _: &ShardId, _: CloseReason, _: &dyn Acks) -> Result<(), ConsumerError> {
        Ok(())
    }
}

fn config(id: &str) -> RuntimeConfig {
    let mut c = RuntimeConfig::new(id.into());
    c.checkpoint_interval = Duration::from_millis(100);
    c
}

async fn run_until<F, Fut>(worker: Worker, done: F)
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let stop = tokio_util::sync::CancellationToken::new();
    let token = stop.clone();
    let handle = tokio::spawn(async move { worker.run(token).await });
    // The worker runs in this process: its CPU time is what moves while it works.
    let mut patience = Patience::new(Duration::from_secs(60));
    while !done().await {
        if let Err(why) = patience.observe(cpu_ticks(std::process::id())) {
            panic!("worker did not reach the expected state: {why}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    stop.cancel();
    handle.await.unwrap().unwrap();
}

async fn restart_inside_aggregate(efo: bool) {
    let emu = Emulator::start("ferrokinesis", &[]);
    let client = kinesis(&emu.endpoint).await;
    create_stream(&client, "kpl", 1).await;
    let users: Vec<(String, Bytes)> = (0..10).map(|i| (format!("user-{i}"), Bytes::from(format!("u{i}")))).collect();
    let records = vec![
        Outgoing { id: 0, partition_key: "agg".into(), data: aggregate(&users) },
        Outgoing { id: 1, partition_key: "plain".into(), data: Bytes::from_static(b"after") },
    ];
    assert_eq!(Producer::new(client.clone(), "kpl").put_all(records).await.accepted.len(), 2);
    let options = KinesisOptions { efo_consumer: efo.then(|| "kpl-test".to_owned()), ..KinesisOptions::default() };
    let stream = KinesisStream::open(client, "kpl", options).await.unwrap();
    let table = Arc::new(MemoryLeaseTable::new());
    let worker = |id: &str, consumer: Box<dyn Consumer>| {
        Worker::new(
            config(id),
            table.clone(),
            Arc::new(stream.clone()),
            Arc::new(stream.clone()),
            vec![consumer],
            Arc::new(TokioClock::new()),
        )
        .unwrap()
    };

    // First run: acknowledge up to u4 (sub-sequence 4), then stop.
    let at_u4 = || async {
        let leases = table.list().await.unwrap();
        leases.first().is_some_and(
            |l| matches!(l.checkpoint_for(&ConsumerName::new("c")), Checkpoint::At(p) if p.sub_sequence == 4),
        )
    };
    run_until(worker("first", Box::new(AckUpTo(b"u4"))), at_u4).await;

    // Second run: exactly u5..u9 and the plain record.
    let (rec, ctl) = RecordingConsumer::new("c", AckMode::Immediately);
    let probe = ctl.clone();
    run_until(worker("second", Box::new(rec)), || async { probe.recorded().records.len() >= 6 }).await;
    let got: Vec<(String, u64)> = ctl
        .recorded()
        .records
        .iter()
        .map(|(_, p, d)| (String::from_utf8_lossy(d).into_owned(), p.sub_sequence))
        .collect();
    let want: Vec<(String, u64)> = (5..10).map(|i| (format!("u{i}"), i)).chain([("after".to_owned(), 0)]).collect();
    assert_eq!(got, want);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_resumes_inside_an_aggregate_polling() {
    restart_inside_aggregate(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_resumes_inside_an_aggregate_efo() {
    restart_inside_aggregate(true).await;
}
