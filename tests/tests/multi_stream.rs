//! Two Kinesis streams (ferrokinesis) read by one fleet of two `weir run` workers
//! through `[[streams]]`, leases in one DynamoDB namespace (moto). One stream is split
//! while records flow. An archiver of both streams and one of stream b only: DuckDB
//! counts every record of each stream exactly once, and the stream-b archiver holds
//! stream b's records and nothing else. Then stream b is dropped from the config: its
//! leases are listed as unconfigured and a worker leaves them alone.
#![allow(clippy::unwrap_used, clippy::print_stdout)] // a test: a failed expectation is a failed test

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use weir_aws::DynamoDbLeaseTable;
use weir_aws::kinesis::producer::Producer;
use weir_core::ports::LeaseTable;
use weir_e2e::patience::{Patience, cpu_ticks};
use weir_e2e::{
    KillOnDrop, archiver_toml, create_stream, duckdb, dynamodb, gz_lines, kinesis, metadata_extraction, put_wave,
    spawn_weir, split_shard, weir_command, worker_toml,
};
use weir_testkit::Emulator;

const A: &str = "multi-a";
const B: &str = "multi-b";

fn config(dir: &Path, kinesis: &str, moto: &str, id: &str, streams: &[&str]) -> std::path::PathBuf {
    let path = dir.join(format!("{id}.toml"));
    let streams: String =
        streams.iter().map(|s| format!("[[streams]]\nkind = \"kinesis\"\nname = \"{s}\"\n")).collect();
    let archiver = |name: &str, out: &str, only: &str| {
        archiver_toml(
            name,
            &format!("directory = \"{}\"\n{only}", dir.join(out).display()),
            "mcp-normalize",
            "events/tenant=!{partitionKeyFromQuery:tenantId}/",
            "errors/!{firehose:error-output-type}/",
            1,
            &metadata_extraction("{tenantId: .tenant_id}", false),
        )
    };
    let text = format!(
        "{worker}\n{streams}\n[leases]\nkind = \"dynamodb\"\ntable = \"weir-multi\"\ncreate_table = true\nnamespace = \"multi\"\n\
         [aws]\nkinesis_endpoint_url = \"{kinesis}\"\ndynamodb_endpoint_url = \"{moto}\"\n[http]\nlisten = \"\"\n{all}{only_b}",
        worker = worker_toml(Some(id)),
        all = archiver("archive", "out", ""),
        only_b = if streams.contains(B) {
            archiver("archive-b", "out-b", &format!("streams = [\"{B}\"]"))
        } else {
            String::new()
        },
    );
    std::fs::write(&path, text).unwrap();
    path
}

/// Rows, distinct session ids, and rows per wave (the session id's prefix) archived
/// under `dir/events`.
fn counts(dir: &Path) -> (i64, i64, BTreeMap<String, i64>) {
    let glob = format!("{}/events/**/*.gz", dir.display());
    let total = duckdb(&format!(
        "select count(*), count(distinct session_id) from read_json_auto('{glob}', format = 'newline_delimited')"
    ));
    let per_wave = duckdb(&format!(
        "select split_part(session_id, '-', 1), count(*) from read_json_auto('{glob}', format = 'newline_delimited') group by 1 order by 1"
    ));
    (
        total[0][0].as_i64().unwrap(),
        total[0][1].as_i64().unwrap(),
        per_wave.iter().map(|r| (r[0].as_str().unwrap().to_owned(), r[1].as_i64().unwrap())).collect(),
    )
}

