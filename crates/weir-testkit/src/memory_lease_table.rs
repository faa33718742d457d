use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use async_trait::async_trait;
use weir_core::ports::{
    LeaseTable, MAX_LEASE_ITEM_BYTES, MAX_TRANSACTION_BYTES, NamespaceMeta, WorkerHeartbeat, WorkerLoad,
    lease_item_bytes,
};
use weir_core::{Lease, LeaseError, LeaseMutation, NewLease, ShardId, WorkerId};

/// An in-memory lease table with the same conditional semantics as DynamoDB: every
/// mutation is applied atomically with [`LeaseMutation::apply`].
///
/// `set_unavailable(true)` makes every call fail with a retryable store error, to test
/// renewal failures. [`MemoryLeaseTable::with_dynamodb_limits`] refuses what DynamoDB
/// refuses: an item over [`MAX_LEASE_ITEM_BYTES`], a transaction over
/// [`MAX_TRANSACTION_BYTES`] (sizes by [`lease_item_bytes`]).
#[derive(Debug, Default)]
pub struct MemoryLeaseTable {
    state: Mutex<State>,
    unavailable: AtomicBool,
    limits: bool,
}

#[derive(Debug, Default)]
struct State {
    leases: BTreeMap<ShardId, Lease>,
    meta: Option<NamespaceMeta>,
    /// Counter and instance of each worker record.
    workers: BTreeMap<WorkerId, (u64, String, WorkerLoad)>,
}

impl MemoryLeaseTable {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty table that refuses writes DynamoDB would refuse for their size, with the
    /// non-retryable `ValidationException` DynamoDB answers.
    pub fn with_dynamodb_limits() -> Self {
        Self { limits: true, ..Self::default() }
    }

