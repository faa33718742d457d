use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use async_trait::async_trait;
use bytes::Bytes;
use weir_core::ports::{ObjectMeta, ObjectSink, PutOptions, PutOutcome, SinkError, validate_key};

/// An in-memory create-only object store. `fail_next_puts(n)` makes the next `n` puts
/// fail with a retryable error; `lose_next_replies(n)` makes the next `n` puts land but
/// answer with one (a reply lost on the way back); `deny_list()` answers as S3 does a
/// caller without `s3:ListBucket`.
#[derive(Debug, Default)]
pub struct MemoryObjectSink {
    objects: Mutex<BTreeMap<String, (Bytes, PutOptions)>>,
    failures: AtomicU32,
    lost_replies: AtomicU32,
    list_denied: AtomicBool,
}

impl MemoryObjectSink {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// Makes the next `n` puts fail.
    pub fn fail_next_puts(&self, n: u32) {
        self.failures.store(n, Ordering::SeqCst);
    }

    /// Makes the next `n` puts land, and answer with a retryable error.
    pub fn lose_next_replies(&self, n: u32) {
        self.lost_replies.store(n, Ordering::SeqCst);
    }

    /// Answers as S3 answers a caller without `s3:ListBucket`: listing is refused, and
    /// so is reading or stating a key that does not exist (403 rather than 404, so the
    /// caller cannot learn what the bucket holds). Neither refusal is retryable.
    pub fn deny_list(&self) {
        self.list_denied.store(true, Ordering::SeqCst);
    }

    fn refused(&self, what: &str, key: &str) -> Result<(), SinkError> {
        if self.list_denied.load(Ordering::SeqCst) {
            return Err(SinkError::Store {
                message: format!("{what} {key}: AccessDenied (no s3:ListBucket)"),
                retryable: false,
                source: None,
            });
        }
        Ok(())
    }

    /// How many of the puts made to fail have not been tried yet.
    pub fn failures_left(&self) -> u32 {
        self.failures.load(Ordering::SeqCst)
    }

    /// A copy of every object.
    pub fn snapshot(&self) -> BTreeMap<String, Bytes> {
        let objects = self.objects.lock().unwrap_or_else(|p| p.into_inner());
        objects.iter().map(|(k, (b, _))| (k.clone(), b.clone())).collect()
    }
}

#[async_trait]
impl ObjectSink for MemoryObjectSink {
    async fn put_if_absent(&self, key: &str, body: Bytes, options: &PutOptions) -> Result<PutOutcome, SinkError> {
        validate_key(key)?;
        let failing = self.failures.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)).is_ok();
        if failing {
            return Err(SinkError::Store { message: "injected put failure".into(), retryable: true, source: None });
        }
        let mut objects = self.objects.lock().unwrap_or_else(|p| p.into_inner());
        if objects.contains_key(key) {
            return Ok(PutOutcome::AlreadyExists);
        }
        objects.insert(key.to_owned(), (body, options.clone()));
        if self.lost_replies.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)).is_ok() {
            return Err(SinkError::Store { message: "injected: reply lost".into(), retryable: true, source: None });
        }
        Ok(PutOutcome::Created)
    }

    async fn get(&self, key: &str) -> Result<Option<Bytes>, SinkError> {
        validate_key(key)?;
        let objects = self.objects.lock().unwrap_or_else(|p| p.into_inner());
        match objects.get(key) {
            Some((b, _)) => Ok(Some(b.clone())),
            None => self.refused("get", key).map(|()| None),
        }
    }

    async fn stat(&self, key: &str) -> Result<Option<ObjectMeta>, SinkError> {
        validate_key(key)?;
        let objects = self.objects.lock().unwrap_or_else(|p| p.into_inner());
        match objects.get(key) {
            Some((b, _)) => Ok(Some(ObjectMeta { key: key.to_owned(), size: b.len() as u64 })),
            None => self.refused("head", key).map(|()| None),
        }
    }

    async fn list(&self, prefix: &str) -> Result<Vec<ObjectMeta>, SinkError> {
        self.refused("list", prefix)?;
        let objects = self.objects.lock().unwrap_or_else(|p| p.into_inner());
        Ok(objects
            .range(prefix.to_owned()..)
            .take_while(|(k, _)| k.starts_with(prefix))
            .map(|(k, (b, _))| ObjectMeta { key: k.clone(), size: b.len() as u64 })
            .collect())
    }

    async fn delete(&self, key: &str) -> Result<(), SinkError> {
        validate_key(key)?;
        self.objects.lock().unwrap_or_else(|p| p.into_inner()).remove(key);
        Ok(())
    }

    fn location(&self) -> String {
        "memory://".into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn passes_object_sink_conformance() {
        crate::conformance::object_sink_suite(|| async { std::sync::Arc::new(MemoryObjectSink::new()) as _ }).await;
    }
}
