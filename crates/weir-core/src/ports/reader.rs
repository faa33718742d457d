use async_trait::async_trait;

use crate::ids::ShardId;
use crate::position::StartingPosition;
use crate::record::{HashKeyRange, RecordBatch};

/// A shard as the stream catalog lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardInfo {
    /// Shard id.
    pub id: ShardId,
    /// Parent shards (one after a split, two after a merge).
    pub parents: Vec<ShardId>,
    /// Hash key range.
    pub hash_range: HashKeyRange,
    /// Whether the shard is closed (has an ending sequence number).
    pub closed: bool,
}

/// How a read is served.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReadMode {
    /// The live read: enhanced fan-out where available.
    Live,
    /// Polling (GetRecords): catch-up reads and replays; does not take the live
    /// subscription.
    Polling,
}

/// Errors of readers and catalogs.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The service throttled the call; back off.
    #[error("read throttled: {0}")]
    Throttled(String),
    /// The shard (or consumer) is in use or changing; back off with jitter.
    #[error("resource in use: {0}")]
    ResourceInUse(String),
    /// The subscription or iterator expired; reopen from the last position.
    #[error("subscription expired")]
    Expired,
    /// The shard does not exist (confirmed by the reader, not guessed).
    #[error(
        "shard {0} not found: the stream does not list it (was the stream deleted, or the shard trimmed past retention?)"
    )]
    ShardNotFound(ShardId),
    /// A transient failure (network, 5xx); reopen from the last position.
    #[error("transient read error: {0}")]
    Transient(String),
    /// A failure that retrying will not fix (permissions, missing stream).
    #[error("read failed: {0}")]
    Fatal(String),
}

impl ReadError {
    /// Whether reopening the read after a backoff may succeed.
    pub fn is_retryable(&self) -> bool {
        !matches!(self, ReadError::Fatal(_) | ReadError::ShardNotFound(_))
    }
}

/// Lists the shards of one stream.
#[async_trait]
pub trait StreamCatalog: Send + Sync {
    /// Every shard within retention, open and closed, with parents.
    async fn list_shards(&self) -> Result<Vec<ShardInfo>, ReadError>;

    /// Whether the lease with this key is one of this catalog's shards: workers take
    /// and read only such leases, and leave the others alone (the leases of a stream
    /// removed from a multi-stream fleet's config). Default: every key.
    fn covers(&self, key: &ShardId) -> bool {
        let _ = key;
        true
    }
}

/// Opens reads of the shards of one stream.
#[async_trait]
pub trait ShardReader: Send + Sync {
    /// Starts reading `shard` at `from`.
    async fn open(
        &self,
        shard: &ShardId,
        from: &StartingPosition,
        mode: ReadMode,
    ) -> Result<Box<dyn ShardSubscription>, ReadError>;
}

/// An open read of one shard.
///
/// Contract (checked by weir-testkit's conformance suite): batches come in sequence
/// order with no gaps or repeats; a batch may be empty; the last batch of a closed
/// shard has `child_shards` set and after it `next` returns `Ok(None)`. An error ends
/// the subscription: the caller reopens after the last record it received.
#[async_trait]
pub trait ShardSubscription: Send {
    /// The next batch, waiting for records if needed.
    async fn next(&mut self) -> Result<Option<RecordBatch>, ReadError>;
}
