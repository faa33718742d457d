use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use weir_core::{Acks, CloseReason, Consumer, ConsumerError, RecordBatch, ShardId};

/// Records and bytes counted per shard, shared with whoever wants to read them.
#[derive(Debug, Clone, Default)]
pub struct Counts(Arc<Mutex<BTreeMap<ShardId, (u64, u64)>>>);

impl Counts {
    /// (records, bytes) per shard.
    pub fn snapshot(&self) -> BTreeMap<ShardId, (u64, u64)> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// Counts records and bytes per shard; acknowledges every batch at once.
#[derive(Debug)]
pub struct CountConsumer {
    name: String,
    counts: Counts,
}

impl CountConsumer {
    /// A counter registered as `name`.
    pub fn new(name: &str) -> (Self, Counts) {
        let counts = Counts::default();
        (Self { name: name.to_owned(), counts: counts.clone() }, counts)
    }
}

#[async_trait]
impl Consumer for CountConsumer {
    fn name(&self) -> &str {
        &self.name
    }

    async fn on_batch(&mut self, batch: &RecordBatch, acks: &dyn Acks) -> Result<(), ConsumerError> {
        {
            let mut c = self.counts.0.lock().unwrap_or_else(|p| p.into_inner());
            let e = c.entry(batch.shard_id.clone()).or_default();
            e.0 += batch.records.len() as u64;
            e.1 += batch.data_bytes() as u64;
        }
        if let Some(last) = batch.last_position() {
            acks.durable(&batch.shard_id, last);
        }
        Ok(())
    }

    async fn on_shard_close(&mut self, _: &ShardId, _: CloseReason, _: &dyn Acks) -> Result<(), ConsumerError> {
        Ok(())
    }
}
