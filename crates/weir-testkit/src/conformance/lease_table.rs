use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;

use weir_core::ports::{LeaseTable, NamespaceMeta, WorkerLoad};
use weir_core::{
    Checkpoint, ConsumerName, ExtendedSequenceNumber, Intent, LeaseChange, LeaseError, LeaseMutation, SequenceNumber,
    ShardId, WorkerId,
};

use crate::fixtures::{new_lease, taken_lease};

fn at(v: u128) -> Checkpoint {
    Checkpoint::At(ExtendedSequenceNumber::plain(SequenceNumber::from_u128(v)))
}

fn cps(pairs: &[(&str, Checkpoint)]) -> LeaseChange {
    LeaseChange::Checkpoint {
        checkpoints: pairs.iter().map(|(c, cp)| (ConsumerName::new(*c), cp.clone())).collect::<BTreeMap<_, _>>(),
        ended_with_children: None,
    }
}

fn is_conflict<T: std::fmt::Debug>(r: &Result<T, LeaseError>) -> bool {
    matches!(r, Err(LeaseError::Conflict { .. }))
}

/// Runs every lease-table rule against fresh tables from `make` (each check gets its
/// own table, so implementations may share one backing store per call).
pub async fn lease_table_suite<F, Fut>(make: F)
where
    F: Fn() -> Fut,
    Fut: Future<Output = Arc<dyn LeaseTable>>,
{
    create_never_overwrites(make().await).await;
    take_renew_and_fencing(make().await).await;
    concurrent_takes_one_wins(make().await).await;
    checkpoints_never_move_backwards(make().await).await;
    handoff_flow(make().await).await;
    writes_from_the_holders_own_view(make().await).await;
    release_and_end(make().await).await;
    workers_and_listing(make().await).await;
    worker_instances(make().await).await;
    namespace_record(make().await).await;
    transactions_are_all_or_nothing(make().await).await;
    intents_are_fenced_and_pruned(make().await).await;
    operators_seek_only_free_leases_without_intents(make().await).await;
    operators_clear_intents_only_on_free_leases(make().await).await;
}

async fn operators_clear_intents_only_on_free_leases(t: Arc<dyn LeaseTable>) {
    let (x, y) = (ConsumerName::new("x"), ConsumerName::new("y"));
    let clear = |force: bool| LeaseChange::ClearIntents { consumer: x.clone(), force };
    let held = taken_lease(t.as_ref(), "s-1", "a").await;
    let both = |c: &ConsumerName, k: &str| LeaseChange::RecordIntents {
        consumer: c.clone(),
        intents: vec![intent(k, 3, 4)],
        replacing: vec![],
    };
    let held = t.mutate(&LeaseMutation::on(&held, both(&x, "gone-bucket/k"))).await.unwrap();
    let held = t.mutate(&LeaseMutation::on(&held, both(&y, "k-of-y"))).await.unwrap();
    // A held lease is refused without force, and nothing changes.
    let refused = t.mutate(&LeaseMutation::on(&held, clear(false))).await;
    assert!(matches!(&refused, Err(LeaseError::Invalid(m)) if m.contains("a holds the lease")), "{refused:?}");
    assert_eq!(t.get(&held.key).await.unwrap().unwrap(), held);
    // Forced: x's intents go, y's stay, the owner is fenced.
    let cleared = t.mutate(&LeaseMutation::on(&held, clear(true))).await.unwrap();
    assert!(!cleared.intents.contains_key(&x), "{cleared:?}");
    assert_eq!(cleared.intents.get(&y).map(Vec::len), Some(1));
    assert_eq!((cleared.owner.clone(), cleared.counter), (None, held.counter + 1));
    assert!(is_conflict(&t.mutate(&LeaseMutation::on(&held, LeaseChange::Renew)).await), "the old owner is fenced");
    // Nothing left to clear; and a stale view conflicts.
    let none = t.mutate(&LeaseMutation::on(&cleared, clear(false))).await;
    assert!(matches!(&none, Err(LeaseError::Invalid(m)) if m.contains("no open intents")), "{none:?}");
    assert!(is_conflict(&t.mutate(&LeaseMutation::on(&held, clear(true))).await));
}

