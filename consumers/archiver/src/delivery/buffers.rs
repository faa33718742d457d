//! Per-partition buffers.
//!
//! Records of one route (a data partition, i.e. one set of partition-key values, or
//! one error output type) accumulate in one buffer whose body holds compressed bytes
//! (see [`crate::delivery::body`]). A buffer is sealed when its size *before* compression reaches
//! `SizeInMBs` (as Firehose measures it) or when `IntervalInSeconds` has passed since
//! its first record, whichever comes first. Time is always passed in.
//!
//! Memory is bounded by a budget, not by a partition count ([`Limits::memory`]). An
//! open buffer costs what it holds: its compressed runs, its staged records (a stage
//! grows from 256 bytes as records come, up to 64 KiB) and its bookkeeping, about
//! [`OPEN_COST`] bytes plus 8 a record; [`Buffers::held_bytes`] is the sum, kept as buffers
//! change. When an append takes the sum over the budget, the buffers are relieved down
//! to three quarters of it, in two steps:
//! 1. stages of at least [`MIN_COMPACT`] bytes are compressed now, largest first (the
//!    object stays one valid gzip member; only its compression ratio suffers a little);
//! 2. with a spill directory ([`Buffers::with_spill`]), the compressed bytes of the
//!    largest buffers go to local disk ([`crate::delivery::spill`]); those buffers stay open and
//!    keep growing until their size or interval hint, so object sizes follow the hints
//!    whatever the partition count. A spill that fails (disk full, unwritable) is
//!    logged and counted, relief goes on with step 3, and [`Buffers::spill_failure`]
//!    says so (the archiver refuses new batches) until a write works again;
//! 3. if that is not enough, buffers are sealed, the largest first
//!    ([`FlushReason::Memory`]): no buffer is sealed for memory while a larger one
//!    stays open, so the objects memory forces out are the largest there are.
//!
//! Relieving to three quarters means at least a quarter of the budget is appended
//! between two reliefs, so partitions do not thrash at the limit.
//!
//! Optionally at most `max_active` data partitions are open; a record for a new
//! partition beyond that seals the oldest buffer first ([`Overflow::FlushOldest`]) or is
//! refused so the caller routes it to the error output ([`Overflow::Reject`], Firehose's
//! behaviour with its 500-partition limit).
//!
//! Every buffer has a generation number (its identity in acknowledgement tracking) and
//! remembers, per record, which shard it came from and its length (8 bytes a record),
//! so an object can be rebuilt without the records of a shard whose lease was lost.
//!
//! **A batch is buffered whole or not at all.** Between [`Buffers::begin_batch`] and
//! [`Buffers::commit_batch`], each buffer the batch touches is noted as it was before
//! (its record count and spans; or that the batch opened it). If the batch fails half
//! way (a spill that cannot be read back, an encoder error, a panic),
//! [`Buffers::rollback_batch`] takes its records out of every buffer again, open or
//! sealed during the batch, and keeps what earlier batches put there: the batch is then
//! delivered again without a record twice, and no earlier record is dropped.
//!
//! **The parts of one record stay together.** A record split into parts (JSON
//! de-aggregation, CloudWatch Logs) may put several parts in one route. An intent says
//! "the records of this shard in `[first, last]` routed to this partition are in this
//! object", so all of a record's parts of one route must be in one object: split across
//! two, with one written and the other claimed after a crash, the next owner would skip
//! the record as durable and lose the other parts. Between [`Buffers::start_record`] and
//! [`Buffers::finish_record`], no buffer holding a part of the record is sealed (for
//! size, memory or the partition cap): those seals wait for the record's end, so an
//! object may pass `SizeInMBs` and the budget may be passed by one record's parts.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use weir_core::{ExtendedSequenceNumber, PartPosition, ShardId, Timestamp};

use crate::delivery::body::{Body, BodyError, Deflater, Finished, decode};
use crate::delivery::sealed::{FlushReason, Sealed, Span};
use crate::delivery::spill::{Spill, SpillError, SpillRef};
use crate::parquet::ParquetFormat;
use crate::pipeline::route::{Route, RouteKey, data_pairs};
use weir_firehose::Compression;

/// Where an appended line comes from.
#[derive(Debug, Clone, Copy)]
pub struct Origin<'a> {
    /// Its shard.
    pub shard: &'a ShardId,
    /// Its record's position.
    pub position: &'a ExtendedSequenceNumber,
    /// Its place among its record's parts (0 for a record taken whole).
    pub part: u32,
    /// Its number among every part of the shard the archiver handled, skipped and
    /// dropped ones included: consecutive numbers are consecutive parts (error outputs
    /// list their parts as runs of consecutive ones, see [`Sealed::runs`]).
    pub ordinal: u64,
}

/// What to do with a record for a new partition when `max_active` are open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Overflow {
    /// Seal the buffer opened longest ago, then open the new one.
    FlushOldest,
    /// Refuse the record (the caller writes it to the error output).
    Reject,
}

/// Bookkeeping of one open buffer, beyond its body and its 8 bytes a record: the map
/// entry and key, the shard slots, and outside this module its ledger entries and route
/// cache entry. Measured (peak RSS over open partitions with 100,000 partitions in the
/// cardinality bench; 1,536 before buffers stopped keeping their route as a map),
/// counted in [`Buffers::held_bytes`] so that many nearly empty partitions are not free.
pub const OPEN_COST: usize = 768;

/// The smallest stage compressed early to relieve memory: smaller ones gain little and
/// compress worse. (At 4 KiB, 100,000 partitions of raw events of a few records each,
/// about 2 KiB a stage, went past the default budget and were sealed early: 1.03 objects
/// a partition in `cargo bench -p weir-archiver --bench cardinality`.)
pub const MIN_COMPACT: usize = 1024;

