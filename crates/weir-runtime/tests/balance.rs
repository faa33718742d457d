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
