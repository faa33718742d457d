//! Enhanced fan-out consumers against ferrokinesis: two applications with `efo = true`
//! on one stream register two consumers (`weir-<namespace>`), never one they would
//! share; `weir replay --efo` reads as its own job consumer and deregisters it at the
//! end; `weir efo list` shows them and marks the config's own; `weir efo deregister`
//! removes one (a second time says there is nothing to do).
#![allow(clippy::unwrap_used, clippy::print_stdout)] // a test: a failed expectation is a failed test

use std::path::{Path, PathBuf};
use std::time::Duration;

use weir_aws::kinesis::producer::Producer;
use weir_e2e::patience::Patience;
use weir_e2e::{create_stream, kinesis, put_wave, weir_command};
use weir_testkit::Emulator;

const STREAM: &str = "efo-events";

fn config(dir: &Path, kinesis: &str, namespace: &str) -> PathBuf {
    let cfg = dir.join(format!("{namespace}.toml"));
    let text = format!(
        "{worker}\n[stream]\nkind = \"kinesis\"\nname = \"{STREAM}\"\nefo = true\n[leases]\npath = \"{leases}\"\n\
         namespace = \"{namespace}\"\n[aws]\nkinesis_endpoint_url = \"{kinesis}\"\n[http]\nlisten = \"\"\n\
         [[consumers]]\ntype = \"count\"\nname = \"count\"\n",
        worker = weir_e2e::worker_toml(None),
        leases = dir.join(format!("{namespace}.db")).display(),
    );
    std::fs::write(&cfg, text).unwrap();
    cfg
}

fn weir(args: &[&str]) -> (bool, String) {
    let mut cmd = weir_command();
    cmd.args(args);
    let (out, _) = weir_e2e::timed(cmd, Duration::from_secs(120));
    let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
}

async fn consumers(k: &aws_sdk_kinesis::Client) -> Vec<String> {
    weir_aws::kinesis::list_efo_consumers(k, STREAM).await.unwrap().into_iter().map(|c| c.name).collect()
}

/// Waits until the stream's consumers are `expected` (a deregistered one may be listed
/// as DELETING for a while).
async fn settles_to(k: &aws_sdk_kinesis::Client, expected: &[&str]) {
    // The list moves as consumers go from CREATING to ACTIVE and DELETING to gone.
    let mut patience = Patience::new(Duration::from_secs(60));
    loop {
        let now = consumers(k).await;
        if now == expected {
            return;
        }
        if let Err(why) = patience.observe(&now) {
            panic!("consumers {now:?}, expected {expected:?}: {why}");
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_application_and_each_replay_job_reads_as_its_own_consumer() {
    let fk = Emulator::start("ferrokinesis", &[]);
    let k = kinesis(&fk.endpoint).await;
    create_stream(&k, STREAM, 2).await;
    put_wave(&Producer::new(k.clone(), STREAM), "w", 200).await;
    let dir = tempfile::tempdir().unwrap();
    let a = config(dir.path(), &fk.endpoint, "app-a");
    let b = config(dir.path(), &fk.endpoint, "app-b");
    let (a, b) = (a.to_str().unwrap(), b.to_str().unwrap());
    assert!(consumers(&k).await.is_empty());

    for cfg in [a, b] {
        let (ok, text) = weir(&["run", "--config", cfg, "--until-caught-up"]);
        assert!(ok && text.contains("(200 records processed)"), "{text}");
        assert!(text.contains("through enhanced fan-out consumer"), "{text}");
    }
    assert_eq!(consumers(&k).await, ["weir-app-a", "weir-app-b"], "one consumer per application");

    // A replay with the fleet's config reads as the job's consumer, then deregisters it.
    let hour_ago = (chrono::Utc::now().timestamp_millis() - 3_600_000).to_string();
    let (ok, text) = weir(&[
        "replay",
        "--config",
        a,
        "--efo",
        "--from",
        &hour_ago,
        "--to",
        "now",
        "--job",
        "j1",
        "--consumers",
        "count",
        "--end-idle",
        "2s",
    ]);
    assert!(ok, "{text}");
    assert!(text.contains("enhanced fan-out consumer \"weir-app-a-replay-j1\""), "{text}");
    assert!(text.contains("deregistered enhanced fan-out consumer weir-app-a-replay-j1"), "{text}");
    settles_to(&k, &["weir-app-a", "weir-app-b"]).await; // the job's is gone, the fleet's stay

    let (ok, list) = weir(&["efo", "list", "--config", a]);
    assert!(ok, "{list}");
    let own = list.lines().find(|l| l.contains("weir-app-a")).unwrap();
    assert!(own.contains("ACTIVE") && own.contains("(this config's)"), "{list}");
    assert!(!list.lines().find(|l| l.contains("weir-app-b")).unwrap().contains("this config's"), "{list}");

    let (ok, text) = weir(&["efo", "deregister", "--config", a]);
    assert!(ok && text.contains("deregistered enhanced fan-out consumer weir-app-a"), "{text}");
    settles_to(&k, &["weir-app-b"]).await;
    let (ok, text) = weir(&["efo", "deregister", "--config", a]);
    assert!(ok && text.contains("nothing to do"), "{text}");
    let (ok, text) = weir(&["efo", "deregister", "--config", a, "--consumer", "weir-app-b"]);
    assert!(ok && text.contains("deregistered enhanced fan-out consumer weir-app-b"), "{text}");
}
