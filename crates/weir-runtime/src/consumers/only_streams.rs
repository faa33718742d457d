use std::collections::BTreeSet;

use async_trait::async_trait;
use weir_core::{Acks, CloseReason, Consumer, ConsumerError, Intent, RecordBatch, ShardContext, ShardId, Timestamp};

use crate::streams::Streams;

/// A consumer that reads only some of a fleet's streams: records of the others are
/// acknowledged as they come without reaching it, so its checkpoints there follow
/// the read (and children of those shards are not held up waiting for it).
pub struct OnlyStreams {
    inner: Box<dyn Consumer>,
    streams: Streams,
    reads: BTreeSet<String>,
}

impl OnlyStreams {
    /// `inner`, given only the shards of the streams named in `reads`.
    pub fn new(inner: Box<dyn Consumer>, streams: Streams, reads: impl IntoIterator<Item = String>) -> Self {
        Self { inner, streams, reads: reads.into_iter().collect() }
    }

    fn reads(&self, shard: &ShardId) -> bool {
        self.streams.stream_name(shard).is_some_and(|s| self.reads.contains(s))
    }
}

#[async_trait]
impl Consumer for OnlyStreams {
    fn name(&self) -> &str {
        self.inner.name()
    }

    async fn on_shard_open(&mut self, shard: &ShardContext) -> Result<(), ConsumerError> {
        if !self.reads(&shard.shard_id) {
            return Ok(());
        }
        self.inner.on_shard_open(shard).await
    }

    async fn on_batch(&mut self, batch: &RecordBatch, acks: &dyn Acks) -> Result<(), ConsumerError> {
        if !self.reads(&batch.shard_id) {
            if let Some(last) = batch.last_position() {
                acks.durable(&batch.shard_id, last);
            }
            return Ok(());
        }
        self.inner.on_batch(batch, acks).await
    }

    async fn on_tick(&mut self, now: Timestamp, acks: &dyn Acks) -> Result<(), ConsumerError> {
        self.inner.on_tick(now, acks).await
    }

    async fn on_shard_close(
        &mut self,
        shard: &ShardId,
        reason: CloseReason,
        acks: &dyn Acks,
    ) -> Result<(), ConsumerError> {
        if !self.reads(shard) {
            return Ok(());
        }
        self.inner.on_shard_close(shard, reason, acks).await
    }

    async fn on_intents_passed(&mut self, shard: &ShardId, intents: &[Intent]) -> Result<(), ConsumerError> {
        self.inner.on_intents_passed(shard, intents).await
    }
}
