use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use weir_core::ports::{ReadMode, ShardReader, ShardSubscription, StreamCatalog};
use weir_core::{Record, RecordBatch, SequenceNumber, ShardId, StartingPosition, Timestamp};

/// A stream a reader suite can write to and reshard: the in-process stream, or a
/// Kinesis emulator.
#[async_trait]
pub trait StreamHarness: Send + Sync {
    /// A reader of the stream.
    fn reader(&self) -> Arc<dyn ShardReader>;
    /// The stream's catalog.
    fn catalog(&self) -> Arc<dyn StreamCatalog>;
    /// Writes a record; returns its shard and sequence number.
    async fn put(&self, partition_key: &str, data: Bytes) -> (ShardId, SequenceNumber);
    /// Splits an open shard in the middle of its hash range.
    async fn split(&self, shard: &ShardId);
    /// Merges two adjacent open shards.
    async fn merge(&self, a: &ShardId, b: &ShardId);
    /// The current time by the stream's clock (arrival times are on it).
    fn now(&self) -> Timestamp;
}

/// Longest wait for an expected record; a guard against hangs, not synchronisation.
const GUARD: Duration = Duration::from_secs(60);

/// One read of a shard, used the way the runtime uses the port: a retryable error ends
/// the subscription and the read reopens after the last record received (services
/// such as enhanced fan-out allow one subscription per shard and report a closed one as
/// in use for a few seconds).
struct Read {
    reader: Arc<dyn ShardReader>,
    shard: ShardId,
    mode: ReadMode,
    position: StartingPosition,
    sub: Option<Box<dyn ShardSubscription>>,
}

impl Read {
    async fn open(reader: &Arc<dyn ShardReader>, shard: &ShardId, from: StartingPosition, mode: ReadMode) -> Read {
        let mut read = Read { reader: reader.clone(), shard: shard.clone(), mode, position: from, sub: None };
        read.ensure_open().await;
        read
    }

    async fn ensure_open(&mut self) {
        let deadline = tokio::time::Instant::now() + GUARD;
        let mut delay = Duration::from_millis(100);
        while self.sub.is_none() {
            match self.reader.open(&self.shard, &self.position, self.mode).await {
                Ok(sub) => self.sub = Some(sub),
                Err(e) if e.is_retryable() && tokio::time::Instant::now() < deadline => {
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(Duration::from_secs(2));
                }
                Err(e) => panic!("open {} at {:?} failed: {e}", self.shard, self.position),
            }
        }
    }

    /// The next batch; `None` after the shard end.
    async fn next(&mut self) -> Option<RecordBatch> {
        let deadline = tokio::time::Instant::now() + GUARD;
        loop {
            self.ensure_open().await;
            let Some(sub) = self.sub.as_mut() else {
                continue;
            };
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            match tokio::time::timeout(left, sub.next())
                .await
                .expect("reader produced nothing before the guard timeout")
            {
                Ok(b) => {
                    if let Some(last) = b.as_ref().and_then(|b| b.records.last()) {
                        self.position = StartingPosition::AfterSequenceNumber(last.position.sequence.clone());
                    }
                    return b;
                }
                Err(e) if e.is_retryable() => {
                    self.sub = None;
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Err(e) => panic!("read of {} failed: {e}", self.shard),
            }
        }
    }

    async fn read_n(&mut self, n: usize) -> Vec<Record> {
        let deadline = tokio::time::Instant::now() + GUARD;
        let mut got = Vec::new();
        while got.len() < n {
            assert!(
                tokio::time::Instant::now() < deadline,
                "{} of {n} records read from {} at {:?} before the guard timeout",
                got.len(),
                self.shard,
                self.position
            );
            let batch = self.next().await.expect("subscription ended early");
            got.extend(batch.records);
        }
        got
    }

    /// Reads until shard end; returns the records and the children announced.
    async fn read_to_end(&mut self) -> (Vec<Record>, Vec<ShardId>) {
        let deadline = tokio::time::Instant::now() + GUARD;
        let mut got = Vec::new();
        loop {
            assert!(tokio::time::Instant::now() < deadline, "no shard end of {} before the guard timeout", self.shard);
            let Some(batch) = self.next().await else { panic!("subscription ended without child shards") };
            got.extend(batch.records);
            if let Some(children) = batch.child_shards {
                let after = self.sub.as_mut().expect("open").next().await.expect("read after end failed");
                assert!(after.is_none(), "batches after shard end");
                return (got, children.into_iter().map(|c| c.shard_id).collect());
            }
        }
    }
}

/// Known gaps of a service the suite runs against, each named where it is used.
#[derive(Debug, Clone, Copy)]
pub struct Quirks {
    /// The service delivers records to a `LATEST` read opened before they were written.
    /// (kinesis-mock's enhanced fan-out never does; its polling reads do.)
    pub latest_delivers: bool,
}

impl Default for Quirks {
    fn default() -> Self {
        Self { latest_delivers: true }
    }
}

/// Runs every reader rule against `h`, in `mode`. The stream must start with exactly
/// one open shard per test run (create a fresh stream per call). At most one read of a
/// shard is open at a time.
pub async fn shard_reader_suite(h: &dyn StreamHarness, mode: ReadMode) {
    shard_reader_suite_with(h, mode, Quirks::default()).await;
}

/// [`shard_reader_suite`] for a service with known gaps.
pub async fn shard_reader_suite_with(h: &dyn StreamHarness, mode: ReadMode, quirks: Quirks) {
    let reader = h.reader();
    let shards = h.catalog().list_shards().await.expect("list shards");
    assert_eq!(shards.len(), 1, "the suite starts with one shard");
    let shard = shards[0].id.clone();
    assert!(!shards[0].closed);

    // Records in order, no gaps, from TRIM_HORIZON.
    let mut seqs = Vec::new();
    for i in 0..20 {
        let (s, seq) = h.put(&format!("pk-{i}"), Bytes::from(format!("r{i}"))).await;
        assert_eq!(s, shard);
        seqs.push(seq);
    }
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "sequence numbers must increase");
    let got = Read::open(&reader, &shard, StartingPosition::TrimHorizon, mode).await.read_n(20).await;
    let data: Vec<&[u8]> = got.iter().map(|r| r.data.as_ref()).collect();
    let want: Vec<Vec<u8>> = (0..20).map(|i| format!("r{i}").into_bytes()).collect();
    assert_eq!(data, want.iter().map(Vec::as_slice).collect::<Vec<_>>());
    assert_eq!(got[3].partition_key, "pk-3");
    assert_eq!(got[3].position.sequence, seqs[3]);

