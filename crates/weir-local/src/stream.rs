//! An in-process sharded stream with Kinesis semantics: MD5 partition-key routing,
//! 56-digit sequence numbers, split and merge with parent/child shards, shard end
//! announced with child shards, and optional subscription expiry (as EFO ends
//! subscriptions after five minutes).

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use tokio::sync::watch;
use weir_core::ports::{ReadError, ReadMode, ShardInfo, ShardReader, ShardSubscription, StreamCatalog};
use weir_core::record::partition_hash;
use weir_core::{
    ChildShard, Clock, ExtendedSequenceNumber, HashKeyRange, Record, RecordBatch, SequenceNumber, ShardId,
    StartingPosition, Timestamp,
};

/// Options of a [`MemoryStream`].
#[derive(Debug, Clone)]
pub struct StreamOptions {
    /// Open shards at creation, splitting the hash key space evenly.
    pub shards: usize,
    /// Most records per batch returned by a read.
    pub max_batch: usize,
    /// When set, a subscription fails with [`ReadError::Expired`] this long (tokio time)
    /// after it was opened.
    pub subscription_lifetime: Option<Duration>,
}

impl Default for StreamOptions {
    fn default() -> Self {
        Self { shards: 4, max_batch: 1_000, subscription_lifetime: None }
    }
}

#[derive(Debug)]
struct ShardState {
    info: ShardInfo,
    records: Vec<Record>,
    /// Records before this index are past retention: reads do not return them.
    expired: usize,
    children: Vec<ChildShard>,
}

#[derive(Debug)]
struct State {
    shards: Vec<ShardState>,
    next_seq: u128,
    next_shard: u32,
}

struct Inner {
    state: Mutex<State>,
    version: watch::Sender<u64>,
    clock: Arc<dyn Clock>,
    options: StreamOptions,
}

/// The in-process stream. Cloning shares the stream.
#[derive(Clone)]
pub struct MemoryStream {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for MemoryStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryStream").field("options", &self.inner.options).finish()
    }
}

fn shard_id(n: u32) -> ShardId {
    ShardId::new(format!("shardId-{n:012}"))
}

