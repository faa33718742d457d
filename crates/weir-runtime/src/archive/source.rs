//! An archive read as a stream: the objects of a window, in key order, are cut into
//! runs of consecutive objects (see [`group_within`]); each run is a closed shard with no
//! parents, and each line of its objects a record whose sequence number is
//! `ordinal × 2⁶⁴ + line` (the object's place in the run, the line's number in the
//! object). A run of one object is named by the object's key, and its sequence numbers
//! are its line numbers.
//!
//! The runtime then leases, distributes, checkpoints and resumes the runs exactly like
//! shards: a replay from the archive is restartable and shareable by several workers,
//! and the archiver's exactly-once protocol covers it unchanged. Runs rather than one
//! shard per object because every shard costs a lease and, in each consumer that is
//! exactly once, intents per partition it touched: a backfill from 2,000 small objects
//! into 120 partitions paid 240,000 intents where one object paid 120.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Cursor};
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use chrono_tz::Tz;
use flate2::read::MultiGzDecoder;
use weir_core::object_format::{self, ObjectFormat};
use weir_core::ports::{
    ObjectSink, ReadError, ReadMode, ShardInfo, ShardReader, ShardSubscription, SinkError, StreamCatalog,
};
use weir_core::{
    ExtendedSequenceNumber, HashKeyRange, Record, RecordBatch, SequenceNumber, ShardId, StartingPosition, Timestamp,
};

use super::key_time::key_time;

/// Lines per batch.
const BATCH_LINES: usize = 1_000;

/// Most stored bytes of one run of objects (one shard), unless a single object is
/// larger: a unit of work several workers can share, about half a maximal Firehose
/// object.
pub const GROUP_BYTES: u64 = 64 << 20;

/// Most objects of one run: a run's objects are fetched one after another, so an
/// archive of many tiny objects still spreads over several leases.
pub const GROUP_OBJECTS: usize = 1_000;

/// Objects read at once by one process, whatever the number of leases it holds: each
/// open read holds its object's stored bytes in memory.
pub const DEFAULT_MAX_OPEN: usize = 8;

/// One object of the window.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArchivedObject {
    /// Its key.
    pub key: String,
    /// Stored size in bytes (compressed, when it is).
    pub size: u64,
    /// When it was written, from its key (see `key_time`).
    pub written: Timestamp,
}

/// Why an archive cannot be replayed.
#[derive(Debug, thiserror::Error)]
pub enum ArchiveError {
    /// Listing failed.
    #[error("listing {location}: {source}")]
    Store {
        /// Where.
        location: String,
        /// The store's error.
        source: SinkError,
    },
    /// Nothing under the prefix.
    #[error("nothing is archived under {0}")]
    Empty(String),
    /// An object whose key names no time; it cannot be placed in or out of a window.
    #[error(
        "cannot tell when {0} was written: its name has no -yyyy-MM-dd-HH-mm-ss- stamp and its prefix no year/month/day/hour; point at a prefix that holds only archived objects"
    )]
    Undated(String),
    /// Objects exist, none in the window.
    #[error("no object under {location} was written in the window; the archive spans {first:?} to {last:?}")]
    NoneInWindow {
        /// Where.
        location: String,
        /// The oldest object's time.
        first: Timestamp,
        /// The newest object's time.
        last: Timestamp,
    },
}

/// Reads a table file (Parquet) as JSON lines, at most the given number of bytes of
/// them, or says why not. The runtime knows no table format; the binary passes the
/// archiver's reader.
pub type TableLines = Arc<dyn Fn(&Bytes, u64) -> Result<Vec<u8>, String> + Send + Sync>;

/// The objects of an archive written in `[from, to)`, readable as a stream.
pub struct ArchiveSource {
    store: Arc<dyn ObjectSink>,
    objects: Vec<ArchivedObject>,
    groups: Vec<Group>,
    by_id: HashMap<ShardId, usize>,
    open_reads: Arc<tokio::sync::Semaphore>,
    tables: Option<TableLines>,
}

/// A run of consecutive objects read as one shard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Group {
    /// The shard's id: the object's key for a run of one; else the first key, the
    /// number of objects and a checksum of every key and size (`key+n-crc`), so that a
    /// job resumed over a changed listing cannot take a run for another.
    pub id: ShardId,
    /// Its objects, as indices into [`ArchiveSource::objects`].
    pub objects: std::ops::Range<usize>,
}

