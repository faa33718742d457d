//! An operator's release (`weir leases release`): a handoff request naming
//! `RELEASE_REQUEST`. The owner drains like a handoff (close with `Handoff`, final
//! checkpoint), lets the lease go free instead of transferring it, and the shard is
//! taken again and starts afresh from its checkpoint: nothing lost, nothing twice.
#![allow(clippy::unwrap_used, clippy::print_stdout)] // a test: a failed expectation is a failed test
mod common;

use std::time::Duration;

use common::{Fleet, eventually};
use weir_core::ports::LeaseTable;
use weir_core::{CloseReason, LeaseChange, LeaseMutation, WorkerId};
use weir_testkit::AckMode;

#[tokio::test(start_paused = true)]
async fn a_released_lease_is_drained_freed_and_started_again() {
    let mut fleet = Fleet::new(2, 50, &[("count", AckMode::Immediately)]);
    let producer = fleet.produce(2_000, Duration::from_millis(10));
    fleet.start("w1");
    eventually("w1 holds both shards", Duration::from_secs(120), || async {
        fleet.owners().await.get("w1") == Some(&2)
    })
    .await;
    let lease = fleet.leases().await.into_iter().next().unwrap();
    let shard = lease.key.clone();
    let release = LeaseChange::RequestHandoff { to: WorkerId::new(weir_core::lease::RELEASE_REQUEST) };
    fleet.table.mutate(&LeaseMutation::on(&lease, release)).await.unwrap();
    let control = fleet.control("w1", "count");
    eventually("the lease goes free (not to the marker)", Duration::from_secs(60), || async {
        fleet.table.get(&shard).await.unwrap().unwrap().owner.is_none()
    })
    .await;
    eventually("the shard is drained as for a handoff and opened again", Duration::from_secs(120), || async {
        let r = control.recorded();
        r.closes.iter().any(|(s, why)| *s == shard && *why == CloseReason::Handoff)
            && r.opens.iter().filter(|o| o.shard_id == shard).count() >= 2
    })
    .await;
    let after = fleet.table.get(&shard).await.unwrap().unwrap();
    assert!(after.handoff_to.is_none(), "the request is consumed");
    assert_ne!(
        after.owner.as_ref().map(|o| o.as_str()),
        Some(weir_core::lease::RELEASE_REQUEST),
        "never owned by the marker"
    );
    producer.await.unwrap();
    eventually("every record delivered", Duration::from_secs(120), || async {
        control.recorded().records.len() >= 2_000
    })
    .await;
    common::assert_exactly_once_in_order(&fleet.stream, &control.recorded(), "after a release");
}
