//! Lease balancing: 3 workers and 12 shards; a worker dies; a worker joins.
#![allow(clippy::unwrap_used, clippy::print_stdout)] // a test: a failed expectation is a failed test
mod common;

use std::time::Duration;

use common::{Fleet, eventually};
use weir_core::CloseReason;
use weir_testkit::AckMode;

const FAILOVER: Duration = Duration::from_secs(10);
const TAKER: Duration = Duration::from_secs(10);

fn balanced(owners: &std::collections::BTreeMap<String, usize>, workers: &[&str], per: usize) -> bool {
    workers.iter().all(|w| owners.get(*w).is_some_and(|n| n.abs_diff(per) <= 1))
        && owners.get("-").is_none()
        && owners.values().sum::<usize>() == 12
}

#[tokio::test(start_paused = true)]
async fn leases_balance_fail_over_and_hand_off() {
    let mut fleet = Fleet::new(12, 100, &[("count", AckMode::Immediately)]);
    let producer = fleet.produce(5_000, Duration::from_millis(20));
    for w in ["w1", "w2", "w3"] {
        fleet.start(w);
    }
    eventually("12 leases balanced 4±1 over 3 workers", Duration::from_secs(300), || async {
        balanced(&fleet.owners().await, &["w1", "w2", "w3"], 4)
    })
    .await;

    // Kill w3: its shards are owned again within failover time plus one taker cycle.
    let dead: Vec<_> = fleet
        .leases()
        .await
        .into_iter()
        .filter(|l| l.owner.as_ref().is_some_and(|o| o.as_str() == "w3"))
        .map(|l| l.key)
        .collect();
    assert!(!dead.is_empty());
    let killed_at = tokio::time::Instant::now();
    fleet.kill("w3");
    eventually("w3's shards owned by w1/w2", FAILOVER + TAKER + Duration::from_secs(1), || async {
        let leases = fleet.leases().await;
        dead.iter().all(|k| {
            let l = leases.iter().find(|l| &l.key == k).unwrap();
            l.owner.as_ref().is_some_and(|o| o.as_str() != "w3")
        })
    })
    .await;
    let took = killed_at.elapsed();
    assert!(took <= FAILOVER + TAKER + Duration::from_secs(1), "took {took:?}");
    eventually("6±1 each on two workers", Duration::from_secs(300), || async {
        balanced(&fleet.owners().await, &["w1", "w2"], 6)
    })
    .await;

    // A new worker joins and gets its share through graceful handoffs.
    fleet.start("w4");
    eventually("w4 gets its share", Duration::from_secs(600), || async {
        balanced(&fleet.owners().await, &["w1", "w2", "w4"], 4)
    })
    .await;
    let handoffs: usize = ["w1", "w2"]
        .iter()
        .map(|w| fleet.control(w, "count").recorded().closes.iter().filter(|(_, r)| *r == CloseReason::Handoff).count())
        .sum();
    assert!(handoffs >= 3, "w4's leases came through graceful handoffs, saw {handoffs}");
    eventually("w4 processes the leases handed to it", Duration::from_secs(60), || async {
        fleet.workers["w4"].stats.held().len() >= 3 && fleet.control("w4", "count").recorded().opens.len() >= 3
    })
    .await;
    producer.abort();
}

/// A rolling deploy at production timings (failover 10 s, taker cycles 10 s): each new
/// worker is started and ready, then an old one drains and lets its leases go. The
/// leases are owned again within a renewal interval (3.3 s), not a taker interval:
/// a worker below its share looks again at the renewal interval.
#[tokio::test(start_paused = true)]
async fn in_a_rolling_deploy_let_go_leases_are_owned_again_within_a_renewal_interval() {
    let mut fleet = Fleet::new(4, 100, &[("count", AckMode::Immediately)]);
    let producer = fleet.produce(200_000, Duration::from_millis(5));
    for w in ["w1", "w2", "w3"] {
        fleet.start(w);
    }
    eventually("4 leases over 3 workers", Duration::from_secs(300), || async {
        let by = fleet.owners().await;
        !by.contains_key("-") && by.len() == 3 && by.values().sum::<usize>() == 4
    })
    .await;
    let renew = common::config("x").renew_interval;
    let mut slowest = Duration::ZERO;
    for (old, new) in [("w1", "w4"), ("w2", "w5"), ("w3", "w6")] {
        fleet.start(new);
        let stats = fleet.workers[new].stats.clone();
        eventually("the new worker is ready", Duration::from_secs(60), || async { stats.is_ready() }).await;
        // Its share taken (a steal), so the drain below is not its pending handoff.
        eventually("the new worker holds a lease", Duration::from_secs(120), || async {
            fleet.owners().await.contains_key(new)
        })
        .await;
        fleet.stop(old).await;
        let let_go = tokio::time::Instant::now();
        eventually("every lease owned by a running worker", Duration::from_secs(60), || async {
            let by = fleet.owners().await;
            !by.contains_key("-") && !by.contains_key(old)
        })
        .await;
        slowest = slowest.max(let_go.elapsed());
    }
    println!("slowest re-take after a drain: {slowest:?} (renewal interval {renew:?})");
    assert!(slowest <= renew + Duration::from_secs(1), "leases let go were free for {slowest:?}");
    producer.abort();
}
