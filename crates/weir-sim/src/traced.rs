//! A consumer that notes every call into the trace, then makes it: what the runtime
//! asked of the archiver and what it answered, without logging (a log subscriber draws
//! hash map keys and so changes the run).

use async_trait::async_trait;
use std::sync::Arc;
use weir_core::{Acks, CloseReason, Consumer, ConsumerError, Intent, RecordBatch, ShardContext, ShardId, Timestamp};

use crate::world::World;

/// `inner`, traced as process `node`.
pub struct Traced<C> {
    pub inner: C,
    pub node: String,
    pub world: Arc<World>,
}

fn seq(p: &weir_core::ExtendedSequenceNumber) -> String {
    let s = p.sequence.as_str().trim_start_matches("49").trim_start_matches('0').to_owned();
    if p.sub_sequence == 0 { s } else { format!("{s}/{}", p.sub_sequence) }
}

fn outcome(r: &Result<(), ConsumerError>) -> String {
    match r {
        Ok(()) => "ok".into(),
        Err(e) => {
            let mut text = e.to_string();
            let mut source = std::error::Error::source(e);
            while let Some(s) = source {
                text.push_str(&format!(": {s}"));
                source = s.source();
            }
            format!("failed: {text}")
        }
    }
}

#[async_trait]
impl<C: Consumer> Consumer for Traced<C> {
    fn name(&self) -> &str {
        self.inner.name()
    }

    async fn on_shard_open(&mut self, shard: &ShardContext) -> Result<(), ConsumerError> {
        let r = self.inner.on_shard_open(shard).await;
        self.world.note(format_args!(
            "{} {} opens {} at {:?} with {} intents: {}",
            self.node,
            self.inner.name(),
            shard.shard_id,
            shard.checkpoint,
            shard.intents.len(),
            outcome(&r)
        ));
        r
    }

    async fn on_batch(&mut self, batch: &RecordBatch, acks: &dyn Acks) -> Result<(), ConsumerError> {
        let r = self.inner.on_batch(batch, acks).await;
        let (first, last) = (batch.records.first(), batch.records.last());
        self.world.note(format_args!(
            "{} {} batch {} {}..{} ({}): {}",
            self.node,
            self.inner.name(),
            batch.shard_id,
            first.map(|r| seq(&r.position)).unwrap_or_default(),
            last.map(|r| seq(&r.position)).unwrap_or_default(),
            batch.records.len(),
            outcome(&r)
        ));
        r
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
        let r = self.inner.on_shard_close(shard, reason, acks).await;
        self.world.note(format_args!(
            "{} {} closes {shard} ({reason:?}): {}",
            self.node,
            self.inner.name(),
            outcome(&r)
        ));
        r
    }

    async fn on_intents_passed(&mut self, shard: &ShardId, intents: &[Intent]) -> Result<(), ConsumerError> {
        self.inner.on_intents_passed(shard, intents).await
    }
}
