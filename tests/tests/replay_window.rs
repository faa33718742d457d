//! `weir replay` against ferrokinesis: three waves of records put seconds apart; the
//! middle wave's window is replayed through the archiver into a `backfill/` prefix in its
//! own lease namespace. DuckDB finds exactly the window's records, none twice; the live
//! namespace is untouched. A window older than the stream's retention is refused.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use bytes::Bytes;
use weir_aws::kinesis::producer::{Outgoing, Producer};
use weir_core::ports::LeaseTable;
use weir_core::{Clock, SystemClock};
use weir_e2e::{create_stream, duckdb, kinesis, weir_binary};
use weir_local::SqliteLeaseTable;
use weir_testkit::Emulator;

async fn wave(p: &Producer, name: &str, n: u64) {
    let records = (0..n)
        .map(|i| Outgoing {
            id: i,
            partition_key: format!("pk-{i}"),
            data: Bytes::from(format!(r#"{{"tenantId":"t-{}","toolName":"x","sessionId":"{name}-{i}"}}"#, i % 3)),
        })
        .collect();
    assert_eq!(p.put_all(records).await.accepted.len() as u64, n);
}

fn replay(config: &std::path::Path, args: &[String]) -> std::process::Output {
    Command::new(weir_binary())
        .args(["replay", "--config"])
        .arg(config)
        .args(args)
        .env("AWS_ACCESS_KEY_ID", "test")
        .env("AWS_SECRET_ACCESS_KEY", "test")
        .env("AWS_REGION", "us-east-1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replaying_a_window_archives_exactly_its_records() {
    let fk = Emulator::start("ferrokinesis", &[]);
    let k = kinesis(&fk.endpoint).await;
    create_stream(&k, "replay-events", 2).await;
    let p = Producer::new(k.clone(), "replay-events");
    // Arrival times come from the emulator's clock at put time, and ferrokinesis keeps
    // them to the second: the window's edges are whole seconds, and each wave is put
    // after the edge before it (this waits for time to pass; it synchronises nothing).
    let next_second = || (SystemClock.now().as_millis() / 1000 + 1) * 1000;
    let until =
        |t: i64| tokio::time::sleep(Duration::from_millis((t - SystemClock.now().as_millis()).max(0) as u64 + 50));
    wave(&p, "before", 200).await;
    let from = next_second();
    until(from).await;
    wave(&p, "inside", 300).await;
    let to = next_second();
    until(to).await;
    wave(&p, "after", 200).await;

    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("archive");
    let cfg = dir.path().join("weir.toml");
    std::fs::write(
        &cfg,
        format!(
            r#"
[worker]
failover = "3s"
renew_interval = "1s"
taker_interval = "1s"
shard_sync_interval = "2s"
checkpoint_interval = "300ms"
tick_interval = "250ms"
[stream]
kind = "kinesis"
name = "replay-events"
[leases]
path = "{leases}"
namespace = "live"
[aws]
kinesis_endpoint_url = "{kinesis}"
[[consumers]]
type = "archiver"
name = "archive"
directory = "{out}"
transform = "mcp-normalize"
[consumers.destination]
Prefix = "events/tenant=!{{partitionKeyFromQuery:t}}/"
ErrorOutputPrefix = "errors/!{{firehose:error-output-type}}/"
CompressionFormat = "GZIP"
BufferingHints = {{ SizeInMBs = 64, IntervalInSeconds = 1 }}
DynamicPartitioningConfiguration = {{ Enabled = true }}
[consumers.destination.ProcessingConfiguration]
Enabled = true
Processors = [ {{ Type = "MetadataExtraction", Parameters = [
  {{ ParameterName = "MetadataExtractionQuery", ParameterValue = "{{t: .tenant_id}}" }},
  {{ ParameterName = "JsonParsingEngine", ParameterValue = "JQ-1.6" }} ] }} ]
"#,
            leases = dir.path().join("leases.db").display(),
            kinesis = fk.endpoint,
            out = out.display(),
        ),
    )
    .unwrap();

    let old = replay(
        &cfg,
        &["--from".into(), "0".into(), "--to".into(), "1000".into(), "--consumers".into(), "archive".into()],
    );
    assert!(!old.status.success());
    assert!(String::from_utf8_lossy(&old.stderr).contains("retention"), "{}", String::from_utf8_lossy(&old.stderr));

    let started = Instant::now();
    let args: Vec<String> = [
        "--from",
        &from.to_string(),
        "--to",
        &to.to_string(),
        "--consumers",
        "archive",
        "--archive-prefix",
        "backfill/",
        "--job",
        "j1",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let run = replay(&cfg, &args);
    assert!(run.status.success(), "{}\n{}", String::from_utf8_lossy(&run.stdout), String::from_utf8_lossy(&run.stderr));
    assert!(started.elapsed() < Duration::from_secs(120));
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(stdout.contains("replay j1: 2 of 2 shards done"), "{stdout}");

    let rows = duckdb(&format!(
        "select count(*), count(distinct session_id), min(session_id), max(session_id), count(*) filter (where not starts_with(session_id, 'inside-')) \
         from read_json_auto('{}/backfill/events/**/*.gz', format = 'newline_delimited')",
        out.display()
    ));
    assert_eq!(rows[0][0].as_u64(), Some(300), "{rows:?}");
    assert_eq!(rows[0][1].as_u64(), Some(300));
    assert_eq!(rows[0][4].as_u64(), Some(0), "only the window's records: {rows:?}");
    // The live namespace never saw a lease; the job's namespace holds the ended leases.
    let db = dir.path().join("leases.db");
    assert!(SqliteLeaseTable::open(&db, "live").unwrap().list().await.unwrap().is_empty());
    let job = SqliteLeaseTable::open(&db, "live-replay-j1").unwrap().list().await.unwrap();
    assert!(job.len() == 2 && job.iter().all(|l| l.ended), "{job:?}");
    // Status reports the finished job.
    let status = replay(&cfg, &[args, vec!["--status".into()]].concat());
    assert!(
        String::from_utf8_lossy(&status.stdout).contains("job j1: done; 2 of 2 shards done"),
        "{}",
        String::from_utf8_lossy(&status.stdout)
    );
}
