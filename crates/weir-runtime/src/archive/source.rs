//! An archive read as a stream: each archived object in a window is a closed shard with
//! no parents, and each of its lines a record whose sequence number is the line number.
//!
//! The runtime then leases, distributes, checkpoints and resumes the objects exactly
//! like shards: a replay from the archive is restartable and shareable by several
//! workers, and the archiver's exactly-once protocol covers it unchanged.

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
    by_key: HashMap<String, usize>,
    open_reads: Arc<tokio::sync::Semaphore>,
    tables: Option<TableLines>,
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
        let by_key = objects.iter().enumerate().map(|(i, o)| (o.key.clone(), i)).collect();
        let open_reads = Arc::new(tokio::sync::Semaphore::new(DEFAULT_MAX_OPEN));
        Ok(Self { store, objects, by_key, open_reads, tables: None })
    }

    /// At most `n` objects are read at once (default [`DEFAULT_MAX_OPEN`]); further
    /// opens wait for one to finish.
    pub fn with_max_open(mut self, n: usize) -> Self {
        self.open_reads = Arc::new(tokio::sync::Semaphore::new(n.max(1)));
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
}

#[async_trait]
impl StreamCatalog for ArchiveSource {
    async fn list_shards(&self) -> Result<Vec<ShardInfo>, ReadError> {
        Ok(self
            .objects
            .iter()
            .map(|o| ShardInfo {
                id: ShardId::new(o.key.as_str()),
                parents: Vec::new(),
                hash_range: HashKeyRange::FULL,
                closed: true,
            })
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
        let object = self
            .by_key
            .get(shard.as_str())
            .map(|i| &self.objects[*i])
            .ok_or_else(|| ReadError::ShardNotFound(shard.clone()))?;
        let first_line = match from {
            StartingPosition::TrimHorizon | StartingPosition::Latest | StartingPosition::AtTimestamp(_) => 1,
            StartingPosition::AtSequenceNumber(s) => line_number(s)?,
            StartingPosition::AfterSequenceNumber(s) => line_number(s)? + 1,
        };
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
        Ok(Box::new(Lines {
            shard: shard.clone(),
            key: object.key.clone(),
            arrival: object.written,
            lines: reader_of(&object.key, body, self.tables.as_ref())?,
            line: 0,
            first_line,
            done: false,
            _permit: permit,
        }))
    }
}

fn line_number(s: &SequenceNumber) -> Result<u64, ReadError> {
    s.as_str().parse().map_err(|_| ReadError::Fatal(format!("position {} is not a line number", s.as_str())))
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

/// The lines of one object, decompressed as they are read.
struct Lines {
    shard: ShardId,
    key: String,
    arrival: Timestamp,
    lines: Box<dyn BufRead + Send>,
    /// Number of the last line read.
    line: u64,
    first_line: u64,
    done: bool,
    /// Held while the object is being read.
    _permit: tokio::sync::OwnedSemaphorePermit,
}

#[async_trait]
impl ShardSubscription for Lines {
    async fn next(&mut self) -> Result<Option<RecordBatch>, ReadError> {
        if self.done {
            return Ok(None);
        }
        let mut records = Vec::with_capacity(BATCH_LINES);
        let mut buf = Vec::new();
        let mut ended = false;
        while records.len() < BATCH_LINES {
            buf.clear();
            let n = self.lines.read_until(b'\n', &mut buf).map_err(|e| {
                ReadError::Fatal(format!("{}: cannot decompress after line {}: {e}", self.key, self.line))
            })?;
            if n == 0 {
                ended = true;
                break;
            }
            self.line += 1;
            if buf.last() == Some(&b'\n') {
                buf.pop();
            }
            // Blank lines (a doubled delimiter) hold no record; they keep their number.
            if self.line < self.first_line || buf.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            records.push(Record {
                partition_key: self.key.clone(),
                position: ExtendedSequenceNumber::plain(SequenceNumber::from_u128(u128::from(self.line))),
                approximate_arrival: self.arrival,
                data: Bytes::copy_from_slice(&buf),
            });
        }
        // A full batch that happens to take the last line ends the shard itself: an
        // empty batch after it would reach no consumer, and a consumer that sees the
        // end can flush everything at once when every shard it holds has ended.
        if !ended {
            ended = self
                .lines
                .fill_buf()
                .map_err(|e| {
                    ReadError::Fatal(format!("{}: cannot decompress after line {}: {e}", self.key, self.line))
                })?
                .is_empty();
        }
        self.done = ended;
        Ok(Some(RecordBatch {
            shard_id: self.shard.clone(),
            records,
            millis_behind_latest: None,
            child_shards: ended.then(Vec::new),
        }))
    }
}
