//! A stream whose every shard carries one record a second, made up as it is read.
//!
//! weir-local's `MemoryStream` stores every record; an hour of 10,000 shards would be
//! 36 million of them. Here record `i` of a shard is the one that arrives `i` seconds
//! after the stream's start (tokio time), with sequence number `i`, and exists from the
//! shard's first second to its last (a closed shard's). A read returns every record
//! that has arrived after its position (at most [`MAX_BATCH`]) or waits for the next
//! one; after a closed shard's last record it returns the shard end with the children.
//!
//! [`SyntheticStream::split_all`] splits every open shard in two (a reshard that
//! doubles the shard count), as `UpdateShardCount` to twice the count does.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use tokio::time::Instant;
use weir_core::ports::{ReadError, ReadMode, ShardInfo, ShardReader, ShardSubscription, StreamCatalog};
use weir_core::{
    ChildShard, ExtendedSequenceNumber, HashKeyRange, Record, RecordBatch, SequenceNumber, ShardId, StartingPosition,
    Timestamp,
};

/// Most records one read returns (Kinesis: 10,000).
pub const MAX_BATCH: u64 = 1_000;

/// The arrival time of the stream's second 0.
const T0: Timestamp = Timestamp::from_millis(1_800_000_000_000);

#[derive(Debug, Clone)]
struct Shard {
    info: ShardInfo,
    /// Second of its first record.
    first: u64,
    /// Second of its last record, once closed.
    last: Option<u64>,
    children: Vec<ChildShard>,
}

#[derive(Debug, Default)]
struct State {
    shards: Vec<Shard>,
    by_id: HashMap<ShardId, usize>,
}

/// The stream. Cloning shares it.
#[derive(Debug, Clone)]
pub struct SyntheticStream {
    state: Arc<Mutex<State>>,
    start: Instant,
    prefix: Arc<str>,
}

impl SyntheticStream {
    /// A stream of `shards` open shards splitting the hash key space evenly, whose ids
    /// start with `prefix`; its second 0 is now (tokio time).
    pub fn new(prefix: &str, shards: usize) -> Self {
        let this = Self { state: Arc::default(), start: Instant::now(), prefix: Arc::from(prefix) };
        let n = shards.max(1) as u128;
        let width = u128::MAX / n;
        {
            let mut s = this.lock();
            for i in 0..n {
                let end = if i + 1 == n { u128::MAX } else { (i + 1) * width - 1 };
                this.push(&mut s, HashKeyRange { start: i * width, end }, Vec::new(), 0);
            }
        }
        this
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn push(&self, s: &mut State, hash_range: HashKeyRange, parents: Vec<ShardId>, first: u64) -> ShardId {
        let id = ShardId::new(format!("{}shardId-{:012}", self.prefix, s.shards.len()));
        s.by_id.insert(id.clone(), s.shards.len());
        s.shards.push(Shard {
            info: ShardInfo { id: id.clone(), parents, hash_range, closed: false },
            first,
            last: None,
            children: Vec::new(),
        });
        id
    }

    /// The current second of the stream.
    fn second_now(&self) -> u64 {
        Instant::now().saturating_duration_since(self.start).as_secs()
    }

    /// Closes every open shard after this second's record and gives each two children
    /// that split its hash key range. Returns how many shards are open after.
    pub fn split_all(&self) -> usize {
        let now = self.second_now();
        let mut s = self.lock();
        let open: Vec<usize> = (0..s.shards.len()).filter(|i| !s.shards[*i].info.closed).collect();
        for i in open {
            let parent = s.shards[i].info.id.clone();
            let range = s.shards[i].info.hash_range;
            let mid = range.start + (range.end - range.start) / 2;
            let mut children = Vec::new();
            for hash_range in [HashKeyRange { start: range.start, end: mid }, HashKeyRange { start: mid + 1, ..range }]
            {
                let id = self.push(&mut s, hash_range, vec![parent.clone()], now + 1);
                children.push(ChildShard { shard_id: id, parents: vec![parent.clone()], hash_range });
            }
            let shard = &mut s.shards[i];
            shard.info.closed = true;
            shard.last = Some(now);
            shard.children = children;
        }
        s.shards.iter().filter(|sh| !sh.info.closed).count()
    }

    fn record(&self, i: u64) -> Record {
        Record {
            partition_key: String::new(),
            position: ExtendedSequenceNumber::plain(SequenceNumber::from_u128(u128::from(i))),
            approximate_arrival: T0.saturating_add(Duration::from_secs(i)),
            data: Bytes::new(),
        }
    }
}

#[async_trait]
impl StreamCatalog for SyntheticStream {
    async fn list_shards(&self) -> Result<Vec<ShardInfo>, ReadError> {
        Ok(self.lock().shards.iter().map(|s| s.info.clone()).collect())
    }

