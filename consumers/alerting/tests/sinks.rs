//! The consumer end to end in-process: records in, alerts out through a webhook that
//! fails before it succeeds; a sink that never answers fills its bounded queue and
//! drops (the stream keeps flowing); malformed records never stop evaluation.
#![allow(clippy::unwrap_used, clippy::print_stdout)] // a test: a failed expectation is a failed test

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use axum::http::StatusCode;
use bytes::Bytes;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use weir_alerting::sink::{AlertSink, Outlet, SendError};
use weir_alerting::{Alert, Alerting, AlertingConfig};
use weir_core::{Clock, Consumer, ExtendedSequenceNumber, Record, RecordBatch, SequenceNumber, ShardId, Timestamp};
use weir_testkit::{CrashSwitch, ManualClock, SimAcks, SimLeases};

fn config(url: &str) -> AlertingConfig {
    let text = format!(
        r#"
name = "alerts"
allowed_lateness = "1s"
queue_capacity = 10
max_attempts = 5
sinks = [{{ type = "webhook", url = "{url}" }}]
[[rules]]
name = "tenant-errors"
group_by = [".tenantId"]
window = "10s"
aggregate = "error_rate"
condition = "> 0.2"
min_events = 5
"#
    );
    toml::from_str(&text).unwrap()
}

fn records(from: u64, n: u64, t0: i64) -> Vec<Record> {
    (from..from + n)
        .map(|i| Record {
            partition_key: "p".into(),
            position: ExtendedSequenceNumber::plain(SequenceNumber::from_u128(i as u128 + 1)),
            approximate_arrival: Timestamp::from_millis(t0),
            data: if i % 10 == 9 {
                Bytes::from_static(b"not json")
            } else {
                Bytes::from(format!(r#"{{"tenantId":"t-1","ts":{},"success":{}}}"#, t0 + i as i64, i % 2 == 0))
            },
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhook_failures_are_retried_and_records_acknowledged_at_once() {
    let (tx, mut rx) = mpsc::unbounded_channel::<serde_json::Value>();
    let calls = Arc::new(AtomicUsize::new(0));
    let c2 = calls.clone();
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(move |body: Bytes| {
            let (tx, calls) = (tx.clone(), c2.clone());
            async move {
                if calls.fetch_add(1, Ordering::SeqCst) < 2 {
                    return StatusCode::INTERNAL_SERVER_ERROR;
                }
                let _ = tx.send(serde_json::from_slice(&body).unwrap());
                StatusCode::OK
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });

    let clock = ManualClock::new(Timestamp::from_millis(1_000_000));
    let mut alerting = Alerting::new(&config(&url), Arc::new(clock.clone()), None).unwrap();
    let leases = SimLeases::new();
    let acks = SimAcks::new(leases.clone(), 1, CrashSwitch::after(None));
    let shard = ShardId::new("s");
    leases.take(&shard, 1);
    let batch = RecordBatch {
        shard_id: shard.clone(),
        records: records(0, 40, 1_000_000),
        millis_behind_latest: None,
        child_shards: None,
    };
    alerting.on_batch(&batch, &acks).await.unwrap();
    assert_eq!(
        leases.checkpoint(&shard).map(|p| p.sequence.to_string()),
        Some("40".into()),
        "acknowledged when evaluated"
    );
    clock.advance(Duration::from_secs(30));
    alerting.on_tick(clock.now(), &acks).await.unwrap();
    let alert = tokio::time::timeout(Duration::from_secs(20), rx.recv()).await.expect("alert delivered").unwrap();
    assert_eq!(alert["rule"], "tenant-errors");
    assert_eq!(alert["state"], "firing");
    assert_eq!(alert["group"][".tenantId"], "t-1");
    assert!(alert["text"].as_str().unwrap().contains("[FIRING] tenant-errors"), "{alert}");
    assert_eq!(alert["events"], 36, "4 malformed records were not counted");
    assert!(calls.load(Ordering::SeqCst) >= 3, "two failures, then success");
}

struct Stuck(Arc<AtomicUsize>);

#[async_trait]
impl AlertSink for Stuck {
    fn name(&self) -> &str {
        "stuck"
    }
    async fn send(&self, _: &Alert) -> Result<(), SendError> {
        self.0.fetch_add(1, Ordering::SeqCst);
        std::future::pending().await
    }
}

fn alert(i: usize) -> Alert {
    Alert {
        rule: format!("r{i}"),
        state: "firing",
        group: Default::default(),
        value: 1.0,
        condition: "> 0".into(),
        threshold: 0.0,
        window: "1m".into(),
        window_start: String::new(),
        window_end: String::new(),
        events: 1,
        first_event: None,
        last_event: None,
        sample_records: vec![],
        text: String::new(),
    }
}

#[tokio::test]
async fn a_sink_that_never_answers_fills_its_queue_and_drops() {
    let started = Arc::new(AtomicUsize::new(0));
    let stop = CancellationToken::new();
    let outlet = Outlet::start(Arc::new(Stuck(started.clone())), 3, 5, stop.clone());
    assert!(outlet.offer(alert(0)));
    // Wait until the delivery task holds the first alert (explicit signal: the counter).
    while started.load(Ordering::SeqCst) == 0 {
        tokio::task::yield_now().await;
    }
    let accepted = (1..10).filter(|i| outlet.offer(alert(*i))).count();
    assert_eq!(accepted, 3, "a queue of 3 behind the stuck delivery; the rest dropped without waiting");
    stop.cancel();
}

/// SNS through the port: a fake publisher that throttles twice, then takes the alert.
struct FakeSns {
    calls: AtomicUsize,
    got: mpsc::UnboundedSender<(String, String, String)>,
}

#[async_trait]
impl weir_core::ports::Publisher for FakeSns {
    async fn publish(&self, topic: &str, subject: &str, message: &str) -> Result<(), weir_core::ports::PublishError> {
        if self.calls.fetch_add(1, Ordering::SeqCst) < 2 {
            return Err(weir_core::ports::PublishError { message: "Throttling".into(), retryable: true });
        }
        let _ = self.got.send((topic.into(), subject.into(), message.into()));
        Ok(())
    }
}

#[tokio::test(start_paused = true)]
async fn sns_alerts_are_retried_through_the_port() {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let sns = Arc::new(FakeSns { calls: AtomicUsize::new(0), got: tx });
    let sink = weir_alerting::sink::SnsSink::new("arn:aws:sns:us-east-1:123456789012:alerts", sns.clone());
    let outlet = Outlet::start(Arc::new(sink), 4, 5, CancellationToken::new());
    assert!(outlet.offer(alert(7)));
    let (topic, subject, message) = rx.recv().await.unwrap();
    assert_eq!(topic, "arn:aws:sns:us-east-1:123456789012:alerts");
    assert_eq!(subject, "[firing] r7");
    assert_eq!(serde_json::from_str::<serde_json::Value>(&message).unwrap()["rule"], "r7");
    assert_eq!(sns.calls.load(Ordering::SeqCst), 3, "two throttled attempts, then success");
}
