use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use async_trait::async_trait;
use weir_core::ports::{LeaseTable, NamespaceMeta, WorkerHeartbeat};
use weir_core::{Lease, LeaseError, LeaseMutation, NewLease, ShardId, WorkerId};

/// One worker's view of a shared lease table that can be cut off (a network partition
/// between that worker and the table) while other workers still reach it.
#[derive(Clone)]
pub struct FaultyLeaseTable {
    inner: Arc<dyn LeaseTable>,
    down: Arc<AtomicBool>,
}

impl FaultyLeaseTable {
    /// Wraps `inner`.
    pub fn new(inner: Arc<dyn LeaseTable>) -> Self {
        Self { inner, down: Arc::default() }
    }

    /// Cuts this view off (or restores it).
    pub fn set_down(&self, down: bool) {
        self.down.store(down, Ordering::SeqCst);
    }

    fn check(&self) -> Result<(), LeaseError> {
        if self.down.load(Ordering::SeqCst) {
            return Err(LeaseError::Store {
                message: "injected: partitioned from lease table".into(),
                retryable: true,
                source: None,
            });
        }
        Ok(())
    }
}

#[async_trait]
impl LeaseTable for FaultyLeaseTable {
    async fn create_if_absent(&self, lease: NewLease) -> Result<bool, LeaseError> {
        self.check()?;
        self.inner.create_if_absent(lease).await
    }
    async fn list(&self) -> Result<Vec<Lease>, LeaseError> {
        self.check()?;
        self.inner.list().await
    }
    async fn get(&self, key: &ShardId) -> Result<Option<Lease>, LeaseError> {
        self.check()?;
        self.inner.get(key).await
    }
    async fn mutate(&self, mutation: &LeaseMutation) -> Result<Lease, LeaseError> {
        self.check()?;
        self.inner.mutate(mutation).await
    }
    async fn mutate_all(&self, mutations: &[LeaseMutation]) -> Result<Vec<Lease>, LeaseError> {
        self.check()?;
        self.inner.mutate_all(mutations).await
    }
    async fn delete(&self, key: &ShardId) -> Result<(), LeaseError> {
        self.check()?;
        self.inner.delete(key).await
    }
    async fn delete_ended(&self, seen: &Lease) -> Result<bool, LeaseError> {
        self.check()?;
        self.inner.delete_ended(seen).await
    }
    async fn heartbeat(&self, worker: &WorkerId, instance: &str) -> Result<(), LeaseError> {
        self.check()?;
        self.inner.heartbeat(worker, instance).await
    }
    async fn claim_worker(&self, seen: &WorkerHeartbeat, instance: &str) -> Result<bool, LeaseError> {
        self.check()?;
        self.inner.claim_worker(seen, instance).await
    }
    async fn namespace_meta(&self) -> Result<Option<NamespaceMeta>, LeaseError> {
        self.check()?;
        self.inner.namespace_meta().await
    }
    async fn put_namespace_meta(
        &self,
        meta: &NamespaceMeta,
        expected: Option<&NamespaceMeta>,
    ) -> Result<bool, LeaseError> {
        self.check()?;
        self.inner.put_namespace_meta(meta, expected).await
    }
    async fn list_workers(&self) -> Result<Vec<WorkerHeartbeat>, LeaseError> {
        self.check()?;
        self.inner.list_workers().await
    }
    async fn remove_worker(&self, worker: &WorkerId, instance: &str) -> Result<(), LeaseError> {
        self.check()?;
        self.inner.remove_worker(worker, instance).await
    }
}
