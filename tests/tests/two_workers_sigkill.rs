//! Two `weir run` processes on a 4-shard stream (ferrokinesis, enhanced fan-out),
//! DynamoDB leases and S3 output (moto). One is killed with SIGKILL; the other takes
//! over its shards and nothing is lost.
#![allow(clippy::unwrap_used, clippy::print_stdout)] // a test: a failed expectation is a failed test

use std::collections::BTreeSet;
use std::time::Duration;

use bytes::Bytes;
use weir_aws::DynamoDbLeaseTable;
use weir_aws::kinesis::producer::{Outgoing, Producer};
use weir_core::ports::LeaseTable;
use weir_e2e::patience::{Patience, cpu_ticks};
use weir_e2e::{archived_lines, create_stream, dynamodb, free_port, kinesis, s3, spawn_weir, worker_toml};
use weir_testkit::Emulator;

fn config(dir: &std::path::Path, kinesis: &str, moto: &str, id: &str) -> std::path::PathBuf {
    let path = dir.join(format!("{id}.toml"));
    let text = format!(
        r#"
{worker}

[stream]
kind = "kinesis"
name = "e2e-events"
efo_consumer = "weir-e2e"

[leases]
kind = "dynamodb"
table = "weir-e2e-leases"
create_table = true
namespace = "e2e"

[aws]
kinesis_endpoint_url = "{kinesis}"
dynamodb_endpoint_url = "{moto}"
s3_endpoint_url = "{moto}"
s3_force_path_style = true

[[consumers]]
type = "files"
name = "files"
bucket = "weir-e2e-archive"
prefix = "raw/"
max_age = "1s"

[http]
listen = "127.0.0.1:{port}"
"#,
        worker = worker_toml(Some(id)),
        port = free_port()
    );
    std::fs::write(&path, text).unwrap();
    path
}

async fn put_wave(producer: &Producer, from: u64, n: u64) {
    let records = (from..from + n)
        .map(|i| Outgoing {
            id: i,
            partition_key: format!("t-{:03}", i % 37),
            data: Bytes::from(format!("{{\"id\":{i}}}")),
        })
        .collect();
    let report = producer.put_all(records).await;
    assert_eq!(report.accepted.len() as u64, n, "{:?}", report.failed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkilled_worker_is_replaced_and_nothing_is_lost() {
    let fk = Emulator::start("ferrokinesis", &[]);
    let moto = Emulator::start("moto", &[]);
    let k = kinesis(&fk.endpoint).await;
    create_stream(&k, "e2e-events", 4).await;
    let s3c = s3(&moto.endpoint).await;
    s3c.create_bucket().bucket("weir-e2e-archive").send().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut a = spawn_weir(&config(dir.path(), &fk.endpoint, &moto.endpoint, "worker-a"), &dir.path().join("a.log"));
    let mut b = spawn_weir(&config(dir.path(), &fk.endpoint, &moto.endpoint, "worker-b"), &dir.path().join("b.log"));
    let producer = Producer::new(k.clone(), "e2e-events");

    // Wave 1, then wait until both workers hold leases and output appears.
    put_wave(&producer, 0, 2_000).await;
    let leases =
        DynamoDbLeaseTable::open(dynamodb(&moto.endpoint).await, "weir-e2e-leases", "e2e", true).await.unwrap();
    let mut patience = Patience::new(Duration::from_secs(60));
    loop {
        let owners: BTreeSet<String> =
            leases.list().await.unwrap().into_iter().filter_map(|l| l.owner.map(|o| o.to_string())).collect();
        let archived = archived_lines(&s3c, "weir-e2e-archive", "raw/").await.len();
        if owners.len() == 2 && archived > 0 {
            break;
        }
        let seen = (&owners, archived, cpu_ticks(a.id()), cpu_ticks(b.id()));
        if let Err(why) = patience.observe(seen) {
            panic!("workers did not share the leases: {why}: {owners:?}, {archived} lines\n{}", logs(dir.path()));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }

    a.kill().unwrap(); // SIGKILL
    a.wait().unwrap();
    put_wave(&producer, 2_000, 2_000).await;

    let mut patience = Patience::new(Duration::from_secs(120));
    let (ids, lines) = loop {
        let lines = archived_lines(&s3c, "weir-e2e-archive", "raw/").await;
        let ids: BTreeSet<u64> = lines
            .iter()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok()?.get("id")?.as_u64())
            .collect();
        if ids.len() == 4_000 {
            break (ids, lines.len());
        }
        if let Err(why) = patience.observe((ids.len(), cpu_ticks(b.id()))) {
            panic!("only {} of 4000 records archived: {why}\n{}", ids.len(), logs(dir.path()));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    assert_eq!(ids, (0..4_000).collect::<BTreeSet<u64>>(), "every record archived");
    assert!(lines >= 4_000);
    let all = leases.list().await.unwrap();
    let active: Vec<_> = all.iter().filter(|l| !l.ended).collect();
    assert_eq!(active.len(), 4);
    assert!(
        active.iter().all(|l| l.owner.as_ref().map(|o| o.as_str()) == Some("worker-b")),
        "worker-b took over every shard: {active:?}"
    );
    b.kill().unwrap();
    b.wait().unwrap();
    eprintln!("archived {lines} lines for 4000 records ({} re-delivered after the kill)", lines - 4_000);
}

/// The last lines of both workers' logs, for failure messages.
fn logs(dir: &std::path::Path) -> String {
    ["a.log", "b.log"]
        .iter()
        .map(|f| {
            let text = std::fs::read_to_string(dir.join(f)).unwrap_or_default();
            let tail: Vec<&str> = text.lines().rev().take(15).collect();
            format!("--- {f}\n{}", tail.into_iter().rev().collect::<Vec<_>>().join("\n"))
        })
        .collect::<Vec<_>>()
        .join("\n")
}
