//! The scenarios, and one run of one of them: a warm-up until the fleet is balanced
//! (not charged), then the measured time, with the scenario's events in it.
//!
//! Everything runs on one thread with paused tokio time: time moves only when every
//! task waits, so a simulated hour takes as long as the work in it. The seed decides
//! the simulator's own choices (which workers crash, the SDK's retry jitter); the
//! workers draw their instance tokens from the operating system, which changes no
//! decision of theirs.

use std::sync::Arc;
use std::time::Duration;

use rand::SeedableRng;
use rand::rngs::StdRng;
use rand::seq::index::sample;
use weir_core::Timestamp;
use weir_runtime::TokioClock;

use crate::costed_table::CostedLeaseTable;
use crate::fleet::{App, SlotState};
use crate::meter::Meter;
use crate::report::Report;
use crate::sample::Sampler;
use crate::sdk_retry::SdkRetry;
use crate::spec::{Scenario, Spec};
use crate::stream::SyntheticStream;

/// The arrival time of the simulated clock's start.
const T0: Timestamp = Timestamp::from_millis(1_800_000_000_000);

/// Runs `scenario` at `spec`'s size on a fresh single-threaded runtime with paused time.
/// Every task runs on this thread, whose runtime jitter is seeded with `spec.seed`: the
/// same spec gives the same report (except its wall time).
pub fn run(spec: &Spec, scenario: Scenario) -> anyhow::Result<Report> {
    weir_runtime::jitter::seed_this_thread(spec.seed);
    let rt = tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build()?;
    let wall = std::time::Instant::now();
    let mut report = rt.block_on(simulate(spec, scenario))?;
    report.wall = wall.elapsed();
    Ok(report)
}

async fn simulate(spec: &Spec, scenario: Scenario) -> anyhow::Result<Report> {
    let meter = Arc::new(Meter::new(spec.limits));
    let clock = TokioClock::starting_at(T0);
    let mut rng = StdRng::seed_from_u64(spec.seed);
    let app_count = if scenario == Scenario::ThreeApps { 3 } else { 1 };
    let full = (spec.workers / app_count).max(1);
    let initial = if scenario == Scenario::ScaleOutIn { (full / 2).max(1) } else { full };
    let mut apps = Vec::new();
    for a in 0..app_count {
        let name = format!("app{a}");
        let retry = SdkRetry::standard(spec.seed.wrapping_add(a as u64 + 1));
        let table = Arc::new(
            CostedLeaseTable::new("weir-leases", &name, meter.clone(), retry)
                .with_partitions(spec.lease_partitions)
                .with_worker_partitions(spec.worker_partitions),
        );
        let stream = SyntheticStream::new(&format!("{name}-"), spec.shards / app_count);
        let mut app = App::new(&name, table, stream, clock.clone());
        for _ in 0..initial {
            app.add_worker()?;
        }
        apps.push(app);
    }

    // Warm-up: the fleet starts cold and balances itself; not charged.
    let mut warmup = Sampler::default();
    let mut cold_start = None;
    for sec in 1..=spec.warmup_limit.as_secs() {
        tick(&mut apps).await?;
        if warmup.sample(sec, &apps).await {
            cold_start = Some(sec);
            break;
        }
    }
    meter.reset_totals();
    for app in &apps {
        app.table().reset_moves();
    }

    let mut sampler = Sampler::default();
    let mut deploy = Deploy::new(apps[0].slots(), spec.deploy_settle.as_secs());
    let measured = spec.measured.as_secs();
    for sec in 0..measured {
        match scenario {
            Scenario::Steady | Scenario::ThreeApps => {}
            Scenario::Crash if sec == 0 => {
                sampler.event("crash of 20%", sec);
                for app in &mut apps {
                    let n = app.slots();
                    for i in sample(&mut rng, n, n / 5) {
                        app.crash(i);
                    }
                }
            }
            Scenario::Reshard if sec == 0 => {
                sampler.event("reshard ×2", sec);
                for app in &apps {
                    app.stream().split_all();
                }
            }
            Scenario::ScaleOutIn if sec == 0 => {
                sampler.event("scale-out", sec);
                for app in &mut apps {
                    for _ in initial..full {
                        app.add_worker()?;
                    }
                }
            }
            Scenario::ScaleOutIn if sec == measured / 2 => {
                sampler.event("scale-in", sec);
                for app in &mut apps {
                    for i in initial..app.slots() {
                        app.stop(i, false);
                    }
                }
            }
            Scenario::RollingDeploy => deploy.step(sec, &mut apps[0], &mut sampler),
            _ => {}
        }
        tick(&mut apps).await?;
        sampler.sample(sec + 1, &apps).await;
    }

    let mut report = Report::new(scenario, spec, meter.totals(), &sampler, measured);
    report.cold_start = cold_start;
    report.moves = apps.iter().map(|a| a.table().moves()).sum();
    report.deploy_secs = deploy.finished;
    for app in &apps {
        report.active_shards += app.table().active_keys().await.len();
    }
    Ok(report)
}

/// Lets one second pass, then moves stopped workers on.
async fn tick(apps: &mut [App]) -> anyhow::Result<()> {
    tokio::time::sleep(Duration::from_secs(1)).await;
    for app in apps {
        app.poll()?;
    }
    Ok(())
}

/// The rolling deploy's progress: waves of a tenth of the fleet.
struct Deploy {
    waves: Vec<Vec<usize>>,
    next: usize,
    /// When the current wave was all running again.
    settled_at: Option<u64>,
    started: bool,
    /// When the last wave was running again.
    finished: Option<u64>,
    /// How long a restarted wave runs before the next one is stopped.
    settle: u64,
}

impl Deploy {
    fn new(workers: usize, settle: u64) -> Self {
        let per_wave = workers.div_ceil(10).max(1);
        let all: Vec<usize> = (0..workers).collect();
        let waves = all.chunks(per_wave).map(<[usize]>::to_vec).collect();
        Self { waves, next: 0, settled_at: None, started: false, finished: None, settle }
    }

    fn step(&mut self, sec: u64, app: &mut App, sampler: &mut Sampler) {
        if self.finished.is_some() {
            return;
        }
        if self.started {
            let wave = &self.waves[self.next - 1];
            if self.settled_at.is_none() && wave.iter().all(|i| app.state(*i) == SlotState::Running) {
                self.settled_at = Some(sec);
                if self.next == self.waves.len() {
                    self.finished = Some(sec);
                    sampler.event("deploy done", sec);
                    return;
                }
            }
            if self.settled_at.is_none_or(|t| sec < t + self.settle) {
                return;
            }
        } else {
            sampler.event("deploy start", sec);
        }
        for i in &self.waves[self.next] {
            app.stop(*i, true);
        }
        self.next += 1;
        self.started = true;
        self.settled_at = None;
    }
}
