//! weir's Iceberg writer on the embedded SQL catalog (SQLite file, local warehouse),
//! read back by pyiceberg (its own SQL catalog over the same file, its own Parquet
//! reader): every row compared field by field, each data file's rows against its
//! partition values, the shards' positions in the snapshot summary; and two writers
//! racing on the same shard through real compare-and-swap commits.
#![allow(clippy::unwrap_used)] // a test: a failed expectation is a failed test

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use base64::Engine;
use bytes::Bytes;
use iceberg::spec::{
    ListType, MapType, NestedField, PrimitiveType, Schema, StructType, Transform, Type, UnboundPartitionSpec,
};
use iceberg::{Catalog, NamespaceIdent, TableCreation, TableIdent};
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};
use weir_core::Clock;
use weir_core::{ExtendedSequenceNumber, SequenceNumber, ShardId};
use weir_iceberg::{ShardRecords, TableWriter};

const READ: &str = r#"
import base64, datetime, json, sys
from decimal import Decimal
from pyiceberg.catalog.sql import SqlCatalog
import pyarrow.parquet as pq

catalog = SqlCatalog("weir", uri="sqlite:///" + sys.argv[1], warehouse="file://" + sys.argv[2])
table = catalog.load_table("mcp.events")
epoch = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
naive = datetime.datetime(1970, 1, 1)
def plain(v):
    if isinstance(v, datetime.datetime):
        return (v - (epoch if v.tzinfo else naive)) // datetime.timedelta(microseconds=1)
    if isinstance(v, datetime.date):
        return v.isoformat()
    if isinstance(v, Decimal):
        return str(v)
    if isinstance(v, bytes):
        return base64.b64encode(v).decode()
    if isinstance(v, list) and v and isinstance(v[0], tuple):
        return {k: plain(x) for k, x in v}
    if isinstance(v, list):
        return [plain(x) for x in v]
    if isinstance(v, dict):
        return {k: plain(x) for k, x in v.items()}
    return v
rows = [{k: plain(v) for k, v in r.items()} for r in table.scan().to_arrow().to_pylist()]
rows.sort(key=lambda r: r["sessionId"])
# Each data file's rows against the partition values the manifest gives it.
wrong, files, codecs = [], 0, set()
for f in table.inspect.files().to_pylist():
    files += 1
    meta = pq.ParquetFile(f["file_path"].removeprefix("file://")).metadata
    codecs |= {meta.row_group(g).column(c).compression for g in range(meta.num_row_groups) for c in range(meta.num_columns)}
    part = f["partition"]
    # The day transform's value: days since 1970 (pyiceberg may give it as a date).
    want_day = part["ts_day"]
    if isinstance(want_day, datetime.date):
        want_day = (want_day - datetime.date(1970, 1, 1)).days
    for r in pq.read_table(f["file_path"].removeprefix("file://")).to_pylist():
        day = (r["ts"].replace(tzinfo=datetime.timezone.utc) - epoch).days if r["ts"] else None
        if r["tenantId"] != part["tenant"] or day != want_day:
            wrong.append([f["file_path"], r["sessionId"], str(part)])
summary = table.current_snapshot().summary
positions = {k: v for k, v in summary.additional_properties.items() if k.startswith("weir.position:")}
print(json.dumps({"rows": rows, "files": files, "wrong": wrong, "positions": positions, "codecs": sorted(codecs)}))
"#;

fn pyiceberg(db: &Path, warehouse: &Path) -> Value {
    weir_e2e::pyiceberg(READ, &[db, warehouse])
}