    fn covers(&self, key: &ShardId) -> bool {
        key.as_str().starts_with(&*self.prefix)
    }
}

fn second_of(seq: &SequenceNumber) -> u64 {
    seq.as_str().parse().unwrap_or(0)
}

#[async_trait]
impl ShardReader for SyntheticStream {
    async fn open(
        &self,
        shard: &ShardId,
        from: &StartingPosition,
        _mode: ReadMode,
    ) -> Result<Box<dyn ShardSubscription>, ReadError> {
        let first = {
            let s = self.lock();
            let idx = *s.by_id.get(shard).ok_or_else(|| ReadError::ShardNotFound(shard.clone()))?;
            s.shards[idx].first
        };
        let cursor = match from {
            StartingPosition::TrimHorizon => first,
            StartingPosition::Latest => self.second_now() + 1,
            StartingPosition::AtTimestamp(t) => t.saturating_since(T0).as_secs(),
            StartingPosition::AtSequenceNumber(q) => second_of(q),
            StartingPosition::AfterSequenceNumber(q) => second_of(q) + 1,
        };
        Ok(Box::new(Subscription {
            stream: self.clone(),
            shard: shard.clone(),
            cursor: cursor.max(first),
            ended: false,
        }))
    }
}

struct Subscription {
    stream: SyntheticStream,
    shard: ShardId,
    /// The second of the next record to return.
    cursor: u64,
    ended: bool,
}

#[async_trait]
impl ShardSubscription for Subscription {
    async fn next(&mut self) -> Result<Option<RecordBatch>, ReadError> {
        loop {
            if self.ended {
                return Ok(None);
            }
            let (last, children) = {
                let s = self.stream.lock();
                let sh = s.by_id.get(&self.shard).map(|i| &s.shards[*i]);
                sh.map(|sh| (sh.last, sh.children.clone())).unwrap_or_default()
            };
            let upto = last.map_or(self.stream.second_now(), |l| l.min(self.stream.second_now()));
            if self.cursor <= upto {
                let to = upto.min(self.cursor + MAX_BATCH - 1);
                let records = (self.cursor..=to).map(|i| self.stream.record(i)).collect();
                self.cursor = to + 1;
                return Ok(Some(batch(&self.shard, records, None)));
            }
            if last.is_some_and(|l| self.cursor > l) {
                self.ended = true;
                return Ok(Some(batch(&self.shard, Vec::new(), Some(children))));
            }
            tokio::time::sleep_until(self.stream.start + Duration::from_secs(self.cursor)).await;
        }
    }
}

fn batch(shard: &ShardId, records: Vec<Record>, child_shards: Option<Vec<ChildShard>>) -> RecordBatch {
    RecordBatch { shard_id: shard.clone(), records, millis_behind_latest: Some(0), child_shards }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One record a second from the shard's first; after a split the parent ends with
    /// its children, which start after the split's second.
    #[tokio::test(start_paused = true)]
    async fn records_arrive_once_a_second_and_a_split_ends_the_parent() {
        let stream = SyntheticStream::new("a-", 2);
        let shards = stream.list_shards().await.unwrap();
        assert_eq!(shards.len(), 2);
        let id = shards[0].id.clone();
        let mut sub = stream.open(&id, &StartingPosition::TrimHorizon, ReadMode::Live).await.unwrap();
        let b = sub.next().await.unwrap().unwrap();
        assert_eq!(b.records.len(), 1, "record 0 at second 0");
        tokio::time::advance(Duration::from_millis(2_500)).await;
        let b = sub.next().await.unwrap().unwrap();
        assert_eq!(b.records.iter().map(|r| r.position.sequence.as_str().to_owned()).collect::<Vec<_>>(), ["1", "2"]);
        assert_eq!(stream.split_all(), 4);
        let end = sub.next().await.unwrap().unwrap();
        assert_eq!(end.child_shards.as_ref().map(Vec::len), Some(2));
        assert!(sub.next().await.unwrap().is_none());
        let child = &end.child_shards.unwrap()[0];
        let mut sub = stream.open(&child.shard_id, &StartingPosition::TrimHorizon, ReadMode::Live).await.unwrap();
        let b = sub.next().await.unwrap().unwrap();
        assert_eq!(b.records[0].position.sequence.as_str(), "3", "children start after the split");
        assert!(stream.covers(&child.shard_id) && !stream.covers(&ShardId::new("b-shardId-000000000000")));
    }
}
