//! Helpers of weir's end-to-end tests: emulators, AWS clients, `weir` processes.
// Test support: a failed expectation is a failed test.
#![allow(clippy::unwrap_used, clippy::print_stdout)]

use std::io::Read;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use weir_aws::{AwsSettings, load_sdk_config};

pub use weir_testkit::patience;

pub mod storm;

/// The `weir` binary built by cargo for this workspace.
pub fn weir_binary() -> std::path::PathBuf {
    target_binary("weir", "weir")
}

/// A binary of package `package` built by cargo for this workspace (the test fails
/// with the build command when it is missing).
pub fn target_binary(name: &str, package: &str) -> std::path::PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    // target/<profile>/deps/<test> -> target/<profile>/<name>
    let dir = exe.parent().and_then(Path::parent).expect("target dir");
    let bin = dir.join(name);
    assert!(bin.exists(), "{} missing: build it first (cargo build -p {package})", bin.display());
    bin
}

/// Where tests/emulators/install.sh installs the emulators and peers.
pub fn emulators_home() -> std::path::PathBuf {
    std::env::var("WEIR_EMULATORS_HOME").map(std::path::PathBuf::from).unwrap_or_else(|_| {
        std::path::PathBuf::from(std::env::var("HOME").expect("HOME")).join(".cache/weir-emulators")
    })
}

/// Starts `weir run --config <config>` with emulator credentials.
pub fn spawn_weir(config: &Path, log: &Path) -> Child {
    spawn_weir_with_env(config, log, &[])
}

/// [`spawn_weir`] with extra environment variables for the worker.
pub fn spawn_weir_with_env(config: &Path, log: &Path, env: &[(&str, String)]) -> Child {
    let log = std::fs::File::create(log).expect("log file");
    Command::new(weir_binary())
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .args(["run", "--config"])
        .arg(config)
        .env("AWS_ACCESS_KEY_ID", "test")
        .env("AWS_SECRET_ACCESS_KEY", "test")
        .env("AWS_REGION", "us-east-1")
        .env("WEIR_LOG", "info")
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("spawn weir")
}

