//! Reading a past window `[from, to)` of a stream (replays): a [`ShardReader`] that ends
//! each shard at its first record that arrived at or after `to`.
//!
//! Start every shard `AT_TIMESTAMP(from)` (the lease's initial position); the wrapped
//! reader then reports a shard as ended, with no children to follow, at the first
//! record at or after `to`, or when, after `to` has passed, no record came for `idle`
//! (no record arriving later can belong to the window, since Kinesis stamps arrival at
//! put time; `MillisBehindLatest` is not trusted for this, emulators report 0 early). A shard that really ends
//! inside the window keeps its children, which the runtime then reads in turn. Reads are
//! forced to polling by default so a replay never takes a live consumer's enhanced
//! fan-out subscription.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use weir_core::ports::{ReadError, ReadMode, ShardReader, ShardSubscription};
use weir_core::{Clock, RecordBatch, ShardId, StartingPosition, Timestamp};

/// A reader bounded by the end of a window.
pub struct WindowReader {
    inner: Arc<dyn ShardReader>,
    end: Timestamp,
    clock: Arc<dyn Clock>,
    polling: bool,
    idle: Duration,
}

impl WindowReader {
    /// Ends shards at `end` (exclusive); `polling` forces GetRecords reads.
    pub fn new(inner: Arc<dyn ShardReader>, end: Timestamp, clock: Arc<dyn Clock>, polling: bool) -> Self {
        Self { inner, end, clock, polling, idle: Duration::from_secs(5) }
    }

    /// How long a shard may stay silent after the window's end before it counts as done.
    pub fn with_idle(mut self, idle: Duration) -> Self {
        self.idle = idle;
        self
    }
}

#[async_trait]
impl ShardReader for WindowReader {
    async fn open(
        &self,
        shard: &ShardId,
        from: &StartingPosition,
        mode: ReadMode,
    ) -> Result<Box<dyn ShardSubscription>, ReadError> {
        let mode = if self.polling { ReadMode::Polling } else { mode };
        let inner = self.inner.open(shard, from, mode).await?;
        Ok(Box::new(WindowSubscription {
            inner,
            shard: shard.clone(),
            end: self.end,
            clock: self.clock.clone(),
            idle: self.idle,
            last_record: tokio::time::Instant::now(),
            done: false,
        }))
    }
}

struct WindowSubscription {
    inner: Box<dyn ShardSubscription>,
    shard: ShardId,
    end: Timestamp,
    clock: Arc<dyn Clock>,
    idle: Duration,
    last_record: tokio::time::Instant,
    done: bool,
}

impl WindowSubscription {
    fn finish(&mut self, mut batch: RecordBatch) -> RecordBatch {
        tracing::info!(shard = %self.shard, end = %self.end.to_rfc3339(), "window end reached");
        self.done = true;
        batch.child_shards = Some(Vec::new());
        batch
    }
}

