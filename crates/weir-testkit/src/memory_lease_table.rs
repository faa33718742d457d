use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use async_trait::async_trait;
use weir_core::ports::{LeaseTable, NamespaceMeta, WorkerHeartbeat};
use weir_core::{Lease, LeaseError, LeaseMutation, NewLease, ShardId, WorkerId};

/// An in-memory lease table with the same conditional semantics as DynamoDB: every
/// mutation is applied atomically with [`LeaseMutation::apply`].
///
/// `set_unavailable(true)` makes every call fail with a retryable store error, to test
/// renewal failures.
#[derive(Debug, Default)]
pub struct MemoryLeaseTable {
    state: Mutex<State>,
    unavailable: AtomicBool,
}

#[derive(Debug, Default)]
struct State {
    leases: BTreeMap<ShardId, Lease>,
    meta: Option<NamespaceMeta>,
    /// Counter and instance of each worker record.
    workers: BTreeMap<WorkerId, (u64, String)>,
}

impl MemoryLeaseTable {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
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

    async fn heartbeat(&self, worker: &WorkerId, instance: &str) -> Result<(), LeaseError> {
        let mut s = self.check()?;
        let (counter, owner) = s.workers.entry(worker.clone()).or_insert((0, instance.to_owned()));
        if !owner.is_empty() && owner != instance {
            return Err(LeaseError::WorkerIdInUse { worker: worker.clone(), instance: owner.clone() });
        }
        *counter += 1;
        *owner = instance.to_owned();
        Ok(())
    }

    async fn claim_worker(&self, seen: &WorkerHeartbeat, instance: &str) -> Result<bool, LeaseError> {
        let mut s = self.check()?;
        match s.workers.get_mut(&seen.worker) {
            Some((counter, owner)) if *counter == seen.counter && *owner == seen.instance => {
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
            .map(|(w, (c, i))| WorkerHeartbeat { worker: w.clone(), counter: *c, instance: i.clone() })
            .collect())
    }

    async fn remove_worker(&self, worker: &WorkerId, instance: &str) -> Result<(), LeaseError> {
        let mut s = self.check()?;
        if s.workers.get(worker).is_some_and(|(_, owner)| owner.is_empty() || owner == instance) {
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
    }
}
