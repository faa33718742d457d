//! Writing sealed buffers as objects, and when their records count as durable.
//!
//! **Firehose mode** (at least once): put the object (create-only, under a fresh
//! random name); once the put succeeded its records are acknowledged. A crash between
//! the put and the checkpoint archives those records again.
//!
//! **Exactly-once mode** (default): before the put, an [`Intent`](weir_core::Intent) per shard in the
//! object ("records of this shard in [first, last] routed to this partition go to this
//! key") is stored in that shard's lease through [`weir_core::IntentLog`], fenced by the lease
//! owner and counter; the intents of every object sealed together go in one call (one
//! DynamoDB transaction per 25 leases). Then the object is put create-only. A shard's
//! next owner resolves the open intents (see [`crate::delivery::resolve`]): written keys mean
//! "skip these records", missing keys are claimed with an empty object so a late put
//! from a zombie fails. A put that meets a claim, or an intent write refused because a
//! lease is gone, rebuilds the object without the lost shards' records and tries again
//! under a new key. A put that fails for any other reason is retried (same key, same
//! intents) with backoff for as long as it takes; nothing is acknowledged meanwhile.
//! A round that puts many objects of a shard stores their intents in a manifest object
//! and only the manifest's intent in the lease (see [`crate::delivery::manifest`]).
//!
//! This file holds the rounds, the puts and the backlog; `keys.rs` names objects and
//! `intents.rs` stores their intents and deletes passed manifests.

mod intents;
mod keys;

use intents::IntentStep;

use std::collections::{BTreeSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use chrono_tz::Tz;
use futures::StreamExt;
use weir_core::ports::{ObjectSink, PutOptions, PutOutcome, SinkError};
use weir_core::{Acks, ShardId, Timestamp};

use crate::delivery::body::{BodyError, Deflater};
use crate::delivery::budget::{InlineLimits, LeaseBudget};
use crate::delivery::claim::{Claims, WrittenKeys, is_claim};
use crate::delivery::ledger::Ledger;
use crate::delivery::naming::Naming;
use crate::delivery::sealed::Sealed;
use crate::metrics as m;
use weir_firehose::Compression;
use weir_firehose::prefix::Prefixes;

/// How objects are delivered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeliveryMode {
    /// Every record in exactly one object, across crashes, takeovers and zombies.
    ExactlyOnce,
    /// Firehose's at-least-once delivery.
    Firehose,
}

/// A sealed object waiting to be durable.
#[derive(Debug)]
struct Pending {
    sealed: Sealed,
    /// The key, once chosen.
    key: Option<Arc<str>>,
    /// Exactly-once: the intents naming `key` are stored.
    intents_stored: bool,
    /// Shards whose leases were lost after the intents were stored. Their records stay
    /// in the object under its key (see [`Delivery::forget_shard`]), but never go under
    /// another key: if the key turns out claimed, the object is rebuilt without them
    /// (this worker may hold the shard again by then, and it reads them again).
    forgotten: BTreeSet<ShardId>,
}

impl Pending {
    fn new(sealed: Sealed) -> Self {
        Self { sealed, key: None, intents_stored: false, forgotten: BTreeSet::new() }
    }
}

/// The longest wait between two attempts at a failing store (the backoff doubles
/// from 200 ms up to this): after an outage, delivery resumes within this long.
const MAX_RETRY_DELAY: Duration = Duration::from_secs(10);
/// Objects and bytes waiting for the store, readable from other tasks (`/readyz`).
#[derive(Debug, Clone, Default)]
pub struct Backlog {
    objects: Arc<std::sync::atomic::AtomicU64>,
    bytes: Arc<std::sync::atomic::AtomicU64>,
}

impl Backlog {
    /// (objects, bytes) waiting.
    pub fn get(&self) -> (u64, u64) {
        use std::sync::atomic::Ordering::Relaxed;
        (self.objects.load(Relaxed), self.bytes.load(Relaxed))
    }

    fn set(&self, objects: u64, bytes: u64) {
        use std::sync::atomic::Ordering::Relaxed;
        self.objects.store(objects, Relaxed);
        self.bytes.store(bytes, Relaxed);
    }
}