/// Buffer limits.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Seal at this many bytes before compression.
    pub size_bytes: u64,
    /// Seal this long after the buffer's first record (zero: at every tick).
    pub interval: Duration,
    /// Bytes every open buffer together may hold ([`Buffers::held_bytes`]).
    pub memory: usize,
    /// Most data partitions open at once (`None`: no count limit).
    pub max_active: Option<usize>,
    /// Policy past `max_active`.
    pub overflow: Overflow,
    /// Format of data objects.
    pub compression: Compression,
    /// Format of error objects (JSON beside Parquet data; otherwise the same).
    pub error_compression: Compression,
    /// The table of `Parquet` data objects.
    pub parquet: Option<Arc<ParquetFormat>>,
    /// Compression level (0–9).
    pub level: u32,
    /// Data buffers list their parts exactly, as error outputs do: set when a
    /// transform can route a part differently for the shard's next owner (a Lambda),
    /// whose new route would otherwise not tell it whether an earlier owner's data
    /// object holds the part.
    pub exact_data: bool,
}

impl Limits {
    /// The format of a data or an error buffer.
    pub fn format(&self, is_data: bool) -> Compression {
        if is_data { self.compression } else { self.error_compression }
    }
}

pub(crate) struct Open {
    pub(crate) generation: u64,
    /// What it counts for in [`Buffers::held_bytes`], as of its last change.
    pub(crate) cost: usize,
    /// A data partition (not an error output). The route itself is decoded from the
    /// key when the buffer is sealed: kept here it would cost a map per partition.
    pub(crate) is_data: bool,
    pub(crate) body: Body,
    pub(crate) raw_bytes: u64,
    pub(crate) opened: Timestamp,
    /// Arrival of its oldest record (the freshness gauge reads it from every buffer at
    /// each tick: one field, not a walk through the spans).
    pub(crate) oldest_arrival: Option<Timestamp>,
    pub(crate) slots: Vec<ShardId>,
    /// Where each shard is in `slots`, once they are more than [`SCAN_SLOTS`]: a
    /// backfill of 2,000 archived objects feeds every partition from 2,000 "shards",
    /// and scanning for the slot of each record was most of its CPU.
    pub(crate) slot_index: Option<HashMap<ShardId, u32>>,
    pub(crate) entries: Vec<(u32, u32)>,
    /// The records of `slots[i]` (`None`: none left after a rebuild).
    pub(crate) spans: Vec<Option<Span>>,
    /// The body's compressed bytes on disk, in order, ahead of its runs in memory.
    pub(crate) spilled: Vec<SpillRef>,
    /// Staged bytes on disk, uncompressed, in order, ahead of the stage in memory. They
    /// are read back and compressed with it when the stage is full (so pieces compress
    /// as well as in memory) or sealed. Never set while the body has runs in memory
    /// (a spill moves the runs out first; a fold empties it before compressing).
    pub(crate) spilled_stage: Vec<SpillRef>,
    /// Bytes in `spilled_stage`.
    pub(crate) spilled_stage_len: usize,
    /// Its records, exactly (with `entries`, one each): their parts and ordinals.
    /// Which records an error output gets can differ between owners, so its intents
    /// list them (see [`Sealed::runs`]); so do a data partition's with
    /// [`Limits::exact_data`]. `None` for other data partitions.
    pub(crate) exact: Option<Vec<(u64, PartPosition)>>,
}

impl Open {
    /// Memory it holds (see [`OPEN_COST`]).
    pub(crate) fn measure(&self, key_len: usize) -> usize {
        OPEN_COST
            + key_len
            + self.body.held()
            + self.entries.capacity() * 8
            + self.spans.capacity() * 48
            + (self.spilled.capacity() + self.spilled_stage.capacity()) * 24
            + self.exact.as_ref().map_or(0, |e| e.capacity() * 96)
    }

    /// Whether the buffer holds records of `shard`.
    fn holds(&self, shard: &ShardId) -> bool {
        self.slot(shard).is_some_and(|i| self.spans[i].is_some())
    }

    /// The slot of `shard` (a shard has at most one).
    fn slot(&self, shard: &ShardId) -> Option<usize> {
        match &self.slot_index {
            Some(index) => index.get(shard).map(|i| *i as usize),
            // Few: the last one is almost always the one appending.
            None => self.slots.iter().rposition(|s| s == shard),
        }
    }

    /// A slot for `shard`, which has none yet.
    fn push_slot(&mut self, shard: &ShardId) -> usize {
        let slot = self.slots.len();
        self.slots.push(shard.clone());
        self.spans.push(None);
        match &mut self.slot_index {
            Some(index) => drop(index.insert(shard.clone(), slot as u32)),
            None => self.slot_index = slot_index(&self.slots),
        }
        slot
    }

    /// Reads the spilled stage back in front of the stage in memory (see
    /// [`Open::spilled_stage`]).
    fn fold(&mut self, spill: &mut Spill) -> Result<(), BufferError> {
        if self.spilled_stage.is_empty() {
            return Ok(());
        }
        let mut raw = Vec::with_capacity(self.spilled_stage_len + self.body.staged());
        for r in &self.spilled_stage {
            spill.read(r, &mut raw).map_err(|e| BufferError::Spill(Arc::new(e)))?;
        }
        for r in self.spilled_stage.drain(..) {
            spill.release(&r);
        }
        self.spilled_stage_len = 0;
        self.body.prepend_stage(raw);
        Ok(())
    }
}

/// Slots of a buffer searched by a scan; past this many, through an index.
const SCAN_SLOTS: usize = 8;

/// The index of `slots`, once they are more than [`SCAN_SLOTS`].
fn slot_index(slots: &[ShardId]) -> Option<HashMap<ShardId, u32>> {
    (slots.len() > SCAN_SLOTS).then(|| slots.iter().enumerate().map(|(i, s)| (s.clone(), i as u32)).collect())
}

