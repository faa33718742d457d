//! weir's Iceberg writer on the AWS Glue Data Catalog, its table files on S3, both
//! served by moto: a table pyiceberg registered in Glue, appended to by weir (the
//! writer, then `weir run`), read back by pyiceberg through Glue and S3 with its own
//! reader. moto's Glue ignores `VersionId`, so commit conflicts are tested on the SQL
//! catalog (`iceberg_table.rs`), not here.
#![allow(clippy::unwrap_used)] // a test: a failed expectation is a failed test

use std::collections::HashMap;

use bytes::Bytes;
use iceberg::{NamespaceIdent, TableIdent};
use serde_json::Value;
use weir_aws::iceberg_catalog::{GlueCatalog, S3FileSettings};
use weir_core::{ExtendedSequenceNumber, SequenceNumber, ShardId};
use weir_iceberg::{ShardRecords, TableWriter};
use weir_testkit::Emulator;

/// pyiceberg's Glue catalog on moto: `create` makes `mcp.events`, `read` prints its
/// rows and each data file's path.
const PY: &str = r#"
import json, sys
from pyiceberg.catalog.glue import GlueCatalog
endpoint, action = sys.argv[1], sys.argv[2]
creds = {"access-key-id": "test", "secret-access-key": "test", "region": "us-east-1"}
props = {f"glue.{k}": v for k, v in creds.items()} | {f"s3.{k}": v for k, v in creds.items()}
catalog = GlueCatalog("glue", **props, **{"glue.endpoint": endpoint, "s3.endpoint": endpoint,
                                          "warehouse": "s3://lake/warehouse"})
if action == "create":
    from pyiceberg.schema import Schema
    from pyiceberg.types import NestedField, StringType, LongType, TimestamptzType
    from pyiceberg.partitioning import PartitionSpec, PartitionField
    from pyiceberg.transforms import IdentityTransform
    catalog.create_namespace("mcp")
    schema = Schema(
        NestedField(1, "tenantId", StringType(), required=True),
        NestedField(2, "sessionId", StringType(), required=True),
        NestedField(3, "ts", TimestamptzType(), required=False),
        NestedField(4, "durationMs", LongType(), required=False),
    )
    spec = PartitionSpec(PartitionField(source_id=1, field_id=1000, transform=IdentityTransform(), name="tenant"))
    catalog.create_table("mcp.events", schema=schema, partition_spec=spec)
    print("{}")
else:
    import datetime
    table = catalog.load_table("mcp.events")
    epoch = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
    rows = []
    for r in table.scan().to_arrow().to_pylist():
        r["ts"] = (r["ts"] - epoch) // datetime.timedelta(microseconds=1) if r["ts"] else None
        rows.append(r)
    rows.sort(key=lambda r: r["sessionId"])
    files = [f["file_path"] for f in table.inspect.files().to_pylist()]
    snapshot = table.current_snapshot()
    summary = snapshot.summary.additional_properties if snapshot else {}
    print(json.dumps({"rows": rows, "files": files,
                      "positions": {k: v for k, v in summary.items() if k.startswith("weir.position:")}}))
"#;

fn pos(n: u64) -> ExtendedSequenceNumber {
    ExtendedSequenceNumber::plain(SequenceNumber::from_u128(u128::from(n) * 1000 + 3))
}

