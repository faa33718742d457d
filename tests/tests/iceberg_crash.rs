//! The Iceberg destination under SIGKILL: three `weir run` workers on a 4-shard
//! stream (ferrokinesis), DynamoDB leases (moto), two tables in one SQL catalog
//! (SQLite file and warehouse directory shared by the workers, made by pyiceberg).
//! Records are put while workers are killed at random moments and replaced; pyiceberg
//! then counts the rows.
//!
//! Each table has its consumer: `table-eo` in exactly-once mode, `table-alo` in
//! at-least-once mode (no positions in the table). Workers commit every second and
//! checkpoint only every 5 s, so a killed worker leaves commits its checkpoints do not
//! cover: the exactly-once table must hold every record once, the at-least-once table
//! must show duplicates — the storm is strong enough to fail the first assertion if
//! the positions did nothing.
#![allow(clippy::unwrap_used)] // a test: a failed expectation is a failed test

use std::path::{Path, PathBuf};

use serde_json::Value;
use weir_aws::DynamoDbLeaseTable;
use weir_e2e::storm::{Storm, logs, wait_checkpoints};
use weir_e2e::{create_stream, dynamodb, kinesis, worker_toml};
use weir_testkit::Emulator;

const RECORDS: u64 = 20_000;
const WAVES: u64 = 10;
const MIN_KILLS: usize = 20;

fn config(dir: &Path, kinesis: &str, moto: &str, id: &str, catalog: &str) -> PathBuf {
    let path = dir.join(format!("{id}.toml"));
    // Checkpoints every 5 s, commits every second: a kill leaves commits no
    // checkpoint covers (the at-least-once table's duplicates).
    let worker = worker_toml(Some(id)).replace("checkpoint_interval = \"300ms\"", "checkpoint_interval = \"5s\"");
    assert!(worker.contains("\"5s\""), "{worker}");
    let table = |name: &str, table: &str, mode: &str| {
        format!(
            "[[consumers]]\nname = \"{name}\"\ntype = \"iceberg\"\ntable = \"{table}\"\nmode = \"{mode}\"\n\
             catalog = {catalog}\nbuffer_interval_seconds = 1\n\
             error_output = {{ directory = \"{errors}\" }}\n",
            errors = dir.join("errors").display(),
        )
    };
    let text = format!(
        "{worker}\n[stream]\nkind = \"kinesis\"\nname = \"ice-crash\"\n\
         [leases]\nkind = \"dynamodb\"\ntable = \"weir-ice-leases\"\ncreate_table = true\nnamespace = \"ice\"\n\
         [aws]\nkinesis_endpoint_url = \"{kinesis}\"\ndynamodb_endpoint_url = \"{moto}\"\n[http]\nlisten = \"\"\n\
         {eo}{alo}",
        eo = table("table-eo", "mcp.eo", "exactly-once"),
        alo = table("table-alo", "mcp.alo", "at-least-once"),
    );
    std::fs::write(&path, text).unwrap();
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_storm_leaves_each_record_once_in_the_table() {
    let records = RECORDS;
    let fk = Emulator::start("ferrokinesis", &[]);
    let moto = Emulator::start("moto", &[]);
    let k = kinesis(&fk.endpoint).await;
    create_stream(&k, "ice-crash", 4).await;
    let dir = tempfile::tempdir().unwrap();
    let (db, warehouse) = (dir.path().join("catalog.db"), dir.path().join("warehouse"));
    std::fs::create_dir_all(&warehouse).unwrap();
    let (db_s, wh_s) = (db.display().to_string(), warehouse.display().to_string());
    weir_e2e::pyiceberg(weir_e2e::PYICEBERG_CREATE_MCP_TABLES, &[db_s.as_str(), wh_s.as_str(), "mcp.eo", "mcp.alo"]);
    let catalog = format!("{{ type = \"sql\", database = \"{db_s}\", warehouse = \"{wh_s}\" }}");

    let (kinesis_url, moto_url) = (fk.endpoint.clone(), moto.endpoint.clone());
    let mut storm = Storm::start(dir.path(), 3, move |dir, id| config(dir, &kinesis_url, &moto_url, id, &catalog));
    let (last, kills) =
        storm.put_while_killing(&k, "ice-crash", records, WAVES, MIN_KILLS + 2, weir_e2e::storm::event).await;
    eprintln!("{kills} kills; waiting for both tables' consumers to finish");
    let leases =
        DynamoDbLeaseTable::open(dynamodb(&moto.endpoint).await, "weir-ice-leases", "ice", true).await.unwrap();
    wait_checkpoints(&leases, &last, &["table-eo", "table-alo"], dir.path()).await;
    let log_text = logs(dir.path());
    storm.stop();
    assert!(kills >= MIN_KILLS);

    let counts = weir_e2e::pyiceberg(weir_e2e::PYICEBERG_COUNT, &[db_s.as_str(), wh_s.as_str(), "mcp.eo", "mcp.alo"]);
    let (eo, alo) = (&counts["mcp.eo"], &counts["mcp.alo"]);
    eprintln!("{records} records, {kills} kills: exactly-once {eo}; at-least-once {alo}");
    let n = |v: &Value, k: &str| v[k].as_u64().unwrap();
    assert_eq!(n(eo, "distinct"), records, "exactly-once: none lost\n{log_text}");
    assert_eq!(n(eo, "rows"), records, "exactly-once: none twice ({} ids twice)\n{log_text}", n(eo, "twice"));
    assert_eq!(n(eo, "wrong"), 0, "each row's fields are its record's");
    assert_eq!(n(alo, "distinct"), records, "at-least-once: none lost");
    assert_eq!(n(alo, "wrong"), 0);
    assert!(
        n(alo, "rows") > records,
        "without positions the storm must leave duplicates, or it cannot tell exactly-once from luck: {alo}"
    );
    let errors = weir_e2e::files(&dir.path().join("errors"));
    assert!(errors.is_empty(), "every record fits the table, yet the error output has {errors:?}");
}
