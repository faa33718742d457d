//! A lease this worker holds.
//!
//! Every write goes through here, serialised by one async mutex, and is conditioned on
//! the last stored state this worker saw (owner and counter). The lease is *valid*
//! until `failover` after the start of the last successful write: another worker can
//! only take it after seeing its counter unchanged for `failover` by its own clock, and
//! it can only have seen the last change after that write started. So a worker that
//! stops when validity ends has stopped before anyone else may start. Validity is cut
//! to 90% of `failover` so that differences in clock rates between hosts cannot eat
//! the margin.
//!
//! A write whose outcome is unknown (a timeout or a lost reply: it may have landed) is
//! remembered with the lease it would have stored. The next write then meets a counter
//! it did not expect; before calling the lease lost, the stored lease is read back: if
//! it is exactly what the unknown write would have stored (a handoff request aside, the
//! one write that others make on a held lease), that write landed, and the new write is
//! made on it.
//!
//! A lease is also valid only while this worker's heartbeat is ([`Liveness`]): others
//! take every lease of a worker whose heartbeat stopped.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use weir_core::ports::LeaseTable;
use weir_core::{Checkpoint, ConsumerName, Intent, Lease, LeaseChange, LeaseError, LeaseMutation, ShardId, WorkerId};

use crate::liveness::Liveness;

/// Why a write was refused locally or by the store.
#[derive(Debug, thiserror::Error)]
pub(crate) enum HeldError {
    #[error("lease {0} is no longer held")]
    Lost(ShardId),
    #[error(transparent)]
    Store(#[from] LeaseError),
}

/// The lease as this worker last knew it stored, and a write whose outcome is unknown.
struct Known {
    lease: Lease,
    /// What the unknown write would have stored, and when it started.
    unsettled: Option<(Lease, Instant)>,
}

impl std::ops::Deref for Known {
    type Target = Lease;
    fn deref(&self) -> &Lease {
        &self.lease
    }
}

pub(crate) struct HeldLease {
    key: ShardId,
    table: Arc<dyn LeaseTable>,
    failover: Duration,
    state: tokio::sync::Mutex<Known>,
    valid_until: Mutex<Instant>,
    liveness: Arc<Liveness>,
    /// The heartbeat epoch the lease was taken in.
    epoch: u64,
    lost: CancellationToken,
    handoff: watch::Sender<Option<WorkerId>>,
}

/// The most item bytes one transaction carries: DynamoDB's 4 MB, less a tenth for
/// the leases' changes between the estimate and the write (renewals, handoff requests).
const TRANSACTION_BUDGET: usize = weir_core::ports::MAX_TRANSACTION_BYTES / 10 * 9;

/// How long after the start of a successful write the lease may be used.
fn validity(failover: Duration) -> Duration {
    failover.mul_f64(0.9)
}

impl HeldLease {
    /// A lease just taken; `write_started` is when the taking write began. Valid
    /// while `liveness` is too.
    pub(crate) fn new(
        lease: Lease,
        write_started: Instant,
        table: Arc<dyn LeaseTable>,
        failover: Duration,
        liveness: Arc<Liveness>,
    ) -> Arc<Self> {
        let (handoff, _) = watch::channel(lease.handoff_to.clone());
        Arc::new(Self {
            key: lease.key.clone(),
            table,
            failover: validity(failover),
            state: tokio::sync::Mutex::new(Known { lease, unsettled: None }),
            valid_until: Mutex::new(write_started + validity(failover)),
            epoch: liveness.epoch(),
            liveness,
            lost: CancellationToken::new(),
            handoff,
        })
    }

    pub(crate) fn key(&self) -> &ShardId {
        &self.key
    }

    pub(crate) async fn snapshot(&self) -> Lease {
        self.state.lock().await.lease.clone()
    }

    /// Fires when the lease is known lost.
    pub(crate) fn lost(&self) -> &CancellationToken {
        &self.lost
    }

    /// Until when the lease may be used: the earlier of its own writes' validity and
    /// the heartbeat's.
    pub(crate) fn valid_until(&self) -> Instant {
        self.written_until().min(self.liveness.until(self.epoch))
    }

