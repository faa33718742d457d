//! weir's Iceberg writer through an Iceberg REST catalog (`tests/emulators/iceberg_rest.py`:
//! the REST protocol over pyiceberg's SQL catalog, which checks every commit's
//! requirements), with the faults a long-running worker meets there: OAuth2 tokens
//! that expire, commits another writer beat, and commits whose answer is lost (a
//! gateway's 504 after the catalog applied them). pyiceberg reads the rows back from
//! the SQLite file directly.
#![allow(clippy::unwrap_used)] // a test: a failed expectation is a failed test

use std::path::Path;
use std::time::Duration;

use bytes::Bytes;
use iceberg::{NamespaceIdent, TableIdent};
use serde_json::Value;
use weir_aws::iceberg_catalog::S3FileSettings;
use weir_aws::iceberg_rest::{RestSettings, rest_catalog};
use weir_core::{ExtendedSequenceNumber, SequenceNumber, ShardId};
use weir_iceberg::{ShardRecords, TableWriter};
use weir_testkit::Emulator;

const CREDENTIAL: &str = "weir-client:weir-secret";

/// A SQL catalog in `dir` with table `mcp.events` made by pyiceberg, served over REST
/// with OAuth2 client credentials and `faults` (iceberg_rest.py's flags).
fn catalog(dir: &Path, faults: &[&str]) -> (Emulator, String, String) {
    let (db, warehouse) = (dir.join("catalog.db"), dir.join("warehouse"));
    std::fs::create_dir_all(&warehouse).unwrap();
    let (db, warehouse) = (db.display().to_string(), warehouse.display().to_string());
    weir_e2e::pyiceberg(weir_e2e::PYICEBERG_CREATE_MCP_TABLES, &[db.as_str(), warehouse.as_str()]);
    let mut args = vec!["--database", db.as_str(), "--warehouse", warehouse.as_str(), "--credential", CREDENTIAL];
    args.extend_from_slice(faults);
    (Emulator::start("iceberg-rest", &args), db, warehouse)
}

/// The fixture's counters: tokens issued, requests refused (401), commits applied,
/// conflicts (409), answers lost (504).
fn counters(rest: &Emulator) -> Value {
    let out = std::process::Command::new("curl").arg("-sf").arg(format!("{}/test/counters", rest.endpoint)).output();
    serde_json::from_slice(&out.unwrap().stdout).unwrap()
}

fn pos(n: u64) -> ExtendedSequenceNumber {
    ExtendedSequenceNumber::plain(SequenceNumber::from_u128(u128::from(n) * 1000 + 7))
}

async fn writer(rest: &Emulator) -> TableWriter {
    let settings =
        RestSettings { uri: rest.endpoint.clone(), credential: Some(CREDENTIAL.into()), ..RestSettings::default() };
    let catalog = rest_catalog(settings, &S3FileSettings::default()).await.unwrap();
    TableWriter::new(catalog, TableIdent::new(NamespaceIdent::new("mcp".into()), "events".into()), "archive")
        .with_attempts(50)
}

/// Two writers racing over overlapping batches of one shard through the REST
/// catalog, whose tokens last 7 requests and whose every 4th commit is answered 504
/// after it was applied. Each writer retries its batch until it succeeds, as the
/// consumer does: pyiceberg finds every record once, and the counters show each
/// fault happened.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_writers_through_expiring_tokens_and_lost_answers_leave_each_record_once() {
    let dir = tempfile::tempdir().unwrap();
    let (rest, db, warehouse) = catalog(dir.path(), &["--token-uses", "7", "--unknown-every", "4"]);
    let (a, b) = (writer(&rest).await, writer(&rest).await);
    let records: Vec<_> = (0..240).map(|i| (pos(i), Bytes::from(weir_e2e::storm::event(i)))).collect();
    let shard = ShardId::new("shardId-000000000000");
    let batch = |from: usize, to: usize| {
        vec![ShardRecords { shard: shard.clone(), end: pos(to as u64 - 1), records: records[from..to].to_vec() }]
    };
    // The consumer's answer to a failed commit: the same records again, later.
    async fn until_committed(w: &TableWriter, batch: &[ShardRecords], lost: &mut u32) -> u32 {
        for _ in 0..20 {
            match w.commit(batch).await {
                Ok(done) => return done.conflicts,
                Err(e) => {
                    assert!(e.to_string().contains("commit state is unknown"), "only lost answers fail: {e}");
                    *lost += 1;
                }
            }
        }
        panic!("the batch never committed");
    }
    let (mut conflicts, mut lost_a, mut lost_b) = (0, 0, 0);
    for round in 0..8 {
        let (x, y) = (round * 30, round * 30 + 30);
        let (ba, bb) = (batch(x, y), batch(x.saturating_sub(10), y - 5));
        let (ca, cb) = tokio::join!(until_committed(&a, &ba, &mut lost_a), until_committed(&b, &bb, &mut lost_b));
        conflicts += ca + cb;
    }
    let count = weir_e2e::pyiceberg(weir_e2e::PYICEBERG_COUNT, &[db.as_str(), warehouse.as_str(), "mcp.events"]);
    let got = &count["mcp.events"];
    assert_eq!(got["distinct"], 240, "none lost: {got}");
    assert_eq!(got["rows"], 240, "none twice: {got}");
    assert_eq!(got["wrong"], 0, "each row is its record: {got}");
    let c = counters(&rest);
    println!("REST catalog over 8 racing rounds: {conflicts} conflicts seen by the writers, fixture {c}");
    assert!(c["conflicts"].as_u64().unwrap() > 0, "the writers raced: the catalog refused stale commits: {c}");
    assert!(c["unknown"].as_u64().unwrap() > 0 && lost_a + lost_b > 0, "answers were lost: {c}");
    assert!(c["unauthorized"].as_u64().unwrap() > 0, "tokens expired: {c}");
    assert!(c["tokens"].as_u64().unwrap() > 2, "the writers asked for new tokens: {c}");
}