/// Cuts `objects` (in key order) into runs: consecutive objects while a run holds at
/// most `max_bytes` stored bytes and `max_objects` objects (an object larger than the
/// bytes is a run of its own; at least one object a run). A function of the listing
/// alone, so every worker of a job, and every run of it, cuts the same runs.
pub fn group_within(objects: &[ArchivedObject], max_bytes: u64, max_objects: usize) -> Vec<Group> {
    let mut groups = Vec::new();
    let mut start = 0;
    let mut bytes = 0u64;
    for (i, o) in objects.iter().enumerate() {
        let n = i - start;
        if n > 0 && (n >= max_objects || bytes.saturating_add(o.size) > max_bytes) {
            groups.push(named(objects, start..i));
            start = i;
            bytes = 0;
        }
        bytes = bytes.saturating_add(o.size);
    }
    if start < objects.len() {
        groups.push(named(objects, start..objects.len()));
    }
    groups
}

fn named(objects: &[ArchivedObject], range: std::ops::Range<usize>) -> Group {
    let run = &objects[range.clone()];
    let id = if run.len() == 1 {
        run[0].key.clone()
    } else {
        let mut crc = crc32fast::Hasher::new();
        for o in run {
            crc.update(o.key.as_bytes());
            crc.update(&o.size.to_be_bytes());
        }
        format!("{}+{}-{:08x}", run[0].key, run.len(), crc.finalize())
    };
    Group { id: ShardId::new(id), objects: range }
}

/// The sequence number of line `line` of the object at `ordinal` in its run.
fn position(ordinal: usize, line: u64) -> SequenceNumber {
    SequenceNumber::from_u128(((ordinal as u128) << 64) | u128::from(line))
}

impl ArchiveSource {
    /// Lists `prefix` in `store` and keeps the objects whose key time (in `zone`) lies
    /// in `[from, to)`. Fails, before any work, when the prefix is empty, an object's
    /// key names no time, or no object falls in the window.
    pub async fn open(
        store: Arc<dyn ObjectSink>,
        prefix: &str,
        from: Timestamp,
        to: Timestamp,
        zone: Tz,
    ) -> Result<Self, ArchiveError> {
        let location = format!("{}{prefix}", store.location());
        let listed =
            store.list(prefix).await.map_err(|source| ArchiveError::Store { location: location.clone(), source })?;
        if listed.is_empty() {
            return Err(ArchiveError::Empty(location));
        }
        let mut all = Vec::with_capacity(listed.len());
        for meta in listed {
            let written = key_time(&meta.key, zone).ok_or_else(|| ArchiveError::Undated(meta.key.clone()))?;
            all.push(ArchivedObject { key: meta.key, size: meta.size, written });
        }
        let first = all.iter().map(|o| o.written).min().unwrap_or(from);
        let last = all.iter().map(|o| o.written).max().unwrap_or(from);
        let objects: Vec<ArchivedObject> = all.into_iter().filter(|o| from <= o.written && o.written < to).collect();
        if objects.is_empty() {
            return Err(ArchiveError::NoneInWindow { location, first, last });
        }
        let open_reads = Arc::new(tokio::sync::Semaphore::new(DEFAULT_MAX_OPEN));
        let source = Self { store, objects, groups: Vec::new(), by_id: HashMap::new(), open_reads, tables: None };
        Ok(source.with_runs(GROUP_BYTES, GROUP_OBJECTS))
    }

    /// At most `n` objects are read at once (default [`DEFAULT_MAX_OPEN`]); further
    /// opens wait for one to finish.
    pub fn with_max_open(mut self, n: usize) -> Self {
        self.open_reads = Arc::new(tokio::sync::Semaphore::new(n.max(1)));
        self
    }

    /// Runs hold at most `max_bytes` stored bytes and `max_objects` objects (defaults
    /// [`GROUP_BYTES`], [`GROUP_OBJECTS`]); `max_objects = 1` reads each object as a
    /// shard of its own.
    pub fn with_runs(mut self, max_bytes: u64, max_objects: usize) -> Self {
        self.groups = group_within(&self.objects, max_bytes, max_objects.max(1));
        self.by_id = self.groups.iter().enumerate().map(|(i, g)| (g.id.clone(), i)).collect();
        self
    }

    /// Parquet objects are read with `tables`, one line per row; without it they are
    /// refused by name.
    pub fn with_tables(mut self, tables: TableLines) -> Self {
        self.tables = Some(tables);
        self
    }

