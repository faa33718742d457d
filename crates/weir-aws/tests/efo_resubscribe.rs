//! EFO re-subscription logic under paused time, against a fake service built on the
//! in-process stream: subscriptions end after 5 minutes, may go silent, may be in use.
#![allow(clippy::unwrap_used, clippy::print_stdout)] // a test: a failed expectation is a failed test

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use weir_aws::kinesis::{EfoApi, EfoEvent, EfoEvents, EfoOptions, EfoSubscription};
use weir_core::ports::{ReadError, ReadMode, ShardReader, ShardSubscription, StreamCatalog};
use weir_core::{SequenceNumber, ShardId, StartingPosition};
use weir_local::{MemoryStream, StreamOptions};

/// A fake enhanced fan-out service over the in-process stream.
struct FakeEfo {
    stream: MemoryStream,
    lifetime: Duration,
    silent: AtomicU32,
    in_use: AtomicU32,
    subscribed_at: Mutex<Vec<StartingPosition>>,
}

struct FakeEvents {
    read: Box<dyn ShardSubscription>,
    until: tokio::time::Instant,
    silent: bool,
    continuation: Option<SequenceNumber>,
}

#[async_trait]
impl EfoEvents for FakeEvents {
    async fn next_event(&mut self) -> Result<Option<EfoEvent>, ReadError> {
        if self.silent {
            std::future::pending::<()>().await;
        }
        let left = self.until.saturating_duration_since(tokio::time::Instant::now());
        if left.is_zero() {
            return Ok(None);
        }
        // Like the service: an event at least every 5 s, with or without records.
        match tokio::time::timeout(left.min(Duration::from_secs(5)), self.read.next()).await {
            Ok(Ok(Some(b))) => {
                if let Some(last) = b.records.last() {
                    self.continuation = Some(last.position.sequence.clone());
                }
                let ended = b.child_shards.is_some();
                Ok(Some(EfoEvent {
                    records: b.records,
                    continuation: if ended { None } else { self.continuation.clone() },
                    millis_behind_latest: b.millis_behind_latest,
                    child_shards: b.child_shards.unwrap_or_default(),
                }))
            }
            Ok(Ok(None)) => Ok(None),
            Ok(Err(e)) => Err(e),
            Err(_) if tokio::time::Instant::now() >= self.until => Ok(None),
            Err(_) => Ok(Some(EfoEvent {
                continuation: self.continuation.clone(),
                millis_behind_latest: Some(0),
                ..EfoEvent::default()
            })),
        }
    }
}

#[async_trait]
impl EfoApi for FakeEfo {
    async fn subscribe(&self, shard: &ShardId, from: &StartingPosition) -> Result<Box<dyn EfoEvents>, ReadError> {
        if self.in_use.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)).is_ok() {
            return Err(ReadError::ResourceInUse("fake: subscription still active".into()));
        }
        self.subscribed_at.lock().unwrap().push(from.clone());
        let silent = self.silent.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)).is_ok();
        let read = self.stream.open(shard, from, ReadMode::Live).await?;
        let continuation = match from {
            StartingPosition::AfterSequenceNumber(s) => Some(s.clone()),
            _ => None,
        };
        Ok(Box::new(FakeEvents { read, until: tokio::time::Instant::now() + self.lifetime, silent, continuation }))
    }
}

fn setup() -> (MemoryStream, Arc<FakeEfo>, ShardId) {
    let stream = MemoryStream::new(
        StreamOptions { shards: 1, max_batch: 50, subscription_lifetime: None },
        Arc::new(weir_core::SystemClock),
    );
    let shard = stream.open_shards()[0].clone();
    let fake = Arc::new(FakeEfo {
        stream: stream.clone(),
        lifetime: Duration::from_secs(300),
        silent: AtomicU32::new(0),
        in_use: AtomicU32::new(0),
        subscribed_at: Mutex::new(Vec::new()),
    });
    (stream, fake, shard)
}

fn subscription(
    stream: &MemoryStream,
    fake: &Arc<FakeEfo>,
    shard: &ShardId,
    from: StartingPosition,
) -> EfoSubscription {
    let catalog: Arc<dyn StreamCatalog> = Arc::new(stream.clone());
    EfoSubscription::new(fake.clone(), catalog, None, shard.clone(), from, EfoOptions::default())
}

