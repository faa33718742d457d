//! `files`: writes records as gzip NDJSON objects through an [`ObjectSink`], one object
//! per shard and flush, and acknowledges records only once their object is durable.
//!
//! Keys: `<prefix><shard>/<first sequence>-<last sequence>.ndjson.gz`. A put that finds
//! the key taken (a re-delivery after a crash with identical boundaries) counts as
//! durable. Delivery is at-least-once; the archiver consumer adds exactly-once.

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use flate2::Compression;
use flate2::write::GzEncoder;
use weir_core::ports::{ObjectSink, PutOptions};
use weir_core::{Acks, CloseReason, Consumer, ConsumerError, ExtendedSequenceNumber, RecordBatch, ShardId, Timestamp};

/// Options of [`FilesConsumer`].
#[derive(Debug, Clone)]
pub struct FilesOptions {
    /// Key prefix, e.g. `raw/`.
    pub prefix: String,
    /// Flush a shard's buffer at this many uncompressed bytes.
    pub max_bytes: usize,
    /// Flush a shard's buffer this long after its first record.
    pub max_age: Duration,
}

impl Default for FilesOptions {
    fn default() -> Self {
        Self { prefix: "raw/".into(), max_bytes: 4 * 1024 * 1024, max_age: Duration::from_secs(10) }
    }
}

struct Buffer {
    gz: GzEncoder<Vec<u8>>,
    raw_bytes: usize,
    first: ExtendedSequenceNumber,
    last: ExtendedSequenceNumber,
    opened: Timestamp,
}

/// The `files` reference consumer.
pub struct FilesConsumer {
    name: String,
    sink: Arc<dyn ObjectSink>,
    options: FilesOptions,
    buffers: BTreeMap<ShardId, Buffer>,
    now: Timestamp,
}

impl FilesConsumer {
    /// A consumer named `name` writing to `sink`.
    pub fn new(name: &str, sink: Arc<dyn ObjectSink>, options: FilesOptions) -> Self {
        Self { name: name.to_owned(), sink, options, buffers: BTreeMap::new(), now: Timestamp::default() }
    }

    async fn flush(&mut self, shard: &ShardId, acks: &dyn Acks) -> Result<(), ConsumerError> {
        let Some(buf) = self.buffers.remove(shard) else {
            return Ok(());
        };
        let key = format!("{}{}/{}-{}.ndjson.gz", self.options.prefix, shard, buf.first, buf.last);
        let last = buf.last.clone();
        let body = match buf.gz.finish() {
            Ok(b) => Bytes::from(b),
            Err(e) => return Err(ConsumerError::with_source("gzip finish", e)),
        };
        let options = PutOptions {
            content_type: Some("application/x-ndjson".into()),
            content_encoding: Some("gzip".into()),
            metadata: Vec::new(),
        };
        let mut retry = crate::Backoff::new(Duration::from_millis(100), Duration::from_secs(10));
        loop {
            match self.sink.put_if_absent(&key, body.clone(), &options).await {
                Ok(_) => break,
                Err(e) if e.is_retryable() => {
                    tracing::warn!(consumer = %self.name, %key, error = %e, "put failed; retrying");
                    tokio::time::sleep(retry.next_delay()).await;
                }
                Err(e) => return Err(ConsumerError::with_source(format!("put {key}"), e)),
            }
        }
        acks.durable(shard, &last);
        Ok(())
    }
}

#[async_trait]
impl Consumer for FilesConsumer {
    fn name(&self) -> &str {
        &self.name
    }

    async fn on_batch(&mut self, batch: &RecordBatch, acks: &dyn Acks) -> Result<(), ConsumerError> {
        let (Some(first), Some(last)) = (batch.records.first(), batch.last_position()) else {
            return Ok(());
        };
        let now = self.now;
        let buf = self.buffers.entry(batch.shard_id.clone()).or_insert_with(|| Buffer {
            gz: GzEncoder::new(Vec::new(), Compression::default()),
            raw_bytes: 0,
            first: first.position.clone(),
            last: last.clone(),
            opened: now,
        });
        let mut since_yield = 0;
        for r in &batch.records {
            since_yield += r.data.len();
            if since_yield >= weir_core::YIELD_EVERY_BYTES {
                since_yield = 0;
                tokio::task::yield_now().await;
            }
            let newline = r.data.last() != Some(&b'\n');
            let w = buf.gz.write_all(&r.data).and_then(|()| if newline { buf.gz.write_all(b"\n") } else { Ok(()) });
            if let Err(e) = w {
                return Err(ConsumerError::with_source("gzip write", e));
            }
            buf.raw_bytes += r.data.len() + usize::from(newline);
        }
        buf.last = last.clone();
        if buf.raw_bytes >= self.options.max_bytes {
            self.flush(&batch.shard_id, acks).await?;
        }
        Ok(())
    }

    async fn on_tick(&mut self, now: Timestamp, acks: &dyn Acks) -> Result<(), ConsumerError> {
        self.now = now;
        let due: Vec<ShardId> = self
            .buffers
            .iter()
            .filter(|(_, b)| now.saturating_since(b.opened) >= self.options.max_age)
            .map(|(s, _)| s.clone())
            .collect();
        for shard in due {
            self.flush(&shard, acks).await?;
        }
        Ok(())
    }

    async fn on_shard_close(
        &mut self,
        shard: &ShardId,
        reason: CloseReason,
        acks: &dyn Acks,
    ) -> Result<(), ConsumerError> {
        if reason.should_flush() {
            self.flush(shard, acks).await
        } else {
            self.buffers.remove(shard);
            Ok(())
        }
    }
}