/// The record could not be buffered.
#[derive(Debug, Clone, thiserror::Error)]
pub enum BufferError {
    /// `max_active` partitions are open and the policy is [`Overflow::Reject`].
    #[error("more than {0} active partitions")]
    TooManyPartitions(usize),
    /// Compression failed.
    #[error(transparent)]
    Body(#[from] BodyError),
    /// A route key that [`Route::encode`] did not write.
    #[error("not a route key")]
    RouteKey,
    /// Spilled bytes could not be read back.
    #[error(transparent)]
    Spill(Arc<SpillError>),
    /// An earlier failure left a buffer without its records ([`Buffers::broken`]
    /// says which): these buffers can no longer roll a batch back.
    #[error("a buffer was lost: {0}")]
    Lost(String),
    /// A failure a test injected.
    #[cfg(test)]
    #[error("injected failure while buffering")]
    Injected,
}

/// The result of an append.
#[derive(Debug)]
pub struct Appended {
    /// Generation of the buffer that took the record.
    pub generation: u64,
    /// Buffers sealed by this append (an evicted one and/or this one on size).
    pub sealed: Vec<Sealed>,
}

/// All open buffers of an archiver.
pub struct Buffers {
    pub(crate) limits: Limits,
    /// Open buffers by route key ([`Route::encode`]); foldhash, as a key is hashed for
    /// every record.
    pub(crate) open: HashMap<Box<[u8]>, Box<Open>, crate::hashing::FastHash>,
    pub(crate) data_open: usize,
    /// Sum of the open buffers' costs.
    pub(crate) held: usize,
    pub(crate) next_generation: u64,
    pub(crate) deflater: Deflater,
    pub(crate) spill: Option<Spill>,
    /// Why the last spill failed, until a write works again.
    pub(crate) spill_failure: Option<String>,
    /// The route keys of the buffers the record being appended has parts in, while one
    /// is (see the module docs); their seals wait for its end.
    pub(crate) record: Option<Vec<Box<[u8]>>>,
    /// While a batch is buffered: each buffer it touched, as it was before.
    pub(crate) batch: Option<HashMap<u64, Before>>,
    /// Why a buffer's records were lost from memory (a seal that failed half way):
    /// nothing here can be trusted any more.
    pub(crate) broken: Option<String>,
    /// A fault injected by tests: (appends until it, panic rather than fail).
    #[cfg(test)]
    pub(crate) inject: Option<(usize, bool)>,
}

/// A buffer as it was before the batch being buffered touched it.
#[derive(Debug)]
pub(crate) enum Before {
    /// The batch opened it (route key).
    Opened(Box<[u8]>),
    /// It held records of earlier batches.
    Held {
        /// Its route key.
        key: Box<[u8]>,
        /// Its records then.
        entries: usize,
        /// Its slots then (later slots held none of its records).
        slots: usize,
        /// The spans then of the slots the batch appended to; the batch changed no
        /// other. (Not a copy of every span: a replay's buffer can hold thousands of
        /// shards, and a copy per batch was a sixth of its CPU.)
        touched: Vec<(usize, Option<Span>)>,
    },
}

impl Before {
    /// A buffer's spans before the batch, from `now` (its spans after it), one per
    /// slot of `now`.
    fn spans(slots: usize, touched: &[(usize, Option<Span>)], now: &[Option<Span>]) -> Vec<Option<Span>> {
        let mut spans = now[..slots.min(now.len())].to_vec();
        for (i, span) in touched {
            if let Some(s) = spans.get_mut(*i) {
                *s = span.clone();
            }
        }
        spans.resize(now.len(), None);
        spans
    }
}

impl Buffers {
    /// No buffers yet.
    pub fn new(limits: Limits) -> Self {
        let deflater = Deflater::new(limits.level).with_parquet(limits.parquet.clone());
        Self {
            limits,
            open: HashMap::default(),
            data_open: 0,
            held: 0,
            next_generation: 1,
            deflater,
            spill: None,
            spill_failure: None,
            record: None,
            batch: None,
            broken: None,
            #[cfg(test)]
            inject: None,
        }
    }

    /// Why the buffers cannot be trusted any more, if a seal failed half way and lost
    /// what a buffer held.
    pub fn broken(&self) -> Option<&str> {
        self.broken.as_deref()
    }

    /// The next appends are one batch's, until [`Buffers::commit_batch`] or
    /// [`Buffers::rollback_batch`] (see the module docs).
    pub fn begin_batch(&mut self) {
        self.batch = Some(HashMap::new());
        self.record = None;
    }

    /// The batch is buffered whole.
    pub fn commit_batch(&mut self) {
        self.batch = None;
    }

    /// Takes the records of the batch begun last out of every buffer: open ones, and
    /// `sealed`, the buffers sealed during the batch (those it opened go; the others keep
    /// what earlier batches put in them). An error here leaves the buffers unusable.
    pub fn rollback_batch(&mut self, sealed: &mut Vec<Sealed>) -> Result<(), BufferError> {
        self.record = None;
        let Some(before) = self.batch.take() else { return Ok(()) };
        if let Some(why) = &self.broken {
            return Err(BufferError::Lost(why.clone()));
        }
        let mut kept = Vec::with_capacity(sealed.len());
        for s in sealed.drain(..) {
            match before.get(&s.generation) {
                None => kept.push(s),
                Some(Before::Opened(_)) => {}
                Some(Before::Held { entries, slots, touched, .. }) => {
                    let spans = Before::spans(*slots, touched, &s.spans);
                    if let Some(s) = s.first(*entries, spans, &mut self.deflater)? {
                        kept.push(s);
                    }
                }
            }
        }
        *sealed = kept;
        for (generation, was) in before {
            let key = match &was {
                Before::Opened(key) | Before::Held { key, .. } => key,
            };
            if self.open.get(key).is_none_or(|b| b.generation != generation) {
                continue;
            }
            let opened = self.open.get(key).map_or(Timestamp::from_millis(0), |b| b.opened);
            if let Some(b) = self.open.get_mut(key) {
                b.body.finish_plain();
            }
            let s = self.seal(key, FlushReason::Requested)?;
            if let Before::Held { entries, slots, touched, .. } = was {
                let spans = Before::spans(slots, &touched, &s.spans);
                if let Some(rest) = s.first(entries, spans, &mut self.deflater)? {
                    self.reopen(rest, opened)?;
                }
            }
        }
        Ok(())
    }

