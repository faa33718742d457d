//! The example plugin binary (`examples/tool-minutes`, the whole `weir` command line
//! plus the `tool-minutes` kind) against ferrokinesis: `run --until-caught-up`,
//! `replay` into a second table, and a replay into the same table that counts nothing
//! twice.
#![allow(clippy::unwrap_used, clippy::print_stdout)] // a test: a failed expectation is a failed test

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use weir_aws::kinesis::producer::Producer;
use weir_e2e::{create_stream, kinesis, put_wave, target_binary, timed};
use weir_testkit::Emulator;

fn plugin(args: &[&str]) -> Command {
    let mut c = Command::new(target_binary("weir-tool-minutes", "weir-example-tool-minutes"));
    c.args(args).env("AWS_ACCESS_KEY_ID", "test").env("AWS_SECRET_ACCESS_KEY", "test").env("AWS_REGION", "us-east-1");
    c
}

fn config(dir: &Path, endpoint: &str, table: &str) -> PathBuf {
    let cfg = dir.join(format!("{table}.toml"));
    std::fs::write(
        &cfg,
        format!(
            "[worker]\ninitial_position = \"TRIM_HORIZON\"\n[stream]\nkind = \"kinesis\"\nname = \"calls\"\n\
             [leases]\npath = \"{leases}\"\n[aws]\nkinesis_endpoint_url = \"{endpoint}\"\n[http]\nlisten = \"\"\n\
             [[consumers]]\ntype = \"tool-minutes\"\nname = \"minutes\"\npath = \"{db}\"\n",
            leases = dir.join("leases.db").display(),
            db = dir.join(format!("{table}.db")).display(),
        ),
    )
    .unwrap();
    cfg
}

/// Calls per tenant in a tool-minutes table.
fn calls(db: &Path) -> Vec<(String, i64)> {
    let c = rusqlite::Connection::open(db).unwrap();
    let mut q = c.prepare("SELECT tenant, sum(calls) FROM tool_minutes GROUP BY tenant ORDER BY tenant").unwrap();
    q.query_map([], |r| Ok((r.get(0)?, r.get(1)?))).unwrap().map(Result::unwrap).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_example_plugin_runs_and_replays() {
    let fk = Emulator::start("ferrokinesis", &[]);
    let k = kinesis(&fk.endpoint).await;
    create_stream(&k, "calls", 2).await;
    put_wave(&Producer::new(k.clone(), "calls"), "w", 900).await;
    let dir = tempfile::tempdir().unwrap();
    let live = config(dir.path(), &fk.endpoint, "live");
    let limit = Duration::from_secs(120);

    let (out, _) = timed(plugin(&["config", "check", live.to_str().unwrap()]), limit);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && text.contains("tool-minutes"), "{text}");

    let (out, _) = timed(plugin(&["run", "--config", live.to_str().unwrap(), "--until-caught-up"]), limit);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("(900 records processed)"), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let expected: Vec<(String, i64)> = (0..3).map(|t| (format!("t-{t}"), 300)).collect();
    assert_eq!(calls(&dir.path().join("live.db")), expected);

    let from = (std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() - 3_600_000)
        .to_string();
    let replay = |cfg: &Path| {
        plugin(&[
            "replay",
            "--config",
            cfg.to_str().unwrap(),
            "--consumers",
            "minutes",
            "--from",
            &from,
            "--to",
            "now",
            "--end-idle",
            "2s",
        ])
    };
    // A backfill into another table: the same counts.
    let (out, _) = timed(replay(&config(dir.path(), &fk.endpoint, "backfill")), limit);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(calls(&dir.path().join("backfill.db")), expected);
    // Into the table that has them: nothing counted twice.
    let (out, _) = timed(replay(&live), limit);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(calls(&dir.path().join("live.db")), expected);
}