async fn operators_seek_only_free_leases_without_intents(t: Arc<dyn LeaseTable>) {
    let x = ConsumerName::new("x");
    let seek = |to: Checkpoint, force: bool| LeaseChange::Seek { consumer: x.clone(), to, force };
    let held = taken_lease(t.as_ref(), "s-1", "a").await;
    let held = t.mutate(&LeaseMutation::on(&held, cps(&[("x", at(100)), ("y", at(50))]))).await.unwrap();
    // A held lease is refused without force, and nothing changes.
    let refused = t.mutate(&LeaseMutation::on(&held, seek(at(10), false))).await;
    assert!(matches!(&refused, Err(LeaseError::Invalid(m)) if m.contains("a holds the lease")), "{refused:?}");
    // Released, it can be moved backwards; other consumers keep their checkpoints.
    let free = t.mutate(&LeaseMutation::on(&held, LeaseChange::Release)).await.unwrap();
    let moved = t.mutate(&LeaseMutation::on(&free, seek(Checkpoint::TrimHorizon, false))).await.unwrap();
    assert_eq!(moved.checkpoint_for(&x), &Checkpoint::TrimHorizon);
    assert_eq!(moved.checkpoint_for(&ConsumerName::new("y")), &at(50));
    assert_eq!(moved.counter, free.counter + 1, "a seek fences like every write");
    // Conditional like every write: a stale view conflicts.
    assert!(is_conflict(&t.mutate(&LeaseMutation::on(&free, seek(at(5), false))).await));
    // Forced on a held lease: the owner loses it (its next write conflicts).
    let b = t.mutate(&LeaseMutation::on(&moved, LeaseChange::Take { owner: WorkerId::new("b") })).await.unwrap();
    let forced = t.mutate(&LeaseMutation::on(&b, seek(at(7), true))).await.unwrap();
    assert_eq!((forced.owner.clone(), forced.checkpoint_for(&x)), (None, &at(7)));
    assert!(is_conflict(&t.mutate(&LeaseMutation::on(&b, LeaseChange::Renew)).await), "the old owner is fenced");
    // Open intents of the consumer refuse it, even forced.
    let c = t.mutate(&LeaseMutation::on(&forced, LeaseChange::Take { owner: WorkerId::new("c") })).await.unwrap();
    let record =
        LeaseChange::RecordIntents { consumer: x.clone(), intents: vec![intent("k", 8, 9)], replacing: vec![] };
    let c = t.mutate(&LeaseMutation::on(&c, record)).await.unwrap();
    let orphaning = t.mutate(&LeaseMutation::on(&c, seek(at(20), true))).await;
    assert!(matches!(&orphaning, Err(LeaseError::Invalid(m)) if m.contains("1 open intents")), "{orphaning:?}");
    // An ended shard cannot be sought.
    let ended = t
        .mutate(&LeaseMutation::on(
            &c,
            LeaseChange::Checkpoint {
                checkpoints: [(x.clone(), Checkpoint::ShardEnd), (ConsumerName::new("y"), Checkpoint::ShardEnd)].into(),
                ended_with_children: Some(Vec::new()),
            },
        ))
        .await
        .unwrap();
    let after_end = t.mutate(&LeaseMutation::on(&ended, seek(at(1), true))).await;
    assert!(matches!(&after_end, Err(LeaseError::Invalid(m)) if m.contains("ended")), "{after_end:?}");
}

fn intent(target: &str, first: u128, last: u128) -> Intent {
    Intent {
        target: target.into(),
        scope: "tenant=a".into(),
        first: ExtendedSequenceNumber::plain(SequenceNumber::from_u128(first)),
        last: ExtendedSequenceNumber::plain(SequenceNumber::from_u128(last)),
        parts: vec![],
        except: vec![],
    }
}

