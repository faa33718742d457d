use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use weir_core::ports::{LeaseTable, NamespaceMeta, WorkerHeartbeat, WorkerLoad};
use weir_core::{Lease, LeaseError, LeaseMutation, NewLease, ShardId, WorkerId};

/// One worker's view of a shared lease table that can be cut off (a network partition
/// between that worker and the table: calls fail, or hang) while other workers still
/// reach it.
#[derive(Clone)]
pub struct FaultyLeaseTable {
    inner: Arc<dyn LeaseTable>,
    down: Arc<AtomicBool>,
    writes_down: Arc<AtomicBool>,
    hung: Arc<AtomicBool>,
    latency_ms: Arc<AtomicU64>,
}

impl FaultyLeaseTable {
    /// Wraps `inner`.
    pub fn new(inner: Arc<dyn LeaseTable>) -> Self {
        Self {
            inner,
            down: Arc::default(),
            writes_down: Arc::default(),
            hung: Arc::default(),
            latency_ms: Arc::default(),
        }
    }

    /// Delays every call by `latency` (a slow network; tokio time, so paused tests
    /// see it without waiting).
    pub fn set_latency(&self, latency: Duration) {
        self.latency_ms.store(u64::try_from(latency.as_millis()).unwrap_or(u64::MAX), Ordering::SeqCst);
    }

    /// Makes calls hang (or stop hanging): a call made while hung never answers,
    /// even after the table comes back, as a request on a connection that a
    /// partition black-holed.
    pub fn set_hung(&self, hung: bool) {
        self.hung.store(hung, Ordering::SeqCst);
    }

    /// Cuts this view off (or restores it).
    pub fn set_down(&self, down: bool) {
        self.down.store(down, Ordering::SeqCst);
    }

    /// Makes writes to leases fail (or succeed again) while every other call answers:
    /// `mutate` and `mutate_all` (renewals, takes, checkpoints) fail with a retryable
    /// store error, as a table whose writes are throttled or refused (a revoked
    /// `dynamodb:UpdateItem`) while its reads, the heartbeat and lease creation work.
    pub fn set_writes_failing(&self, failing: bool) {
        self.writes_down.store(failing, Ordering::SeqCst);
    }

    async fn check_write(&self) -> Result<(), LeaseError> {
        self.check().await?;
        if self.writes_down.load(Ordering::SeqCst) {
            return Err(LeaseError::Store {
                message: "injected: lease writes refused".into(),
                retryable: true,
                source: None,
            });
        }
        Ok(())
    }

    async fn check(&self) -> Result<(), LeaseError> {
        let latency = self.latency_ms.load(Ordering::SeqCst);
        if latency > 0 {
            tokio::time::sleep(Duration::from_millis(latency)).await;
        }
        if self.hung.load(Ordering::SeqCst) {
            std::future::pending::<()>().await;
        }
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
        self.check().await?;
        self.inner.create_if_absent(lease).await
    }
    async fn list(&self) -> Result<Vec<Lease>, LeaseError> {
        self.check().await?;
        self.inner.list().await
    }
    async fn get(&self, key: &ShardId) -> Result<Option<Lease>, LeaseError> {
        self.check().await?;
        self.inner.get(key).await
    }
    async fn mutate(&self, mutation: &LeaseMutation) -> Result<Lease, LeaseError> {
        self.check_write().await?;
        self.inner.mutate(mutation).await
    }
    async fn mutate_all(&self, mutations: &[LeaseMutation]) -> Result<Vec<Lease>, LeaseError> {
        self.check_write().await?;
        self.inner.mutate_all(mutations).await
    }
    async fn delete(&self, key: &ShardId) -> Result<(), LeaseError> {
        self.check().await?;
        self.inner.delete(key).await
    }
    async fn delete_ended(&self, seen: &Lease) -> Result<bool, LeaseError> {
        self.check().await?;
        self.inner.delete_ended(seen).await
    }
    async fn heartbeat(&self, worker: &WorkerId, instance: &str, load: WorkerLoad) -> Result<(), LeaseError> {
        self.check().await?;
        self.inner.heartbeat(worker, instance, load).await
    }
    async fn claim_worker(&self, seen: &WorkerHeartbeat, instance: &str) -> Result<bool, LeaseError> {
        self.check().await?;
        self.inner.claim_worker(seen, instance).await
    }
    async fn namespace_meta(&self) -> Result<Option<NamespaceMeta>, LeaseError> {
        self.check().await?;
        self.inner.namespace_meta().await
    }
    async fn put_namespace_meta(
        &self,
        meta: &NamespaceMeta,
        expected: Option<&NamespaceMeta>,
    ) -> Result<bool, LeaseError> {
        self.check().await?;
        self.inner.put_namespace_meta(meta, expected).await
    }
    async fn list_workers(&self) -> Result<Vec<WorkerHeartbeat>, LeaseError> {
        self.check().await?;
        self.inner.list_workers().await
    }
    async fn remove_worker(&self, worker: &WorkerId, instance: &str) -> Result<(), LeaseError> {
        self.check().await?;
        self.inner.remove_worker(worker, instance).await
    }
}