fn event(i: u64) -> Bytes {
    Bytes::from(format!(
        r#"{{"tenantId":"t{}","sessionId":"s-{i:04}","ts":{},"durationMs":{i}}}"#,
        i % 3,
        1_780_000_000_000u64 + i
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn weir_appends_to_a_glue_table_pyiceberg_reads_from_s3() {
    let moto = Emulator::start("moto", &[]);
    let s3 = weir_e2e::s3(&moto.endpoint).await;
    s3.create_bucket().bucket("lake").send().await.unwrap();
    weir_e2e::pyiceberg(PY, &[moto.endpoint.as_str(), "create"]);

    let glue = weir_e2e::glue(&moto.endpoint).await;
    let files = S3FileSettings {
        region: Some("us-east-1".into()),
        endpoint_url: Some(moto.endpoint.clone()),
        credentials: weir_aws::load_sdk_config(&weir_aws::AwsSettings::emulator(&moto.endpoint))
            .await
            .credentials_provider(),
    };
    let catalog = std::sync::Arc::new(GlueCatalog::new(glue, None, &files));
    let table = TableIdent::new(NamespaceIdent::new("mcp".into()), "events".into());
    let writer = TableWriter::new(catalog, table, "archive");
    let shard = ShardId::new("shardId-000000000000");
    let records: Vec<_> = (0..60).map(|i| (pos(i), event(i))).collect();
    // Two commits, the second repeating part of the first (a retry, a new owner).
    for (from, to) in [(0, 40), (25, 60)] {
        let batch =
            [ShardRecords { shard: shard.clone(), end: pos(to as u64 - 1), records: records[from..to].to_vec() }];
        let r = writer.commit(&batch).await.unwrap();
        assert!(r.rejected.is_empty(), "{:?}", r.rejected);
    }

    let read = weir_e2e::pyiceberg(PY, &[moto.endpoint.as_str(), "read"]);
    let rows = read["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 60, "each record once: {read}");
    for (i, row) in rows.iter().enumerate() {
        let want: Value = serde_json::from_slice(&event(i as u64)).unwrap();
        assert_eq!(row["sessionId"], want["sessionId"]);
        assert_eq!(row["tenantId"], want["tenantId"]);
        assert_eq!(row["durationMs"], want["durationMs"]);
        assert_eq!(row["ts"].as_i64(), Some(want["ts"].as_i64().unwrap() * 1000), "{row}");
    }
    let files: Vec<&str> = read["files"].as_array().unwrap().iter().map(|f| f.as_str().unwrap()).collect();
    assert!(files.len() >= 3 && files.iter().all(|f| f.starts_with("s3://lake/warehouse/")), "{files:?}");
    let positions: HashMap<String, String> = serde_json::from_value(read["positions"].clone()).unwrap();
    assert_eq!(positions["weir.position:archive:shardId-000000000000"], format!("{}/0", pos(59).sequence));
}

/// `weir run` with a delivery stream's `IcebergDestinationConfiguration` as it is: its
/// `CatalogARN` names Glue (moto, through `[aws] glue_endpoint_url`), its
/// `S3Configuration` bucket takes the records that do not fit. pyiceberg reads the
/// table through Glue and S3.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn weir_run_writes_a_firehose_destinations_glue_table() {
    use weir_aws::kinesis::producer::{Outgoing, Producer};
    let moto = Emulator::start("moto", &[]);
    let fk = Emulator::start("ferrokinesis", &[]);
    let s3 = weir_e2e::s3(&moto.endpoint).await;
    for bucket in ["lake", "firehose-errors"] {
        s3.create_bucket().bucket(bucket).send().await.unwrap();
    }
    weir_e2e::pyiceberg(PY, &[moto.endpoint.as_str(), "create"]);
    let k = weir_e2e::kinesis(&fk.endpoint).await;
    weir_e2e::create_stream(&k, "glue-events", 2).await;
    let records: Vec<Outgoing> = (0..200u64)
        .map(|i| Outgoing {
            id: i,
            partition_key: format!("pk-{i}"),
            // Every 40th without its required tenant: the error output's.
            data: if i % 40 == 39 { Bytes::from(format!(r#"{{"sessionId":"s-{i:04}"}}"#)) } else { event(i) },
        })
        .collect();
    assert_eq!(Producer::new(k.clone(), "glue-events").put_all(records).await.accepted.len(), 200);

    let dir = tempfile::tempdir().unwrap();
    let destination = serde_json::json!({
        "DestinationTableConfigurationList": [
            {"DestinationDatabaseName": "mcp", "DestinationTableName": "events", "S3ErrorOutputPrefix": "iceberg-failed/"}
        ],
        "CatalogConfiguration": {"CatalogARN": "arn:aws:glue:us-east-1:123456789012:catalog",
                                 "WarehouseLocation": "s3://lake/warehouse"},
        "BufferingHints": {"IntervalInSeconds": 0, "SizeInMBs": 1},
        "S3Configuration": {"BucketARN": "arn:aws:s3:::firehose-errors"},
    });
    let consumer =
        serde_json::json!({"consumers": [{"name": "glue-table", "type": "iceberg", "destination": destination}]});
    let aws = format!(
        "kinesis_endpoint_url = \"{}\"\nglue_endpoint_url = \"{m}\"\ns3_endpoint_url = \"{m}\"\ns3_force_path_style = true\n",
        fk.endpoint,
        m = moto.endpoint
    );
    let cfg =
        weir_e2e::one_worker_config(dir.path(), "glue-events", "glue", &aws, &toml::to_string(&consumer).unwrap());
    weir_e2e::run_until_caught_up(&cfg);

    let read = weir_e2e::pyiceberg(PY, &[moto.endpoint.as_str(), "read"]);
    let got: Vec<&str> = read["rows"].as_array().unwrap().iter().map(|r| r["sessionId"].as_str().unwrap()).collect();
    let want: Vec<String> = (0..200).filter(|i| i % 40 != 39).map(|i| format!("s-{i:04}")).collect();
    assert_eq!(got, want.iter().map(String::as_str).collect::<Vec<_>>(), "each record that fits, once");
    let objects = weir_e2e::objects(&s3, "firehose-errors", "iceberg-failed/").await;
    let lines: Vec<String> = objects
        .iter()
        .flat_map(|(_, b)| String::from_utf8(b.to_vec()).unwrap().lines().map(str::to_owned).collect::<Vec<_>>())
        .collect();
    let mut bad: Vec<String> = lines
        .iter()
        .map(|l| {
            let e: Value = serde_json::from_str(l).unwrap();
            assert_eq!(e["errorCode"], "Iceberg.SchemaMismatch", "{e}");
            let raw =
                base64::Engine::decode(&base64::engine::general_purpose::STANDARD, e["rawData"].as_str().unwrap())
                    .unwrap();
            serde_json::from_slice::<Value>(&raw).unwrap()["sessionId"].as_str().unwrap().to_owned()
        })
        .collect();
    bad.sort();
    assert_eq!(bad, (0..200).filter(|i| i % 40 == 39).map(|i| format!("s-{i:04}")).collect::<Vec<_>>());
}

/// The catalog (Glue and the tables' S3, behind a fault proxy) goes down for 60 s
/// (`WEIR_FAULTS_FULL=1`; 15 s otherwise) while two workers write one table and
/// records keep coming: commits fail and are retried, nothing is checkpointed past
/// the table, no worker exits; once the catalog is back the fleet catches up by itself
/// and pyiceberg finds every record once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_catalog_outage_loses_nothing_and_the_fleet_recovers_by_itself() {
    use weir_aws::kinesis::producer::{Outgoing, Producer};
    use weir_core::ports::LeaseTable;
    let outage = if std::env::var("WEIR_FAULTS_FULL").is_ok_and(|v| v == "1") { 60 } else { 15 };
    let moto = Emulator::start("moto", &[]);
    let fk = Emulator::start("ferrokinesis", &[]);
    let proxy = weir_testkit::FaultProxy::in_front_of(&moto.endpoint, 35).await.unwrap();
    let s3 = weir_e2e::s3(&moto.endpoint).await;
    for bucket in ["lake", "firehose-errors"] {
        s3.create_bucket().bucket(bucket).send().await.unwrap();
    }
    weir_e2e::pyiceberg(PY, &[moto.endpoint.as_str(), "create"]);
    let k = weir_e2e::kinesis(&fk.endpoint).await;
    weir_e2e::create_stream(&k, "outage-events", 4).await;
    let dir = tempfile::tempdir().unwrap();
    let ports: Vec<u16> = (0..2).map(|_| weir_e2e::free_port()).collect();
    let mut workers = Vec::new();
    for (n, port) in ports.iter().enumerate() {
        let cfg = dir.path().join(format!("w{n}.toml"));
        std::fs::write(
            &cfg,
            format!(
                "{worker}\n[stream]\nkind = \"kinesis\"\nname = \"outage-events\"\n\
                 [leases]\nkind = \"dynamodb\"\ntable = \"outage-leases\"\ncreate_table = true\nnamespace = \"outage\"\n\
                 [aws]\nkinesis_endpoint_url = \"{fk}\"\ndynamodb_endpoint_url = \"{moto}\"\n\
                 glue_endpoint_url = \"{proxy}\"\ns3_endpoint_url = \"{proxy}\"\ns3_force_path_style = true\n\
                 [http]\nlisten = \"127.0.0.1:{port}\"\n\
                 [[consumers]]\nname = \"table\"\ntype = \"iceberg\"\ntable = \"mcp.events\"\n\
                 catalog = {{ type = \"glue\" }}\nbuffer_interval_seconds = 1\n\
                 error_output = {{ bucket = \"firehose-errors\" }}\n",
                worker = weir_e2e::worker_toml(Some(&format!("w{n}"))),
                fk = fk.endpoint,
                moto = moto.endpoint,
                proxy = proxy.endpoint(),
            ),
        )
        .unwrap();
        workers.push(weir_e2e::KillOnDrop(weir_e2e::spawn_weir(&cfg, &dir.path().join(format!("w{n}.log")))));
    }
    let producer = Producer::new(k.clone(), "outage-events");
    let mut last = std::collections::BTreeMap::new();
    let mut put = async |from: u64, to: u64| {
        let batch = (from..to).map(|i| Outgoing { id: i, partition_key: format!("pk-{i}"), data: event(i) }).collect();
        let report = producer.put_all(batch).await;
        assert_eq!(report.accepted.len() as u64, to - from);
        for a in report.accepted {
            let e = last.entry(a.shard).or_insert(a.sequence.clone());
            if a.sequence > *e {
                *e = a.sequence;
            }
        }
    };
    put(0, 500).await;
    // Both workers up and committing (their first wave is in the table).
    let mut patience = weir_e2e::patience::Patience::new(std::time::Duration::from_secs(120));
    loop {
        let read = weir_e2e::pyiceberg(PY, &[moto.endpoint.as_str(), "read"]);
        let rows = read["rows"].as_array().map_or(0, Vec::len);
        if rows == 500 {
            break;
        }
        if let Err(why) = patience.observe(rows) {
            panic!("the first wave never reached the table: {why}\n{}", weir_e2e::storm::logs(dir.path()));
        }
    }
    // The catalog goes down while records keep coming: a wave a second.
    proxy.set(weir_testkit::Faults::down());
    for s in 0..outage {
        put(500 + s * 50, 550 + s * 50).await;
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    }
    let failures: f64 = ports
        .iter()
        .map(|p| {
            let page = reqwest_get(*p, "/metrics");
            weir_e2e::metric_samples(&page, "weir_iceberg_commit_failures_total").iter().map(|(_, v)| v).sum::<f64>()
        })
        .sum();
    let ready: Vec<String> = ports.iter().map(|p| reqwest_get(*p, "/readyz")).collect();
    assert!(
        ready.iter().any(|r| r.contains("iceberg table: 1 table") && r.contains("; commits failing for")),
        "/readyz says the commits fail and why: {ready:?}"
    );
    proxy.set(weir_testkit::Faults::none());
    let total = 500 + outage * 50;
    put(total, total + 500).await;
    let total = total + 500;
    let leases =
        weir_aws::DynamoDbLeaseTable::open(weir_e2e::dynamodb(&moto.endpoint).await, "outage-leases", "outage", true)
            .await
            .unwrap();
    weir_e2e::storm::wait_checkpoints(&leases, &last, &["table"], dir.path()).await;
    for w in &mut workers {
        assert!(w.0.try_wait().unwrap().is_none(), "a worker exited\n{}", weir_e2e::storm::logs(dir.path()));
    }
    assert!(failures >= 1.0, "commits failed while the catalog was down ({failures})");
    assert!(proxy.stats().resets() > 0, "the proxy cut requests");
    let _ = leases.list().await.unwrap();

    let read = weir_e2e::pyiceberg(PY, &[moto.endpoint.as_str(), "read"]);
    let got: Vec<&str> = read["rows"].as_array().unwrap().iter().map(|r| r["sessionId"].as_str().unwrap()).collect();
    let want: Vec<String> = (0..total).map(|i| format!("s-{i:04}")).collect();
    eprintln!("{total} records, a {outage} s catalog outage, {failures} failed commits: {} rows", got.len());
    assert_eq!(got, want.iter().map(String::as_str).collect::<Vec<_>>(), "each record once, none lost");
}

/// A GET of `path` on a worker's HTTP port (empty when it does not answer).
fn reqwest_get(port: u16, path: &str) -> String {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else { return String::new() };
    let _ = s.write_all(format!("GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").as_bytes());
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out
}

/// Two writers, each with its own Glue catalog, racing over overlapping batches of one
/// shard: Glue's `UpdateTable` is conditional on the `VersionId` read (moto is started
/// with that check, tests/emulators/moto_server.py), the loser reads the positions
/// again, and every record is in the table once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_writers_racing_on_a_glue_table_leave_each_record_once() {
    let moto = Emulator::start("moto", &[]);
    let s3 = weir_e2e::s3(&moto.endpoint).await;
    s3.create_bucket().bucket("lake").send().await.unwrap();
    weir_e2e::pyiceberg(PY, &[moto.endpoint.as_str(), "create"]);
    let table = TableIdent::new(NamespaceIdent::new("mcp".into()), "events".into());
    let mut writers = Vec::new();
    for _ in 0..2 {
        let files = S3FileSettings {
            region: Some("us-east-1".into()),
            endpoint_url: Some(moto.endpoint.clone()),
            credentials: weir_aws::load_sdk_config(&weir_aws::AwsSettings::emulator(&moto.endpoint))
                .await
                .credentials_provider(),
        };
        let catalog = std::sync::Arc::new(GlueCatalog::new(weir_e2e::glue(&moto.endpoint).await, None, &files));
        writers.push(TableWriter::new(catalog, table.clone(), "archive").with_attempts(50));
    }
    let records: Vec<_> = (0..240).map(|i| (pos(i), event(i))).collect();
    let shard = ShardId::new("shardId-000000000000");
    let batch = |from: usize, to: usize| {
        vec![ShardRecords { shard: shard.clone(), end: pos(to as u64 - 1), records: records[from..to].to_vec() }]
    };
    let mut conflicts = 0;
    for round in 0..8 {
        let (x, y) = (round * 30, round * 30 + 30);
        let (ba, bb) = (batch(x, y), batch(x.saturating_sub(10), y - 5));
        let (ra, rb) = tokio::join!(writers[0].commit(&ba), writers[1].commit(&bb));
        conflicts += ra.unwrap().conflicts + rb.unwrap().conflicts;
    }
    let read = weir_e2e::pyiceberg(PY, &[moto.endpoint.as_str(), "read"]);
    let got: Vec<&str> = read["rows"].as_array().unwrap().iter().map(|r| r["sessionId"].as_str().unwrap()).collect();
    let want: Vec<String> = (0..240).map(|i| format!("s-{i:04}")).collect();
    assert_eq!(got, want.iter().map(String::as_str).collect::<Vec<_>>(), "each record once, none lost");
    println!("Glue commit conflicts over 8 racing rounds: {conflicts}");
    assert!(conflicts > 0, "the writers raced: Glue refused a commit on a stale VersionId");
}