/// An intent that lists its parts exactly (runs of parts of records).
fn exact_intent(target: &str, first: u128, last: u128) -> Intent {
    let part = |n: u128, part: u32| weir_core::PartPosition {
        position: ExtendedSequenceNumber::new(SequenceNumber::from_u128(n), 3),
        part,
    };
    Intent {
        parts: vec![
            weir_core::PartRun { first: part(first, 1), last: part(first, 2) },
            weir_core::PartRun { first: part(last, 0), last: part(last, 0) },
        ],
        ..intent(target, first, last)
    }
}

async fn intents_are_fenced_and_pruned(t: Arc<dyn LeaseTable>) {
    let arch = ConsumerName::new("arch");
    let record =
        |intents: Vec<Intent>| LeaseChange::RecordIntents { consumer: arch.clone(), intents, replacing: vec![] };
    let a = taken_lease(t.as_ref(), "s-1", "a").await;
    let b = taken_lease(t.as_ref(), "s-2", "a").await;
    let done = t
        .mutate_all(&[
            LeaseMutation::on(&a, record(vec![intent("k1", 1, 10), exact_intent("k2", 11, 20)])),
            LeaseMutation::on(&b, record(vec![intent("k1", 5, 6)])),
        ])
        .await
        .unwrap();
    assert_eq!(done[0].counter, a.counter + 1, "an intent write is fenced like a checkpoint");
    let stored = t.get(&ShardId::new("s-1")).await.unwrap().unwrap();
    assert_eq!(stored.intents[&arch], vec![intent("k1", 1, 10), exact_intent("k2", 11, 20)], "stored as written");
    // A stale writer cannot add intents.
    assert!(is_conflict(&t.mutate(&LeaseMutation::on(&a, record(vec![intent("k3", 21, 30)]))).await));
    // A checkpoint at 10 passes k1 but not k2; other consumers' checkpoints prune nothing.
    let l = t.mutate(&LeaseMutation::on(&stored, cps(&[("arch", at(10)), ("other", at(99))]))).await.unwrap();
    assert_eq!(l.intents[&arch], vec![exact_intent("k2", 11, 20)]);
    let l = t.mutate(&LeaseMutation::on(&l, cps(&[("arch", at(25))]))).await.unwrap();
    assert!(l.intents.is_empty(), "{:?}", l.intents);
    assert_eq!(t.get(&ShardId::new("s-1")).await.unwrap().unwrap(), l);
    // An unowned lease takes no intents.
    let free = t.mutate(&LeaseMutation::on(&l, LeaseChange::Release)).await.unwrap();
    assert!(is_conflict(&t.mutate(&LeaseMutation::on(&free, record(vec![intent("k4", 1, 2)]))).await));
}

async fn transactions_are_all_or_nothing(t: Arc<dyn LeaseTable>) {
    let a = taken_lease(t.as_ref(), "s-1", "w").await;
    let b = taken_lease(t.as_ref(), "s-2", "w").await;
    let both = [LeaseMutation::on(&a, cps(&[("arch", at(10))])), LeaseMutation::on(&b, cps(&[("arch", at(20))]))];
    let done = t.mutate_all(&both).await.unwrap();
    assert_eq!(done.len(), 2);
    assert_eq!(done[1].checkpoint_for(&ConsumerName::new("arch")), &at(20));
    // One stale condition (a's old counter): nothing of the batch is written.
    let (a2, b2) = (done[0].clone(), done[1].clone());
    let stale = [LeaseMutation::on(&b2, cps(&[("arch", at(30))])), LeaseMutation::on(&a, cps(&[("arch", at(40))]))];
    assert!(is_conflict(&t.mutate_all(&stale).await));
    let stored_b = t.get(&ShardId::new("s-2")).await.unwrap().unwrap();
    assert_eq!(stored_b, b2, "the transaction was applied in part");
    // A backwards checkpoint anywhere rejects the whole batch too.
    let backwards = [LeaseMutation::on(&a2, cps(&[("arch", at(50))])), LeaseMutation::on(&b2, cps(&[("arch", at(5))]))];
    assert!(matches!(t.mutate_all(&backwards).await, Err(LeaseError::CheckpointBackwards { .. })));
    assert_eq!(t.get(&ShardId::new("s-1")).await.unwrap().unwrap(), a2);
    // The same lease twice, or nothing at all, is refused before any write.
    let twice = [LeaseMutation::on(&a2, LeaseChange::Renew), LeaseMutation::on(&a2, LeaseChange::Renew)];
    assert!(matches!(t.mutate_all(&twice).await, Err(LeaseError::Invalid(_))));
    assert!(matches!(t.mutate_all(&[]).await, Err(LeaseError::Invalid(_))));
}

