//! A run's numbers, and the markdown table of several runs with the KCL's column.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use crate::kcl;
use crate::meter::{Limits, PartitionTotals};
use crate::prices::{monthly_cost, per_shard_hour};
use crate::sample::{EventTiming, Sampler};
use crate::spec::{Scenario, Spec};

/// What one run measured. Rates are over the measured time.
#[derive(Debug, Clone)]
pub struct Report {
    /// The scenario.
    pub scenario: Scenario,
    /// Shards at the start.
    pub shards: usize,
    /// Workers at full size.
    pub workers: usize,
    /// Leases not ended at the end.
    pub active_shards: usize,
    /// Simulated seconds measured.
    pub measured_secs: u64,
    /// The limits the run enforced or observed.
    pub limits: Limits,
    /// Totals per partition-key value.
    pub partitions: BTreeMap<String, PartitionTotals>,
    /// Sum over seconds of the workers running.
    pub worker_seconds: u64,
    /// Seconds from the cold start until balanced (`None`: not within the warm-up).
    pub cold_start: Option<u64>,
    /// The scenario's events and the recovery after each.
    pub events: Vec<EventTiming>,
    /// Shard-seconds without a running owner.
    pub unowned_shard_seconds: u64,
    /// The longest one shard went without a running owner, seconds.
    pub longest_unowned: u64,
    /// Leases that moved to another owner.
    pub moves: u64,
    /// How long the rolling deploy took (its last wave running again), seconds.
    pub deploy_secs: Option<u64>,
    /// Wall time of the whole run, warm-up included.
    pub wall: Duration,
}

impl Report {
    /// A report from a run's meter totals and samples.
    pub fn new(
        scenario: Scenario,
        spec: &Spec,
        partitions: BTreeMap<String, PartitionTotals>,
        sampler: &Sampler,
        measured_secs: u64,
    ) -> Self {
        Self {
            scenario,
            shards: spec.shards,
            workers: spec.workers,
            active_shards: 0,
            measured_secs,
            limits: spec.limits,
            partitions,
            worker_seconds: sampler.worker_seconds,
            cold_start: None,
            events: sampler.events.clone(),
            unowned_shard_seconds: sampler.unowned_shard_seconds,
            longest_unowned: sampler.longest_unowned_at(measured_secs),
            moves: 0,
            deploy_secs: None,
            wall: Duration::ZERO,
        }
    }

    fn secs(&self) -> f64 {
        self.measured_secs.max(1) as f64
    }

    /// Read units a second, all partitions.
    pub fn read_units(&self) -> f64 {
        self.partitions.values().map(|p| p.read_halves as f64 / 2.0).sum::<f64>() / self.secs()
    }

    /// Write units a second, all partitions.
    pub fn write_units(&self) -> f64 {
        self.partitions.values().map(|p| p.write_units as f64).sum::<f64>() / self.secs()
    }

    /// Requests served a second.
    pub fn requests(&self) -> f64 {
        self.partitions.values().map(|p| p.served() as f64).sum::<f64>() / self.secs()
    }

    /// Requests refused for throughput.
    pub fn throttled(&self) -> u64 {
        self.partitions.values().map(|p| p.throttled).sum()
    }

    /// Workers running on average.
    pub fn mean_workers(&self) -> f64 {
        (self.worker_seconds as f64 / self.secs()).max(1.0)
    }

    /// The partition-key value with the most units asked for, and its totals.
    pub fn busiest(&self) -> Option<(&String, &PartitionTotals)> {
        self.partitions.iter().max_by_key(|(_, p)| p.demand_read_halves / 2 + p.demand_write_units)
    }

    /// Simulated seconds per wall second.
    pub fn speed(&self) -> f64 {
        let simulated = self.measured_secs + self.cold_start.unwrap_or(0);
        simulated as f64 / self.wall.as_secs_f64().max(1e-9)
    }
}

fn opt_secs(v: Option<u64>) -> String {
    v.map_or("not within the run".into(), |s| format!("{s} s"))
}

fn money(v: f64) -> String {
    if v >= 100.0 { format!("${v:.0}") } else { format!("${v:.2}") }
}

