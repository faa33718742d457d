//! Graceful shutdown, restart from per-consumer checkpoints, and reads that survive
//! faults and subscription expiry.
#![allow(clippy::unwrap_used, clippy::print_stdout)] // a test: a failed expectation is a failed test
mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{Fleet, assert_exactly_once_in_order, config, consumer, eventually};
use weir_core::ports::{LeaseTable, ShardReader};
use weir_core::{Checkpoint, CloseReason, LeaseChange, LeaseMutation, WorkerId};
use weir_local::{MemoryStream, StreamOptions};
use weir_runtime::{TokioClock, Worker};
use weir_testkit::{AckMode, Fault, FaultPlan, FaultyReader, MemoryLeaseTable, RecordingConsumer};

#[tokio::test(start_paused = true)]
async fn graceful_shutdown_flushes_checkpoints_and_releases() {
    let mut fleet = Fleet::new(3, 20, &[("x", AckMode::OnClose), ("y", AckMode::OnTick)]);
    fleet.start("w1");
    fleet.produce(300, Duration::from_millis(10)).await.unwrap();
    eventually("all delivered", Duration::from_secs(60), || async {
        fleet.control("w1", "x").recorded().records.len() == 300
    })
    .await;
    let w = fleet.stop("w1").await;
    let x = w.controls["x"].recorded();
    assert_eq!(x.closes.len(), 3);
    assert!(x.closes.iter().all(|(_, r)| *r == CloseReason::Shutdown));
    for l in fleet.leases().await {
        assert_eq!(l.owner, None, "released at shutdown");
        let last =
            fleet.stream.all_records().into_iter().filter(|(s, _)| s == &l.key).map(|(_, r)| r.position).max().unwrap();
        for c in ["x", "y"] {
            assert_eq!(l.checkpoint_for(&consumer(c)), &Checkpoint::At(last.clone()), "{c} checkpointed on flush");
        }
    }
    assert!(fleet.table.list_workers().await.unwrap().is_empty(), "worker record removed");
    // A released lease is taken at once by the next worker (no failover wait), and the
    // restart delivers nothing twice.
    fleet.start("w2");
    fleet.produce(30, Duration::ZERO).await.unwrap();
    eventually("w2 delivers only new records", Duration::from_secs(5), || async {
        fleet.control("w2", "x").recorded().records.len() == 30
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn each_consumer_resumes_after_its_own_checkpoint() {
    let fleet = Fleet::new(1, 7, &[]);
    for i in 0..200 {
        fleet.stream.put("k", bytes::Bytes::from(format!("r{i}")));
    }
    let records: Vec<_> = fleet.stream.all_records().into_iter().map(|(_, r)| r).collect();
    let shard = fleet.stream.open_shards()[0].clone();
    // Lay down checkpoints: x done up to record 120, y up to 50, z has none.
    let sync = Worker::new(
        config("seed"),
        fleet.table.clone(),
        fleet.reader.clone(),
        Arc::new(fleet.stream.clone()),
        vec![Box::new(RecordingConsumer::new("seed", AckMode::OnClose).0)],
        Arc::new(TokioClock::new()),
    )
    .unwrap();
    let stop = tokio_util::sync::CancellationToken::new();
    let t = stop.clone();
    let h = tokio::spawn(async move { sync.run(t).await.unwrap() });
    eventually("lease created", Duration::from_secs(30), || async { fleet.table.get(&shard).await.unwrap().is_some() })
        .await;
    stop.cancel();
    h.await.unwrap();
    let l = fleet.table.get(&shard).await.unwrap().unwrap();
    let l = fleet.table.mutate(&LeaseMutation::on(&l, LeaseChange::Take { owner: WorkerId::new("op") })).await.unwrap();
    let cps = [("x", 120), ("y", 50)].map(|(c, i)| (consumer(c), Checkpoint::At(records[i].position.clone())));
    let l = fleet
        .table
        .mutate(&LeaseMutation::on(&l, LeaseChange::Checkpoint { checkpoints: cps.into(), ended_with_children: None }))
        .await
        .unwrap();
    fleet.table.mutate(&LeaseMutation::on(&l, LeaseChange::Release)).await.unwrap();

    let mut consumers: Vec<Box<dyn weir_core::Consumer>> = Vec::new();
    let mut ctls = Vec::new();
    for n in ["x", "y", "z"] {
        let (c, ctl) = RecordingConsumer::new(n, AckMode::Immediately);
        consumers.push(Box::new(c));
        ctls.push(ctl);
    }
    let w = Worker::new(
        config("w1"),
        fleet.table.clone(),
        fleet.reader.clone(),
        Arc::new(fleet.stream.clone()),
        consumers,
        Arc::new(TokioClock::new()),
    )
    .unwrap();
    let stop = tokio_util::sync::CancellationToken::new();
    let t = stop.clone();
    let h = tokio::spawn(async move { w.run(t).await.unwrap() });
    eventually("z read everything", Duration::from_secs(60), || async { ctls[2].recorded().records.len() == 200 })
        .await;
    let first = |i: usize| ctls[i].recorded().records.first().map(|(_, p, _)| p.clone());
    assert_eq!(ctls[0].recorded().records.len(), 79, "x gets only records after its checkpoint");
    assert_eq!(first(0), Some(records[121].position.clone()));
    assert_eq!(ctls[1].recorded().records.len(), 149);
    assert_eq!(first(1), Some(records[51].position.clone()));
    assert_eq!(ctls[0].recorded().opens[0].checkpoint, Checkpoint::At(records[120].position.clone()));
    stop.cancel();
    h.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn reads_survive_faults_and_subscription_expiry() {
    let stream = MemoryStream::new(
        StreamOptions { shards: 2, max_batch: 13, subscription_lifetime: Some(Duration::from_secs(300)) },
        Arc::new(TokioClock::new()),
    );
    let plan = FaultPlan::default();
    for f in [Fault::Transient, Fault::Throttled, Fault::ResourceInUse, Fault::Delay(Duration::from_secs(3))] {
        plan.on_open(f.clone());
        plan.on_next(f);
    }
    for _ in 0..5 {
        plan.on_next(Fault::Expire);
        plan.on_next(Fault::Transient);
    }
    let reader: Arc<dyn ShardReader> = Arc::new(FaultyReader::new(Arc::new(stream.clone()), plan.clone()));
    let table = Arc::new(MemoryLeaseTable::new());
    let (c, ctl) = RecordingConsumer::new("c", AckMode::Immediately);
    let w = Worker::new(
        config("w1"),
        table,
        reader,
        Arc::new(stream.clone()),
        vec![Box::new(c)],
        Arc::new(TokioClock::new()),
    )
    .unwrap();
    let stop = tokio_util::sync::CancellationToken::new();
    let t = stop.clone();
    let h = tokio::spawn(async move { w.run(t).await.unwrap() });
    // 15 minutes of traffic: every subscription expires at least twice.
    let producer = {
        let stream = stream.clone();
        tokio::spawn(async move {
            for i in 0..1_800 {
                stream.put(&format!("k{}", i % 11), bytes::Bytes::from(format!("r{i}")));
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        })
    };
    producer.await.unwrap();
    eventually("all delivered", Duration::from_secs(120), || async { ctl.recorded().records.len() >= 1_800 }).await;
    assert_exactly_once_in_order(&stream, &ctl.recorded(), "c across reopenings");
    stop.cancel();
    h.await.unwrap();
}
