//! Per-partition buffers.
//!
//! Records of one partition (one set of partition-key values) accumulate in one buffer,
//! compressed as they arrive, so memory holds compressed bytes. A buffer is flushed when
//! its size *before* compression reaches `SizeInMBs` (as Firehose measures it) or when
//! `IntervalInSeconds` has passed since its first record, whichever comes first. The time
//! is always passed in. At most `max_active` partitions are open; a record for a new
//! partition beyond that flushes the oldest buffer first ([`Overflow::FlushOldest`]) or
//! is refused so the caller routes it to the error output ([`Overflow::Reject`],
//! Firehose's behaviour).
//!
//! A flushed buffer carries, per shard, the first and last record positions it holds:
//! what the archiver acknowledges once the object is durable.

use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::time::Duration;

use bytes::Bytes;
use flate2::Compression as Level;
use flate2::write::GzEncoder;
use weir_core::{ExtendedSequenceNumber, ShardId, Timestamp};

use crate::firehose_config::Compression;

/// The partition-key values of a buffer (empty without dynamic partitioning).
pub type PartitionKey = BTreeMap<String, String>;

/// What to do with a record for a new partition when `max_active` are open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Overflow {
    /// Flush the buffer whose first record is oldest, then open the new one.
    FlushOldest,
    /// Refuse the record (the caller writes it to the error output).
    Reject,
}

/// Buffer limits.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Flush at this many bytes before compression.
    pub size_bytes: u64,
    /// Flush this long after the buffer's first record (zero: at every tick).
    pub interval: Duration,
    /// Most partitions open at once.
    pub max_active: usize,
    /// Policy past `max_active`.
    pub overflow: Overflow,
    /// Compression of the body.
    pub compression: Compression,
}

enum Body {
    Plain(Vec<u8>),
    Gzip(Box<GzEncoder<Vec<u8>>>),
}

struct Buffer {
    body: Body,
    raw_bytes: u64,
    records: u64,
    opened: Timestamp,
    oldest_arrival: Timestamp,
    shards: BTreeMap<ShardId, (ExtendedSequenceNumber, ExtendedSequenceNumber)>,
}

/// A buffer ready to be written as one object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Flushed {
    /// Its partition.
    pub key: PartitionKey,
    /// The object body (compressed as configured).
    pub body: Bytes,
    /// Records in it.
    pub records: u64,
    /// Bytes before compression.
    pub raw_bytes: u64,
    /// Arrival time of its oldest record (prefix timestamps use it).
    pub oldest_arrival: Timestamp,
    /// Per shard: first and last positions it holds.
    pub shards: BTreeMap<ShardId, (ExtendedSequenceNumber, ExtendedSequenceNumber)>,
    /// Why it was flushed.
    pub reason: FlushReason,
}

/// Why a buffer was flushed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlushReason {
    /// `SizeInMBs` reached.
    Size,
    /// `IntervalInSeconds` passed.
    Interval,
    /// Made room under `max_active`.
    Overflow,
    /// Asked for (shard close, shutdown).
    Requested,
}

/// The record could not be buffered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BufferError {
    /// `max_active` partitions are open and the policy is [`Overflow::Reject`].
    #[error("more than {0} active partitions")]
    TooManyPartitions(usize),
    /// Compression failed (out of memory).
    #[error("compression failed: {0}")]
    Compression(String),
}

/// All open buffers of an archiver.
pub struct Buffers {
    limits: Limits,
    open: HashMap<PartitionKey, Buffer>,
}

impl Buffers {
    /// No buffers yet.
    pub fn new(limits: Limits) -> Self {
        Self { limits, open: HashMap::new() }
    }

    /// Open partitions.
    pub fn active(&self) -> usize {
        self.open.len()
    }

    /// Compressed bytes held (memory).
    pub fn held_bytes(&self) -> usize {
        self.open
            .values()
            .map(|b| match &b.body {
                Body::Plain(v) => v.len(),
                Body::Gzip(g) => g.get_ref().len(),
            })
            .sum()
    }

