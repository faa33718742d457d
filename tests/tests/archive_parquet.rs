//! Parquet output (`DataFormatConversionConfiguration`), read back by DuckDB with the
//! declared types and hive partitions: every Hive type round-trips, every event is in
//! exactly one row, and records that do not fit the table go to the
//! `format-conversion-failed` error output with the column named and the record kept.
#![allow(clippy::unwrap_used, clippy::print_stdout)] // a test: a failed expectation is a failed test

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use bytes::Bytes;
use serde_json::json;
use weir_archiver::parquet::{Column, ColumnType};
use weir_archiver::{Archiver, ArchiverOptions, DeliveryMode};
use weir_core::{
    Clock, CloseReason, Consumer, ExtendedSequenceNumber, Record, RecordBatch, SequenceNumber, ShardId, Timestamp,
};
use weir_e2e::{duckdb, files};
use weir_firehose::{Compression, from_json, validate};
use weir_local::FsObjectSink;
use weir_testkit::{CrashSwitch, ManualClock, SimAcks, SimLeases};

const EVENTS: u64 = 3_000;

/// Every Hive type, with the type DuckDB reads it as.
const COLUMNS: [(&str, &str, &str); 18] = [
    ("tenant_id", "string", "VARCHAR"),
    ("tool_name", "varchar(64)", "VARCHAR"),
    ("session_id", "string", "VARCHAR"),
    ("ts", "timestamp", "TIMESTAMP"),
    ("duration_ms", "int", "INTEGER"),
    ("success", "boolean", "BOOLEAN"),
    ("error_code", "string", "VARCHAR"),
    ("day", "date", "DATE"),
    ("cost", "decimal(12,4)", "DECIMAL(12,4)"),
    ("ratio", "double", "DOUBLE"),
    ("tiny", "tinyint", "TINYINT"),
    ("small", "smallint", "SMALLINT"),
    ("big", "bigint", "BIGINT"),
    ("f", "float", "FLOAT"),
    ("tags", "array<string>", "VARCHAR[]"),
    ("args", "struct<q:string,n:bigint>", "STRUCT(q VARCHAR, n BIGINT)"),
    ("labels", "map<string,string>", "MAP(VARCHAR, VARCHAR)"),
    ("blob", "binary", "BLOB"),
];

fn event(n: u64) -> String {
    let blob = base64::engine::general_purpose::STANDARD.encode(format!("x{n}"));
    let error = if n.is_multiple_of(5) { json!("E_TIMEOUT") } else { json!(null) };
    json!({
        "tenantId": format!("t{}", n % 7),
        "toolName": format!("tool{}", n % 3),
        "sessionId": format!("s-{n}"),
        "ts": format!("2025-11-29T07:06:{:02}.{:03}Z", n % 60, n % 1000),
        "durationMs": n % 500,
        "success": n.is_multiple_of(2),
        "errorCode": error,
        "day": "2025-11-29",
        "cost": format!("{n}.{:04}", n % 10_000),
        "ratio": n as f64 / 8.0,
        "tiny": n % 100,
        "small": n % 30_000,
        "big": n * 1_000_000_000,
        "f": 0.5,
        "tags": [format!("a{}", n % 3), "b"],
        "args": {"Q": format!("q{n}"), "n": n, "ignored": true},
        "labels": {"k": format!("v{n}")},
        "blob": blob,
        "extra": {"not": "a column"},
    })
    .to_string()
}

