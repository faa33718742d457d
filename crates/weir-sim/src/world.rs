//! The world every simulated process shares: one stream, one lease table (with
//! DynamoDB's size limits), one object store, the truth the invariants are checked
//! against, the seeded generator every fault is drawn from, and the trace.
//!
//! Effects happen here, in one place, so that the invariants see each one as it takes
//! effect: a checkpoint is checked against the objects stored at that moment.

use std::collections::{BTreeMap, BTreeSet};
use std::hash::{DefaultHasher, Hasher};
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;
use rand::SeedableRng;
use rand::rngs::StdRng;
use weir_core::ports::{
    LeaseTable, MAX_LEASE_ITEM_BYTES, ObjectSink, PutOptions, PutOutcome, SinkError, lease_item_bytes,
};
use weir_core::{Lease, LeaseChange, LeaseError, LeaseMutation};
use weir_local::MemoryStream;
use weir_testkit::{MemoryLeaseTable, MemoryObjectSink};

use crate::faults::{Port, Rates};
use crate::truth::Truth;

/// Lines of trace kept for a failure's report.
const TRACE_TAIL: usize = 400;

/// Whether `WEIR_SIM_FULL_TRACE` asks for every line of the trace in the report.
fn full_trace() -> bool {
    static FULL: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *FULL.get_or_init(|| std::env::var_os("WEIR_SIM_FULL_TRACE").is_some())
}

/// What happened, in order: a hash of every line (equal hashes, equal runs) and the
/// last lines.
#[derive(Debug, Default)]
pub struct Trace {
    hash: DefaultHasher,
    lines: std::collections::VecDeque<String>,
    count: u64,
}

impl Trace {
    fn push(&mut self, line: String) {
        self.hash.write(line.as_bytes());
        self.count += 1;
        if self.lines.len() == TRACE_TAIL && !full_trace() {
            self.lines.pop_front();
        }
        self.lines.push_back(line);
    }

    /// A hash of every line so far.
    pub fn hash(&self) -> u64 {
        self.hash.finish()
    }

    /// Lines so far.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// The last lines.
    pub fn tail(&self) -> Vec<String> {
        self.lines.iter().cloned().collect()
    }
}

/// The shared world.
pub struct World {
    /// The stream.
    pub stream: MemoryStream,
    table: MemoryLeaseTable,
    store: MemoryObjectSink,
    started: tokio::time::Instant,
    rates: Mutex<BTreeMap<Port, Rates>>,
    outages: Mutex<BTreeSet<Port>>,
    /// Chance that the Lambda fails one record of an invocation (`ProcessingFailed`).
    failing_records: Mutex<f64>,
    rng: Mutex<StdRng>,
    trace: Mutex<Trace>,
    truth: Mutex<Truth>,
}

impl std::fmt::Debug for World {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("World").finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl World {
    /// A world over `stream`, faults drawn from `seed`, archivers named `consumers`.
    pub fn new(stream: MemoryStream, seed: u64, consumers: Vec<String>) -> Arc<Self> {
        Arc::new(Self {
            stream,
            table: MemoryLeaseTable::with_dynamodb_limits(),
            store: MemoryObjectSink::new(),
            started: tokio::time::Instant::now(),
            rates: Mutex::new(BTreeMap::new()),
            outages: Mutex::new(BTreeSet::new()),
            failing_records: Mutex::new(0.0),
            rng: Mutex::new(StdRng::seed_from_u64(seed ^ 0xfa17)),
            trace: Mutex::new(Trace::default()),
            truth: Mutex::new(Truth::new(consumers)),
        })
    }

    /// Simulated milliseconds since the start.
    pub fn now_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    /// Adds a line to the trace.
    pub fn note(&self, what: std::fmt::Arguments<'_>) {
        let line = format!("{:>9} {what}", self.now_ms());
        lock(&self.trace).push(line);
    }

    /// The trace.
    pub fn trace(&self) -> MutexGuard<'_, Trace> {
        lock(&self.trace)
    }

