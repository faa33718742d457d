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
use weir_testkit::{AckMode, Event};

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

/// A release whose drain outlasts `handoff_timeout` (the consumer is stuck in a batch):
/// the lease is let go anyway, and the close queued behind the batch must not be lost
/// with the lane. The consumer is told to drop the shard (`LeaseLost`) before the same
/// worker opens the shard again, so it never holds two tenures' state of one shard.
#[tokio::test(start_paused = true)]
async fn a_drain_past_its_deadline_still_closes_the_shard_before_it_opens_again() {
    let mut fleet = Fleet::new(1, 20, &[("count", AckMode::Immediately)]);
    let producer = fleet.produce(400, Duration::from_millis(50));
    fleet.start("w1");
    eventually("w1 holds the shard", Duration::from_secs(120), || async { fleet.owners().await.get("w1") == Some(&1) })
        .await;
    let control = fleet.control("w1", "count");
    eventually("records flow", Duration::from_secs(60), || async { !control.recorded().records.is_empty() }).await;
    control.stall();
    let batches = control.recorded().timeline.len();
    eventually("a batch is stuck in the consumer", Duration::from_secs(60), || async {
        control.recorded().timeline.len() > batches
    })
    .await;
    let lease = fleet.leases().await.into_iter().next().unwrap();
    let shard = lease.key.clone();
    let release = LeaseChange::RequestHandoff { to: WorkerId::new(weir_core::lease::RELEASE_REQUEST) };
    fleet.table.mutate(&LeaseMutation::on(&lease, release)).await.unwrap();
    // Past handoff_timeout (10 s): the lease is released without the consumer's close.
    eventually("the lease goes free", Duration::from_secs(60), || async {
        fleet.table.get(&shard).await.unwrap().unwrap().owner.is_none()
    })
    .await;
    control.resume();
    eventually("the shard opens again", Duration::from_secs(120), || async {
        control.recorded().opens.iter().filter(|o| o.shard_id == shard).count() >= 2
    })
    .await;
    let timeline = control.recorded().timeline;
    let opens: Vec<usize> =
        timeline.iter().enumerate().filter(|(_, (_, s, e))| *s == shard && *e == Event::Open).map(|(i, _)| i).collect();
    let closed_between =
        timeline[opens[0]..opens[1]].iter().any(|(_, s, e)| *s == shard && matches!(e, Event::Close(_)));
    assert!(closed_between, "the shard was opened again without being closed: {timeline:?}");
    producer.await.unwrap();
    eventually("every record delivered", Duration::from_secs(300), || async {
        control.recorded().records.len() >= 400
    })
    .await;
}