    /// The objects of the window, sorted by key.
    pub fn objects(&self) -> &[ArchivedObject] {
        &self.objects
    }

    /// The runs of objects read as shards, in key order.
    pub fn groups(&self) -> &[Group] {
        &self.groups
    }
}

#[async_trait]
impl StreamCatalog for ArchiveSource {
    async fn list_shards(&self) -> Result<Vec<ShardInfo>, ReadError> {
        Ok(self
            .groups
            .iter()
            .map(|g| ShardInfo { id: g.id.clone(), parents: Vec::new(), hash_range: HashKeyRange::FULL, closed: true })
            .collect())
    }
}

#[async_trait]
impl ShardReader for ArchiveSource {
    async fn open(
        &self,
        shard: &ShardId,
        from: &StartingPosition,
        _mode: ReadMode,
    ) -> Result<Box<dyn ShardSubscription>, ReadError> {
        let group =
            self.by_id.get(shard).map(|i| &self.groups[*i]).ok_or_else(|| ReadError::ShardNotFound(shard.clone()))?;
        let objects: Arc<[ArchivedObject]> = self.objects[group.objects.clone()].into();
        let first = match from {
            StartingPosition::TrimHorizon | StartingPosition::Latest | StartingPosition::AtTimestamp(_) => (0, 1),
            StartingPosition::AtSequenceNumber(s) => ordinal_and_line(s, objects.len())?,
            StartingPosition::AfterSequenceNumber(s) => {
                let (ordinal, line) = ordinal_and_line(s, objects.len())?;
                (ordinal, line + 1)
            }
        };
        let mut lines = Lines {
            shard: shard.clone(),
            store: self.store.clone(),
            open_reads: self.open_reads.clone(),
            tables: self.tables.clone(),
            objects,
            ordinal: first.0,
            first,
            current: None,
            done: false,
        };
        // The first object is fetched now: a missing one fails the open, as it always did.
        lines.open_current().await?;
        Ok(Box::new(lines))
    }
}

/// The object's place in its run and the line's number in it, of a position this
/// source handed out (a run of `objects` objects).
fn ordinal_and_line(s: &SequenceNumber, objects: usize) -> Result<(usize, u64), ReadError> {
    let value: u128 =
        s.as_str().parse().map_err(|_| ReadError::Fatal(format!("position {} is not a line number", s.as_str())))?;
    let ordinal = usize::try_from(value >> 64).ok().filter(|o| *o < objects).ok_or_else(|| {
        ReadError::Fatal(format!("position {} names object {} of a run of {objects}", s.as_str(), value >> 64))
    })?;
    Ok((ordinal, value as u64))
}

/// Most bytes a ZIP, Snappy, Hadoop Snappy or Parquet object is decompressed to (they
/// are read whole; a Firehose object holds at most 128 MiB before compression).
const MAX_WHOLE_OBJECT: u64 = 1 << 30;

/// The lines of a stored object, in whatever format the archiver (or Firehose) wrote
/// it: GZIP is decompressed as it is read, ZIP, Snappy and Hadoop Snappy whole, and a
/// Parquet file is read whole with `tables` into one JSON line per row.
fn reader_of(key: &str, body: Bytes, tables: Option<&TableLines>) -> Result<Box<dyn BufRead + Send>, ReadError> {
    if body.len() >= 8 && body.starts_with(b"PAR1") && body.ends_with(b"PAR1") {
        let Some(tables) = tables else {
            return Err(ReadError::Fatal(format!(
                "{key}: a Parquet object, and this replay reads no Parquet: archives of JSON lines only (GZIP, ZIP, Snappy, Hadoop Snappy or uncompressed)"
            )));
        };
        let lines = tables(&body, MAX_WHOLE_OBJECT).map_err(|e| ReadError::Fatal(format!("{key}: {e}")))?;
        return Ok(Box::new(Cursor::new(lines)));
    }
    Ok(match ObjectFormat::sniff(&body) {
        ObjectFormat::Gzip => Box::new(BufReader::with_capacity(64 * 1024, MultiGzDecoder::new(Cursor::new(body)))),
        ObjectFormat::Uncompressed => Box::new(Cursor::new(body)),
        format => {
            let plain = object_format::decode(format, &body, MAX_WHOLE_OBJECT)
                .map_err(|e| ReadError::Fatal(format!("{key}: {e}")))?;
            Box::new(Cursor::new(plain))
        }
    })
}

