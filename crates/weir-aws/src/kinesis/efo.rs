//! Enhanced fan-out: a push subscription per shard (SubscribeToShard).
//!
//! [`EfoSubscription`] turns the service's subscriptions - each ends after at most five
//! minutes - into one continuous read: it re-subscribes with `AFTER_SEQUENCE_NUMBER` of
//! the last continuation sequence number (events with zero records still advance it),
//! restarts a subscription that sent nothing for `silence_timeout`, and ends the shard
//! on ChildShards. Shard end is never guessed from a missing event: if the service
//! never sends ChildShards (some emulators), a shard the catalog lists as closed is
//! drained with a polling read, whose null next iterator is authoritative.
//!
//! Records before the requested start are dropped: a subscription is never allowed to
//! start earlier than asked (one emulator ignores the sequence number of the starting
//! position); with a correct service the filter never drops anything.
//!
//! The service side is the [`EfoApi`] trait ([`SdkEfo`] on the AWS SDK), so the
//! re-subscription logic is tested under paused time with an in-process fake.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_kinesis::Client;
use aws_sdk_kinesis::error::ProvideErrorMetadata;
use aws_sdk_kinesis::primitives::DateTime;
use aws_sdk_kinesis::types::{ConsumerStatus, ShardIteratorType, SubscribeToShardEventStream};
use weir_core::ports::{ReadError, ReadMode, ShardReader, ShardSubscription, StreamCatalog};
use weir_core::{ChildShard, Record, RecordBatch, SequenceNumber, ShardId, StartingPosition};

use super::records::{children, convert};
use crate::error::describe;

/// One event of a subscription.
#[derive(Debug, Clone, Default)]
pub struct EfoEvent {
    /// Records (possibly none).
    pub records: Vec<Record>,
    /// Where to resume; `None` when the shard has ended.
    pub continuation: Option<SequenceNumber>,
    /// How far behind the tip.
    pub millis_behind_latest: Option<u64>,
    /// Children, on the last event of a closed shard.
    pub child_shards: Vec<ChildShard>,
}

/// The events of one subscription.
#[async_trait]
pub trait EfoEvents: Send {
    /// The next event; `Ok(None)` when the subscription ended (after at most 5 minutes).
    async fn next_event(&mut self) -> Result<Option<EfoEvent>, ReadError>;
}

/// Starts subscriptions.
#[async_trait]
pub trait EfoApi: Send + Sync {
    /// SubscribeToShard.
    async fn subscribe(&self, shard: &ShardId, from: &StartingPosition) -> Result<Box<dyn EfoEvents>, ReadError>;
}

/// Tuning of EFO reads.
#[derive(Debug, Clone)]
pub struct EfoOptions {
    /// A subscription silent this long is restarted (the service sends an event at least
    /// every 5 s while it is healthy).
    pub silence_timeout: Duration,
    /// How often, while at the tip, to ask the catalog whether the shard is closed (for
    /// services that send no ChildShards).
    pub closed_check_interval: Duration,
}

impl Default for EfoOptions {
    fn default() -> Self {
        Self { silence_timeout: Duration::from_secs(60), closed_check_interval: Duration::from_secs(10) }
    }
}

/// A continuous EFO read of one shard. See the module documentation.
pub struct EfoSubscription {
    api: Arc<dyn EfoApi>,
    catalog: Arc<dyn StreamCatalog>,
    polling: Option<Arc<dyn ShardReader>>,
    shard: ShardId,
    position: StartingPosition,
    events: Option<Box<dyn EfoEvents>>,
    drain: Option<Box<dyn ShardSubscription>>,
    options: EfoOptions,
    last_closed_check: Option<tokio::time::Instant>,
    /// Where the current subscription was asked to start.
    floor: StartingPosition,
    ended: bool,
    /// Subscriptions started (tests and metrics).
    pub subscriptions: u64,
}