fn schema() -> Schema {
    let p = |t| Type::Primitive(t);
    let arguments = StructType::new(vec![
        NestedField::optional(20, "query", p(PrimitiveType::String)).into(),
        NestedField::optional(21, "limit", p(PrimitiveType::Int)).into(),
        NestedField::optional(
            22,
            "filters",
            Type::List(ListType::new(NestedField::list_element(23, p(PrimitiveType::String), false).into())),
        )
        .into(),
    ]);
    Schema::builder()
        .with_fields(vec![
            NestedField::required(1, "tenantId", p(PrimitiveType::String)).into(),
            NestedField::optional(2, "toolName", p(PrimitiveType::String)).into(),
            NestedField::required(3, "sessionId", p(PrimitiveType::String)).into(),
            NestedField::optional(4, "ts", p(PrimitiveType::Timestamptz)).into(),
            NestedField::optional(5, "localTs", p(PrimitiveType::Timestamp)).into(),
            NestedField::optional(6, "durationMs", p(PrimitiveType::Long)).into(),
            NestedField::optional(7, "success", p(PrimitiveType::Boolean)).into(),
            NestedField::optional(8, "errorCode", p(PrimitiveType::String)).into(),
            NestedField::optional(9, "cost", p(PrimitiveType::Decimal { precision: 12, scale: 3 })).into(),
            NestedField::optional(10, "day", p(PrimitiveType::Date)).into(),
            NestedField::optional(11, "ratio", p(PrimitiveType::Double)).into(),
            NestedField::optional(12, "weight", p(PrimitiveType::Float)).into(),
            NestedField::optional(13, "retries", p(PrimitiveType::Int)).into(),
            NestedField::optional(14, "arguments", Type::Struct(arguments)).into(),
            NestedField::optional(
                15,
                "labels",
                Type::Map(MapType::new(
                    NestedField::map_key_element(24, p(PrimitiveType::String)).into(),
                    NestedField::map_value_element(25, p(PrimitiveType::String), false).into(),
                )),
            )
            .into(),
            NestedField::optional(16, "payload", p(PrimitiveType::Binary)).into(),
        ])
        .build()
        .unwrap()
}

async fn create(catalog: &dyn Catalog) -> TableIdent {
    let ns = NamespaceIdent::new("mcp".into());
    catalog.create_namespace(&ns, HashMap::new()).await.unwrap();
    let spec = UnboundPartitionSpec::builder()
        .add_partition_field(1, "tenant", Transform::Identity)
        .unwrap()
        .add_partition_field(4, "ts_day", Transform::Day)
        .unwrap()
        .build();
    let creation = TableCreation::builder().name("events".into()).schema(schema()).partition_spec(spec).build();
    catalog.create_table(&ns, creation).await.unwrap();
    TableIdent::new(ns, "events".into())
}

/// A seeded event: the record weir is given, and the row a reader must see.
fn event(rng: &mut rand::rngs::StdRng, i: u64) -> (Value, Value) {
    let micros: i64 = 1_780_000_000_000_000 + rng.random_range(0..3 * 86_400_000_000i64);
    let millis = micros / 1000;
    let cost_milli: i64 = rng.random_range(-5_000_000..5_000_000);
    let cost =
        format!("{}{}.{:03}", if cost_milli < 0 { "-" } else { "" }, cost_milli.abs() / 1000, cost_milli.abs() % 1000);
    let days: i64 = rng.random_range(-1000..30_000);
    let date = (chrono::NaiveDate::from_ymd_opt(1970, 1, 1).unwrap() + chrono::Days::new(0))
        .checked_add_signed(chrono::TimeDelta::days(days))
        .unwrap();
    let local = chrono::DateTime::from_timestamp_micros(micros).unwrap().naive_utc();
    let payload: Vec<u8> = (0..rng.random_range(0..12)).map(|_| rng.random()).collect();
    let b64 = base64::engine::general_purpose::STANDARD.encode(&payload);
    let nulls = i.is_multiple_of(7);
    let filters: Vec<String> = (0..i % 3).map(|k| format!("f{k}-ü{i}")).collect();
    let record = json!({
        "tenantId": format!("tenant-{}", i % 4),
        "toolName": if nulls { Value::Null } else { json!(["search", "fetch_url", "run_sql"][i as usize % 3]) },
        "sessionId": format!("session-{i:05}"),
        // The instant in each unit a producer sends: Firehose's Iceberg destination
        // asks for microseconds, MCP servers send milliseconds, some seconds.
        "ts": match i % 4 {
            0 => json!(millis),
            1 => json!(micros),
            2 => json!(micros / 1_000_000),
            _ => json!(micros.to_string()),
        },
        "localTs": local.format("%Y-%m-%d %H:%M:%S%.6f").to_string(),
        "durationMs": rng.random_range(0..600_000i64),
        "success": !i.is_multiple_of(5),
        "errorCode": if i.is_multiple_of(5) { json!(format!("E{}", i % 13)) } else { Value::Null },
        "cost": cost,
        "day": date.format("%Y-%m-%d").to_string(),
        "ratio": (i as f64) / 8.0,
        "weight": (i % 64) as f64 * 0.25,
        "retries": i % 4,
        "arguments": if nulls { Value::Null } else { json!({"query": format!("q \"{i}\" ☃"), "limit": i % 100, "filters": filters}) },
        "labels": {"region": format!("r{}", i % 3), "Tier": "gold"},
        "payload": b64,
    });
    let mut row = record.clone();
    row["ts"] = json!(match i % 4 {
        0 => millis * 1000,
        2 => micros / 1_000_000 * 1_000_000,
        _ => micros,
    });
    row["localTs"] = json!(local.and_utc().timestamp_micros());
    // Iceberg's `long`, `double` and `float` come back as numbers of the same value.
    row["ratio"] = json!((i as f64) / 8.0);
    row["weight"] = json!((i % 64) as f64 * 0.25);
    if nulls {
        row["arguments"] = Value::Null;
    }
    (record, row)
}

