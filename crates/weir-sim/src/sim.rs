//! Running one scenario: on a thread of its own whose randomness the seed decides, on a
//! single-threaded tokio runtime with paused time (it jumps ahead whenever every task
//! waits), so a simulated hour takes seconds and every run of a seed is the same run.
//!
//! The timeline: records are written over the load window while the planned faults
//! happen; when the faults stop, crashed workers restart, paused ones resume, outages
//! end and fault rates drop to zero; then every record must be archived and
//! checkpointed by every archiver within the scenario's liveness bound. Then every
//! worker is stopped gracefully and the archive is checked: every part exactly once.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use weir_core::ports::{LeaseTable, StreamCatalog};
use weir_core::{Checkpoint, ExtendedSequenceNumber, LeaseChange, LeaseMutation, WorkerId};
use weir_local::{MemoryStream, StreamOptions};
use weir_runtime::TokioClock;

use crate::faults::Port;
use crate::gate::Life;
use crate::node::{self, Node};
use crate::records;
use crate::scenario::{Event, Scenario};
use crate::truth::Counts;
use crate::world::World;

/// The simulated wall clock starts here (2025-11-29T07:06:40Z).
pub const T0_MILLIS: i64 = 1_764_400_000_000;

/// What a simulation found.
#[derive(Debug, Clone)]
pub struct Report {
    /// The scenario, in one line.
    pub summary: String,
    /// The seed.
    pub seed: u64,
    /// Simulated time the run took.
    pub simulated: Duration,
    /// Invariants broken (empty: none).
    pub violations: Vec<String>,
    /// A hash of the whole trace: two runs of a seed must give the same.
    pub trace_hash: u64,
    /// Lines in the trace.
    pub trace_lines: u64,
    /// The trace's last lines.
    pub tail: Vec<String>,
    /// Counts.
    pub counts: Counts,
    /// Intent manifests left in the store at the end.
    pub manifests_left: usize,
}

impl Report {
    /// Whether every invariant held.
    pub fn passed(&self) -> bool {
        self.violations.is_empty()
    }
}

/// Runs `scenario` to the end on a thread of its own.
pub fn run(scenario: Scenario) -> Report {
    let seed = scenario.seed;
    let summary = scenario.summary();
    let ran = std::thread::Builder::new().name(format!("sim-{seed}")).stack_size(32 << 20).spawn(move || {
        let _seeded = crate::entropy::seed_this_thread(seed);
        let _log = std::env::var("WEIR_SIM_LOG").ok().map(|filter| {
            let subscriber = tracing_subscriber::fmt()
                .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
                .with_writer(std::io::stderr)
                .without_time()
                .finish();
            tracing::subscriber::set_default(subscriber)
        });
        let rt = tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build();
        stall();
        match rt {
            // `Sim::new` inside the runtime: outside it tokio's `Instant::now()` is the
            // wall clock, and the world's and the clock's origins taken there moved the
            // whole trace by however long the machine took to get from here to there.
            Ok(rt) => rt.block_on(async move { Sim::new(scenario).run().await }),
            Err(e) => failed(seed, &summary, format!("no runtime: {e}")),
        }
    });
    let summary = format!("seed {seed}");
    match ran.map(|h| h.join()) {
        Ok(Ok(report)) => report,
        Ok(Err(panic)) => {
            let msg = panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            failed(seed, &summary, format!("the simulation panicked: {msg}"))
        }
        Err(e) => failed(seed, &summary, format!("no thread: {e}")),
    }
}

/// `WEIR_SIM_STALL_MS`: the simulation's thread stops this long (wall clock) between
/// building the runtime and running the simulation, as on a loaded machine; a seed's
/// run must not change (`tests/determinism.rs`).
fn stall() {
    if let Some(ms) = std::env::var("WEIR_SIM_STALL_MS").ok().and_then(|v| v.parse().ok()) {
        std::thread::sleep(Duration::from_millis(ms));
    }
}

fn failed(seed: u64, summary: &str, why: String) -> Report {
    Report {
        summary: summary.to_owned(),
        seed,
        simulated: Duration::ZERO,
        violations: vec![why],
        trace_hash: 0,
        trace_lines: 0,
        tail: Vec::new(),
        counts: Counts::default(),
        manifests_left: 0,
    }
}

struct Sim {
    scenario: Scenario,
    world: Arc<World>,
    clock: TokioClock,
    nodes: Vec<Node>,
    spill: tempfile::TempDir,
}

