use async_trait::async_trait;
use weir_core::{Acks, CloseReason, Consumer, ConsumerError, RecordBatch, ShardContext, ShardId};

/// Logs one structured line per batch (shard, records, first and last sequence);
/// acknowledges at once.
#[derive(Debug)]
pub struct LogConsumer {
    name: String,
}

impl LogConsumer {
    /// A logger registered as `name`.
    pub fn new(name: &str) -> Self {
        Self { name: name.to_owned() }
    }
}

#[async_trait]
impl Consumer for LogConsumer {
    fn name(&self) -> &str {
        &self.name
    }

    async fn on_shard_open(&mut self, shard: &ShardContext) -> Result<(), ConsumerError> {
        tracing::info!(consumer = %self.name, shard = %shard.shard_id, checkpoint = ?shard.checkpoint, "shard opened");
        Ok(())
    }

    async fn on_batch(&mut self, batch: &RecordBatch, acks: &dyn Acks) -> Result<(), ConsumerError> {
        let (Some(first), Some(last)) = (batch.records.first(), batch.last_position()) else {
            return Ok(());
        };
        tracing::debug!(consumer = %self.name, shard = %batch.shard_id, records = batch.records.len(),
            first = %first.position, last = %last, first_arrival_ms = first.approximate_arrival.as_millis(),
            behind_ms = ?batch.millis_behind_latest, "batch");
        acks.durable(&batch.shard_id, last);
        Ok(())
    }

    async fn on_shard_close(
        &mut self,
        shard: &ShardId,
        reason: CloseReason,
        _: &dyn Acks,
    ) -> Result<(), ConsumerError> {
        tracing::info!(consumer = %self.name, %shard, ?reason, "shard closed");
        Ok(())
    }
}