impl EfoSubscription {
    /// A read of `shard` from `from`. `polling` (when given) drains a shard the catalog
    /// reports closed if the service never sends ChildShards.
    pub fn new(
        api: Arc<dyn EfoApi>,
        catalog: Arc<dyn StreamCatalog>,
        polling: Option<Arc<dyn ShardReader>>,
        shard: ShardId,
        from: StartingPosition,
        options: EfoOptions,
    ) -> Self {
        Self {
            api,
            catalog,
            polling,
            shard,
            position: from,
            events: None,
            drain: None,
            options,
            last_closed_check: None,
            floor: StartingPosition::TrimHorizon,
            ended: false,
            subscriptions: 0,
        }
    }

    /// Subscribes at once (so `LATEST` means "from now" rather than "from the first
    /// read").
    pub async fn subscribed(mut self) -> Result<Self, ReadError> {
        let (api, shard, position) = (self.api.clone(), self.shard.clone(), self.position.clone());
        self.events = Some(api.subscribe(&shard, &position).await?);
        self.floor = position;
        self.subscriptions += 1;
        Ok(self)
    }

    /// `Some(closed)` for a listed shard, `None` when the catalog does not list it.
    fn shard_closed(&self) -> impl std::future::Future<Output = Result<Option<bool>, ReadError>> + Send + 'static {
        let (catalog, shard) = (self.catalog.clone(), self.shard.clone());
        async move {
            let shards = catalog.list_shards().await?;
            Ok(shards.iter().find(|s| s.id == shard).map(|s| s.closed))
        }
    }

    fn batch(&self, records: Vec<Record>, behind: Option<u64>, end: Option<Vec<ChildShard>>) -> RecordBatch {
        RecordBatch { shard_id: self.shard.clone(), records, millis_behind_latest: behind, child_shards: end }
    }
}

#[async_trait]
impl ShardSubscription for EfoSubscription {
    async fn next(&mut self) -> Result<Option<RecordBatch>, ReadError> {
        loop {
            if self.ended {
                return Ok(None);
            }
            if let Some(drain) = &mut self.drain {
                let b = drain.next().await?;
                if b.as_ref().is_none_or(RecordBatch::is_shard_end) {
                    self.ended = true;
                }
                return Ok(b);
            }
            if self.events.is_none() {
                self.events = Some(self.api.subscribe(&self.shard, &self.position).await?);
                self.floor = self.position.clone();
                self.subscriptions += 1;
            }
            let Some(events) = self.events.as_mut() else {
                continue;
            };
            let event = match tokio::time::timeout(self.options.silence_timeout, events.next_event()).await {
                Err(_) => {
                    tracing::warn!(shard = %self.shard, "subscription silent; restarting it");
                    self.events = None;
                    continue;
                }
                Ok(Ok(None)) => {
                    self.events = None;
                    continue;
                }
                Ok(Err(ReadError::ShardNotFound(_))) => {
                    self.events = None;
                    // Confirm before believing it.
                    return match self.shard_closed().await? {
                        None => Err(ReadError::ShardNotFound(self.shard.clone())),
                        Some(_) => Err(ReadError::Transient(format!("shard {} reported missing", self.shard))),
                    };
                }
                Ok(Err(e)) => {
                    self.events = None;
                    return Err(e);
                }
                Ok(Ok(Some(mut event))) => {
                    let floor = &self.floor;
                    event.records.retain(|r| at_or_after(floor, r));
                    event
                }
            };
            if let Some(c) = &event.continuation {
                self.position = StartingPosition::AfterSequenceNumber(c.clone());
            } else if let Some(last) = event.records.last() {
                self.position = StartingPosition::AfterSequenceNumber(last.position.sequence.clone());
            }
            // The end: children announced with no continuation, or with nothing left to
            // read (some services repeat ChildShards on every event of a closed shard).
            if !event.child_shards.is_empty() && (event.continuation.is_none() || event.records.is_empty()) {
                self.ended = true;
                return Ok(Some(self.batch(event.records, event.millis_behind_latest, Some(event.child_shards))));
            }
            let at_tip = event.records.is_empty() && event.millis_behind_latest.unwrap_or(0) == 0;
            let check_due = self.last_closed_check.is_none_or(|t| t.elapsed() >= self.options.closed_check_interval);
            if (at_tip && check_due) || event.continuation.is_none() {
                self.last_closed_check = Some(tokio::time::Instant::now());
                if self.shard_closed().await? == Some(true)
                    && let Some(polling) = self.polling.clone()
                {
                    tracing::info!(shard = %self.shard, "closed shard without ChildShards on the subscription; draining by polling");
                    self.events = None;
                    let (shard, position) = (self.shard.clone(), self.position.clone());
                    self.drain = Some(polling.open(&shard, &position, ReadMode::Polling).await?);
                    if !event.records.is_empty() {
                        return Ok(Some(self.batch(event.records, event.millis_behind_latest, None)));
                    }
                    continue;
                }
            }
            return Ok(Some(self.batch(event.records, event.millis_behind_latest, None)));
        }
    }
}

