//! `weir replay` against ferrokinesis: waves of records put seconds apart, with a split
//! and a merge inside the window; a live `weir run` (on enhanced fan-out) archives
//! everything and keeps running. The window is replayed through the archiver into a
//! `backfill/` prefix in its own lease namespace, by polling, while the live worker
//! runs: DuckDB finds exactly the window's records, none twice, across parents and
//! children; the live checkpoints do not move. A window older than the stream's
//! retention is refused.
#![allow(clippy::unwrap_used, clippy::print_stdout)] // a test: a failed expectation is a failed test

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use weir_aws::kinesis::producer::Producer;
use weir_core::ports::LeaseTable;
use weir_core::{Clock, SystemClock};
use weir_e2e::patience::{Patience, cpu_ticks};
use weir_e2e::{
    KillOnDrop, archiver_toml, create_stream, duckdb, free_port, gz_lines, kinesis, merge_shards, metadata_extraction,
    open_shards, put_wave, spawn_weir, split_shard, weir_command, worker_toml,
};
use weir_local::SqliteLeaseTable;
use weir_testkit::Emulator;

const STREAM: &str = "replay-events";

fn replay(config: &Path, args: &[String]) -> std::process::Output {
    weir_command().args(["replay", "--config"]).arg(config).args(args).output().unwrap()
}

fn config(dir: &Path, kinesis: &str) -> std::path::PathBuf {
    let port = free_port();
    let cfg = dir.join("weir.toml");
    std::fs::write(
        &cfg,
        format!(
            r#"
{worker}
initial_position = "TRIM_HORIZON"
[stream]
kind = "kinesis"
name = "{STREAM}"
efo_consumer = "live-efo"
[leases]
path = "{leases}"
namespace = "live"
[aws]
kinesis_endpoint_url = "{kinesis}"
[http]
listen = "127.0.0.1:{port}"
{archiver}
"#,
            worker = worker_toml(None),
            leases = dir.join("leases.db").display(),
            archiver = archiver_toml(
                "archive",
                &format!("directory = \"{}\"", dir.join("archive").display()),
                "mcp-normalize",
                "events/tenant=!{partitionKeyFromQuery:t}/",
                "errors/!{firehose:error-output-type}/",
                1,
                &metadata_extraction("{t: .tenant_id}", false),
            ),
        ),
    )
    .unwrap();
    cfg
}