fn terminate(child: &KillOnDrop) {
    let status = std::process::Command::new("kill").args(["-TERM", &child.0.id().to_string()]).status().unwrap();
    assert!(status.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_streams_one_fleet_counted_per_stream() {
    let fk = Emulator::start("ferrokinesis", &[]);
    let moto = Emulator::start("moto", &[]);
    let k = kinesis(&fk.endpoint).await;
    create_stream(&k, A, 2).await;
    create_stream(&k, B, 1).await;
    let (pa, pb) = (Producer::new(k.clone(), A), Producer::new(k.clone(), B));
    put_wave(&pa, "a1", 400).await;
    put_wave(&pb, "b1", 300).await;

    let dir = tempfile::tempdir().unwrap();
    let mut w1 = KillOnDrop(spawn_weir(
        &config(dir.path(), &fk.endpoint, &moto.endpoint, "w1", &[A, B]),
        &dir.path().join("w1.log"),
    ));
    let mut w2 = KillOnDrop(spawn_weir(
        &config(dir.path(), &fk.endpoint, &moto.endpoint, "w2", &[A, B]),
        &dir.path().join("w2.log"),
    ));
    split_shard(&k, B, "shardId-000000000000").await;
    put_wave(&pb, "b2", 300).await;
    put_wave(&pa, "a2", 200).await;

    let mut patience = Patience::new(Duration::from_secs(120));
    loop {
        let (all, only_b) =
            (gz_lines(&dir.path().join("out/events")).len(), gz_lines(&dir.path().join("out-b/events")).len());
        if all >= 1200 && only_b >= 600 {
            break;
        }
        if let Err(why) = patience.observe((all, only_b, cpu_ticks(w1.0.id()), cpu_ticks(w2.0.id()))) {
            panic!(
                "{why}: archived {all} of 1200 and {only_b} of 600; w1: {}\nw2: {}",
                std::fs::read_to_string(dir.path().join("w1.log")).unwrap_or_default(),
                std::fs::read_to_string(dir.path().join("w2.log")).unwrap_or_default()
            );
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let table = DynamoDbLeaseTable::open(dynamodb(&moto.endpoint).await, "weir-multi", "multi", false).await.unwrap();
    let leases = table.list().await.unwrap();
    let keys: Vec<String> = leases.iter().map(|l| l.key.to_string()).collect();
    assert_eq!(keys.iter().filter(|k| k.starts_with("shardId-")).count(), 2, "stream a keeps bare keys: {keys:?}");
    assert_eq!(keys.iter().filter(|k| k.starts_with("multi-b:shardId-")).count(), 3, "b, split: {keys:?}");
    let owners: std::collections::BTreeSet<String> =
        leases.iter().filter(|l| !l.ended).filter_map(|l| l.owner.as_ref().map(|o| o.to_string())).collect();
    assert_eq!(owners.len(), 2, "both workers hold leases of the two streams: {leases:?}");
    terminate(&w1);
    terminate(&w2);
    assert!(w1.0.wait().unwrap().success());
    assert!(w2.0.wait().unwrap().success());

    let (rows, distinct, waves) = counts(&dir.path().join("out"));
    println!("all streams: {rows} rows, {distinct} distinct, per wave {waves:?}");
    assert_eq!((rows, distinct), (1200, 1200), "every record of both streams once");
    assert_eq!(waves, [("a1", 400), ("a2", 200), ("b1", 300), ("b2", 300)].map(|(w, n)| (w.to_owned(), n)).into());
    let (rows, distinct, waves) = counts(&dir.path().join("out-b"));
    println!("stream b only: {rows} rows, {distinct} distinct, per wave {waves:?}");
    assert_eq!((rows, distinct), (600, 600));
    assert_eq!(waves, [("b1", 300), ("b2", 300)].map(|(w, n)| (w.to_owned(), n)).into());

    // Stream b leaves the config: listed as unconfigured, left alone by a worker.
    let only_a = config(dir.path(), &fk.endpoint, &moto.endpoint, "w3", &[A]);
    let before: BTreeMap<String, u64> =
        table.list().await.unwrap().iter().map(|l| (l.key.to_string(), l.counter)).collect();
    put_wave(&pb, "b3", 100).await;
    put_wave(&pa, "a3", 100).await;
    let mut run = weir_command();
    run.args(["run", "--until-caught-up", "--config", only_a.to_str().unwrap()]);
    let (out, _) = weir_e2e::timed(run, Duration::from_secs(90));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("(100 records processed)"), "only stream a's new records: {stdout}");
    for l in table.list().await.unwrap().iter().filter(|l| l.key.as_str().starts_with("multi-b:")) {
        assert_eq!(Some(&l.counter), before.get(l.key.as_str()), "untouched: {l:?}");
        assert_eq!(l.owner, None, "{l:?}");
    }
    let mut list = weir_command();
    list.args(["leases", "list", "--config", only_a.to_str().unwrap()]);
    let (out, _) = weir_e2e::timed(list, Duration::from_secs(30));
    let table_text = String::from_utf8_lossy(&out.stdout);
    println!("{table_text}");
    let unconfigured = table_text
        .lines()
        .filter(|l| l.starts_with("multi-b:") && !l.contains(" ended "))
        .all(|l| l.contains("unconfigured (stream \"multi-b\" is not in [[streams]])"));
    assert!(unconfigured, "{table_text}");
    assert!(table_text.lines().any(|l| l.contains("unconfigured")), "{table_text}");
}
