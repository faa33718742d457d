//! Kinesis Data Streams: the stream catalog (ListShards) and shard readers, through
//! enhanced fan-out (SubscribeToShard) for live reads and polling (GetRecords) for
//! catch-up and replay reads, or for everything when EFO is off.

mod call_size;
mod catalog;
mod consumers;
mod efo;
mod polling;
pub mod producer;
mod records;
pub mod writer;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_kinesis::Client;
use weir_core::ports::{ReadError, ReadMode, ShardInfo, ShardReader, ShardSubscription, StreamCatalog};
use weir_core::{ShardId, StartingPosition};

pub use consumers::{EfoConsumerInfo, deregister_efo_consumer, list_efo_consumers, retention_hours};
pub use efo::{EfoApi, EfoEvent, EfoEvents, EfoOptions, EfoSubscription, SdkEfo};

/// How a [`KinesisStream`] reads.
#[derive(Debug, Clone)]
pub struct KinesisOptions {
    /// Register (or reuse) this enhanced fan-out consumer for live reads; `None` reads
    /// everything by polling.
    pub efo_consumer: Option<String>,
    /// Least time between two GetRecords calls on one shard (Kinesis allows 5/s).
    pub poll_interval: Duration,
    /// Wait between polls when the shard is at its tip.
    pub idle_poll_interval: Duration,
    /// Most records per GetRecords call (≤ 10,000).
    pub max_records: i32,
    /// About how many bytes of records (data and partition keys, plus a fixed overhead
    /// each) one GetRecords call asks for, judged from the shard's last calls; bounds
    /// the memory a polling worker holds per shard (see `call_size`).
    pub max_bytes_per_call: u64,
    /// EFO subscription tuning.
    pub efo: EfoOptions,
}

impl Default for KinesisOptions {
    fn default() -> Self {
        Self {
            efo_consumer: None,
            poll_interval: Duration::from_millis(200),
            idle_poll_interval: Duration::from_millis(1_000),
            max_records: 10_000,
            max_bytes_per_call: 1 << 20,
            efo: EfoOptions::default(),
        }
    }
}

/// One Kinesis stream, as a [`StreamCatalog`] and a [`ShardReader`].
#[derive(Clone)]
pub struct KinesisStream {
    client: Client,
    stream: String,
    options: KinesisOptions,
    efo: Option<Arc<SdkEfo>>,
}

impl std::fmt::Debug for KinesisStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KinesisStream").field("stream", &self.stream).field("options", &self.options).finish()
    }
}

impl KinesisStream {
    /// Opens `stream`: checks it exists and, with EFO, registers the consumer (or finds
    /// it) and waits until it is active. Errors name the resource and what to fix.
    pub async fn open(client: Client, stream: &str, options: KinesisOptions) -> Result<Self, ReadError> {
        let arn = consumers::stream_arn(&client, stream).await?;
        let efo = match &options.efo_consumer {
            Some(name) => Some(Arc::new(SdkEfo::register(client.clone(), stream, &arn, name).await?)),
            None => None,
        };
        Ok(Self { client, stream: stream.to_owned(), options, efo })
    }

    /// The stream name.
    pub fn name(&self) -> &str {
        &self.stream
    }
}

#[async_trait]
impl StreamCatalog for KinesisStream {
    async fn list_shards(&self) -> Result<Vec<ShardInfo>, ReadError> {
        catalog::list_shards(&self.client, &self.stream).await
    }
}

#[async_trait]
impl ShardReader for KinesisStream {
    async fn open(
        &self,
        shard: &ShardId,
        from: &StartingPosition,
        mode: ReadMode,
    ) -> Result<Box<dyn ShardSubscription>, ReadError> {
        match (&self.efo, mode) {
            (Some(efo), ReadMode::Live) => {
                let catalog: Arc<dyn StreamCatalog> = Arc::new(self.clone());
                let polling: Arc<dyn ShardReader> = Arc::new(self.clone());
                let sub = EfoSubscription::new(
                    efo.clone(),
                    catalog,
                    Some(polling),
                    shard.clone(),
                    from.clone(),
                    self.options.efo.clone(),
                )
                .subscribed()
                .await?;
                Ok(Box::new(sub))
            }
            _ => Ok(Box::new(polling::PollingSubscription::open(self.clone(), shard.clone(), from.clone()).await?)),
        }
    }
}