    /// Adds one record (with its delimiter already applied). Returns the buffers that
    /// had to be flushed: an evicted one (overflow) and/or this partition's (size).
    pub fn append(
        &mut self,
        key: &PartitionKey,
        data: &[u8],
        shard: &ShardId,
        position: &ExtendedSequenceNumber,
        arrival: Timestamp,
        now: Timestamp,
    ) -> Result<Vec<Flushed>, BufferError> {
        let mut out = Vec::new();
        if !self.open.contains_key(key) && self.open.len() >= self.limits.max_active {
            match self.limits.overflow {
                Overflow::Reject => return Err(BufferError::TooManyPartitions(self.limits.max_active)),
                Overflow::FlushOldest => {
                    let oldest = self.open.iter().min_by_key(|(_, b)| b.opened).map(|(k, _)| k.clone());
                    if let Some(k) = oldest {
                        out.push(self.finish(&k, FlushReason::Overflow)?);
                    }
                }
            }
        }
        let compression = self.limits.compression;
        let buffer = self.open.entry(key.clone()).or_insert_with(|| Buffer {
            body: match compression {
                Compression::Gzip => Body::Gzip(Box::new(GzEncoder::new(Vec::new(), Level::default()))),
                Compression::Uncompressed => Body::Plain(Vec::new()),
            },
            raw_bytes: 0,
            records: 0,
            opened: now,
            oldest_arrival: arrival,
            shards: BTreeMap::new(),
        });
        match &mut buffer.body {
            Body::Plain(v) => v.extend_from_slice(data),
            Body::Gzip(g) => g.write_all(data).map_err(|e| BufferError::Compression(e.to_string()))?,
        }
        buffer.raw_bytes += data.len() as u64;
        buffer.records += 1;
        buffer.oldest_arrival = buffer.oldest_arrival.min(arrival);
        buffer
            .shards
            .entry(shard.clone())
            .and_modify(|(_, last)| *last = position.clone())
            .or_insert_with(|| (position.clone(), position.clone()));
        if buffer.raw_bytes >= self.limits.size_bytes {
            out.push(self.finish(key, FlushReason::Size)?);
        }
        Ok(out)
    }

    /// Buffers whose interval has passed at `now`.
    pub fn due(&mut self, now: Timestamp) -> Result<Vec<Flushed>, BufferError> {
        let interval = self.limits.interval;
        let due: Vec<PartitionKey> = self
            .open
            .iter()
            .filter(|(_, b)| now.saturating_since(b.opened) >= interval)
            .map(|(k, _)| k.clone())
            .collect();
        due.iter().map(|k| self.finish(k, FlushReason::Interval)).collect()
    }

    /// Every buffer holding records of `shard` (before the shard closes).
    pub fn holding(&mut self, shard: &ShardId) -> Result<Vec<Flushed>, BufferError> {
        let keys: Vec<PartitionKey> =
            self.open.iter().filter(|(_, b)| b.shards.contains_key(shard)).map(|(k, _)| k.clone()).collect();
        keys.iter().map(|k| self.finish(k, FlushReason::Requested)).collect()
    }

    /// Every buffer.
    pub fn all(&mut self) -> Result<Vec<Flushed>, BufferError> {
        let keys: Vec<PartitionKey> = self.open.keys().cloned().collect();
        keys.iter().map(|k| self.finish(k, FlushReason::Requested)).collect()
    }

