//! Soak: a steady stream while the stream is resharded (2 ↔ 4 shards) and worker B is
//! restarted (SIGTERM, start again) every period. Worker A runs throughout; its RSS,
//! open file descriptors and live tokio tasks are sampled every 10 s and must stay
//! flat after the first period (the least-squares slope is reported per hour). At the
//! end the archive is exact.
//!
//! CI: 2 minutes, a period of 40 s. `WEIR_FAULTS_FULL=1`: 30 minutes, every 5 minutes.

use std::time::{Duration, Instant};

use weir_e2e::wait_active;

use crate::harness::{Env, Extra, Traffic, full, now_ms};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn soak_with_resharding_and_restarts_stays_flat_and_exact() {
    let (length, period) = if full() {
        (Duration::from_secs(30 * 60), Duration::from_secs(5 * 60))
    } else {
        (Duration::from_secs(120), Duration::from_secs(40))
    };
    let env = Env::new("soak", 2).await;
    let a = env.worker("soak-a", &Extra::default()).await;
    let mut b = env.worker("soak-b", &Extra::default()).await;
    a.wait_reading(Duration::from_secs(60)).await;
    b.wait_reading(Duration::from_secs(60)).await;
    let traffic = Traffic::start(env.kinesis.clone(), &env.name, 100);
    let from = now_ms();
    let started = Instant::now();
    let mut samples: Vec<Sample> = Vec::new();
    let mut next_change = period;
    let mut shards = 2;
    let mut tick = tokio::time::interval(Duration::from_secs(10));
    while started.elapsed() < length {
        tick.tick().await;
        let (rss, fds, tasks) = a.resources().await;
        let tasks = tasks.unwrap_or_else(|| panic!("worker A stopped answering /metrics:\n{}", a.log()));
        samples.push(Sample {
            at: started.elapsed().as_secs_f64(),
            rss: rss as f64,
            fds: fds as f64,
            tasks: tasks as f64,
        });
        if started.elapsed() >= next_change {
            next_change += period;
            shards = if shards == 2 { 4 } else { 2 };
            env.kinesis
                .update_shard_count()
                .stream_name(&env.name)
                .target_shard_count(shards)
                .scaling_type(aws_sdk_kinesis::types::ScalingType::UniformScaling)
                .send()
                .await
                .unwrap();
            wait_active(&env.kinesis, &env.name).await;
            b.restart().await;
        }
    }
    let to = now_ms();
    let produced = traffic.stop(from, to).await;
    let tally =
        env.tally("soak: resharding and a restart every period", &produced, &[&a, &b], Duration::from_secs(180)).await;

    // Flat after warm-up: what the slope adds over the measured span stays small
    // against the level (and an absolute floor for small, noisy numbers).
    let settled: Vec<&Sample> = samples.iter().filter(|s| s.at >= period.as_secs_f64()).collect();
    assert!(settled.len() >= 5, "too few samples after warm-up: {}", settled.len());
    let span = settled.last().unwrap().at - settled[0].at;
    let mut report = Vec::new();
    for (what, get, floor) in [
        ("RSS (MiB)", (|s: &Sample| s.rss / 1_048_576.0) as fn(&Sample) -> f64, 16.0_f64),
        ("open fds", |s: &Sample| s.fds, 8.0),
        ("tokio tasks", |s: &Sample| s.tasks, 24.0),
    ] {
        let points: Vec<(f64, f64)> = settled.iter().map(|s| (s.at, get(s))).collect();
        let slope = least_squares_slope(&points);
        let level = points.iter().map(|p| p.1).sum::<f64>() / points.len() as f64;
        let (min, max) = points.iter().fold((f64::MAX, f64::MIN), |(lo, hi), p| (lo.min(p.1), hi.max(p.1)));
        report.push(format!("{what}: mean {level:.1}, min {min:.1}, max {max:.1}, slope {:+.2}/hour", slope * 3600.0));
        assert!(
            (slope * span).abs() <= floor.max(level * 0.15),
            "{what} of worker A grows: slope {:+.3}/s over {span:.0} s, level {level:.1}\n{samples:?}",
            slope
        );
    }
    println!(
        "soak {:?}, {} resharding + restart cycles, {} samples of worker A after warm-up:\n{}",
        length,
        (length.as_secs() / period.as_secs()),
        settled.len(),
        report.join("\n")
    );
    tally.report_and_check(false);
}

#[derive(Debug)]
struct Sample {
    at: f64,
    rss: f64,
    fds: f64,
    tasks: f64,
}

/// The least-squares slope of `y` over `x`.
fn least_squares_slope(points: &[(f64, f64)]) -> f64 {
    let n = points.len() as f64;
    let (mx, my) = (points.iter().map(|p| p.0).sum::<f64>() / n, points.iter().map(|p| p.1).sum::<f64>() / n);
    let cov: f64 = points.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    let var: f64 = points.iter().map(|p| (p.0 - mx).powi(2)).sum();
    if var == 0.0 { 0.0 } else { cov / var }
}
