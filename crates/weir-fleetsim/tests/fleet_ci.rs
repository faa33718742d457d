//! The fleet simulator at CI size: 300 shards, 15 real workers (20 leases each, as
//! at 10,000 shards and 500 workers), a few simulated minutes of a steady state, a
//! crash of a fifth of the fleet and a rolling deploy. (1,000 shards and 50 workers
//! take minutes in a debug build; `cargo run --release -p weir-fleetsim` runs them.)
//!
//! The per-partition limits are observed, not enforced, so that a layout that passes
//! them shows by how much instead of failing on throttling (RESULTS.md has the enforced
//! runs). Asserted: the accounting counts the checkpoints, every shard gets an owner and
//! keeps it, and issue 36's targets at this size: no partition key asked for more than
//! its limits in any second, a lease-table cost per shard-hour at or below the KCL
//! model's, every shard owned again within two failover periods after a crash of a
//! fifth of the fleet, and no shard without an owner for more than 5 s in a rolling
//! deploy.

use std::time::Duration;

use weir_fleetsim::prices::per_shard_hour;
use weir_fleetsim::{Enforcement, Limits, Report, Scenario, Spec, kcl, markdown, run};

const SHARDS: usize = 300;
const WORKERS: usize = 15;
const FAILOVER_SECS: u64 = 10;

fn spec(measured_secs: u64) -> Spec {
    Spec {
        shards: SHARDS,
        workers: WORKERS,
        measured: Duration::from_secs(measured_secs),
        warmup_limit: Duration::from_secs(180),
        seed: 36,
        limits: Limits { enforcement: Enforcement::Observe, ..Limits::DYNAMODB },
        deploy_settle: Duration::from_secs(5),
        lease_partitions: weir_core::ports::LEASE_PARTITIONS,
        worker_partitions: weir_core::ports::WORKER_PARTITIONS,
    }
}

fn event<'a>(r: &'a Report, label: &str) -> &'a weir_fleetsim::EventTiming {
    r.events.iter().find(|e| e.label == label).unwrap_or_else(|| panic!("no event {label}: {:?}", r.events))
}

#[test]
fn a_fleet_of_15_workers_over_300_shards() {
    let steady = run(&spec(30), Scenario::Steady).unwrap();
    let crash = run(&spec(60), Scenario::Crash).unwrap();
    let deploy = run(&spec(150), Scenario::RollingDeploy).unwrap();
    let reshard = run(&spec(60), Scenario::Reshard).unwrap();
    eprintln!("{}", markdown(&[steady.clone(), crash.clone(), deploy.clone(), reshard.clone()]));

    // Steady: balanced after the cold start, every shard held all along, nothing moves,
    // and a checkpoint a second per shard is what the table was charged for.
    assert!(steady.cold_start.is_some(), "the cold fleet balances within the warm-up");
    assert_eq!(steady.unowned_shard_seconds, 0);
    assert_eq!(steady.moves, 0, "a balanced fleet moves no lease");
    assert!(
        steady.write_units() >= SHARDS as f64 && steady.write_units() < 2.0 * SHARDS as f64,
        "a checkpoint a second per shard, and renewals: {} write units/s",
        steady.write_units()
    );
    assert_eq!(steady.throttled(), 0, "limits observed, not enforced");

    // Crash of a fifth: every shard has an owner again within two failover periods,
    // and the fleet rebalances.
    let c = event(&crash, "crash of 20%");
    let owned = c.owned_after.expect("every shard owned again within the run");
    assert!(owned <= 2 * FAILOVER_SECS, "owned again {owned} s after the crash");
    assert!(crash.moves >= (SHARDS / 5) as u64 * 9 / 10, "the crashed workers' leases moved: {}", crash.moves);
    assert!(crash.unowned_shard_seconds > 0, "the crashed workers' shards waited");

    // Rolling deploy: it finishes, and every shard is owned again after it.
    assert!(deploy.deploy_secs.is_some(), "every wave restarted within the run");
    let d = event(&deploy, "deploy done");
    assert!(d.owned_after.is_some(), "every shard owned after the deploy");
    assert!(deploy.moves > 0, "released leases went to other workers");
    assert!(deploy.longest_unowned <= 5, "a shard waited {} s for an owner in the deploy", deploy.longest_unowned);

    // Reshard ×2: the holder of each parent takes both children, so every shard is
    // owned again within a few seconds, hardly anything moves, and the fleet does not read
    // every lease at once (reads within twice the steady state's).
    let r = event(&reshard, "reshard ×2");
    let owned = r.owned_after.expect("every child owned within the run");
    assert!(owned <= 5, "children owned {owned} s after the reshard");
    assert!(reshard.moves <= (SHARDS / 20) as u64, "few leases moved in the reshard: {}", reshard.moves);
    assert!(
        reshard.read_units() <= 2.0 * steady.read_units().max(1.0),
        "reads in the reshard: {} units/s against {} steady",
        reshard.read_units(),
        steady.read_units()
    );

    // No partition key over its limits in any second, whatever the scenario.
    for r in [&steady, &crash, &deploy, &reshard] {
        let over: Vec<_> = r.partitions.iter().filter(|(_, p)| p.seconds_over_limit > 0).collect();
        assert!(over.is_empty(), "{:?}: partition keys over their limits: {over:?}", r.scenario);
    }
    // The lease table costs no more per shard-hour than the KCL's design would.
    let k = kcl::estimate(SHARDS, WORKERS);
    let kcl_cost = per_shard_hour(k.read_units, k.write_units, SHARDS);
    for r in [&steady, &crash, &deploy] {
        // (The reshard doubles the shards halfway: its cost is not per 300 shards.)
        let cost = per_shard_hour(r.read_units(), r.write_units(), SHARDS);
        assert!(cost <= kcl_cost, "{:?}: ${cost:.6} per shard-hour against the KCL's ${kcl_cost:.6}", r.scenario);
    }
}

/// One seed, one run: the runtime's jitter and every order the workers act in come from
/// the spec, so a failure here can be replayed and a bound is not met by luck.
#[test]
fn the_same_seed_simulates_the_same_fleet() {
    let small = Spec { shards: 40, workers: 4, ..spec(20) };
    let once = || {
        let mut r = run(&small, Scenario::Crash).unwrap();
        r.wall = Duration::ZERO;
        format!("{r:?}")
    };
    let first = once();
    assert_eq!(once(), first);
    let other = Spec { seed: 37, ..small };
    let mut r = run(&other, Scenario::Crash).unwrap();
    r.wall = Duration::ZERO;
    assert_ne!(format!("{r:?}"), first, "another seed crashes other workers");
}
