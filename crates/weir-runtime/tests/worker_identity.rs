//! One worker id, one process: a second process with the same id is refused, a
//! crashed process's id is taken over after the failover time, and a worker whose id
//! another process took over stops.
#![allow(clippy::unwrap_used, clippy::print_stdout)] // a test: a failed expectation is a failed test
mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{Fleet, config, eventually};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use weir_core::ports::LeaseTable;
use weir_core::{Consumer, WorkerId};
use weir_runtime::{TokioClock, Worker, WorkerError};
use weir_testkit::{AckMode, RecordingConsumer};

/// A worker over the fleet's stream and table whose result the test reads.
fn spawn(fleet: &Fleet, id: &str) -> (JoinHandle<Result<(), WorkerError>>, CancellationToken) {
    let (c, _) = RecordingConsumer::new("x", AckMode::Immediately);
    let worker = Worker::new(
        config(id),
        fleet.table.clone(),
        fleet.reader.clone(),
        Arc::new(fleet.stream.clone()),
        vec![Box::new(c) as Box<dyn Consumer>],
        Arc::new(TokioClock::new()),
    )
    .unwrap();
    let stop = CancellationToken::new();
    let token = stop.clone();
    (tokio::spawn(async move { worker.run(token).await }), stop)
}

async fn leases_of(fleet: &Fleet, id: &str) -> usize {
    fleet.leases().await.iter().filter(|l| l.is_owned_by(&WorkerId::new(id))).count()
}

#[tokio::test(start_paused = true)]
async fn a_second_process_with_the_same_id_is_refused() {
    let mut fleet = Fleet::new(4, 10, &[("x", AckMode::Immediately)]);
    fleet.start("w1");
    eventually("w1 holds every lease", Duration::from_secs(60), || async { leases_of(&fleet, "w1").await == 4 }).await;
    let instance = fleet.table.list_workers().await.unwrap()[0].instance.clone();

    let (second, _stop) = spawn(&fleet, "w1");
    match second.await.unwrap() {
        Err(WorkerError::DuplicateWorkerId { worker, instance: other }) => {
            assert_eq!(worker, WorkerId::new("w1"));
            assert_eq!(other, instance, "the error names the running process");
        }
        other => panic!("the second process must be refused, got {other:?}"),
    }
    // The first one was not disturbed: same record, same leases, still delivering.
    let records = fleet.table.list_workers().await.unwrap();
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].instance, instance);
    assert_eq!(leases_of(&fleet, "w1").await, 4);
    fleet.produce(20, Duration::ZERO).await.unwrap();
    eventually("w1 still delivers", Duration::from_secs(30), || async {
        fleet.control("w1", "x").recorded().records.len() == 20
    })
    .await;
    fleet.stop("w1").await;
    assert!(fleet.table.list_workers().await.unwrap().is_empty(), "w1 removed its own record");
}

#[tokio::test(start_paused = true)]
async fn a_crashed_process_id_is_taken_over_after_the_failover_time() {
    let mut fleet = Fleet::new(2, 10, &[("x", AckMode::Immediately)]);
    fleet.start("w1");
    eventually("w1 holds every lease", Duration::from_secs(60), || async { leases_of(&fleet, "w1").await == 2 }).await;
    fleet.kill("w1");
    let crashed = fleet.table.list_workers().await.unwrap()[0].clone();

    let started = tokio::time::Instant::now();
    let (restarted, stop) = spawn(&fleet, "w1");
    eventually("the restarted process owns the record", Duration::from_secs(60), || async {
        fleet.table.list_workers().await.unwrap().first().is_some_and(|r| r.instance != crashed.instance)
    })
    .await;
    assert!(started.elapsed() >= config("w1").failover, "it waited to see the record stand still");
    eventually("and the leases", Duration::from_secs(60), || async { leases_of(&fleet, "w1").await == 2 }).await;
    stop.cancel();
    restarted.await.unwrap().unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_worker_whose_id_was_taken_over_stops() {
    let fleet = Fleet::new(2, 10, &[("x", AckMode::Immediately)]);
    let (worker, _stop) = spawn(&fleet, "w1");
    eventually("w1 holds every lease", Duration::from_secs(60), || async { leases_of(&fleet, "w1").await == 2 }).await;
    // Another process decided the record was stale (this one was paused) and took it.
    let seen = fleet.table.list_workers().await.unwrap().remove(0);
    assert!(fleet.table.claim_worker(&seen, "intruder").await.unwrap());
    match worker.await.unwrap() {
        Err(WorkerError::DuplicateWorkerId { instance, .. }) => assert_eq!(instance, "intruder"),
        other => panic!("the displaced worker must stop with an error, got {other:?}"),
    }
    let records = fleet.table.list_workers().await.unwrap();
    assert_eq!(records.len(), 1, "the other process's record stays");
    assert_eq!(records[0].instance, "intruder");
}
