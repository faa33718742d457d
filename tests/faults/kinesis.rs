//! Kinesis unreachable for one worker reading with enhanced fan-out: first down
//! (connections reset), then black-holed (requests hang), then a spell of
//! subscriptions cut mid-stream. The reader resumes from its last position: nothing
//! missing, the archive exact, and the at-least-once consumer's redeliveries counted.

use std::time::{Duration, Instant};

use weir_testkit::Faults;

use crate::harness::{Env, Extra, Traffic, now_ms, outage};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kinesis_down_then_hung_then_resetting_resumes_without_gaps() {
    let env = Env::new("fault-kinesis", 2).await;
    let w = env.worker("kinesis-w1", &Extra::default()).await;
    w.wait_reading(Duration::from_secs(60)).await;
    let traffic = Traffic::start(env.kinesis.clone(), &env.name, 100);
    env.alerts.wait_for(3, Duration::from_secs(60)).await;

    let from = now_ms();
    let started = Instant::now();
    w.proxies.kinesis.set(Faults::down());
    tokio::time::sleep(outage() / 2).await;
    w.proxies.kinesis.set(Faults::black_hole());
    tokio::time::sleep(outage().saturating_sub(started.elapsed())).await;
    // Subscriptions cut mid-stream: three in ten response chunks end in a reset.
    w.proxies.kinesis.set(Faults::degraded(Duration::ZERO, 300));
    tokio::time::sleep(outage() / 2).await;
    w.proxies.kinesis.set(Faults::none());
    let to = now_ms();
    env.alerts.wait_for(env.alerts.count() + 3, Duration::from_secs(120)).await;
    let produced = traffic.stop(from, to).await;
    let tally = env.tally("Kinesis down, hung, then resetting (EFO)", &produced, &[&w], Duration::from_secs(180)).await;
    println!(
        "kinesis proxy: {} connections, {} reset",
        w.proxies.kinesis.stats().connections(),
        w.proxies.kinesis.stats().resets()
    );
    tally.report_and_check(false);
    assert!(w.proxies.kinesis.stats().resets() > 0, "no connection was cut: the scenario tested nothing");
}
