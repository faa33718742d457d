//! A slow, lossy network on every endpoint of two workers: 500 ms added to every
//! request and 5% of response chunks cut with a reset. Throughput degrades,
//! correctness does not.

use std::time::Duration;

use weir_testkit::Faults;

use crate::harness::{Env, Extra, Traffic, degraded_for, now_ms};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn latency_and_resets_everywhere_degrade_throughput_not_correctness() {
    let env = Env::new("fault-slow", 2).await;
    let a = env.worker("slow-a", &Extra::default()).await;
    let b = env.worker("slow-b", &Extra::default()).await;
    a.wait_reading(Duration::from_secs(60)).await;
    b.wait_reading(Duration::from_secs(60)).await;
    let traffic = Traffic::start(env.kinesis.clone(), &env.name, 50);
    env.alerts.wait_for(3, Duration::from_secs(60)).await;

    let from = now_ms();
    let bad = Faults::degraded(Duration::from_millis(500), 50);
    a.proxies.set_all(&bad);
    b.proxies.set_all(&bad);
    tokio::time::sleep(degraded_for()).await;
    a.proxies.set_all(&Faults::none());
    b.proxies.set_all(&Faults::none());
    let to = now_ms();
    env.alerts.wait_for(env.alerts.count() + 3, Duration::from_secs(120)).await;
    let produced = traffic.stop(from, to).await;
    let tally = env
        .tally("500 ms latency and 5% resets on every endpoint", &produced, &[&a, &b], Duration::from_secs(180))
        .await;
    let resets: u64 = [&a, &b]
        .iter()
        .flat_map(|w| [&w.proxies.kinesis, &w.proxies.dynamodb, &w.proxies.s3])
        .map(|p| p.stats().resets())
        .sum();
    println!("{resets} connections cut");
    tally.report_and_check(false);
    assert!(resets > 0, "no connection was cut: the scenario tested nothing");
}