    /// Notes the buffer of `key` as it is before the batch first touches it, and the
    /// span of `shard` in it before the batch first appends for that shard.
    fn note_before(&mut self, key: &[u8], shard: &ShardId) {
        let (Some(batch), Some(b)) = (self.batch.as_mut(), self.open.get(key)) else { return };
        let before = batch.entry(b.generation).or_insert_with(|| Before::Held {
            key: key.into(),
            entries: b.entries.len(),
            slots: b.slots.len(),
            touched: Vec::new(),
        });
        if let Before::Held { slots, touched, .. } = before
            && let Some(i) = b.slot(shard).filter(|i| i < slots)
            && !touched.iter().any(|(t, _)| *t == i)
        {
            touched.push((i, b.spans[i].clone()));
        }
    }

    /// The next appends are the parts of one record, until [`Buffers::finish_record`]:
    /// no buffer holding one of them is sealed before then.
    pub fn start_record(&mut self) {
        self.record = Some(Vec::new());
    }

    /// The record's parts are all appended: the seals that waited for it happen now
    /// (buffers past their size; relief past the budget).
    pub fn finish_record(&mut self) -> Result<Vec<Sealed>, BufferError> {
        let Some(touched) = self.record.take() else { return Ok(Vec::new()) };
        let mut sealed = Vec::new();
        for key in touched {
            if self.open.get(&key).is_some_and(|b| b.raw_bytes >= self.limits.size_bytes) {
                sealed.push(self.seal(&key, FlushReason::Size)?);
            }
        }
        if self.held > self.limits.memory {
            sealed.extend(self.relieve()?);
        }
        Ok(sealed)
    }

    /// Whether the buffer of `key` holds a part of the record being appended.
    pub(crate) fn in_record(&self, key: &[u8]) -> bool {
        self.record.as_ref().is_some_and(|r| r.iter().any(|k| &**k == key))
    }

    /// Buffers that spill to `spill` instead of sealing for memory (see the module docs).
    pub fn with_spill(mut self, spill: Spill) -> Self {
        self.spill = Some(spill);
        self
    }

    /// Bytes on disk that open buffers hold.
    #[cfg(test)]
    pub fn spilled_bytes(&self) -> u64 {
        self.spill.as_ref().map_or(0, Spill::live_bytes)
    }

    /// The spill store, if any (tests inject write failures through it).
    #[cfg(test)]
    pub fn spill_mut(&mut self) -> Option<&mut Spill> {
        self.spill.as_mut()
    }

    /// Why the spill directory cannot be written, if a spill failed and a write still
    /// fails now (each call tries one).
    pub fn spill_failure(&mut self) -> Option<String> {
        self.spill_failure.as_ref()?;
        let spill = self.spill.as_mut()?;
        match spill.probe() {
            Ok(()) => {
                tracing::info!(dir = %spill.dir().display(), "the spill directory can be written again");
                self.spill_failure = None;
            }
            Err(e) => self.spill_failure = Some(e.to_string()),
        }
        self.spill_failure.clone()
    }

    /// Open buffers (data and error).
    pub fn active(&self) -> usize {
        self.open.len()
    }

    /// Bytes held (compressed runs, staged records and bookkeeping); at most the budget
    /// once an append returns.
    pub fn held_bytes(&self) -> usize {
        self.held
    }

    /// What each open buffer holds (for tests of the eviction rule).
    #[cfg(test)]
    pub fn costs(&self) -> Vec<usize> {
        self.open.values().map(|b| b.cost).collect()
    }

    /// Arrival of the oldest record in any open buffer.
    pub fn oldest_arrival(&self) -> Option<Timestamp> {
        self.open.values().filter_map(|b| b.oldest_arrival).min()
    }

    /// Compressed bytes in open buffers.
    pub fn compressed_bytes(&self) -> usize {
        self.open.values().map(|b| b.body.compressed()).sum()
    }

    /// Re-measures the buffer of `key` after a change.
    pub(crate) fn remeasure(&mut self, key: &[u8]) {
        if let Some(b) = self.open.get_mut(key) {
            let cost = b.measure(key.len());
            self.held = self.held - b.cost + cost;
            b.cost = cost;
        }
    }

    /// The shared compressor (to rebuild sealed objects).
    pub fn deflater(&mut self) -> &mut Deflater {
        &mut self.deflater
    }

    /// Adds one record (with its delimiter already applied) to the buffer of `route`
    /// (the archiver itself uses [`Buffers::append_key`]).
    #[cfg(test)]
    pub fn append(
        &mut self,
        route: &Route,
        data: &[u8],
        shard: &ShardId,
        position: &ExtendedSequenceNumber,
        arrival: Timestamp,
        now: Timestamp,
    ) -> Result<Appended, BufferError> {
        let mut key = Vec::new();
        route.encode(&mut key);
        let origin = Origin { shard, position, part: 0, ordinal: u64::MAX };
        self.append_key(&key, data, origin, arrival, now)
    }