async fn create_never_overwrites(t: Arc<dyn LeaseTable>) {
    assert!(t.create_if_absent(new_lease("s-1", &["s-0"])).await.unwrap());
    let me = WorkerId::new("w1");
    let l = t.get(&ShardId::new("s-1")).await.unwrap().expect("created lease readable");
    assert_eq!(l.owner, None);
    assert_eq!(l.counter, 0);
    assert_eq!(l.parents, vec![ShardId::new("s-0")]);
    t.mutate(&LeaseMutation::on(&l, LeaseChange::Take { owner: me.clone() })).await.unwrap();
    assert!(!t.create_if_absent(new_lease("s-1", &[])).await.unwrap());
    let again = t.get(&ShardId::new("s-1")).await.unwrap().unwrap();
    assert_eq!(again.owner, Some(me.clone()), "create_if_absent overwrote an existing lease");
    assert_eq!(again.parents, vec![ShardId::new("s-0")]);
    let missing = LeaseMutation {
        key: ShardId::new("nope"),
        expected_owner: None,
        expected_counter: 0,
        change: LeaseChange::Renew,
    };
    assert!(matches!(t.mutate(&missing).await, Err(LeaseError::NotFound(_))));
    assert!(t.get(&ShardId::new("nope")).await.unwrap().is_none());

    // Created already taken: owner and counter as a take leaves them; never over an
    // existing lease.
    let w2 = WorkerId::new("w2");
    let taken = t.create_taken(new_lease("s-2", &["s-1"]), &w2).await.unwrap().expect("created");
    assert_eq!((taken.owner.as_ref(), taken.counter), (Some(&w2), 1));
    assert_eq!(t.get(&ShardId::new("s-2")).await.unwrap().as_ref(), Some(&taken));
    assert_eq!(t.create_taken(new_lease("s-2", &[]), &me).await.unwrap(), None);
    assert_eq!(t.create_taken(new_lease("s-1", &[]), &w2).await.unwrap(), None);
    assert_eq!(t.get(&ShardId::new("s-2")).await.unwrap().unwrap().owner, Some(w2), "not overwritten");
    t.mutate(&LeaseMutation::on(&taken, LeaseChange::Renew)).await.expect("the holder writes on from it");
}

async fn take_renew_and_fencing(t: Arc<dyn LeaseTable>) {
    t.create_if_absent(new_lease("s-1", &[])).await.unwrap();
    let l0 = t.get(&ShardId::new("s-1")).await.unwrap().unwrap();
    let a = WorkerId::new("a");
    let b = WorkerId::new("b");
    let l1 = t.mutate(&LeaseMutation::on(&l0, LeaseChange::Take { owner: a.clone() })).await.unwrap();
    assert_eq!((l1.owner.clone(), l1.counter), (Some(a.clone()), 1));
    let l2 = t.mutate(&LeaseMutation::on(&l1, LeaseChange::Renew)).await.unwrap();
    assert_eq!(l2.counter, 2);
    // A renewal with a stale counter is rejected.
    assert!(is_conflict(&t.mutate(&LeaseMutation::on(&l1, LeaseChange::Renew)).await));
    // b steals with the current view; a's writes are fenced from now on.
    let l3 = t.mutate(&LeaseMutation::on(&l2, LeaseChange::Take { owner: b.clone() })).await.unwrap();
    assert_eq!(l3.owner, Some(b.clone()));
    assert!(is_conflict(&t.mutate(&LeaseMutation::on(&l2, LeaseChange::Renew)).await));
    assert!(is_conflict(&t.mutate(&LeaseMutation::on(&l2, cps(&[("c", at(5))]))).await));
    let stored = t.get(&ShardId::new("s-1")).await.unwrap().unwrap();
    assert_eq!(stored, l3, "a rejected write changed the lease");
    // Renewing an unowned lease is a conflict, not an accidental take.
    let free = t.mutate(&LeaseMutation::on(&l3, LeaseChange::Release)).await.unwrap();
    assert!(is_conflict(&t.mutate(&LeaseMutation::on(&free, LeaseChange::Renew)).await));
}