fn pos(n: u64) -> ExtendedSequenceNumber {
    ExtendedSequenceNumber::plain(SequenceNumber::from_u128(u128::from(n) * 1000 + 7))
}

#[tokio::test]
async fn pyiceberg_reads_every_row_and_partition_weir_commits() {
    let dir = tempfile::tempdir().unwrap();
    let (db, warehouse) = (dir.path().join("catalog.db"), dir.path().join("warehouse"));
    std::fs::create_dir_all(&warehouse).unwrap();
    let catalog = weir_local::sql_catalog("weir", &db, &warehouse).await.unwrap();
    let table = create(catalog.as_ref()).await;
    let writer = TableWriter::new(catalog.clone(), table.clone(), "archive");

    let mut rng = rand::rngs::StdRng::seed_from_u64(35);
    let mut expected = Vec::new();
    // Three shards, two commits each (the second repeats part of the first, as a
    // retry would).
    let mut batches: Vec<Vec<ShardRecords>> = vec![Vec::new(), Vec::new()];
    for s in 0..3u64 {
        let mut records = Vec::new();
        for k in 0..100u64 {
            let i = s * 100 + k;
            let (record, row) = event(&mut rng, i);
            expected.push(row);
            records.push((pos(k), Bytes::from(record.to_string())));
        }
        let shard = ShardId::new(format!("shardId-{s:012}"));
        batches[0].push(ShardRecords { shard: shard.clone(), end: pos(59), records: records[..60].to_vec() });
        batches[1].push(ShardRecords { shard, end: pos(99), records: records[40..].to_vec() });
    }
    for b in &batches {
        let r = writer.commit(b).await.unwrap();
        assert!(r.rejected.is_empty(), "{:?}", r.rejected);
    }
    expected.sort_by(|a, b| a["sessionId"].as_str().cmp(&b["sessionId"].as_str()));

    let read = pyiceberg(&db, &warehouse);
    let rows = read["rows"].as_array().unwrap();
    assert_eq!(rows.len(), expected.len(), "each record once");
    println!("first row as pyiceberg reads it: {}", rows[0]);
    for (got, want) in rows.iter().zip(&expected) {
        assert_eq!(got.as_object().unwrap().len(), 16, "every column: {got}");
        for (field, value) in want.as_object().unwrap() {
            assert_eq!(&got[field], value, "{} field {field}", want["sessionId"]);
        }
    }
    assert_eq!(read["wrong"], json!([]), "every row in the partition its file is filed under");
    // The table sets no codec: Iceberg's default, zstd (the `iceberg` crate alone
    // writes uncompressed files).
    assert_eq!(read["codecs"], json!(["ZSTD"]), "data files compressed as the table's properties say");
    assert!(read["files"].as_u64().unwrap() >= 12, "4 tenants × 3 days of files: {}", read["files"]);
    let positions: HashMap<String, String> = serde_json::from_value(read["positions"].clone()).unwrap();
    for s in 0..3 {
        assert_eq!(positions[&format!("weir.position:archive:shardId-{s:012}")], format!("{}/0", pos(99).sequence));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_writers_racing_on_one_shard_leave_each_record_once() {
    let dir = tempfile::tempdir().unwrap();
    let (db, warehouse) = (dir.path().join("catalog.db"), dir.path().join("warehouse"));
    std::fs::create_dir_all(&warehouse).unwrap();
    let first = weir_local::sql_catalog("weir", &db, &warehouse).await.unwrap();
    let table = create(first.as_ref()).await;
    // Two workers, each with its own connection to the catalog: an owner and a
    // zombie that both believe they hold the shard, reading overlapping batches.
    let second: Arc<dyn Catalog> = weir_local::sql_catalog("weir", &db, &warehouse).await.unwrap();
    let a = TableWriter::new(first, table.clone(), "archive").with_attempts(50);
    let b = TableWriter::new(second, table.clone(), "archive").with_attempts(50);
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let records: Vec<_> = (0..240u64).map(|i| (pos(i), Bytes::from(event(&mut rng, i).0.to_string()))).collect();
    let batch = |from: usize, to: usize| {
        vec![ShardRecords {
            shard: ShardId::new("shardId-000000000000"),
            end: pos(to as u64 - 1),
            records: records[from..to].to_vec(),
        }]
    };
    let mut conflicts = 0;
    for round in 0..8 {
        let (x, y) = (round * 30, round * 30 + 30);
        // a reads from x; b, behind, from a little earlier, and not as far.
        let (ba, bb) = (batch(x, y), batch(x.saturating_sub(10), y - 5));
        let (ra, rb) = tokio::join!(a.commit(&ba), b.commit(&bb));
        let (ra, rb) = (ra.unwrap(), rb.unwrap());
        conflicts += ra.conflicts + rb.conflicts;
    }
    let read = pyiceberg(&db, &warehouse);
    let mut sessions: Vec<&str> =
        read["rows"].as_array().unwrap().iter().map(|r| r["sessionId"].as_str().unwrap()).collect();
    sessions.sort();
    let want: Vec<String> = (0..240).map(|i| format!("session-{i:05}")).collect();
    assert_eq!(sessions, want.iter().map(String::as_str).collect::<Vec<_>>(), "each record once, none lost");
    println!("commit conflicts over 8 racing rounds: {conflicts}");
}

const SESSIONS: &str = r#"
import json, sys
from pyiceberg.catalog.sql import SqlCatalog
catalog = SqlCatalog("weir", uri="sqlite:///" + sys.argv[1], warehouse="file://" + sys.argv[2])
rows = catalog.load_table(sys.argv[3] if len(sys.argv) > 3 else "mcp.events").scan().to_arrow().to_pylist()
print(json.dumps(sorted(r["sessionId"] for r in rows)))
"#;

fn pyiceberg_script(script: &str, db: &Path, warehouse: &Path) -> Value {
    weir_e2e::pyiceberg(script, &[db, warehouse])
}

/// `weir run` with a `type = "iceberg"` consumer, on ferrokinesis, into a table
/// pyiceberg created: every record that fits in the table once, across two runs (the
/// second resumes at the checkpoints), the others in the error output with the reason;
/// then `weir replay` of the window into the same table adds each once more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn weir_run_appends_a_streams_records_to_a_table_pyiceberg_made() {
    use weir_aws::kinesis::producer::{Outgoing, Producer};
    let fk = weir_testkit::Emulator::start("ferrokinesis", &[]);
    let k = weir_e2e::kinesis(&fk.endpoint).await;
    weir_e2e::create_stream(&k, "iceberg-events", 2).await;
    let dir = tempfile::tempdir().unwrap();
    let (db, warehouse) = (dir.path().join("catalog.db"), dir.path().join("warehouse"));
    std::fs::create_dir_all(&warehouse).unwrap();
    pyiceberg_script(weir_e2e::PYICEBERG_CREATE_MCP_TABLES, &db, &warehouse);

    let producer = Producer::new(k.clone(), "iceberg-events");
    let put = |from: u64, to: u64| {
        let records = (from..to)
            .map(|i| Outgoing {
                id: i,
                partition_key: format!("pk-{i}"),
                data: Bytes::from(if i % 50 == 49 {
                    format!(r#"{{"toolName":"no tenant","sessionId":"bad-{i:05}"}}"#)
                } else {
                    format!(
                        r#"{{"tenantId":"t{}","toolName":"search","sessionId":"s-{i:05}","durationMs":{i}}}"#,
                        i % 3
                    )
                }),
            })
            .collect::<Vec<_>>();
        let producer = producer.clone();
        async move { assert_eq!(producer.put_all(records).await.accepted.len() as u64, to - from) }
    };
    let consumer = format!(
        "[[consumers]]\nname = \"events-table\"\ntype = \"iceberg\"\ntable = \"mcp.events\"\n\
         catalog = {{ type = \"sql\", database = \"{db}\", warehouse = \"{warehouse}\" }}\nbuffer_interval_seconds = 1\n\
         error_output = {{ directory = \"{errors}\" }}\n",
        db = db.display(),
        warehouse = warehouse.display(),
        errors = dir.path().join("errors").display(),
    );
    let aws = format!("kinesis_endpoint_url = \"{}\"\n", fk.endpoint);
    let cfg = weir_e2e::one_worker_config(dir.path(), "iceberg-events", "ice", &aws, &consumer);
    let run = || weir_e2e::run_until_caught_up(&cfg);
    let from = weir_core::SystemClock.now().as_millis() - 1_000;
    put(0, 600).await;
    run();
    put(600, 1000).await;
    run();
    // A backfill of the whole window into the same table: its positions are the
    // job's own, so it appends every record again, once (the live consumer's
    // positions would have it skip them all).
    let mut cmd = weir_e2e::weir_command();
    let from = from.to_string();
    cmd.args(["replay", "--config", cfg.to_str().unwrap(), "--from", &from, "--to", "now"]);
    cmd.args(["--consumers", "events-table", "--job", "back", "--end-idle", "2s"]);
    let (out, _) = weir_e2e::timed(cmd, std::time::Duration::from_secs(120));
    assert!(out.status.success(), "{}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));

    let got: Vec<String> = serde_json::from_value(pyiceberg_script(SESSIONS, &db, &warehouse)).unwrap();
    let mut want: Vec<String> =
        (0..1000).filter(|i| i % 50 != 49).flat_map(|i| std::iter::repeat_n(format!("s-{i:05}"), 2)).collect();
    want.sort();
    assert_eq!(got, want, "each record that fits once live (two runs) and once from the backfill");
    let mut errors: Vec<Value> = Vec::new();
    for entry in walk(&dir.path().join("errors")) {
        for line in std::fs::read_to_string(entry).unwrap().lines() {
            errors.push(serde_json::from_str(line).unwrap());
        }
    }
    assert_eq!(errors.len(), 40, "each record that does not fit in the error output once live, once backfilled");
    for e in &errors {
        let raw = base64::engine::general_purpose::STANDARD.decode(e["rawData"].as_str().unwrap()).unwrap();
        assert!(String::from_utf8(raw).unwrap().contains("\"bad-"), "{e}");
        assert!(e["errorMessage"].as_str().unwrap().contains("tenantId"), "{e}");
    }
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(walk(&path));
        } else {
            out.push(path);
        }
    }
    out
}

/// Every line of the error output under `dir`: its original record's `id` field and
/// its `errorCode`, sorted.
fn error_codes(dir: &Path, id: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for entry in walk(dir) {
        for line in std::fs::read_to_string(entry).unwrap().lines() {
            let e: Value = serde_json::from_str(line).unwrap();
            let raw = base64::engine::general_purpose::STANDARD.decode(e["rawData"].as_str().unwrap()).unwrap();
            let raw: Value = serde_json::from_slice(&raw).unwrap();
            out.push((raw[id].as_str().unwrap().to_owned(), e["errorCode"].as_str().unwrap().to_owned()));
        }
    }
    out.sort();
    out
}

/// `weir config check` names every field of an Iceberg section it cannot serve.
#[test]
fn config_check_names_what_the_iceberg_destination_cannot_do() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("weir.toml");
    std::fs::write(
        &cfg,
        "[stream]\nkind = \"memory\"\n[[consumers]]\nname = \"t\"\ntype = \"iceberg\"\ntable = \"events\"\n\
         catalog = { type = \"rest\", uri = \"localhost:8181\" }\n\
         unique_keys = [\"sessionId\"]\nerror_output = { directory = \"e\" }\n",
    )
    .unwrap();
    let out = weir_e2e::weir_command().args(["config", "check", cfg.to_str().unwrap()]).output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(!out.status.success(), "{text}");
    for field in ["consumers[0].table", "consumers[0].catalog.uri", "consumers[0].unique_keys"] {
        assert!(text.contains(field), "{field} not named:\n{text}");
    }
    assert!(text.contains("delete files"), "{text}");
}