impl Sim {
    fn new(scenario: Scenario) -> Self {
        let clock = TokioClock::starting_at(weir_core::Timestamp::from_millis(T0_MILLIS));
        let stream = MemoryStream::new(
            StreamOptions {
                shards: scenario.shards,
                max_batch: 100,
                subscription_lifetime: Some(Duration::from_secs(300)),
            },
            Arc::new(clock.clone()),
        );
        let consumers = scenario.archivers.iter().map(|a| a.name.clone()).collect();
        let world = World::new(stream, scenario.seed, consumers);
        if scenario.list_denied {
            world.store().deny_list();
        }
        // A panic here is reported as the seed's failure by `run`.
        let spill = tempfile::Builder::new()
            .prefix("weir-sim-")
            .tempdir()
            .unwrap_or_else(|e| panic!("no temporary directory for spills: {e}"));
        Self { scenario, world, clock, nodes: Vec::new(), spill }
    }

    async fn run(mut self) -> Report {
        let started = tokio::time::Instant::now();
        self.world.set_rates(self.scenario.rates.clone());
        self.world.note(format_args!("{}", self.scenario.summary()));
        let producer = tokio::spawn(produce(self.world.clone(), self.scenario.clone()));
        for _ in 0..self.scenario.workers {
            self.start(None);
        }
        for (at, event) in self.scenario.events.clone() {
            tokio::time::sleep_until(started + at).await;
            self.apply(event).await;
        }
        tokio::time::sleep_until(started + self.scenario.faults_end).await;
        self.heal();
        if producer.await.is_err() {
            self.world.violate("the record producer failed".into());
        }
        let healed = tokio::time::Instant::now();
        let bound = self.scenario.liveness_bound();
        loop {
            let behind = self.behind().await;
            if behind.is_empty() {
                break;
            }
            if healed.elapsed() > bound {
                self.world.violate(format!(
                    "no progress: {} after the faults stopped, {} shard(s) still behind: {}",
                    humanize(bound),
                    behind.len(),
                    behind.into_iter().take(4).collect::<Vec<_>>().join("; ")
                ));
                break;
            }
            tokio::time::sleep(Duration::from_secs(5)).await;
        }
        self.stop_all().await;
        let at = self.world.now_ms();
        self.world.truth().check_exactly_once(at);
        let manifests_left = self.world.store().snapshot().keys().filter(|k| k.starts_with("_weir/intents/")).count();
        let simulated = started.elapsed();
        let trace = self.world.trace();
        let truth = self.world.truth();
        Report {
            summary: self.scenario.summary(),
            seed: self.scenario.seed,
            simulated,
            violations: truth.violations().to_vec(),
            trace_hash: trace.hash(),
            trace_lines: trace.count(),
            tail: trace.tail(),
            counts: truth.counts.clone(),
            manifests_left,
        }
    }

    /// Starts worker `index` again, or a new worker.
    fn start(&mut self, index: Option<usize>) {
        let (worker, incarnation) = match index {
            Some(i) => (self.nodes[i].worker.clone(), self.nodes[i].incarnation + 1),
            None => (WorkerId::new(format!("w{}", self.nodes.len())), 1),
        };
        let node = node::start(
            &self.world,
            worker,
            incarnation,
            &self.scenario.archivers,
            self.scenario.shape,
            &self.clock,
            self.spill.path(),
        );
        match (node, index) {
            (Ok(node), Some(i)) => self.nodes[i] = node,
            (Ok(node), None) => self.nodes.push(node),
            (Err(e), _) => self.world.violate(format!("a worker cannot be built: {e:#}")),
        }
    }

    async fn apply(&mut self, event: Event) {
        self.world.note(format_args!("event {event:?}"));
        let n = self.nodes.len().max(1);
        match event {
            Event::Crash(i) => {
                if let Some(node) = self.nodes.get(i % n) {
                    node.gate.crash();
                }
            }
            Event::CrashAtCall(i, calls) => {
                if let Some(node) = self.nodes.get(i % n) {
                    node.gate.crash_at_call(calls);
                }
            }
            Event::Restart(i) => {
                if self.nodes.get(i % n).is_some_and(|node| node.gate.life() == Life::Crashed) {
                    self.start(Some(i % n));
                }
            }
            Event::Pause(i) => {
                if let Some(node) = self.nodes.get(i % n) {
                    node.gate.pause(true);
                }
            }
            Event::Resume(i) => {
                if let Some(node) = self.nodes.get(i % n) {
                    node.gate.pause(false);
                }
            }
            Event::Stop(i) => {
                // Never the last running worker: someone must do the work.
                let alive = self.nodes.iter().filter(|node| running(node)).count();
                if let Some(node) = self.nodes.get_mut(i % n)
                    && running(node)
                    && alive > 1
                {
                    node.stop.cancel();
                    node.stopped = true;
                }
            }
            Event::Start => self.start(None),
            Event::Release(k) => self.release(k).await,
            Event::Split(k) => {
                let open = self.world.stream.open_shards();
                if !open.is_empty() {
                    let shard = &open[k % open.len()];
                    self.world.note(format_args!("split {shard}: {:?}", self.world.stream.split(shard)));
                }
            }
            Event::Merge(k) => self.merge(k).await,
            Event::Outage(port, out) => self.world.set_outage(port, out),
            Event::LambdaFailing(p) => self.world.set_failing_records(p),
        }
    }