async fn concurrent_takes_one_wins(t: Arc<dyn LeaseTable>) {
    t.create_if_absent(new_lease("s-1", &[])).await.unwrap();
    let l0 = t.get(&ShardId::new("s-1")).await.unwrap().unwrap();
    let mut tasks = Vec::new();
    for i in 0..8 {
        let t = t.clone();
        let m = LeaseMutation::on(&l0, LeaseChange::Take { owner: WorkerId::new(format!("w{i}")) });
        tasks.push(tokio::spawn(async move { t.mutate(&m).await }));
    }
    let mut wins = 0;
    for task in tasks {
        match task.await.unwrap() {
            Ok(_) => wins += 1,
            Err(e) => assert!(matches!(e, LeaseError::Conflict { .. }), "unexpected {e}"),
        }
    }
    assert_eq!(wins, 1, "exactly one of concurrent takes must win");
    assert_eq!(t.get(&ShardId::new("s-1")).await.unwrap().unwrap().counter, 1);
}

async fn checkpoints_never_move_backwards(t: Arc<dyn LeaseTable>) {
    let l = taken_lease(t.as_ref(), "s-1", "a").await;
    let l = t.mutate(&LeaseMutation::on(&l, cps(&[("x", at(100)), ("y", at(7))]))).await.unwrap();
    assert_eq!(l.checkpoint_for(&ConsumerName::new("x")), &at(100));
    assert_eq!(l.checkpoint_for(&ConsumerName::new("z")), &Checkpoint::TrimHorizon);
    // Numeric, not lexicographic: 99 < 100.
    let back = t.mutate(&LeaseMutation::on(&l, cps(&[("x", at(99))]))).await;
    assert!(matches!(back, Err(LeaseError::CheckpointBackwards { .. })), "{back:?}");
    // The rejection is whole: y did not move either.
    let mixed = t.mutate(&LeaseMutation::on(&l, cps(&[("y", at(8)), ("x", at(99))]))).await;
    assert!(mixed.is_err());
    let stored = t.get(&ShardId::new("s-1")).await.unwrap().unwrap();
    assert_eq!(stored.checkpoint_for(&ConsumerName::new("y")), &at(7));
    let l = t.mutate(&LeaseMutation::on(&stored, cps(&[("x", Checkpoint::ShardEnd)]))).await.unwrap();
    let after_end = t.mutate(&LeaseMutation::on(&l, cps(&[("x", at(1000))]))).await;
    assert!(matches!(after_end, Err(LeaseError::CheckpointBackwards { .. })));
}

async fn handoff_flow(t: Arc<dyn LeaseTable>) {
    let (a, b) = (WorkerId::new("a"), WorkerId::new("b"));
    let l = taken_lease(t.as_ref(), "s-1", "a").await;
    // b saw an older counter: a handoff request only needs the owner to match.
    let mut stale = l.clone();
    stale.counter = 0;
    let req = t.mutate(&LeaseMutation::on(&stale, LeaseChange::RequestHandoff { to: b.clone() })).await.unwrap();
    assert_eq!(req.counter, l.counter, "handoff request must not bump the counter");
    assert_eq!(req.handoff_to, Some(b.clone()));
    // A second request while one is pending is refused.
    let again = t.mutate(&LeaseMutation::on(&req, LeaseChange::RequestHandoff { to: WorkerId::new("c") })).await;
    assert!(is_conflict(&again));
    // The owner's renewal still works and shows the request.
    let renewed = t.mutate(&LeaseMutation::on(&l, LeaseChange::Renew)).await.unwrap();
    assert_eq!(renewed.handoff_to, Some(b.clone()));
    let moved = t.mutate(&LeaseMutation::on(&renewed, LeaseChange::Transfer { to: b.clone() })).await.unwrap();
    assert_eq!((moved.owner.clone(), moved.handoff_to.clone()), (Some(b.clone()), None));
    assert!(is_conflict(&t.mutate(&LeaseMutation::on(&renewed, LeaseChange::Renew)).await));
    // A request to a non-owner view fails.
    let wrong = t.mutate(&LeaseMutation::on(&renewed, LeaseChange::RequestHandoff { to: a })).await;
    assert!(is_conflict(&wrong));
}

