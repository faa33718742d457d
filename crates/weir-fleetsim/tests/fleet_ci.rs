//! The fleet simulator at CI size: 300 shards, 15 real workers (20 leases each, as
//! at 10,000 shards and 500 workers), a few simulated minutes of a steady state, a
//! crash of a fifth of the fleet and a rolling deploy. (1,000 shards and 50 workers
//! take minutes in a debug build; `cargo run --release -p weir-fleetsim` runs them.)
//!
//! The per-partition limits are observed, not enforced: from about 750 shards one
//! namespace asks for more than a partition key's 1,000 write units a second (a
//! checkpoint a second per shard, plus renewals), and throttling would make every
//! number a measure of that (RESULTS.md has the enforced runs). What is asserted holds for any lease layout: the accounting counts the
//! checkpoints, every shard gets an owner and keeps it, a crash is recovered from.
//! Issue 36's targets the current layout misses (a partition key over its limit, a
//! shard paused more than 5 s in a deploy) are printed, not asserted.

use std::time::Duration;

use weir_fleetsim::{Enforcement, Limits, Report, Scenario, Spec, markdown, run};

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
    eprintln!("{}", markdown(&[steady.clone(), crash.clone(), deploy.clone()]));

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

    // Crash of a fifth: every shard has an owner again within three failover periods
    // (issue 36's target is two: printed, not asserted), and the fleet rebalances.
    let c = event(&crash, "crash of 20%");
    let owned = c.owned_after.expect("every shard owned again within the run");
    assert!(owned <= 3 * FAILOVER_SECS, "owned again {owned} s after the crash");
    assert!(crash.moves >= (SHARDS / 5) as u64 * 9 / 10, "the crashed workers' leases moved: {}", crash.moves);
    assert!(crash.unowned_shard_seconds > 0, "the crashed workers' shards waited");

    // Rolling deploy: it finishes, and every shard is owned again after it.
    assert!(deploy.deploy_secs.is_some(), "every wave restarted within the run");
    let d = event(&deploy, "deploy done");
    assert!(d.owned_after.is_some(), "every shard owned after the deploy");
    assert!(deploy.moves > 0, "released leases went to other workers");

    eprintln!(
        "issue 36 targets (not asserted): busiest partition key asked for {:.0} write units/s (limit 1,000); \
         owned {owned} s after the crash (target ≤ {} s); longest a shard waited in the deploy {} s (target ≤ 5 s)",
        steady.busiest().map_or(0.0, |(_, p)| p.demand_write_units as f64 / steady.measured_secs as f64),
        2 * FAILOVER_SECS,
        deploy.longest_unowned,
    );
}