/// Whether `r` is at or after where a subscription was asked to start.
fn at_or_after(floor: &StartingPosition, r: &Record) -> bool {
    match floor {
        StartingPosition::TrimHorizon | StartingPosition::Latest => true,
        StartingPosition::AtSequenceNumber(s) => r.position.sequence >= *s,
        StartingPosition::AfterSequenceNumber(s) => r.position.sequence > *s,
        StartingPosition::AtTimestamp(t) => r.approximate_arrival >= *t,
    }
}

/// [`EfoApi`] on the AWS SDK, for one registered stream consumer.
pub struct SdkEfo {
    client: Client,
    consumer_arn: String,
}

fn sdk_read_error<E: ProvideErrorMetadata>(what: &str, code: Option<&str>, e: &E) -> ReadError {
    let text = format!("{what}: {}: {}", code.unwrap_or("error"), e.message().unwrap_or(""));
    match code {
        Some("ResourceInUseException") => ReadError::ResourceInUse(text),
        Some("LimitExceededException" | "ThrottlingException") => ReadError::Throttled(text),
        Some("ResourceNotFoundException") => ReadError::ShardNotFound(ShardId::new(what)),
        Some("InternalFailureException" | "KMSThrottlingException") => ReadError::Transient(text),
        Some("AccessDeniedException" | "ValidationException" | "InvalidArgumentException") => ReadError::Fatal(text),
        _ => ReadError::Transient(text),
    }
}

