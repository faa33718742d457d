//! The costed lease table: a lease table like any other (the conformance suite), whose
//! charges match an independent count of the adapter's requests, and which throttles
//! a partition key past its limit as DynamoDB does.

use std::sync::Arc;

use weir_core::ports::{LeaseTable, WorkerLoad, lease_item_bytes};
use weir_core::{
    Checkpoint, ConsumerName, ExtendedSequenceNumber, LeaseChange, LeaseMutation, NewLease, SequenceNumber, ShardId,
    WorkerId,
};
use weir_fleetsim::meter::Op;
use weir_fleetsim::units::{Consistency, query_pages, read_half_units, write_units};
use weir_fleetsim::{CostedLeaseTable, Limits, Meter, SdkRetry};

fn table(meter: &Arc<Meter>, ns: &str, retry: SdkRetry) -> CostedLeaseTable {
    CostedLeaseTable::new("t", ns, meter.clone(), retry)
}

fn new_lease(i: usize) -> NewLease {
    NewLease {
        key: ShardId::new(format!("shard-{i:05}")),
        initial: Checkpoint::TrimHorizon,
        parents: vec![],
        hash_range: None,
    }
}

#[tokio::test(start_paused = true)]
async fn passes_lease_table_conformance() {
    weir_testkit::conformance::lease_table_suite(|| async {
        let meter = Arc::new(Meter::new(Limits::DYNAMODB));
        Arc::new(table(&meter, "ns", SdkRetry::none())) as Arc<dyn LeaseTable>
    })
    .await;
}

/// Creating, taking and checkpointing 3,000 leases, then listing them: the requests
/// and units charged are those counted here from the calls and the stored items (all
/// leases under the namespace's own partition key, the layout before they were spread).
#[tokio::test(start_paused = true)]
async fn charges_match_an_independent_count_of_the_requests() {
    let meter = Arc::new(Meter::new(Limits { enforcement: weir_fleetsim::Enforcement::Observe, ..Limits::DYNAMODB }));
    let t = table(&meter, "app", SdkRetry::none()).with_partitions(0);
    let n = 3_000;
    let (mut reads, mut writes) = (0u64, 0u64);
    let me = WorkerId::new("w-1");
    for i in 0..n {
        let lease = new_lease(i);
        writes += write_units(lease_item_bytes(&lease.clone().into_lease()), false);
        assert!(t.create_if_absent(lease).await.unwrap());
        let stored = t.get(&ShardId::new(format!("shard-{i:05}"))).await.unwrap().unwrap();
        reads += read_half_units(lease_item_bytes(&stored), Consistency::Strong);
        let taken = t.mutate(&LeaseMutation::on(&stored, LeaseChange::Take { owner: me.clone() })).await.unwrap();
        // GetItem of the stored item, PutItem of the larger of before and after.
        reads += read_half_units(lease_item_bytes(&stored), Consistency::Strong);
        writes += write_units(lease_item_bytes(&stored).max(lease_item_bytes(&taken)), false);
        let cp = LeaseChange::Checkpoint {
            checkpoints: [(
                ConsumerName::new("c"),
                Checkpoint::At(ExtendedSequenceNumber::plain(SequenceNumber::from_u128(5))),
            )]
            .into(),
            ended_with_children: None,
        };
        let done = t.mutate(&LeaseMutation::on(&taken, cp)).await.unwrap();
        reads += read_half_units(lease_item_bytes(&taken), Consistency::Strong);
        writes += write_units(lease_item_bytes(&taken).max(lease_item_bytes(&done)), false);
        // The holder's renewal from its own view: one PutItem, nothing read.
        let renewed = t.mutate_seen(&done, LeaseChange::Renew).await.unwrap();
        writes += write_units(lease_item_bytes(&done).max(lease_item_bytes(&renewed)), false);
    }
    let listed = t.list().await.unwrap();
    let pages = query_pages(listed.iter().map(lease_item_bytes));
    assert!(pages.len() >= 2, "3,000 leases take more than one 1 MB page: {}", pages.len());
    reads += pages.iter().map(|p| read_half_units(p.bytes, Consistency::Strong)).sum::<u64>();

    let totals = meter.totals();
    let p = &totals["app"];
    assert_eq!(p.read_halves, reads, "read units (in halves)");
    assert_eq!(p.write_units, writes);
    assert_eq!(p.requests[&Op::Query], pages.len() as u64);
    assert_eq!(p.requests[&Op::GetItem], 3 * n as u64);
    assert_eq!(p.requests[&Op::PutItem], 4 * n as u64, "one create, two mutations and a renewal each");
    assert_eq!(p.throttled, 0);
    assert!(p.seconds_over_limit > 0, "all in one second: far past the partition's limits");
}

