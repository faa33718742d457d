//! A sealed buffer: the object it becomes, the records of each shard it holds, and
//! how to rebuild it without some shards' records (their leases were lost before it
//! was durable).

use std::collections::BTreeSet;

use bytes::Bytes;
use weir_core::{ExtendedSequenceNumber, ShardId, Timestamp};

use crate::delivery::body::{Body, BodyError, Deflater, decode};
use crate::firehose_config::Compression;
use crate::pipeline::route::RouteKey;

/// The records of one shard in a buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Span {
    /// First position.
    pub first: ExtendedSequenceNumber,
    /// Last position.
    pub last: ExtendedSequenceNumber,
    /// Oldest arrival among them.
    pub oldest_arrival: Timestamp,
}

/// Why a buffer was sealed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlushReason {
    /// `SizeInMBs` reached.
    Size,
    /// `IntervalInSeconds` passed.
    Interval,
    /// Made room under `max_active`.
    Overflow,
    /// Sealed to keep the buffers within their memory budget.
    Memory,
    /// Asked for (shard close, shutdown).
    Requested,
}

/// A buffer ready to be written as one object.
#[derive(Debug, Clone)]
pub struct Sealed {
    /// Identity for acknowledgement tracking (kept by [`Sealed::without`]).
    pub generation: u64,
    /// Its route's key (the route itself is decoded only where it is needed).
    pub key: RouteKey,
    /// The object body (compressed as configured).
    pub body: Bytes,
    /// Bytes before compression.
    pub raw_bytes: u64,
    /// Why it was sealed.
    pub reason: FlushReason,
    /// Memory it held while open (see [`crate::delivery::buffers::OPEN_COST`]).
    pub held: usize,
    /// Arrival of its oldest record (prefix timestamps use it).
    pub oldest_arrival: Timestamp,
    pub(crate) compression: Compression,
    /// The shards of its records, each once, and (same place) their records (`None`:
    /// none left after a rebuild).
    pub(crate) slots: Vec<ShardId>,
    pub(crate) spans: Vec<Option<Span>>,
    /// Per record: its shard's place in `slots`, and its length.
    pub(crate) entries: Vec<(u32, u32)>,
}

impl Sealed {
    /// Records in it.
    pub fn records(&self) -> u64 {
        self.entries.len() as u64
    }

    /// Per shard, the records it holds.
    pub fn spans(&self) -> impl Iterator<Item = (&ShardId, &Span)> {
        self.slots.iter().zip(&self.spans).filter_map(|(s, span)| Some((s, span.as_ref()?)))
    }

    /// The records of `shard` it holds.
    pub fn span(&self, shard: &ShardId) -> Option<&Span> {
        self.spans().find(|(s, _)| *s == shard).map(|(_, span)| span)
    }

    /// The route, decoded from its key.
    #[cfg(test)]
    pub fn route(&self) -> crate::pipeline::route::Route {
        self.key.route().expect("a route key")
    }

    /// The same object without the records of `lost` shards; `None` when nothing is
    /// left. Used when leases were lost before the object was durable.
    pub fn without(&self, lost: &BTreeSet<ShardId>, deflater: &mut Deflater) -> Result<Option<Sealed>, BodyError> {
        if !self.spans().any(|(s, _)| lost.contains(s)) {
            return Ok(Some(self.clone()));
        }
        if self.compression == Compression::Parquet {
            return self.without_rows(lost, deflater);
        }
        let raw = decode(self.compression, &self.body)?;
        let mut body = Body::new(self.compression);
        let mut entries = Vec::new();
        let mut offset = 0usize;
        for &(slot, len) in &self.entries {
            let line = raw.get(offset..offset + len as usize).ok_or_else(|| BodyError("entry past body".into()))?;
            offset += len as usize;
            if !lost.contains(&self.slots[slot as usize]) {
                body.append(line, deflater)?;
                entries.push((slot, len));
            }
        }
        if entries.is_empty() {
            return Ok(None);
        }
        Ok(Some(self.rebuilt(lost, body.finish(deflater)?, entries)))
    }

    /// [`Sealed::without`] for a Parquet object: its rows are its records in order, so
    /// the file is filtered row by row, without reading the records again.
    fn without_rows(&self, lost: &BTreeSet<ShardId>, deflater: &mut Deflater) -> Result<Option<Sealed>, BodyError> {
        let keep: Vec<bool> =
            self.entries.iter().map(|&(slot, _)| !lost.contains(&self.slots[slot as usize])).collect();
        let entries: Vec<(u32, u32)> = self.entries.iter().zip(&keep).filter(|(_, k)| **k).map(|(e, _)| *e).collect();
        if entries.is_empty() {
            return Ok(None);
        }
        let body = deflater.parquet()?.keep_rows(&self.body, &keep).map_err(|e| BodyError(e.to_string()))?;
        Ok(Some(self.rebuilt(lost, Bytes::from(body), entries)))
    }

    /// This object with another body holding only `entries`, the records of shards
    /// not in `lost`.
    fn rebuilt(&self, lost: &BTreeSet<ShardId>, body: Bytes, entries: Vec<(u32, u32)>) -> Sealed {
        let spans: Vec<Option<Span>> =
            self.slots.iter().zip(&self.spans).map(|(s, span)| span.clone().filter(|_| !lost.contains(s))).collect();
        let oldest_arrival = spans.iter().flatten().map(|s| s.oldest_arrival).min().unwrap_or(self.oldest_arrival);
        Sealed {
            generation: self.generation,
            key: self.key.clone(),
            body,
            raw_bytes: entries.iter().map(|&(_, len)| u64::from(len)).sum(),
            reason: self.reason,
            held: self.held,
            oldest_arrival,
            compression: self.compression,
            slots: self.slots.clone(),
            spans,
            entries,
        }
    }
}
