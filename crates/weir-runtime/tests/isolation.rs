//! Consumer isolation: a stalled or failing consumer does not delay the others, and
//! catches up afterwards with nothing lost and nothing repeated.
#![allow(clippy::unwrap_used, clippy::print_stdout)] // a test: a failed expectation is a failed test
mod common;

use std::time::Duration;

use common::{Fleet, assert_exactly_once_in_order, eventually};
use weir_testkit::{AckMode, Event};

#[tokio::test(start_paused = true)]
async fn stalled_consumer_is_detached_and_catches_up() {
    let mut fleet = Fleet::new(2, 50, &[("fast", AckMode::Immediately), ("slow", AckMode::OnTick)]);
    fleet.start("w1");
    let total = 4_000;
    let warmup = fleet.produce(200, Duration::from_millis(10));
    eventually("both consumers running", Duration::from_secs(60), || async {
        fleet.control("w1", "slow").recorded().records.len() == 200
    })
    .await;
    warmup.await.unwrap();

    let slow = fleet.control("w1", "slow");
    slow.stall();
    let stalled_at = tokio::time::Instant::now();
    let producer = fleet.produce(total - 200, Duration::from_millis(10));
    // 30 s of stall; the fast consumer must keep up in real (tokio) time.
    let fast = fleet.control("w1", "fast");
    let mut max_lag = 0usize;
    while stalled_at.elapsed() < Duration::from_secs(30) {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let put: usize = fleet.stream.record_counts().iter().map(|(_, n)| n).sum();
        let got = fast.recorded().records.len();
        max_lag = max_lag.max(put - got);
    }
    // A put becomes visible to the fast consumer without waiting on any timer; allow
    // one in-flight batch per shard.
    assert!(max_lag <= 100, "fast consumer fell behind by {max_lag} records during the stall");
    let slow_rec = slow.recorded();
    assert!(slow_rec.records.len() < 1_000, "slow consumer was stalled");
    let detaches = fleet.workers["w1"]
        .stats
        .lanes()
        .iter()
        .filter(|((_, c), _)| c.as_str() == "slow")
        .map(|(_, s)| s.detaches)
        .sum::<u64>();
    assert!(detaches >= 1, "the stalled consumer was detached");

    slow.resume();
    producer.await.unwrap();
    eventually("slow consumer caught up", Duration::from_secs(300), || async {
        slow.recorded().records.len() >= total
    })
    .await;
    assert_exactly_once_in_order(&fleet.stream, &fast.recorded(), "fast");
    assert_exactly_once_in_order(&fleet.stream, &slow.recorded(), "slow");
    // The slow consumer rejoined the live read: records put now reach it without a
    // catch-up read.
    let before = slow.recorded().timeline.len();
    fleet.produce(10, Duration::ZERO).await.unwrap();
    eventually("slow gets fresh records", Duration::from_secs(5), || async {
        slow.recorded().records.len() == total + 10
    })
    .await;
    assert!(slow.recorded().timeline[before..].iter().all(|(_, _, e)| matches!(e, Event::Batch(_))));
}

#[tokio::test(start_paused = true)]
async fn failing_and_panicking_consumer_is_retried_without_loss() {
    let mut fleet = Fleet::new(2, 20, &[("steady", AckMode::Immediately), ("flaky", AckMode::Immediately)]);
    fleet.start("w1");
    let flaky = fleet.control("w1", "flaky");
    flaky.fail_next(3, false);
    let producer = fleet.produce(500, Duration::from_millis(5));
    eventually("flaky failed three times", Duration::from_secs(60), || async {
        flaky.recorded().injected_failures == 3
    })
    .await;
    flaky.fail_next(1, true);
    producer.await.unwrap();
    fleet.produce(100, Duration::from_millis(5)).await.unwrap();
    eventually("everything delivered to both", Duration::from_secs(300), || async {
        flaky.recorded().records.len() >= 600 && fleet.control("w1", "steady").recorded().records.len() >= 600
    })
    .await;
    assert_eq!(flaky.recorded().injected_failures, 4, "the panic was caught, the worker lives on");
    for name in ["steady", "flaky"] {
        assert_exactly_once_in_order(&fleet.stream, &fleet.control("w1", name).recorded(), name);
    }
    let lanes = fleet.workers["w1"].stats.lanes();
    let failures: u64 = lanes.iter().filter(|((_, c), _)| c.as_str() == "flaky").map(|(_, s)| s.failures).sum();
    assert_eq!(failures, 4);
    assert!(!fleet.workers["w1"].handle.is_finished());
}

/// A consumer stalled on large records is detached once its queue holds twice
/// `queue_bytes` of record data, long before `queue_capacity` batches or
/// `detach_after`: what a slow consumer makes the worker hold is bounded in bytes.
#[tokio::test(start_paused = true)]
async fn stalled_consumer_on_large_records_is_detached_by_bytes() {
    let mut fleet = Fleet::new(1, 1, &[("fast", AckMode::Immediately), ("slow", AckMode::Immediately)]);
    let mut c = common::config("w1");
    c.queue_capacity = 10_000;
    c.detach_after = Duration::from_secs(3_600);
    c.queue_bytes = 64 * 1024;
    fleet.start_with("w1", c);
    let put =
        |i: usize| fleet.stream.put(&format!("pk-{i}"), bytes::Bytes::from(vec![b'a' + (i % 26) as u8; 16 * 1024]));
    put(0);
    let slow = fleet.control("w1", "slow");
    eventually("both consumers running", Duration::from_secs(60), || async { slow.recorded().records.len() == 1 })
        .await;
    slow.stall();
    // One record per batch: 64 records are 1 MiB, 16 times `queue_bytes`.
    for i in 1..64 {
        put(i);
    }
    let fast = fleet.control("w1", "fast");
    eventually("the fast consumer read everything", Duration::from_secs(60), || async {
        fast.recorded().records.len() == 64
    })
    .await;
    let detaches = || {
        fleet.workers["w1"]
            .stats
            .lanes()
            .iter()
            .filter(|((_, c), _)| c.as_str() == "slow")
            .map(|(_, s)| s.detaches)
            .sum::<u64>()
    };
    assert!(detaches() >= 1, "a consumer holding 16 times queue_bytes was not detached");
    slow.resume();
    eventually("slow consumer caught up", Duration::from_secs(300), || async { slow.recorded().records.len() >= 64 })
        .await;
    assert_exactly_once_in_order(&fleet.stream, &fast.recorded(), "fast");
    assert_exactly_once_in_order(&fleet.stream, &slow.recorded(), "slow");
}