/// `mutate_seen`, the holder's write from the lease as it last wrote it, has the
/// outcome of `mutate`: it lands on an unchanged lease, keeps a handoff request made
/// since (the counter stays on a request), and is fenced once anyone else wrote.
async fn writes_from_the_holders_own_view(t: Arc<dyn LeaseTable>) {
    let key = ShardId::new("s-1");
    let l = taken_lease(t.as_ref(), "s-1", "a").await;
    let renewed = t.mutate_seen(&l, LeaseChange::Renew).await.unwrap();
    assert_eq!(renewed.counter, l.counter + 1);
    assert_eq!(t.get(&key).await.unwrap().unwrap(), renewed, "stored as returned");
    let checked = t.mutate_seen(&renewed, cps(&[("c", at(5))])).await.unwrap();
    assert_eq!(checked.checkpoint_for(&ConsumerName::new("c")), &at(5));
    // Backwards is refused without a write.
    let back = t.mutate_seen(&checked, cps(&[("c", at(4))])).await;
    assert!(matches!(back, Err(LeaseError::CheckpointBackwards { .. })), "{back:?}");
    // A handoff request since the holder's view: the write lands and keeps it.
    let b = WorkerId::new("b");
    t.mutate(&LeaseMutation::on(&checked, LeaseChange::RequestHandoff { to: b.clone() })).await.unwrap();
    let kept = t.mutate_seen(&checked, LeaseChange::Renew).await.unwrap();
    assert_eq!((kept.counter, kept.handoff_to.clone()), (checked.counter + 1, Some(b.clone())));
    assert_eq!(t.get(&key).await.unwrap().unwrap(), kept);
    // Another worker took it: the old view is fenced and the lease unchanged.
    let taken = t.mutate(&LeaseMutation::on(&kept, LeaseChange::Take { owner: b })).await.unwrap();
    assert!(is_conflict(&t.mutate_seen(&kept, LeaseChange::Renew).await));
    assert!(is_conflict(&t.mutate_seen(&kept, cps(&[("c", at(9))])).await));
    assert_eq!(t.get(&key).await.unwrap().unwrap(), taken, "a fenced write changed the lease");
}

async fn release_and_end(t: Arc<dyn LeaseTable>) {
    let l = taken_lease(t.as_ref(), "s-1", "a").await;
    let asked = t.mutate(&LeaseMutation::on(&l, LeaseChange::RequestHandoff { to: WorkerId::new("b") })).await.unwrap();
    let ended = t
        .mutate(&LeaseMutation::on(
            &asked,
            LeaseChange::Checkpoint {
                checkpoints: [(ConsumerName::new("x"), Checkpoint::ShardEnd)].into(),
                ended_with_children: Some(vec![ShardId::new("s-2"), ShardId::new("s-3")]),
            },
        ))
        .await
        .unwrap();
    assert!(ended.ended);
    assert_eq!((ended.owner.clone(), ended.handoff_to.clone()), (None, None), "the end's write lets the lease go");
    assert!(is_conflict(&t.mutate(&LeaseMutation::on(&asked, LeaseChange::Renew)).await), "the holder is fenced");
    let stored = t.get(&ShardId::new("s-1")).await.unwrap().unwrap();
    assert_eq!(stored, ended);
    assert_eq!(stored.children, vec![ShardId::new("s-2"), ShardId::new("s-3")]);
    // delete_ended: only the ended lease as seen, held by nobody.
    let older = weir_core::Lease { counter: ended.counter - 1, ..ended.clone() };
    assert!(!t.delete_ended(&older).await.unwrap(), "a lease changed since it was seen is not deleted");
    let open = taken_lease(t.as_ref(), "s-9", "a").await;
    let freed = t.mutate(&LeaseMutation::on(&open, LeaseChange::Release)).await.unwrap();
    assert!(!t.delete_ended(&freed).await.unwrap(), "a lease not ended is not deleted");
    assert!(t.get(&ShardId::new("s-9")).await.unwrap().is_some());
    assert!(t.delete_ended(&stored).await.unwrap());
    assert!(t.get(&ShardId::new("s-1")).await.unwrap().is_none());
    assert!(!t.delete_ended(&stored).await.unwrap(), "deleted once");
    t.delete(&ShardId::new("s-9")).await.unwrap();
    assert!(t.get(&ShardId::new("s-9")).await.unwrap().is_none());
}