/// What a [`Delivery`] is built from.
#[derive(Debug, Clone)]
pub struct DeliveryConfig {
    /// The consumer's name (manifest keys).
    pub consumer: String,
    /// Exactly-once or Firehose's at-least-once.
    pub mode: DeliveryMode,
    /// Data object names.
    pub naming: Naming,
    /// Error object names (their extension is the error output's format's).
    pub error_naming: Naming,
    /// Data and error prefixes.
    pub prefixes: Prefixes,
    /// `CustomTimeZone`.
    pub time_zone: Tz,
    /// The objects that claim keys.
    pub claims: Claims,
    /// Puts in flight at once.
    pub concurrency: usize,
    /// When a round's intents go inline into the leases.
    pub inline: InlineLimits,
}

/// Objects in flight and waiting for retries.
pub struct Delivery {
    backlog_view: Backlog,
    sink: Arc<dyn ObjectSink>,
    mode: DeliveryMode,
    naming: Naming,
    error_naming: Naming,
    prefixes: Prefixes,
    time_zone: Tz,
    claims: Claims,
    backlog: VecDeque<Pending>,
    retry_at: Option<Timestamp>,
    retry_delay: Duration,
    concurrency: usize,
    /// Keys this process wrote (the newest [`REMEMBERED_KEYS`]), shared with their
    /// order of writing.
    written: WrittenKeys,
    written_order: VecDeque<Arc<str>>,
    /// The consumer's name (manifest keys).
    consumer: String,
    /// Inline intents per shard lease.
    inline: LeaseBudget,
    /// Every manifest this process wrote and has not doomed yet, with the manifests it
    /// absorbed (deleted with it): deleting it needs no read of it.
    absorbed: std::collections::HashMap<String, Vec<String>>,
}

/// A manifest no lease names any more (see [`Delivery::intents_passed`]).
#[derive(Debug, PartialEq, Eq)]
pub struct DoomedManifest {
    key: String,
    /// Written by another process: read it to find the manifests it absorbed. (Those
    /// this process wrote come with their absorbed ones listed, and are not read.)
    read: bool,
}

/// Keys this process wrote, remembered so that reopening a shard does not claim them.
const REMEMBERED_KEYS: usize = 16_384;

/// Whether [`Delivery::deliver`] tries the waiting objects again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BacklogRetry {
    /// Now (a tick, a shard closing).
    Now,
    /// Only once their backoff has run out (new objects from a batch).
    WhenDue,
}

/// Why delivery could not finish now.
#[derive(Debug, thiserror::Error)]
pub enum DeliveryError {
    /// Objects wait in the backlog; they are tried again.
    #[error("archive delivery is waiting: {0}")]
    Waiting(Waiting),
    /// A body could not be rebuilt without a lost shard's records (compression failure).
    #[error("cannot rebuild an object: {0}")]
    Rebuild(BodyError),
}

/// Why objects wait in the backlog.
#[derive(Debug, thiserror::Error)]
pub enum Waiting {
    /// The store failed earlier and its backoff has not run out: new objects join the
    /// backlog without a call.
    #[error("the store is failing; new objects wait for the next retry")]
    BackingOff,
    /// Objects wait for their backoff (the round tried only the new ones).
    #[error("objects left to write; retried after the backoff")]
    NotDue,
    /// Objects still met claims or lost shards after the last round.
    #[error("objects left to write")]
    RoundsRanOut,
    /// An object's put failed.
    #[error(transparent)]
    Put(SinkError),
    /// Intents could not be stored before the puts.
    #[error(transparent)]
    Intents(IntentFailure),
    /// An object that met a claim could not be rebuilt without the shards lost meanwhile.
    #[error(transparent)]
    Rebuild(BodyError),
}

/// Why a round's intents could not be stored.
#[derive(Debug, thiserror::Error)]
pub enum IntentFailure {
    /// Exactly-once mode under a runtime without an intent log.
    #[error("exactly-once delivery needs a runtime that stores intents")]
    NoIntentLog,
    /// The manifest would not fit its format's limits.
    #[error("cannot encode an intent manifest")]
    Unencodable,
    /// A manifest's key holds an object already (keys are never reused).
    #[error("intent manifest {0} exists already")]
    ManifestExists(String),
    /// A manifest's put failed.
    #[error("cannot write intent manifest {key}: {error}")]
    Manifest {
        /// The manifest's key.
        key: String,
        /// The store's error.
        error: SinkError,
    },
    /// The intent store failed (nothing is known to be stored).
    #[error("{0}")]
    Store(String),
}