/// `weir run` with an existing delivery stream's `IcebergDestinationConfiguration` (the
/// `create-delivery-stream` input in consumers/iceberg/tests/fixtures, its Glue catalog
/// replaced by the embedded one, its S3 error output by a directory): its
/// `MetadataExtraction` query routes each MCP event into the table named after its tool
/// (`mcp.search`, `mcp.fetch_url`, made by pyiceberg); an event of a tool without a
/// table and one asking for an update go to the error output with the reason; pyiceberg
/// reads each table back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn weir_run_routes_each_record_to_the_table_its_query_names() {
    use weir_aws::kinesis::producer::{Outgoing, Producer};
    let fk = weir_testkit::Emulator::start("ferrokinesis", &[]);
    let k = weir_e2e::kinesis(&fk.endpoint).await;
    weir_e2e::create_stream(&k, "routed-events", 2).await;
    let dir = tempfile::tempdir().unwrap();
    let (db, warehouse) = (dir.path().join("catalog.db"), dir.path().join("warehouse"));
    std::fs::create_dir_all(&warehouse).unwrap();
    let (db_s, wh_s) = (db.display().to_string(), warehouse.display().to_string());
    weir_e2e::pyiceberg(
        weir_e2e::PYICEBERG_CREATE_MCP_TABLES,
        &[db_s.as_str(), wh_s.as_str(), "mcp.search", "mcp.fetch_url"],
    );
    let tools = ["search", "fetch_url", "run_sql"];
    let records: Vec<Outgoing> = (0..300u64)
        .map(|i| {
            let op = if i % 50 == 7 { r#","op":"update""# } else { "" };
            Outgoing {
                id: i,
                partition_key: format!("pk-{i}"),
                data: Bytes::from(format!(
                    r#"{{"tenantId":"t{}","toolName":"{}","sessionId":"s-{i:05}","durationMs":{i}{op}}}"#,
                    i % 3,
                    tools[(i % 3) as usize]
                )),
            }
        })
        .collect();
    assert_eq!(Producer::new(k.clone(), "routed-events").put_all(records).await.accepted.len(), 300);
    let stream: Value = serde_json::from_str(
        &std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../consumers/iceberg/tests/fixtures/mcp-iceberg-stream.json"
        ))
        .unwrap(),
    )
    .unwrap();
    let consumer = json!({"consumers": [{
        "name": "by-tool",
        "type": "iceberg",
        "catalog": {"type": "sql", "database": db_s, "warehouse": wh_s},
        "error_output": {"directory": dir.path().join("errors")},
        "destination": stream["IcebergDestinationConfiguration"],
    }]});
    let aws = format!("kinesis_endpoint_url = \"{}\"\n", fk.endpoint);
    let cfg =
        weir_e2e::one_worker_config(dir.path(), "routed-events", "ice", &aws, &toml::to_string(&consumer).unwrap());
    let check = weir_e2e::weir_command().args(["config", "check", cfg.to_str().unwrap()]).output().unwrap();
    let said = String::from_utf8_lossy(&check.stdout);
    assert!(check.status.success(), "{said}{}", String::from_utf8_lossy(&check.stderr));
    assert!(said.contains("RoleARN is accepted and ignored"), "the destination's unused fields are named: {said}");
    weir_e2e::run_until_caught_up(&cfg);

    for (t, tool) in [(0u64, "mcp.search"), (1, "mcp.fetch_url")] {
        let got: Vec<String> =
            serde_json::from_value(weir_e2e::pyiceberg(SESSIONS, &[db_s.as_str(), wh_s.as_str(), tool])).unwrap();
        let want: Vec<String> = (0..300).filter(|i| i % 3 == t && i % 50 != 7).map(|i| format!("s-{i:05}")).collect();
        assert_eq!(got, want, "{tool}: each of its tool's records once");
    }
    let errors = error_codes(&dir.path().join("errors"), "sessionId");
    let want: Vec<(String, String)> = (0..300u64)
        .filter(|i| i % 3 == 2 || i % 50 == 7)
        .map(|i| {
            let code = if i % 50 == 7 { "Iceberg.UnsupportedOperation" } else { "Iceberg.NoSuchTable" };
            (format!("s-{i:05}"), code.to_owned())
        })
        .collect();
    assert_eq!(errors, want, "each record without a table in the error output once, with the reason");
}

