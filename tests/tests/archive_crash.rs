//! The archiver under SIGKILL: two `weir run` workers on a 4-shard stream
//! (ferrokinesis), DynamoDB leases and S3 (moto); records are put while workers are
//! killed at random moments and replaced. DuckDB then reads the archives back.
//!
//! - 100,000 records, at least 20 kills, two archivers on the same stream: one in
//!   exactly-once mode, one in Firehose mode. Every record exactly once in the first, at
//!   least once in the second, partition columns equal to the record fields. Three more
//!   exactly-once archivers write ZIP, Snappy and Hadoop Snappy to a shared directory:
//!   every record exactly once in each.
//! - At cardinality, in Parquet with a GZIP source-record backup: 5,000 tenant partitions under a 4 MiB buffer budget with a spill
//!   directory (buffers spill to disk, or are sealed for memory, between the kills; a
//!   killed worker's spill files are deleted by the next start), exactly once. Rounds
//!   of thousands of objects keep their intents in manifests: a lease item stays
//!   under DynamoDB's 400 KB (moto enforces it), and manifests are deleted once
//!   checkpoints pass them.
//!   The archive is a local directory shared by the workers: moto's S3 cannot take
//!   thousands of puts a second on a shared 2-core machine (its lease renewals then
//!   time out), and S3 itself is covered by the first scenario and the sink suites.
#![allow(clippy::unwrap_used, clippy::print_stdout)] // a test: a failed expectation is a failed test

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use weir_aws::DynamoDbLeaseTable;
use weir_core::ports::LeaseTable;
use weir_e2e::storm::{Storm, logs, wait_checkpoints};
use weir_e2e::{
    archiver_toml, create_stream, download, duckdb, dynamodb, files, free_port, kinesis, metadata_extraction, s3,
    worker_toml,
};
use weir_testkit::Emulator;

const RECORDS: u64 = 100_000;
const WAVES: u64 = 10;
const MIN_KILLS: usize = 20;

/// The table of mcp-normalize's lines, as an archiver's `columns`.
const MCP_COLUMNS: &str = r#"columns = [
  { name = "schema_version", type = "string" }, { name = "tenant_id", type = "string" },
  { name = "tool_name", type = "string" }, { name = "session_id", type = "string" },
  { name = "timestamp_utc", type = "timestamp" }, { name = "duration_ms", type = "bigint" },
  { name = "success", type = "boolean" }, { name = "error_code", type = "string" },
]"#;

fn archiver(name: &str, mode: &str, prefix: &str) -> String {
    archiver_toml(
        name,
        &format!("bucket = \"weir-crash\"\nmode = \"{mode}\""),
        "mcp-normalize",
        &format!("{prefix}/tenant=!{{partitionKeyFromQuery:tenantId}}/dt=!{{timestamp:yyyy-MM-dd}}/"),
        &format!("{prefix}-errors/!{{firehose:error-output-type}}/"),
        1,
        &metadata_extraction("{tenantId: .tenant_id}", false),
    )
}

fn config(dir: &Path, kinesis: &str, moto: &str, id: &str, consumers: &str) -> PathBuf {
    let path = dir.join(format!("{id}.toml"));
    let text = format!(
        r#"
{worker}

[stream]
kind = "kinesis"
name = "crash-events"

[leases]
kind = "dynamodb"
table = "weir-crash-leases"
create_table = true
namespace = "crash"

[aws]
kinesis_endpoint_url = "{kinesis}"
dynamodb_endpoint_url = "{moto}"
s3_endpoint_url = "{moto}"
s3_force_path_style = true

[http]
listen = "127.0.0.1:{port}"
{consumers}
"#,
        worker = worker_toml(Some(id)),
        port = free_port(),
    );
    std::fs::write(&path, text).unwrap();
    path
}

