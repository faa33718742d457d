//! Several streams read by one fleet through one lease table: a reader and catalog
//! that join the streams' shards under one key space.
//!
//! Lease keys are `stream:shardId` (as KCL's multi-stream keys end in
//! `streamName:…:shardId`), except for the stream the namespace was first used with,
//! whose leases keep their bare shard ids: a fleet that adds a second stream to the
//! one it reads continues on the first stream's existing leases. Batches, child shards
//! and parents carry the joined keys, so the runtime, the lease table and the
//! consumers never need to know there is more than one stream.
//!
//! [`StreamCatalog::covers`] tells the workers which leases are theirs: the leases of
//! a stream that is no longer configured are left alone, never read.

use std::sync::Arc;

use async_trait::async_trait;
use weir_core::ports::{ReadError, ReadMode, ShardInfo, ShardReader, ShardSubscription, StreamCatalog};
use weir_core::{RecordBatch, ShardId, StartingPosition};

/// One stream of a [`Streams`].
#[derive(Clone)]
pub struct StreamPart {
    /// The stream's name (in lease keys and in consumers' `streams` lists).
    pub name: String,
    /// Whether its leases keep bare shard ids (the namespace's first stream).
    pub bare: bool,
    /// Its reader.
    pub reader: Arc<dyn ShardReader>,
    /// Its catalog.
    pub catalog: Arc<dyn StreamCatalog>,
}

impl std::fmt::Debug for StreamPart {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamPart").field("name", &self.name).field("bare", &self.bare).finish()
    }
}

/// The streams of one fleet, as one reader and catalog. Cloning shares them.
#[derive(Debug, Clone)]
pub struct Streams {
    parts: Arc<Vec<StreamPart>>,
}

/// The lease key of `shard` of stream `stream` when the stream's keys are not bare.
pub fn joined_key(stream: &str, shard: &str) -> String {
    format!("{stream}:{shard}")
}

/// The stream a lease key names: the part before `:`, or for a bare key `bare` (the
/// stream whose leases keep bare shard ids, when known). Whether that stream is
/// configured is the caller's question.
pub fn key_stream<'a>(key: &'a str, bare: Option<&'a str>) -> Option<&'a str> {
    match key.split_once(':') {
        Some((stream, _)) => Some(stream),
        None => bare,
    }
}

impl Streams {
    /// The streams; at most one may be `bare`, and names must differ (the config
    /// checks both).
    pub fn new(parts: Vec<StreamPart>) -> Self {
        Self { parts: Arc::new(parts) }
    }

    fn bare(&self) -> Option<&str> {
        self.parts.iter().find(|p| p.bare).map(|p| p.name.as_str())
    }

    /// The stream of a lease key and the shard id within it.
    fn split(&self, key: &ShardId) -> Option<(&StreamPart, ShardId)> {
        let name = key_stream(key.as_str(), self.bare())?;
        let part = self.parts.iter().find(|p| p.name == name)?;
        let inner = if part.bare {
            key.clone()
        } else {
            ShardId::new(key.as_str().split_once(':').map_or(key.as_str(), |(_, s)| s))
        };
        Some((part, inner))
    }

    /// The name of the stream a lease key belongs to, if it is configured.
    pub fn stream_name(&self, key: &ShardId) -> Option<&str> {
        self.split(key).map(|(p, _)| p.name.as_str())
    }
}

fn join(part: &StreamPart, shard: &ShardId) -> ShardId {
    if part.bare { shard.clone() } else { ShardId::new(joined_key(&part.name, shard.as_str())) }
}

#[async_trait]
impl StreamCatalog for Streams {
    async fn list_shards(&self) -> Result<Vec<ShardInfo>, ReadError> {
        let mut out = Vec::new();
        for part in self.parts.iter() {
            for s in part.catalog.list_shards().await? {
                out.push(ShardInfo {
                    id: join(part, &s.id),
                    parents: s.parents.iter().map(|p| join(part, p)).collect(),
                    hash_range: s.hash_range,
                    closed: s.closed,
                });
            }
        }
        Ok(out)
    }

    fn covers(&self, key: &ShardId) -> bool {
        self.split(key).is_some()
    }
}

#[async_trait]
impl ShardReader for Streams {
    async fn open(
        &self,
        shard: &ShardId,
        from: &StartingPosition,
        mode: ReadMode,
    ) -> Result<Box<dyn ShardSubscription>, ReadError> {
        let (part, inner) = self.split(shard).ok_or_else(|| ReadError::ShardNotFound(shard.clone()))?;
        let sub = part.reader.open(&inner, from, mode).await?;
        Ok(Box::new(Joined { part: part.clone(), key: shard.clone(), sub }))
    }
}

/// A read of one stream's shard whose batches carry the joined keys.
struct Joined {
    part: StreamPart,
    key: ShardId,
    sub: Box<dyn ShardSubscription>,
}

#[async_trait]
impl ShardSubscription for Joined {
    async fn next(&mut self) -> Result<Option<RecordBatch>, ReadError> {
        let Some(mut batch) = self.sub.next().await? else { return Ok(None) };
        batch.shard_id = self.key.clone();
        if let Some(children) = &mut batch.child_shards {
            for c in children {
                c.shard_id = join(&self.part, &c.shard_id);
                c.parents = c.parents.iter().map(|p| join(&self.part, p)).collect();
            }
        }
        Ok(Some(batch))
    }
}