async fn collect(sub: &mut EfoSubscription, n: usize) -> Vec<Bytes> {
    let mut got = Vec::new();
    while got.len() < n {
        let b = sub.next().await.unwrap().unwrap();
        got.extend(b.records.into_iter().map(|r| r.data));
    }
    got
}

#[tokio::test(start_paused = true)]
async fn renews_every_five_minutes_after_the_last_continuation() {
    let (stream, fake, shard) = setup();
    let producer = {
        let stream = stream.clone();
        tokio::spawn(async move {
            for i in 0..720 {
                stream.put("k", Bytes::from(format!("r{i}")));
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        })
    };
    let mut sub = subscription(&stream, &fake, &shard, StartingPosition::TrimHorizon);
    let got = collect(&mut sub, 720).await;
    producer.await.unwrap();
    let want: Vec<Bytes> = (0..720).map(|i| Bytes::from(format!("r{i}"))).collect();
    assert_eq!(got, want, "every record once, in order, across subscriptions");
    let positions = fake.subscribed_at.lock().unwrap().clone();
    assert!(positions.len() >= 3, "12 minutes need at least 3 subscriptions: {positions:?}");
    assert_eq!(positions[0], StartingPosition::TrimHorizon);
    for p in &positions[1..] {
        assert!(matches!(p, StartingPosition::AfterSequenceNumber(_)), "re-subscribed with {p:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn silent_subscription_is_restarted_after_60_seconds() {
    let (stream, fake, shard) = setup();
    for i in 0..5 {
        stream.put("k", Bytes::from(format!("r{i}")));
    }
    fake.silent.store(1, Ordering::SeqCst);
    let mut sub = subscription(&stream, &fake, &shard, StartingPosition::TrimHorizon);
    let start = tokio::time::Instant::now();
    let got = collect(&mut sub, 5).await;
    assert_eq!(got.len(), 5);
    assert_eq!(start.elapsed(), Duration::from_secs(60), "restarted exactly at the silence timeout");
    assert_eq!(fake.subscribed_at.lock().unwrap().len(), 2);
}

#[tokio::test(start_paused = true)]
async fn zero_record_events_advance_the_position() {
    let (stream, fake, shard) = setup();
    let (_, last) = stream.put("k", Bytes::from_static(b"only"));
    let mut sub = subscription(&stream, &fake, &shard, StartingPosition::TrimHorizon);
    assert_eq!(collect(&mut sub, 1).await, vec![Bytes::from_static(b"only")]);
    // Six minutes of empty events: the subscription ends and is renewed.
    let mut empties = 0;
    let start = tokio::time::Instant::now();
    while start.elapsed() < Duration::from_secs(360) {
        let b = sub.next().await.unwrap().unwrap();
        assert!(b.records.is_empty());
        empties += 1;
    }
    assert!(empties > 60, "an event every 5 s, records or not: {empties}");
    let positions = fake.subscribed_at.lock().unwrap().clone();
    assert_eq!(positions.last(), Some(&StartingPosition::AfterSequenceNumber(last)));
}

#[tokio::test(start_paused = true)]
async fn resource_in_use_is_a_retryable_error_and_the_next_open_works() {
    let (stream, fake, shard) = setup();
    stream.put("k", Bytes::from_static(b"x"));
    fake.in_use.store(1, Ordering::SeqCst);
    let mut sub = subscription(&stream, &fake, &shard, StartingPosition::TrimHorizon);
    let err = sub.next().await.unwrap_err();
    assert!(matches!(err, ReadError::ResourceInUse(_)) && err.is_retryable(), "{err:?}");
    assert_eq!(collect(&mut sub, 1).await, vec![Bytes::from_static(b"x")]);
}

#[tokio::test(start_paused = true)]
async fn shard_end_from_child_shards() {
    let (stream, fake, shard) = setup();
    stream.put("k", Bytes::from_static(b"before"));
    let mut sub = subscription(&stream, &fake, &shard, StartingPosition::TrimHorizon);
    assert_eq!(collect(&mut sub, 1).await.len(), 1);
    let (a, b) = stream.split(&shard).unwrap();
    let end = loop {
        let batch = sub.next().await.unwrap().unwrap();
        if batch.child_shards.is_some() {
            break batch;
        }
    };
    let mut kids: Vec<ShardId> = end.child_shards.unwrap().into_iter().map(|c| c.shard_id).collect();
    kids.sort();
    assert_eq!(kids, vec![a, b]);
    assert!(sub.next().await.unwrap().is_none());
}
