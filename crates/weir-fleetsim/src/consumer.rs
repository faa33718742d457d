//! The consumer every simulated worker runs: it acknowledges each batch as it comes,
//! so each shard's checkpoint moves (and is written) every checkpoint interval.

use async_trait::async_trait;
use weir_core::{Acks, CloseReason, Consumer, ConsumerError, RecordBatch, ShardId};

/// Acknowledges every batch at once; keeps nothing.
#[derive(Debug, Default)]
pub struct AckingConsumer;

#[async_trait]
impl Consumer for AckingConsumer {
    fn name(&self) -> &str {
        "fleet"
    }

    async fn on_batch(&mut self, batch: &RecordBatch, acks: &dyn Acks) -> Result<(), ConsumerError> {
        if let Some(last) = batch.last_position() {
            acks.durable(&batch.shard_id, last);
        }
        Ok(())
    }

    async fn on_shard_close(&mut self, _: &ShardId, _: CloseReason, _: &dyn Acks) -> Result<(), ConsumerError> {
        Ok(())
    }
}
