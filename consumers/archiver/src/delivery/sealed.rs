//! A sealed buffer: the object it becomes, the records of each shard it holds, and
//! how to rebuild it without some shards' records (their leases were lost before it
//! was durable).

use std::collections::BTreeSet;

use bytes::Bytes;
use weir_core::{ExtendedSequenceNumber, PartPosition, PartRun, ShardId, Timestamp};

use crate::delivery::body::{Body, BodyError, Deflater, decode};
use crate::pipeline::route::RouteKey;
use weir_firehose::Compression;

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
    /// A `Parquet` object's rows per record, when a record held several JSON
    /// documents (one row each); empty when every record is one row.
    pub(crate) rows: Vec<u32>,
    /// Its records exactly (see `Open::exact`): an error output's, and a data
    /// partition's when [`Limits::exact_data`](super::buffers::Limits::exact_data) is
    /// set; otherwise `None`.
    pub(crate) exact: Option<Vec<(u64, PartPosition)>>,
    /// A data partition's exceptions, per shard: the parts of its records' range that
    /// the archiver sent to an error output for a reason that can differ between owners
    /// (see [`weir_core::Intent::except`]). Set before the object is delivered.
    pub except: Vec<(ShardId, Vec<PartRun>)>,
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

    /// Its records of `shard`, exactly, when it lists them (`exact`): runs of
    /// consecutive parts. Empty for a data partition that does not, whose intents name
    /// the records of their range that belong to the partition.
    pub fn runs(&self, shard: &ShardId) -> Vec<PartRun> {
        let Some(exact) = &self.exact else { return Vec::new() };
        let mut runs: Vec<PartRun> = Vec::new();
        let mut last_ordinal = None;
        for (&(slot, _), (ordinal, part)) in self.entries.iter().zip(exact) {
            if self.slots.get(slot as usize) != Some(shard) {
                continue;
            }
            match runs.last_mut() {
                Some(run) if last_ordinal.is_some_and(|o: u64| o.checked_add(1) == Some(*ordinal)) => {
                    run.last = part.clone();
                }
                _ => runs.push(PartRun { first: part.clone(), last: part.clone() }),
            }
            last_ordinal = Some(*ordinal);
        }
        runs
    }

    /// The parts of `shard`'s range that went elsewhere (see `except`).
    pub fn except(&self, shard: &ShardId) -> &[PartRun] {
        self.except.iter().find(|(s, _)| s == shard).map_or(&[], |(_, runs)| runs.as_slice())
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
        let keep: Vec<bool> =
            self.entries.iter().map(|&(slot, _)| !lost.contains(&self.slots[slot as usize])).collect();
        let Some(body) = self.body_of(&keep, deflater)? else { return Ok(None) };
        let spans: Vec<Option<Span>> =
            self.slots.iter().zip(&self.spans).map(|(s, span)| span.clone().filter(|_| !lost.contains(s))).collect();
        Ok(Some(self.rebuilt(body, &keep, spans)))
    }

    /// The same object with only its first `count` records, whose spans were `spans`
    /// then; `None` when that is none. Used to take back the records of a batch that
    /// failed (see [`crate::delivery::buffers::Buffers::rollback_batch`]).
    pub fn first(
        &self,
        count: usize,
        spans: Vec<Option<Span>>,
        deflater: &mut Deflater,
    ) -> Result<Option<Sealed>, BodyError> {
        let keep: Vec<bool> = (0..self.entries.len()).map(|i| i < count).collect();
        let Some(body) = self.body_of(&keep, deflater)? else { return Ok(None) };
        Ok(Some(self.rebuilt(body, &keep, spans)))
    }

    /// The body holding the records `keep` says (`keep[i]` for record `i`), in order;
    /// `None` when that is none.
    fn body_of(&self, keep: &[bool], deflater: &mut Deflater) -> Result<Option<Bytes>, BodyError> {
        if !keep.iter().any(|k| *k) {
            return Ok(None);
        }
        if self.compression == Compression::Parquet {
            // Its rows are its records in order: filtered row by row, without reading
            // the records again.
            let body =
                deflater.parquet()?.keep_rows(&self.body, keep, &self.rows).map_err(|e| BodyError(e.to_string()))?;
            return Ok(Some(Bytes::from(body)));
        }
        let raw = decode(self.compression, &self.body)?;
        let mut body = Body::new(self.compression);
        let mut offset = 0usize;
        for (&(_, len), keep) in self.entries.iter().zip(keep) {
            let line = raw.get(offset..offset + len as usize).ok_or_else(|| BodyError("entry past body".into()))?;
            offset += len as usize;
            if *keep {
                body.append(line, deflater)?;
            }
        }
        Ok(Some(body.finish(deflater)?))
    }

    /// This object with another body holding only the records `keep` says, whose
    /// shards' records are `spans`.
    fn rebuilt(&self, body: Bytes, keep: &[bool], spans: Vec<Option<Span>>) -> Sealed {
        let entries: Vec<(u32, u32)> = self.entries.iter().zip(keep).filter(|(_, k)| **k).map(|(e, _)| *e).collect();
        let rows: Vec<u32> = self.rows.iter().zip(keep).filter(|(_, k)| **k).map(|(r, _)| *r).collect();
        let exact =
            self.exact.as_ref().map(|e| e.iter().zip(keep).filter(|(_, k)| **k).map(|(e, _)| e.clone()).collect());
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
            rows,
            exact,
            except: self.except.clone(),
        }
    }
}