/// The Lambda of [`weir_run_puts_each_record_where_its_lambda_says`]: maps a legacy
/// event (`tenant`, `tool`, `session`, `ms`, `mode`) to the table's columns and names
/// its table in `otfMetadata` by tool (`other` tools: none, the destination's table);
/// `mode` makes it drop the record, fail it, name a table that does not exist, or ask
/// for an update. Its first invocation is throttled.
async fn otf_lambda(
    axum::extract::State(calls): axum::extract::State<Arc<std::sync::atomic::AtomicUsize>>,
    body: Bytes,
) -> (axum::http::StatusCode, axum::http::HeaderMap, String) {
    use base64::engine::general_purpose::STANDARD as B64;
    let mut headers = axum::http::HeaderMap::new();
    if calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0 {
        headers.insert("x-amzn-ErrorType", "TooManyRequestsException".parse().unwrap());
        return (axum::http::StatusCode::TOO_MANY_REQUESTS, headers, r#"{"message":"Rate exceeded"}"#.into());
    }
    let event: Value = serde_json::from_slice(&body).unwrap();
    let records: Vec<Value> = event["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let id = r["recordId"].clone();
            let v: Value = serde_json::from_slice(&B64.decode(r["data"].as_str().unwrap()).unwrap()).unwrap();
            let row = json!({"tenantId": v["tenant"], "toolName": v["tool"], "sessionId": v["session"],
                             "durationMs": v["ms"]});
            let data = B64.encode(row.to_string());
            let table = match v["tool"].as_str().unwrap() {
                "other" => None,
                tool => Some(tool.to_owned()),
            };
            let otf = |table: Option<&str>, op: &str| {
                json!({"otfMetadata": {"destinationDatabaseName": "mcp", "destinationTableName": table,
                                       "operation": op}})
            };
            match v["mode"].as_str().unwrap_or("") {
                "drop" => json!({"recordId": id, "result": "Dropped"}),
                "fail" => json!({"recordId": id, "result": "ProcessingFailed"}),
                "missing" => json!({"recordId": id, "result": "Ok", "data": data,
                                    "metadata": otf(Some("no_such_table"), "insert")}),
                "update" => json!({"recordId": id, "result": "Ok", "data": data,
                                   "metadata": otf(table.as_deref(), "update")}),
                _ => match table {
                    Some(t) => json!({"recordId": id, "result": "Ok", "data": data,
                                      "metadata": otf(Some(&t), "insert")}),
                    None => json!({"recordId": id, "result": "Ok", "data": data}),
                },
            }
        })
        .collect();
    headers.insert("content-type", "application/json".parse().unwrap());
    (axum::http::StatusCode::OK, headers, json!({"records": records}).to_string())
}