/// Valid JSON with a partition key, each with one value its column cannot take.
const MISFITS: [(&str, &str); 9] = [
    (r#"{"tenantId":"t1","sessionId":"bad-1","durationMs":"slow"}"#, "duration_ms"),
    (r#"{"tenantId":"t1","sessionId":"bad-2","tiny":300}"#, "tiny"),
    (r#"{"tenantId":"t1","sessionId":"bad-3","day":"29/11/2025"}"#, "day"),
    (r#"{"tenantId":"t1","sessionId":"bad-4","cost":"12345678901.5"}"#, "cost"),
    (r#"{"tenantId":"t1","sessionId":"bad-5","tags":"a,b"}"#, "tags"),
    (r#"{"tenantId":"t1","sessionId":"bad-6","args":{"n":"many"}}"#, "args.n"),
    (r#"{"tenantId":"t1","sessionId":"bad-7","labels":["k"]}"#, "labels"),
    (r#"{"tenantId":"t1","sessionId":"bad-8","blob":"%%%"}"#, "blob"),
    (r#"{"tenantId":"t1","sessionId":"bad-9","ts":"yesterday"}"#, "ts"),
];

fn record(n: u64, data: String) -> Record {
    Record {
        partition_key: format!("pk{n}"),
        position: ExtendedSequenceNumber::plain(SequenceNumber::from_u128(u128::from(n))),
        approximate_arrival: Timestamp::from_millis(1_764_400_000_000),
        data: Bytes::from(data),
    }
}

/// Archives the events and the misfits into `dir` with `buffer_bytes` per object.
async fn archive(dir: &Path, buffer_bytes: u64, mode: DeliveryMode) {
    let text = include_str!("../../crates/weir-firehose/tests/fixtures/parquet-destination.json");
    let mut settings = validate(&from_json(text).unwrap()).unwrap();
    assert_eq!(settings.compression, Compression::Parquet);
    assert_eq!(settings.file_extension, ".parquet");
    let conversion = settings.conversion.as_mut().unwrap();
    conversion.columns = Some(
        COLUMNS
            .iter()
            .map(|(name, ty, _)| Column { name: (*name).into(), ty: ColumnType::parse(ty).unwrap() })
            .collect(),
    );
    settings.buffer_bytes = buffer_bytes;
    let clock = ManualClock::new(Timestamp::from_millis(1_764_400_000_000));
    let sink = Arc::new(FsObjectSink::new(dir).unwrap());
    let mut options = ArchiverOptions::new("parquet", settings);
    options.mode = mode;
    let mut a = Archiver::new(options, sink, Arc::new(clock.clone())).unwrap();
    let leases = SimLeases::new();
    let acks = SimAcks::new(leases.clone(), 1, CrashSwitch::after(None));
    let shard = ShardId::new("shard-0");
    a.on_shard_open(&leases.take(&shard, 1)).await.unwrap();
    let mut records: Vec<Record> = (1..=EVENTS).map(|n| record(n, event(n))).collect();
    for (i, (misfit, _)) in MISFITS.iter().enumerate() {
        records.insert(i * 300, record(0, (*misfit).to_owned()));
    }
    for (i, r) in records.iter_mut().enumerate() {
        r.position = ExtendedSequenceNumber::plain(SequenceNumber::from_u128(i as u128 + 1));
    }
    for chunk in records.chunks(500) {
        let batch = RecordBatch {
            shard_id: shard.clone(),
            records: chunk.to_vec(),
            millis_behind_latest: Some(0),
            child_shards: None,
        };
        a.on_batch(&batch, &acks).await.unwrap();
    }
    clock.advance(Duration::from_secs(400));
    a.on_tick(clock.now(), &acks).await.unwrap();
    a.on_shard_close(&shard, CloseReason::Shutdown, &acks).await.unwrap();
    let checkpoint = leases.checkpoint(&shard);
    assert!(checkpoint.is_some(), "the checkpoint moved once everything was durable");
}

#[tokio::test]
async fn parquet_objects_read_back_in_duckdb_with_their_types() {
    let dir = tempfile::tempdir().unwrap();
    // Small objects: several row groups' worth of files per partition.
    archive(dir.path(), 64 * 1024, DeliveryMode::ExactlyOnce).await;
    let data: Vec<_> = files(&dir.path().join("tool-events"));
    assert!(data.len() > 7, "several objects per partition: {}", data.len());
    assert!(data.iter().all(|p| p.to_string_lossy().ends_with(".parquet")), "{data:?}");
    let glob = format!("{}/tool-events/*/*/*.parquet", dir.path().display());
    let from = format!("read_parquet('{glob}', hive_partitioning = true)");

    let described = duckdb(&format!("SELECT column_name, column_type FROM (DESCRIBE SELECT * FROM {from})"));
    let mut want: Vec<serde_json::Value> = COLUMNS.iter().map(|(n, _, t)| json!([n, t])).collect();
    want.push(json!(["dt", "DATE"]));
    want.push(json!(["tenant", "VARCHAR"]));
    assert_eq!(json!(described), json!(want), "DuckDB reads the declared types");

    let counts = duckdb(&format!(
        "SELECT count(*), count(DISTINCT session_id), count(*) FILTER (WHERE tenant <> tenant_id), \
         sum(duration_ms), count(error_code), sum(big), sum(cost)::VARCHAR FROM {from}"
    ));
    let sum = |f: fn(u64) -> u64| (1..=EVENTS).map(f).sum::<u64>();
    let cost: u64 = (1..=EVENTS).map(|n| n * 10_000 + n % 10_000).sum();
    assert_eq!(
        json!(counts[0]),
        json!([
            EVENTS,
            EVENTS,
            0,
            sum(|n| n % 500),
            EVENTS / 5,
            sum(|n| n * 1_000_000_000),
            format!("{}.{:04}", cost / 10_000, cost % 10_000)
        ])
    );

    let row = duckdb(&format!(
        "SELECT tenant_id, tool_name, ts::VARCHAR, duration_ms, success, error_code, day::VARCHAR, cost::VARCHAR, \
         ratio, tiny, small, big, f, tags, args.q, args.n, labels['k'], blob::VARCHAR FROM {from} WHERE session_id = 's-15'"
    ));
    assert_eq!(
        json!(row),
        json!([[
            "t1",
            "tool0",
            "2025-11-29 07:06:15.015",
            15,
            false,
            "E_TIMEOUT",
            "2025-11-29",
            "15.0015",
            1.875,
            15,
            15,
            15_000_000_000u64,
            0.5,
            ["a0", "b"],
            "q15",
            15,
            "v15",
            "x15"
        ]]),
        "every type round-trips"
    );

    // The misfits, each in the error output with its column named and its bytes kept.
    let errors = files(&dir.path().join("tool-events-errors/format-conversion-failed"));
    assert!(errors.iter().all(|p| p.extension().is_none()), "error objects are JSON lines: {errors:?}");
    let mut lines = Vec::new();
    for p in errors {
        for l in std::fs::read_to_string(p).unwrap().lines() {
            lines.push(serde_json::from_str::<serde_json::Value>(l).unwrap());
        }
    }
    assert_eq!(lines.len(), MISFITS.len());
    for (misfit, column) in MISFITS {
        let line = lines
            .iter()
            .find(|l| {
                base64::engine::general_purpose::STANDARD.decode(l["rawData"].as_str().unwrap()).unwrap()
                    == misfit.as_bytes()
            })
            .unwrap_or_else(|| panic!("{misfit} is in the error output"));
        // Firehose's format conversion error record, field for field.
        let keys: Vec<&str> = line.as_object().unwrap().keys().map(String::as_str).collect();
        let mut expected = vec![
            "arrivalTimestamp",
            "attemptEndingTimestamp",
            "attemptsMade",
            "dataCatalogTable",
            "lastErrorCode",
            "lastErrorMessage",
            "rawData",
            "sequenceNumber",
            "subSequenceNumber",
        ];
        expected.sort_unstable();
        assert_eq!(keys, expected, "{line}");
        assert_eq!(line["lastErrorCode"], "DataFormatConversion.Failed");
        let message = line["lastErrorMessage"].as_str().unwrap();
        assert!(message.starts_with(&format!("column {column}")), "{misfit}: {message}");
        assert!(line["sequenceNumber"].as_str().is_some_and(|s| s.parse::<u128>().is_ok()), "{line}");
        assert_eq!(line["subSequenceNumber"], 0);
        assert_eq!(line["dataCatalogTable"]["tableName"], "tool_events");
        assert_eq!(line["dataCatalogTable"]["databaseName"], "mcp");
    }
    let bad = duckdb(&format!("SELECT count(*) FROM {from} WHERE session_id LIKE 'bad-%'"));
    assert_eq!(bad[0][0], json!(0), "no misfit reached the data");

    // Firehose's at-least-once mode writes the same archive (no intents, no claims).
    let firehose = tempfile::tempdir().unwrap();
    archive(firehose.path(), 64 * 1024, DeliveryMode::Firehose).await;
    let glob = format!("{}/tool-events/*/*/*.parquet", firehose.path().display());
    let rows = duckdb(&format!(
        "SELECT count(*), count(DISTINCT session_id), sum(duration_ms) FROM read_parquet('{glob}', hive_partitioning = true)"
    ));
    assert_eq!(json!(rows[0]), json!([EVENTS, EVENTS, sum(|n| n % 500)]), "firehose mode");
}

/// Creates Glue database `mcp` and table `normalized` in moto with the columns of
/// mcp-normalize's lines (and a partition key, which is not a file column).
async fn create_glue_table(moto: &str) {
    use aws_sdk_glue::types::{Column as GlueColumn, DatabaseInput, StorageDescriptor, TableInput};
    let sdk = weir_aws::load_sdk_config(&weir_aws::AwsSettings::emulator(moto)).await;
    let glue = aws_sdk_glue::Client::new(&sdk);
    glue.create_database().database_input(DatabaseInput::builder().name("mcp").build().unwrap()).send().await.unwrap();
    let column = |n: &str, t: &str| GlueColumn::builder().name(n).r#type(t).build().unwrap();
    let descriptor = StorageDescriptor::builder()
        .columns(column("tenant_id", "string"))
        .columns(column("session_id", "string"))
        .columns(column("timestamp_utc", "timestamp"))
        .columns(column("duration_ms", "bigint"))
        .columns(column("success", "boolean"))
        .build();
    let table = TableInput::builder()
        .name("normalized")
        .storage_descriptor(descriptor)
        .partition_keys(column("tenant", "string"))
        .build()
        .unwrap();
    glue.create_table().database_name("mcp").table_input(table).send().await.unwrap();
}

/// A worker config archiving `stream` as Parquet with the table of Glue `mcp.<table>`.
fn glue_config(dir: &Path, kinesis: &str, moto: &str, table: &str) -> std::path::PathBuf {
    let archiver = weir_e2e::tenant_archiver_toml(&dir.join("out"))
        .replace("CompressionFormat = \"GZIP\"", "CompressionFormat = \"UNCOMPRESSED\"")
        + &format!(
            "[consumers.destination.DataFormatConversionConfiguration]\n\
             SchemaConfiguration = {{ DatabaseName = \"mcp\", TableName = \"{table}\", Region = \"us-east-1\" }}\n"
        );
    let cfg = dir.join(format!("{table}.toml"));
    let text = format!(
        "{worker}\n[stream]\nkind = \"kinesis\"\nname = \"glue-events\"\n[leases]\npath = \"{leases}\"\n\
         [aws]\nkinesis_endpoint_url = \"{kinesis}\"\nglue_endpoint_url = \"{moto}\"\n[http]\nlisten = \"\"\n{archiver}",
        worker = weir_e2e::worker_toml(None),
        leases = dir.join("leases.db").display(),
    );
    std::fs::write(&cfg, text).unwrap();
    cfg
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_columns_come_from_the_glue_table_the_destination_names() {
    use weir_testkit::Emulator;
    let fk = Emulator::start("ferrokinesis", &[]);
    let moto = Emulator::start("moto", &[]);
    create_glue_table(&moto.endpoint).await;
    let k = weir_e2e::kinesis(&fk.endpoint).await;
    weir_e2e::create_stream(&k, "glue-events", 2).await;
    let p = weir_aws::kinesis::producer::Producer::new(k.clone(), "glue-events");
    weir_e2e::put_wave(&p, "glue", 1_000).await;
    let dir = tempfile::tempdir().unwrap();

    // A table that does not exist: the worker refuses to start, naming the field and why.
    let missing = glue_config(dir.path(), &fk.endpoint, &moto.endpoint, "no_such_table");
    let mut cmd = weir_e2e::weir_command();
    cmd.args(["run", "--config", missing.to_str().unwrap(), "--until-caught-up"]);
    let (out, _) = weir_e2e::timed(cmd, Duration::from_secs(60));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("the table of DataFormatConversionConfiguration"), "{stderr}");
    assert!(stderr.contains("EntityNotFoundException"), "{stderr}");
    assert!(!dir.path().join("out").exists(), "nothing archived");

    let cfg = glue_config(dir.path(), &fk.endpoint, &moto.endpoint, "normalized");
    let mut cmd = weir_e2e::weir_command();
    cmd.args(["run", "--config", cfg.to_str().unwrap(), "--until-caught-up"]);
    let (out, _) = weir_e2e::timed(cmd, Duration::from_secs(60));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let glob = format!("{}/out/events/**/*.parquet", dir.path().display());
    let from = format!("read_parquet('{glob}', hive_partitioning = true)");
    let described = duckdb(&format!("SELECT column_name, column_type FROM (DESCRIBE SELECT * FROM {from})"));
    assert_eq!(
        json!(described),
        json!([
            ["tenant_id", "VARCHAR"],
            ["session_id", "VARCHAR"],
            ["timestamp_utc", "TIMESTAMP"],
            ["duration_ms", "BIGINT"],
            ["success", "BOOLEAN"],
            ["tenant", "VARCHAR"]
        ]),
        "the Glue table's columns, in its order"
    );
    let rows = duckdb(&format!("SELECT count(*), count(DISTINCT session_id), count(DISTINCT tenant) FROM {from}"));
    assert_eq!(json!(rows[0]), json!([1_000, 1_000, 3]));
}

/// `weir replay --from-archive` reads a Parquet archive, one JSON line per row, and
/// re-partitions it by tool into GZIP JSON lines. DuckDB finds the same rows on both
/// sides, every column of every type equal when the JSON is read with the table's
/// types (binary as base64).
#[tokio::test]
async fn a_parquet_archive_replays_as_json_lines() {
    let dir = tempfile::tempdir().unwrap();
    archive(dir.path(), 64 * 1024, DeliveryMode::ExactlyOnce).await;
    let replayed = dir.path().join("replayed");
    let cfg = dir.path().join("replay.toml");
    std::fs::write(
        &cfg,
        format!(
            "[stream]\nname = \"unused-for-archive-replays\"\n[leases]\npath = \"{}\"\n{}",
            dir.path().join("leases.db").display(),
            weir_e2e::by_tool_archiver_toml(&replayed)
        ),
    )
    .unwrap();
    let archive = dir.path().join("tool-events");
    let out = std::process::Command::new(weir_e2e::weir_binary())
        .args(["replay", "--config", cfg.to_str().unwrap(), "--from-archive", archive.to_str().unwrap()])
        .args(["--from", "2025-11-29T00:00:00Z", "--to", "2025-11-30T00:00:00Z", "--consumers", "by-tool"])
        .args(["--job", "from-parquet"])
        .output()
        .unwrap();
    let log = format!("{}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{log}");
    assert!(!replayed.join("by-tool-errors").exists(), "no row failed: {log}");

    let parquet = format!("read_parquet('{}/*/*/*.parquet')", archive.display());
    let types: Vec<String> = COLUMNS
        .iter()
        .map(|(name, _, ty)| format!("{name}: '{}'", if *ty == "BLOB" { "VARCHAR" } else { ty }))
        .collect();
    let json = format!(
        "read_json('{}/by-tool/*/*/*.gz', format = 'newline_delimited', columns = {{{}}})",
        replayed.display(),
        types.join(", ")
    );
    let names: Vec<&str> = COLUMNS.iter().map(|(n, _, _)| *n).collect();
    let parquet_side = names.iter().map(|n| if *n == "blob" { "to_base64(blob)".into() } else { n.to_string() });
    let select = |from: &str, columns: &str| format!("SELECT {columns} FROM {from}");
    let (p, j) = (parquet_side.collect::<Vec<_>>().join(", "), names.join(", "));
    let diff = duckdb(&format!(
        "SELECT (SELECT count(*) FROM {json}), \
                (SELECT count(*) FROM ({} EXCEPT ALL {})), (SELECT count(*) FROM ({} EXCEPT ALL {}))",
        select(&parquet, &p),
        select(&json, &j),
        select(&json, &j),
        select(&parquet, &p),
    ));
    assert_eq!(json!(diff[0]), json!([EVENTS, 0, 0]), "the same rows, every column equal");
    let misplaced = duckdb(&format!(
        "SELECT count(*) FROM read_json('{}/by-tool/*/*/*.gz', format = 'newline_delimited', hive_partitioning = true) \
         WHERE tool <> tool_name",
        replayed.display()
    ));
    assert_eq!(misplaced[0][0], json!(0), "rows follow the new partitioning");
}

/// A Parquet file another writer made (DuckDB, with its own encodings and types such
/// as `uint`, `hugeint` decimals and nanosecond timestamps) replays as the JSON lines
/// its values read as.
#[test]
fn parquet_files_of_other_writers_read_as_json_lines() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("other.parquet");
    let sql = format!(
        "COPY (SELECT 't' || i AS tenant_id, i::UINTEGER AS n, (i * 1.25)::DECIMAL(30,2) AS cost, \
                 TIMESTAMP_NS '2025-11-29 07:06:40.123456789' AS ts_ns, DATE '2025-11-29' + i::INTEGER AS day, \
                 [i, NULL] AS xs, {{'q': 'v' || i, 'ok': i % 2 = 0}} AS args, MAP {{'k': i}} AS m, \
                 '\\x00\\xFF'::BLOB AS blob, CASE WHEN i = 1 THEN NULL ELSE 'E' END AS error_code \
          FROM range(1, 4) t(i)) TO '{}' (FORMAT PARQUET)",
        path.display()
    );
    let script = "import duckdb, sys\nduckdb.connect().execute(sys.argv[1])\nprint('null')";
    weir_e2e::readers_python(script, &[sql]);
    let lines = weir_archiver::parquet::json_lines(&Bytes::from(std::fs::read(&path).unwrap()), 1 << 20).unwrap();
    let rows: Vec<serde_json::Value> =
        String::from_utf8(lines).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(
        rows[0],
        json!({"tenant_id": "t1", "n": 1, "cost": 1.25, "ts_ns": "2025-11-29 07:06:40.123456789", "day": "2025-11-30",
               "xs": [1, null], "args": {"q": "v1", "ok": false}, "m": {"k": 1}, "blob": "AP8="}),
        "a null column is left out"
    );
    assert_eq!(rows.len(), 3);
    assert_eq!(rows[2]["error_code"], "E");
}

/// Weir's own writer of small flat files (`weir_archiver::parquet::small_file`): for a
/// table of every flat type, with each codec it writes, DuckDB reads the same rows from
/// its file as from arrow-rs's file of the same events, finds the same rows through
/// filters it may answer from the statistics (strings past the 64 bytes where they are
/// truncated included), and reports the same statistics.
#[test]
fn small_flat_files_read_in_duckdb_as_arrow_rs_files_do() {
    use weir_archiver::parquet::{Deserializer, ParquetCompression, ParquetFormat, ParquetOptions};
    let columns = [
        ("s", "string"),
        ("blob", "binary"),
        ("b", "boolean"),
        ("t", "tinyint"),
        ("sm", "smallint"),
        ("i", "int"),
        ("n", "bigint"),
        ("f", "float"),
        ("d", "double"),
        ("ts", "timestamp"),
        ("day", "date"),
    ];
    let columns: Vec<Column> =
        columns.iter().map(|(n, t)| Column { name: (*n).into(), ty: ColumnType::parse(t).unwrap() }).collect();
    let b64 = |b: Vec<u8>| base64::engine::general_purpose::STANDARD.encode(b);
    let mut json = String::new();
    for k in 0..300i64 {
        let mut o = serde_json::Map::new();
        // Each column null in some rows (a different residue for each name length).
        let null = |col: &str| k % 11 == col.len() as i64;
        let s = match k % 4 {
            0 => format!("tenant-{k:04}"),
            1 => "é€😀".repeat(6 + k as usize % 5),
            2 => format!("{}{k}", "z".repeat(70)),
            _ => String::new(),
        };
        let pairs = [
            ("s", json!(s)),
            ("blob", json!(b64(if k % 3 == 0 { vec![0xFF; 70] } else { vec![k as u8, 0, 7] }))),
            ("b", json!(k % 3 == 1)),
            ("t", json!((k % 256) - 128)),
            ("sm", json!(k * 97 - 15_000)),
            ("i", json!(k * 7_000_003 - 1_000_000_000)),
            ("n", json!(k * 3_000_000_000_017 - 400_000_000_000_000)),
            ("f", json!(if k == 5 { -0.0 } else { (k as f64 - 150.5) * 1.5e10 })),
            ("d", json!(if k == 6 { 0.0 } else { (k as f64 - 150.0) / 7.0 })),
            ("ts", if k % 2 == 0 { json!(1_518_033_528 + k) } else { json!(1_518_033_528_123 + k * 1_000_003) }),
            ("day", json!(format!("20{:02}-{:02}-{:02}", k % 100, 1 + k % 12, 1 + k % 28))),
        ];
        for (col, v) in pairs {
            if !null(col) {
                o.insert(col.into(), v);
            }
        }
        json.push_str(&serde_json::Value::Object(o).to_string());
        json.push('\n');
    }
    let dir = tempfile::tempdir().unwrap();
    let mut files = Vec::new();
    for (codec, name) in [
        (ParquetCompression::Snappy, "snappy"),
        (ParquetCompression::Gzip, "gzip"),
        (ParquetCompression::Uncompressed, "none"),
    ] {
        let f = ParquetFormat::new(
            columns.clone(),
            Deserializer::default(),
            ParquetOptions { compression: codec, ..ParquetOptions::default() },
        );
        let mut converted = Vec::new();
        for line in json.lines() {
            assert_eq!(f.convert(line.as_bytes(), &mut converted), Ok(1), "{line}");
        }
        let (ours, _) = f.encode_rows(&converted, &[]).unwrap();
        let theirs = f.encode(json.as_bytes()).unwrap();
        assert_ne!(ours, theirs, "{name}: the small-file writer wrote ours");
        let (o, t) =
            (dir.path().join(format!("ours-{name}.parquet")), dir.path().join(format!("theirs-{name}.parquet")));
        std::fs::write(&o, ours).unwrap();
        std::fs::write(&t, theirs).unwrap();
        files.push((name, o.display().to_string(), t.display().to_string()));
    }
    for (name, ours, theirs) in &files {
        let count =
            |from: &str, filter: &str| duckdb(&format!("SELECT count(*) FROM '{from}' WHERE {filter}"))[0][0].clone();
        assert_eq!(count(ours, "true"), json!(300), "{name}");
        for (a, b) in [(ours, theirs), (theirs, ours)] {
            let diff = duckdb(&format!("SELECT count(*) FROM (SELECT * FROM '{a}' EXCEPT ALL SELECT * FROM '{b}')"));
            assert_eq!(json!(diff), json!([[0]]), "{name}: rows of {a} not in {b}");
        }
        for filter in [
            "s > 'zzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz1'",
            "s > 'é€😀é€😀é€😀é€😀é€😀é€😀é€😀é€😀é€😀'",
            "s < 'tenant-0100'",
            "s IS NULL",
            "blob > '\\xFF\\xFF\\xFF'::BLOB",
            "b",
            "t < -100",
            "sm > 10000",
            "i BETWEEN -5 AND 1000000000",
            "n < 0",
            "f > 0",
            "d = 0",
            "ts > TIMESTAMP '2018-02-07 19:58:48'",
            "day < DATE '2010-01-01'",
        ] {
            let n = count(ours, filter);
            assert_eq!(n, count(theirs, filter), "{name}: {filter}");
            assert!(n.as_u64().is_some_and(|n| n > 0 && n < 300), "{name}: {filter} selects {n} of 300");
        }
        let stats = |from: &str| {
            duckdb(&format!(
                "SELECT path_in_schema, type, stats_min_value, stats_max_value, stats_null_count, compression \
                 FROM parquet_metadata('{from}') ORDER BY column_id"
            ))
        };
        assert_eq!(json!(stats(ours)), json!(stats(theirs)), "{name}: statistics as DuckDB reads them");
    }
}