    /// The start of the latest landed write of the lease plus its validity.
    fn written_until(&self) -> Instant {
        *self.valid_until.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether a write of this worker that landed (a take, renewal or checkpoint)
    /// started less than `within` ago: the table's counter moved then, so the lease
    /// needs no renewal yet.
    pub(crate) fn written_within(&self, within: Duration) -> bool {
        Instant::now() + self.failover < self.written_until() + within
    }

    /// Whether the lease may still be used: not lost and within its validity.
    pub(crate) fn is_valid(&self) -> bool {
        !self.lost.is_cancelled() && Instant::now() < self.valid_until()
    }

    pub(crate) fn mark_lost(&self) {
        if !self.lost.is_cancelled() {
            metrics::counter!(crate::metrics::LEASES_LOST).increment(1);
            tracing::warn!(shard = %self.key, "lease lost");
        }
        self.lost.cancel();
    }

    /// Watches handoff requests (`Some(worker)` when one is pending).
    pub(crate) fn handoff(&self) -> watch::Receiver<Option<WorkerId>> {
        self.handoff.subscribe()
    }

    async fn write(&self, change: LeaseChange) -> Result<Lease, HeldError> {
        self.write_seen(change).await.map(|(_, next)| next)
    }

    /// [`HeldLease::write`], also returning the lease as stored before the write.
    async fn write_seen(&self, change: LeaseChange) -> Result<(Lease, Lease), HeldError> {
        let mut state = self.state.lock().await;
        // At most twice: once more when the conflict was our own earlier write landing.
        for _ in 0..2 {
            if !self.is_valid() {
                self.mark_lost();
                return Err(HeldError::Lost(self.key.clone()));
            }
            let started = Instant::now();
            let owner_before = state.owner.clone();
            // A write still unanswered when the lease's validity runs out (a hung store:
            // a partition, a black-holed endpoint) would hold this lease's writers past
            // the point where another worker may take it: give up there, as lost. (The
            // write may still land; its counter then fences any later write of ours.)
            let mutation = LeaseMutation::on(&state, change.clone());
            // The lease as this holder last wrote it: a store may write without reading.
            let answered =
                tokio::time::timeout_at(self.valid_until(), self.table.mutate_seen(&state.lease, change.clone())).await;
            let Ok(answered) = answered else {
                self.mark_lost();
                return Err(HeldError::Lost(self.key.clone()));
            };
            match answered {
                Ok(next) => {
                    let still_mine = next.owner == owner_before;
                    state.unsettled = None;
                    let before = std::mem::replace(&mut state.lease, next.clone());
                    if still_mine {
                        self.extend_validity(started);
                    }
                    self.publish_handoff(&next);
                    if change.ends_shard() {
                        // Under the lock: no write of this holder follows the end.
                        self.lost.cancel();
                    }
                    return Ok((before, next));
                }
                Err(LeaseError::Conflict { .. }) | Err(LeaseError::NotFound(_)) => {
                    let before = state.lease.clone();
                    if self.settle_unknown_write(&mut state).await {
                        // The write that landed ended the shard and let the lease go:
                        // it was this one (nothing is written after an end).
                        if state.lease.ended && state.lease.owner.is_none() && change.ends_shard() {
                            self.lost.cancel();
                            return Ok((before, state.lease.clone()));
                        }
                        continue;
                    }
                    self.mark_lost();
                    return Err(HeldError::Lost(self.key.clone()));
                }
                Err(e) => {
                    // It may have landed: remember what it would have stored.
                    if let Ok(would) = mutation.apply(&state) {
                        state.unsettled = Some((would, started));
                    }
                    return Err(HeldError::Store(e));
                }
            }
        }
        self.mark_lost();
        Err(HeldError::Lost(self.key.clone()))
    }

    /// After a conflict: whether an earlier write of ours whose outcome was unknown is
    /// what the table holds (then `state` takes it, with the validity it earned).
    async fn settle_unknown_write(&self, state: &mut Known) -> bool {
        let Some((would, started)) = state.unsettled.take() else { return false };
        let read = tokio::time::timeout_at(self.valid_until(), self.table.get(&self.key)).await;
        let Ok(Ok(Some(stored))) = read else { return false };
        // A handoff request is the one write others make on a held lease (the counter
        // stays); anything else means the lease moved on without us.
        let mine = Lease { handoff_to: stored.handoff_to.clone(), ..would };
        if stored != mine {
            return false;
        }
        tracing::debug!(shard = %self.key, counter = stored.counter, "an earlier write whose answer was lost had landed");
        self.publish_handoff(&stored);
        state.lease = stored;
        self.extend_validity(started);
        true
    }

    fn extend_validity(&self, write_started: Instant) {
        let mut until = self.valid_until.lock().unwrap_or_else(|p| p.into_inner());
        *until = (*until).max(write_started + self.failover);
    }

    fn publish_handoff(&self, stored: &Lease) {
        if stored.handoff_to != *self.handoff.borrow() {
            self.handoff.send_replace(stored.handoff_to.clone());
        }
    }

    /// Renews the lease. A conflict marks it lost; a store error leaves it to expire.
    pub(crate) async fn renew(&self) -> Result<(), HeldError> {
        self.write(LeaseChange::Renew).await.map(|_| ())
    }

    /// Writes checkpoints (and the end of the shard). Returns, per consumer, the
    /// intents the write dropped from the lease (the new checkpoints passed them).
    ///
    /// Writing the end also lets the lease go (see [`LeaseChange::Checkpoint`]): after
    /// it the lease is no longer valid here, as after [`HeldLease::let_go`].
    pub(crate) async fn checkpoint(
        &self,
        checkpoints: BTreeMap<ConsumerName, Checkpoint>,
        ended_with_children: Option<Vec<ShardId>>,
    ) -> Result<BTreeMap<ConsumerName, Vec<Intent>>, HeldError> {
        metrics::counter!(crate::metrics::CHECKPOINT_WRITES).increment(1);
        let (before, after) = self.write_seen(LeaseChange::Checkpoint { checkpoints, ended_with_children }).await?;
        let mut passed = BTreeMap::new();
        // A checkpoint only drops intents and keeps the rest in order: one walk.
        for (consumer, open) in before.intents {
            let mut kept = after.intents.get(&consumer).into_iter().flatten().peekable();
            let gone: Vec<Intent> = open
                .into_iter()
                .filter(|i| {
                    let stays = kept.peek() == Some(&i);
                    if stays {
                        kept.next();
                    }
                    !stays
                })
                .collect();
            if !gone.is_empty() {
                passed.insert(consumer, gone);
            }
        }
        Ok(passed)
    }

    /// Applies one change to each of several held leases in as few transactions as the
    /// store allows (at most 25 leases and about 3.6 MB of items each: DynamoDB takes
    /// 100 and 4 MB), each conditioned on the owner and counter this worker last saw.
    /// Returns the keys of leases that are not held (refused before writing, or
    /// rejected by the store: those are marked lost). A transaction that fails leaves
    /// earlier transactions of the call in place.
    pub(crate) async fn write_many(
        changes: Vec<(Arc<HeldLease>, LeaseChange)>,
    ) -> Result<(), (Vec<ShardId>, Option<LeaseError>)> {
        let mut changes = changes;
        changes.sort_by(|a, b| a.0.key.cmp(&b.0.key));
        let not_held: Vec<ShardId> =
            changes.iter().filter(|(h, _)| !h.is_valid()).map(|(h, _)| h.key.clone()).collect();
        if !not_held.is_empty() {
            for (h, _) in &changes {
                if !h.is_valid() {
                    h.mark_lost();
                }
            }
            return Err((not_held, None));
        }
        for chunk in Self::transactions(&changes).await {
            // Locks in key order (the only place that holds more than one).
            let mut states = Vec::with_capacity(chunk.len());
            for (h, _) in chunk {
                states.push(h.state.lock().await);
            }
            // Again after each conflict that was our own earlier write landing.
            let mut attempts = 0;
            loop {
                attempts += 1;
                let mutations: Vec<LeaseMutation> = chunk
                    .iter()
                    .zip(&states)
                    .map(|((_, change), state)| LeaseMutation::on(&state.lease, change.clone()))
                    .collect();
                let started = Instant::now();
                // Bounded by the earliest validity in the chunk, as in `write_seen`.
                let deadline = chunk.iter().map(|(h, _)| h.valid_until()).min().unwrap_or(started);
                let Ok(answered) = tokio::time::timeout_at(deadline, chunk[0].0.table.mutate_all(&mutations)).await
                else {
                    for (h, _) in chunk {
                        h.mark_lost();
                    }
                    return Err((chunk.iter().map(|(h, _)| h.key.clone()).collect(), None));
                };
                match answered {
                    Ok(stored) => {
                        for (((h, _), state), next) in chunk.iter().zip(states.iter_mut()).zip(stored) {
                            state.lease = next;
                            state.unsettled = None;
                            h.extend_validity(started);
                        }
                        break;
                    }
                    Err(LeaseError::Conflict { key, .. }) | Err(LeaseError::NotFound(key)) => {
                        if let Some(i) = chunk.iter().position(|(h, _)| h.key == key) {
                            if attempts <= chunk.len() && chunk[i].0.settle_unknown_write(&mut states[i]).await {
                                continue;
                            }
                            chunk[i].0.mark_lost();
                        }
                        return Err((vec![key], None));
                    }
                    Err(e) => {
                        // It may have landed (all of it): remember what it would have stored.
                        for (state, m) in states.iter_mut().zip(&mutations) {
                            if let Ok(would) = m.apply(&state.lease) {
                                state.unsettled = Some((would, started));
                            }
                        }
                        return Err((Vec::new(), Some(e)));
                    }
                }
            }
        }
        Ok(())
    }

    /// `changes` cut into transactions: at most [`MAX_MUTATIONS_PER_TRANSACTION`] leases
    /// and [`TRANSACTION_BUDGET`] bytes of items (as they will be stored) each.
    ///
    /// [`MAX_MUTATIONS_PER_TRANSACTION`]: weir_core::lease::MAX_MUTATIONS_PER_TRANSACTION
    async fn transactions(changes: &[(Arc<HeldLease>, LeaseChange)]) -> Vec<&[(Arc<HeldLease>, LeaseChange)]> {
        let mut out = Vec::new();
        let (mut start, mut bytes) = (0, 0);
        for (i, (h, change)) in changes.iter().enumerate() {
            let state = h.state.lock().await.lease.clone();
            let size = LeaseMutation::on(&state, change.clone())
                .apply(&state)
                .map_or(0, |l| weir_core::ports::lease_item_bytes(&l));
            let full =
                i - start == weir_core::lease::MAX_MUTATIONS_PER_TRANSACTION || bytes + size > TRANSACTION_BUDGET;
            if i > start && full {
                out.push(&changes[start..i]);
                (start, bytes) = (i, 0);
            }
            bytes += size;
        }
        if start < changes.len() {
            out.push(&changes[start..]);
        }
        out
    }

    /// Gives the lease away (graceful handoff) or up (`None`: release). After this the
    /// lease is no longer valid here.
    pub(crate) async fn let_go(&self, to: Option<WorkerId>) -> Result<(), HeldError> {
        let change = match to {
            Some(to) => LeaseChange::Transfer { to },
            None => LeaseChange::Release,
        };
        let r = self.write(change).await.map(|_| ());
        self.lost.cancel();
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_core::{ExtendedSequenceNumber, SequenceNumber};
    use weir_testkit::fixtures::{take, taken_lease};
    use weir_testkit::{FaultyLeaseTable, MemoryLeaseTable};

    const FAILOVER: Duration = Duration::from_secs(10);

    /// A heartbeat that never lapses (these tests are about the lease's own writes).
    fn unending() -> Arc<Liveness> {
        Arc::new(Liveness::new(Instant::now(), Duration::from_secs(1 << 30)))
    }

    /// A lease whose own writes land stops being valid when the worker's heartbeat
    /// lapses, and its next write is refused locally (others may take it by now).
    #[tokio::test(start_paused = true)]
    async fn a_lease_is_valid_only_while_the_heartbeat_is() {
        let table: Arc<dyn LeaseTable> = Arc::new(MemoryLeaseTable::new());
        let heartbeat = Arc::new(Liveness::new(Instant::now(), validity(FAILOVER)));
        let started = Instant::now();
        let mine = taken_lease(table.as_ref(), "s-1", "a").await;
        let held = HeldLease::new(mine, started, table.clone(), FAILOVER, heartbeat.clone());
        tokio::time::advance(Duration::from_secs(5)).await;
        held.renew().await.expect("renewed");
        heartbeat.landed(Instant::now() - Duration::from_secs(1));
        assert_eq!(held.valid_until(), Instant::now() - Duration::from_secs(1) + validity(FAILOVER));
        tokio::time::advance(Duration::from_secs(8)).await;
        assert!(!held.is_valid(), "the renewal landed 8 s ago, the heartbeat 9 s ago");
        assert!(matches!(held.renew().await, Err(HeldError::Lost(_))));
    }

    /// A lease held by worker `a`, as the worker would hold it right after taking it.
    async fn held_by_a() -> (Arc<dyn LeaseTable>, Lease, Arc<HeldLease>) {
        let table: Arc<dyn LeaseTable> = Arc::new(MemoryLeaseTable::new());
        let started = Instant::now();
        let mine = taken_lease(table.as_ref(), "s-1", "a").await;
        let held = HeldLease::new(mine.clone(), started, table.clone(), FAILOVER, unending());
        (table, mine, held)
    }

    #[tokio::test(start_paused = true)]
    async fn a_checkpoint_reports_the_intents_it_passed() {
        let (table, _, held) = held_by_a().await;
        let p = |n| ExtendedSequenceNumber::plain(SequenceNumber::from_u128(n));
        let intent = |t: &str, last| Intent {
            target: t.into(),
            scope: "s".into(),
            first: p(1),
            last: p(last),
            parts: vec![],
            except: vec![],
        };
        let record = |c: &str, intents| {
            (held.clone(), LeaseChange::RecordIntents { consumer: ConsumerName::new(c), intents, replacing: vec![] })
        };
        HeldLease::write_many(vec![record("c", vec![intent("a", 5), intent("b", 9)])]).await.unwrap();
        HeldLease::write_many(vec![record("d", vec![intent("x", 5)])]).await.unwrap();
        let passed = held.checkpoint([("c".into(), Checkpoint::At(p(6)))].into(), None).await.unwrap();
        assert_eq!(passed, [(ConsumerName::new("c"), vec![intent("a", 5)])].into(), "only c's, only those passed");
        let stored = table.get(&ShardId::new("s-1")).await.unwrap().unwrap();
        assert_eq!(stored.intents[&ConsumerName::new("c")], vec![intent("b", 9)]);
        let none = held.checkpoint([("c".into(), Checkpoint::At(p(7)))].into(), None).await.unwrap();
        assert!(none.is_empty());
        let end =
            held.checkpoint([("c".into(), Checkpoint::ShardEnd), ("d".into(), Checkpoint::ShardEnd)].into(), None);
        let end = end.await.unwrap();
        assert_eq!(end.len(), 2, "the shard end passes every intent: {end:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_write_the_store_never_answers_ends_at_the_validity_as_lost() {
        let table = FaultyLeaseTable::new(Arc::new(MemoryLeaseTable::new()));
        let mine = taken_lease(&table, "s-1", "a").await;
        let started = Instant::now();
        let held = HeldLease::new(mine, started, Arc::new(table.clone()), FAILOVER, unending());
        table.set_hung(true);
        let renewed = held.renew().await;
        assert!(matches!(renewed, Err(HeldError::Lost(_))), "{renewed:?}");
        assert!(held.lost().is_cancelled());
        assert!(Instant::now() <= started + FAILOVER, "gave up at {:?}", Instant::now() - started);
        // The same for a batch write: the lock is free again, nothing waits forever.
        let cp = Checkpoint::At(ExtendedSequenceNumber::plain(SequenceNumber::from_u128(1)));
        let late = held.checkpoint([("c".into(), cp)].into(), None).await;
        assert!(matches!(late, Err(HeldError::Lost(_))), "{late:?}");
    }

    /// A table whose next writes land but answer with an error, as a DynamoDB write
    /// whose reply is lost (a timeout, a dropped connection).
    struct LostReplies {
        inner: MemoryLeaseTable,
        lose: std::sync::atomic::AtomicU32,
    }

    impl LostReplies {
        fn lost(&self) -> Option<LeaseError> {
            let lose =
                self.lose.fetch_update(std::sync::atomic::Ordering::SeqCst, std::sync::atomic::Ordering::SeqCst, |n| {
                    n.checked_sub(1)
                });
            lose.is_ok().then(|| LeaseError::Store { message: "reply lost".into(), retryable: true, source: None })
        }
    }

    #[async_trait::async_trait]
    impl LeaseTable for LostReplies {
        async fn create_if_absent(&self, l: weir_core::NewLease) -> Result<bool, LeaseError> {
            self.inner.create_if_absent(l).await
        }
        async fn list(&self) -> Result<Vec<Lease>, LeaseError> {
            self.inner.list().await
        }
        async fn get(&self, key: &ShardId) -> Result<Option<Lease>, LeaseError> {
            self.inner.get(key).await
        }
        async fn mutate(&self, m: &LeaseMutation) -> Result<Lease, LeaseError> {
            let r = self.inner.mutate(m).await?;
            self.lost().map_or(Ok(r), Err)
        }
        async fn mutate_all(&self, ms: &[LeaseMutation]) -> Result<Vec<Lease>, LeaseError> {
            let r = self.inner.mutate_all(ms).await?;
            self.lost().map_or(Ok(r), Err)
        }
        async fn delete(&self, key: &ShardId) -> Result<(), LeaseError> {
            self.inner.delete(key).await
        }
        async fn delete_ended(&self, seen: &Lease) -> Result<bool, LeaseError> {
            self.inner.delete_ended(seen).await
        }
        async fn heartbeat(&self, w: &WorkerId, i: &str, load: weir_core::ports::WorkerLoad) -> Result<(), LeaseError> {
            self.inner.heartbeat(w, i, load).await
        }
        async fn claim_worker(&self, s: &weir_core::ports::WorkerHeartbeat, i: &str) -> Result<bool, LeaseError> {
            self.inner.claim_worker(s, i).await
        }
        async fn namespace_meta(&self) -> Result<Option<weir_core::ports::NamespaceMeta>, LeaseError> {
            self.inner.namespace_meta().await
        }
        async fn put_namespace_meta(
            &self,
            m: &weir_core::ports::NamespaceMeta,
            e: Option<&weir_core::ports::NamespaceMeta>,
        ) -> Result<bool, LeaseError> {
            self.inner.put_namespace_meta(m, e).await
        }
        async fn list_workers(&self) -> Result<Vec<weir_core::ports::WorkerHeartbeat>, LeaseError> {
            self.inner.list_workers().await
        }
        async fn remove_worker(&self, w: &WorkerId, i: &str) -> Result<(), LeaseError> {
            self.inner.remove_worker(w, i).await
        }
    }

    /// A write that landed but whose answer was lost is not mistaken for a lost lease:
    /// the next write meets the new counter, reads the lease back, finds its own write,
    /// and goes on. The same for a transaction. A write someone else made in between
    /// is still a lost lease.
    #[tokio::test(start_paused = true)]
    async fn a_write_whose_reply_was_lost_is_found_again() {
        let lossy = Arc::new(LostReplies { inner: MemoryLeaseTable::new(), lose: 0.into() });
        let table: Arc<dyn LeaseTable> = lossy.clone();
        let started = Instant::now();
        let mine = taken_lease(table.as_ref(), "s-1", "a").await;
        let held = HeldLease::new(mine.clone(), started, table.clone(), FAILOVER, unending());
        lossy.lose.store(1, std::sync::atomic::Ordering::SeqCst);
        assert!(matches!(held.renew().await, Err(HeldError::Store(_))), "the answer is lost");
        held.renew().await.expect("the renewal after a lost answer");
        assert!(held.is_valid());
        let stored = table.get(&ShardId::new("s-1")).await.unwrap().unwrap();
        assert_eq!(stored.counter, mine.counter + 2, "both renewals landed");
        // A transaction (intents) whose answer is lost, then a checkpoint.
        let p = |n| ExtendedSequenceNumber::plain(SequenceNumber::from_u128(n));
        let intent =
            Intent { target: "k".into(), scope: "s".into(), first: p(1), last: p(5), parts: vec![], except: vec![] };
        let record =
            LeaseChange::RecordIntents { consumer: ConsumerName::new("c"), intents: vec![intent], replacing: vec![] };
        lossy.lose.store(1, std::sync::atomic::Ordering::SeqCst);
        assert!(HeldLease::write_many(vec![(held.clone(), record)]).await.is_err());
        let passed = held.checkpoint([("c".into(), Checkpoint::At(p(6)))].into(), None).await.unwrap();
        assert_eq!(passed[&ConsumerName::new("c")].len(), 1, "the intents had landed, and the checkpoint passed them");
        // An answer lost, then another worker takes the lease: lost, as it is.
        lossy.lose.store(1, std::sync::atomic::Ordering::SeqCst);
        assert!(held.renew().await.is_err());
        let now = table.get(&ShardId::new("s-1")).await.unwrap().unwrap();
        take(table.as_ref(), &now, "b").await;
        assert!(matches!(held.renew().await, Err(HeldError::Lost(_))));
        assert!(held.lost().is_cancelled());
    }

    /// The end of a shard is one write that also lets the lease go; after it the lease
    /// is no longer valid here. An end whose answer was lost, written again, finds its
    /// first write and reports the end written (not a lost lease).
    #[tokio::test(start_paused = true)]
    async fn the_end_of_a_shard_lets_the_lease_go_in_its_one_write() {
        let lossy = Arc::new(LostReplies { inner: MemoryLeaseTable::new(), lose: 0.into() });
        let table: Arc<dyn LeaseTable> = lossy.clone();
        let end = || [(ConsumerName::new("c"), Checkpoint::ShardEnd)].into();
        for (shard, lose) in [("s-1", 0), ("s-2", 1)] {
            let mine = taken_lease(table.as_ref(), shard, "a").await;
            let held = HeldLease::new(mine.clone(), Instant::now(), table.clone(), FAILOVER, unending());
            lossy.lose.store(lose, std::sync::atomic::Ordering::SeqCst);
            let children = Some(vec![ShardId::new("s-9")]);
            if lose > 0 {
                let first = held.checkpoint(end(), children.clone()).await;
                assert!(matches!(first, Err(HeldError::Store(_))), "{shard}: the answer is lost: {first:?}");
                assert!(held.is_valid(), "{shard}: not known to have landed");
            }
            held.checkpoint(end(), children).await.unwrap_or_else(|e| panic!("{shard}: {e}"));
            assert!(!held.is_valid() && held.lost().is_cancelled(), "{shard}: let go");
            let stored = table.get(&ShardId::new(shard)).await.unwrap().unwrap();
            assert!(stored.ended && stored.owner.is_none(), "{shard}: {stored:?}");
            assert_eq!(stored.counter, mine.counter + 1, "{shard}: one write");
        }
    }

    /// Intents for many leases at once are written in transactions DynamoDB takes: at
    /// most 25 leases and 4 MB of items each (a table with DynamoDB's limits refuses a
    /// transaction past that).
    #[tokio::test(start_paused = true)]
    async fn large_intent_writes_are_cut_into_transactions_dynamodb_takes() {
        let table: Arc<dyn LeaseTable> = Arc::new(MemoryLeaseTable::with_dynamodb_limits());
        let started = Instant::now();
        let p = ExtendedSequenceNumber::plain(SequenceNumber::from_u128(1));
        let mut changes = Vec::new();
        for i in 0..20 {
            let lease = taken_lease(table.as_ref(), &format!("s-{i:02}"), "a").await;
            let held = HeldLease::new(lease, started, table.clone(), FAILOVER, unending());
            // About 250 KB of intents per lease: 20 leases are about 5 MB.
            let intents: Vec<Intent> = (0..240)
                .map(|k| Intent {
                    target: format!("{k}-{}", "k".repeat(1_000)),
                    scope: "s".into(),
                    first: p.clone(),
                    last: p.clone(),
                    parts: vec![],
                    except: vec![],
                })
                .collect();
            changes.push((
                held,
                LeaseChange::RecordIntents { consumer: ConsumerName::new("c"), intents, replacing: vec![] },
            ));
        }
        HeldLease::write_many(changes).await.expect("written in several transactions");
        for i in 0..20 {
            let stored = table.get(&ShardId::new(format!("s-{i:02}"))).await.unwrap().unwrap();
            assert_eq!(stored.intents[&ConsumerName::new("c")].len(), 240);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn late_checkpoint_is_fenced_by_the_counter() {
        let (table, mine, held) = held_by_a().await;
        // b takes over (as after a partition) while a still believes it is valid.
        take(table.as_ref(), &mine, "b").await;
        assert!(held.is_valid());
        let cp = Checkpoint::At(ExtendedSequenceNumber::plain(SequenceNumber::from_u128(42)));
        let late = held.checkpoint([("c".into(), cp)].into(), None).await;
        assert!(matches!(late, Err(HeldError::Lost(_))), "{late:?}");
        assert!(held.lost().is_cancelled());
        let stored = table.get(&ShardId::new("s-1")).await.unwrap().unwrap();
        assert_eq!(stored.owner, Some(WorkerId::new("b")));
        assert!(stored.checkpoints.is_empty(), "the late write must not land");
    }

    #[tokio::test(start_paused = true)]
    async fn validity_ends_before_anyone_may_take_over() {
        let (_table, _mine, held) = held_by_a().await;
        tokio::time::advance(Duration::from_millis(8_999)).await;
        assert!(held.is_valid());
        tokio::time::advance(Duration::from_millis(2)).await;
        assert!(!held.is_valid(), "no renewal for 90% of failover: stop");
        let r = held.renew().await;
        assert!(matches!(r, Err(HeldError::Lost(_))));
    }
}