/// `weir run` with a delivery stream's Iceberg destination whose Lambda processor
/// (served over the Lambda Invoke API by [`otf_lambda`]) rewrites each record and
/// routes it by `otfMetadata`: records land in the table it names (or the
/// destination's own table when it names none), once across two runs; dropped
/// records nowhere; failed ones, ones naming a missing table and updates in the error
/// output with Firehose's codes and their original data.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn weir_run_puts_each_record_where_its_lambda_says() {
    use weir_aws::kinesis::producer::{Outgoing, Producer};
    let fk = weir_testkit::Emulator::start("ferrokinesis", &[]);
    let k = weir_e2e::kinesis(&fk.endpoint).await;
    weir_e2e::create_stream(&k, "lambda-routed", 2).await;
    let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let (lambda_url, server) = weir_e2e::serve_lambda(axum::routing::post(otf_lambda), calls.clone()).await;

    let dir = tempfile::tempdir().unwrap();
    let (db, warehouse) = (dir.path().join("catalog.db"), dir.path().join("warehouse"));
    std::fs::create_dir_all(&warehouse).unwrap();
    let (db_s, wh_s) = (db.display().to_string(), warehouse.display().to_string());
    weir_e2e::pyiceberg(
        weir_e2e::PYICEBERG_CREATE_MCP_TABLES,
        &[db_s.as_str(), wh_s.as_str(), "mcp.events", "mcp.search", "mcp.fetch_url"],
    );
    let tools = ["search", "fetch_url", "other"];
    let modes = |i: u64| match i % 10 {
        3 => "drop",
        5 => "fail",
        7 => "missing",
        9 => "update",
        _ => "",
    };
    let put = |from: u64, to: u64| -> Vec<Outgoing> {
        (from..to)
            .map(|i| Outgoing {
                id: i,
                partition_key: format!("pk-{i}"),
                data: Bytes::from(
                    json!({"tenant": format!("t{}", i % 4), "tool": tools[(i % 3) as usize],
                           "session": format!("s-{i:05}"), "ms": i, "mode": modes(i)})
                    .to_string(),
                ),
            })
            .collect()
    };
    assert_eq!(Producer::new(k.clone(), "lambda-routed").put_all(put(0, 200)).await.accepted.len(), 200);
    let destination = json!({
        "DestinationTableConfigurationList": [{"DestinationDatabaseName": "mcp", "DestinationTableName": "events"}],
        "CatalogConfiguration": {"CatalogARN": "arn:aws:glue:us-east-1:123456789012:catalog"},
        "BufferingHints": {"IntervalInSeconds": 0},
        "ProcessingConfiguration": {"Enabled": true, "Processors": [{"Type": "Lambda", "Parameters": [
            {"ParameterName": "LambdaArn", "ParameterValue": "arn:aws:lambda:us-east-1:123456789012:function:otf-router"},
            {"ParameterName": "NumberOfRetries", "ParameterValue": "2"}]}]},
        "S3Configuration": {"BucketARN": "arn:aws:s3:::unused"},
    });
    let consumer = json!({"consumers": [{
        "name": "lambda-routed",
        "type": "iceberg",
        "catalog": {"type": "sql", "database": db_s, "warehouse": wh_s},
        "error_output": {"directory": dir.path().join("errors")},
        "destination": destination,
    }]});
    let aws = format!("kinesis_endpoint_url = \"{}\"\nlambda_endpoint_url = \"{lambda_url}\"\n", fk.endpoint);
    let cfg =
        weir_e2e::one_worker_config(dir.path(), "lambda-routed", "ice", &aws, &toml::to_string(&consumer).unwrap());
    weir_e2e::run_until_caught_up(&cfg);
    assert_eq!(Producer::new(k.clone(), "lambda-routed").put_all(put(200, 300)).await.accepted.len(), 100);
    weir_e2e::run_until_caught_up(&cfg);
    server.abort();

    let written = |i: &u64| matches!(modes(*i), "");
    for (t, table) in [(0u64, "mcp.search"), (1, "mcp.fetch_url"), (2, "mcp.events")] {
        let got: Vec<String> =
            serde_json::from_value(weir_e2e::pyiceberg(SESSIONS, &[db_s.as_str(), wh_s.as_str(), table])).unwrap();
        let want: Vec<String> = (0..300).filter(|i| i % 3 == t && written(i)).map(|i| format!("s-{i:05}")).collect();
        assert_eq!(got, want, "{table}: each record the Lambda sent there once");
    }
    let errors = error_codes(&dir.path().join("errors"), "session");
    let want: Vec<(String, String)> = (0..300u64)
        .filter_map(|i| {
            let code = match modes(i) {
                "fail" => "Lambda.ProcessingFailedStatus",
                "missing" => "Iceberg.NoSuchTable",
                "update" => "Iceberg.UnsupportedOperation",
                _ => return None,
            };
            Some((format!("s-{i:05}"), code.to_owned()))
        })
        .collect();
    assert_eq!(errors, want, "each failed or unroutable record in the error output once, as it was read");
    assert!(calls.load(std::sync::atomic::Ordering::SeqCst) >= 3, "a throttled first call, then one per run or more");
}

