//! What a worker reports about itself: a shard's lag goes with its lease, and failing
//! reads or a failing lease table make it unhealthy once they last the bound (and
//! healthy again when they stop).
#![allow(clippy::unwrap_used, clippy::print_stdout)] // a test: a failed expectation is a failed test
mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{Fleet, eventually};
use tokio::time::Instant;
use weir_testkit::{AckMode, FaultPlan, FaultyReader};

const BOUND: Duration = Duration::from_secs(60);

fn lagged(fleet: &Fleet, worker: &str) -> Vec<String> {
    let live = fleet.workers[worker].stats.live_reads();
    live.iter().filter(|(_, r)| r.millis_behind.is_some()).map(|(k, _)| k.to_string()).collect()
}

#[tokio::test(start_paused = true)]
async fn a_shards_lag_goes_when_its_lease_goes() {
    let mut fleet = Fleet::new(2, 100, &[("count", AckMode::Immediately)]);
    let producer = fleet.produce(20_000, Duration::from_millis(10));
    fleet.start("w1");
    eventually("w1 reads both shards and knows their lag", Duration::from_secs(120), || async {
        lagged(&fleet, "w1").len() == 2
    })
    .await;
    fleet.start("w2");
    eventually("one shard moved to w2", Duration::from_secs(300), || async {
        fleet.owners().await.get("w2") == Some(&1)
    })
    .await;
    eventually("each worker has the lag of the shard it reads, and only that", Duration::from_secs(120), || async {
        let (a, b) = (lagged(&fleet, "w1"), lagged(&fleet, "w2"));
        a.len() == 1 && b.len() == 1 && a != b
    })
    .await;
    let held: Vec<String> = fleet.workers["w1"].stats.held().iter().map(|s| s.to_string()).collect();
    assert_eq!(lagged(&fleet, "w1"), held, "w1's lag is of the shard it holds");
    fleet.stop("w1").await;
    let w2 = fleet.stop("w2").await;
    assert!(w2.stats.live_reads().is_empty(), "nothing read after a stop: no lag left");
    producer.abort();
}

#[tokio::test(start_paused = true)]
async fn failing_reads_make_the_worker_unhealthy_after_the_bound_and_healthy_again() {
    let mut fleet = Fleet::new(2, 100, &[("count", AckMode::Immediately)]);
    let plan = FaultPlan::default();
    fleet.reader = Arc::new(FaultyReader::new(fleet.reader.clone(), plan.clone()));
    let producer = fleet.produce(50_000, Duration::from_millis(10));
    fleet.start("w1");
    let stats = fleet.workers["w1"].stats.clone();
    eventually("healthy and reading", Duration::from_secs(120), || async {
        stats.health(Instant::now(), BOUND, true).ready && stats.live_reads().len() == 2
    })
    .await;

    plan.set_denied(true);
    let denied_at = Instant::now();
    eventually("unhealthy: reads fail", Duration::from_secs(300), || async {
        !stats.health(Instant::now(), BOUND, true).ready
    })
    .await;
    assert!(denied_at.elapsed() >= BOUND, "not before the bound: {:?}", denied_at.elapsed());
    let health = stats.health(Instant::now(), BOUND, true);
    assert!(
        health.problems.iter().any(|p| p.contains("reads failing") && p.contains("access denied")),
        "the reason is given: {:?}",
        health.problems
    );
    assert!(stats.live_reads().values().all(|r| r.failing.is_some()));

    plan.set_denied(false);
    eventually("healthy again once reads answer", Duration::from_secs(600), || async {
        stats.health(Instant::now(), BOUND, true).ready
    })
    .await;
    producer.abort();
    fleet.stop("w1").await;
}

#[tokio::test(start_paused = true)]
async fn a_failing_lease_table_makes_the_worker_unhealthy_and_a_down_one_never_ready() {
    let mut fleet = Fleet::new(1, 100, &[("count", AckMode::Immediately)]);
    fleet.start("w1");
    let stats = fleet.workers["w1"].stats.clone();
    eventually("healthy", Duration::from_secs(120), || async { stats.health(Instant::now(), BOUND, false).ready })
        .await;
    fleet.workers["w1"].table.set_down(true);
    let down_at = Instant::now();
    eventually("unhealthy: the lease table fails", Duration::from_secs(300), || async {
        stats.health(Instant::now(), BOUND, false).problems.iter().any(|p| p.contains("lease table failing"))
    })
    .await;
    assert!(down_at.elapsed() >= BOUND);
    fleet.workers["w1"].table.set_down(false);
    eventually("healthy again", Duration::from_secs(300), || async {
        stats.health(Instant::now(), BOUND, false).ready
    })
    .await;
    fleet.stop("w1").await;

    // A worker whose lease table never answers never becomes ready.
    let mut fleet = Fleet::new(1, 100, &[("count", AckMode::Immediately)]);
    fleet.start("w2");
    fleet.workers["w2"].table.set_down(true);
    let stats = fleet.workers["w2"].stats.clone();
    tokio::time::sleep(BOUND * 2).await;
    let health = stats.health(Instant::now(), BOUND, false);
    assert!(!health.ready && !stats.is_ready(), "{health:?}");
    assert!(health.problems.iter().any(|p| p.starts_with("starting")), "{:?}", health.problems);
    fleet.kill("w2");
}

#[tokio::test(start_paused = true)]
async fn a_silent_read_counts_only_where_reads_answer_when_idle() {
    // The in-process stream's reads wait for records: silent without a producer.
    let mut fleet = Fleet::new(1, 100, &[("count", AckMode::Immediately)]);
    fleet.start("w1");
    let stats = fleet.workers["w1"].stats.clone();
    eventually("reading", Duration::from_secs(120), || async { stats.live_reads().len() == 1 }).await;
    let started = Instant::now();
    eventually("a silent read is a problem where silence counts", Duration::from_secs(300), || async {
        stats.health(Instant::now(), BOUND, true).problems.iter().any(|p| p.contains("no answer from reads"))
    })
    .await;
    assert!(started.elapsed() >= BOUND - Duration::from_secs(11), "not long before the bound");
    assert!(stats.health(Instant::now(), BOUND, false).ready, "and none where it does not");
    fleet.stop("w1").await;
}
