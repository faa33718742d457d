//! The `weir` binary as a user runs it.
#![allow(clippy::unwrap_used, clippy::print_stdout)] // a test: a failed expectation is a failed test

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use weir_testkit::patience::{Patience, cpu_ticks, file_len};

fn weir() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_weir"));
    c.env_remove("WEIR_LOG").env("NO_COLOR", "1");
    c
}

/// A child process killed (and reaped) when the test ends, passing or failing.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn write_config(dir: &std::path::Path, body: &str) -> std::path::PathBuf {
    let p = dir.join("weir.toml");
    std::fs::write(&p, body).unwrap();
    p
}

#[test]
fn config_check_accepts_the_examples() {
    for (file, consumers) in [
        (
            "weir.toml",
            "ok (3 consumers: count (count), log (log), mcp-archive (archiver); reading in-process stream \"mcp-events\"",
        ),
        ("weir.toml", "consumer kinds: count, log, files, archiver, alerting, enrichment, iceberg, multilang"),
        ("weir.toml", "leases in SQLite weir-run/leases.db, namespace \"mcp-events\""),
        ("weir-aws.toml", "raw-archive (files), count (count)"),
        (
            "weir-aws.toml",
            "through enhanced fan-out consumer \"weir-mcp-tool-events\"; leases in DynamoDB table weir-leases",
        ),
    ] {
        let example = format!("{}/../../examples/{file}", env!("CARGO_MANIFEST_DIR"));
        let out = weir().args(["config", "check", &example]).output().unwrap();
        assert!(out.status.success(), "{file}: {}", String::from_utf8_lossy(&out.stderr));
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(stdout.contains(consumers), "{file}: {stdout}");
    }
}

#[test]
fn an_unknown_consumer_type_names_the_registered_kinds() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("weir.toml");
    std::fs::write(&path, "[[consumers]]\ntype = \"top-tools\"\nname = \"t\"\n").unwrap();
    let out = weir().args(["config", "check", path.to_str().unwrap()]).output().unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(
            "field `consumers[0].type`: unknown consumer type \"top-tools\"; registered: count, log, files, archiver, alerting, enrichment, iceberg, multilang"
        ),
        "{stderr}"
    );
    let help = weir().arg("--help").output().unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(help.contains("Consumer kinds (`type` in [[consumers]]):"), "{help}");
    assert!(help.contains("  multilang   KCL MultiLang record processors"), "{help}");
}

#[test]
fn bad_config_fails_at_start_naming_the_field() {
    let dir = tempfile::tempdir().unwrap();
    for (body, field) in [
        ("[worker]\nfailover = \"soon\"\n", "worker.failover"),
        ("[leases]\npath = \"x.db\"\nnamspace = \"a\"\n", "namspace"),
        ("[[consumers]]\ntype = \"kafka\"\nname = \"k\"\n", "kafka"),
        ("[[consumers]]\ntype = \"files\"\nname = \"f\"\n", "directory"),
        ("[worker]\nrenew_interval = \"8s\"\n[[consumers]]\ntype = \"count\"\nname = \"c\"\n", "worker.renew_interval"),
        ("[leases]\nkind = \"dynamodb\"\n[[consumers]]\ntype = \"count\"\nname = \"c\"\n", "leases.table"),
        ("[stream]\nkind = \"kafka\"\n", "kafka"),
        ("[worker]\nid = \"(release)\"\n[[consumers]]\ntype = \"count\"\nname = \"c\"\n", "worker.id"),
    ] {
        let p = write_config(dir.path(), body);
        for args in [vec!["config", "check", p.to_str().unwrap()], vec!["run", "--config", p.to_str().unwrap()]] {
            let out = weir().args(&args).output().unwrap();
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(!out.status.success(), "{args:?} accepted {body:?}");
            assert!(err.contains(field), "{args:?}: error for {body:?} does not name {field}: {err}");
        }
    }
    let out = weir().args(["config", "check", "/nonexistent/weir.toml"]).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("does not exist"));
}

#[test]
fn demo_runs_and_reports_where_output_is() {
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("demo");
    let demo = || {
        weir()
            .args(["demo", "--records", "2400", "--rate", "800", "--out", out_dir.to_str().unwrap()])
            .output()
            .unwrap()
    };
    // Twice into the same directory: the second run clears what the first wrote.
    let first = demo();
    assert!(first.status.success(), "{}", String::from_utf8_lossy(&first.stderr));
    let out = demo();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("resharding: split"), "{stdout}");
    assert!(stdout.contains("SHARD_END"), "{stdout}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("INFO"), "the workers' INFO lines stay behind --log-level info: {stderr}");
    let produced: u64 = field(&stdout, "Records produced:");
    let counted: u64 = field(&stdout, "Records counted (count):");
    assert_eq!(produced, 2_400);
    assert_eq!(produced, counted);
    assert!(out_dir.join("leases.db").exists());
    assert!(out_dir.join("archive/tool-events").is_dir());
    assert!(stdout.contains("Alerts (tenant-error-rate):"), "{stdout}");
    let archived: u64 = field(&stdout, "Archived (mcp-archive):");
    let errors: u64 = field(&stdout, "Error output:");
    assert_eq!(archived + errors, produced, "every record archived once: {stdout}");
    // "<rows> rows in <snapshots> snapshots of mcp.tool_calls, <errors> records in its error output"
    let table = stdout.lines().find(|l| l.starts_with("Iceberg table (mcp-table):")).unwrap_or_default();
    let n: Vec<u64> = table.split_whitespace().filter_map(|w| w.trim_end_matches(',').parse().ok()).collect();
    let (rows, table_errors) = (n[0], n[2]);
    assert_eq!(rows + table_errors, produced, "every record in the table once or in its error output: {stdout}");
    assert!(out_dir.join("catalog.db").exists() && out_dir.join("warehouse/mcp").is_dir(), "{stdout}");
}

#[test]
fn bad_archiver_config_names_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let base = "[[consumers]]\ntype = \"archiver\"\nname = \"a\"\ndirectory = \"out\"\n";
    for (extra, field) in [
        ("[consumers.destination]\nBufferingHints = { SizeInMBs = 500 }\n", "BufferingHints.SizeInMBs"),
        ("[consumers.destination]\nPrefix = \"t=!{partitionKeyFromQuery:t}/\"\n", "ErrorOutputPrefix"),
        ("colour = \"red\"\n[consumers.destination]\n", "colour"),
        ("mode = \"twice\"\n[consumers.destination]\n", "twice"),
        ("transform = \"lambda\"\n[consumers.destination]\n", "transform"),
        ("", "destination"),
        ("firehose = \"/nonexistent/stream.json\"\n", "firehose"),
    ] {
        let p = write_config(dir.path(), &format!("{base}{extra}"));
        let out = weir().args(["config", "check", p.to_str().unwrap()]).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "accepted {extra:?}");
        assert!(err.contains(field), "error for {extra:?} does not name {field}: {err}");
    }
}

#[test]
fn bad_alert_rules_name_the_rule_and_the_position() {
    let dir = tempfile::tempdir().unwrap();
    let rule = |extra: &str| {
        format!(
            "[[consumers]]\ntype = \"alerting\"\nname = \"alerts\"\n[[consumers.rules]]\nname = \"tenant-errors\"\nwindow = \"1m\"\naggregate = \"error_rate\"\ncondition = \"> 0.05\"\n{extra}"
        )
    };
    for (extra, wants) in [
        ("filter = \".success == \"\n", vec!["tenant-errors", "filter", "at character"]),
        ("group_by = [\".tenantId\", \".x | nosuch\"]\n", vec!["tenant-errors", "group_by[1]", "at character 5"]),
        ("every = \"7s\"\n", vec!["tenant-errors", "every"]),
    ] {
        let p = write_config(dir.path(), &rule(extra));
        let out = weir().args(["config", "check", p.to_str().unwrap()]).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "accepted {extra:?}");
        for w in wants {
            assert!(err.contains(w), "error for {extra:?} does not contain {w:?}: {err}");
        }
    }
}