/// The lines of a run of objects, one object after another, each decompressed as it is
/// read.
struct Lines {
    shard: ShardId,
    store: Arc<dyn ObjectSink>,
    open_reads: Arc<tokio::sync::Semaphore>,
    tables: Option<TableLines>,
    objects: Arc<[ArchivedObject]>,
    /// The object being read (or next to be read) in `objects`.
    ordinal: usize,
    /// Where the read starts: lines before it are skipped.
    first: (usize, u64),
    current: Option<OpenObject>,
    done: bool,
}

/// One object being read.
struct OpenObject {
    lines: Box<dyn BufRead + Send>,
    /// Number of the last line read.
    line: u64,
    /// Held while the object is being read.
    _permit: tokio::sync::OwnedSemaphorePermit,
}

impl Lines {
    /// Fetches the object at `ordinal`, unless it is open or the run is read.
    async fn open_current(&mut self) -> Result<(), ReadError> {
        if self.current.is_some() || self.ordinal >= self.objects.len() {
            return Ok(());
        }
        let object = &self.objects[self.ordinal];
        let permit = self
            .open_reads
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| ReadError::Fatal("the archive source was closed".into()))?;
        let body = match self.store.get(&object.key).await {
            Ok(Some(body)) => body,
            Ok(None) => return Err(ReadError::Fatal(format!("{} was deleted after the replay listed it", object.key))),
            Err(e) if e.is_retryable() => return Err(ReadError::Transient(format!("{}: {e}", object.key))),
            Err(e) => return Err(ReadError::Fatal(format!("{}: {e}", object.key))),
        };
        let lines = reader_of(&object.key, body, self.tables.as_ref())?;
        self.current = Some(OpenObject { lines, line: 0, _permit: permit });
        Ok(())
    }

    /// Whether the open object has no more bytes (then it is closed and the next
    /// becomes current), and whether that was the run's last.
    fn at_end(&mut self) -> Result<bool, ReadError> {
        let Some(open) = self.current.as_mut() else { return Ok(self.ordinal >= self.objects.len()) };
        let key = &self.objects[self.ordinal].key;
        let empty = open
            .lines
            .fill_buf()
            .map_err(|e| ReadError::Fatal(format!("{key}: cannot decompress after line {}: {e}", open.line)))?
            .is_empty();
        if empty {
            self.current = None;
            self.ordinal += 1;
        }
        Ok(empty && self.ordinal >= self.objects.len())
    }
}

#[async_trait]
impl ShardSubscription for Lines {
    async fn next(&mut self) -> Result<Option<RecordBatch>, ReadError> {
        if self.done {
            return Ok(None);
        }
        let mut records = Vec::with_capacity(BATCH_LINES);
        let mut buf = Vec::new();
        while records.len() < BATCH_LINES && self.ordinal < self.objects.len() {
            if self.current.is_none() {
                // Between objects, a batch with lines goes out before the next fetch.
                if !records.is_empty() {
                    break;
                }
                self.open_current().await?;
            }
            let ordinal = self.ordinal;
            let object = &self.objects[ordinal];
            let Some(open) = self.current.as_mut() else { break };
            buf.clear();
            let n = open.lines.read_until(b'\n', &mut buf).map_err(|e| {
                ReadError::Fatal(format!("{}: cannot decompress after line {}: {e}", object.key, open.line))
            })?;
            if n == 0 {
                self.current = None;
                self.ordinal += 1;
                continue;
            }
            open.line += 1;
            if buf.last() == Some(&b'\n') {
                buf.pop();
            }
            // Blank lines (a doubled delimiter) hold no record; they keep their number.
            if (ordinal, open.line) < self.first || buf.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            records.push(Record {
                partition_key: object.key.clone(),
                position: ExtendedSequenceNumber::plain(position(ordinal, open.line)),
                approximate_arrival: object.written,
                data: Bytes::copy_from_slice(&buf),
            });
        }
        // A batch that takes the run's last line ends the shard itself: an empty batch
        // after it would reach no consumer, and a consumer that sees the end can flush
        // everything at once when every shard it holds has ended.
        let ended = self.at_end()?;
        self.done = ended;
        Ok(Some(RecordBatch {
            shard_id: self.shard.clone(),
            records,
            millis_behind_latest: None,
            child_shards: ended.then(Vec::new),
        }))
    }
}