    fn finish(&mut self, key: &PartitionKey, reason: FlushReason) -> Result<Flushed, BufferError> {
        let Some(b) = self.open.remove(key) else {
            return Err(BufferError::Compression("no such buffer".into()));
        };
        let body = match b.body {
            Body::Plain(v) => Bytes::from(v),
            Body::Gzip(g) => Bytes::from(g.finish().map_err(|e| BufferError::Compression(e.to_string()))?),
        };
        Ok(Flushed {
            key: key.clone(),
            body,
            records: b.records,
            raw_bytes: b.raw_bytes,
            oldest_arrival: b.oldest_arrival,
            shards: b.shards,
            reason,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::io::Read;
    use weir_core::SequenceNumber;

    fn limits(size: u64, interval_s: u64, max: usize, overflow: Overflow) -> Limits {
        Limits {
            size_bytes: size,
            interval: Duration::from_secs(interval_s),
            max_active: max,
            overflow,
            compression: Compression::Gzip,
        }
    }

    fn key(tenant: &str) -> PartitionKey {
        [("tenantId".to_owned(), tenant.to_owned())].into()
    }

    fn pos(n: u128) -> ExtendedSequenceNumber {
        ExtendedSequenceNumber::plain(SequenceNumber::from_u128(n))
    }

    fn t(s: i64) -> Timestamp {
        Timestamp::from_millis(s * 1000)
    }

    fn gunzip(b: &Bytes) -> String {
        let mut s = String::new();
        flate2::read::GzDecoder::new(&b[..]).read_to_string(&mut s).unwrap();
        s
    }

    #[test]
    fn size_is_measured_before_compression() {
        let mut b = Buffers::new(limits(100, 300, 10, Overflow::FlushOldest));
        let shard = ShardId::new("s0");
        let line = format!("{}\n", "a".repeat(49));
        assert!(b.append(&key("t1"), line.as_bytes(), &shard, &pos(1), t(5), t(10)).unwrap().is_empty());
        let flushed = b.append(&key("t1"), line.as_bytes(), &shard, &pos(2), t(4), t(11)).unwrap();
        assert_eq!(flushed.len(), 1);
        let f = &flushed[0];
        assert_eq!((f.reason, f.records, f.raw_bytes), (FlushReason::Size, 2, 100));
        assert!(f.body.len() < 100, "compressed body");
        assert_eq!(gunzip(&f.body), line.repeat(2));
        assert_eq!(f.oldest_arrival, t(4), "oldest arrival, not first");
        assert_eq!(f.shards[&shard], (pos(1), pos(2)));
        assert_eq!(b.active(), 0);
    }

    #[test]
    fn interval_counts_from_the_first_record() {
        let mut b = Buffers::new(limits(1 << 20, 60, 10, Overflow::FlushOldest));
        let s = ShardId::new("s0");
        b.append(&key("t1"), b"x\n", &s, &pos(1), t(0), t(100)).unwrap();
        b.append(&key("t2"), b"y\n", &s, &pos(2), t(0), t(130)).unwrap();
        assert!(b.due(t(159)).unwrap().is_empty());
        let first = b.due(t(160)).unwrap();
        assert_eq!(first.iter().map(|f| f.key.clone()).collect::<Vec<_>>(), vec![key("t1")]);
        assert_eq!(first[0].reason, FlushReason::Interval);
        assert_eq!(b.due(t(190)).unwrap()[0].key, key("t2"));
        // Interval zero: every tick flushes what is there.
        let mut z = Buffers::new(limits(1 << 20, 0, 10, Overflow::FlushOldest));
        z.append(&key("t1"), b"x\n", &s, &pos(1), t(0), t(5)).unwrap();
        assert_eq!(z.due(t(5)).unwrap().len(), 1);
    }

    #[test]
    fn active_partition_cap() {
        let s = ShardId::new("s0");
        let mut evict = Buffers::new(limits(1 << 20, 300, 2, Overflow::FlushOldest));
        evict.append(&key("a"), b"1\n", &s, &pos(1), t(0), t(1)).unwrap();
        evict.append(&key("b"), b"2\n", &s, &pos(2), t(0), t(2)).unwrap();
        let out = evict.append(&key("c"), b"3\n", &s, &pos(3), t(0), t(3)).unwrap();
        assert_eq!(out.len(), 1);
        assert_eq!((out[0].key.clone(), out[0].reason), (key("a"), FlushReason::Overflow));
        assert_eq!(evict.active(), 2);
        let mut reject = Buffers::new(limits(1 << 20, 300, 2, Overflow::Reject));
        reject.append(&key("a"), b"1\n", &s, &pos(1), t(0), t(1)).unwrap();
        reject.append(&key("b"), b"2\n", &s, &pos(2), t(0), t(2)).unwrap();
        assert_eq!(reject.append(&key("c"), b"3\n", &s, &pos(3), t(0), t(3)), Err(BufferError::TooManyPartitions(2)));
        assert!(
            reject.append(&key("a"), b"4\n", &s, &pos(4), t(0), t(4)).unwrap().is_empty(),
            "open partitions still take records"
        );
    }

    #[test]
    fn shard_close_flushes_buffers_holding_the_shard() {
        let mut b = Buffers::new(limits(1 << 20, 300, 10, Overflow::FlushOldest));
        let (s0, s1) = (ShardId::new("s0"), ShardId::new("s1"));
        b.append(&key("a"), b"1\n", &s0, &pos(1), t(0), t(1)).unwrap();
        b.append(&key("a"), b"2\n", &s1, &pos(7), t(0), t(1)).unwrap();
        b.append(&key("b"), b"3\n", &s1, &pos(8), t(0), t(1)).unwrap();
        let out = b.holding(&s0).unwrap();
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].shards.len(), 2, "objects mix shards");
        assert_eq!(b.all().unwrap().len(), 1);
    }

    proptest! {
        /// Every record appended ends up in exactly one flushed body, in order within its
        /// partition; acknowledged ranges cover exactly the records of each shard.
        #[test]
        fn nothing_lost_nothing_twice(ops in proptest::collection::vec((0u8..4, 0u8..3, 1usize..40, 0u8..10), 1..200)) {
            let mut b = Buffers::new(limits(120, 5, 3, Overflow::FlushOldest));
            let mut flushed = Vec::new();
            let mut expected: BTreeMap<PartitionKey, String> = BTreeMap::new();
            for (i, (tenant, shard, len, tick)) in ops.iter().enumerate() {
                let k = key(&format!("t{tenant}"));
                let line = format!("{i}:{}\n", "x".repeat(*len));
                expected.entry(k.clone()).or_default().push_str(&line);
                let now = t(i as i64);
                flushed.extend(b.append(&k, line.as_bytes(), &ShardId::new(format!("s{shard}")), &pos(i as u128 + 1), now, now).unwrap());
                if *tick == 0 {
                    flushed.extend(b.due(now).unwrap());
                }
            }
            flushed.extend(b.all().unwrap());
            let mut got: BTreeMap<PartitionKey, String> = BTreeMap::new();
            let mut records = 0;
            for f in &flushed {
                got.entry(f.key.clone()).or_default().push_str(&gunzip(&f.body));
                records += f.records;
            }
            prop_assert_eq!(got, expected);
            prop_assert_eq!(records, ops.len() as u64);
        }
    }
}