#[test]
fn prefix_eval_prints_the_key_or_the_error_output() {
    let example = format!("{}/../../examples/weir.toml", env!("CARGO_MANIFEST_DIR"));
    let eval = |record: &str| {
        let out = weir()
            .args(["prefix", "eval", "--config", &example, "--arrival", "2026-11-29T19:05:00Z", "--record", record])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let ok = eval(r#"{"tenantId":"acme","toolName":"search_docs"}"#);
    assert!(
        ok.starts_with("data   tool-events/tenant=acme/tool=search_docs/year=2026/month=11/day=29/hour=19/mcp-archive-1-2026-11-29-19-05-00-"),
        "{ok}"
    );
    assert!(ok.contains(r#"line   {"schema_version":"1","tenant_id":"acme""#), "{ok}");
    let evil = eval(r#"{"tenantId":"../../etc","toolName":"x"}"#);
    assert!(evil.starts_with("error  tool-events-errors/partitioning-failed/year=2026/month=11/day=29/"), "{evil}");
    assert!(evil.contains("DynamicPartitioning.MetadataExtractionFailed"), "{evil}");
    let bad = eval("not json");
    assert!(bad.starts_with("error  tool-events-errors/processing-failed/"), "{bad}");
}

fn field(text: &str, label: &str) -> u64 {
    let line = text.lines().find(|l| l.starts_with(label)).unwrap_or_else(|| panic!("no {label} in {text}"));
    line[label.len()..].split_whitespace().next().unwrap().parse().unwrap()
}

fn get(port: u16, path: &str) -> Option<(u16, String)> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(s, "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").ok()?;
    let mut body = String::new();
    s.read_to_string(&mut body).ok()?;
    let status = body.split_whitespace().nth(1)?.parse().ok()?;
    Some((status, body))
}

#[test]
fn run_serves_health_and_metrics_and_drains_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let cfg = write_config(
        dir.path(),
        &format!(
            "[worker]\nfailover = \"2s\"\nrenew_interval = \"500ms\"\ntaker_interval = \"500ms\"\n\
             [generator]\nrate = 400\n[leases]\npath = \"{0}/leases.db\"\n\
             [[consumers]]\ntype = \"count\"\nname = \"count\"\n\
             [[consumers]]\ntype = \"files\"\nname = \"files\"\ndirectory = \"{0}/out\"\nmax_age = \"1s\"\n\
             [http]\nlisten = \"127.0.0.1:{1}\"\n",
            dir.path().display(),
            port
        ),
    );
    let log = dir.path().join("run.log");
    let mut child = weir()
        .args(["run", "--config", cfg.to_str().unwrap()])
        .stderr(Stdio::from(std::fs::File::create(&log).unwrap()))
        .spawn()
        .unwrap();
    // The worker's CPU time and log move while it starts and works.
    let mut patience = Patience::new(Duration::from_secs(30));
    let progress = |child: &std::process::Child| (cpu_ticks(child.id()), file_len(&log));
    let run_log = || std::fs::read_to_string(&log).unwrap_or_default();
    loop {
        if let Some((200, _)) = get(port, "/readyz") {
            break;
        }
        if let Err(why) = patience.observe(progress(&child)) {
            panic!("/readyz never became ready: {why}\n{}", run_log());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(get(port, "/healthz").unwrap().0, 200);
    // Wait until records flowed and were checkpointed.
    let metrics = loop {
        let metrics = get(port, "/metrics").unwrap().1;
        if metrics.contains("weir_checkpoint_writes_total") && metrics.contains("weir_records_delivered_total") {
            break metrics;
        }
        if let Err(why) = patience.observe(progress(&child)) {
            panic!("no records delivered and checkpointed: {why}\n{metrics}\n{}", run_log());
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(metrics.contains("weir_records_delivered_total{consumer=\"files\"}"), "{metrics}");
    assert!(metrics.contains("weir_leases_held"), "{metrics}");
    // Slow and oversized requests hold neither the endpoints nor the worker: 100
    // connections stuck in their request line, one with a megabyte of headers.
    let mut slow: Vec<TcpStream> = (0..100)
        .map(|_| {
            let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
            s.write_all(b"GET /metr").unwrap();
            s
        })
        .collect();
    let mut huge = TcpStream::connect(("127.0.0.1", port)).unwrap();
    huge.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let _ = write!(huge, "GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n", "a".repeat(1 << 20));
    let mut answer = String::new();
    let _ = huge.read_to_string(&mut answer);
    assert!(answer.is_empty() || answer.starts_with("HTTP/1.1 431"), "a megabyte of headers: {answer:.200}");
    let delivered = |m: &str| -> f64 {
        m.lines()
            .find(|l| l.starts_with("weir_records_delivered_total{consumer=\"count\"}"))
            .and_then(|l| l.split_whitespace().last()?.parse().ok())
            .unwrap_or(0.0)
    };
    let asked = Instant::now();
    let (code, before) = get(port, "/metrics").unwrap();
    assert_eq!(code, 200);
    assert!(asked.elapsed() < Duration::from_secs(2), "/metrics took {:?} beside slow clients", asked.elapsed());
    loop {
        let now = get(port, "/metrics").unwrap().1;
        if delivered(&now) > delivered(&before) {
            break;
        }
        if let Err(why) = patience.observe(progress(&child)) {
            panic!("the worker stopped delivering beside slow clients: {why}\n{}", run_log());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    slow.truncate(100); // still open while the worker drains
    let kill = Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap();
    assert!(kill.success());
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < deadline, "weir run did not drain within 30s of SIGTERM");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "exit after SIGTERM: {status}");
    // One line says how the worker reads, where its leases are and what runs.
    let log = std::fs::read_to_string(&log).unwrap();
    let start = log.lines().find(|l| l.contains("weir running")).unwrap_or_else(|| panic!("no start line: {log}"));
    for part in ["reading=in-process stream \"mcp-events\"", "leases=SQLite", "consumers=count, files"] {
        assert!(start.contains(part), "{part} in {start}");
    }
    // The drain flushed the files consumer: objects exist.
    let objects = std::fs::read_dir(dir.path().join("out/raw")).map(|d| d.count()).unwrap_or(0);
    assert!(objects > 0, "files consumer flushed on shutdown");
}

#[test]
fn firehose_destinations_are_checked_with_every_problem_named() {
    let fixtures = concat!(env!("CARGO_MANIFEST_DIR"), "/../../crates/weir-firehose/tests/fixtures");
    for f in ["mcp-delivery-stream.yaml", "mcp-destination.json", "mcp-destination.toml"] {
        let out = weir().args(["config", "check", "--firehose", &format!("{fixtures}/{f}")]).output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{f}: {stdout}{}", String::from_utf8_lossy(&out.stderr));
        assert!(stdout.contains("ok (buffer 64 MiB / 300 s, Gzip, dynamic partitioning on)"), "{f}: {stdout}");
    }
    let f = format!("{fixtures}/cloudwatch-logs-destination.json");
    let out = weir().args(["config", "check", "--firehose", &f]).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    let want = "ok (buffer 64 MiB / 0 s, Gzip, dynamic partitioning on, CloudWatch Logs records: messages extracted)";
    assert!(stdout.contains(want), "{stdout}");
    let f = format!("{fixtures}/parquet-destination.json");
    let out = weir().args(["config", "check", "--firehose", &f]).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    let want = "ok (buffer 64 MiB / 300 s, Parquet, dynamic partitioning on, Snappy Parquet with the columns of Glue table mcp.tool_events, or the archiver's `columns`)";
    assert!(stdout.contains(want), "{stdout}");
    assert!(
        stdout
            .contains("warning: DataFormatConversionConfiguration.SchemaConfiguration.RoleARN is accepted and ignored"),
        "{stdout}"
    );
    let dir = tempfile::tempdir().unwrap();
    // Every compression Firehose writes, and FileExtension / CustomTimeZone beside them.
    for (format, shown) in
        [("ZIP", "Zip"), ("Snappy", "Snappy"), ("HADOOP_SNAPPY", "HadoopSnappy"), ("UNCOMPRESSED", "Uncompressed")]
    {
        let f = dir.path().join(format!("{format}.json"));
        std::fs::write(
            &f,
            format!(
                r#"{{"Prefix": "a/!{{timestamp:yyyy/MM/dd/HH}}/", "ErrorOutputPrefix": "e/", "CompressionFormat": "{format}",
                    "FileExtension": ".x", "CustomTimeZone": "Asia/Tokyo"}}"#
            ),
        )
        .unwrap();
        let out = weir().args(["config", "check", "--firehose", f.to_str().unwrap()]).output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{format}: {stdout}{}", String::from_utf8_lossy(&out.stderr));
        assert!(
            stdout.contains(&format!(", {shown},")) || stdout.contains(&format!(", {shown})")),
            "{format}: {stdout}"
        );
    }
    let backup = dir.path().join("backup.json");
    std::fs::write(
        &backup,
        r#"{"Prefix": "a/", "CompressionFormat": "GZIP", "S3BackupMode": "Enabled",
            "S3BackupConfiguration": {"BucketARN": "arn:aws:s3:::raw", "Prefix": "raw/", "CompressionFormat": "Snappy",
                                      "RoleARN": "arn:aws:iam::1:role/r", "BufferingHints": {"SizeInMBs": 10}}}"#,
    )
    .unwrap();
    let out = weir().args(["config", "check", "--firehose", backup.to_str().unwrap()]).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains(r#"source records backed up under "raw/" (Snappy) by consumer <name>-backup"#), "{stdout}");
    std::fs::write(
        &backup,
        r#"{"Prefix": "a/", "S3BackupMode": "Enabled", "S3BackupConfiguration": {"CompressionFormat": "LZO", "BufferingHints": {"SizeInMBs": 500}}}"#,
    )
    .unwrap();
    let out = weir().args(["config", "check", "--firehose", backup.to_str().unwrap()]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("problem: S3BackupConfiguration.CompressionFormat"), "{stderr}");
    assert!(stderr.contains("problem: S3BackupConfiguration.BufferingHints.SizeInMBs"), "{stderr}");
    let orc = dir.path().join("orc.json");
    std::fs::write(
        &orc,
        r#"{"Prefix": "a/", "ErrorOutputPrefix": "e/", "CompressionFormat": "GZIP", "DataFormatConversionConfiguration": {
            "InputFormatConfiguration": {"Deserializer": {"HiveJsonSerDe": {"TimestampFormats": ["yyyy-ww"]}}},
            "OutputFormatConfiguration": {"Serializer": {"OrcSerDe": {}, "ParquetSerDe": {"BlockSizeBytes": 1024, "Compression": "LZO"}}}}}"#,
    )
    .unwrap();
    let out = weir().args(["config", "check", "--firehose", orc.to_str().unwrap()]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    for want in [
        "problem: CompressionFormat: must be UNCOMPRESSED with DataFormatConversionConfiguration enabled",
        "problem: DataFormatConversionConfiguration.InputFormatConfiguration.Deserializer.HiveJsonSerDe.TimestampFormats[0]",
        "problem: DataFormatConversionConfiguration.OutputFormatConfiguration.Serializer.OrcSerDe",
        "problem: DataFormatConversionConfiguration.OutputFormatConfiguration.Serializer.ParquetSerDe.BlockSizeBytes",
        "problem: DataFormatConversionConfiguration.OutputFormatConfiguration.Serializer.ParquetSerDe.Compression",
        "5 problem(s)",
    ] {
        assert!(stderr.contains(want), "{want} in {stderr}");
    }
    let bad = dir.path().join("bad.json");
    std::fs::write(
        &bad,
        r#"{"BufferingHints": {"SizeInMBs": 500}, "CompressionFormat": "LZ4", "Prefix": "a/!{timestamp:yyyy}/"}"#,
    )
    .unwrap();
    let out = weir().args(["config", "check", "--firehose", bad.to_str().unwrap()]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("problem: BufferingHints.SizeInMBs: 500 is outside 1–128"), "{stderr}");
    assert!(stderr.contains("problem: CompressionFormat"), "{stderr}");
    assert!(stderr.contains("ErrorOutputPrefix can't be null"), "{stderr}");
    assert!(stderr.contains("3 problem(s)"), "{stderr}");
}

/// An Iceberg destination, as `create-delivery-stream` input and as a CloudFormation
/// template, is read field for field; what weir cannot serve is named.
#[test]
fn firehose_iceberg_destinations_are_checked_with_every_problem_named() {
    let fixtures = concat!(env!("CARGO_MANIFEST_DIR"), "/../../consumers/iceberg/tests/fixtures");
    let check = |f: &str| weir().args(["config", "check", "--firehose", f]).output().unwrap();
    let out = check(&format!("{fixtures}/mcp-iceberg-stream.json"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    for want in [
        r#"ok as an iceberg consumer's `destination` (tables named by {destinationDatabaseName: "mcp", destinationTableName: .toolName, operation: .op}, buffer 1 MiB / 1 s, error output s3://mcp-firehose-errors/iceberg-errors/)"#,
        "catalog: the Glue Data Catalog of account 123456789012 in us-east-1",
        "warning: RoleARN is accepted and ignored",
    ] {
        assert!(stdout.contains(want), "{want} in {stdout}");
    }
    let out = check(&format!("{fixtures}/mcp-iceberg-stream.yaml"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        stdout.contains(
            "(table mcp.events, buffer 64 MiB / 300 s, error output s3://mcp-firehose-errors/iceberg-errors/)"
        ),
        "{stdout}"
    );
    assert!(stdout.contains("CatalogConfiguration.CatalogARN is a CloudFormation function"), "{stdout}");

    let dir = tempfile::tempdir().unwrap();
    let routed = dir.path().join("lambda.json");
    std::fs::write(
        &routed,
        r#"{"IcebergDestinationConfiguration": {
            "DestinationTableConfigurationList": [{"DestinationDatabaseName": "mcp", "DestinationTableName": "a"},
                                                  {"DestinationDatabaseName": "mcp", "DestinationTableName": "b"}],
            "ProcessingConfiguration": {"Enabled": true, "Processors": [{"Type": "Lambda", "Parameters": [
                {"ParameterName": "LambdaArn", "ParameterValue": "arn:aws:lambda:us-east-1:123456789012:function:router"}]}]},
            "S3Configuration": {"BucketARN": "arn:aws:s3:::errors"}}}"#,
    )
    .unwrap();
    let out = check(routed.to_str().unwrap());
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("tables named by the Lambda's otfMetadata"), "{stdout}");
    assert!(stdout.contains("transforms each batch read (3 retries, 1 MiB per invocation"), "{stdout}");
    assert!(!stdout.contains("123456789012"), "the account is redacted: {stdout}");

    let bad = dir.path().join("bad.json");
    std::fs::write(
        &bad,
        r#"{"IcebergDestinationConfiguration": {
            "DestinationTableConfigurationList": [{"DestinationDatabaseName": "mcp", "DestinationTableName": "events", "UniqueKeys": ["sessionId"]}],
            "ProcessingConfiguration": {"Enabled": true, "Processors": [{"Type": "Lambda", "Parameters": []}]},
            "TableCreationConfiguration": {"Enabled": true}, "SchemaEvolutionConfiguration": {"Enabled": true},
            "S3BackupMode": "AllData", "BufferingHints": {"IntervalInSeconds": 3600}}}"#,
    )
    .unwrap();
    let out = check(bad.to_str().unwrap());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    for want in [
        "problem: DestinationTableConfigurationList[0].UniqueKeys: row-level updates and deletes need delete files",
        "problem: ProcessingConfiguration.Processors[0].LambdaArn: a Lambda processor needs LambdaArn",
        "problem: TableCreationConfiguration.Enabled",
        "problem: SchemaEvolutionConfiguration.Enabled",
        "problem: S3BackupMode",
        "problem: BufferingHints.IntervalInSeconds",
        "6 problem(s)",
    ] {
        assert!(stderr.contains(want), "{want} in {stderr}");
    }
}

#[test]
fn replay_refuses_bad_windows_and_names_before_any_work() {
    let example = format!("{}/../../examples/weir.toml", env!("CARGO_MANIFEST_DIR"));
    let replay = |args: &[&str]| {
        let mut all = vec!["replay", "--config", example.as_str()];
        all.extend_from_slice(args);
        let out = weir().args(&all).output().unwrap();
        assert!(!out.status.success(), "{args:?} accepted");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let backwards =
        replay(&["--from", "2026-11-29T10:00:00Z", "--to", "2026-11-29T09:00:00Z", "--consumers", "mcp-archive"]);
    assert!(
        backwards.starts_with("error: --to (2026-11-29T09:00:00Z) must be after --from"),
        "leads with the problem: {backwards}"
    );
    let no_window = replay(&["--consumers", "mcp-archive"]);
    assert!(no_window.contains("name the job with --job, or give its window with --from and --to"), "{no_window}");
    let efo = replay(&[
        "--from",
        "2026-11-29T08:00:00Z",
        "--to",
        "2026-11-29T09:00:00Z",
        "--consumers",
        "mcp-archive",
        "--efo",
    ]);
    // --efo needs no efo_consumer (the job reads as its own consumer); the in-process
    // stream is still refused, before any work.
    assert!(efo.contains("keeps no history"), "{efo}");
    let unknown = replay(&["--from", "2026-11-29T08:00:00Z", "--to", "2026-11-29T09:00:00Z", "--consumers", "nope"]);
    assert!(unknown.contains("unknown consumer \"nope\"") && unknown.contains("mcp-archive"), "{unknown}");
    let future =
        replay(&["--from", "2026-11-29T08:00:00Z", "--to", "2999-01-01T00:00:00Z", "--consumers", "mcp-archive"]);
    assert!(future.contains("in the future"), "{future}");
    let memory =
        replay(&["--from", "2026-11-29T08:00:00Z", "--to", "2026-11-29T09:00:00Z", "--consumers", "mcp-archive"]);
    assert!(memory.contains("keeps no history"), "{memory}");
    let garbage = replay(&["--from", "yesterday", "--to", "2026-11-29T09:00:00Z", "--consumers", "mcp-archive"]);
    assert!(garbage.contains("--from \"yesterday\""), "{garbage}");
}

/// A local archive with one gzip object written at 2026-11-29T10:00:00Z.
fn tiny_archive(dir: &std::path::Path) -> std::path::PathBuf {
    use flate2::write::GzEncoder;
    let root = dir.join("old");
    let obj = root.join("year=2026/month=11/day=29/hour=10");
    std::fs::create_dir_all(&obj).unwrap();
    let mut gz = GzEncoder::new(Vec::new(), flate2::Compression::default());
    for i in 0..50 {
        writeln!(gz, r#"{{"tenant_id":"t-{}","tool_name":"search","n":{i}}}"#, i % 3).unwrap();
    }
    std::fs::write(obj.join("a-1-2026-11-29-10-00-00-0000.gz"), gz.finish().unwrap()).unwrap();
    root
}

fn replay_config(dir: &std::path::Path, archiver: &str) -> std::path::PathBuf {
    write_config(
        dir,
        &format!(
            r#"
[worker]
shutdown_timeout = "2s"
[stream]
name = "s"
[leases]
path = "{}"
namespace = "t"
[aws]
s3_endpoint_url = "http://127.0.0.1:9"
s3_force_path_style = true
[[consumers]]
type = "archiver"
name = "a"
{archiver}
transform = "none"
[consumers.destination]
Prefix = "new/"
ErrorOutputPrefix = "errors/"
CompressionFormat = "GZIP"
"#,
            dir.join("leases.db").display()
        ),
    )
}

#[test]
fn replay_from_archive_refuses_missing_or_empty_windows() {
    let dir = tempfile::tempdir().unwrap();
    let old = tiny_archive(dir.path());
    let cfg = replay_config(dir.path(), &format!("directory = \"{}\"", dir.path().join("new").display()));
    let replay = |archive: &str, from: &str, to: &str| {
        let out = weir()
            .args(["replay", "--config", cfg.to_str().unwrap(), "--consumers", "a", "--from-archive", archive])
            .args(["--from", from, "--to", to])
            .output()
            .unwrap();
        assert!(!out.status.success());
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let missing =
        replay(&dir.path().join("nope").display().to_string(), "2026-11-29T10:00:00Z", "2026-11-29T11:00:00Z");
    assert!(missing.contains("no such directory"), "{missing}");
    assert!(!dir.path().join("nope").exists(), "a missing archive is not created");
    let outside = replay(old.to_str().unwrap(), "2026-11-29T11:00:00Z", "2026-11-29T12:00:00Z");
    assert!(outside.contains("no object under") && outside.contains("was written in the window"), "{outside}");
    let zone = weir()
        .args(["replay", "--config", cfg.to_str().unwrap(), "--consumers", "a", "--from-archive"])
        .arg(&old)
        .args(["--from", "2026-11-29T10:00:00Z", "--to", "2026-11-29T11:00:00Z", "--archive-time-zone", "Mars/Olympus"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&zone.stderr).contains("not an IANA time zone"));
    let unnamed = weir().args(["replay", "--config", cfg.to_str().unwrap(), "--status"]).output().unwrap();
    assert!(!unnamed.status.success());
    assert!(String::from_utf8_lossy(&unnamed.stderr).contains("name the job with --job"));
}

/// A job reads its archive in runs of consecutive objects; run again over a listing
/// that changed (an object added to the window), it refuses before reading anything
/// instead of replaying the old objects again under new runs.
#[test]
fn a_job_resumed_over_a_changed_archive_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let old = tiny_archive(dir.path());
    let hour = old.join("year=2026/month=11/day=29/hour=10");
    std::fs::copy(hour.join("a-1-2026-11-29-10-00-00-0000.gz"), hour.join("a-1-2026-11-29-10-05-00-0000.gz")).unwrap();
    let new = dir.path().join("new");
    let cfg = replay_config(dir.path(), &format!("directory = \"{}\"", new.display()));
    let run = || {
        weir()
            .args(["replay", "--config", cfg.to_str().unwrap(), "--consumers", "a", "--job", "j", "--from-archive"])
            .arg(&old)
            .args(["--from", "2026-11-29T10:00:00Z", "--to", "2026-11-29T11:00:00Z"])
            .output()
            .unwrap()
    };
    let first = run();
    let stdout = String::from_utf8_lossy(&first.stdout).into_owned();
    assert!(first.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&first.stderr));
    assert!(stdout.contains("1 of 1 shards done"), "two objects, one run: {stdout}");
    let again = run();
    assert!(again.status.success(), "the same listing runs again: {}", String::from_utf8_lossy(&again.stderr));
    std::fs::copy(hour.join("a-1-2026-11-29-10-00-00-0000.gz"), hour.join("a-1-2026-11-29-10-10-00-0000.gz")).unwrap();
    let changed = run();
    let stderr = String::from_utf8_lossy(&changed.stderr);
    assert!(!changed.status.success());
    assert!(stderr.contains("not those the job started with") && stderr.contains("+2-"), "{stderr}");
}

#[test]
fn cancel_stops_a_running_replay_and_keeps_it_stopped() {
    let dir = tempfile::tempdir().unwrap();
    let old = tiny_archive(dir.path());
    // Its bucket is unreachable: the archiver retries without end and the job cannot
    // finish by itself.
    let cfg = replay_config(dir.path(), "bucket = \"unreachable\"");
    let args = |extra: &[&str]| {
        let mut a: Vec<String> =
            ["replay", "--config", cfg.to_str().unwrap(), "--job", "stuck"].iter().map(|s| s.to_string()).collect();
        a.extend(extra.iter().map(|s| s.to_string()));
        a
    };
    let run_args = args(&[
        "--consumers",
        "a",
        "--from-archive",
        old.to_str().unwrap(),
        "--from",
        "2026-11-29T10:00:00Z",
        "--to",
        "2026-11-29T11:00:00Z",
    ]);
    let child = weir()
        .args(&run_args)
        .env("AWS_ACCESS_KEY_ID", "test")
        .env("AWS_SECRET_ACCESS_KEY", "test")
        .env("AWS_REGION", "us-east-1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut patience = Patience::new(Duration::from_secs(60));
    loop {
        let status = weir().args(args(&["--status"])).output().unwrap();
        let text = String::from_utf8_lossy(&status.stdout).into_owned();
        if text.contains("in progress; 0 of 1 shards done") {
            break;
        }
        if let Err(why) = patience.observe((cpu_ticks(child.id()), &text)) {
            panic!("the job never started: {why}: {text}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let cancel = weir().args(args(&["--cancel"])).output().unwrap();
    assert!(cancel.status.success(), "{}", String::from_utf8_lossy(&cancel.stderr));
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("replay stuck: cancelled; 0 of 1 shards done"), "{stdout}");
    let status = weir().args(args(&["--status"])).output().unwrap();
    assert!(String::from_utf8_lossy(&status.stdout).contains("job stuck: cancelled"));
    let again = weir().args(&run_args).output().unwrap();
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("job stuck was cancelled"));
}

/// `[metrics] cloudwatch = true`: embedded-metric-format lines on stdout that CloudWatch
/// Logs turns into the metrics the deploy/ alarms watch; `weir health` answers for the
/// image's HEALTHCHECK; SIGTERM still drains to exit 0 and a last line is written.
#[test]
fn run_writes_cloudwatch_metric_lines_and_health_checks_readyz() {
    use std::io::BufRead;
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(
        dir.path(),
        &format!(
            r#"[worker]
failover = "2s"
renew_interval = "500ms"
taker_interval = "500ms"
tick_interval = "200ms"
[generator]
rate = 400
[leases]
path = "{0}/leases.db"
namespace = "cw-test"
[[consumers]]
type = "archiver"
name = "archive"
directory = "{0}/archive"
transform = "mcp-normalize"
[consumers.destination]
Prefix = "events/tenant=!{{partitionKeyFromQuery:tenantId}}/"
ErrorOutputPrefix = "errors/!{{firehose:error-output-type}}/"
CompressionFormat = "GZIP"
BufferingHints = {{ SizeInMBs = 64, IntervalInSeconds = 60 }}
DynamicPartitioningConfiguration = {{ Enabled = true }}
[consumers.destination.ProcessingConfiguration]
Enabled = true
Processors = [{{ Type = "MetadataExtraction", Parameters = [
  {{ ParameterName = "MetadataExtractionQuery", ParameterValue = "{{tenantId: .tenant_id}}" }},
  {{ ParameterName = "JsonParsingEngine", ParameterValue = "JQ-1.6" }} ] }}]
[http]
listen = "127.0.0.1:0"
[metrics]
cloudwatch = true
namespace = "weir-test"
interval = "1s"
"#,
            dir.path().display(),
        ),
    );
    let log = dir.path().join("run.log");
    let mut child = weir()
        .args(["run", "--config", cfg.to_str().unwrap()])
        .stdout(Stdio::piped())
        .stderr(Stdio::from(std::fs::File::create(&log).unwrap()))
        .spawn()
        .unwrap();
    // Port 0: the worker says which port it got.
    let mut patience = Patience::new(Duration::from_secs(30));
    let port = loop {
        let text = std::fs::read_to_string(&log).unwrap();
        if let Some(line) = text.lines().find(|l| l.contains("serving /metrics")) {
            let port: u16 =
                line.split("127.0.0.1:").nth(1).and_then(|p| p.split_whitespace().next()?.parse().ok()).unwrap();
            assert_ne!(port, 0, "{line}");
            break port;
        }
        if let Err(why) = patience.observe((cpu_ticks(child.id()), text.len())) {
            panic!("no serving line: {why}: {text}");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let url = format!("http://127.0.0.1:{port}/readyz");
    loop {
        let health = weir().args(["health", "--url", &url]).output().unwrap();
        if health.status.success() {
            assert!(String::from_utf8_lossy(&health.stdout).starts_with("ready"));
            break;
        }
        if let Err(why) = patience.observe((cpu_ticks(child.id()), file_len(&log))) {
            panic!("weir health never succeeded: {why}\n{}", std::fs::read_to_string(&log).unwrap_or_default());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let down = weir().args(["health", "--url", &format!("http://127.0.0.1:{closed}/readyz")]).output().unwrap();
    assert_eq!(down.status.code(), Some(1), "a worker that does not answer is unhealthy");
    assert!(String::from_utf8_lossy(&down.stderr).contains("did not answer"));

    // Lines until one carries the archive's freshness and the read lag.
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let mut read = 0u64;
    let emf = loop {
        let line = lines.next().expect("stdout closed").unwrap();
        read += 1;
        let doc: serde_json::Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON: {line}: {e}"));
        if doc.get("ArchiveDataFreshness").is_some() && doc.get("RecordsRead").is_some_and(|v| v.as_f64() > Some(0.0)) {
            break doc;
        }
        if let Err(why) = patience.observe(read) {
            panic!("no line with the archive's freshness: {why}: {line}");
        }
    };
    assert_eq!(emf["Application"], "cw-test");
    let directive = &emf["_aws"]["CloudWatchMetrics"][0];
    assert_eq!(directive["Namespace"], "weir-test");
    for m in directive["Metrics"].as_array().unwrap() {
        let name = m["Name"].as_str().unwrap();
        assert!(emf[name].is_number(), "{name} declared and given");
    }
    let freshness = emf["ArchiveDataFreshness"].as_f64().unwrap();
    assert!((0.0..60.0).contains(&freshness), "records wait in 60 s buffers: {freshness}");

    let kill = Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap();
    assert!(kill.success());
    let rest: Vec<String> = lines.map(Result::unwrap).collect();
    let status = child.wait().unwrap();
    assert!(status.success(), "exit after SIGTERM: {status}");
    let last: serde_json::Value = serde_json::from_str(rest.last().expect("a last line at shutdown")).unwrap();
    assert_eq!(last["ArchiveDataFreshness"], 0.0, "the drain wrote every buffer: nothing waits");
}

/// The `archiver` label values of a metric's series in a Prometheus text page; `None`
/// for a series without the label.
fn archiver_labels(page: &str, metric: &str) -> std::collections::BTreeSet<Option<String>> {
    page.lines()
        .filter_map(|l| l.strip_prefix(metric))
        .filter(|rest| rest.starts_with('{') || rest.starts_with(' '))
        .map(|rest| {
            let labels = rest.strip_prefix('{').and_then(|r| r.split_once('}')).map_or("", |(l, _)| l);
            labels.split(',').find_map(|kv| kv.strip_prefix("archiver=\"")?.strip_suffix('"').map(str::to_owned))
        })
        .collect()
}

/// Two archivers in one worker (the backup archiver that `S3BackupMode = "Enabled"`
/// adds is the second) are two series of each archiver gauge (freshness, backlog) and
/// of its object counters on `/metrics`, told apart by the `archiver` label, not one
/// series that each overwrites.
#[test]
fn metrics_carry_one_series_per_archiver() {
    use weir_archiver::metrics as am;
    let dir = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let out = dir.path().join("out");
    let cfg = write_config(
        dir.path(),
        &format!(
            "[worker]\nrenew_interval = \"300ms\"\ntaker_interval = \"300ms\"\ntick_interval = \"200ms\"\n\
             [stream]\nshards = 1\n[generator]\nrate = 200\n[leases]\npath = \"{0}/leases.db\"\n\
             [[consumers]]\ntype = \"archiver\"\nname = \"archive\"\ndirectory = \"{1}\"\n\
             [consumers.destination]\nPrefix = \"d/\"\nErrorOutputPrefix = \"e/\"\nS3BackupMode = \"Enabled\"\n\
             BufferingHints = {{ SizeInMBs = 1, IntervalInSeconds = 0 }}\n\
             [consumers.destination.S3BackupConfiguration]\nPrefix = \"source/\"\nErrorOutputPrefix = \"source-errors/\"\n\
             BufferingHints = {{ SizeInMBs = 1, IntervalInSeconds = 0 }}\n\
             [http]\nlisten = \"127.0.0.1:{2}\"\n",
            dir.path().display(),
            out.display(),
            port
        ),
    );
    let log = dir.path().join("run.log");
    let _child = KillOnDrop(
        weir()
            .args(["run", "--config", cfg.to_str().unwrap()])
            .stderr(Stdio::from(std::fs::File::create(&log).unwrap()))
            .spawn()
            .unwrap(),
    );
    let both: std::collections::BTreeSet<Option<String>> =
        [Some("archive".to_owned()), Some("archive-backup".to_owned())].into();
    let gauges = [am::DATA_FRESHNESS, am::BACKLOG_BYTES, am::OBJECTS, am::RECORDS_ARCHIVED, am::OBJECT_BYTES];
    // Both archivers wrote objects (so both set their backlog), and the page shows it.
    let mut patience = Patience::new(Duration::from_secs(60));
    let page = loop {
        let written = |d: &str| std::fs::read_dir(out.join(d)).map(|d| d.count()).unwrap_or(0) > 0;
        let page = get(port, "/metrics").map(|(_, p)| p).unwrap_or_default();
        if written("d") && written("source") && gauges.iter().all(|g| archiver_labels(&page, g).is_superset(&both)) {
            break page;
        }
        let found: Vec<_> = gauges.iter().map(|g| (g, archiver_labels(&page, g))).collect();
        if let Err(why) = patience.observe((written("d"), written("source"), format!("{found:?}"), file_len(&log))) {
            panic!("no series of both archivers: {why}: {found:?}\n{}", std::fs::read_to_string(&log).unwrap());
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    for gauge in gauges {
        assert_eq!(archiver_labels(&page, gauge), both, "{gauge}: one series per archiver, each named\n{page}");
    }
}

/// `http.listen = ""` and `WEIR_HTTP__LISTEN=` disable the endpoints, as documented.
#[test]
fn an_empty_listen_address_disables_the_http_endpoints() {
    let dir = tempfile::tempdir().unwrap();
    let base = "[[consumers]]\ntype = \"count\"\nname = \"c\"\n";
    let p = write_config(dir.path(), &format!("{base}[http]\nlisten = \"\"\n"));
    let out = weir().args(["config", "check", p.to_str().unwrap()]).output().unwrap();
    assert!(out.status.success(), "listen = \"\": {}", String::from_utf8_lossy(&out.stderr));
    let p = write_config(dir.path(), base);
    let out = weir().args(["config", "check", p.to_str().unwrap()]).env("WEIR_HTTP__LISTEN", "").output().unwrap();
    assert!(out.status.success(), "WEIR_HTTP__LISTEN=: {}", String::from_utf8_lossy(&out.stderr));
    let p = write_config(dir.path(), &format!("{base}[http]\nlisten = \"localhost\"\n"));
    let out = weir().args(["config", "check", p.to_str().unwrap()]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("http.listen") && err.contains("empty to disable"), "{err}");
}

/// `weir leases list` and `show` read the table the config names and say what each
/// lease is doing: a SQLite table with an ended parent, a held child with a consumer's
/// checkpoint and open intents, and a child of a parent not finished yet.
#[test]
fn leases_list_and_show_describe_the_table() {
    use weir_core::ports::LeaseTable;
    use weir_core::{Checkpoint, ConsumerName, ExtendedSequenceNumber, Intent, LeaseChange, LeaseMutation};
    use weir_testkit::fixtures::{new_lease, taken_lease};
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("leases.db");
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let t = weir_local::SqliteLeaseTable::open(&db, "ops").unwrap();
        let seq = "49590338271490256608559692538361571095921575989136588898";
        let at = Checkpoint::At(ExtendedSequenceNumber::plain(seq.parse().unwrap()));
        // shardId-0: ended for every consumer.
        let p = taken_lease(&t, "shardId-0", "worker-a").await;
        let end = LeaseChange::Checkpoint {
            checkpoints: [(ConsumerName::new("archive"), Checkpoint::ShardEnd)].into(),
            ended_with_children: Some(vec!["shardId-1".into()]),
        };
        t.mutate(&LeaseMutation::on(&p, end)).await.unwrap();
        // shardId-1: held by worker-b, a checkpoint and two open intents.
        t.create_if_absent(new_lease("shardId-1", &["shardId-0"])).await.unwrap();
        let seen = t.get(&"shardId-1".into()).await.unwrap().unwrap();
        let held = weir_testkit::fixtures::take(&t, &seen, "worker-b").await;
        let cp = LeaseChange::Checkpoint {
            checkpoints: [(ConsumerName::new("archive"), at.clone())].into(),
            ended_with_children: None,
        };
        let held = t.mutate(&LeaseMutation::on(&held, cp)).await.unwrap();
        let intent = |k: &str| Intent {
            target: k.into(),
            scope: "manifest".into(),
            first: ExtendedSequenceNumber::plain(seq.parse().unwrap()),
            last: ExtendedSequenceNumber::plain(seq.parse().unwrap()),
            parts: vec![],
            except: vec![],
        };
        let record = LeaseChange::RecordIntents {
            consumer: ConsumerName::new("archive"),
            intents: vec![intent("_weir/intents/a.manifest"), intent("_weir/intents/b.manifest")],
            replacing: vec![],
        };
        t.mutate(&LeaseMutation::on(&held, record)).await.unwrap();
        // shardId-2: its parent shardId-3 is not finished.
        // With the whole hash key space, past what a JSON number holds.
        let mut full = new_lease("shardId-3", &[]);
        full.hash_range = Some(weir_core::HashKeyRange::FULL);
        t.create_if_absent(full).await.unwrap();
        t.create_if_absent(new_lease("shardId-2", &["shardId-3"])).await.unwrap();
    });
    let cfg = write_config(
        dir.path(),
        &format!(
            "[leases]\npath = \"{}\"\nnamespace = \"ops\"\n[[consumers]]\ntype = \"count\"\nname = \"archive\"\n",
            db.display()
        ),
    );
    let cfg = cfg.to_str().unwrap();
    let out = weir().args(["leases", "list", "--config", cfg]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let table = String::from_utf8_lossy(&out.stdout);
    let line = |shard: &str| {
        table.lines().find(|l| l.starts_with(shard)).unwrap_or_else(|| panic!("{shard}: {table}")).to_owned()
    };
    assert!(table.lines().next().unwrap().contains("shard") && table.contains("archive"), "{table}");
    assert!(line("shardId-0 ").contains("ended") && line("shardId-0 ").contains("SHARD_END"), "{table}");
    let one = line("shardId-1 ");
    assert!(one.contains("worker-b") && one.contains("held"), "{one}");
    assert!(one.contains("…989136588898 (2 open intents)"), "{one}");
    assert!(line("shardId-2 ").contains("waiting for parents shardId-3"), "{table}");
    assert!(table.contains("4 leases"), "{table}");

    let out = weir().args(["leases", "list", "--config", cfg, "--json"]).output().unwrap();
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let one = json.as_array().unwrap().iter().find(|l| l["key"] == "shardId-1").unwrap();
    assert_eq!(one["state"], "held");
    assert_eq!(one["owner"], "worker-b");
    assert_eq!(one["intents"]["archive"].as_array().unwrap().len(), 2);
    let three = json.as_array().unwrap().iter().find(|l| l["key"] == "shardId-3").unwrap();
    assert_eq!(three["hash_range"]["end"], "340282366920938463463374607431768211455", "hash keys as strings");

    let out = weir().args(["leases", "show", "shardId-1", "--config", cfg]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(&format!("checkpoint {}", "49590338271490256608559692538361571095921575989136588898")),
        "{text}"
    );
    assert!(text.contains("open intent _weir/intents/b.manifest"), "{text}");
    let out = weir().args(["leases", "show", "shardId-9", "--config", cfg]).output().unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no lease shardId-9"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // seek: a free lease moves (backwards too); a held one with open intents does not,
    // even forced; every change and refusal is printed.
    let seek = |args: &[&str]| {
        let mut a = vec!["leases", "seek", "--config", cfg, "--consumer", "archive"];
        a.extend_from_slice(args);
        let out = weir().args(&a).output().unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (ok, stdout, stderr) = seek(&["--to", "2026-12-01T00:00:00Z", "shardId-3"]);
    assert!(ok, "{stderr}");
    assert_eq!(stdout.trim(), "shardId-3: archive TRIM_HORIZON -> AT_TIMESTAMP 2026-12-01T00:00:00+00:00");
    let (ok, stdout, stderr) = seek(&["--to", "TRIM_HORIZON", "--force", "shardId-1"]);
    assert!(!ok && stderr.contains("1 leases not moved"), "{stderr}");
    assert!(stdout.contains("shardId-1: not moved") && stdout.contains("2 open intents"), "{stdout}");
    let (ok, stdout, _) = seek(&["--to", "LATEST", "--all"]);
    assert!(!ok, "shardId-1 is refused");
    // LATEST is stored as the time of the seek.
    assert!(stdout.contains("shardId-2: archive TRIM_HORIZON -> AT_TIMESTAMP 20"), "{stdout}");
    assert!(
        stdout.contains("shardId-3: archive AT_TIMESTAMP 2026-12-01T00:00:00+00:00 -> AT_TIMESTAMP 20"),
        "{stdout}"
    );
    assert!(!stdout.contains("shardId-0"), "ended leases are left alone: {stdout}");
    let (ok, _, stderr) = seek(&["--to", "yesterday", "shardId-3"]);
    assert!(!ok && stderr.contains("--to \"yesterday\""), "{stderr}");
    let out = weir().args(["leases", "show", "shardId-3", "--config", cfg]).output().unwrap();
    let shown = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        shown.contains("checkpoint AT_TIMESTAMP") && !shown.contains("2026-12-01T00:00:00"),
        "the table holds the move: {shown}"
    );
    // release: asks the holder to let the lease go; a free lease has nothing to release.
    let out = weir().args(["leases", "release", "shardId-1", "--config", cfg]).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && stdout.contains("shardId-1: asked worker-b to release it"), "{stdout}");
    let out = weir().args(["leases", "list", "--config", cfg]).output().unwrap();
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(table.lines().any(|l| l.starts_with("shardId-1 ") && l.contains("releasing")), "{table}");
    let out = weir().args(["leases", "release", "shardId-3", "--config", cfg]).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("not held by any worker"));
    // clear-intents: refused on a held lease, done with --force (naming every intent),
    // refused when nothing is left; then seek works on it.
    let clear = |args: &[&str]| {
        let mut a = vec!["leases", "clear-intents", "--config", cfg, "--consumer", "archive", "shardId-1"];
        a.extend_from_slice(args);
        let out = weir().args(&a).output().unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (ok, _, stderr) = clear(&[]);
    assert!(!ok && stderr.contains("worker-b holds the lease"), "{stderr}");
    let (ok, stdout, stderr) = clear(&["--force"]);
    assert!(ok, "{stderr}");
    assert!(
        stdout.starts_with("shardId-1: cleared 2 open intents of archive (lease taken from worker-b); their records are archived again from 4959"),
        "{stdout}"
    );
    assert!(stdout.contains("  _weir/intents/a.manifest\n  _weir/intents/b.manifest"), "{stdout}");
    let (ok, _, stderr) = clear(&[]);
    assert!(!ok && stderr.contains("it has no open intents"), "{stderr}");
    let (ok, stdout, stderr) = seek(&["--to", "TRIM_HORIZON", "shardId-1"]);
    assert!(ok && stdout.contains("shardId-1: archive"), "{stdout}{stderr}");
}

/// `weir doctor` on a live worker says nothing is stuck; after the worker is killed it
/// names the leases whose renewals stopped and exits 1.
#[test]
fn doctor_tells_a_live_fleet_from_a_dead_worker() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(
        dir.path(),
        &format!(
            "[worker]\nid = \"w-doomed\"\nfailover = \"20s\"\nrenew_interval = \"300ms\"\ntaker_interval = \"300ms\"\n\
             [generator]\nrate = 200\n[leases]\npath = \"{0}/leases.db\"\n\
             [[consumers]]\ntype = \"count\"\nname = \"count\"\n[http]\nlisten = \"\"\n",
            dir.path().display(),
        ),
    );
    let cfg = cfg.to_str().unwrap();
    let mut child = KillOnDrop(weir().args(["run", "--config", cfg]).stderr(Stdio::null()).spawn().unwrap());
    let mut patience = Patience::new(Duration::from_secs(30));
    loop {
        let out = weir().args(["leases", "list", "--config", cfg, "--json"]).output().unwrap();
        let leases = serde_json::from_slice::<serde_json::Value>(&out.stdout).ok();
        let owners: Vec<String> = leases
            .as_ref()
            .and_then(|v| v.as_array())
            .map(|a| a.iter().map(|l| l["owner"].to_string()).collect())
            .unwrap_or_default();
        if !owners.is_empty() && owners.iter().all(|o| o == "\"w-doomed\"") {
            break;
        }
        // Owners, not whole leases: renewals change the lease counters all the time.
        if let Err(why) = patience.observe((cpu_ticks(child.0.id()), &owners)) {
            panic!("the worker never held every lease: {why}: {}", String::from_utf8_lossy(&out.stdout));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    // A live worker is not stuck. Its renewals are due every 300 ms; on a machine
    // loaded several-fold one may miss a window, so a few windows are allowed.
    let mut live = Vec::new();
    for _ in 0..5 {
        let out = weir().args(["doctor", "--config", cfg, "--observe", "1500ms"]).output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        if out.status.success() {
            assert!(stdout.contains("0 stuck of"), "{stdout}");
            live.clear();
            break;
        }
        live.push(stdout);
    }
    assert!(live.is_empty(), "a live worker is not stuck: {live:?}");
    child.0.kill().unwrap();
    child.0.wait().unwrap();
    let out = weir().args(["doctor", "--config", cfg, "--observe", "1500ms"]).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("STUCK") && stdout.contains("held by w-doomed, but its counter"), "{stdout}");
    assert!(stdout.contains("did not move in 1.5s"), "{stdout}");
}

/// `weir doctor --worker` reads a live worker's `/status`: an archiver whose output
/// directory is gone (replaced by a file, so no put can work) backs up, refuses
/// batches and is detached; the doctor names it with its last error and exits 1.
#[test]
fn doctor_names_an_archiver_refusing_batches_from_the_workers_status() {
    let dir = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let out = dir.path().join("out");
    std::fs::create_dir(&out).unwrap();
    let cfg = write_config(
        dir.path(),
        &format!(
            "[worker]\nid = \"w-doc\"\nrenew_interval = \"300ms\"\ntaker_interval = \"300ms\"\n\
             [stream]\nshards = 1\n[generator]\nrate = 200\n[leases]\npath = \"{0}/leases.db\"\n\
             [[consumers]]\ntype = \"count\"\nname = \"count\"\n\
             [[consumers]]\ntype = \"archiver\"\nname = \"archive\"\ndirectory = \"{1}\"\nmax_backlog_bytes = 1\n\
             [consumers.destination]\nPrefix = \"d/\"\nErrorOutputPrefix = \"e/\"\n\
             BufferingHints = {{ SizeInMBs = 1, IntervalInSeconds = 0 }}\n\
             [http]\nlisten = \"127.0.0.1:{2}\"\n",
            dir.path().display(),
            out.display(),
            port
        ),
    );
    let cfg = cfg.to_str().unwrap();
    let log = dir.path().join("run.log");
    let child = KillOnDrop(
        weir()
            .args(["run", "--config", cfg])
            .stderr(Stdio::from(std::fs::File::create(&log).unwrap()))
            .spawn()
            .unwrap(),
    );
    let worker = format!("http://127.0.0.1:{port}");
    let doctor = || {
        let out = weir().args(["doctor", "--config", cfg, "--observe", "700ms", "--worker", &worker]).output().unwrap();
        (out.status.code(), String::from_utf8_lossy(&out.stdout).into_owned())
    };
    // Healthy first: objects land, nothing is stuck.
    let mut patience = Patience::new(Duration::from_secs(60));
    loop {
        let written = std::fs::read_dir(out.join("d")).map(|d| d.count()).unwrap_or(0);
        if written > 0 && get(port, "/readyz").is_some_and(|(s, _)| s == 200) {
            break;
        }
        if let Err(why) = patience.observe((written, cpu_ticks(child.0.id()), file_len(&log))) {
            panic!("no object written: {why}: {}", std::fs::read_to_string(&log).unwrap());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    // Healthy (a few observation windows allowed on a loaded machine).
    let mut healthy = doctor();
    for _ in 0..4 {
        if healthy.0 == Some(0) {
            break;
        }
        healthy = doctor();
    }
    let (code, stdout) = healthy;
    assert_eq!(code, Some(0), "{stdout}");
    assert!(stdout.contains("note  the in-process stream lives inside its worker"), "{stdout}");
    let status = get(port, "/status").unwrap().1;
    assert!(status.contains("\"worker\": \"w-doc\"") && status.contains("\"consumer\": \"archive\""), "{status}");
    // The output directory becomes a file: puts fail, the backlog passes 1 byte, the
    // archiver refuses batches and is detached.
    // (Renamed away rather than removed: the archiver may be writing into it.)
    std::fs::rename(&out, dir.path().join("out.gone")).unwrap();
    std::fs::write(&out, b"not a directory").unwrap();
    let mut patience = Patience::new(Duration::from_secs(60));
    let (code, stdout) = loop {
        let (code, stdout) = doctor();
        if code == Some(1) {
            break (code, stdout);
        }
        if let Err(why) = patience.observe((cpu_ticks(child.0.id()), file_len(&log))) {
            panic!("doctor never saw the archive stuck: {why}: {stdout}\n{}", std::fs::read_to_string(&log).unwrap());
        }
    };
    assert_eq!(code, Some(1), "{stdout}");
    let line = stdout.lines().find(|l| l.contains("archive is detached")).unwrap_or_else(|| panic!("{stdout}"));
    assert!(line.starts_with("STUCK shardId-000000000000: archive is detached on w-doc's read"), "{line}");
    assert!(line.contains("refusing records until they are written (the stream keeps them)"), "{line}");
    assert!(stdout.contains("1 stuck of 1 leases not ended"), "{stdout}");
    assert!(!stdout.contains("count is detached"), "{stdout}");
    println!("{stdout}");
}

/// A namespace another stream's application uses, or one a newer weir wrote, stops
/// `weir run` at start with the reason, before any lease is touched.
#[test]
fn run_refuses_a_namespace_of_another_stream_or_a_newer_weir() {
    use weir_core::ports::{LEASE_FORMAT, LeaseTable, NamespaceMeta};
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("leases.db");
    let cfg = write_config(
        dir.path(),
        &format!(
            "[stream]\nname = \"mcp-events\"\n[generator]\nrate = 10\n[leases]\npath = \"{}\"\nnamespace = \"shared\"\n\
             [[consumers]]\ntype = \"count\"\nname = \"count\"\n[http]\nlisten = \"\"\n",
            db.display()
        ),
    );
    let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    let table = weir_local::SqliteLeaseTable::open(&db, "shared").unwrap();
    let orders = NamespaceMeta { stream: "orders".into(), format: LEASE_FORMAT };
    assert!(rt.block_on(table.put_namespace_meta(&orders, None)).unwrap());
    let run = || {
        let mut child = weir().args(["run", "--config"]).arg(&cfg).stderr(Stdio::piped()).spawn().unwrap();
        let mut patience = Patience::new(Duration::from_secs(30));
        while child.try_wait().unwrap().is_none() {
            if let Err(why) = patience.observe(cpu_ticks(child.id())) {
                child.kill().unwrap();
                let mut err = String::new();
                child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
                panic!("weir run did not stop at start: {why}\n{err}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let mut err = String::new();
        child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
        (child.wait().unwrap(), err)
    };
    let (status, err) = run();
    assert!(!status.success());
    assert!(err.contains("lease namespace \"shared\" belongs to stream \"orders\", not \"mcp-events\""), "{err}");
    assert!(rt.block_on(table.list()).unwrap().is_empty(), "no lease created");

    let newer = NamespaceMeta { stream: "mcp-events".into(), format: LEASE_FORMAT + 1 };
    assert!(rt.block_on(table.put_namespace_meta(&newer, Some(&orders))).unwrap());
    let (status, err) = run();
    assert!(!status.success());
    assert!(err.contains("was written by a newer weir"), "{err}");
    assert!(rt.block_on(table.list()).unwrap().is_empty(), "no lease created");
}