impl Delivery {
    /// A delivery stage writing to `sink`.
    pub fn new(config: DeliveryConfig, sink: Arc<dyn ObjectSink>) -> Self {
        let DeliveryConfig { consumer, mode, naming, error_naming, prefixes, time_zone, claims, concurrency, inline } =
            config;
        Self {
            backlog_view: Backlog::default(),
            sink,
            mode,
            naming,
            error_naming,
            prefixes,
            time_zone,
            claims,
            backlog: VecDeque::new(),
            retry_at: None,
            retry_delay: Duration::from_millis(200),
            concurrency: concurrency.max(1),
            written: WrittenKeys::default(),
            written_order: VecDeque::new(),
            consumer,
            inline: LeaseBudget::new(inline),
            absorbed: std::collections::HashMap::new(),
        }
    }

    /// The empty objects that claim keys.
    pub fn claims(&self) -> &Claims {
        &self.claims
    }

    /// The sink.
    pub fn sink(&self) -> &Arc<dyn ObjectSink> {
        &self.sink
    }

    /// The consumer's name (manifest keys).
    pub fn consumer(&self) -> &str {
        &self.consumer
    }

    /// The delivery mode.
    pub fn mode(&self) -> DeliveryMode {
        self.mode
    }

    /// The keys this process wrote (remembered ones), as of now.
    pub fn written_keys(&self) -> WrittenKeys {
        self.written.clone()
    }

    /// Objects waiting.
    pub fn backlog_objects(&self) -> usize {
        self.backlog.len()
    }

    /// Bytes waiting.
    pub fn backlog_bytes(&self) -> u64 {
        self.backlog.iter().map(|p| p.sealed.body.len() as u64).sum()
    }

    /// Arrival of the oldest record in an object waiting for the store.
    pub fn oldest_arrival(&self) -> Option<Timestamp> {
        self.backlog.iter().map(|p| p.sealed.oldest_arrival).min()
    }

    /// Whether a retry is due at `now`.
    pub fn retry_due(&self, now: Timestamp) -> bool {
        !self.backlog.is_empty() && self.retry_at.is_none_or(|t| now >= t)
    }

    /// `shard`'s lease is gone: waiting objects whose intents are not stored yet are
    /// rebuilt without its records (storing intents for them would need its lease).
    ///
    /// An object whose intents are stored keeps its key, body and intents, whichever
    /// shards it holds: its put may have landed already (an answer lost), so a new key
    /// would write its records twice. Kept, it is exactly once either way: the shard's
    /// next owner resolves the key the lost lease's intent names, and finds it written
    /// (and skips the records) or claims it first (and this put then meets the claim).
    pub fn forget_shard(&mut self, shard: &ShardId, deflater: &mut Deflater) -> Result<(), DeliveryError> {
        self.inline.forget(shard);
        let lost: BTreeSet<ShardId> = [shard.clone()].into();
        let mut kept = VecDeque::new();
        for p in self.backlog.drain(..) {
            if p.sealed.span(shard).is_none() {
                kept.push_back(p);
                continue;
            }
            if p.intents_stored && self.mode == DeliveryMode::ExactlyOnce {
                let mut p = p;
                p.forgotten.insert(shard.clone());
                kept.push_back(p);
                continue;
            }
            match p.sealed.without(&lost, deflater) {
                // A new key: the old one's intents promise records it will not hold.
                Ok(Some(rest)) => kept.push_back(Pending::new(rest)),
                Ok(None) => {}
                Err(e) => return Err(DeliveryError::Rebuild(e)),
            }
        }
        self.backlog = kept;
        self.update_gauges();
        Ok(())
    }