    /// The truth.
    pub fn truth(&self) -> MutexGuard<'_, Truth> {
        lock(&self.truth)
    }

    /// Records a violation now.
    pub fn violate(&self, what: String) {
        self.note(format_args!("VIOLATION {what}"));
        let at = self.now_ms();
        self.truth().violate(at, what);
    }

    /// The generator faults are drawn from.
    pub fn rng(&self) -> MutexGuard<'_, StdRng> {
        lock(&self.rng)
    }

    /// The fault rates of a port.
    pub fn rates(&self, port: Port) -> Rates {
        lock(&self.rates).get(&port).copied().unwrap_or_default()
    }

    /// Sets every port's fault rates (all zero when the faults stop).
    pub fn set_rates(&self, rates: BTreeMap<Port, Rates>) {
        *lock(&self.rates) = rates;
    }

    /// Whether every call to `port` fails now.
    pub fn is_out(&self, port: Port) -> bool {
        lock(&self.outages).contains(&port)
    }

    /// Starts or ends an outage of `port`.
    pub fn set_outage(&self, port: Port, out: bool) {
        self.note(format_args!("outage of {port:?}: {out}"));
        let mut o = lock(&self.outages);
        if out {
            o.insert(port);
        } else {
            o.remove(&port);
        }
    }

    /// The chance that the Lambda fails a record.
    pub fn failing_records(&self) -> f64 {
        *lock(&self.failing_records)
    }

    /// Sets the chance that the Lambda fails a record.
    pub fn set_failing_records(&self, p: f64) {
        *lock(&self.failing_records) = p;
    }

    /// The lease table, without faults (the simulation's own reads and the operator's
    /// writes).
    pub fn table(&self) -> &MemoryLeaseTable {
        &self.table
    }

    /// The object store, without faults.
    pub fn store(&self) -> &MemoryObjectSink {
        &self.store
    }

    /// Applies a lease write and checks it: sizes, and the checkpoints it stores.
    pub async fn mutate(&self, m: &LeaseMutation) -> Result<Lease, LeaseError> {
        let r = self.table.mutate(m).await;
        self.written(std::slice::from_ref(m), r.as_ref().map(std::slice::from_ref));
        r
    }

    /// Applies a lease transaction and checks it.
    pub async fn mutate_all(&self, ms: &[LeaseMutation]) -> Result<Vec<Lease>, LeaseError> {
        let r = self.table.mutate_all(ms).await;
        self.written(ms, r.as_ref().map(Vec::as_slice));
        r
    }

    fn written(&self, ms: &[LeaseMutation], r: Result<&[Lease], &LeaseError>) {
        let stored = match r {
            Ok(stored) => stored,
            Err(e) => {
                if e.to_string().contains("ValidationException") {
                    self.violate(format!("a lease write DynamoDB would refuse: {e}"));
                }
                return;
            }
        };
        let sizes: Vec<usize> = stored.iter().map(lease_item_bytes).collect();
        let largest = sizes.iter().copied().max().unwrap_or(0);
        if largest > MAX_LEASE_ITEM_BYTES / 2 {
            self.note(format_args!("a lease item of {largest} bytes"));
        }
        let at = self.now_ms();
        let mut truth = self.truth();
        truth.wrote(largest, sizes.iter().sum());
        for (m, lease) in ms.iter().zip(stored) {
            if let LeaseChange::Checkpoint { checkpoints, .. } = &m.change {
                for (consumer, cp) in checkpoints {
                    truth.checkpointed(at, &lease.key, consumer.as_str(), cp);
                }
            }
        }
    }

    /// Applies a create-only put; a created object is read into the truth.
    pub async fn put(&self, key: &str, body: Bytes, options: &PutOptions) -> Result<PutOutcome, SinkError> {
        let r = self.store.put_if_absent(key, body.clone(), options).await;
        if let Ok(PutOutcome::Created) = r {
            let at = self.now_ms();
            let found = self.truth().put(at, key, &body);
            for what in found {
                self.note(format_args!("VIOLATION {what}"));
            }
        }
        r
    }

    /// Deletes an object (only manifests may go).
    pub async fn delete(&self, key: &str) -> Result<(), SinkError> {
        let at = self.now_ms();
        self.truth().deleted(at, key);
        self.store.delete(key).await
    }
}
