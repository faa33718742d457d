//! One application's fleet: real `weir_runtime::Worker`s over its namespace of the
//! costed table and its stream, started, stopped gracefully, restarted and crashed.
//!
//! A worker's lifecycle in the simulator ([`SlotState`]):
//! ```text
//! Running ─stop─▶ Stopping ─run() returned─▶ Stopped ─(restart)─▶ Running
//! Running ─crash (task aborted: nothing released, record left behind)─▶ Crashed
//! ```

use std::collections::HashSet;
use std::sync::Arc;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use weir_core::ports::StreamCatalog;
use weir_core::{Consumer, ShardId, WorkerId};
use weir_runtime::{RuntimeConfig, TokioClock, Worker, WorkerStats};

use crate::consumer::AckingConsumer;
use crate::costed_table::CostedLeaseTable;
use crate::stream::SyntheticStream;

/// Where a simulated worker is in its lifecycle (see the module documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlotState {
    /// Its worker runs.
    Running,
    /// Asked to stop; draining. Started again once stopped when `restart`.
    Stopping {
        /// Start a new incarnation once this one stopped.
        restart: bool,
    },
    /// Stopped gracefully.
    Stopped,
    /// Killed without a chance to release anything.
    Crashed,
}

struct Slot {
    id: WorkerId,
    state: SlotState,
    stop: CancellationToken,
    task: Option<JoinHandle<()>>,
    stats: WorkerStats,
}

/// What the fleet holds at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ownership {
    /// Shards to be processed (open, or closed but not ended) that no running worker holds.
    pub unowned: Vec<ShardId>,
    /// Fewest leases a running worker holds.
    pub min_held: usize,
    /// Most leases a running worker holds.
    pub max_held: usize,
}

impl Ownership {
    /// Every shard held, and no running worker more than one lease from another.
    pub fn balanced(&self) -> bool {
        self.unowned.is_empty() && self.max_held <= self.min_held + 1
    }
}

/// One application. See the module documentation.
pub struct App {
    name: String,
    table: Arc<CostedLeaseTable>,
    stream: SyntheticStream,
    clock: TokioClock,
    slots: Vec<Slot>,
}

impl App {
    /// An application named `name` with no workers yet.
    pub fn new(name: &str, table: Arc<CostedLeaseTable>, stream: SyntheticStream, clock: TokioClock) -> Self {
        Self { name: name.to_owned(), table, stream, clock, slots: Vec::new() }
    }

    /// Its namespace of the table.
    pub fn table(&self) -> &Arc<CostedLeaseTable> {
        &self.table
    }

    /// Its stream.
    pub fn stream(&self) -> &SyntheticStream {
        &self.stream
    }

    /// Workers ever added (running or not).
    pub fn slots(&self) -> usize {
        self.slots.len()
    }

    /// The state of worker `i`.
    pub fn state(&self, i: usize) -> SlotState {
        self.slots[i].state
    }

    /// Workers running now.
    pub fn running(&self) -> usize {
        self.slots.iter().filter(|s| s.state == SlotState::Running).count()
    }

    /// Adds a worker and starts it; returns its index.
    pub fn add_worker(&mut self) -> anyhow::Result<usize> {
        let id = WorkerId::new(format!("{}-w{:04}", self.name, self.slots.len()));
        self.slots.push(Slot {
            id,
            state: SlotState::Stopped,
            stop: CancellationToken::new(),
            task: None,
            stats: WorkerStats::default(),
        });
        let i = self.slots.len() - 1;
        self.start(i)?;
        Ok(i)
    }

    /// Starts a new incarnation of worker `i` (same worker id).
    fn start(&mut self, i: usize) -> anyhow::Result<()> {
        let slot = &mut self.slots[i];
        let consumers: Vec<Box<dyn Consumer>> = vec![Box::new(AckingConsumer)];
        let stream = Arc::new(self.stream.clone());
        let worker = Worker::new(
            RuntimeConfig::new(slot.id.clone()),
            self.table.clone(),
            stream.clone(),
            stream,
            consumers,
            Arc::new(self.clock.clone()),
        )?;
        slot.stats = worker.stats();
        slot.stop = CancellationToken::new();
        let stop = slot.stop.clone();
        slot.task = Some(tokio::spawn(async move {
            // A worker that fails (its id taken, the table refusing it at start) stops,
            // as its process would exit; the run's ownership numbers show it.
            let _ = worker.run(stop).await;
        }));
        slot.state = SlotState::Running;
        Ok(())
    }

    /// Asks worker `i` to stop gracefully (it drains and releases its leases); with
    /// `restart`, a new incarnation starts once it stopped ([`App::poll`]).
    pub fn stop(&mut self, i: usize, restart: bool) {
        let slot = &mut self.slots[i];
        if slot.state == SlotState::Running {
            slot.stop.cancel();
            slot.state = SlotState::Stopping { restart };
        }
    }

    /// Kills worker `i`: its task is aborted with every task it owns.
    pub fn crash(&mut self, i: usize) {
        let slot = &mut self.slots[i];
        if let Some(task) = slot.task.take() {
            task.abort();
        }
        slot.state = SlotState::Crashed;
    }

    /// Moves stopping workers whose `run` returned on: stopped, or started again.
    pub fn poll(&mut self) -> anyhow::Result<()> {
        for i in 0..self.slots.len() {
            let SlotState::Stopping { restart } = self.slots[i].state else { continue };
            if self.slots[i].task.as_ref().is_some_and(|t| !t.is_finished()) {
                continue;
            }
            self.slots[i].task = None;
            self.slots[i].state = SlotState::Stopped;
            if restart {
                self.start(i)?;
            }
        }
        Ok(())
    }

    /// Who holds what now: shards to process are the leases not ended and the open
    /// shards of the stream; held are those a running worker reports holding.
    pub async fn ownership(&self) -> Ownership {
        let mut todo: HashSet<ShardId> = self.table.active_keys().await.into_iter().collect();
        for shard in self.stream.list_shards().await.unwrap_or_default() {
            if !shard.closed {
                todo.insert(shard.id);
            }
        }
        let (mut min_held, mut max_held) = (usize::MAX, 0);
        let mut held = HashSet::new();
        for slot in self.slots.iter().filter(|s| s.state == SlotState::Running) {
            let h = slot.stats.held();
            min_held = min_held.min(h.len());
            max_held = max_held.max(h.len());
            held.extend(h);
        }
        let unowned = todo.into_iter().filter(|k| !held.contains(k)).collect();
        Ownership { unowned, min_held: if min_held == usize::MAX { 0 } else { min_held }, max_held }
    }
}