    /// Adds one record (its delimiter applied) to the buffer of route `key` ([`Route::encode`],
    /// [`crate::pipeline::route::encode_data`]); the route
    /// itself is built only when its buffer opens.
    pub fn append_key(
        &mut self,
        key: &[u8],
        data: &[u8],
        origin: Origin<'_>,
        arrival: Timestamp,
        now: Timestamp,
    ) -> Result<Appended, BufferError> {
        if !self.open.contains_key(key) {
            // A new partition: open its buffer, and past the cap seal the oldest one once
            // the record is in (a failed append then pushed nothing out).
            let over_cap = self.open_buffer(key, now)?;
            let mut appended = self.append_key(key, data, origin, arrival, now)?;
            if over_cap && let Some(oldest) = self.oldest_to_evict(key) {
                appended.sealed.insert(0, self.seal(&oldest, FlushReason::Overflow)?);
            }
            return Ok(appended);
        }
        #[cfg(test)]
        if let Some((left, panic)) = self.inject.as_mut() {
            if *left == 0 {
                let panic = *panic;
                self.inject = None;
                if panic {
                    panic!("injected panic while buffering");
                }
                return Err(BufferError::Injected);
            }
            *left -= 1;
        }
        self.note_before(key, origin.shard);
        let Some(buffer) = self.open.get_mut(key) else { return Err(BufferError::RouteKey) };
        if buffer.spilled_stage_len > 0
            && buffer.spilled_stage_len + buffer.body.staged() + data.len() > crate::delivery::body::CHUNK
            && let Some(spill) = self.spill.as_mut()
        {
            buffer.fold(spill)?;
        }
        let generation = Self::add(buffer, data, origin, arrival, &mut self.deflater)?;
        let full = buffer.raw_bytes >= self.limits.size_bytes;
        if let Some(record) = self.record.as_mut()
            && !record.iter().any(|k| &**k == key)
        {
            record.push(key.into());
        }
        let mut sealed = Vec::new();
        if full && self.record.is_none() {
            sealed.push(self.seal(key, FlushReason::Size)?);
        } else {
            self.remeasure(key);
            if self.held > self.limits.memory {
                sealed.extend(self.relieve()?);
            }
        }
        Ok(Appended { generation, sealed })
    }

    /// Opens the buffer of route `key`; returns whether a data buffer must go to keep
    /// within `max_active` ([`Overflow::FlushOldest`]), or refuses ([`Overflow::Reject`]).
    fn open_buffer(&mut self, key: &[u8], now: Timestamp) -> Result<bool, BufferError> {
        let mut over_cap = false;
        // A data route's key, well formed, or an error route's (checked without
        // building the route).
        let is_data = match data_pairs(key).map(|mut pairs| pairs.all(|p| p.is_some())) {
            Some(true) => true,
            Some(false) => return Err(BufferError::RouteKey),
            None if Route::error_type(key).is_some() => false,
            None => return Err(BufferError::RouteKey),
        };
        if let Some(max) = self.limits.max_active.filter(|max| is_data && self.data_open >= *max) {
            match self.limits.overflow {
                Overflow::Reject => return Err(BufferError::TooManyPartitions(max)),
                Overflow::FlushOldest => over_cap = true,
            }
        }
        let generation = self.next_generation;
        self.next_generation += 1;
        if let Some(batch) = self.batch.as_mut() {
            batch.insert(generation, Before::Opened(key.into()));
        }
        if is_data {
            self.data_open += 1;
        }
        let cost = OPEN_COST + key.len();
        self.held += cost;
        self.open.insert(
            key.into(),
            Box::new(Open {
                generation,
                cost,
                is_data,
                body: Body::new(self.limits.format(is_data)),
                raw_bytes: 0,
                opened: now,
                oldest_arrival: None,
                slots: Vec::new(),
                slot_index: None,
                entries: Vec::new(),
                spans: Vec::new(),
                spilled: Vec::new(),
                spilled_stage: Vec::new(),
                spilled_stage_len: 0,
                exact: (!is_data || self.limits.exact_data).then(Vec::new),
            }),
        );
        Ok(over_cap)
    }

    /// The data buffer opened longest ago, other than `new` and those of the record
    /// being appended: the one the partition cap pushes out.
    fn oldest_to_evict(&self, new: &[u8]) -> Option<Box<[u8]>> {
        self.open
            .iter()
            .filter(|(k, b)| b.is_data && &***k != new && !self.in_record(k))
            .min_by_key(|(_, b)| (b.opened, b.generation))
            .map(|(k, _)| k.clone())
    }

    /// Appends to an open buffer; returns its generation.
    fn add(
        buffer: &mut Open,
        data: &[u8],
        origin: Origin<'_>,
        arrival: Timestamp,
        deflater: &mut Deflater,
    ) -> Result<u64, BufferError> {
        let Origin { shard, position, part, ordinal } = origin;
        buffer.body.append(data, deflater)?;
        if let Some(exact) = buffer.exact.as_mut() {
            exact.push((ordinal, PartPosition { position: position.clone(), part }));
        }
        buffer.raw_bytes += data.len() as u64;
        let slot = match buffer.slot(shard) {
            Some(i) => i,
            None => buffer.push_slot(shard),
        };
        buffer.entries.push((slot as u32, data.len() as u32));
        buffer.oldest_arrival = Some(buffer.oldest_arrival.map_or(arrival, |t| t.min(arrival)));
        match &mut buffer.spans[slot] {
            Some(span) => {
                span.last = position.clone();
                span.oldest_arrival = span.oldest_arrival.min(arrival);
            }
            empty @ None => {
                *empty = Some(Span { first: position.clone(), last: position.clone(), oldest_arrival: arrival });
            }
        }
        Ok(buffer.generation)
    }

    /// Buffers whose interval has passed at `now`.
    pub fn due(&mut self, now: Timestamp) -> Result<Vec<Sealed>, BufferError> {
        let interval = self.limits.interval;
        let due: Vec<Box<[u8]>> = self
            .open
            .iter()
            .filter(|(_, b)| now.saturating_since(b.opened) >= interval)
            .map(|(k, _)| k.clone())
            .collect();
        due.iter().map(|k| self.seal(k, FlushReason::Interval)).collect()
    }

