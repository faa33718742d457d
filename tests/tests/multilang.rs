//! KCL MultiLang processors on weir against ferrokinesis: the unmodified `amazon_kclpy`
//! sample application through `weir multilang` (every record, a restart resumes after
//! the last checkpoint, `weir replay` with the printed config), a Node.js processor on
//! `aws-kcl`, processors that crash or hang (restarted at the last checkpoint, nothing
//! skipped), one that logs JSON to stdout (the lines skipped, the processor kept), a
//! checkpoint reply that means stored, a resharding (parents before children, the
//! `shardEnded` checkpoint), and shards' processors running at the same time.
#![allow(clippy::unwrap_used, clippy::print_stdout)] // a test: a failed expectation is a failed test

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use weir_aws::kinesis::producer::Producer;
use weir_e2e::patience::{Patience, cpu_ticks};
use weir_e2e::{create_stream, emulators_home, kinesis, put_wave, split_shard, timed, weir_command};
use weir_testkit::Emulator;

const LIMIT: Duration = Duration::from_secs(120);

fn kclpy_home() -> PathBuf {
    let home = emulators_home().join("amazon_kclpy-3.2.0");
    assert!(home.join("samples/sample_kclpy_app.py").is_file(), "run tests/emulators/install.sh kclpy");
    home
}

/// `weir <args>` with the `amazon_kclpy` sources importable and JSON logs.
fn weir(args: &[&str]) -> Command {
    let mut cmd = weir_command();
    cmd.args(args).env("PYTHONPATH", kclpy_home()).env("WEIR_LOG_FORMAT", "json").env("WEIR_LOG", "info");
    cmd
}

fn ok(out: &Output) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    stdout
}

/// What processors wrote to stderr, per shard, as weir logged it (joined in order, so
/// a processor that writes without newlines reads as it wrote).
fn processor_stderr(log: &[u8]) -> BTreeMap<String, String> {
    let mut out: BTreeMap<String, String> = BTreeMap::new();
    for line in String::from_utf8_lossy(log).lines() {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else { continue };
        if let (Some(shard), Some(text)) = (v["shard"].as_str(), v["stderr"].as_str()) {
            out.entry(shard.to_owned()).or_default().push_str(text);
        }
    }
    out
}

/// Partition keys of the records the `amazon_kclpy` sample logged
/// (`Record (Partition Key: pk, Sequence Number: n, ...`).
fn sample_records(log: &[u8]) -> Vec<String> {
    let mut keys = Vec::new();
    for text in processor_stderr(log).values() {
        for part in text.split("Record (Partition Key: ").skip(1) {
            keys.push(part.split(',').next().unwrap_or_default().to_owned());
        }
    }
    keys.sort();
    keys
}