/// Two workers running `consumers` on `crash-events`.
fn two_workers(dir: &Path, kinesis: &str, moto: &str, consumers: String) -> Storm {
    let (kinesis, moto) = (kinesis.to_owned(), moto.to_owned());
    Storm::start(dir, 2, move |dir, id| config(dir, &kinesis, &moto, id, &consumers))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_storm_exactly_once_and_at_least_once() {
    let fk = Emulator::start("ferrokinesis", &[]);
    let moto = Emulator::start("moto", &[]);
    let k = kinesis(&fk.endpoint).await;
    create_stream(&k, "crash-events", 4).await;
    let s3c = s3(&moto.endpoint).await;
    s3c.create_bucket().bucket("weir-crash").send().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    // Beside them, exactly-once archivers of the formats compressed whole at sealing,
    // into a local directory both workers share.
    let local_formats = dir.path().join("formats");
    let mut consumers =
        format!("{}\n{}", archiver("archive-eo", "exactly-once", "eo"), archiver("archive-fh", "firehose", "fh"));
    for (name, format) in WHOLE_FORMATS {
        let target = format!("directory = \"{}\"\nmode = \"exactly-once\"", local_formats.display());
        let section = archiver_toml(
            name,
            &target,
            "mcp-normalize",
            &format!("{name}/tenant=!{{partitionKeyFromQuery:tenantId}}/"),
            &format!("{name}-errors/!{{firehose:error-output-type}}/"),
            1,
            &metadata_extraction("{tenantId: .tenant_id}", false),
        );
        consumers
            .push_str(&section.replace("CompressionFormat = \"GZIP\"", &format!("CompressionFormat = \"{format}\"")));
    }
    let mut fleet = two_workers(dir.path(), &fk.endpoint, &moto.endpoint, consumers);
    // Kill at random moments while each wave is being archived.
    let (last, kills) =
        fleet.put_while_killing(&k, "crash-events", RECORDS, WAVES, MIN_KILLS + 2, weir_e2e::storm::event).await;
    eprintln!("{kills} kills; waiting for both archivers to finish");

    let leases =
        DynamoDbLeaseTable::open(dynamodb(&moto.endpoint).await, "weir-crash-leases", "crash", true).await.unwrap();
    let names: Vec<&str> =
        ["archive-eo", "archive-fh"].into_iter().chain(WHOLE_FORMATS.iter().map(|(n, _)| *n)).collect();
    wait_checkpoints(&leases, &last, &names, dir.path()).await;
    fleet.stop();
    assert!(kills >= MIN_KILLS);

    let local = dir.path().join("archive");
    let objects = download(&s3c, "weir-crash", "", &local).await;
    let root = local.display();
    let stats = |prefix: &str| {
        duckdb(&format!(
            "select count(*), count(distinct session_id), count(*) filter (where tenant <> tenant_id) \
             from read_json_auto('{root}/{prefix}/*/*/*.gz', hive_partitioning = true, format = 'newline_delimited')"
        ))
    };
    let eo = stats("eo");
    let fh = stats("fh");
    let empty =
        files(&local.join("eo")).iter().filter(|p| std::fs::metadata(p).map(|m| m.len() < 40).unwrap_or(false)).count();
    eprintln!(
        "exactly-once: {empty} claimed keys (empty objects); firehose: {} duplicate rows",
        fh[0][0].as_u64().unwrap_or(0) - RECORDS
    );
    eprintln!("{objects} objects; exactly-once rows/distinct/mismatched {:?}; firehose {:?}", eo[0], fh[0]);
    assert_eq!(eo[0][0].as_u64(), Some(RECORDS), "exactly-once: every record exactly once");
    assert_eq!(eo[0][1].as_u64(), Some(RECORDS));
    assert_eq!(eo[0][2].as_u64(), Some(0), "partition column equals the record field");
    assert_eq!(fh[0][1].as_u64(), Some(RECORDS), "firehose mode: every record at least once");
    assert!(fh[0][0].as_u64().unwrap() >= RECORDS);
    assert_eq!(fh[0][2].as_u64(), Some(0));
    assert!(
        !local.join("eo-errors").exists() && !local.join("fh-errors").exists(),
        "no error output for valid records"
    );
    for (name, format) in WHOLE_FORMATS {
        let mut ids: BTreeMap<String, usize> = BTreeMap::new();
        let mut objects = 0;
        for file in files(&local_formats.join(name)) {
            let body = std::fs::read(&file).unwrap();
            let text =
                weir_core::object_format::decode(weir_core::object_format::ObjectFormat::sniff(&body), &body, u64::MAX)
                    .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
            for line in String::from_utf8(text).unwrap().lines() {
                let v: serde_json::Value = serde_json::from_str(line).unwrap();
                *ids.entry(v["session_id"].as_str().unwrap().to_owned()).or_default() += 1;
            }
            objects += 1;
        }
        let twice = ids.values().filter(|n| **n > 1).count();
        eprintln!("{format}: {objects} objects, {} distinct records, {twice} more than once", ids.len());
        assert_eq!(ids.len() as u64, RECORDS, "{format}: every record");
        assert_eq!(twice, 0, "{format}: exactly once");
        assert!(!local_formats.join(format!("{name}-errors")).exists(), "{format}: no error output");
    }
}

/// Exactly-once archivers of the formats compressed whole when an object is sealed.
const WHOLE_FORMATS: [(&str, &str); 3] = [("zip", "ZIP"), ("snappy", "Snappy"), ("hsnappy", "HADOOP_SNAPPY")];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_storm_at_five_thousand_partitions() {
    const RECORDS: u64 = 40_000;
    const TENANTS: u64 = 5_000;
    const WAVES: u64 = 8;
    const KILLS: usize = 8;
    let fk = Emulator::start("ferrokinesis", &[]);
    let moto = Emulator::start("moto", &[]);
    let k = kinesis(&fk.endpoint).await;
    create_stream(&k, "crash-events", 4).await;
    let dir = tempfile::tempdir().unwrap();
    let local = dir.path().join("archive");
    // Parquet objects (the other storm writes GZIP): the table is given in the
    // archiver's `columns`, as a user moving a format-converting delivery stream would.
    let consumer = archiver_toml(
        "archive-wide",
        &format!(
            "directory = \"{}\"\nmode = \"exactly-once\"\nmax_buffer_memory = 4194304\nspill_directory = \"{}\"\n{MCP_COLUMNS}",
            local.display(),
            dir.path().join("spill").display()
        ),
        "mcp-normalize",
        "wide/tenant=!{partitionKeyFromQuery:tenantId}/dt=!{timestamp:yyyy-MM-dd}/",
        "wide-errors/!{firehose:error-output-type}/",
        30,
        &metadata_extraction("{tenantId: .tenant_id}", false),
    )
    .replace("CompressionFormat = \"GZIP\"", "CompressionFormat = \"UNCOMPRESSED\"\nS3BackupMode = \"Enabled\"")
        + "[consumers.destination.DataFormatConversionConfiguration]\nEnabled = true\n\
           OutputFormatConfiguration = { Serializer = { ParquetSerDe = { Compression = \"SNAPPY\" } } }\n\
           [consumers.destination.S3BackupConfiguration]\nPrefix = \"source/\"\nErrorOutputPrefix = \"source-errors/\"\n\
           CompressionFormat = \"GZIP\"\nBufferingHints = { SizeInMBs = 1, IntervalInSeconds = 30 }\n";
    let mut fleet = two_workers(dir.path(), &fk.endpoint, &moto.endpoint, consumer);
    let (last, kills) = fleet
        .put_while_killing(&k, "crash-events", RECORDS, WAVES, KILLS, |i| {
            format!(
                r#"{{"tenantId":"t-{}","toolName":"tool-{}","sessionId":"r{i}","ts":{},"durationMs":{},"success":true}}"#,
                i * 7919 % TENANTS,
                i % 5,
                1_764_400_000_000u64 + i,
                i % 900,
            )
        })
        .await;
    eprintln!("{kills} kills; waiting for the archiver to finish");
    let leases =
        DynamoDbLeaseTable::open(dynamodb(&moto.endpoint).await, "weir-crash-leases", "crash", true).await.unwrap();
    wait_checkpoints(&leases, &last, &["archive-wide", "archive-wide-backup"], dir.path()).await;
    // Manifests still open when the fleet stops are deleted as the last checkpoints pass
    // them; wait for the deletes, then stop.
    let mut manifests_left = usize::MAX;
    for _ in 0..60 {
        manifests_left = files(&local.join("_weir")).len();
        let open: usize =
            leases.list().await.unwrap().iter().map(|l| l.intents.values().map(Vec::len).sum::<usize>()).sum();
        if open == 0 && manifests_left <= 4 * kills {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let log_text = logs(dir.path());
    fleet.stop();
    let objects = files(&local.join("wide")).len();
    let root = local.display();
    let rows = duckdb(&format!(
        "select count(*), count(distinct session_id), count(*) filter (where tenant <> tenant_id), count(distinct tenant), \
         count(*) filter (where typeof(timestamp_utc) <> 'TIMESTAMP' or typeof(duration_ms) <> 'BIGINT') \
         from read_parquet('{root}/wide/*/*/*.parquet', hive_partitioning = true)"
    ));
    eprintln!(
        "{objects} objects (claims included); rows/distinct/mismatched/tenants {:?}; {manifests_left} manifests left after {kills} kills",
        rows[0]
    );
    if rows[0][0].as_u64() != Some(RECORDS) {
        explain_duplicates(&local, dir.path());
        let kept = dir.keep();
        eprintln!("kept {} for inspection", kept.display());
    }
    assert!(!log_text.contains("Item size"), "a lease item outgrew DynamoDB's limit\n{log_text}");
    assert_eq!(rows[0][0].as_u64(), Some(RECORDS), "every record exactly once");
    assert_eq!(rows[0][1].as_u64(), Some(RECORDS));
    assert_eq!(rows[0][2].as_u64(), Some(0), "partition column equals the record field");
    assert_eq!(rows[0][3].as_u64(), Some(TENANTS));
    assert_eq!(rows[0][4].as_u64(), Some(0), "columns have their declared types");
    // A manifest outlives its intents only when a worker dies between writing it and
    // recording its intent, or between a checkpoint and the delete.
    assert!(manifests_left <= 4 * kills, "{manifests_left} manifests left after {kills} kills");
    // The source-record backup (its own consumer): every record as it came, once.
    let mut ids: BTreeMap<String, usize> = BTreeMap::new();
    for file in files(&local.join("source")) {
        let body = std::fs::read(&file).unwrap();
        let raw =
            weir_core::object_format::decode(weir_core::object_format::ObjectFormat::Gzip, &body, u64::MAX).unwrap();
        for v in serde_json::Deserializer::from_slice(&raw).into_iter::<serde_json::Value>() {
            *ids.entry(v.unwrap()["sessionId"].as_str().unwrap().to_owned()).or_default() += 1;
        }
    }
    let twice = ids.values().filter(|n| **n > 1).count();
    eprintln!("backup: {} distinct source records, {twice} more than once", ids.len());
    assert_eq!((ids.len() as u64, twice), (RECORDS, 0), "the backup holds every source record exactly once");
}

/// Prints, for a few records archived more than once, the objects that hold them
/// (an exactly-once key names its shard and first sequence number), and what the
/// workers logged about resolving open intents: what a failed exactly-once count needs.
fn explain_duplicates(local: &Path, dir: &Path) {
    let root = local.display();
    let dups = duckdb(&format!(
        "select session_id, list(filename order by filename) from read_parquet('{root}/wide/*/*/*.parquet', \
         hive_partitioning = true, filename = true) \
         group by session_id having count(*) > 1 order by session_id limit 10"
    ));
    for row in &dups {
        eprintln!("duplicated {}: {}", row[0], row[1]);
    }
    for e in std::fs::read_dir(dir).unwrap().flatten().filter(|e| e.path().extension().is_some_and(|x| x == "log")) {
        let text = std::fs::read_to_string(e.path()).unwrap_or_default();
        for line in text.lines().filter(|l| l.contains("resolved") || l.contains("WARN") || l.contains("ERROR")) {
            eprintln!("  {}: {line}", e.path().display());
        }
    }
}
