//! A replay job shared by two `weir replay` workers (ferrokinesis, DynamoDB leases and
//! S3 on moto), both killed with SIGKILL midway, then resumed by a third worker: the
//! job continues from its own checkpoints (the new worker reads fewer records than the
//! window holds) and DuckDB finds every record of the window exactly once in the
//! backfill prefix. That prefix is then replayed from S3 with `--from-archive` into
//! another partitioning: the same records.
#![allow(clippy::unwrap_used, clippy::print_stdout)] // a test: a failed expectation is a failed test

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use bytes::Bytes;
use weir_aws::DynamoDbLeaseTable;
use weir_aws::kinesis::producer::{Accepted, Outgoing, Producer};
use weir_core::ports::LeaseTable;
use weir_core::{Checkpoint, Clock, ConsumerName, SequenceNumber, ShardId, SystemClock};
use weir_e2e::patience::{Patience, cpu_ticks, file_len};
use weir_e2e::{
    KillOnDrop, archiver_toml, create_stream, download, duckdb, dynamodb, kinesis, metadata_extraction, s3,
    weir_command, worker_toml,
};
use weir_testkit::Emulator;

const STREAM: &str = "fleet-events";
const RECORDS: u64 = 20_000;

fn config(dir: &Path, kinesis: &str, moto: &str, id: &str) -> PathBuf {
    let path = dir.join(format!("{id}.toml"));
    std::fs::write(
        &path,
        format!(
            r#"
{worker}
[stream]
kind = "kinesis"
name = "{STREAM}"
[leases]
kind = "dynamodb"
table = "weir-replay-leases"
create_table = true
namespace = "fleet"
[aws]
kinesis_endpoint_url = "{kinesis}"
dynamodb_endpoint_url = "{moto}"
s3_endpoint_url = "{moto}"
s3_force_path_style = true
{archiver}
"#,
            worker = worker_toml(Some(id)),
            archiver = archiver_toml(
                "archive",
                "bucket = \"weir-replay\"",
                "mcp-normalize",
                "events/tenant=!{partitionKeyFromQuery:tenantId}/",
                "errors/!{firehose:error-output-type}/",
                1,
                &metadata_extraction("{tenantId: .tenant_id}", false),
            ),
        ),
    )
    .unwrap();
    path
}