    /// With DynamoDB's limits: refuses `leases` if one is too large, or all of them
    /// together (one transaction) are.
    fn check_sizes<'a>(&self, leases: impl IntoIterator<Item = &'a Lease>) -> Result<(), LeaseError> {
        if !self.limits {
            return Ok(());
        }
        let mut total = 0;
        for l in leases {
            let bytes = lease_item_bytes(l);
            if bytes > MAX_LEASE_ITEM_BYTES {
                return Err(too_large(format!(
                    "ValidationException: Item size has exceeded the maximum allowed size (lease {}: {bytes} bytes)",
                    l.key
                )));
            }
            total += bytes;
        }
        if total > MAX_TRANSACTION_BYTES {
            return Err(too_large(format!(
                "ValidationException: Transaction request cannot be larger than 4 MB ({total} bytes)"
            )));
        }
        Ok(())
    }

    /// Makes every call fail (or succeed again).
    pub fn set_unavailable(&self, unavailable: bool) {
        self.unavailable.store(unavailable, Ordering::SeqCst);
    }

    fn check(&self) -> Result<std::sync::MutexGuard<'_, State>, LeaseError> {
        if self.unavailable.load(Ordering::SeqCst) {
            return Err(LeaseError::Store {
                message: "injected: lease table unavailable".into(),
                retryable: true,
                source: None,
            });
        }
        Ok(self.state.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

fn too_large(message: String) -> LeaseError {
    LeaseError::Store { message, retryable: false, source: None }
}

#[async_trait]
impl LeaseTable for MemoryLeaseTable {
    async fn create_if_absent(&self, lease: NewLease) -> Result<bool, LeaseError> {
        let mut s = self.check()?;
        if s.leases.contains_key(&lease.key) {
            return Ok(false);
        }
        s.leases.insert(lease.key.clone(), lease.into_lease());
        Ok(true)
    }

    async fn list(&self) -> Result<Vec<Lease>, LeaseError> {
        Ok(self.check()?.leases.values().cloned().collect())
    }

    async fn get(&self, key: &ShardId) -> Result<Option<Lease>, LeaseError> {
        Ok(self.check()?.leases.get(key).cloned())
    }

    async fn mutate(&self, mutation: &LeaseMutation) -> Result<Lease, LeaseError> {
        let mut s = self.check()?;
        let stored = s.leases.get(&mutation.key).ok_or_else(|| LeaseError::NotFound(mutation.key.clone()))?;
        let next = mutation.apply(stored)?;
        self.check_sizes([&next])?;
        s.leases.insert(next.key.clone(), next.clone());
        Ok(next)
    }

    async fn mutate_all(&self, mutations: &[LeaseMutation]) -> Result<Vec<Lease>, LeaseError> {
        weir_core::lease::check_batch(mutations)?;
        let mut s = self.check()?;
        let mut next = Vec::with_capacity(mutations.len());
        for m in mutations {
            let stored = s.leases.get(&m.key).ok_or_else(|| LeaseError::NotFound(m.key.clone()))?;
            next.push(m.apply(stored)?);
        }
        self.check_sizes(&next)?;
        for l in &next {
            s.leases.insert(l.key.clone(), l.clone());
        }
        Ok(next)
    }

    async fn delete(&self, key: &ShardId) -> Result<(), LeaseError> {
        self.check()?.leases.remove(key);
        Ok(())
    }

    async fn delete_ended(&self, seen: &Lease) -> Result<bool, LeaseError> {
        let mut s = self.check()?;
        let unchanged =
            s.leases.get(&seen.key).is_some_and(|l| l.counter == seen.counter && l.ended && l.owner.is_none());
        if unchanged {
            s.leases.remove(&seen.key);
        }
        Ok(unchanged)
    }

    async fn heartbeat(&self, worker: &WorkerId, instance: &str, load: WorkerLoad) -> Result<(), LeaseError> {
        let mut s = self.check()?;
        let (counter, owner, stored) =
            s.workers.entry(worker.clone()).or_insert((0, instance.to_owned(), WorkerLoad::default()));
        if !owner.is_empty() && owner != instance {
            return Err(LeaseError::WorkerIdInUse { worker: worker.clone(), instance: owner.clone() });
        }
        *counter += 1;
        *owner = instance.to_owned();
        *stored = load;
        Ok(())
    }

    async fn claim_worker(&self, seen: &WorkerHeartbeat, instance: &str) -> Result<bool, LeaseError> {
        let mut s = self.check()?;
        match s.workers.get_mut(&seen.worker) {
            Some((counter, owner, _)) if *counter == seen.counter && *owner == seen.instance => {
                *counter += 1;
                *owner = instance.to_owned();
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    async fn namespace_meta(&self) -> Result<Option<NamespaceMeta>, LeaseError> {
        Ok(self.check()?.meta.clone())
    }

    async fn put_namespace_meta(
        &self,
        meta: &NamespaceMeta,
        expected: Option<&NamespaceMeta>,
    ) -> Result<bool, LeaseError> {
        let mut s = self.check()?;
        if s.meta.as_ref() != expected {
            return Ok(false);
        }
        s.meta = Some(meta.clone());
        Ok(true)
    }

    async fn list_workers(&self) -> Result<Vec<WorkerHeartbeat>, LeaseError> {
        Ok(self
            .check()?
            .workers
            .iter()
            .map(|(w, (c, i, load))| WorkerHeartbeat {
                worker: w.clone(),
                counter: *c,
                instance: i.clone(),
                load: *load,
            })
            .collect())
    }

    async fn remove_worker(&self, worker: &WorkerId, instance: &str) -> Result<(), LeaseError> {
        let mut s = self.check()?;
        if s.workers.get(worker).is_some_and(|(_, owner, _)| owner.is_empty() || owner == instance) {
            s.workers.remove(worker);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn passes_lease_table_conformance() {
        crate::conformance::lease_table_suite(|| async { std::sync::Arc::new(MemoryLeaseTable::new()) as _ }).await;
        crate::conformance::lease_table_suite(|| async {
            std::sync::Arc::new(MemoryLeaseTable::with_dynamodb_limits()) as _
        })
        .await;
    }

    /// With DynamoDB's limits, an item past 400 KB and a transaction past 4 MB are
    /// refused as DynamoDB refuses them, and nothing of a refused write is stored.
    #[tokio::test]
    async fn dynamodb_limits_refuse_large_items_and_transactions() {
        use weir_core::{ConsumerName, ExtendedSequenceNumber, Intent, LeaseChange, SequenceNumber};
        let t = MemoryLeaseTable::with_dynamodb_limits();
        let p = ExtendedSequenceNumber::plain(SequenceNumber::from_u128(1));
        let intent = |n: usize| Intent {
            target: format!("{n:01000}"),
            scope: "s".into(),
            first: p.clone(),
            last: p.clone(),
            parts: vec![],
            except: vec![],
        };
        let record = |l: &Lease, n: usize| {
            LeaseMutation::on(
                l,
                LeaseChange::RecordIntents {
                    consumer: ConsumerName::new("a"),
                    intents: (0..n).map(intent).collect(),
                    replacing: vec![],
                },
            )
        };
        let mut leases = Vec::new();
        for i in 0..12 {
            let key = ShardId::new(format!("s-{i}"));
            t.create_if_absent(NewLease {
                key: key.clone(),
                initial: weir_core::Checkpoint::TrimHorizon,
                parents: vec![],
                hash_range: None,
            })
            .await
            .unwrap();
            let l = t.get(&key).await.unwrap().unwrap();
            let owned =
                t.mutate(&LeaseMutation::on(&l, LeaseChange::Take { owner: WorkerId::new("w") })).await.unwrap();
            leases.push(owned);
        }
        // 500 intents of ~1 KB: past 400 KB.
        let e = t.mutate(&record(&leases[0], 500)).await.unwrap_err();
        assert!(e.to_string().contains("Item size has exceeded") && !e.is_retryable(), "{e}");
        assert!(t.get(&leases[0].key).await.unwrap().unwrap().intents.is_empty(), "nothing stored");
        // 12 items of ~370 KB each: each fits, together past 4 MB.
        let all: Vec<LeaseMutation> = leases.iter().map(|l| record(l, 360)).collect();
        let e = t.mutate_all(&all).await.unwrap_err();
        assert!(e.to_string().contains("larger than 4 MB"), "{e}");
        assert!(t.mutate_all(&all[..10]).await.is_ok(), "ten of them fit in one transaction");
    }
}