    /// The keys of the buffers holding records of `shard` (before the shard closes:
    /// found once, then sealed in chunks with [`Buffers::seal_keys`]).
    pub fn holding(&self, shard: &ShardId) -> Vec<Box<[u8]>> {
        self.open.iter().filter(|(_, b)| b.holds(shard)).map(|(k, _)| k.clone()).collect()
    }

    /// The route keys of every open buffer.
    pub fn keys(&self) -> Vec<Box<[u8]>> {
        self.open.keys().cloned().collect()
    }

    /// Seals the buffers of `keys` that are still open.
    pub fn seal_keys(&mut self, keys: &[Box<[u8]>]) -> Result<Vec<Sealed>, BufferError> {
        let mut sealed = Vec::with_capacity(keys.len());
        for k in keys {
            if self.open.contains_key(k) {
                sealed.push(self.seal(k, FlushReason::Requested)?);
            }
        }
        Ok(sealed)
    }

    /// Every buffer.
    #[cfg(test)]
    pub fn all(&mut self) -> Result<Vec<Sealed>, BufferError> {
        self.seal_keys(&self.keys())
    }

    /// Removes the records of `shard` from every open buffer (its lease was lost: the
    /// next owner archives them). Buffers left empty close.
    pub fn forget_shard(&mut self, shard: &ShardId) -> Result<(), BufferError> {
        let keys: Vec<Box<[u8]>> = self.open.iter().filter(|(_, b)| b.holds(shard)).map(|(k, _)| k.clone()).collect();
        let lost: BTreeSet<ShardId> = [shard.clone()].into();
        for k in keys {
            let opened = self.open.get(&k).map(|b| b.opened).unwrap_or(Timestamp::from_millis(0));
            // Formats encoded whole at sealing are taken apart as their records.
            if let Some(b) = self.open.get_mut(&k) {
                b.body.finish_plain();
            }
            let sealed = self.seal(&k, FlushReason::Requested)?;
            if let Some(rest) = sealed.without(&lost, &mut self.deflater)? {
                self.reopen(rest, opened)?;
            }
        }
        Ok(())
    }

    /// Opens a buffer again with the content of `sealed` (same generation).
    fn reopen(&mut self, sealed: Sealed, opened: Timestamp) -> Result<(), BufferError> {
        let raw = decode(sealed.compression, &sealed.body)?;
        let is_data = sealed.key.is_data();
        let mut body = Body::new(self.limits.format(is_data));
        body.append(&raw, &mut self.deflater)?;
        if is_data {
            self.data_open += 1;
        }
        let key: Box<[u8]> = sealed.key.as_bytes().into();
        self.open.insert(
            key.clone(),
            Box::new(Open {
                generation: sealed.generation,
                cost: 0,
                is_data,
                body,
                raw_bytes: sealed.raw_bytes,
                opened,
                oldest_arrival: Some(sealed.oldest_arrival),
                spans: sealed.spans,
                slot_index: slot_index(&sealed.slots),
                slots: sealed.slots,
                entries: sealed.entries,
                spilled: Vec::new(),
                spilled_stage: Vec::new(),
                spilled_stage_len: 0,
                exact: sealed.exact,
            }),
        );
        self.remeasure(&key);
        Ok(())
    }

    pub(crate) fn seal(&mut self, key: &[u8], reason: FlushReason) -> Result<Sealed, BufferError> {
        let Some((key, mut b)) = self.open.remove_entry(key) else {
            return Err(BufferError::Body(BodyError("no such buffer".into())));
        };
        if let Some(spill) = self.spill.as_mut()
            && let Err(e) = b.fold(spill)
        {
            self.broken = Some(format!("reading a buffer back from the spill directory failed: {e}"));
            return Err(e);
        }
        if b.is_data {
            self.data_open -= 1;
        }
        self.held -= b.cost;
        let compression = match &b.body {
            Body::Plain(_, format) => *format,
            Body::Gzip { .. } => Compression::Gzip,
        };
        let spill = &mut self.spill;
        let lens: Vec<u32> = if compression == Compression::Parquet {
            b.entries.iter().map(|&(_, len)| len).collect()
        } else {
            Vec::new()
        };
        let body = b.body.finish_with(&mut self.deflater, &lens, |out| {
            let Some(spill) = spill.as_ref() else { return Ok(()) };
            for r in &b.spilled {
                spill.read(r, out).map_err(|e| BodyError(e.to_string()))?;
            }
            Ok(())
        });
        if let Some(spill) = spill.as_mut() {
            for r in &b.spilled {
                spill.release(r);
            }
        }
        let Finished { body, rows } = match body {
            Ok(finished) => finished,
            Err(e) => {
                // The buffer has left the map and its body is spent: its records are
                // in no object and in no buffer any more.
                self.broken = Some(format!("sealing a buffer failed: {e}"));
                return Err(e.into());
            }
        };
        Ok(Sealed {
            generation: b.generation,
            held: b.cost,
            key: RouteKey::new(key),
            body,
            raw_bytes: b.raw_bytes,
            oldest_arrival: b.oldest_arrival.unwrap_or(Timestamp::from_millis(0)),
            reason,
            compression,
            slots: b.slots,
            spans: b.spans,
            entries: b.entries,
            rows,
            exact: b.exact,
            except: Vec::new(),
        })
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};

    use proptest::prelude::*;

    use super::*;
    use crate::delivery::testing::*;
    use crate::pipeline::error_records::ErrorOutputType;

