use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use weir_core::ports::{ReadError, ReadMode, ShardReader, ShardSubscription};
use weir_core::{RecordBatch, ShardId, StartingPosition};

/// A fault to inject into a read.
#[derive(Debug, Clone)]
pub enum Fault {
    /// Fail with a transient error.
    Transient,
    /// Fail as throttled.
    Throttled,
    /// Fail with resource-in-use.
    ResourceInUse,
    /// End the subscription as expired (as EFO does after 5 minutes).
    Expire,
    /// Wait this long (tokio time) before answering.
    Delay(Duration),
}

/// Faults queued for the next `open` and `next` calls, shared by every subscription of
/// one [`FaultyReader`]. Each queued fault is used once.
#[derive(Debug, Clone, Default)]
pub struct FaultPlan {
    on_open: Arc<Mutex<VecDeque<Fault>>>,
    on_next: Arc<Mutex<VecDeque<Fault>>>,
    denied: Arc<std::sync::atomic::AtomicBool>,
}

impl FaultPlan {
    /// Queues a fault for a future `open`.
    pub fn on_open(&self, fault: Fault) {
        self.on_open.lock().unwrap_or_else(|p| p.into_inner()).push_back(fault);
    }

    /// Queues a fault for a future `next`.
    pub fn on_next(&self, fault: Fault) {
        self.on_next.lock().unwrap_or_else(|p| p.into_inner()).push_back(fault);
    }

    /// While set, every `open` and `next` fails with a failure retrying will not fix
    /// ([`ReadError::Fatal`], as access denied or a deleted stream do).
    pub fn set_denied(&self, denied: bool) {
        self.denied.store(denied, std::sync::atomic::Ordering::SeqCst);
    }

    fn check_denied(&self) -> Result<(), ReadError> {
        if self.denied.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(ReadError::Fatal("injected: access denied".into()));
        }
        Ok(())
    }

    fn pop(queue: &Mutex<VecDeque<Fault>>) -> Option<Fault> {
        queue.lock().unwrap_or_else(|p| p.into_inner()).pop_front()
    }
}

async fn inject(fault: Option<Fault>) -> Result<(), ReadError> {
    match fault {
        None => Ok(()),
        Some(Fault::Delay(d)) => {
            tokio::time::sleep(d).await;
            Ok(())
        }
        Some(Fault::Transient) => Err(ReadError::Transient("injected".into())),
        Some(Fault::Throttled) => Err(ReadError::Throttled("injected".into())),
        Some(Fault::ResourceInUse) => Err(ReadError::ResourceInUse("injected".into())),
        Some(Fault::Expire) => Err(ReadError::Expired),
    }
}

/// Wraps a reader and injects the faults of its [`FaultPlan`].
pub struct FaultyReader {
    inner: Arc<dyn ShardReader>,
    plan: FaultPlan,
}

impl FaultyReader {
    /// Wraps `inner`; faults come from `plan`.
    pub fn new(inner: Arc<dyn ShardReader>, plan: FaultPlan) -> Self {
        Self { inner, plan }
    }
}

#[async_trait]
impl ShardReader for FaultyReader {
    async fn open(
        &self,
        shard: &ShardId,
        from: &StartingPosition,
        mode: ReadMode,
    ) -> Result<Box<dyn ShardSubscription>, ReadError> {
        self.plan.check_denied()?;
        inject(FaultPlan::pop(&self.plan.on_open)).await?;
        let inner = self.inner.open(shard, from, mode).await?;
        Ok(Box::new(FaultySubscription { inner, plan: self.plan.clone() }))
    }
}

struct FaultySubscription {
    inner: Box<dyn ShardSubscription>,
    plan: FaultPlan,
}

#[async_trait]
impl ShardSubscription for FaultySubscription {
    async fn next(&mut self) -> Result<Option<RecordBatch>, ReadError> {
        self.plan.check_denied()?;
        inject(FaultPlan::pop(&self.plan.on_next)).await?;
        self.inner.next().await
    }
}
