//! Objects a backfill writes: the design note's archiver (tenant × tool × hour, default
//! buffering and memory budget, GZIP, local directory) fed by `weir replay` from
//! archives that hold the same events in 1 to 2,000 objects, and from a many-shard
//! stream window. A live archiver writes one object per partition and hour (and more
//! only as its size, interval or memory force); so should a backfill, however the
//! input is cut.

use std::collections::BTreeSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use flate2::Compression;
use flate2::write::GzEncoder;
use weir_e2e::{cpu_user_system, files, gz_lines, weir_binary};

/// One replay's figures.
pub struct Row {
    pub source: String,
    pub partitions: u64,
    pub records: u64,
    pub objects: u64,
    /// Partition-hours present in the output.
    pub partition_hours: u64,
    /// CPU seconds of the `weir` process: user + system.
    pub cpu: f64,
    /// Of which in user space (the rest is the kernel's: at 12,000 partitions mostly
    /// creating 60,000 directories and syncing 24,000 files and directories).
    pub user: f64,
    pub rss_mib: f64,
    /// Wall seconds of the `weir` process (two cores).
    pub wall: f64,
}

impl Row {
    pub fn ratio(&self) -> f64 {
        self.objects as f64 / self.partition_hours as f64
    }
}

/// `tenants × tools` partitions; event `i` is in tenant `i % tenants`, tool
/// `(i / tenants) % tools`.
pub fn event(i: u64, tenants: u64, tools: u64, ts: &str) -> String {
    format!(
        r#"{{"schema_version":"1","tenant_id":"t-{:04}","tool_name":"tool-{:03}","session_id":"s-{i:016x}","timestamp_utc":"{ts}","request":{{"method":"tools/call","params":{{"arguments":{{"query":"q-{}","limit":{}}}}}}},"response":{{"duration_ms":{},"success":{},"error_code":{}}}}}"#,
        i % tenants,
        (i / tenants) % tools,
        i % 1_000,
        i % 50,
        (i * 7) % 900,
        !i.is_multiple_of(13),
        if i.is_multiple_of(13) { r#""E_TIMEOUT""# } else { "null" }
    )
}

/// Writes `n` events as `inputs` gzip objects named through one hour (10:00 to 10:59,
/// so every record's arrival is in that hour), consecutive events in one object as a
/// Firehose delivery stream cuts them.
pub fn write_inputs(root: &Path, n: u64, inputs: u64, tenants: u64, tools: u64) {
    std::fs::create_dir_all(root).unwrap();
    for k in 0..inputs {
        let second = k * 3_600 / inputs;
        let name = format!("mcp-events-1-2026-11-28-10-{:02}-{:02}-{k:06}.gz", second / 60, second % 60);
        let mut gz = GzEncoder::new(Vec::new(), Compression::fast());
        for i in k * n / inputs..(k + 1) * n / inputs {
            writeln!(gz, "{}", event(i, tenants, tools, "2026-11-28T10:00:00Z")).unwrap();
        }
        std::fs::write(root.join(name), gz.finish().unwrap()).unwrap();
    }
}

/// A replay config with the design note's archiver writing under `<dir>/out`, with
/// weir's defaults for what the note leaves out (`BufferingHints`, `max_buffer_memory`).
fn config(dir: &Path, stream_section: &str) -> PathBuf {
    weir_e2e::backfill_config(dir, stream_section)
}

/// Runs `weir replay` with `args` to its end: CPU seconds (user, system), peak RSS
/// (MiB, `VmHWM` sampled every 20 ms) and wall seconds.
pub fn replay(config: &Path, args: &[&str]) -> ((f64, f64), f64, f64) {
    let (u0, s0) = cpu_user_system(true);
    let mut child: Child = Command::new(weir_binary())
        .args(["replay", "--config"])
        .arg(config)
        .args(args)
        .env("AWS_ACCESS_KEY_ID", "test")
        .env("AWS_SECRET_ACCESS_KEY", "test")
        .env("AWS_REGION", "us-east-1")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run weir replay");
    let stderr = child.stderr.take().unwrap();
    let log = std::thread::spawn(move || std::io::read_to_string(stderr).unwrap_or_default());
    let mut rss_kib = 0u64;
    let started = Instant::now();
    let status = loop {
        let status = std::fs::read_to_string(format!("/proc/{}/status", child.id())).unwrap_or_default();
        let hwm = status.lines().find_map(|l| l.strip_prefix("VmHWM:")).and_then(|v| v.split_whitespace().next());
        rss_kib = rss_kib.max(hwm.and_then(|v| v.parse().ok()).unwrap_or(0));
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(started.elapsed() < Duration::from_secs(1_800), "replay still running after 30 min");
        std::thread::sleep(Duration::from_millis(20));
    };
    let log = log.join().unwrap();
    assert!(status.success(), "weir replay failed:\n{log}");
    let (u1, s1) = cpu_user_system(true);
    ((u1 - u0, s1 - s0), rss_kib as f64 / 1024.0, started.elapsed().as_secs_f64())
}

/// Objects and partition-hours (distinct `…/hour=HH/` directories) of the output; every
/// record is there once, and none went to the error output.
pub fn count(dir: &Path, records: u64) -> (u64, u64) {
    let out = dir.join("out");
    assert_eq!(gz_lines(&out.join("tool-events")).len() as u64, records, "every record once");
    assert!(files(&out.join("errors")).is_empty(), "nothing in the error output");
    let objects: Vec<PathBuf> =
        files(&out.join("tool-events")).into_iter().filter(|p| p.extension().is_some_and(|x| x == "gz")).collect();
    let hours: BTreeSet<&Path> = objects.iter().filter_map(|p| p.parent()).collect();
    (objects.len() as u64, hours.len() as u64)
}

/// Replays `n` events in `inputs` archived objects over `tenants × tools` partitions.
pub fn from_archive(n: u64, inputs: u64, tenants: u64, tools: u64) -> Row {
    let dir = tempfile::tempdir().unwrap();
    let archive = dir.path().join("archive");
    write_inputs(&archive, n, inputs, tenants, tools);
    let cfg = config(dir.path(), "name = \"unused\"");
    let ((user, system), rss_mib, wall) = replay(
        &cfg,
        &[
            "--from-archive",
            archive.to_str().unwrap(),
            "--from",
            "2026-11-28T10:00:00Z",
            "--to",
            "2026-11-28T11:00:00Z",
            "--consumers",
            "backfill",
            "--job",
            "bench",
        ],
    );
    let (objects, partition_hours) = count(dir.path(), n);
    Row {
        source: format!("archive, {inputs} objects"),
        partitions: tenants * tools,
        records: n,
        objects,
        partition_hours,
        cpu: user + system,
        user,
        rss_mib,
        wall,
    }
}

pub fn print(rows: &[Row]) {
    println!("\nbackfill into tenant × tool × hour (default buffering and memory budget)");
    println!(
        "{:<26} {:>10} {:>9} {:>9} {:>16} {:>8} {:>8} {:>13} {:>9} {:>7}",
        "source",
        "partitions",
        "records",
        "objects",
        "objects/(p × h)",
        "CPU-s",
        "user s",
        "CPU-s/100k",
        "peak MiB",
        "wall s"
    );
    for r in rows {
        println!(
            "{:<26} {:>10} {:>9} {:>9} {:>16.2} {:>8.2} {:>8.2} {:>13.2} {:>9.0} {:>7.1}",
            r.source,
            r.partitions,
            r.records,
            r.objects,
            r.ratio(),
            r.cpu,
            r.user,
            r.cpu * 100_000.0 / r.records as f64,
            r.rss_mib,
            r.wall
        );
    }
}

/// Puts `n` events over `tenants × tools` partitions into a `shards`-shard stream of a
/// fresh ferrokinesis (at most 10 shards an account) and replays their window: every
/// shard's read ends at about the same time.
pub async fn from_stream(n: u64, shards: i32, tenants: u64, tools: u64) -> Row {
    use bytes::Bytes;
    use weir_aws::kinesis::producer::{Outgoing, Producer};
    use weir_core::{Clock, SystemClock};

    let emu = weir_testkit::Emulator::start("ferrokinesis", &[]);
    let endpoint = emu.endpoint.as_str();
    let client = weir_e2e::kinesis(endpoint).await;
    let stream = format!("backfill-{shards}");
    weir_e2e::create_stream(&client, &stream, shards).await;
    let from = SystemClock.now().as_millis() / 1000 * 1000;
    tokio::time::sleep(Duration::from_millis(1_100)).await; // past the (rounded) start edge
    let producer = Producer::new(client.clone(), &stream);
    for chunk in (0..n).collect::<Vec<_>>().chunks(50_000) {
        let records = chunk
            .iter()
            .map(|&i| Outgoing {
                id: i,
                partition_key: format!("k{i}"),
                data: Bytes::from(event(i, tenants, tools, "2026-11-28T10:00:00Z")),
            })
            .collect();
        let report = producer.put_all(records).await;
        assert!(report.failed.is_empty(), "{:?}", report.failed.first());
    }
    tokio::time::sleep(Duration::from_millis(1_100)).await; // past the (rounded) end edge
    let to = SystemClock.now().as_millis();
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(
        dir.path(),
        &format!("kind = \"kinesis\"\nname = \"{stream}\"\n[aws]\nkinesis_endpoint_url = \"{endpoint}\""),
    );
    let ((user, system), rss_mib, wall) = replay(
        &cfg,
        &[
            "--from",
            &from.to_string(),
            "--to",
            &to.to_string(),
            "--consumers",
            "backfill",
            "--job",
            "bench",
            "--end-idle",
            "1s",
        ],
    );
    let (objects, partition_hours) = count(dir.path(), n);
    Row {
        source: format!("stream window, {shards} shards"),
        partitions: tenants * tools,
        records: n,
        objects,
        partition_hours,
        cpu: user + system,
        user,
        rss_mib,
        wall,
    }
}