    /// `weir leases release` on the `k`-th held lease.
    async fn release(&self, k: usize) {
        let Ok(leases) = self.world.table().list().await else { return };
        let held: Vec<_> = leases.iter().filter(|l| l.owner.is_some() && !l.ended && l.handoff_to.is_none()).collect();
        if held.is_empty() {
            return;
        }
        let lease = held[k % held.len()];
        let to = WorkerId::new(weir_core::lease::RELEASE_REQUEST);
        let r = self.world.mutate(&LeaseMutation::on(lease, LeaseChange::RequestHandoff { to })).await;
        self.world.note(format_args!("operator releases {}: {}", lease.key, r.is_ok()));
    }

    /// Merges the `k`-th pair of adjacent open shards.
    async fn merge(&self, k: usize) {
        let Ok(mut shards) = self.world.stream.list_shards().await else { return };
        shards.retain(|s| !s.closed);
        shards.sort_by_key(|s| s.hash_range.start);
        let pairs: Vec<_> = shards.windows(2).map(|w| (w[0].id.clone(), w[1].id.clone())).collect();
        if pairs.is_empty() {
            return;
        }
        let (a, b) = &pairs[k % pairs.len()];
        self.world.note(format_args!("merge {a} {b}: {:?}", self.world.stream.merge(a, b)));
    }

    /// The faults stop: no more fault rates, outages or failing records; paused
    /// workers resume, crashed ones restart, and at least one worker runs.
    fn heal(&mut self) {
        self.world.note(format_args!("the faults stop"));
        self.world.set_rates(BTreeMap::new());
        for port in [Port::Table, Port::Store, Port::Stream, Port::Lambda] {
            if self.world.is_out(port) {
                self.world.set_outage(port, false);
            }
        }
        self.world.set_failing_records(0.0);
        for i in 0..self.nodes.len() {
            self.nodes[i].gate.spare();
            match self.nodes[i].gate.life() {
                Life::Paused => self.nodes[i].gate.pause(false),
                Life::Crashed => self.start(Some(i)),
                Life::Running => {}
            }
        }
        if !self.nodes.iter().any(running) {
            self.start(None);
        }
    }

    /// For each shard whose records some archiver has not checkpointed: what is missing.
    async fn behind(&self) -> Vec<String> {
        let ends = self.world.truth().ends();
        let Ok(leases) = self.world.table().list().await else { return vec!["cannot list leases".into()] };
        let by_key: BTreeMap<_, _> = leases.iter().map(|l| (l.key.clone(), l)).collect();
        let mut behind = Vec::new();
        for (shard, last) in ends {
            for a in &self.scenario.archivers {
                let consumer = weir_core::ConsumerName::new(a.name.as_str());
                let cp = by_key.get(&shard).map(|l| l.checkpoint_for(&consumer).clone());
                let done = match &cp {
                    Some(Checkpoint::ShardEnd) => true,
                    Some(Checkpoint::At(p)) => *p >= last,
                    _ => false,
                };
                if !done {
                    let owner = by_key.get(&shard).and_then(|l| l.owner.clone());
                    behind.push(format!("{shard} {} at {cp:?} of {last} (owner {owner:?})", a.name));
                }
            }
        }
        behind
    }

    /// Stops every running worker gracefully and waits for it.
    async fn stop_all(&mut self) {
        for node in &self.nodes {
            node.stop.cancel();
        }
        let limit = node::runtime_config(&WorkerId::new("w")).shutdown_timeout + Duration::from_secs(60);
        for node in &mut self.nodes {
            let Some(task) = node.task.take() else { continue };
            if node.gate.life() == Life::Crashed {
                task.abort();
                continue;
            }
            if tokio::time::timeout(limit, task).await.is_err() {
                let name = node.gate.name().to_owned();
                self.world.violate(format!("{name} did not stop within {} of SIGTERM", humanize(limit)));
                node.gate.crash();
            }
        }
    }
}

fn running(node: &Node) -> bool {
    !node.stopped && node.gate.life() != Life::Crashed
}

fn humanize(d: Duration) -> String {
    format!("{}s", d.as_secs())
}

/// Writes the scenario's records over its load window.
async fn produce(world: Arc<World>, s: Scenario) {
    let mut rng = StdRng::seed_from_u64(s.seed ^ 0x9e37_79b9);
    let gap = s.load.as_millis() as u64 / s.records.max(1);
    for n in 0..s.records {
        tokio::time::sleep(Duration::from_millis(rng.random_range(0..=2 * gap))).await;
        let made = records::make(&mut rng, n, s.shape, s.tenants, s.oddities);
        let (shard, seq) = world.stream.put(&made.partition_key, made.data);
        world.truth().written(shard, ExtendedSequenceNumber::plain(seq), n, made.parts);
    }
    world.note(format_args!("all {} records written", s.records));
}
