//! `weir-fleetsim`: runs scenarios and prints the markdown table.
//!
//! `cargo run --release -p weir-fleetsim -- --shards 10000 --workers 500 --minutes 60 --scenario all`

use std::io::Write;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use weir_fleetsim::{Enforcement, Limits, Scenario, Spec, markdown, run};

/// Simulates a weir fleet over a DynamoDB lease table and reports what it costs.
#[derive(Debug, Parser)]
struct Args {
    /// Shards at the start (all applications together).
    #[arg(long, default_value_t = 1_000)]
    shards: usize,
    /// Workers at full size (all applications together).
    #[arg(long, default_value_t = 50)]
    workers: usize,
    /// Simulated minutes measured per scenario (after the warm-up).
    #[arg(long, default_value_t = 5)]
    minutes: u64,
    /// Longest warm-up, simulated minutes.
    #[arg(long, default_value_t = 10)]
    warmup_minutes: u64,
    /// `all`, or a comma-separated list of: steady, deploy, scale, crash, reshard, three-apps.
    #[arg(long, default_value = "all")]
    scenario: String,
    /// Decides the simulator's choices.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Seconds a restarted wave of a rolling deploy runs before the next one stops.
    #[arg(long, default_value_t = 30)]
    deploy_settle_secs: u64,
    /// Observe the per-partition limits (count the seconds over) instead of throttling.
    #[arg(long)]
    observe_limits: bool,
    /// Partition keys a namespace's leases are spread over (0: all under the namespace,
    /// the layout before leases were spread).
    #[arg(long, default_value_t = weir_core::ports::LEASE_PARTITIONS)]
    lease_partitions: u32,
    /// Partition keys a namespace's worker records are spread over (0: all under the
    /// namespace, the layout before they were spread).
    #[arg(long, default_value_t = weir_core::ports::WORKER_PARTITIONS)]
    worker_partitions: u32,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let scenarios: Vec<Scenario> = if args.scenario == "all" {
        Scenario::ALL.to_vec()
    } else {
        args.scenario
            .split(',')
            .map(|s| Scenario::parse(s.trim()).with_context(|| format!("unknown scenario {s:?}")))
            .collect::<anyhow::Result<_>>()?
    };
    let enforcement = if args.observe_limits { Enforcement::Observe } else { Enforcement::Enforce };
    let spec = Spec {
        shards: args.shards,
        workers: args.workers,
        measured: Duration::from_secs(args.minutes * 60),
        warmup_limit: Duration::from_secs(args.warmup_minutes * 60),
        seed: args.seed,
        limits: Limits { enforcement, ..Limits::DYNAMODB },
        deploy_settle: Duration::from_secs(args.deploy_settle_secs),
        lease_partitions: args.lease_partitions,
        worker_partitions: args.worker_partitions,
    };
    let mut reports = Vec::new();
    let mut err = std::io::stderr();
    for s in scenarios {
        let r = run(&spec, s)?;
        writeln!(err, "{}: {:.1} s wall, {:.2} simulated s per wall s", s.name(), r.wall.as_secs_f64(), r.speed())?;
        reports.push(r);
    }
    std::io::stdout().write_all(markdown(&reports).as_bytes())?;
    Ok(())
}