impl SdkEfo {
    /// Finds the consumer `name` of the stream or registers it (never twice), then waits
    /// until it is ACTIVE.
    pub async fn register(client: Client, stream: &str, stream_arn: &str, name: &str) -> Result<Self, ReadError> {
        let fatal = |what: &str, e: String| {
            ReadError::Fatal(format!(
                "{what} enhanced fan-out consumer {name} of stream {stream}: {e} (needs kinesis:DescribeStreamConsumer and kinesis:RegisterStreamConsumer)"
            ))
        };
        for attempt in 0..240 {
            let described = client.describe_stream_consumer().stream_arn(stream_arn).consumer_name(name).send().await;
            match described {
                Ok(out) => {
                    if let Some(d) = out.consumer_description()
                        && d.consumer_status() == &ConsumerStatus::Active
                    {
                        return Ok(Self { client, consumer_arn: d.consumer_arn().to_owned() });
                    }
                }
                Err(e) if e.as_service_error().is_some_and(|s| s.is_resource_not_found_exception()) => {
                    let registered =
                        client.register_stream_consumer().stream_arn(stream_arn).consumer_name(name).send().await;
                    if let Err(e) = registered {
                        // In use: another worker registered it first; describe again.
                        if !e.as_service_error().is_some_and(|s| s.is_resource_in_use_exception()) {
                            return Err(fatal("cannot register", describe(&e)));
                        }
                    }
                }
                Err(e) if attempt > 10 => return Err(fatal("cannot describe", describe(&e))),
                Err(_) => {}
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        Err(ReadError::Fatal(format!("enhanced fan-out consumer {name} of stream {stream} did not become ACTIVE")))
    }

    /// The consumer's ARN.
    pub fn consumer_arn(&self) -> &str {
        &self.consumer_arn
    }
}

#[async_trait]
impl EfoApi for SdkEfo {
    async fn subscribe(&self, shard: &ShardId, from: &StartingPosition) -> Result<Box<dyn EfoEvents>, ReadError> {
        let builder = aws_sdk_kinesis::types::StartingPosition::builder();
        let builder = match from {
            StartingPosition::TrimHorizon => builder.r#type(ShardIteratorType::TrimHorizon),
            StartingPosition::Latest => builder.r#type(ShardIteratorType::Latest),
            StartingPosition::AtTimestamp(t) => {
                builder.r#type(ShardIteratorType::AtTimestamp).timestamp(DateTime::from_millis(t.as_millis()))
            }
            StartingPosition::AtSequenceNumber(s) => {
                builder.r#type(ShardIteratorType::AtSequenceNumber).sequence_number(s.as_str())
            }
            StartingPosition::AfterSequenceNumber(s) => {
                builder.r#type(ShardIteratorType::AfterSequenceNumber).sequence_number(s.as_str())
            }
        };
        let position = builder.build().map_err(|e| ReadError::Fatal(format!("starting position: {e}")))?;
        let out = self
            .client
            .subscribe_to_shard()
            .consumer_arn(&self.consumer_arn)
            .shard_id(shard.as_str())
            .starting_position(position)
            .send()
            .await
            .map_err(|e| match e.as_service_error() {
                Some(s) => {
                    let mut err = sdk_read_error(&format!("subscribe to {shard}"), s.code(), s);
                    if let ReadError::ShardNotFound(_) = err {
                        err = ReadError::ShardNotFound(shard.clone());
                    }
                    err
                }
                None => ReadError::Transient(describe(&e)),
            })?;
        Ok(Box::new(SdkEvents { shard: shard.clone(), receiver: out.event_stream }))
    }
}

struct SdkEvents {
    shard: ShardId,
    receiver: aws_sdk_kinesis::primitives::event_stream::EventReceiver<
        SubscribeToShardEventStream,
        aws_sdk_kinesis::types::error::SubscribeToShardEventStreamError,
    >,
}

#[async_trait]
impl EfoEvents for SdkEvents {
    async fn next_event(&mut self) -> Result<Option<EfoEvent>, ReadError> {
        loop {
            let message = self.receiver.recv().await.map_err(|e| match e.as_service_error() {
                Some(s) => {
                    let mut err = sdk_read_error(&format!("subscription to {}", self.shard), s.code(), s);
                    if let ReadError::ShardNotFound(_) = err {
                        err = ReadError::ShardNotFound(self.shard.clone());
                    }
                    err
                }
                None => ReadError::Transient(format!("subscription to {}: {e}", self.shard)),
            })?;
            let Some(message) = message else {
                return Ok(None);
            };
            let SubscribeToShardEventStream::SubscribeToShardEvent(mut event) = message else {
                continue;
            };
            let mut records = Vec::with_capacity(event.records.len());
            for r in std::mem::take(&mut event.records) {
                convert(r, &mut records)?;
            }
            let continuation = match event.continuation_sequence_number() {
                "" => None,
                c => Some(SequenceNumber::parse(c).map_err(|e| {
                    ReadError::Fatal(format!("invalid continuation sequence number from service: {e}"))
                })?),
            };
            return Ok(Some(EfoEvent {
                records,
                continuation,
                millis_behind_latest: Some(event.millis_behind_latest().max(0) as u64),
                child_shards: children(event.child_shards())?,
            }));
        }
    }
}