/// `weir` with emulator credentials, output captured.
pub fn weir_command() -> Command {
    let mut c = Command::new(weir_binary());
    c.env("AWS_ACCESS_KEY_ID", "test")
        .env("AWS_SECRET_ACCESS_KEY", "test")
        .env("AWS_REGION", "us-east-1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

/// Runs `cmd` (stdout kept, stderr in a file, both returned), failing the test with
/// its stderr once it made no progress (neither used CPU nor logged) for `limit`, or
/// after the backstop ([`patience::BACKSTOP`] × `limit`). Returns the output and how
/// long it took.
pub fn timed(mut cmd: Command, limit: Duration) -> (std::process::Output, Duration) {
    let log = tempfile::NamedTempFile::new().expect("log file");
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(log.reopen().expect("log file"))
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {cmd:?}: {e}"));
    let mut patience = patience::Patience::new(limit);
    loop {
        if child.try_wait().expect("wait").is_some() {
            let mut out = child.wait_with_output().expect("output");
            out.stderr = std::fs::read(log.path()).expect("log");
            return (out, patience.elapsed());
        }
        let seen = (patience::cpu_ticks(child.id()), patience::file_len(log.path()));
        if let Err(why) = patience.observe(seen) {
            let _ = child.kill();
            let _ = child.wait();
            let text = std::fs::read_to_string(log.path()).unwrap_or_default();
            panic!("{cmd:?}: {why}:\n{text}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A free loopback port.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).expect("free port")
}

/// AWS clients for an emulator endpoint.
pub async fn kinesis(endpoint: &str) -> aws_sdk_kinesis::Client {
    aws_sdk_kinesis::Client::new(&load_sdk_config(&AwsSettings::emulator(endpoint)).await)
}

/// A Glue client for an emulator at `endpoint`.
pub async fn glue(endpoint: &str) -> aws_sdk_glue::Client {
    aws_sdk_glue::Client::new(&load_sdk_config(&AwsSettings::emulator(endpoint)).await)
}

/// An S3 client for an emulator at `endpoint` (path-style addressing).
pub async fn s3(endpoint: &str) -> aws_sdk_s3::Client {
    let sdk = load_sdk_config(&AwsSettings::emulator(endpoint)).await;
    aws_sdk_s3::Client::from_conf(aws_sdk_s3::config::Builder::from(&sdk).force_path_style(true).build())
}

/// DynamoDB client for an emulator.
pub async fn dynamodb(endpoint: &str) -> aws_sdk_dynamodb::Client {
    aws_sdk_dynamodb::Client::new(&load_sdk_config(&AwsSettings::emulator(endpoint)).await)
}

/// Puts `n` small MCP events (`sessionId` `<name>-<i>`, three tenants, one key each)
/// and asserts every one was accepted.
pub async fn put_wave(p: &weir_aws::kinesis::producer::Producer, name: &str, n: u64) {
    use weir_aws::kinesis::producer::Outgoing;
    let records = (0..n)
        .map(|i| Outgoing {
            id: i,
            partition_key: format!("pk-{name}-{i}"),
            data: bytes::Bytes::from(format!(
                r#"{{"tenantId":"t-{}","toolName":"x","sessionId":"{name}-{i}"}}"#,
                i % 3
            )),
        })
        .collect();
    assert_eq!(p.put_all(records).await.accepted.len() as u64, n);
}

/// Puts `n` records of 1 KB (partition keys `k<i>`) into `stream`, for the read
/// benches, and asserts every one was accepted.
pub async fn put_kilobyte_records(client: &aws_sdk_kinesis::Client, stream: &str, n: u64) {
    put_records_of(client, stream, n, 1024).await;
}

/// Puts `n` records of `size` bytes (partition keys `k<i>`) into `stream` and asserts
/// every one was accepted.
pub async fn put_records_of(client: &aws_sdk_kinesis::Client, stream: &str, n: u64, size: usize) {
    let payload = bytes::Bytes::from(vec![b'x'; size]);
    put_each(client, stream, n, |_| payload.clone()).await;
}

/// Puts records `0..n` (partition keys `k<i>`, data `data(i)`) into `stream` and asserts
/// every one was accepted.
async fn put_each(client: &aws_sdk_kinesis::Client, stream: &str, n: u64, data: impl Fn(u64) -> bytes::Bytes) {
    use weir_aws::kinesis::producer::{Outgoing, Producer};
    let records = (0..n).map(|i| Outgoing { id: i, partition_key: format!("k{i}"), data: data(i) }).collect();
    let report = Producer::new(client.clone(), stream).put_all(records).await;
    assert_eq!(report.accepted.len() as u64, n, "{:?}", report.failed.first());
}

/// An MCP tool-call event as one JSON line of exactly `size` bytes when `size` is at
/// least its skeleton's (about 260 bytes): tenant, tool, session, time, duration,
/// outcome and nested arguments, the query padded to the size.
pub fn mcp_event(i: u64, size: usize) -> String {
    const TOOLS: [&str; 5] = ["search", "fetch_url", "read_file", "write_file", "run_sql"];
    let event = |query: &str| {
        format!(
            r#"{{"tenantId":"t-{:02}","toolName":"{}","sessionId":"s-{i:016x}","ts":"2026-12-05T10:{:02}:{:02}.{:03}Z","durationMs":{},"success":{},"errorCode":{},"arguments":{{"query":"{query}","limit":{}}}}}"#,
            i % 20,
            TOOLS[(i % 5) as usize],
            (i / 60_000) % 60,
            (i / 1_000) % 60,
            i % 1_000,
            (i * 7) % 900,
            !i.is_multiple_of(13),
            if i.is_multiple_of(13) { r#""E_TIMEOUT""# } else { "null" },
            i % 50
        )
    };
    let skeleton = event("").len();
    let pad: String =
        (0..size.saturating_sub(skeleton)).map(|k| char::from(b'a' + ((i as usize + k) % 26) as u8)).collect();
    event(&pad)
}

/// Puts `n` [`mcp_event`]s of `size` bytes (partition keys `k<i>`) into `stream` and
/// asserts every one was accepted.
pub async fn put_mcp_events(client: &aws_sdk_kinesis::Client, stream: &str, n: u64, size: usize) {
    put_each(client, stream, n, |i| bytes::Bytes::from(mcp_event(i, size))).await;
}

/// Creates a stream and waits until it is active.
pub async fn create_stream(client: &aws_sdk_kinesis::Client, name: &str, shards: i32) {
    client.create_stream().stream_name(name).shard_count(shards).send().await.expect("create stream");
    wait_active(client, name).await;
}

/// Every object under `prefix` in `bucket`: key and body.
pub async fn objects(client: &aws_sdk_s3::Client, bucket: &str, prefix: &str) -> Vec<(String, bytes::Bytes)> {
    let mut out = Vec::new();
    let mut token = None;
    loop {
        let page = client
            .list_objects_v2()
            .bucket(bucket)
            .prefix(prefix)
            .set_continuation_token(token.take())
            .send()
            .await
            .expect("list objects");
        for o in page.contents() {
            let key = o.key().unwrap_or_default();
            let body = client.get_object().bucket(bucket).key(key).send().await.expect("get object");
            out.push((key.to_owned(), body.body.collect().await.expect("read body").into_bytes()));
        }
        match page.next_continuation_token() {
            Some(t) if page.is_truncated() == Some(true) => token = Some(t.to_owned()),
            _ => return out,
        }
    }
}

/// Every NDJSON line of every gzip object under `prefix` in `bucket`.
pub async fn archived_lines(client: &aws_sdk_s3::Client, bucket: &str, prefix: &str) -> Vec<String> {
    let mut lines = Vec::new();
    for (_, bytes) in objects(client, bucket, prefix).await {
        let mut text = String::new();
        flate2::read::GzDecoder::new(&bytes[..]).read_to_string(&mut text).expect("valid gzip");
        lines.extend(text.lines().map(str::to_owned));
    }
    lines
}

/// Copies every object under `prefix` into `dir`, keeping keys as paths (for DuckDB).
pub async fn download(client: &aws_sdk_s3::Client, bucket: &str, prefix: &str, dir: &Path) -> usize {
    let all = objects(client, bucket, prefix).await;
    for (key, bytes) in &all {
        let path = dir.join(key);
        std::fs::create_dir_all(path.parent().expect("key has a parent")).expect("mkdir");
        std::fs::write(path, bytes).expect("write object");
    }
    all.len()
}

/// Runs SQL in DuckDB (installed by tests/emulators/install.sh) and returns the rows
/// as JSON arrays.
pub fn duckdb(sql: &str) -> Vec<Vec<serde_json::Value>> {
    // No progress bar: over thousands of files DuckDB draws one on stdout.
    let script = "import duckdb, json, sys\ncon = duckdb.connect()\ncon.execute('SET enable_progress_bar = false')\nrows = con.sql(sys.argv[1]).fetchall()\nprint(json.dumps([list(r) for r in rows], default=str))";
    serde_json::from_value(readers_python(script, &[sql])).expect("rows of values")
}

/// Runs `script` with `args` in the Python of the archive readers (DuckDB,
/// python-snappy; installed by tests/emulators/install.sh) and parses the JSON it
/// prints.
pub fn readers_python(script: &str, args: &[impl AsRef<std::ffi::OsStr>]) -> serde_json::Value {
    python_json("duckdb-py", script, args)
}

/// pyiceberg (`pyiceberg(script, [db, warehouse, tables…])`): in the SQL catalog on
/// SQLite file `db` over `warehouse`, namespace `mcp` and each table named (default
/// `mcp.events`) of the MCP event's columns (`tenantId` and `sessionId` required,
/// `toolName`, `ts` timestamptz, `durationMs`, `success`), partitioned by tenant.
pub const PYICEBERG_CREATE_MCP_TABLES: &str = r#"
import sys
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.schema import Schema
from pyiceberg.types import NestedField, StringType, LongType, BooleanType, TimestamptzType
from pyiceberg.partitioning import PartitionSpec, PartitionField
from pyiceberg.transforms import IdentityTransform
catalog = SqlCatalog("weir", uri="sqlite:///" + sys.argv[1], warehouse="file://" + sys.argv[2])
catalog.create_namespace("mcp")
schema = Schema(
    NestedField(1, "tenantId", StringType(), required=True),
    NestedField(2, "toolName", StringType(), required=False),
    NestedField(3, "sessionId", StringType(), required=True),
    NestedField(4, "ts", TimestamptzType(), required=False),
    NestedField(5, "durationMs", LongType(), required=False),
    NestedField(6, "success", BooleanType(), required=False),
)
spec = PartitionSpec(PartitionField(source_id=1, field_id=1000, transform=IdentityTransform(), name="tenant"))
for name in sys.argv[3:] or ["mcp.events"]:
    catalog.create_table(name, schema=schema, partition_spec=spec)
print("{}")
"#;

/// pyiceberg (`pyiceberg(script, [db, warehouse, tables…])`): for each table of the
/// SQL catalog, its rows, distinct and repeated session ids, snapshots, and rows whose
/// `tenantId` or `durationMs` is not [`storm::event`]'s for their session.
pub const PYICEBERG_COUNT: &str = r#"
import json, sys
from collections import Counter
from pyiceberg.catalog.sql import SqlCatalog
catalog = SqlCatalog("weir", uri="sqlite:///" + sys.argv[1], warehouse="file://" + sys.argv[2])
out = {}
for name in sys.argv[3:]:
    table = catalog.load_table(name)
    rows = table.scan(selected_fields=("tenantId", "sessionId", "durationMs")).to_arrow().to_pylist()
    ids = Counter(r["sessionId"] for r in rows)
    wrong = sum(1 for r in rows if r["tenantId"] != "t-%d" % (int(r["sessionId"][1:]) % 7)
                or r["durationMs"] != int(r["sessionId"][1:]) % 900)
    out[name] = {"rows": len(rows), "distinct": len(ids), "twice": sum(1 for n in ids.values() if n > 1),
                 "wrong": wrong, "snapshots": len(table.snapshots())}
print(json.dumps(out))
"#;

/// Serves `invoke` as the Lambda Invoke API (`POST /2015-03-31/functions/{name}/invocations`)
/// with `state`, on a free loopback port: the URL for `[aws] lambda_endpoint_url`, and
/// the server's task (abort it to stop answering).
pub async fn serve_lambda<S: Clone + Send + Sync + 'static>(
    invoke: axum::routing::MethodRouter<S>,
    state: S,
) -> (String, tokio::task::JoinHandle<std::io::Result<()>>) {
    let app = axum::Router::new().route("/2015-03-31/functions/{name}/invocations", invoke).with_state(state);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    (url, tokio::spawn(async move { axum::serve(listener, app).await }))
}

/// Runs `script` with `args` in pyiceberg's Python (tests/emulators/install.sh installs
/// it) and parses the JSON it prints.
pub fn pyiceberg(script: &str, args: &[impl AsRef<std::ffi::OsStr>]) -> serde_json::Value {
    python_json("pyiceberg-0.12.0", script, args)
}

fn python_json(venv: &str, script: &str, args: &[impl AsRef<std::ffi::OsStr>]) -> serde_json::Value {
    let python = emulators_home().join(venv).join("bin/python");
    let out =
        std::process::Command::new(&python).arg("-c").arg(script).args(args).output().unwrap_or_else(|e| {
            panic!("cannot run {} (tests/emulators/install.sh installs it): {e}", python.display())
        });
    let given: Vec<_> = args.iter().map(|a| a.as_ref().to_string_lossy().into_owned()).collect();
    assert!(out.status.success(), "python failed on {given:?}:\n{script}\n{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("the script printed JSON")
}

/// Writes each `<input>/<name>.jsonl` (a JSON array of cells per row) as
/// `<output>/<name>.parquet` with parquet-mr, Firehose's Parquet writer, and the
/// `ParquetSerDe` settings given (tests/parquet-mr/FirehoseParquet.java; the jars and a
/// JDK come from tests/emulators/install.sh). `columns` is `name:type,...`.
pub fn parquet_mr(columns: &str, codec: &str, dictionary: bool, input: &Path, output: &Path) {
    let jars = emulators_home().join("parquet-mr-1.13.1");
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("parquet-mr/FirehoseParquet.java");
    let out = std::process::Command::new("java")
        .arg("-cp")
        .arg(jars.join("*"))
        .arg(&source)
        .args([columns, codec, if dictionary { "true" } else { "false" }])
        .args([input, output])
        .output()
        .unwrap_or_else(|e| panic!("cannot run java (tests/emulators/install.sh installs a JDK): {e}"));
    assert!(out.status.success(), "parquet-mr failed:\n{}", String::from_utf8_lossy(&out.stderr));
}

/// Waits until `name` is ACTIVE again (after creating or resharding it).
pub async fn wait_active(client: &aws_sdk_kinesis::Client, name: &str) {
    for _ in 0..400 {
        let s = client.describe_stream_summary().stream_name(name).send().await.expect("describe");
        if s.stream_description_summary().map(|d| d.stream_status().clone())
            == Some(aws_sdk_kinesis::types::StreamStatus::Active)
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("stream {name} never became active");
}

/// The open shards of a stream: id and hash key range.
pub async fn open_shards(client: &aws_sdk_kinesis::Client, name: &str) -> Vec<(String, u128, u128)> {
    let out = client.list_shards().stream_name(name).send().await.expect("list shards");
    out.shards()
        .iter()
        .filter(|s| s.sequence_number_range().and_then(|r| r.ending_sequence_number()).is_none())
        .map(|s| {
            let r = s.hash_key_range().expect("hash range");
            (
                s.shard_id().to_owned(),
                r.starting_hash_key().parse().expect("hash"),
                r.ending_hash_key().parse().expect("hash"),
            )
        })
        .collect()
}

/// Splits `shard` in the middle of its hash range and waits until the stream is active.
pub async fn split_shard(client: &aws_sdk_kinesis::Client, name: &str, shard: &str) {
    let shards = open_shards(client, name).await;
    let (_, start, end) = shards.iter().find(|s| s.0 == shard).expect("shard to split is open");
    let mid = start + (end - start) / 2 + 1;
    client
        .split_shard()
        .stream_name(name)
        .shard_to_split(shard)
        .new_starting_hash_key(mid.to_string())
        .send()
        .await
        .expect("split");
    wait_active(client, name).await;
}

/// Merges two adjacent open shards and waits until the stream is active.
pub async fn merge_shards(client: &aws_sdk_kinesis::Client, name: &str, a: &str, b: &str) {
    client.merge_shards().stream_name(name).shard_to_merge(a).adjacent_shard_to_merge(b).send().await.expect("merge");
    wait_active(client, name).await;
}

/// Every file under `dir`, recursively.
pub fn files(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(files(&p));
        } else {
            out.push(p);
        }
    }
    out
}

/// Lines of every `.gz` object under `dir` (an archive in a local directory).
pub fn gz_lines(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for p in files(dir).into_iter().filter(|p| p.extension().is_some_and(|x| x == "gz")) {
        let mut text = String::new();
        flate2::read::MultiGzDecoder::new(std::fs::File::open(&p).expect("open object"))
            .read_to_string(&mut text)
            .expect("gzip");
        out.extend(text.lines().map(str::to_owned));
    }
    out
}

/// A child process killed (SIGKILL) when dropped, so a failing test leaves no worker
/// behind.
pub struct KillOnDrop(pub Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A `[[consumers]]` archiver section in Firehose's field names, for test configs.
/// `target` is `directory = "…"` or `bucket = "…"` (plus any other consumer fields,
/// e.g. `mode = "firehose"`); `processors` the TOML array of processors.
pub fn archiver_toml(
    name: &str,
    target: &str,
    transform: &str,
    prefix: &str,
    errors: &str,
    interval_seconds: u32,
    processors: &str,
) -> String {
    format!(
        r#"
[[consumers]]
type = "archiver"
name = "{name}"
{target}
transform = "{transform}"
[consumers.destination]
Prefix = "{prefix}"
ErrorOutputPrefix = "{errors}"
CompressionFormat = "GZIP"
BufferingHints = {{ SizeInMBs = 64, IntervalInSeconds = {interval_seconds} }}
DynamicPartitioningConfiguration = {{ Enabled = true }}
[consumers.destination.ProcessingConfiguration]
Enabled = true
Processors = {processors}
"#
    )
}

/// The archiver the batch tests read back: consumer `archive`, the design note's
/// `mcp-normalize`, objects under `<out>/events/tenant=…/` (see [`session_ids`]).
pub fn tenant_archiver_toml(out: &Path) -> String {
    archiver_toml(
        "archive",
        &format!("directory = \"{}\"", out.display()),
        "mcp-normalize",
        "events/tenant=!{partitionKeyFromQuery:tenantId}/",
        "errors/!{firehose:error-output-type}/",
        300,
        &metadata_extraction("{tenantId: .tenant_id}", false),
    )
}

/// `dir/weir.toml` for a batch job: the Kinesis stream `stream` at `kinesis`, SQLite
/// leases in `dir` (namespace `namespace`), no HTTP endpoints, and
/// [`tenant_archiver_toml`] writing under `dir/out`.
pub fn kinesis_batch_config(dir: &Path, kinesis: &str, stream: &str, namespace: &str) -> std::path::PathBuf {
    let aws = format!("kinesis_endpoint_url = \"{kinesis}\"\n");
    one_worker_config(dir, stream, namespace, &aws, &tenant_archiver_toml(&dir.join("out")))
}

/// `dir/weir.toml`: one worker ([`worker_toml`]) reading Kinesis stream `stream`, its
/// leases in `dir/leases.db` under `namespace`, the `[aws]` section's lines `aws`, no
/// HTTP listener, and `consumers` (TOML: `[[consumers]]` sections).
pub fn one_worker_config(dir: &Path, stream: &str, namespace: &str, aws: &str, consumers: &str) -> std::path::PathBuf {
    let cfg = dir.join("weir.toml");
    let text = format!(
        "{worker}\n[stream]\nkind = \"kinesis\"\nname = \"{stream}\"\n[leases]\npath = \"{leases}\"\nnamespace = \"{namespace}\"\n\
         [aws]\n{aws}[http]\nlisten = \"\"\n{consumers}",
        worker = worker_toml(None),
        leases = dir.join("leases.db").display(),
    );
    std::fs::write(&cfg, text).unwrap();
    cfg
}

/// `weir run --config <cfg> --until-caught-up`, failing the test with its output unless
/// it succeeds (or once it makes no progress for 120 s: [`timed`]).
pub fn run_until_caught_up(cfg: &Path) {
    let mut cmd = weir_command();
    cmd.arg("run").arg("--config").arg(cfg).arg("--until-caught-up");
    let (out, _) = timed(cmd, Duration::from_secs(120));
    assert!(out.status.success(), "{}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
}

/// The session ids of every line [`tenant_archiver_toml`] archived under `out`, sorted
/// (duplicates kept).
pub fn session_ids(out: &Path) -> Vec<String> {
    let mut ids: Vec<String> = gz_lines(&out.join("events"))
        .iter()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["session_id"].as_str().unwrap().to_owned())
        .collect();
    ids.sort();
    ids
}

/// The archiver the replay tests and bench replay into: consumer `by-tool`, records
/// re-partitioned by tool and day (`tool=…/dt=…/`) under directory `out`, no transform.
pub fn by_tool_archiver_toml(out: &Path) -> String {
    archiver_toml(
        "by-tool",
        &format!("directory = \"{}\"", out.display()),
        "none",
        "by-tool/tool=!{partitionKeyFromQuery:tool}/dt=!{timestamp:yyyy-MM-dd}/",
        "by-tool-errors/!{firehose:error-output-type}/",
        60,
        &metadata_extraction("{tool: .tool_name}", true),
    )
}

/// Processors: a JQ-1.6 `MetadataExtraction` with `query`, then optionally
/// `AppendDelimiterToRecord`.
pub fn metadata_extraction(query: &str, append_delimiter: bool) -> String {
    let delimiter = if append_delimiter { ",\n  { Type = \"AppendDelimiterToRecord\" }" } else { "" };
    format!(
        r#"[
  {{ Type = "MetadataExtraction", Parameters = [
    {{ ParameterName = "MetadataExtractionQuery", ParameterValue = "{query}" }},
    {{ ParameterName = "JsonParsingEngine", ParameterValue = "JQ-1.6" }} ] }}{delimiter}
]"#
    )
}

/// CPU seconds (user + system) of this process, or of its waited-for children.
pub fn cpu_seconds(children: bool) -> f64 {
    let (user, system) = cpu_user_system(children);
    user + system
}

/// [`cpu_seconds`] as user and system seconds: (user, system).
pub fn cpu_user_system(children: bool) -> (f64, f64) {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after = stat.rsplit(')').next().unwrap_or("");
    let f: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // After the command name: utime, stime are fields 14-15 of /proc/<pid>/stat,
    // cutime, cstime 16-17; in clock ticks of 1/100 s.
    let (user, system) = if children { (13, 14) } else { (11, 12) };
    (ticks(user) / 100.0, ticks(system) / 100.0)
}

/// A `[worker]` section with test timings (3 s failover, 1 s renewals and taker
/// cycles, 2 s shard sync, 300 ms checkpoints, 250 ms ticks); `id` fixes the worker id.
pub fn worker_toml(id: Option<&str>) -> String {
    let id = id.map(|i| format!("id = \"{i}\"\n")).unwrap_or_default();
    format!(
        "[worker]\n{id}failover = \"3s\"\nrenew_interval = \"1s\"\ntaker_interval = \"1s\"\nshard_sync_interval = \"2s\"\ncheckpoint_interval = \"300ms\"\ntick_interval = \"250ms\"\n"
    )
}

/// A KCL MultiLang record processor on `amazon_kclpy` that does nothing but checkpoint
/// each batch at its last record (the `multilang` and `peers` benches).
pub const KCLPY_CHECKPOINTER: &str = r#"
from amazon_kclpy import kcl
from amazon_kclpy.v3 import processor

class Checkpointer(processor.RecordProcessorBase):
    def initialize(self, initialize_input):
        pass
    def process_records(self, process_records_input):
        process_records_input.checkpointer.checkpoint(process_records_input.records[-1].sequence_number)
    def lease_lost(self, lease_lost_input):
        pass
    def shard_ended(self, shard_ended_input):
        shard_ended_input.checkpointer.checkpoint()
    def shutdown_requested(self, shutdown_requested_input):
        shutdown_requested_input.checkpointer.checkpoint()

if __name__ == "__main__":
    kcl.KCLProcess(Checkpointer()).run()
"#;

/// The samples of Prometheus counter `metric` on a `/metrics` page, each as its labels
/// (name → value) and its value (e.g. `weir_aws_requests_total`).
pub fn metric_samples(page: &str, metric: &str) -> Vec<(std::collections::BTreeMap<String, String>, f64)> {
    let prefix = format!("{metric}{{");
    page.lines()
        .filter_map(|l| l.strip_prefix(&prefix))
        .filter_map(|l| {
            let (labels, value) = l.split_once("} ")?;
            let labels = labels
                .split(',')
                .filter_map(|kv| {
                    let (k, v) = kv.split_once('=')?;
                    Some((k.to_owned(), v.strip_prefix('"')?.strip_suffix('"')?.to_owned()))
                })
                .collect();
            Some((labels, value.trim().parse().ok()?))
        })
        .collect()
}

/// A replay config with the design note's archiver (tenant × tool × hour, GZIP, jq
/// partitioning) writing under `<dir>/out`, weir's defaults for what the note leaves
/// out, SQLite leases in `dir`, and `stream_section` as its `[stream]`.
pub fn backfill_config(dir: &Path, stream_section: &str) -> std::path::PathBuf {
    let path = dir.join("backfill.toml");
    let prefix = "tool-events/tenant=!{partitionKeyFromQuery:tenantId}/tool=!{partitionKeyFromQuery:toolName}/year=!{timestamp:yyyy}/month=!{timestamp:MM}/day=!{timestamp:dd}/hour=!{timestamp:HH}/";
    std::fs::write(
        &path,
        format!(
            r#"[leases]
path = "{leases}"
namespace = "backfill"
[stream]
{stream_section}
[[consumers]]
type = "archiver"
name = "backfill"
directory = "{out}"
[consumers.destination]
Prefix = "{prefix}"
ErrorOutputPrefix = "errors/!{{firehose:error-output-type}}/"
CompressionFormat = "GZIP"
DynamicPartitioningConfiguration = {{ Enabled = true }}
[consumers.destination.ProcessingConfiguration]
Enabled = true
Processors = {processors}
"#,
            leases = dir.join("leases.db").display(),
            out = dir.join("out").display(),
            processors = metadata_extraction("{tenantId: .tenant_id, toolName: .tool_name}", true),
        ),
    )
    .expect("the config is written");
    path
}

#[cfg(test)]
mod tests {
    #[test]
    fn mcp_events_are_json_of_the_asked_size() {
        for (i, size) in [(0, 1024), (13, 1024), (99_999, 300), (7, 10)] {
            let e = super::mcp_event(i, size);
            let v: serde_json::Value = serde_json::from_str(&e).expect("JSON");
            assert_eq!(v["arguments"]["limit"], i % 50);
            if size >= 300 {
                assert_eq!(e.len(), size, "{e}");
            }
        }
    }
}
