//! Crash simulation for consumers that write intents and objects: a step budget shared
//! by a sink and an acknowledgement/intent channel. Every operation spends one step;
//! when the budget runs out the "process" is dead: every later operation fails, and
//! the operation at the crash point may or may not have taken effect (for puts:
//! `apply_at_crash`). A test then builds a new consumer (the next owner) on the same
//! store and the same simulated leases.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use bytes::Bytes;
use weir_core::ports::{ObjectMeta, ObjectSink, PutOptions, PutOutcome, SinkError};
use weir_core::{
    Acks, Checkpoint, ExtendedSequenceNumber, Intent, IntentError, IntentLog, IntentWrite, ShardContext, ShardId,
    WorkerId,
};

/// A shared step budget; negative means unlimited.
#[derive(Debug, Clone)]
pub struct CrashSwitch {
    steps: Arc<AtomicI64>,
    met: Arc<AtomicBool>,
}

impl CrashSwitch {
    /// Dies after `steps` operations (`None`: never).
    pub fn after(steps: Option<u64>) -> Self {
        Self { steps: Arc::new(AtomicI64::new(steps.map_or(-1, |s| s as i64))), met: Arc::new(AtomicBool::new(false)) }
    }

    /// Spends a step: `true` while alive.
    pub fn step(&self) -> bool {
        loop {
            let cur = self.steps.load(Ordering::SeqCst);
            if cur < 0 {
                return true;
            }
            if cur == 0 {
                return false;
            }
            if self.steps.compare_exchange(cur, cur - 1, Ordering::SeqCst, Ordering::SeqCst).is_ok() {
                return true;
            }
        }
    }

    /// Whether the budget is spent.
    pub fn dead(&self) -> bool {
        self.steps.load(Ordering::SeqCst) == 0
    }
}

/// A sink that dies with its [`CrashSwitch`]. With `apply_at_crash`, the put that
/// meets the crash is written but reported failed (the answer was lost).
pub struct CrashingSink {
    inner: Arc<dyn ObjectSink>,
    switch: CrashSwitch,
    apply_at_crash: bool,
}

impl CrashingSink {
    /// Wraps `inner`.
    pub fn new(inner: Arc<dyn ObjectSink>, switch: CrashSwitch, apply_at_crash: bool) -> Self {
        Self { inner, switch, apply_at_crash }
    }
}

fn dead() -> SinkError {
    SinkError::Store { message: "process crashed".into(), retryable: true, source: None }
}

#[async_trait]
impl ObjectSink for CrashingSink {
    async fn put_if_absent(&self, key: &str, body: Bytes, options: &PutOptions) -> Result<PutOutcome, SinkError> {
        if self.switch.step() {
            return self.inner.put_if_absent(key, body, options).await;
        }
        if self.apply_at_crash && !self.switch.dead_twice() {
            let _ = self.inner.put_if_absent(key, body, options).await;
        }
        Err(dead())
    }

    async fn get(&self, key: &str) -> Result<Option<Bytes>, SinkError> {
        if !self.switch.step() {
            return Err(dead());
        }
        self.inner.get(key).await
    }

    async fn stat(&self, key: &str) -> Result<Option<ObjectMeta>, SinkError> {
        if !self.switch.step() {
            return Err(dead());
        }
        self.inner.stat(key).await
    }

    async fn list(&self, prefix: &str) -> Result<Vec<ObjectMeta>, SinkError> {
        self.inner.list(prefix).await
    }

    async fn delete(&self, key: &str) -> Result<(), SinkError> {
        if !self.switch.step() {
            return Err(dead());
        }
        self.inner.delete(key).await
    }

    fn location(&self) -> String {
        self.inner.location()
    }
}

impl CrashSwitch {
    /// `false` for the first operation that meets the crash, `true` after.
    fn dead_twice(&self) -> bool {
        self.met.swap(true, Ordering::SeqCst)
    }
}

#[derive(Debug, Default, Clone)]
struct SimLease {
    owner: u64,
    checkpoint: Option<ExtendedSequenceNumber>,
    intents: Vec<Intent>,
}

/// Shard leases as the runtime keeps them for one consumer: an owner generation, the
/// checkpoint (advanced at once by acknowledgements of the owner) and open intents.
#[derive(Debug, Default)]
pub struct SimLeases {
    leases: Mutex<BTreeMap<ShardId, SimLease>>,
    peak: Mutex<(usize, usize)>,
}

impl SimLeases {
    /// No leases.
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// Gives `shard` to `owner` (any earlier owner becomes a zombie) and returns what
    /// the consumer's `on_shard_open` receives.
    pub fn take(&self, shard: &ShardId, owner: u64) -> ShardContext {
        let mut leases = self.leases.lock().unwrap_or_else(|p| p.into_inner());
        let l = leases.entry(shard.clone()).or_default();
        l.owner = owner;
        ShardContext {
            shard_id: shard.clone(),
            worker_id: WorkerId::new(format!("w{owner}")),
            checkpoint: l.checkpoint.clone().map_or(Checkpoint::TrimHorizon, Checkpoint::At),
            parents: Vec::new(),
            intents: l.intents.clone(),
        }
    }