impl MemoryStream {
    /// A stream with `options.shards` open shards; arrival times come from `clock`.
    pub fn new(options: StreamOptions, clock: Arc<dyn Clock>) -> Self {
        let n = options.shards.max(1) as u128;
        let width = u128::MAX / n;
        let shards = (0..n)
            .map(|i| {
                let start = i * width;
                let end = if i == n - 1 { u128::MAX } else { (i + 1) * width - 1 };
                ShardState {
                    info: ShardInfo {
                        id: shard_id(i as u32),
                        parents: vec![],
                        hash_range: HashKeyRange { start, end },
                        closed: false,
                    },
                    records: Vec::new(),
                    expired: 0,
                    children: Vec::new(),
                }
            })
            .collect();
        let (version, _) = watch::channel(0);
        Self {
            inner: Arc::new(Inner {
                state: Mutex::new(State { shards, next_seq: 1, next_shard: n as u32 }),
                version,
                clock,
                options,
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.inner.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn bump(&self) {
        self.inner.version.send_modify(|v| *v += 1);
    }

    /// Appends a record to the open shard its partition key hashes to.
    pub fn put(&self, partition_key: &str, data: Bytes) -> (ShardId, SequenceNumber) {
        let arrival = self.inner.clock.now();
        let out = {
            let mut s = self.lock();
            let hash = partition_hash(partition_key);
            let seq_n = s.next_seq;
            s.next_seq += 1;
            // Kinesis-like 56-digit sequence numbers; fixed width keeps them ordered.
            let seq =
                SequenceNumber::parse(&format!("49{seq_n:054}")).unwrap_or_else(|_| SequenceNumber::from_u128(seq_n));
            let shard = s.shards.iter_mut().find(|sh| !sh.info.closed && sh.info.hash_range.contains(hash));
            // Open shards always cover the whole key space.
            let Some(shard) = shard else { unreachable!("open shards cover the key space") };
            shard.records.push(Record {
                partition_key: partition_key.to_owned(),
                position: ExtendedSequenceNumber::plain(seq.clone()),
                approximate_arrival: arrival,
                data,
            });
            (shard.info.id.clone(), seq)
        };
        self.bump();
        out
    }

    /// Splits an open shard at the middle of its hash range; returns the two children.
    pub fn split(&self, shard: &ShardId) -> Option<(ShardId, ShardId)> {
        let out = {
            let mut s = self.lock();
            let idx = s.shards.iter().position(|sh| &sh.info.id == shard && !sh.info.closed)?;
            let range = s.shards[idx].info.hash_range;
            let mid = range.start + (range.end - range.start) / 2;
            let ranges =
                [HashKeyRange { start: range.start, end: mid }, HashKeyRange { start: mid + 1, end: range.end }];
            let ids = self.add_children(&mut s, &[idx], &ranges);
            (ids[0].clone(), ids[1].clone())
        };
        self.bump();
        Some(out)
    }

    /// Merges two adjacent open shards; returns the child.
    pub fn merge(&self, a: &ShardId, b: &ShardId) -> Option<ShardId> {
        let out = {
            let mut s = self.lock();
            let ia = s.shards.iter().position(|sh| &sh.info.id == a && !sh.info.closed)?;
            let ib = s.shards.iter().position(|sh| &sh.info.id == b && !sh.info.closed)?;
            let (ra, rb) = (s.shards[ia].info.hash_range, s.shards[ib].info.hash_range);
            let (lo, hi) = if ra.start < rb.start { (ra, rb) } else { (rb, ra) };
            if lo.end.checked_add(1) != Some(hi.start) {
                return None;
            }
            let ids = self.add_children(&mut s, &[ia, ib], &[HashKeyRange { start: lo.start, end: hi.end }]);
            ids[0].clone()
        };
        self.bump();
        Some(out)
    }

    fn add_children(&self, s: &mut State, parents: &[usize], ranges: &[HashKeyRange]) -> Vec<ShardId> {
        let parent_ids: Vec<ShardId> = parents.iter().map(|i| s.shards[*i].info.id.clone()).collect();
        let mut children = Vec::new();
        for range in ranges {
            let id = shard_id(s.next_shard);
            s.next_shard += 1;
            children.push(ChildShard { shard_id: id, parents: parent_ids.clone(), hash_range: *range });
        }
        for i in parents {
            s.shards[*i].info.closed = true;
            s.shards[*i].children = children.clone();
        }
        for c in &children {
            s.shards.push(ShardState {
                info: ShardInfo {
                    id: c.shard_id.clone(),
                    parents: parent_ids.clone(),
                    hash_range: c.hash_range,
                    closed: false,
                },
                records: Vec::new(),
                expired: 0,
                children: Vec::new(),
            });
        }
        children.into_iter().map(|c| c.shard_id).collect()
    }

    /// Open shards, in creation order.
    pub fn open_shards(&self) -> Vec<ShardId> {
        self.lock().shards.iter().filter(|s| !s.info.closed).map(|s| s.info.id.clone()).collect()
    }

    /// Number of records stored per shard.
    pub fn record_counts(&self) -> Vec<(ShardId, usize)> {
        self.lock().shards.iter().map(|s| (s.info.id.clone(), s.records.len())).collect()
    }

    /// Every record of every shard (tests compare deliveries against it).
    pub fn all_records(&self) -> Vec<(ShardId, Record)> {
        self.lock().shards.iter().flat_map(|s| s.records.iter().map(|r| (s.info.id.clone(), r.clone()))).collect()
    }

    /// Expires every record that arrived before `arrival`, as the stream's retention
    /// period does: reads no longer return them (from any starting position). Open
    /// reads already past them are not affected.
    pub fn expire_before(&self, arrival: Timestamp) {
        let mut s = self.lock();
        for shard in &mut s.shards {
            shard.expired = shard.expired.max(shard.records.partition_point(|r| r.approximate_arrival < arrival));
        }
    }

    /// The stream's clock.
    pub fn now(&self) -> Timestamp {
        self.inner.clock.now()
    }
}

#[async_trait]
impl StreamCatalog for MemoryStream {
    async fn list_shards(&self) -> Result<Vec<ShardInfo>, ReadError> {
        Ok(self.lock().shards.iter().map(|s| s.info.clone()).collect())
    }
}

#[async_trait]
impl ShardReader for MemoryStream {
    async fn open(
        &self,
        shard: &ShardId,
        from: &StartingPosition,
        _mode: ReadMode,
    ) -> Result<Box<dyn ShardSubscription>, ReadError> {
        let s = self.lock();
        let idx = s
            .shards
            .iter()
            .position(|sh| &sh.info.id == shard)
            .ok_or_else(|| ReadError::ShardNotFound(shard.clone()))?;
        let recs = &s.shards[idx].records;
        let cursor = s.shards[idx].expired.max(match from {
            StartingPosition::TrimHorizon => 0,
            StartingPosition::Latest => recs.len(),
            StartingPosition::AtTimestamp(t) => recs.partition_point(|r| r.approximate_arrival < *t),
            StartingPosition::AtSequenceNumber(q) => recs.partition_point(|r| r.position.sequence < *q),
            StartingPosition::AfterSequenceNumber(q) => recs.partition_point(|r| r.position.sequence <= *q),
        });
        drop(s);
        let expires_at = self.inner.options.subscription_lifetime.map(|d| tokio::time::Instant::now() + d);
        Ok(Box::new(MemorySubscription {
            stream: self.clone(),
            idx,
            cursor,
            rx: self.inner.version.subscribe(),
            ended: false,
            expires_at,
        }))
    }
}

struct MemorySubscription {
    stream: MemoryStream,
    idx: usize,
    cursor: usize,
    rx: watch::Receiver<u64>,
    ended: bool,
    expires_at: Option<tokio::time::Instant>,
}

#[async_trait]
impl ShardSubscription for MemorySubscription {
    async fn next(&mut self) -> Result<Option<RecordBatch>, ReadError> {
        loop {
            if self.ended {
                return Ok(None);
            }
            if self.expires_at.is_some_and(|t| tokio::time::Instant::now() >= t) {
                return Err(ReadError::Expired);
            }
            // Mark the version seen before looking, so no put is missed in between.
            self.rx.borrow_and_update();
            {
                let s = self.stream.lock();
                let shard = &s.shards[self.idx];
                let len = shard.records.len();
                if self.cursor < len {
                    let end = len.min(self.cursor + self.stream.inner.options.max_batch.max(1));
                    let records = shard.records[self.cursor..end].to_vec();
                    self.cursor = end;
                    let behind = if end == len {
                        0
                    } else {
                        let now = self.stream.inner.clock.now();
                        let last = records.last().map_or(now, |r| r.approximate_arrival);
                        now.saturating_since(last).as_millis() as u64
                    };
                    return Ok(Some(RecordBatch {
                        shard_id: shard.info.id.clone(),
                        records,
                        millis_behind_latest: Some(behind),
                        child_shards: None,
                    }));
                }
                if shard.info.closed {
                    self.ended = true;
                    return Ok(Some(RecordBatch {
                        shard_id: shard.info.id.clone(),
                        records: Vec::new(),
                        millis_behind_latest: Some(0),
                        child_shards: Some(shard.children.clone()),
                    }));
                }
            }
            match self.expires_at {
                Some(t) => {
                    tokio::select! {
                        r = self.rx.changed() => if r.is_err() { return Ok(None) },
                        _ = tokio::time::sleep_until(t) => {}
                    }
                }
                None => {
                    if self.rx.changed().await.is_err() {
                        return Ok(None);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_core::SystemClock;
    use weir_testkit::conformance::{StreamHarness, shard_reader_suite};

    struct Harness(MemoryStream);

    #[async_trait]
    impl StreamHarness for Harness {
        fn reader(&self) -> Arc<dyn ShardReader> {
            Arc::new(self.0.clone())
        }
        fn catalog(&self) -> Arc<dyn StreamCatalog> {
            Arc::new(self.0.clone())
        }
        async fn put(&self, pk: &str, data: Bytes) -> (ShardId, SequenceNumber) {
            self.0.put(pk, data)
        }
        async fn split(&self, shard: &ShardId) {
            self.0.split(shard).unwrap();
        }
        async fn merge(&self, a: &ShardId, b: &ShardId) {
            self.0.merge(a, b).unwrap();
        }
        fn now(&self) -> Timestamp {
            self.0.now()
        }
    }

    #[tokio::test]
    async fn passes_shard_reader_conformance() {
        for mode in [ReadMode::Live, ReadMode::Polling] {
            let opts = StreamOptions { shards: 1, max_batch: 7, subscription_lifetime: None };
            let h = Harness(MemoryStream::new(opts, Arc::new(SystemClock)));
            shard_reader_suite(&h, mode).await;
        }
    }

    #[test]
    fn shards_cover_the_key_space() {
        let s = MemoryStream::new(StreamOptions { shards: 5, ..Default::default() }, Arc::new(SystemClock));
        let shards = futures_lite(s.list_shards());
        assert_eq!(shards[0].hash_range.start, 0);
        assert_eq!(shards[4].hash_range.end, u128::MAX);
        for w in shards.windows(2) {
            assert_eq!(w[0].hash_range.end + 1, w[1].hash_range.start);
        }
    }

    fn futures_lite<T>(f: impl std::future::Future<Output = Result<T, ReadError>>) -> T {
        tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(f).unwrap()
    }

    #[tokio::test(start_paused = true)]
    async fn subscriptions_expire() {
        let opts = StreamOptions { shards: 1, max_batch: 10, subscription_lifetime: Some(Duration::from_secs(300)) };
        let s = MemoryStream::new(opts, Arc::new(SystemClock));
        let shard = s.open_shards()[0].clone();
        let mut sub = s.open(&shard, &StartingPosition::TrimHorizon, ReadMode::Live).await.unwrap();
        let start = tokio::time::Instant::now();
        let r = sub.next().await;
        assert!(matches!(r, Err(ReadError::Expired)));
        assert_eq!(start.elapsed(), Duration::from_secs(300));
    }
}