    #[test]
    fn size_is_measured_before_compression() {
        let mut b = Buffers::new(limits(100, 300, 10, Overflow::FlushOldest));
        let shard = ShardId::new("s0");
        let line = format!("{}\n", "a".repeat(49));
        assert!(b.append(&key("t1"), line.as_bytes(), &shard, &pos(1), t(5), t(10)).unwrap().sealed.is_empty());
        let flushed = b.append(&key("t1"), line.as_bytes(), &shard, &pos(2), t(4), t(11)).unwrap().sealed;
        assert_eq!(flushed.len(), 1);
        let f = &flushed[0];
        assert_eq!((f.reason, f.records(), f.raw_bytes), (FlushReason::Size, 2, 100));
        assert!(f.body.len() < 100, "compressed body");
        assert_eq!(gunzip(&f.body), line.repeat(2));
        assert_eq!(f.oldest_arrival, t(4), "oldest arrival, not first");
        let span = f.span(&shard).unwrap();
        assert_eq!((span.first.clone(), span.last.clone()), (pos(1), pos(2)));
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
        assert_eq!(first.iter().map(|f| f.route()).collect::<Vec<_>>(), vec![key("t1")]);
        assert_eq!(first[0].reason, FlushReason::Interval);
        assert_eq!(b.due(t(190)).unwrap()[0].route(), key("t2"));
        let mut z = Buffers::new(limits(1 << 20, 0, 10, Overflow::FlushOldest));
        z.append(&key("t1"), b"x\n", &s, &pos(1), t(0), t(5)).unwrap();
        assert_eq!(z.due(t(5)).unwrap().len(), 1);
    }

    #[test]
    fn active_partition_cap_counts_data_partitions_only() {
        let s = ShardId::new("s0");
        let mut evict = Buffers::new(limits(1 << 20, 300, 2, Overflow::FlushOldest));
        evict.append(&key("a"), b"1\n", &s, &pos(1), t(0), t(1)).unwrap();
        evict.append(&key("b"), b"2\n", &s, &pos(2), t(0), t(2)).unwrap();
        let err = Route::Error(ErrorOutputType::ProcessingFailed);
        assert!(evict.append(&err, b"e\n", &s, &pos(3), t(0), t(3)).unwrap().sealed.is_empty());
        let out = evict.append(&key("c"), b"3\n", &s, &pos(4), t(0), t(4)).unwrap().sealed;
        assert_eq!(out.len(), 1);
        assert_eq!((out[0].route(), out[0].reason), (key("a"), FlushReason::Overflow));
        assert_eq!(evict.active(), 3);
        let mut reject = Buffers::new(limits(1 << 20, 300, 2, Overflow::Reject));
        reject.append(&key("a"), b"1\n", &s, &pos(1), t(0), t(1)).unwrap();
        reject.append(&key("b"), b"2\n", &s, &pos(2), t(0), t(2)).unwrap();
        assert!(matches!(
            reject.append(&key("c"), b"3\n", &s, &pos(3), t(0), t(3)).unwrap_err(),
            BufferError::TooManyPartitions(2)
        ));
        assert!(reject.append(&key("a"), b"4\n", &s, &pos(4), t(0), t(4)).unwrap().sealed.is_empty());
    }

    #[test]
    fn a_lost_shard_leaves_every_buffer() {
        let mut b = Buffers::new(limits(1 << 20, 300, 10, Overflow::FlushOldest));
        let (s0, s1) = (ShardId::new("s0"), ShardId::new("s1"));
        b.append(&key("a"), b"0-1\n", &s0, &pos(1), t(0), t(1)).unwrap();
        let g = b.append(&key("a"), b"1-7\n", &s1, &pos(7), t(0), t(1)).unwrap().generation;
        b.append(&key("a"), b"0-2\n", &s0, &pos(2), t(0), t(1)).unwrap();
        b.append(&key("b"), b"0-3\n", &s0, &pos(3), t(0), t(1)).unwrap();
        b.forget_shard(&s0).unwrap();
        assert_eq!(b.active(), 1, "b held only s0");
        let rest = b.all().unwrap();
        assert_eq!(gunzip(&rest[0].body), "1-7\n");
        assert_eq!(rest[0].generation, g, "the buffer keeps its identity");
        assert_eq!(rest[0].spans().map(|(s, _)| s).collect::<Vec<_>>(), vec![&s1]);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        /// A batch that fails at any append is taken back whole: buffered again, every
        /// record lands in exactly one object, in order within its partition, whatever
        /// was sealed (for size, memory or the cap) before the failure.
        #[test]
        fn a_failed_batch_is_taken_back_whole(
            batches in proptest::collection::vec((proptest::collection::vec((0u8..6, 1usize..150), 1..30), proptest::option::of(0usize..30), 0u8..3), 1..12),
            size in 100u64..600,
            memory in prop_oneof![Just(usize::MAX), 4_000usize..20_000],
            spill in any::<bool>(),
        ) {
            let dir = tempfile::tempdir().unwrap();
            let mut b = Buffers::new(Limits { memory, ..limits(size, 3600, 4, Overflow::FlushOldest) });
            if spill {
                b = b.with_spill(crate::delivery::spill::Spill::open(dir.path(), "t").unwrap());
            }
            let mut sealed_all = Vec::new();
            let mut expected: BTreeMap<String, String> = BTreeMap::new();
            // Which shard each line (by its number) came from.
            let mut shard_of: BTreeMap<u128, ShardId> = BTreeMap::new();
            let mut n = 0u128;
            for (records, fail_at, from) in &batches {
                let shard = ShardId::new(format!("s{from}"));
                for attempt in 0..2 {
                    let inject = if attempt == 0 { *fail_at } else { None };
                    b.inject = inject.map(|at| (at, false));
                    b.begin_batch();
                    let mut sealed = Vec::new();
                    let mut failed = false;
                    for (i, (tenant, len)) in records.iter().enumerate() {
                        let line = format!("{}:{}\n", n + i as u128, "q".repeat(*len));
                        match b.append(&key(&format!("t{tenant}")), line.as_bytes(), &shard, &pos(n + i as u128 + 1), t(0), t(0)) {
                            Ok(a) => sealed.extend(a.sealed),
                            Err(_) => {
                                failed = true;
                                break;
                            }
                        }
                    }
                    b.inject = None;
                    if failed {
                        b.rollback_batch(&mut sealed).unwrap();
                        sealed_all.extend(sealed);
                        continue;
                    }
                    b.commit_batch();
                    sealed_all.extend(sealed);
                    break;
                }
                for (i, (tenant, len)) in records.iter().enumerate() {
                    let line = format!("{}:{}\n", n + i as u128, "q".repeat(*len));
                    expected.entry(key(&format!("t{tenant}")).scope()).or_default().push_str(&line);
                    shard_of.insert(n + i as u128, shard.clone());
                }
                n += records.len() as u128;
            }
            sealed_all.extend(b.all().unwrap());
            prop_assert_eq!(contents(&sealed_all), expected);
            prop_assert_eq!(b.held_bytes(), 0);
            // Each object's spans are exactly its lines' shards, first and last.
            for f in &sealed_all {
                let mut want: BTreeMap<ShardId, (u128, u128)> = BTreeMap::new();
                for line in gunzip(&f.body).lines() {
                    let i: u128 = line.split(':').next().unwrap().parse().unwrap();
                    let e = want.entry(shard_of[&i].clone()).or_insert((i, i));
                    e.1 = i;
                }
                let got: BTreeMap<ShardId, (ExtendedSequenceNumber, ExtendedSequenceNumber)> =
                    f.spans().map(|(s, span)| (s.clone(), (span.first.clone(), span.last.clone()))).collect();
                let want: BTreeMap<ShardId, (ExtendedSequenceNumber, ExtendedSequenceNumber)> =
                    want.into_iter().map(|(s, (a, z))| (s, (pos(a + 1), pos(z + 1)))).collect();
                prop_assert_eq!(got, want);
            }
        }
    }