async fn live_checkpoints(db: &Path) -> BTreeMap<String, String> {
    let leases = SqliteLeaseTable::open(db, "live").unwrap().list().await.unwrap();
    leases.iter().map(|l| (l.key.to_string(), format!("{:?} ended={}", l.checkpoints, l.ended))).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replaying_a_window_across_a_reshard_archives_exactly_its_records() {
    let fk = Emulator::start("ferrokinesis", &[]);
    let k = kinesis(&fk.endpoint).await;
    create_stream(&k, STREAM, 2).await;
    let p = Producer::new(k.clone(), STREAM);
    // Arrival times come from the emulator's clock at put time, and ferrokinesis rounds
    // them to the nearest second: the window's edges are whole seconds with a second of
    // margin on each side of every wave (this waits for time to pass; it synchronises
    // nothing). The expected set is still taken from the arrival times the live archive
    // recorded, not from these waits.
    let edge = || (SystemClock.now().as_millis() / 1000 + 2) * 1000;
    let until =
        |t: i64| tokio::time::sleep(Duration::from_millis((t - SystemClock.now().as_millis()).max(0) as u64 + 600));
    put_wave(&p, "before", 200).await;
    let from = edge();
    until(from).await;
    put_wave(&p, "inside1", 300).await;
    let first = open_shards(&k, STREAM).await[0].0.clone();
    split_shard(&k, STREAM, &first).await;
    put_wave(&p, "inside2", 300).await;
    let mut children: Vec<(String, u128, u128)> =
        open_shards(&k, STREAM).await.into_iter().filter(|s| s.0 != first).collect();
    children.sort_by_key(|s| s.1);
    let adjacent = children.windows(2).find(|w| w[0].2 + 1 == w[1].1).expect("two adjacent shards");
    merge_shards(&k, STREAM, &adjacent[0].0, &adjacent[1].0).await;
    put_wave(&p, "inside3", 300).await;
    let to = edge();
    until(to).await;
    put_wave(&p, "after", 200).await;
    let shard_count = k.list_shards().stream_name(STREAM).send().await.unwrap().shards().len();
    assert_eq!(shard_count, 5, "2 shards, a split (2 children), a merge (1 child)");

    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), &fk.endpoint);
    let db = dir.path().join("leases.db");
    let out = dir.path().join("archive");

    // The live worker archives everything, then stays up during the replay.
    let mut live = KillOnDrop(spawn_weir(&cfg, &dir.path().join("live.log")));
    let mut patience = Patience::new(Duration::from_secs(120));
    loop {
        let archived = gz_lines(&out.join("events")).len();
        if archived >= 1_300 {
            break;
        }
        if let Err(why) = patience.observe((archived, cpu_ticks(live.0.id()))) {
            panic!(
                "live archive incomplete: {archived} of 1300: {why}\n{}",
                std::fs::read_to_string(dir.path().join("live.log")).unwrap_or_default()
            );
        }
        assert!(
            live.0.try_wait().unwrap().is_none(),
            "the live worker exited:\n{}",
            std::fs::read_to_string(dir.path().join("live.log")).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let mut before = live_checkpoints(&db).await;
    // Wait for the last checkpoints of the shards just archived to be written.
    // Moving is progress here: only the backstop ends a wait whose checkpoints never settle.
    let mut patience = Patience::new(Duration::from_secs(30));
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let now = live_checkpoints(&db).await;
        if now == before {
            break;
        }
        if let Err(why) = patience.observe(&now) {
            panic!("live checkpoints keep moving: {why}: {now:?}");
        }
        before = now;
    }
    assert_eq!(before.len(), 5, "live leases for every shard: {before:?}");

    let old = replay(
        &cfg,
        &["--from".into(), "0".into(), "--to".into(), "1000".into(), "--consumers".into(), "archive".into()],
    );
    assert!(!old.status.success());
    assert!(String::from_utf8_lossy(&old.stderr).contains("retention"), "{}", String::from_utf8_lossy(&old.stderr));

    let args: Vec<String> = [
        "--stream",
        STREAM,
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
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(stdout.contains("replay j1: 5 of 5 shards done"), "{stdout}");

    let rows = duckdb(&format!(
        "select count(*), count(distinct session_id), count(*) filter (where not starts_with(session_id, 'inside')) \
         from read_json_auto('{}/backfill/events/**/*.gz', format = 'newline_delimited')",
        out.display()
    ));
    assert_eq!(rows[0][0].as_u64(), Some(900), "{rows:?}");
    assert_eq!(rows[0][1].as_u64(), Some(900), "none twice: {rows:?}");
    assert_eq!(rows[0][2].as_u64(), Some(0), "only the window's records: {rows:?}");
    // Exactly the records whose arrival (timestamp_utc: the records carry no `ts`) the
    // live archive recorded inside [from, to).
    let diff = duckdb(&format!(
        "with live as (select session_id from read_json_auto('{o}/events/**/*.gz', format = 'newline_delimited') \
           where epoch_ms(timestamp_utc::timestamp) >= {from} and epoch_ms(timestamp_utc::timestamp) < {to}), \
         replayed as (select session_id from read_json_auto('{o}/backfill/events/**/*.gz', format = 'newline_delimited')) \
         select (select count(*) from live), (select count(*) from (select * from live except all select * from replayed)), \
                (select count(*) from (select * from replayed except all select * from live))",
        o = out.display()
    ));
    assert_eq!(diff[0].iter().map(|v| v.as_u64().unwrap()).collect::<Vec<_>>(), vec![900, 0, 0], "{diff:?}");
    // The live checkpoints did not move; the job's namespace holds its own ended leases.
    assert_eq!(live_checkpoints(&db).await, before, "live checkpoints unchanged");
    assert!(live.0.try_wait().unwrap().is_none(), "the live worker ran throughout");
    drop(live);
    let job = SqliteLeaseTable::open(&db, "live-replay-j1").unwrap().list().await.unwrap();
    assert!(job.len() == 5 && job.iter().all(|l| l.ended), "{job:?}");
    assert_eq!(gz_lines(&out.join("events")).len(), 1_300, "the live archive is untouched");
    let status = replay(&cfg, &[args, vec!["--status".into()]].concat());
    assert!(
        String::from_utf8_lossy(&status.stdout).contains("job j1: done; 5 of 5 shards done"),
        "{}",
        String::from_utf8_lossy(&status.stdout)
    );
}