    /// Delivers `sealed`, plus the waiting objects when `backlog` is
    /// [`BacklogRetry::Now`] or their backoff has run out. Durable objects are settled
    /// in the ledger; the caller acknowledges. Objects that cannot be written now stay
    /// in the backlog (and the error says why).
    pub async fn deliver(
        &mut self,
        sealed: Vec<Sealed>,
        now: Timestamp,
        ledger: &mut Ledger,
        acks: &dyn Acks,
        deflater: &mut Deflater,
        backlog: BacklogRetry,
    ) -> Result<(), DeliveryError> {
        // A failing store is not asked again before its backoff runs out just because
        // new objects came: they join the backlog and wait with it. (Trying each new
        // object would hold the caller for the SDK's retries on every batch while the
        // store is down; queued, the backlog grows quickly to `max_backlog_bytes` and
        // the archiver refuses records instead, which says why.)
        let retrying = backlog == BacklogRetry::Now || self.retry_due(now);
        // The backoff counts from the end of this attempt: a round against a failing
        // store can itself take seconds (the SDK's own retries).
        let began = tokio::time::Instant::now();
        if !retrying && self.retry_at.is_some() {
            for s in sealed {
                if s.raw_bytes == 0 {
                    settle(ledger, &s);
                } else {
                    self.backlog.push_back(Pending::new(s));
                }
            }
            for (shard, pos) in ledger.advance_all() {
                acks.durable(&shard, &pos);
            }
            self.update_gauges();
            return Err(DeliveryError::Waiting(Waiting::BackingOff));
        }
        let mut work: Vec<Pending> = if retrying { self.backlog.drain(..).collect() } else { Vec::new() };
        work.extend(sealed.into_iter().map(Pending::new));
        let mut failure = None;
        // Each round writes intents for objects without a key, then puts everything;
        // objects that met a claim or lost shards come back for another round.
        for _round in 0..8 {
            if work.is_empty() {
                break;
            }
            let mut again = Vec::new();
            let mut ready = Vec::new();
            // Objects with nothing in them need no object at all.
            for p in work.drain(..) {
                if p.sealed.raw_bytes == 0 {
                    settle(ledger, &p.sealed);
                } else {
                    ready.push(p);
                }
            }
            if let Err(e) = self.record_intents(&mut ready, acks, deflater).await {
                match e {
                    IntentStep::Retry(rest) => {
                        again.extend(rest);
                    }
                    IntentStep::Fail(why, rest) => {
                        failure = Some(Waiting::Intents(why));
                        self.backlog.extend(rest);
                        break;
                    }
                }
            }
            let results = futures::stream::iter(ready.into_iter().map(|p| self.put(p)))
                .buffer_unordered(self.concurrency)
                .collect::<Vec<_>>()
                .await;
            // Counted per round, not per object (a round can hold 100,000 objects).
            let mut durable = Durable::default();
            for (p, outcome) in results {
                match outcome {
                    PutResult::Durable => {
                        if let Some(k) = p.key {
                            self.remember(k);
                        }
                        durable.add(&p.sealed);
                        settle(ledger, &p.sealed);
                    }
                    PutResult::Claimed => {
                        metrics::counter!(m::CLAIMS_MET).increment(1);
                        match p.sealed.without(&p.forgotten, deflater) {
                            Ok(Some(rest)) => again.push(Pending::new(rest)),
                            Ok(None) => settle(ledger, &p.sealed),
                            Err(e) => {
                                failure = Some(Waiting::Rebuild(e));
                                self.backlog.push_back(p);
                            }
                        }
                    }
                    PutResult::Failed(e) => {
                        metrics::counter!(m::PUT_FAILURES).increment(1);
                        tracing::warn!(key = p.key.as_deref().unwrap_or(""), error = %e, "object put failed; it will be retried");
                        failure = Some(Waiting::Put(e));
                        self.backlog.push_back(p);
                    }
                }
            }
            durable.count(&self.consumer);
            work = again;
        }
        self.backlog.extend(work);
        for (shard, pos) in ledger.advance_all() {
            acks.durable(&shard, &pos);
        }
        self.update_gauges();
        match failure {
            None if self.backlog.is_empty() => {
                self.retry_at = None;
                self.retry_delay = Duration::from_millis(200);
                Ok(())
            }
            None if !retrying => Err(DeliveryError::Waiting(Waiting::NotDue)),
            other => {
                self.retry_at = Some(now.saturating_add(began.elapsed()).saturating_add(self.retry_delay));
                self.retry_delay = (self.retry_delay * 2).min(MAX_RETRY_DELAY);
                Err(DeliveryError::Waiting(other.unwrap_or(Waiting::RoundsRanOut)))
            }
        }
    }