    // AT and AFTER sequence number.
    let at = StartingPosition::AtSequenceNumber(seqs[5].clone());
    assert_eq!(Read::open(&reader, &shard, at, mode).await.read_n(1).await[0].position.sequence, seqs[5]);
    let after = StartingPosition::AfterSequenceNumber(seqs[5].clone());
    assert_eq!(Read::open(&reader, &shard, after, mode).await.read_n(1).await[0].position.sequence, seqs[6]);

    // AT_TIMESTAMP at the first record's arrival includes it.
    let ts = StartingPosition::AtTimestamp(got[0].approximate_arrival);
    assert_eq!(Read::open(&reader, &shard, ts, mode).await.read_n(1).await[0].position.sequence, seqs[0]);

    // LATEST sees only what comes after the open.
    let (_, fresh) = if quirks.latest_delivers {
        let mut latest = Read::open(&reader, &shard, StartingPosition::Latest, mode).await;
        let put = h.put("pk-latest", Bytes::from_static(b"after-latest")).await;
        assert_eq!(latest.read_n(1).await[0].position.sequence, put.1);
        put
    } else {
        h.put("pk-latest", Bytes::from_static(b"after-latest")).await
    };

    // Split: the parent ends with its children; they list the parent.
    let mut tail = Read::open(&reader, &shard, StartingPosition::AfterSequenceNumber(fresh.clone()), mode).await;
    h.split(&shard).await;
    let (rest, children) = tail.read_to_end().await;
    drop(tail);
    assert!(rest.is_empty(), "no records after the last one put");
    assert_eq!(children.len(), 2, "a split has two children");
    let listed = h.catalog().list_shards().await.unwrap();
    for c in &children {
        let info = listed.iter().find(|s| &s.id == c).expect("child listed");
        assert_eq!(info.parents, vec![shard.clone()]);
    }
    assert!(listed.iter().find(|s| s.id == shard).unwrap().closed);

    // Merge of the two children: both end with the merged child.
    let (a, b) = (&children[0], &children[1]);
    let (ka, kb) = (key_for(h, a).await, key_for(h, b).await);
    let (_, sa) = h.put(&ka, Bytes::from_static(b"in-a")).await;
    let (_, sb) = h.put(&kb, Bytes::from_static(b"in-b")).await;
    h.merge(a, b).await;
    let (recs_a, kids_a) = Read::open(&reader, a, StartingPosition::TrimHorizon, mode).await.read_to_end().await;
    let (recs_b, kids_b) = Read::open(&reader, b, StartingPosition::TrimHorizon, mode).await.read_to_end().await;
    assert_eq!(recs_a.iter().map(|r| r.position.sequence.clone()).collect::<Vec<_>>(), vec![sa]);
    assert_eq!(recs_b.iter().map(|r| r.position.sequence.clone()).collect::<Vec<_>>(), vec![sb]);
    assert_eq!(kids_a.len(), 1);
    assert_eq!(kids_a, kids_b, "both parents name the same merged child");
    let merged = h.catalog().list_shards().await.unwrap();
    let m = merged.iter().find(|s| s.id == kids_a[0]).unwrap();
    let mut parents = m.parents.clone();
    parents.sort();
    let mut expect = vec![a.clone(), b.clone()];
    expect.sort();
    assert_eq!(parents, expect);
}

/// A partition key that lands in `shard` (tries keys until one does).
async fn key_for(h: &dyn StreamHarness, shard: &ShardId) -> String {
    let shards = h.catalog().list_shards().await.unwrap();
    let info = shards.iter().find(|s| &s.id == shard).unwrap();
    for i in 0..100_000 {
        let k = format!("probe-{i}");
        if info.hash_range.contains(weir_core::record::partition_hash(&k)) {
            return k;
        }
    }
    panic!("no partition key maps to {shard}");
}
