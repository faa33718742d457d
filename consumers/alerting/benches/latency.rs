//! Alert latency end to end in-process: an in-process stream, one weir worker (the real
//! dispatcher, consumer host and 10 ms ticks) and the alerting consumer. Each second,
//! new tenants send events; a rule `count >= 1` per tenant over 1 s tumbling windows
//! (no allowed lateness) fires once per tenant and window. Latency is the time from the
//! window's end (the earliest moment the alert can exist) to the alert leaving the
//! sink, over 1,000 alerts.
//!
//! Run: `cargo bench -p weir-alerting --bench latency`
#![allow(clippy::unwrap_used, clippy::print_stdout)] // a test: a failed expectation is a failed test

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use tokio::sync::Notify;
use weir_alerting::sink::{AlertSink, SendError};
use weir_alerting::{Alert, Alerting, AlertingConfig};
use weir_core::{Clock, SystemClock};
use weir_local::{MemoryStream, StreamOptions};
use weir_runtime::{RuntimeConfig, TokioClock, Worker};
use weir_testkit::MemoryLeaseTable;

struct Timing {
    latencies: Mutex<Vec<f64>>,
    target: usize,
    done: Notify,
}

struct TimingSink(Arc<Timing>);

#[async_trait]
impl AlertSink for TimingSink {
    fn name(&self) -> &str {
        "timing"
    }
    async fn send(&self, a: &Alert) -> Result<(), SendError> {
        if a.state != "firing" {
            return Ok(());
        }
        let end = chrono::DateTime::parse_from_rfc3339(&a.window_end).map(|t| t.timestamp_millis()).unwrap_or(0);
        let now = SystemClock.now().as_millis();
        let mut l = self.0.latencies.lock().unwrap_or_else(|p| p.into_inner());
        l.push((now - end) as f64);
        if l.len() >= self.0.target {
            self.0.done.notify_one();
        }
        Ok(())
    }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let full = std::env::args().any(|a| a == "--bench");
    let (tenants, windows) = if full { (100u64, 10u64) } else { (10, 2) };
    let config: AlertingConfig = toml::from_str(
        r#"
name = "alerts"
allowed_lateness = "0s"
[[rules]]
name = "any"
group_by = [".tenantId"]
window = "1s"
aggregate = "count"
condition = ">= 1"
min_events = 1
cooldown = "1h"
"#,
    )
    .expect("config");
    let timing = Arc::new(Timing {
        latencies: Mutex::new(Vec::new()),
        target: (tenants * windows) as usize,
        done: Notify::new(),
    });
    let clock = Arc::new(TokioClock::new());
    let rules = config.rules().expect("rules");
    let alerting = Alerting::with_sinks(&config, rules, vec![Arc::new(TimingSink(timing.clone()))], clock.clone());
    let stream = MemoryStream::new(StreamOptions { shards: 4, ..StreamOptions::default() }, Arc::new(SystemClock));
    let mut rc = RuntimeConfig::new("bench".into());
    rc.tick_interval = Duration::from_millis(10);
    let worker = Worker::new(
        rc,
        Arc::new(MemoryLeaseTable::new()),
        Arc::new(stream.clone()),
        Arc::new(stream.clone()),
        vec![Box::new(alerting)],
        clock,
    )
    .expect("worker");
    let stop = tokio_util::sync::CancellationToken::new();
    let run = tokio::spawn(worker.run(stop.clone()));
    let producer = {
        let stream = stream.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(10));
            loop {
                tick.tick().await;
                let now = SystemClock.now().as_millis();
                // Every tenant of this second sends one event per 10 ms tick.
                for t in 0..tenants {
                    let tenant = format!("w{}-t{t}", now / 1000);
                    stream.put(&tenant, Bytes::from(format!(r#"{{"tenantId":"{tenant}","ts":{now}}}"#)));
                }
            }
        })
    };
    // Skip the first (partial) second's alerts by asking for one more window.
    timing.latencies.lock().unwrap_or_else(|p| p.into_inner()).clear();
    tokio::time::timeout(Duration::from_secs(30 + windows * 3), timing.done.notified()).await.expect("alerts arrived");
    producer.abort();
    stop.cancel();
    let _ = run.await;
    let mut l = timing.latencies.lock().unwrap_or_else(|p| p.into_inner()).clone();
    l.sort_by(|a, b| a.total_cmp(b));
    println!("| alerts | p50 ms after the window's end | p99 ms | max ms |");
    println!("|---|---|---|---|");
    println!("| {} | {:.0} | {:.0} | {:.0} |", l.len(), percentile(&l, 0.5), percentile(&l, 0.99), l[l.len() - 1]);
}