    /// A handle on the backlog for other tasks.
    pub fn backlog(&self) -> Backlog {
        self.backlog_view.clone()
    }

    fn update_gauges(&self) {
        self.backlog_view.set(self.backlog.len() as u64, self.backlog_bytes());
        metrics::gauge!(m::BACKLOG_OBJECTS, m::ARCHIVER => self.consumer.clone()).set(self.backlog.len() as f64);
        metrics::gauge!(m::BACKLOG_BYTES, m::ARCHIVER => self.consumer.clone()).set(self.backlog_bytes() as f64);
    }

    fn remember(&mut self, key: Arc<str>) {
        if self.written.insert(key.clone()) {
            self.written_order.push_back(key);
            if self.written_order.len() > REMEMBERED_KEYS
                && let Some(old) = self.written_order.pop_front()
            {
                self.written.remove(&old);
            }
        }
    }

    async fn put(&self, p: Pending) -> (Pending, PutResult) {
        let outcome = self.put_one(&p).await;
        (p, outcome)
    }

    async fn put_one(&self, p: &Pending) -> PutResult {
        let Some(key) = p.key.as_deref() else {
            return PutResult::Failed(SinkError::InvalidKey { key: String::new(), reason: "no key chosen" });
        };
        let options = PutOptions {
            content_type: Some(match p.sealed.compression {
                Compression::Gzip => "application/gzip".into(),
                Compression::Uncompressed => "application/x-ndjson".into(),
                Compression::Zip => "application/zip".into(),
                Compression::Snappy => "application/x-snappy-framed".into(),
                Compression::HadoopSnappy => "application/octet-stream".into(),
                Compression::Parquet => "application/vnd.apache.parquet".into(),
            }),
            content_encoding: None,
            metadata: vec![("weir-records".into(), p.sealed.records().to_string())],
        };
        match self.sink.put_if_absent(key, p.sealed.body.clone(), &options).await {
            Ok(PutOutcome::Created) => PutResult::Durable,
            // Our own earlier attempt (its answer lost), or a claim by a new owner.
            Ok(PutOutcome::AlreadyExists) => {
                match is_claim(self.sink.as_ref(), key, self.claims.of_route(&p.sealed.key)).await {
                    Ok(true) => PutResult::Claimed,
                    Ok(false) => PutResult::Durable,
                    Err(e) => PutResult::Failed(e),
                }
            }
            Err(e) => PutResult::Failed(e),
        }
    }
}

/// How one object's put ended.
enum PutResult {
    /// The object is there (put now, or found its own at the key).
    Durable,
    /// A new owner claimed the key first.
    Claimed,
    /// The store failed: retried under the same key.
    Failed(SinkError),
}

fn settle(ledger: &mut Ledger, sealed: &Sealed) {
    for (shard, _) in sealed.spans() {
        ledger.settle(shard, sealed.generation);
    }
}

/// Objects made durable in one round, for the metrics.
#[derive(Default)]
struct Durable {
    /// (objects, records) of the data route and of the error route.
    data: (u64, u64),
    error: (u64, u64),
    bytes: u64,
}

impl Durable {
    fn add(&mut self, sealed: &Sealed) {
        let route = if sealed.key.is_data() { &mut self.data } else { &mut self.error };
        route.0 += 1;
        route.1 += sealed.records();
        self.bytes += sealed.body.len() as u64;
    }

    fn count(&self, archiver: &str) {
        for (label, (objects, records)) in [("data", self.data), ("error", self.error)] {
            if objects > 0 {
                let name = archiver.to_owned();
                metrics::counter!(m::OBJECTS, "route" => label, m::ARCHIVER => name.clone()).increment(objects);
                metrics::counter!(m::RECORDS_ARCHIVED, "route" => label, m::ARCHIVER => name).increment(records);
            }
        }
        if self.bytes > 0 {
            metrics::counter!(m::OBJECT_BYTES, m::ARCHIVER => archiver.to_owned()).increment(self.bytes);
        }
    }
}