    proptest! {
        /// The parts of a record that go to one route land in one object, whatever
        /// seals buffers meanwhile (size, memory relief, the partition cap); and every
        /// part lands in exactly one object.
        #[test]
        fn the_parts_of_a_record_of_one_route_are_in_one_object(
            records in proptest::collection::vec(proptest::collection::vec((0u8..4, 1usize..120), 1..6), 1..80),
            size in 50u64..400,
            memory in prop_oneof![Just(usize::MAX), 3_000usize..20_000],
            max in 1usize..4,
            overflow in prop_oneof![Just(Overflow::FlushOldest), Just(Overflow::Reject)],
        ) {
            let mut b = Buffers::new(Limits { memory, ..limits(size, 3600, max, overflow) });
            let shard = ShardId::new("s0");
            let mut sealed = Vec::new();
            let mut appended = 0;
            for (r, parts) in records.iter().enumerate() {
                if parts.len() > 1 {
                    b.start_record();
                }
                for (k, (tenant, len)) in parts.iter().enumerate() {
                    let line = format!("{r}.{k}:{}\n", "p".repeat(*len));
                    match b.append(&key(&format!("t{tenant}")), line.as_bytes(), &shard, &pos(r as u128 + 1), t(0), t(0)) {
                        Ok(a) => {
                            sealed.extend(a.sealed);
                            appended += 1;
                        }
                        Err(BufferError::TooManyPartitions(_)) => {}
                        Err(e) => panic!("{e}"),
                    }
                }
                sealed.extend(b.finish_record().unwrap());
            }
            sealed.extend(b.all().unwrap());
            // (record, route) -> the objects holding its parts.
            let mut holders: BTreeMap<(String, String), BTreeSet<u64>> = BTreeMap::new();
            let mut lines = 0;
            for f in &sealed {
                for line in gunzip(&f.body).lines() {
                    lines += 1;
                    let record = line.split('.').next().unwrap().to_owned();
                    holders.entry((record, f.route().scope())).or_default().insert(f.generation);
                }
            }
            prop_assert_eq!(lines, appended);
            for ((record, route), objects) in holders {
                prop_assert_eq!(objects.len(), 1, "record {} route {} in {:?}", record, route, objects);
            }
        }
    }

    proptest! {
        /// Every record appended ends up in exactly one sealed body, in order within its
        /// partition, and sealed objects rebuilt without a shard hold exactly the rest.
        #[test]
        fn nothing_lost_nothing_twice(ops in proptest::collection::vec((0u8..4, 0u8..3, 1usize..40, 0u8..10), 1..200)) {
            let mut b = Buffers::new(limits(120, 5, 3, Overflow::FlushOldest));
            let mut sealed = Vec::new();
            let mut expected: BTreeMap<String, String> = BTreeMap::new();
            let mut without_s0: BTreeMap<String, String> = BTreeMap::new();
            for (i, (tenant, shard, len, tick)) in ops.iter().enumerate() {
                let k = key(&format!("t{tenant}"));
                let line = format!("{i}:{}\n", "x".repeat(*len));
                expected.entry(k.scope()).or_default().push_str(&line);
                if *shard != 0 {
                    without_s0.entry(k.scope()).or_default().push_str(&line);
                }
                let now = t(i as i64);
                sealed.extend(b.append(&k, line.as_bytes(), &ShardId::new(format!("s{shard}")), &pos(i as u128 + 1), now, now).unwrap().sealed);
                if *tick == 0 {
                    sealed.extend(b.due(now).unwrap());
                }
            }
            sealed.extend(b.all().unwrap());
            let mut got: BTreeMap<String, String> = BTreeMap::new();
            let mut rebuilt: BTreeMap<String, String> = BTreeMap::new();
            let mut records = 0;
            let lost: BTreeSet<ShardId> = [ShardId::new("s0")].into();
            for f in &sealed {
                got.entry(f.route().scope()).or_default().push_str(&gunzip(&f.body));
                records += f.records();
                if let Some(r) = f.without(&lost, b.deflater()).unwrap() {
                    rebuilt.entry(r.route().scope()).or_default().push_str(&gunzip(&r.body));
                }
            }
            prop_assert_eq!(got, expected);
            prop_assert_eq!(records, ops.len() as u64);
            prop_assert_eq!(rebuilt, without_s0);
        }
    }
}
