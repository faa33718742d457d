//! An [`ObjectSink`] that answers every call after a fixed latency (tests and benches of
//! what a slow store costs: S3 at 100 ms a call, say).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use weir_core::ports::{ObjectMeta, ObjectSink, PutOptions, PutOutcome, SinkError};

/// Wraps a sink; each call waits `latency` (with `tokio::time`, so paused-time tests
/// advance it) before it is passed on.
pub struct SlowSink {
    inner: Arc<dyn ObjectSink>,
    latency: Duration,
}

impl SlowSink {
    /// `inner`, slowed by `latency` a call.
    pub fn new(inner: Arc<dyn ObjectSink>, latency: Duration) -> Self {
        Self { inner, latency }
    }
}

#[async_trait]
impl ObjectSink for SlowSink {
    async fn put_if_absent(&self, key: &str, body: Bytes, o: &PutOptions) -> Result<PutOutcome, SinkError> {
        tokio::time::sleep(self.latency).await;
        self.inner.put_if_absent(key, body, o).await
    }
    async fn get(&self, key: &str) -> Result<Option<Bytes>, SinkError> {
        tokio::time::sleep(self.latency).await;
        self.inner.get(key).await
    }
    async fn stat(&self, key: &str) -> Result<Option<ObjectMeta>, SinkError> {
        tokio::time::sleep(self.latency).await;
        self.inner.stat(key).await
    }
    async fn list(&self, prefix: &str) -> Result<Vec<ObjectMeta>, SinkError> {
        tokio::time::sleep(self.latency).await;
        self.inner.list(prefix).await
    }
    async fn delete(&self, key: &str) -> Result<(), SinkError> {
        tokio::time::sleep(self.latency).await;
        self.inner.delete(key).await
    }
    fn location(&self) -> String {
        format!("{} (slowed by {:?})", self.inner.location(), self.latency)
    }
}