    /// The checkpoint of `shard`.
    pub fn checkpoint(&self, shard: &ShardId) -> Option<ExtendedSequenceNumber> {
        self.leases.lock().unwrap_or_else(|p| p.into_inner()).get(shard).and_then(|l| l.checkpoint.clone())
    }

    /// The most open intents any lease held at once, and the most bytes they took as
    /// JSON (what a lease item would carry).
    pub fn peak_intents(&self) -> (usize, usize) {
        let p = self.peak.lock().unwrap_or_else(|p| p.into_inner());
        *p
    }

    /// Open intents of `shard`.
    pub fn intents(&self, shard: &ShardId) -> Vec<Intent> {
        self.leases.lock().unwrap_or_else(|p| p.into_inner()).get(shard).map(|l| l.intents.clone()).unwrap_or_default()
    }
}

/// One owner's acknowledgement and intent channel.
pub struct SimAcks {
    leases: Arc<SimLeases>,
    owner: u64,
    switch: CrashSwitch,
    lease_writes: std::sync::atomic::AtomicU64,
    passed: Mutex<Vec<(ShardId, Vec<Intent>)>>,
}

impl SimAcks {
    /// The channel of `owner`, dying with `switch`.
    pub fn new(leases: Arc<SimLeases>, owner: u64, switch: CrashSwitch) -> Self {
        Self { leases, owner, switch, lease_writes: Default::default(), passed: Mutex::new(Vec::new()) }
    }

    /// Intents that checkpoints passed since the last call, per shard, as the runtime
    /// reports them to `Consumer::on_intents_passed` after a checkpoint write.
    pub fn take_passed(&self) -> Vec<(ShardId, Vec<Intent>)> {
        std::mem::take(&mut *self.passed.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

impl SimAcks {
    /// Lease items written by intent calls (one per distinct shard per call, as a
    /// lease table would write them).
    pub fn intent_lease_writes(&self) -> u64 {
        self.lease_writes.load(Ordering::SeqCst)
    }
}

impl Acks for SimAcks {
    fn durable(&self, shard: &ShardId, position: &ExtendedSequenceNumber) {
        if !self.switch.step() {
            return;
        }
        let mut leases = self.leases.leases.lock().unwrap_or_else(|p| p.into_inner());
        let Some(l) = leases.get_mut(shard) else { return };
        if l.owner != self.owner || l.checkpoint.as_ref().is_some_and(|c| c >= position) {
            return;
        }
        l.checkpoint = Some(position.clone());
        let cp = Checkpoint::At(position.clone());
        let (gone, kept): (Vec<Intent>, Vec<Intent>) = l.intents.drain(..).partition(|i| i.passed_by(&cp));
        l.intents = kept;
        if !gone.is_empty() {
            self.passed.lock().unwrap_or_else(|p| p.into_inner()).push((shard.clone(), gone));
        }
    }

    fn intents(&self) -> Option<&dyn IntentLog> {
        Some(self)
    }
}

#[async_trait]
impl IntentLog for SimAcks {
    async fn record(&self, writes: Vec<IntentWrite>) -> Result<(), IntentError> {
        if !self.switch.step() {
            return Err(IntentError::Store("process crashed".into()));
        }
        let mut leases = self.leases.leases.lock().unwrap_or_else(|p| p.into_inner());
        let mut lost: Vec<ShardId> = writes
            .iter()
            .filter(|w| leases.get(&w.shard).is_none_or(|l| l.owner != self.owner))
            .map(|w| w.shard.clone())
            .collect();
        if !lost.is_empty() {
            lost.sort();
            lost.dedup();
            return Err(IntentError::NotHeld(lost));
        }
        let distinct: std::collections::BTreeSet<ShardId> = writes.iter().map(|w| w.shard.clone()).collect();
        self.lease_writes.fetch_add(distinct.len() as u64, Ordering::SeqCst);
        for w in writes {
            if let Some(l) = leases.get_mut(&w.shard) {
                l.intents.retain(|i| !w.replacing.contains(&i.target));
                l.intents.extend(w.add);
            }
        }
        let mut peak = self.leases.peak.lock().unwrap_or_else(|p| p.into_inner());
        for s in distinct {
            if let Some(l) = leases.get(&s) {
                let bytes = serde_json::to_vec(&l.intents).map_or(0, |v| v.len());
                *peak = (peak.0.max(l.intents.len()), peak.1.max(bytes));
            }
        }
        Ok(())
    }
}