async fn workers_and_listing(t: Arc<dyn LeaseTable>) {
    for i in 0..150 {
        t.create_if_absent(new_lease(&format!("shard-{i:04}"), &[])).await.unwrap();
    }
    let mut keys: Vec<String> = t.list().await.unwrap().iter().map(|l| l.key.to_string()).collect();
    keys.sort();
    assert_eq!(keys.len(), 150, "list must return every lease (paging)");
    assert_eq!(keys[149], "shard-0149");
    let w = WorkerId::new("w1");
    t.heartbeat(&w, "a", WorkerLoad { held: 0, active: 150 }).await.unwrap();
    let first = t.list_workers().await.unwrap();
    t.heartbeat(&w, "a", WorkerLoad { held: 75, active: 150 }).await.unwrap();
    let second = t.list_workers().await.unwrap();
    assert_eq!(first.len(), 1);
    assert_eq!((first[0].instance.as_str(), first[0].load), ("a", WorkerLoad { held: 0, active: 150 }));
    assert!(second[0].counter > first[0].counter, "heartbeat must change the counter");
    assert_eq!(second[0].load, WorkerLoad { held: 75, active: 150 }, "a heartbeat stores the load it reports");
    t.remove_worker(&w, "a").await.unwrap();
    assert!(t.list_workers().await.unwrap().is_empty());

    // Many workers (a store may spread their records): every one is listed, once.
    let ids: Vec<WorkerId> = (0..40).map(|i| WorkerId::new(format!("w-{i:02}"))).collect();
    for (i, w) in ids.iter().enumerate() {
        t.heartbeat(w, "a", WorkerLoad { held: u32::try_from(i).unwrap_or(0), active: 150 }).await.unwrap();
    }
    let mut listed: Vec<(WorkerId, u32)> =
        t.list_workers().await.unwrap().into_iter().map(|h| (h.worker, h.load.held)).collect();
    listed.sort();
    assert_eq!(listed.len(), 40, "every worker record is listed: {listed:?}");
    assert!(listed.iter().enumerate().all(|(i, (w, held))| *w == ids[i] && *held as usize == i), "{listed:?}");

    // The relaxed readings see the same, at the latest after a moment (eventually
    // consistent reads; current at once in a store on one node).
    let current = (relaxed_keys(t.list().await.unwrap()), t.list_workers().await.unwrap().len());
    let mut agreed = false;
    for _ in 0..50 {
        let relaxed = (relaxed_keys(t.list_relaxed().await.unwrap()), t.list_workers_relaxed().await.unwrap().len());
        if relaxed == current {
            agreed = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(agreed, "the relaxed readings never caught up with {} leases and {} workers", current.0.len(), current.1);

    // The parts hold every lease once; a part past the last is empty.
    let parts = t.lease_parts();
    assert!(parts >= 1);
    let mut in_parts = Vec::new();
    for _ in 0..50 {
        in_parts.clear();
        for p in 0..parts {
            in_parts.extend(relaxed_keys(t.list_part_relaxed(p).await.unwrap()));
        }
        in_parts.sort();
        if in_parts == current.0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(in_parts, current.0, "the {parts} parts together are the leases, each once");
    assert!(t.list_part_relaxed(parts).await.unwrap().is_empty());
    for w in &ids {
        t.remove_worker(w, "a").await.unwrap();
    }
}

fn relaxed_keys(leases: Vec<weir_core::Lease>) -> Vec<String> {
    let mut keys: Vec<String> = leases.into_iter().map(|l| l.key.to_string()).collect();
    keys.sort();
    keys
}

/// The namespace record is created once and changed only from what was read.
async fn namespace_record(t: Arc<dyn LeaseTable>) {
    assert_eq!(t.namespace_meta().await.unwrap(), None);
    let first = NamespaceMeta { stream: "orders".into(), format: 1 };
    assert!(t.put_namespace_meta(&first, None).await.unwrap());
    assert_eq!(t.namespace_meta().await.unwrap(), Some(first.clone()));
    let other = NamespaceMeta { stream: "mcp-events".into(), format: 1 };
    assert!(!t.put_namespace_meta(&other, None).await.unwrap(), "created once");
    let stale = NamespaceMeta { stream: "orders".into(), format: 0 };
    let newer = NamespaceMeta { stream: "orders".into(), format: 2 };
    assert!(!t.put_namespace_meta(&newer, Some(&stale)).await.unwrap(), "changed only from what is stored");
    assert!(t.put_namespace_meta(&newer, Some(&first)).await.unwrap());
    assert_eq!(t.namespace_meta().await.unwrap(), Some(newer));
    assert!(t.list().await.unwrap().is_empty(), "the record is not a lease");
    assert!(t.list_workers().await.unwrap().is_empty(), "nor a worker");
}

/// A worker record belongs to one instance: another process with the same id is
/// refused, takes the record over only while it is unchanged, and removing it by
/// another instance leaves it.
async fn worker_instances(t: Arc<dyn LeaseTable>) {
    let w = WorkerId::new("w1");
    t.heartbeat(&w, "a", WorkerLoad { held: 2, active: 4 }).await.unwrap();
    match t.heartbeat(&w, "b", WorkerLoad::default()).await {
        Err(LeaseError::WorkerIdInUse { worker, instance }) => {
            assert_eq!((worker, instance.as_str()), (w.clone(), "a"));
        }
        other => panic!("a second instance's heartbeat must be refused, got {other:?}"),
    }
    let seen = t.list_workers().await.unwrap().remove(0);
    assert_eq!(
        (seen.instance.as_str(), seen.counter, seen.load),
        ("a", 1, WorkerLoad { held: 2, active: 4 }),
        "a refused heartbeat changes nothing"
    );
    t.remove_worker(&w, "b").await.unwrap();
    assert_eq!(t.list_workers().await.unwrap().len(), 1, "another instance cannot remove the record");
    // The record changed since it was seen: no claim.
    t.heartbeat(&w, "a", WorkerLoad::default()).await.unwrap();
    assert!(!t.claim_worker(&seen, "b").await.unwrap(), "a claim on a changed record must fail");
    let seen = t.list_workers().await.unwrap().remove(0);
    assert!(t.claim_worker(&seen, "b").await.unwrap(), "a claim on an unchanged record succeeds");
    let now = t.list_workers().await.unwrap().remove(0);
    assert_eq!((now.instance.as_str(), now.load), ("b", seen.load), "a claim keeps the load");
    assert!(now.counter > seen.counter, "a claim changes the counter");
    assert!(!t.claim_worker(&seen, "c").await.unwrap(), "a record is claimed once");
    assert!(
        matches!(t.heartbeat(&w, "a", WorkerLoad::default()).await, Err(LeaseError::WorkerIdInUse { .. })),
        "the old instance is out"
    );
    t.heartbeat(&w, "b", WorkerLoad::default()).await.unwrap();
    t.remove_worker(&w, "b").await.unwrap();
    assert!(t.list_workers().await.unwrap().is_empty());
    assert!(!t.claim_worker(&now, "c").await.unwrap(), "no claim on a removed record");
}
