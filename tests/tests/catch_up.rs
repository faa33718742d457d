//! Batch jobs against ferrokinesis: `weir run --until-caught-up` reads from the
//! checkpoints (or TRIM_HORIZON) to the present and exits 0 with checkpoints written, so
//! a second run archives only what came since; `weir replay --to now` replays up to the
//! moment the command starts and exits.
#![allow(clippy::unwrap_used, clippy::print_stdout)] // a test: a failed expectation is a failed test

use std::process::Output;
use std::time::Duration;

use weir_aws::kinesis::producer::Producer;
use weir_e2e::{create_stream, kinesis, kinesis_batch_config, put_wave, session_ids, weir_command};
use weir_testkit::Emulator;

const STREAM: &str = "batch-events";

/// Runs `weir` with `args`, failing the test after `limit`.
fn timed(args: &[&str], limit: Duration) -> (Output, Duration) {
    let mut cmd = weir_command();
    cmd.args(args);
    weir_e2e::timed(cmd, limit)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn until_caught_up_exits_with_checkpoints_and_to_now_ends_the_window() {
    let fk = Emulator::start("ferrokinesis", &[]);
    let k = kinesis(&fk.endpoint).await;
    create_stream(&k, STREAM, 2).await;
    let p = Producer::new(k.clone(), STREAM);
    put_wave(&p, "first", 3_000).await;
    let dir = tempfile::tempdir().unwrap();
    let cfg = kinesis_batch_config(dir.path(), &fk.endpoint, STREAM, "batch");
    let cfg = cfg.to_str().unwrap();
    let out_dir = dir.path().join("out");

    // From TRIM_HORIZON to the present, then exit 0: every record archived once.
    let (out, _) = timed(&["run", "--config", cfg, "--until-caught-up"], Duration::from_secs(60));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("caught up: every shard read to the start (3000 records processed)"), "{stdout}");
    let first = session_ids(&out_dir);
    assert_eq!(first.len(), 3_000);
    assert_eq!(first.iter().collect::<std::collections::BTreeSet<_>>().len(), 3_000, "none twice");

    // The next run starts at the checkpoints: only what came since.
    put_wave(&p, "second", 500).await;
    let (out, _) = timed(&["run", "--config", cfg, "--until-caught-up"], Duration::from_secs(60));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && stdout.contains("(500 records processed)"), "{stdout}");
    let all = session_ids(&out_dir);
    assert_eq!(all.len(), 3_500);
    assert_eq!(all.iter().filter(|s| s.starts_with("second-")).count(), 500);

    // Nothing new: it exits at once (a read comes back empty at the tip).
    let (out, took) = timed(&["run", "--config", cfg, "--until-caught-up"], Duration::from_secs(60));
    assert!(String::from_utf8_lossy(&out.stdout).contains("(0 records processed)"));
    assert!(took < Duration::from_secs(20), "a caught-up stream takes {took:?}");
    assert_eq!(session_ids(&out_dir).len(), 3_500);

    // `replay --to now`: the window ends when the command starts.
    let hour_ago = (std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis()
        - 3_600_000)
        .to_string();
    let (out, _) = timed(
        &[
            "replay",
            "--config",
            cfg,
            "--from",
            &hour_ago,
            "--to",
            "now",
            "--consumers",
            "archive",
            "--archive-prefix",
            "again/",
            "--end-idle",
            "2s",
        ],
        Duration::from_secs(60),
    );
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{log}");
    assert_eq!(session_ids(&out_dir.join("again")).len(), 3_500, "every record up to now, once");
    assert_eq!(log.matches("window end reached").count(), 2, "each shard says why it stopped: {log}");
    assert!(!log.contains("shard end read"), "open shards are not reported closed: {log}");
}
