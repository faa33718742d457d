use std::borrow::Cow;

use async_trait::async_trait;
use bytes::Bytes;

/// Options of a put. (Names are usually constants: an archiver puts an object for
/// each of 100,000 partitions, and these cost no allocation then.)
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PutOptions {
    /// MIME type, e.g. `application/x-ndjson`.
    pub content_type: Option<Cow<'static, str>>,
    /// Content encoding, e.g. `gzip`.
    pub content_encoding: Option<Cow<'static, str>>,
    /// User metadata, each name once.
    pub metadata: Vec<(Cow<'static, str>, String)>,
}

/// Result of a create-only put.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PutOutcome {
    /// The object was written.
    Created,
    /// An object with the key already existed; nothing was written.
    AlreadyExists,
}

/// A listed object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectMeta {
    /// Full key.
    pub key: String,
    /// Size in bytes.
    pub size: u64,
}

/// Errors of object sinks.
#[derive(Debug, thiserror::Error)]
pub enum SinkError {
    /// The key is not acceptable (see [`validate_key`]).
    #[error("invalid object key {key:?}: {reason}")]
    InvalidKey {
        /// The key.
        key: String,
        /// Why.
        reason: &'static str,
    },
    /// The store failed.
    #[error("object store error: {message}")]
    Store {
        /// What failed.
        message: String,
        /// Whether a retry may succeed.
        retryable: bool,
        /// Cause.
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync>>,
    },
}

impl SinkError {
    /// Whether a retry may succeed.
    pub fn is_retryable(&self) -> bool {
        matches!(self, SinkError::Store { retryable: true, .. })
    }
}

/// Checks an object key: non-empty, at most 1024 bytes, no leading `/`, no empty, `.`
/// or `..` segment, no control characters or backslashes. Every sink enforces it, so
/// a key can never escape its prefix on any backend.
pub fn validate_key(key: &str) -> Result<(), SinkError> {
    let bad = |reason| Err(SinkError::InvalidKey { key: key.chars().take(200).collect(), reason });
    if key.is_empty() {
        return bad("empty key");
    }
    if key.len() > 1024 {
        return bad("longer than 1024 bytes");
    }
    if key.starts_with('/') {
        return bad("starts with '/'");
    }
    if key.chars().any(|c| c.is_control() || c == '\\') {
        return bad("contains a control character or backslash");
    }
    let mut segments = key.split('/').peekable();
    while let Some(seg) = segments.next() {
        if seg == "." || seg == ".." {
            return bad("contains a '.' or '..' segment");
        }
        if seg.is_empty() && segments.peek().is_some() {
            return bad("contains an empty segment");
        }
    }
    if key.ends_with('/') {
        return bad("ends with '/'");
    }
    Ok(())
}

/// Durable object storage with create-only writes (S3 `If-None-Match: *`, a local
/// directory, memory).
///
/// Contract (checked by weir-testkit's conformance suite): a put is atomic (readers see
/// the whole object or nothing); a put to an existing key writes nothing and returns
/// [`PutOutcome::AlreadyExists`]; keys are validated with [`validate_key`]; `list`
/// returns every object whose key starts with the prefix, sorted by key; `delete` of
/// an absent key succeeds.
#[async_trait]
pub trait ObjectSink: Send + Sync {
    /// Writes the object unless the key exists.
    async fn put_if_absent(&self, key: &str, body: Bytes, options: &PutOptions) -> Result<PutOutcome, SinkError>;

    /// Reads an object; `None` when absent.
    async fn get(&self, key: &str) -> Result<Option<Bytes>, SinkError>;

    /// Size of an object without reading it; `None` when absent.
    async fn stat(&self, key: &str) -> Result<Option<ObjectMeta>, SinkError>;

    /// Lists objects under a prefix, sorted by key.
    async fn list(&self, prefix: &str) -> Result<Vec<ObjectMeta>, SinkError>;

    /// Deletes an object; deleting a key that does not exist succeeds. The archiver
    /// deletes only its own bookkeeping objects (intent manifests), never data.
    async fn delete(&self, key: &str) -> Result<(), SinkError>;

    /// Where objects go, for humans (`s3://bucket/`, `/path/to/dir`).
    fn location(&self) -> String;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_cannot_escape() {
        for bad in ["", "/abs", "a/../b", "..", "a/./b", "a//b", "a/b/", "a\\b", "a\nb", "a\u{0}b"] {
            assert!(validate_key(bad).is_err(), "{bad:?} accepted");
        }
        for good in ["a", "tenant=t-1/tool=x/2026/11/29/obj.gz", "a..b/c"] {
            assert!(validate_key(good).is_ok(), "{good:?} rejected");
        }
    }
}