/// Leases spread over the adapter's partition keys: the same units in total, each key
/// a fair share of them, and a listing queries every key.
#[tokio::test(start_paused = true)]
async fn spread_leases_charge_their_own_partition_keys() {
    let meter = Arc::new(Meter::new(Limits { enforcement: weir_fleetsim::Enforcement::Observe, ..Limits::DYNAMODB }));
    let t = table(&meter, "app", SdkRetry::none());
    let n = 3_200;
    let mut writes = 0u64;
    for i in 0..n {
        let lease = new_lease(i);
        writes += write_units(lease_item_bytes(&lease.clone().into_lease()), false);
        assert!(t.create_if_absent(lease).await.unwrap());
    }
    assert_eq!(t.list().await.unwrap().len(), n);
    let totals = meter.totals();
    let keys: Vec<_> = totals.iter().filter(|(k, _)| k.starts_with("app#leases-")).collect();
    let partitions = weir_core::ports::LEASE_PARTITIONS as usize;
    assert_eq!(keys.len(), partitions, "one partition key per partition");
    assert!(!totals.contains_key("app"), "no lease charged to the namespace's own key");
    assert_eq!(keys.iter().map(|(_, p)| p.write_units).sum::<u64>(), writes);
    let fair = writes / partitions as u64;
    for (k, p) in &keys {
        assert!(p.write_units < 2 * fair && p.write_units > fair / 2, "{k}: {} of {writes}", p.write_units);
        assert_eq!(p.requests[&Op::Query], 1, "{k}: one page of a listing");
    }
}

/// A partition key past 1,000 write units in a second: the next write fails with the
/// adapter's retryable throttling error, another namespace of the table does not; with
/// the SDK's retries the write lands in a later second.
#[tokio::test(start_paused = true)]
async fn a_partition_key_over_its_limit_is_throttled() {
    let meter = Arc::new(Meter::new(Limits::DYNAMODB));
    // Worker records under the namespace's own key (the layout before they were
    // spread), so that every heartbeat lands on one key.
    let hot = table(&meter, "hot", SdkRetry::none()).with_worker_partitions(0);
    let other = table(&meter, "other", SdkRetry::none()).with_worker_partitions(0);
    for i in 0..1_000 {
        hot.heartbeat(&WorkerId::new(format!("w-{i}")), "i", WorkerLoad::default()).await.unwrap();
    }
    let e = hot.heartbeat(&WorkerId::new("w-x"), "i", WorkerLoad::default()).await.unwrap_err();
    assert!(e.is_retryable(), "{e}");
    assert!(e.to_string().contains("ProvisionedThroughputExceededException"), "{e}");
    other.heartbeat(&WorkerId::new("w-x"), "i", WorkerLoad::default()).await.expect("its own partition key");

    let retrying = table(&meter, "hot", SdkRetry::standard(3)).with_worker_partitions(0);
    let started = tokio::time::Instant::now();
    let refused_before = meter.totals()["hot"].throttled;
    // Refused for the rest of this second; the SDK's backoff (up to 1 s, then up to
    // 2 s) takes an attempt into a later second, or the adapter retries the call.
    let mut calls = 0;
    while retrying.heartbeat(&WorkerId::new("w-y"), "i", WorkerLoad::default()).await.is_err() {
        calls += 1;
        assert!(calls < 10, "a later second has room");
    }
    assert!(started.elapsed() >= std::time::Duration::from_secs(1), "served in a later second only");
    let t = &meter.totals()["hot"];
    assert!(t.throttled > refused_before, "the refused attempts are counted");
    assert_eq!(t.write_units, 1_001, "refused attempts consume nothing");
}

/// Worker records spread over the adapter's partition keys: a heartbeat is charged to
/// its record's key, a census queries every key, and the relaxed readings cost half
/// the units of the strong ones.
#[tokio::test(start_paused = true)]
async fn worker_records_charge_their_own_partition_keys_and_relaxed_reads_half() {
    let meter = Arc::new(Meter::new(Limits { enforcement: weir_fleetsim::Enforcement::Observe, ..Limits::DYNAMODB }));
    let t = table(&meter, "app", SdkRetry::none());
    for i in 0..400 {
        t.heartbeat(&WorkerId::new(format!("app-w{i:04}")), "i", WorkerLoad::default()).await.unwrap();
    }
    let totals = meter.totals();
    let keys: Vec<_> = totals.iter().filter(|(k, _)| k.starts_with("app#workers-")).collect();
    let partitions = weir_core::ports::WORKER_PARTITIONS as usize;
    assert_eq!(keys.len(), partitions, "one partition key per partition: {:?}", totals.keys());
    assert!(!totals.contains_key("app"), "no worker record charged to the namespace's own key");
    for (k, p) in &keys {
        assert!(p.write_units > 400 / partitions as u64 / 2, "{k}: {} of 400 heartbeats", p.write_units);
    }

    let reads = |m: &Meter| m.totals().values().map(|p| p.read_halves).sum::<u64>();
    let before = reads(&meter);
    assert_eq!(t.list_workers().await.unwrap().len(), 400);
    let strong = reads(&meter) - before;
    assert_eq!(t.list_workers_relaxed().await.unwrap().len(), 400);
    let relaxed = reads(&meter) - before - strong;
    for (k, p) in meter.totals().iter().filter(|(k, _)| k.starts_with("app#workers-")) {
        assert_eq!(p.requests[&Op::Query], 2, "{k}: one page of each census");
    }
    // 50 records of about 120 bytes a key: 6 KB, 2 strong units or 1 relaxed per key.
    assert_eq!((strong, relaxed), (2 * 2 * partitions as u64, 2 * partitions as u64), "in half units");

    for i in 0..100 {
        t.create_if_absent(new_lease(i)).await.unwrap();
    }
    let before = reads(&meter);
    t.list().await.unwrap();
    let strong = reads(&meter) - before;
    t.list_relaxed().await.unwrap();
    let relaxed = reads(&meter) - before - strong;
    assert!(relaxed * 2 <= strong + 2 * weir_core::ports::LEASE_PARTITIONS as u64, "{relaxed} vs {strong}");
    assert!(relaxed < strong, "{relaxed} vs {strong}");
}