#[async_trait]
impl ShardSubscription for WindowSubscription {
    async fn next(&mut self) -> Result<Option<RecordBatch>, ReadError> {
        if self.done {
            return Ok(None);
        }
        let next = if self.clock.now() >= self.end {
            let left = self.idle.saturating_sub(self.last_record.elapsed());
            match tokio::time::timeout(left, self.inner.next()).await {
                Ok(r) => r?,
                Err(_) => {
                    let empty = RecordBatch {
                        shard_id: self.shard.clone(),
                        records: Vec::new(),
                        millis_behind_latest: Some(0),
                        child_shards: None,
                    };
                    return Ok(Some(self.finish(empty)));
                }
            }
        } else {
            self.inner.next().await?
        };
        let Some(mut batch) = next else { return Ok(None) };
        if let Some(cut) = batch.records.iter().position(|r| r.approximate_arrival >= self.end) {
            batch.records.truncate(cut);
            return Ok(Some(self.finish(batch)));
        }
        if batch.child_shards.is_some() {
            self.done = true;
            return Ok(Some(batch));
        }
        if !batch.records.is_empty() {
            self.last_record = tokio::time::Instant::now();
        }
        Ok(Some(batch))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use weir_local::{MemoryStream, StreamOptions};
    use weir_testkit::ManualClock;

    fn stream(clock: &ManualClock) -> MemoryStream {
        MemoryStream::new(
            StreamOptions { shards: 1, max_batch: 3, subscription_lifetime: None },
            Arc::new(clock.clone()),
        )
    }

    #[tokio::test(start_paused = true)]
    async fn stops_at_the_first_record_at_or_after_the_end() {
        let clock = ManualClock::new(Timestamp::from_millis(0));
        let s = stream(&clock);
        for i in 0..10 {
            s.put("k", Bytes::from(format!("{i}")));
            clock.advance(Duration::from_secs(1));
        }
        let r = WindowReader::new(Arc::new(s.clone()), Timestamp::from_millis(5_000), Arc::new(clock.clone()), true);
        let shard = s.open_shards()[0].clone();
        let mut sub = r
            .open(&shard, &StartingPosition::AtTimestamp(Timestamp::from_millis(2_000)), ReadMode::Live)
            .await
            .unwrap();
        let mut got = Vec::new();
        let mut ended = None;
        while let Some(b) = sub.next().await.unwrap() {
            got.extend(b.records.iter().map(|r| String::from_utf8(r.data.to_vec()).unwrap()));
            ended = b.child_shards.clone();
        }
        assert_eq!(got, vec!["2", "3", "4"], "arrivals in [2 s, 5 s)");
        assert_eq!(ended, Some(vec![]), "ended with no children to follow");
    }

    #[tokio::test(start_paused = true)]
    async fn a_quiet_shard_ends_after_the_idle_time() {
        let clock = ManualClock::new(Timestamp::from_millis(0));
        let s = stream(&clock);
        s.put("k", Bytes::from_static(b"a"));
        clock.advance(Duration::from_secs(60));
        let shard = s.open_shards()[0].clone();
        let r = WindowReader::new(Arc::new(s.clone()), Timestamp::from_millis(30_000), Arc::new(clock.clone()), true);
        let mut sub = r.open(&shard, &StartingPosition::TrimHorizon, ReadMode::Polling).await.unwrap();
        let b = sub.next().await.unwrap().unwrap();
        assert_eq!((b.records.len(), b.child_shards), (1, None), "the record before the end");
        let b = sub.next().await.unwrap().unwrap();
        assert_eq!(
            (b.records.len(), b.child_shards),
            (0, Some(vec![])),
            "silent for the idle time after the end: done"
        );
        assert!(sub.next().await.unwrap().is_none());
        // A shard with nothing at all: done after the idle time (paused time moves on).
        let r = WindowReader::new(Arc::new(s.clone()), Timestamp::from_millis(30_000), Arc::new(clock.clone()), true)
            .with_idle(Duration::from_secs(2));
        let mut sub = r.open(&shard, &StartingPosition::Latest, ReadMode::Polling).await.unwrap();
        let b = sub.next().await.unwrap().unwrap();
        assert!(b.records.is_empty() && b.child_shards == Some(vec![]));
    }

    /// Records the read mode each open asks for.
    struct ModeSpy {
        inner: MemoryStream,
        modes: std::sync::Mutex<Vec<ReadMode>>,
    }

    #[async_trait]
    impl ShardReader for ModeSpy {
        async fn open(
            &self,
            shard: &ShardId,
            from: &StartingPosition,
            mode: ReadMode,
        ) -> Result<Box<dyn ShardSubscription>, ReadError> {
            self.modes.lock().unwrap().push(mode);
            self.inner.open(shard, from, mode).await
        }
    }

    #[tokio::test(start_paused = true)]
    async fn replays_poll_unless_told_otherwise() {
        let clock = ManualClock::new(Timestamp::from_millis(0));
        let spy = Arc::new(ModeSpy { inner: stream(&clock), modes: Default::default() });
        let shard = spy.inner.open_shards()[0].clone();
        let end = Timestamp::from_millis(1_000);
        for (polling, expect) in [(true, ReadMode::Polling), (false, ReadMode::Live)] {
            let r = WindowReader::new(spy.clone(), end, Arc::new(clock.clone()), polling);
            r.open(&shard, &StartingPosition::TrimHorizon, ReadMode::Live).await.unwrap();
            assert_eq!(spy.modes.lock().unwrap().pop(), Some(expect), "polling = {polling}");
        }
    }
}