/// Puts the wave; returns where each record landed.
async fn wave(p: &Producer, name: &str, range: std::ops::Range<u64>) -> Vec<Accepted> {
    let n = range.end - range.start;
    let records = range
        .map(|i| Outgoing {
            id: i,
            partition_key: format!("pk-{}", i % 101),
            data: Bytes::from(format!(r#"{{"tenantId":"t-{}","toolName":"x","sessionId":"{name}-{i}"}}"#, i % 5)),
        })
        .collect();
    let accepted = p.put_all(records).await.accepted;
    assert_eq!(accepted.len() as u64, n);
    accepted
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_workers_share_a_job_that_resumes_after_sigkill() {
    let fk = Emulator::start("ferrokinesis", &[]);
    let moto = Emulator::start("moto", &[]);
    let k = kinesis(&fk.endpoint).await;
    create_stream(&k, STREAM, 4).await;
    let s3c = s3(&moto.endpoint).await;
    s3c.create_bucket().bucket("weir-replay").send().await.unwrap();
    let p = Producer::new(k.clone(), STREAM);
    // Whole-second window edges with a second of margin (ferrokinesis rounds arrival
    // times to the second); this waits for time to pass, it synchronises nothing.
    let edge = || (SystemClock.now().as_millis() / 1000 + 2) * 1000;
    let until =
        |t: i64| tokio::time::sleep(Duration::from_millis((t - SystemClock.now().as_millis()).max(0) as u64 + 600));
    wave(&p, "before", 0..500).await;
    let from = edge();
    until(from).await;
    // The first record of the window on each shard.
    let mut window_starts: BTreeMap<ShardId, SequenceNumber> = BTreeMap::new();
    for w in 0..4 {
        for a in wave(&p, "in", w * RECORDS / 4..(w + 1) * RECORDS / 4).await {
            let first = window_starts.entry(a.shard).or_insert_with(|| a.sequence.clone());
            if a.sequence < *first {
                *first = a.sequence;
            }
        }
    }
    let to = edge();
    until(to).await;

    let dir = tempfile::tempdir().unwrap();
    let run = |id: &str, end_idle: &str| {
        let cfg = config(dir.path(), &fk.endpoint, &moto.endpoint, id);
        let (from, to) = (from.to_string(), to.to_string());
        let args = [
            "--from",
            &from,
            "--to",
            &to,
            "--consumers",
            "archive",
            "--archive-prefix",
            "backfill/",
            "--job",
            "shared",
            "--end-idle",
            end_idle,
        ];
        let log = std::fs::File::create(dir.path().join(format!("{id}.log"))).unwrap();
        let out = std::fs::File::create(dir.path().join(format!("{id}.out"))).unwrap();
        let child = weir_command()
            .args(["replay", "--config"])
            .arg(&cfg)
            .args(args)
            .env("WEIR_LOG", "info")
            .stdout(Stdio::from(out))
            .stderr(Stdio::from(log))
            .spawn()
            .unwrap();
        KillOnDrop(child)
    };
    let logs = || {
        ["w1", "w2", "w3"]
            .iter()
            .map(|id| {
                let text = std::fs::read_to_string(dir.path().join(format!("{id}.log"))).unwrap_or_default();
                let tail: Vec<&str> = text.lines().rev().take(10).collect();
                format!("--- {id}\n{}", tail.into_iter().rev().collect::<Vec<_>>().join("\n"))
            })
            .collect::<Vec<_>>()
            .join("\n")
    };

    // Phase 1: two workers; no record at or after the window's end exists yet and they
    // wait two minutes of silence before calling a shard done, so the job cannot finish.
    let mut w1 = run("w1", "120s");
    let mut w2 = run("w2", "120s");
    let table =
        DynamoDbLeaseTable::open(dynamodb(&moto.endpoint).await, "weir-replay-leases", "fleet-replay-shared", true)
            .await
            .unwrap();
    let archive = ConsumerName::new("archive");
    let mut patience = Patience::new(Duration::from_secs(120));
    let owners = loop {
        let leases = table.list().await.unwrap();
        let owners: BTreeSet<String> = leases.iter().filter_map(|l| l.owner.as_ref().map(|o| o.to_string())).collect();
        // Checkpoints past the window's first record: the first polling call reads one
        // record, so a first checkpoint can stand on it, and a read resumes *at* a
        // checkpoint (it re-reads that record): the new worker would read every record.
        let checkpointed = leases
            .iter()
            .filter(|l| match l.checkpoint_for(&archive) {
                Checkpoint::At(at) => window_starts.get(&l.key).is_some_and(|first| at.sequence > *first),
                _ => false,
            })
            .count();
        if owners.len() == 2 && checkpointed >= 2 && leases.iter().all(|l| !l.ended) {
            break owners;
        }
        // Owners and checkpoints, not whole leases: renewals move the counters forever.
        let seen: Vec<(String, Option<String>, String)> = leases
            .iter()
            .map(|l| (l.key.to_string(), l.owner.as_ref().map(|o| o.to_string()), format!("{:?}", l.checkpoints)))
            .collect();
        if let Err(why) = patience.observe(&seen) {
            panic!("the two workers never shared the job: {why}: {leases:#?}\n{}", logs());
        }
        assert!(w1.0.try_wait().unwrap().is_none() && w2.0.try_wait().unwrap().is_none(), "{}", logs());
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(owners, BTreeSet::from(["w1".to_owned(), "w2".to_owned()]), "both workers hold leases of the job");
    drop(w1); // SIGKILL
    drop(w2);
    let status = weir_command()
        .args(["replay", "--config"])
        .arg(config(dir.path(), &fk.endpoint, &moto.endpoint, "status"))
        .args(["--job", "shared", "--status"])
        .output()
        .unwrap();
    let status = String::from_utf8_lossy(&status.stdout).into_owned();
    assert!(status.contains("job shared: in progress; 0 of 4 shards done"), "{status}");

    // Phase 2: records after the window's end arrive; a new worker resumes the job.
    wave(&p, "after", 0..500).await;
    let mut w3 = run("w3", "5s");
    let mut patience = Patience::new(Duration::from_secs(180));
    while w3.0.try_wait().unwrap().is_none() {
        let seen = (cpu_ticks(w3.0.id()), file_len(&dir.path().join("w3.log")));
        if let Err(why) = patience.observe(seen) {
            panic!("the resumed job did not finish: {why}\n{}", logs());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(w3.0.wait().unwrap().success(), "{}", logs());
    let out = std::fs::read_to_string(dir.path().join("w3.out")).unwrap();
    assert!(out.contains("replay shared: 4 of 4 shards done"), "{out}");
    let read: u64 = out
        .split("this worker read ")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no read count in {out}"));
    assert!(read < RECORDS, "the job resumed from its checkpoints: the new worker read {read} of {RECORDS}");

    let local = dir.path().join("archive");
    let objects = download(&s3c, "weir-replay", "backfill/", &local).await;
    let rows = duckdb(&format!(
        "select count(*), count(distinct session_id), count(*) filter (where not starts_with(session_id, 'in-')), \
                count(*) filter (where tenant <> tenant_id) \
         from read_json_auto('{}/backfill/events/**/*.gz', hive_partitioning = true, format = 'newline_delimited')",
        local.display()
    ));
    let got: Vec<u64> = rows[0].iter().map(|v| v.as_u64().unwrap()).collect();
    assert_eq!(got, vec![RECORDS, RECORDS, 0, 0], "rows, distinct, outside the window, misplaced");
    eprintln!("{objects} objects; the resumed worker read {read} of {RECORDS} records");

    // The backfill archive, read back from S3 with --from-archive into a partitioning by
    // tenant under another prefix: the same 20,000 records.
    let again = dir.path().join("again.toml");
    std::fs::write(
        &again,
        format!(
            "[stream]\nname = \"{STREAM}\"\n[leases]\nkind = \"dynamodb\"\ntable = \"weir-replay-leases\"\nnamespace = \"fleet\"\n\
             [aws]\ndynamodb_endpoint_url = \"{m}\"\ns3_endpoint_url = \"{m}\"\ns3_force_path_style = true\n{}",
            archiver_toml(
                "retenant",
                "bucket = \"weir-replay\"",
                "none",
                "again/t=!{partitionKeyFromQuery:t}/",
                "again-errors/!{firehose:error-output-type}/",
                1,
                &metadata_extraction("{t: .tenant_id}", true),
            ),
            m = moto.endpoint
        ),
    )
    .unwrap();
    let now = SystemClock.now().as_millis().to_string();
    let from_archive = weir_command()
        .args(["replay", "--config"])
        .arg(&again)
        .args(["--from-archive", "s3://weir-replay/backfill/events/", "--from", &(from - 3_600_000).to_string()])
        .args(["--to", &now, "--consumers", "retenant", "--job", "from-s3"])
        .output()
        .unwrap();
    assert!(from_archive.status.success(), "{}", String::from_utf8_lossy(&from_archive.stderr));
    let stdout = String::from_utf8_lossy(&from_archive.stdout);
    // The objects are far below 64 MiB: runs of up to 1,000 consecutive objects.
    let runs = objects.div_ceil(weir_runtime::archive::GROUP_OBJECTS);
    assert!(stdout.contains(&format!("{runs} of {runs} shards done")), "one lease per run of objects: {stdout}");
    let copy = dir.path().join("again");
    download(&s3c, "weir-replay", "again/", &copy).await;
    let rows = duckdb(&format!(
        "select count(*), count(distinct session_id), count(*) filter (where t <> tenant_id) \
         from read_json_auto('{}/again/**/*.gz', hive_partitioning = true, format = 'newline_delimited')",
        copy.display()
    ));
    let got: Vec<u64> = rows[0].iter().map(|v| v.as_u64().unwrap()).collect();
    assert_eq!(got, vec![RECORDS, RECORDS, 0], "the S3 archive replayed: rows, distinct, misplaced");
}