/// A markdown table: one row per measure, one column per run and the KCL 3.x model's
/// column at the first run's size.
pub fn markdown(reports: &[Report]) -> String {
    let Some(first) = reports.first() else { return String::new() };
    let k = kcl::estimate(first.shards, first.workers);
    let mut rows: Vec<(String, Vec<String>, String)> = Vec::new();
    let mut row = |name: &str, f: &dyn Fn(&Report) -> String, kcl: String| {
        rows.push((name.to_owned(), reports.iter().map(f).collect(), kcl));
    };
    let limit = |r: &Report| (r.limits.read_units as f64, r.limits.write_units as f64);
    row("read units/s (total)", &|r| format!("{:.0}", r.read_units()), format!("{:.1}", k.read_units));
    row("write units/s (total)", &|r| format!("{:.0}", r.write_units()), format!("{:.0}", k.write_units));
    row("requests/s", &|r| format!("{:.0}", r.requests()), format!("{:.0}", k.requests));
    row(
        "read / write units/s per worker",
        &|r| format!("{:.1} / {:.1}", r.read_units() / r.mean_workers(), r.write_units() / r.mean_workers()),
        format!("{:.2} / {:.1}", k.read_units / first.workers as f64, k.write_units / first.workers as f64),
    );
    row(
        "busiest partition key: read / write units/s served",
        &|r| {
            r.busiest().map_or("-".into(), |(_, p)| {
                format!("{:.0} / {:.0}", p.read_halves as f64 / 2.0 / r.secs(), p.write_units as f64 / r.secs())
            })
        },
        format!("{:.1} / {:.1}", k.busiest_read_units, k.busiest_write_units),
    );
    row(
        "busiest partition key: read / write units/s asked (limit 3,000 / 1,000)",
        &|r| {
            r.busiest().map_or("-".into(), |(_, p)| {
                let (rl, wl) = limit(r);
                let (rd, wd) = (p.demand_read_halves as f64 / 2.0 / r.secs(), p.demand_write_units as f64 / r.secs());
                format!("{rd:.0} / {wd:.0} ({:.1}× / {:.1}×)", rd / rl, wd / wl)
            })
        },
        format!("{:.1} / {:.1}", k.busiest_read_units, k.busiest_write_units),
    );
    row(
        "busiest partition key: peak second asked, read / write",
        &|r| r.busiest().map_or("-".into(), |(_, p)| format!("{} / {}", p.peak_read_halves / 2, p.peak_write_units)),
        "-".into(),
    );
    row(
        "seconds a partition key was over its limit",
        &|r| {
            format!("{} of {}", r.partitions.values().map(|p| p.seconds_over_limit).max().unwrap_or(0), r.measured_secs)
        },
        "0".into(),
    );
    row("throttled requests", &|r| r.throttled().to_string(), "0".into());
    row(
        "monthly cost, on-demand",
        &|r| money(monthly_cost(r.read_units(), r.write_units())),
        money(monthly_cost(k.read_units, k.write_units)),
    );
    row(
        "cost per shard-hour",
        &|r| format!("${:.6}", per_shard_hour(r.read_units(), r.write_units(), r.active_shards.max(r.shards))),
        format!("${:.6}", per_shard_hour(k.read_units, k.write_units, first.shards)),
    );
    row("cold start until owned and balanced", &|r| opt_secs(r.cold_start), "-".into());
    row(
        "after the event: all owned / balanced",
        &|r| {
            let parts: Vec<String> = r
                .events
                .iter()
                .map(|e| format!("{}: {} / {}", e.label, opt_secs(e.owned_after), opt_secs(e.balanced_after)))
                .collect();
            if parts.is_empty() { "-".into() } else { parts.join("; ") }
        },
        format!("crash: ≤ {:.0} s / -", k.takeover_bound_secs),
    );
    row("shard-seconds without an owner", &|r| r.unowned_shard_seconds.to_string(), "-".into());
    row("longest a shard went without an owner", &|r| format!("{} s", r.longest_unowned), "-".into());
    row("leases moved", &|r| r.moves.to_string(), "-".into());
    row("rolling deploy took", &|r| r.deploy_secs.map_or("-".into(), |s| format!("{s} s")), "-".into());
    row("simulated s per wall s", &|r| format!("{:.2}", r.speed()), "-".into());

    let mut out = String::new();
    let _ = write!(out, "| | ");
    for r in reports {
        let _ = write!(out, "{} | ", r.scenario.name());
    }
    let _ = writeln!(out, "KCL 3.x model (steady) |");
    let _ = writeln!(out, "|---|{}---|", "---|".repeat(reports.len()));
    for (name, cells, kcl) in rows {
        let _ = writeln!(out, "| {name} | {} | {kcl} |", cells.join(" | "));
    }
    out
}