fn hour_ago() -> String {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis();
    (now - 3_600_000).to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kclpy_sample_processes_resumes_and_replays() {
    let fk = Emulator::start("ferrokinesis", &[]);
    let k = kinesis(&fk.endpoint).await;
    create_stream(&k, "kclpysample", 2).await;
    let p = Producer::new(k.clone(), "kclpysample");
    put_wave(&p, "first", 1_500).await;
    let dir = tempfile::tempdir().unwrap();
    // The sample's own properties, pointed at the emulator; the processor is the
    // package's `samples/sample_kclpy_app.py`, unchanged. No retrieval property:
    // KCL's default, enhanced fan-out.
    let props = dir.path().join("sample.properties");
    std::fs::write(
        &props,
        format!(
            "executableName = python3 {app}\nstreamName = kclpysample\napplicationName = PythonKCLSample\n\
             AwsCredentialsProvider = DefaultCredentialsProvider\nprocessingLanguage = python/3.11\n\
             initialPositionInStream = TRIM_HORIZON\nregionName = us-east-1\nkinesisEndpoint = {endpoint}\n",
            app = kclpy_home().join("samples/sample_kclpy_app.py").display(),
            endpoint = fk.endpoint,
        ),
    )
    .unwrap();
    let props = props.to_str().unwrap();
    let db = dir.path().join("leases.db");
    let db = db.to_str().unwrap();

    let (out, _) = timed(weir(&["multilang", "--properties", props, "--sqlite", db, "--until-caught-up"]), LIMIT);
    let stdout = ok(&out);
    assert!(stdout.contains("(1500 records processed)"), "{stdout}");
    let first = sample_records(&out.stderr);
    assert_eq!(first.len(), 1_500, "every record reached the processor once");
    assert_eq!(first.iter().collect::<BTreeSet<_>>().len(), 1_500);
    assert!(first.iter().all(|k| k.starts_with("pk-first-")));
    let shards = processor_stderr(&out.stderr);
    assert_eq!(shards.len(), 2, "one processor per shard: {:?}", shards.keys());
    for text in shards.values() {
        assert!(text.contains("Shutdown has been requested, checkpointing."), "{text}");
    }

    // The sample checkpoints in shutdownRequested: a restart reads only what came since.
    put_wave(&p, "second", 300).await;
    let (out, _) = timed(weir(&["multilang", "--properties", props, "--sqlite", db, "--until-caught-up"]), LIMIT);
    ok(&out);
    let second = sample_records(&out.stderr);
    assert_eq!(second.len(), 300, "resumed after the checkpoints");
    assert!(second.iter().all(|k| k.starts_with("pk-second-")), "{:?}", &second[..3]);

    // The printed config runs `weir replay` over the same processor.
    let (out, _) = timed(weir(&["multilang", "--properties", props, "--sqlite", db, "--print-config"]), LIMIT);
    let cfg = dir.path().join("weir.toml");
    std::fs::write(&cfg, ok(&out)).unwrap();
    let (out, _) = timed(
        weir(&[
            "replay",
            "--config",
            cfg.to_str().unwrap(),
            "--from",
            &hour_ago(),
            "--to",
            "now",
            "--consumers",
            "PythonKCLSample",
            "--end-idle",
            "2s",
        ]),
        LIMIT,
    );
    ok(&out);
    let replayed = sample_records(&out.stderr);
    assert_eq!(replayed.len(), 1_800, "the whole window, once");
    assert_eq!(replayed.iter().collect::<BTreeSet<_>>().len(), 1_800);
}

/// A processor on `amazon_kclpy` that appends `shard sequence partition-key` lines to
/// `$OUT/records`, checkpoints each batch, marks `shardEnded` and, in `$MODE` `crash`,
/// `hang` or `garbage`, misbehaves once per shard on its first batch.
const PROCESSOR: &str = r#"
import os, sys, time
from amazon_kclpy import kcl
from amazon_kclpy.v3 import processor

OUT = os.environ["OUT"]
MODE = os.environ.get("MODE", "ok")

class Processor(processor.RecordProcessorBase):
    def initialize(self, initialize_input):
        self.shard = initialize_input.shard_id

    def process_records(self, process_records_input):
        marker = os.path.join(OUT, "misbehaved-" + self.shard)
        if MODE != "ok" and not os.path.exists(marker):
            open(marker, "w").close()
            sys.stderr.write("misbehaving: " + MODE + "\n")
            sys.stderr.flush()
            if MODE == "crash":
                os._exit(3)
            if MODE == "garbage":
                # Log lines on stdout, some of them JSON: skipped, as the KCL skips them.
                sys.stdout.write("not a protocol line, skipped\n")
                sys.stdout.write('{"action": "frobnicate"}\n')
                sys.stdout.write('{"level": "info", "message": "a JSON log line"}\n')
                sys.stdout.flush()
            else:
                time.sleep(3600)
        records = process_records_input.records
        with open(os.path.join(OUT, "records"), "a") as f:
            f.write("".join("%s %s %s\n" % (self.shard, r.sequence_number, r.partition_key) for r in records))
        process_records_input.checkpointer.checkpoint(records[-1].sequence_number)

    def lease_lost(self, lease_lost_input):
        pass

    def shard_ended(self, shard_ended_input):
        with open(os.path.join(OUT, "records"), "a") as f:
            f.write("%s ended -\n" % self.shard)
        shard_ended_input.checkpointer.checkpoint()

    def shutdown_requested(self, shutdown_requested_input):
        shutdown_requested_input.checkpointer.checkpoint()

if __name__ == "__main__":
    kcl.KCLProcess(Processor()).run()
"#;

/// A weir config running [`PROCESSOR`] in `mode` beside a `count` consumer.
fn processor_config(dir: &Path, endpoint: &str, stream: &str, mode: &str) -> PathBuf {
    std::fs::write(dir.join("processor.py"), PROCESSOR).unwrap();
    let cfg = dir.join("weir.toml");
    std::fs::write(
        &cfg,
        format!(
            "[worker]\ninitial_position = \"TRIM_HORIZON\"\n[stream]\nkind = \"kinesis\"\nname = \"{stream}\"\n\
             [leases]\npath = \"{leases}\"\n[aws]\nkinesis_endpoint_url = \"{endpoint}\"\n[http]\nlisten = \"\"\n\
             [[consumers]]\ntype = \"count\"\nname = \"count\"\n\
             [[consumers]]\ntype = \"multilang\"\nname = \"py\"\ncommand = [\"python3\", \"processor.py\"]\n\
             cwd = \"{dir}\"\ntimeout = \"2s\"\nshutdown_grace = \"1s\"\n\
             env = {{ OUT = \"{dir}\", MODE = \"{mode}\", PYTHONPATH = \"{kclpy}\" }}\n",
            leases = dir.join("leases.db").display(),
            dir = dir.display(),
            kclpy = kclpy_home().display(),
        ),
    )
    .unwrap();
    cfg
}

/// `(shard, sequence, partition key)` lines the processor wrote.
fn processed(dir: &Path) -> Vec<(String, String, String)> {
    std::fs::read_to_string(dir.join("records"))
        .unwrap_or_default()
        .lines()
        .map(|l| {
            let mut f = l.split(' ').map(str::to_owned);
            (f.next().unwrap(), f.next().unwrap(), f.next().unwrap())
        })
        .collect()
}

async fn misbehaving(mode: &str, expected_error: &str) {
    let fk = Emulator::start("ferrokinesis", &[]);
    let k = kinesis(&fk.endpoint).await;
    let stream = format!("misbehave-{mode}");
    create_stream(&k, &stream, 2).await;
    put_wave(&Producer::new(k.clone(), &stream), mode, 800).await;
    let dir = tempfile::tempdir().unwrap();
    let cfg = processor_config(dir.path(), &fk.endpoint, &stream, mode);

    let (out, _) = timed(weir(&["run", "--config", cfg.to_str().unwrap(), "--until-caught-up"]), LIMIT);
    let stdout = ok(&out);
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(stdout.contains("(800 records processed)"), "{stdout}");
    let shards = processor_stderr(&out.stderr);
    assert_eq!(shards.len(), 2, "{log}");
    for shard in shards.keys() {
        assert!(dir.path().join(format!("misbehaved-{shard}")).exists(), "{shard} misbehaved once");
    }
    assert!(log.contains(expected_error), "the failure is named ({expected_error}):\n{log}");
    assert!(log.contains("misbehaving: "), "with the processor's stderr:\n{log}");
    // The next child started at the checkpoint and received the failed batch: every
    // record processed, none twice (the misbehaving child wrote nothing).
    let keys: Vec<String> = processed(dir.path()).into_iter().map(|r| r.2).collect();
    assert_eq!(keys.len(), 800, "{mode}: every record once");
    assert_eq!(keys.iter().collect::<BTreeSet<_>>().len(), 800);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashing_processor_is_restarted_at_its_checkpoint() {
    misbehaving("crash", "the processor exited (exit status: 3)").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_processor_is_stopped_after_its_timeout() {
    misbehaving("hang", "within 2s (hung processor)").await;
}

/// Lines on stdout that are not protocol messages, JSON ones too (a processor logging
/// JSON to stdout), are logged and skipped, as the KCL's MultiLangDaemon skips them:
/// the processor is not stopped, every record is processed once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_processor_writing_json_logs_to_stdout_keeps_running() {
    let fk = Emulator::start("ferrokinesis", &[]);
    let k = kinesis(&fk.endpoint).await;
    let stream = "misbehave-garbage";
    create_stream(&k, stream, 2).await;
    put_wave(&Producer::new(k.clone(), stream), "garbage", 800).await;
    let dir = tempfile::tempdir().unwrap();
    let cfg = processor_config(dir.path(), &fk.endpoint, stream, "garbage");
    let (out, _) = timed(weir(&["run", "--config", cfg.to_str().unwrap(), "--until-caught-up"]), LIMIT);
    let stdout = ok(&out);
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(stdout.contains("(800 records processed)"), "{stdout}");
    for shard in processor_stderr(&out.stderr).keys() {
        assert!(dir.path().join(format!("misbehaved-{shard}")).exists(), "{shard} wrote its lines");
    }
    assert!(log.contains("frobnicate") && log.contains("skipped"), "the skipped lines are logged:\n{log}");
    assert!(!log.contains("consumer call failed"), "nothing failed:\n{log}");
    let keys: Vec<String> = processed(dir.path()).into_iter().map(|r| r.2).collect();
    assert_eq!(keys.len(), 800, "every record once");
    assert_eq!(keys.iter().collect::<BTreeSet<_>>().len(), 800);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resharding_runs_parents_before_children_and_checkpoints_shard_end() {
    let fk = Emulator::start("ferrokinesis", &[]);
    let k = kinesis(&fk.endpoint).await;
    create_stream(&k, "reshard", 1).await;
    let p = Producer::new(k.clone(), "reshard");
    put_wave(&p, "parent", 400).await;
    split_shard(&k, "reshard", "shardId-000000000000").await;
    put_wave(&p, "child", 400).await;
    let dir = tempfile::tempdir().unwrap();
    let cfg = processor_config(dir.path(), &fk.endpoint, "reshard", "ok");
    let cfg = cfg.to_str().unwrap();

    let (out, _) = timed(weir(&["run", "--config", cfg, "--until-caught-up"]), LIMIT);
    ok(&out);
    let lines = processed(dir.path());
    let parent = "shardId-000000000000";
    let ended = lines.iter().position(|l| l.0 == parent && l.1 == "ended").expect("shardEnded reached the processor");
    assert!(lines[..ended].iter().all(|l| l.0 == parent && l.2.starts_with("pk-parent-")), "parent first");
    assert_eq!(ended, 400, "every parent record before shardEnded");
    let children: Vec<_> = lines[ended + 1..].iter().collect();
    assert_eq!(children.len(), 400, "{children:?}");
    assert!(children.iter().all(|l| l.0 != parent && l.2.starts_with("pk-child-")));
    assert_eq!(children.iter().map(|l| &l.0).collect::<BTreeSet<_>>().len(), 2, "both children");

    // The shard-end checkpoint finished the parent: a second run reads nothing again.
    let (out, _) = timed(weir(&["run", "--config", cfg, "--until-caught-up"]), LIMIT);
    assert!(ok(&out).contains("(0 records processed)"));
    assert_eq!(processed(dir.path()).len(), 801);
}

/// The processor of the `aws-kcl` package's README (its sample consumer), unchanged but
/// for one line of "custom record processing logic" that appends the partition key to
/// `$OUT_FILE`.
fn aws_kcl_processor() -> String {
    let package = emulators_home().join("aws-kcl-2.3.2/node_modules/aws-kcl");
    let readme = std::fs::read_to_string(package.join("README.md")).expect("run tests/emulators/install.sh aws-kcl");
    let start = readme.find("```javascript\n").expect("a JavaScript example") + "```javascript\n".len();
    let code = &readme[start..start + readme[start..].find("```").unwrap()];
    let placeholder = "// Custom record processing logic ...";
    assert!(code.contains(placeholder), "the README example changed:\n{code}");
    let code = code.replace(
        placeholder,
        "require('fs').appendFileSync(process.env.OUT_FILE, partitionKey + ' ' + data.length + '\\n');",
    );
    code.replace("require('aws-kcl')", &format!("require({:?})", package.display().to_string()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aws_kcl_node_processor_processes_and_resumes() {
    let fk = Emulator::start("ferrokinesis", &[]);
    let k = kinesis(&fk.endpoint).await;
    create_stream(&k, "nodesample", 2).await;
    let p = Producer::new(k.clone(), "nodesample");
    put_wave(&p, "first", 1_000).await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("sample_kcl_app.js"), aws_kcl_processor()).unwrap();
    let out_file = dir.path().join("records");
    let props = dir.path().join("sample.properties");
    std::fs::write(
        &props,
        format!(
            "executableName = node sample_kcl_app.js\nstreamName = nodesample\napplicationName = NodeKCLSample\n\
             processingLanguage = nodejs\ninitialPositionInStream = TRIM_HORIZON\nregionName = us-east-1\n\
             kinesisEndpoint = {}\nmaxRecords = 200\n",
            fk.endpoint
        ),
    )
    .unwrap();
    let props = props.to_str().unwrap();
    let db = dir.path().join("leases.db");
    let db = db.to_str().unwrap();
    let run = || {
        let mut cmd = weir(&["multilang", "--properties", props, "--sqlite", db, "--until-caught-up"]);
        cmd.env("OUT_FILE", &out_file);
        cmd
    };
    let keys = || -> Vec<String> {
        std::fs::read_to_string(&out_file)
            .unwrap_or_default()
            .lines()
            .map(|l| l.split(' ').next().unwrap().to_owned())
            .collect()
    };

    let (out, _) = timed(run(), LIMIT);
    ok(&out);
    let first = keys();
    assert_eq!(first.len(), 1_000);
    assert_eq!(first.iter().collect::<BTreeSet<_>>().len(), 1_000, "every record once");
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(log.contains("up to 200 records"), "maxRecords becomes stream.max_records: {log}");
    assert!(!log.contains("maxRecords:"), "no warning for maxRecords: {log}");

    // It checkpoints each batch at its last record: a restart reads only the new ones.
    put_wave(&p, "second", 200).await;
    let (out, _) = timed(run(), LIMIT);
    ok(&out);
    let all = keys();
    assert_eq!(all.len(), 1_200);
    assert!(all[1_000..].iter().all(|k| k.starts_with("pk-second-")));
}

/// A processor speaking the raw MultiLang protocol (no `amazon_kclpy`): it checkpoints
/// at the last record of its first batch and, the moment the reply says it was saved,
/// records that position and SIGKILLs the worker (its parent).
const RAW_CHECKPOINT_THEN_KILL: &str = r#"
import json, os, signal, sys
shard = None
def send(m):
    sys.stdout.write(json.dumps(m) + "\n"); sys.stdout.flush()
for line in sys.stdin:
    m = json.loads(line)
    a = m["action"]
    if a == "initialize":
        shard = m["shardId"]
    elif a == "processRecords" and m["records"]:
        seq = m["records"][-1]["sequenceNumber"]
        send({"action": "checkpoint", "sequenceNumber": seq, "subSequenceNumber": None})
        reply = json.loads(sys.stdin.readline())
        if reply.get("action") == "checkpoint" and reply.get("error") is None:
            with open(os.path.join(os.environ["OUT"], "told-" + shard), "w") as f:
                f.write(seq)
            os.kill(os.getppid(), signal.SIGKILL)
    send({"action": "status", "responseFor": a})
"#;

/// A checkpoint reply means the checkpoint is stored, as in the KCL: the worker is
/// killed the moment a processor is told "saved", and the lease table holds it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_checkpoint_reply_means_the_checkpoint_is_stored() {
    let fk = Emulator::start("ferrokinesis", &[]);
    let k = kinesis(&fk.endpoint).await;
    let stream = "raw-checkpoint";
    create_stream(&k, stream, 2).await;
    put_wave(&Producer::new(k.clone(), stream), "raw", 400).await;
    let dir = tempfile::tempdir().unwrap();
    let cfg = processor_config(dir.path(), &fk.endpoint, stream, "raw");
    std::fs::write(dir.path().join("processor.py"), RAW_CHECKPOINT_THEN_KILL).unwrap();

    let (out, _) = timed(weir(&["run", "--config", cfg.to_str().unwrap()]), LIMIT);
    assert!(!out.status.success(), "the processor killed the worker:\n{}", String::from_utf8_lossy(&out.stderr));
    let told: Vec<(String, String)> = std::fs::read_dir(dir.path())
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let shard = name.strip_prefix("told-")?.to_owned();
            Some((shard, std::fs::read_to_string(e.path()).unwrap()))
        })
        .collect();
    assert!(
        !told.is_empty(),
        "a processor was told its checkpoint was saved:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let table = weir_local::SqliteLeaseTable::open(dir.path().join("leases.db"), "weir").unwrap();
    let leases = weir_core::ports::LeaseTable::list(&table).await.unwrap();
    let py = weir_core::ConsumerName::new("py");
    for (shard, seq) in told {
        let lease = leases.iter().find(|l| l.key.as_str() == shard).unwrap_or_else(|| panic!("no lease {shard}"));
        let stored = match lease.checkpoint_for(&py) {
            weir_core::Checkpoint::At(p) => p.sequence.clone(),
            other => panic!("{shard}: told {seq} was saved, the lease holds {other:?}"),
        };
        let told = weir_core::SequenceNumber::parse(&seq).unwrap();
        assert!(stored >= told, "{shard}: told {told} was saved, the lease holds {stored}");
    }
}

/// A raw-protocol processor that writes every action it receives to `$OUT/actions-<shard>`.
const RAW_RECORDING: &str = r#"
import json, os, sys
shard = None
for line in sys.stdin:
    m = json.loads(line)
    a = m["action"]
    if a == "initialize":
        shard = m["shardId"]
    with open(os.path.join(os.environ["OUT"], "actions-" + shard), "a") as f:
        f.write(a + "\n")
    if a in ("shutdownRequested", "shardEnded"):
        sys.stdout.write(json.dumps({"action": "checkpoint", "sequenceNumber": None, "subSequenceNumber": None}) + "\n")
        sys.stdout.flush()
        sys.stdin.readline()
    sys.stdout.write(json.dumps({"action": "status", "responseFor": a}) + "\n")
    sys.stdout.flush()
"#;

/// A graceful stop (SIGTERM): each processor hears `shutdownRequested` (and may
/// checkpoint), then `leaseLost` as the lease goes, as the KCL's processors do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_graceful_stop_sends_shutdown_requested_then_lease_lost() {
    let fk = Emulator::start("ferrokinesis", &[]);
    let k = kinesis(&fk.endpoint).await;
    let stream = "raw-shutdown";
    create_stream(&k, stream, 1).await;
    put_wave(&Producer::new(k.clone(), stream), "raw", 100).await;
    let dir = tempfile::tempdir().unwrap();
    let cfg = processor_config(dir.path(), &fk.endpoint, stream, "raw");
    std::fs::write(dir.path().join("processor.py"), RAW_RECORDING).unwrap();
    let mut child = weir(&["run", "--config", cfg.to_str().unwrap()])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let actions = dir.path().join("actions-shardId-000000000000");
    let mut patience = Patience::new(LIMIT);
    loop {
        let seen = std::fs::read_to_string(&actions).unwrap_or_default();
        if seen.contains("processRecords") {
            break;
        }
        if let Err(why) = patience.observe((cpu_ticks(child.id()), &seen)) {
            panic!("no processRecords: {why}; the actions so far:\n{seen}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap().success());
    let status = child.wait().unwrap();
    assert!(status.success(), "exit after SIGTERM: {status}");
    let seen = std::fs::read_to_string(&actions).unwrap();
    let tail: Vec<&str> = seen.lines().rev().take(2).collect();
    assert_eq!(tail, ["leaseLost", "shutdownRequested"], "the last actions:\n{seen}");
}

/// A raw-protocol processor that, in its first `processRecords`, marks itself inside
/// (`$OUT/inside-<shard>`) and waits for another shard's processor to be inside its
/// first `processRecords` too; it writes `met-<shard>`, or `alone-<shard>` when none
/// came within 30 s. It records and checkpoints every batch.
const RAW_MEETING: &str = r#"
import json, os, sys, time
OUT = os.environ["OUT"]
shard = None
first = True
def send(m):
    sys.stdout.write(json.dumps(m) + "\n"); sys.stdout.flush()
def inside():
    return len([f for f in os.listdir(OUT) if f.startswith("inside-")])
for line in sys.stdin:
    m = json.loads(line)
    a = m["action"]
    if a == "initialize":
        shard = m["shardId"]
    elif a == "processRecords":
        if first:
            first = False
            open(os.path.join(OUT, "inside-" + shard), "w").close()
            deadline = time.time() + 30
            while inside() < 2 and time.time() < deadline:
                time.sleep(0.01)
            open(os.path.join(OUT, ("met-" if inside() >= 2 else "alone-") + shard), "w").close()
        records = m["records"]
        with open(os.path.join(OUT, "records"), "a") as f:
            f.write("".join("%s %s %s\n" % (shard, r["sequenceNumber"], r["partitionKey"]) for r in records))
        send({"action": "checkpoint", "sequenceNumber": records[-1]["sequenceNumber"], "subSequenceNumber": None})
        sys.stdin.readline()
    elif a in ("shutdownRequested", "shardEnded"):
        send({"action": "checkpoint", "sequenceNumber": None, "subSequenceNumber": None})
        sys.stdin.readline()
    send({"action": "status", "responseFor": a})
"#;

/// Each shard's processor runs at the same time as the others, as in the KCL: the first
/// processor inside `processRecords` is still there when another shard's enters (with
/// one batch at a time per worker it waits alone until its deadline). Every record is
/// still processed once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shards_processors_run_at_the_same_time() {
    let fk = Emulator::start("ferrokinesis", &[]);
    let k = kinesis(&fk.endpoint).await;
    let stream = "raw-concurrent";
    create_stream(&k, stream, 4).await;
    put_wave(&Producer::new(k.clone(), stream), "raw", 400).await;
    let dir = tempfile::tempdir().unwrap();
    let cfg = processor_config(dir.path(), &fk.endpoint, stream, "raw");
    // A processor waiting for its peer is not hung.
    let text = std::fs::read_to_string(&cfg).unwrap().replace("timeout = \"2s\"", "timeout = \"60s\"");
    std::fs::write(&cfg, text).unwrap();
    std::fs::write(dir.path().join("processor.py"), RAW_MEETING).unwrap();

    let (out, _) = timed(weir(&["run", "--config", cfg.to_str().unwrap(), "--until-caught-up"]), LIMIT);
    let stdout = ok(&out);
    assert!(stdout.contains("(400 records processed)"), "{stdout}");
    let marks: BTreeSet<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("met-") || n.starts_with("alone-"))
        .collect();
    let alone: Vec<&String> = marks.iter().filter(|n| n.starts_with("alone-")).collect();
    assert!(alone.is_empty(), "processors that waited alone in processRecords: {alone:?} (all: {marks:?})");
    assert_eq!(marks.len(), 4, "every shard's processor had a first batch: {marks:?}");
    let keys: Vec<String> = processed(dir.path()).into_iter().map(|r| r.2).collect();
    assert_eq!(keys.len(), 400, "every record once");
    assert_eq!(keys.iter().collect::<BTreeSet<_>>().len(), 400);
}