/// `weir run` into a table of a REST catalog, its OAuth2 client credentials from the
/// environment variable the config names (tokens expire every 3 requests, every 2nd
/// commit's answer is lost), until caught up, three times: pyiceberg finds each
/// record once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn weir_run_writes_through_a_rest_catalog() {
    use weir_aws::kinesis::producer::{Outgoing, Producer};
    let dir = tempfile::tempdir().unwrap();
    let (rest, db, warehouse) = catalog(dir.path(), &["--token-uses", "3", "--unknown-every", "2"]);
    let fk = Emulator::start("ferrokinesis", &[]);
    let k = weir_e2e::kinesis(&fk.endpoint).await;
    weir_e2e::create_stream(&k, "rest-events", 2).await;
    let put = |from: u64, to: u64| {
        (from..to)
            .map(|i| Outgoing { id: i, partition_key: format!("pk-{i}"), data: weir_e2e::storm::event(i).into() })
            .collect()
    };
    assert_eq!(Producer::new(k.clone(), "rest-events").put_all(put(0, 500)).await.accepted.len(), 500);
    let consumer = format!(
        "[[consumers]]\nname = \"rest-table\"\ntype = \"iceberg\"\ntable = \"mcp.events\"\nbuffer_interval_seconds = 1\n\
         catalog = {{ type = \"rest\", uri = \"{}\", credential_env = \"LAKE_CREDENTIAL\", properties = {{ scope = \"catalog\" }} }}\n\
         error_output = {{ directory = \"{}\" }}\n",
        rest.endpoint,
        dir.path().join("errors").display()
    );
    let aws = format!("kinesis_endpoint_url = \"{}\"\n", fk.endpoint);
    let cfg = weir_e2e::one_worker_config(dir.path(), "rest-events", "rest", &aws, &consumer);
    let run = || {
        let mut cmd = weir_e2e::weir_command();
        cmd.arg("run").arg("--config").arg(&cfg).arg("--until-caught-up").env("LAKE_CREDENTIAL", CREDENTIAL);
        let (out, _) = weir_e2e::timed(cmd, Duration::from_secs(120));
        let said = format!("{}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success(), "{said}");
    };
    run();
    for wave in [500, 800] {
        assert_eq!(Producer::new(k.clone(), "rest-events").put_all(put(wave, wave + 300)).await.accepted.len(), 300);
        run();
    }
    let count = weir_e2e::pyiceberg(weir_e2e::PYICEBERG_COUNT, &[db.as_str(), warehouse.as_str(), "mcp.events"]);
    let got = &count["mcp.events"];
    assert_eq!(
        (got["distinct"].as_u64(), got["rows"].as_u64(), got["wrong"].as_u64()),
        (Some(1100), Some(1100), Some(0))
    );
    let c = counters(&rest);
    println!("weir run through the REST catalog: {got}, fixture {c}");
    assert!(c["unauthorized"].as_u64().unwrap() > 0 && c["unknown"].as_u64().unwrap() > 0, "faults happened: {c}");
    assert!(weir_e2e::files(&dir.path().join("errors")).is_empty(), "every record fits the table");

    // Without the variable the worker refuses to start, naming the field.
    let mut cmd = weir_e2e::weir_command();
    cmd.arg("run").arg("--config").arg(&cfg).arg("--until-caught-up").env_remove("LAKE_CREDENTIAL");
    let (out, _) = weir_e2e::timed(cmd, Duration::from_secs(120));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && said.contains("credential_env") && said.contains("LAKE_CREDENTIAL"), "{said}");
}
