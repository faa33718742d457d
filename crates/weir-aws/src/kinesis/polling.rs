//! Polling reads (GetShardIterator + GetRecords): the fallback live mode and the
//! catch-up and replay reader. Stays within 5 GetRecords calls per second per shard,
//! asks each call for about `max_bytes_per_call` of records (`call_size`),
//! recovers an expired iterator from the last record delivered, and ends the shard when
//! the next iterator is null (children from ChildShards, or from ListShards when the
//! service sends none).

use async_trait::async_trait;
use aws_sdk_kinesis::primitives::DateTime;
use aws_sdk_kinesis::types::ShardIteratorType;
use tokio::time::Instant;
use weir_core::ports::{ReadError, ShardSubscription, StreamCatalog};
use weir_core::{ChildShard, RecordBatch, SequenceNumber, ShardId, StartingPosition};

use super::KinesisStream;
use super::call_size::CallSize;
use super::records::{children, convert};
use crate::error::{ErrorClass, classify, describe};

pub(crate) struct PollingSubscription {
    stream: KinesisStream,
    shard: ShardId,
    start: StartingPosition,
    iterator: String,
    last: Option<SequenceNumber>,
    next_call: Instant,
    ended: bool,
    call_size: CallSize,
}

fn read_error<E: aws_sdk_kinesis::error::ProvideErrorMetadata + std::error::Error>(
    what: &str,
    e: &aws_sdk_kinesis::error::SdkError<E, aws_sdk_kinesis::config::http::HttpResponse>,
) -> ReadError {
    match classify(e) {
        ErrorClass::Throttling => ReadError::Throttled(describe(e)),
        ErrorClass::Transient => ReadError::Transient(describe(e)),
        ErrorClass::Permanent => ReadError::Fatal(format!("{what}: {}", describe(e))),
    }
}

impl PollingSubscription {
    pub(crate) async fn open(
        stream: KinesisStream,
        shard: ShardId,
        start: StartingPosition,
    ) -> Result<Self, ReadError> {
        let iterator = iterator(&stream, &shard, &start).await?;
        let max_records = u32::try_from(stream.options.max_records).unwrap_or(1);
        let call_size = CallSize::new(max_records, stream.options.max_bytes_per_call);
        Ok(Self { stream, shard, start, iterator, last: None, next_call: Instant::now(), ended: false, call_size })
    }

    /// Whether the shard is gone: confirmed through ListShards, not guessed.
    async fn confirm_missing(&self) -> ReadError {
        match self.stream.list_shards().await {
            Ok(shards) if !shards.iter().any(|s| s.id == self.shard) => ReadError::ShardNotFound(self.shard.clone()),
            Ok(_) => ReadError::Transient(format!("shard {} briefly not found", self.shard)),
            Err(e) => e,
        }
    }
}

pub(crate) async fn iterator(
    stream: &KinesisStream,
    shard: &ShardId,
    from: &StartingPosition,
) -> Result<String, ReadError> {
    let mut req = stream.client.get_shard_iterator().stream_name(&stream.stream).shard_id(shard.as_str());
    req = match from {
        StartingPosition::TrimHorizon => req.shard_iterator_type(ShardIteratorType::TrimHorizon),
        StartingPosition::Latest => req.shard_iterator_type(ShardIteratorType::Latest),
        StartingPosition::AtTimestamp(t) => {
            req.shard_iterator_type(ShardIteratorType::AtTimestamp).timestamp(DateTime::from_millis(t.as_millis()))
        }
        StartingPosition::AtSequenceNumber(s) => {
            req.shard_iterator_type(ShardIteratorType::AtSequenceNumber).starting_sequence_number(s.as_str())
        }
        StartingPosition::AfterSequenceNumber(s) => {
            req.shard_iterator_type(ShardIteratorType::AfterSequenceNumber).starting_sequence_number(s.as_str())
        }
    };
    let out = req.send().await.map_err(|e| {
        if e.as_service_error().is_some_and(|s| s.is_resource_not_found_exception()) {
            ReadError::ShardNotFound(shard.clone())
        } else {
            read_error(&format!("get shard iterator for {shard}"), &e)
        }
    })?;
    out.shard_iterator()
        .map(str::to_owned)
        .ok_or_else(|| ReadError::Transient(format!("no shard iterator for {shard}")))
}

/// Children of `shard` from the shard list (for services that omit ChildShards).
pub(crate) async fn children_from_catalog(
    stream: &KinesisStream,
    shard: &ShardId,
) -> Result<Vec<ChildShard>, ReadError> {
    Ok(stream
        .list_shards()
        .await?
        .into_iter()
        .filter(|s| s.parents.contains(shard))
        .map(|s| ChildShard { shard_id: s.id, parents: s.parents, hash_range: s.hash_range })
        .collect())
}

#[async_trait]
impl ShardSubscription for PollingSubscription {
    async fn next(&mut self) -> Result<Option<RecordBatch>, ReadError> {
        loop {
            if self.ended {
                return Ok(None);
            }
            tokio::time::sleep_until(self.next_call).await;
            self.next_call = Instant::now() + self.stream.options.poll_interval;
            let r = self
                .stream
                .client
                .get_records()
                .shard_iterator(&self.iterator)
                .limit(i32::try_from(self.call_size.limit()).unwrap_or(10_000))
                .send()
                .await;
            let mut out = match r {
                Ok(out) => out,
                Err(e) => {
                    let service = e.as_service_error();
                    if service.is_some_and(|s| s.is_expired_iterator_exception()) {
                        // Resume after the last record delivered.
                        let from = match &self.last {
                            Some(s) => StartingPosition::AfterSequenceNumber(s.clone()),
                            None => self.start.clone(),
                        };
                        self.iterator = iterator(&self.stream, &self.shard, &from).await?;
                        continue;
                    }
                    if service.is_some_and(|s| s.is_resource_not_found_exception()) {
                        return Err(self.confirm_missing().await);
                    }
                    return Err(read_error(&format!("get records from {}", self.shard), &e));
                }
            };
            let bytes: usize = out
                .records
                .iter()
                .map(|r| r.data.as_ref().len() + r.partition_key.as_ref().map_or(0, String::len))
                .sum();
            self.call_size.observe(out.records.len(), bytes as u64);
            let mut records = Vec::with_capacity(out.records.len());
            for r in std::mem::take(&mut out.records) {
                convert(r, &mut records)?;
            }
            if let Some(last) = records.last() {
                self.last = Some(last.position.sequence.clone());
            }
            if records.is_empty() {
                self.next_call = Instant::now() + self.stream.options.idle_poll_interval;
            }
            let child_shards = match out.next_shard_iterator() {
                Some(next) => {
                    self.iterator = next.to_owned();
                    None
                }
                None => {
                    self.ended = true;
                    let from_event = children(out.child_shards())?;
                    Some(if from_event.is_empty() {
                        children_from_catalog(&self.stream, &self.shard).await?
                    } else {
                        from_event
                    })
                }
            };
            return Ok(Some(RecordBatch {
                shard_id: self.shard.clone(),
                records,
                millis_behind_latest: out.millis_behind_latest().map(|m| m.max(0) as u64),
                child_shards,
            }));
        }
    }
}
