//! What a worker reports about itself: a shard's lag goes with its lease, and failing
//! reads, a failing lease table, failing lease renewals or a consumer failing on a held
//! shard make it unhealthy once they last the bound (and healthy again when they stop).
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

/// Renewals the store refuses while the rest of the table answers (heartbeat, lists):
/// the leases lapse and cannot be taken back. A short failure does not count; one
/// that lasts the bound does, though nothing is held by then; the worker is healthy
/// again once it holds its shards again.
#[tokio::test(start_paused = true)]
async fn failing_lease_renewals_make_the_worker_unhealthy_after_the_bound_and_healthy_again() {
    let mut fleet = Fleet::new(2, 100, &[("count", AckMode::Immediately)]);
    fleet.start("w1");
    let stats = fleet.workers["w1"].stats.clone();
    let table = fleet.workers["w1"].table.clone();
    let holding_both = || stats.health(Instant::now(), BOUND, false).ready && stats.held().len() == 2;
    eventually("healthy and holding both shards", Duration::from_secs(120), || async { holding_both() }).await;

    // Shorter than the leases' validity: seen (a zero bound shows it), not counted
    // against the real bound, and over at the next renewal that lands.
    let renewals_failing =
        || stats.health(Instant::now(), Duration::ZERO, false).problems.iter().any(|p| p.contains("lease renewals"));
    table.set_writes_failing(true);
    let blip = Instant::now() + Duration::from_secs(5);
    while Instant::now() < blip {
        assert!(stats.health(Instant::now(), BOUND, false).ready, "a short failure does not count");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(renewals_failing(), "renewals failed during the blip");
    table.set_writes_failing(false);
    eventually("renewals land again", Duration::from_secs(30), || async { !renewals_failing() && holding_both() })
        .await;

    table.set_writes_failing(true);
    let failing_at = Instant::now();
    eventually("unhealthy: renewals fail", Duration::from_secs(300), || async {
        !stats.health(Instant::now(), BOUND, false).ready
    })
    .await;
    assert!(failing_at.elapsed() >= BOUND, "not before the bound: {:?}", failing_at.elapsed());
    let health = stats.health(Instant::now(), BOUND, false);
    assert_eq!(health.problems.len(), 1, "{:?}", health.problems);
    assert!(
        health.problems[0].starts_with("lease renewals failing for")
            && health.problems[0].contains("injected: lease writes refused"),
        "the reason is given: {:?}",
        health.problems
    );
    assert!(stats.held().is_empty(), "the leases lapsed: {:?}", stats.held());

    table.set_writes_failing(false);
    eventually("healthy again, holding its shards again", Duration::from_secs(300), || async { holding_both() }).await;
    fleet.stop("w1").await;
}

/// A worker whose lease writes fail from the start lists the table (its first lease
/// cycle completes) but can take no lease: it renews nothing, and its failing takes
/// make it unhealthy after the bound all the same.
#[tokio::test(start_paused = true)]
async fn a_worker_that_cannot_take_a_lease_is_unhealthy_after_the_bound() {
    let mut fleet = Fleet::new(1, 100, &[("count", AckMode::Immediately)]);
    fleet.start("w1");
    fleet.workers["w1"].table.set_writes_failing(true);
    let stats = fleet.workers["w1"].stats.clone();
    let started = Instant::now();
    eventually("unhealthy: takes fail", Duration::from_secs(300), || async {
        stats.is_ready() && !stats.health(Instant::now(), BOUND, false).ready
    })
    .await;
    assert!(started.elapsed() >= BOUND, "not before the bound: {:?}", started.elapsed());
    let health = stats.health(Instant::now(), BOUND, false);
    assert!(
        health.problems.len() == 1 && health.problems[0].contains("taking shard"),
        "the reason is given: {:?}",
        health.problems
    );
    assert!(stats.held().is_empty());
    fleet.workers["w1"].table.set_writes_failing(false);
    eventually("healthy once it holds the shard", Duration::from_secs(300), || async {
        stats.health(Instant::now(), BOUND, false).ready && stats.held().len() == 1
    })
    .await;
    fleet.stop("w1").await;
}

/// A consumer whose every batch fails on a held shard makes the worker unhealthy once
/// that lasts the bound (the worker's other consumer works on); healthy again once its
/// batches go through.
#[tokio::test(start_paused = true)]
async fn a_consumer_failing_on_a_held_shard_makes_the_worker_unhealthy_after_the_bound_and_healthy_again() {
    let mut fleet = Fleet::new(1, 100, &[("count", AckMode::Immediately), ("flaky", AckMode::Immediately)]);
    let producer = fleet.produce(50_000, Duration::from_millis(10));
    fleet.start("w1");
    let stats = fleet.workers["w1"].stats.clone();
    let flaky = fleet.control("w1", "flaky");
    eventually("healthy and delivering", Duration::from_secs(120), || async {
        stats.health(Instant::now(), BOUND, false).ready && !flaky.recorded().records.is_empty()
    })
    .await;

    flaky.fail_next(u32::MAX, false);
    let failing_at = Instant::now();
    eventually("unhealthy: the consumer fails", Duration::from_secs(300), || async {
        !stats.health(Instant::now(), BOUND, false).ready
    })
    .await;
    assert!(failing_at.elapsed() >= BOUND, "not before the bound: {:?}", failing_at.elapsed());
    let health = stats.health(Instant::now(), BOUND, false);
    assert_eq!(health.problems.len(), 1, "only the failing consumer: {:?}", health.problems);
    assert!(
        health.problems[0].starts_with("consumer flaky on ")
            && health.problems[0].contains("injected consumer failure"),
        "the reason is given: {:?}",
        health.problems
    );
    assert!(flaky.recorded().injected_failures > 1, "its batches were retried and failed again");

    flaky.fail_next(0, false);
    let delivered = flaky.recorded().records.len();
    eventually("healthy again once its batches go through", Duration::from_secs(300), || async {
        stats.health(Instant::now(), BOUND, false).ready && flaky.recorded().records.len() > delivered
    })
    .await;
    producer.abort();
    fleet.stop("w1").await;
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