/// Every row of the demo's table beside every line of its archive, as tuples, each
/// list sorted.
const DEMO_ROWS: &str = r#"
import glob, gzip, json, sys
from pyiceberg.catalog.sql import SqlCatalog
out = sys.argv[1]
catalog = SqlCatalog("weir", uri="sqlite:///" + out + "/catalog.db", warehouse="file://" + out + "/warehouse")
table = catalog.load_table("mcp.tool_calls")
rows = sorted([r["tenantId"], r["toolName"], r["sessionId"],
               r["ts"].strftime("%Y-%m-%dT%H:%M:%S.") + "%03dZ" % (r["ts"].microsecond // 1000),
               r["durationMs"], r["success"], r["errorCode"]] for r in table.scan().to_arrow().to_pylist())
archived = []
for path in glob.glob(out + "/archive/tool-events/**/*.gz", recursive=True):
    for line in gzip.open(path, "rt"):
        e = json.loads(line)
        archived.append([e["tenant_id"], e["tool_name"], e["session_id"], e["timestamp_utc"], e["duration_ms"],
                         e["success"], e["error_code"]])
print(json.dumps({"rows": rows, "archived": sorted(archived), "snapshots": len(table.snapshots())}))
"#;

/// `weir demo` writes its Iceberg table exactly once across a split, a merge and two
/// workers handing shards over: pyiceberg's rows are, field for field, the archive's
/// lines (the archiver's own exactly-once output, normalised by another consumer).
#[test]
fn the_demos_table_holds_what_its_archive_holds() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("demo");
    let run = weir_e2e::weir_command()
        .args(["demo", "--records", "3000", "--rate", "1000", "--out", out.to_str().unwrap()])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&run.stdout);
    assert!(run.status.success(), "{said}\n{}", String::from_utf8_lossy(&run.stderr));
    assert!(said.contains("Iceberg table (mcp-table):"), "{said}");
    let read = weir_e2e::pyiceberg(DEMO_ROWS, &[out.to_str().unwrap()]);
    let (rows, archived) = (read["rows"].as_array().unwrap(), read["archived"].as_array().unwrap());
    assert!(rows.len() > 2_900, "most of 3,000 events are well formed: {}", rows.len());
    assert_eq!(rows.len(), archived.len(), "as many rows as archived lines");
    for (row, line) in rows.iter().zip(archived) {
        assert_eq!(row, line, "each row is an archived event");
    }
    assert!(read["snapshots"].as_u64().unwrap() > 1, "committed as it went: {}", read["snapshots"]);
}
