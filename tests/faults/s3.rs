//! S3 down: the archiver backs up within `max_backlog_bytes`, then refuses batches
//! (the stream keeps the records); alerting keeps its pace; `/readyz` and `/status`
//! say why; after S3 returns the archive is exact.

use std::time::{Duration, Instant};

use weir_e2e::patience::{Patience, cpu_ticks, file_len};
use weir_testkit::Faults;

use crate::harness::{Env, Extra, Traffic, now_ms, outage};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_down_backs_up_refuses_and_then_archives_exactly_once() {
    let env = Env::new("fault-s3", 2).await;
    // 2 KiB: the first round of sealed objects (one per tenant) already passes it, so
    // the archiver refuses records early in even the shortened outage of a CI run (with
    // 8 KiB, a busy machine's CI run once ended the 10 s outage before the archiver's
    // second round of seals).
    let w = env.worker("s3-w1", &Extra { max_backlog_bytes: Some(2 * 1024), ..Extra::default() }).await;
    w.wait_reading(Duration::from_secs(60)).await;
    let traffic = Traffic::start(env.kinesis.clone(), &env.name, 100);
    env.alerts.wait_for(3, Duration::from_secs(60)).await;

    let from = now_ms();
    let started = Instant::now();
    w.proxies.s3.set(Faults::down());
    // The backlog fills, then the archiver refuses records and says so. S3 stays down
    // until it does (longer than `outage()` on a slow machine): the wait fails when
    // the worker stops making progress, not on wall time.
    let mut patience = Patience::new(Duration::from_secs(60));
    let why = loop {
        let status = w.get("/status").await.map(|(_, b)| b).unwrap_or_default();
        if status.contains("refusing records") {
            break status;
        }
        if let Err(why) = patience.observe((cpu_ticks(w.pid()), file_len(&w.log))) {
            panic!("the archiver never refused records while S3 was down: {why}:\n{status}\n{}", w.log());
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    assert!(why.contains("wait for the object store"), "{why}");
    let (_, ready) = w.get("/readyz").await.unwrap();
    assert!(ready.contains("waiting for the store") && !ready.contains(" 0 objects"), "{ready}");
    tokio::time::sleep(outage().saturating_sub(started.elapsed())).await;
    w.proxies.s3.set(Faults::none());
    let to = now_ms();
    // Alerting was not held up by the archiver: windows that ended during the outage
    // were alerted on.
    let windows = env.alerts.windows_alerted(from, to);
    assert!(windows as u64 >= outage().as_secs() / 2, "{windows} windows alerted during a {:?} outage", outage());
    env.alerts.wait_for(env.alerts.count() + 3, Duration::from_secs(60)).await;
    let produced = traffic.stop(from, to).await;

    let tally = env.tally("S3 down", &produced, &[&w], Duration::from_secs(120)).await;
    tally.report_and_check(false);
    // The request counters saw the outage: puts that reached no S3, then puts that did.
    let requests = w.aws_requests().await;
    let count = |service: &str, operation: &str, outcome: &str| {
        requests.get(&(service.to_owned(), operation.to_owned(), outcome.to_owned())).copied().unwrap_or(0)
    };
    let unanswered: u64 = requests
        .iter()
        .filter(|((service, _, outcome), _)| service == "s3" && (outcome == "transport" || outcome == "timeout"))
        .map(|(_, n)| n)
        .sum();
    assert!(unanswered > 0, "S3 was down, yet no S3 request failed: {requests:?}");
    assert!(count("s3", "PutObject", "ok") > 0, "{requests:?}");
    assert!(count("kinesis", "SubscribeToShard", "ok") > 0, "{requests:?}");
    assert!(count("dynamodb", "UpdateItem", "ok") + count("dynamodb", "PutItem", "ok") > 0, "{requests:?}");
    let delay = tally.max_alert_delay.unwrap();
    assert!(delay < Duration::from_secs(5), "alerts were {delay:?} late while S3 was down (isolation)");
}
