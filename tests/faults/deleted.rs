//! The stream is deleted under a running worker: everything read before is archived,
//! the worker says clearly what happened (log, `/status`), stops being ready once the
//! failure lasts `[worker] unhealthy_after` (`/readyz` 503 with the reason,
//! `weir_shards_read_failing` up), nothing panics, and the lease table is left as it
//! was (no lease deleted, no checkpoint moved).

use std::time::Duration;

use weir_aws::DynamoDbLeaseTable;
use weir_core::ports::LeaseTable;
use weir_e2e::patience::{Patience, cpu_ticks, file_len};

use crate::harness::{Env, Extra, Traffic, now_ms};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_deleted_under_the_worker_is_reported_and_damages_nothing() {
    let env = Env::new("fault-gone", 2).await;
    let w = env.worker("gone-w1", &Extra { unhealthy_after: Some("5s"), ..Extra::default() }).await;
    w.wait_reading(Duration::from_secs(60)).await;
    let traffic = Traffic::start(env.kinesis.clone(), &env.name, 100);
    env.alerts.wait_for(3, Duration::from_secs(60)).await;
    let from = now_ms();
    let produced = traffic.stop(from, from).await;
    let tally =
        env.tally("stream deleted after its records were read", &produced, &[&w], Duration::from_secs(60)).await;
    tally.report_and_check(false);

    let client = weir_e2e::dynamodb(&env.moto.endpoint).await;
    let table = DynamoDbLeaseTable::open(client, "fault-gone-leases", "fault-gone", false).await.unwrap();
    let before = table.list().await.unwrap();
    let (code, ready) = w.get("/readyz").await.unwrap_or_default();
    assert_eq!(code, 200, "ready while the stream is there: {ready}");
    env.kinesis.delete_stream().stream_name(&env.name).enforce_consumer_deletion(true).send().await.unwrap();

    // The worker notices and says so.
    // The worker keeps retrying its reads and logging while it finds out.
    let mut patience = Patience::new(Duration::from_secs(90));
    let said = loop {
        let log = w.log();
        let status = w.get("/status").await.map(|(_, b)| b).unwrap_or_default();
        if log.contains("was the stream deleted") || status.contains("was the stream deleted") {
            break (log, status);
        }
        if let Err(why) = patience.observe((cpu_ticks(w.pid()), log.len())) {
            panic!("no word of the deleted stream: {why}:\n{log}\n{status}");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    // Not ready any more, saying why; the failing reads are a metric of their own.
    let unready = loop {
        if let Some((503, body)) = w.get("/readyz").await {
            break body;
        }
        if let Err(why) = patience.observe((cpu_ticks(w.pid()), file_len(&w.log))) {
            panic!("still ready with the stream gone: {why}:\n{}", w.log());
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let reason = unready.contains("reads failing") || unready.contains("no answer from reads");
    assert!(unready.starts_with("unhealthy") && reason, "{unready}");
    let metrics = w.get("/metrics").await.map(|(_, b)| b).unwrap_or_default();
    let failing: f64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("weir_shards_read_failing "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no weir_shards_read_failing in\n{metrics}"));
    assert_eq!(failing, 2.0, "both shards' reads fail");
    println!("{}\n{}", said.0.lines().filter(|l| !l.contains(" INFO ")).collect::<Vec<_>>().join("\n"), said.1);
    assert!(!said.0.contains("panicked"), "{}", said.0);
    // Give it time to do damage, then compare.
    tokio::time::sleep(Duration::from_secs(10)).await;
    let after = table.list().await.unwrap();
    assert_eq!(after.len(), before.len(), "leases deleted");
    for (a, b) in after.iter().zip(&before) {
        assert_eq!(a.key, b.key);
        assert_eq!(a.checkpoints, b.checkpoints, "checkpoint of {} moved", a.key);
    }
}
