//! `weir put` against ferrokinesis with write limits enforced: every record stored
//! exactly once despite throttling; bad lines reported with their numbers.
#![allow(clippy::unwrap_used, clippy::print_stdout)] // a test: a failed expectation is a failed test

use std::collections::BTreeMap;
use std::process::Command;
use std::time::Duration;

use weir_aws::{AwsSettings, KinesisOptions, KinesisStream, load_sdk_config};
use weir_core::StartingPosition;
use weir_core::ports::{ReadMode, ShardReader, StreamCatalog};
use weir_testkit::Emulator;

async fn create_stream(client: &aws_sdk_kinesis::Client, name: &str, shards: i32) {
    client.create_stream().stream_name(name).shard_count(shards).send().await.unwrap();
    for _ in 0..200 {
        let s = client.describe_stream_summary().stream_name(name).send().await.unwrap();
        if s.stream_description_summary().map(|d| d.stream_status().clone())
            == Some(aws_sdk_kinesis::types::StreamStatus::Active)
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("stream not active");
}

fn weir_put(endpoint: &str, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_weir"))
        .arg("put")
        .args(args)
        .env("AWS_ENDPOINT_URL_KINESIS", endpoint)
        .env("AWS_REGION", "us-east-1")
        .env("AWS_ACCESS_KEY_ID", "test")
        .env("AWS_SECRET_ACCESS_KEY", "test")
        .output()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_thousand_records_exactly_once_under_throttling() {
    let emu = Emulator::start("ferrokinesis", &["--enforce-limits", "true"]);
    let sdk = load_sdk_config(&AwsSettings::emulator(&emu.endpoint)).await;
    let client = aws_sdk_kinesis::Client::new(&sdk);
    create_stream(&client, "put-test", 2).await;
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("events.ndjson");
    let pad = "x".repeat(200);
    let lines: Vec<String> =
        (0..20_000).map(|i| format!("{{\"tenantId\":\"t-{:03}\",\"n\":{i},\"pad\":\"{pad}\"}}", i % 50)).collect();
    std::fs::write(&input, lines.join("\n") + "\n").unwrap();
    let out = weir_put(
        &emu.endpoint,
        &["--stream", "put-test", "--input", input.to_str().unwrap(), "--partition-key", ".tenantId"],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("put 20000 of 20000"), "{stdout}");
    let retried: u64 =
        stdout.split('(').nth(1).and_then(|s| s.split_whitespace().next()).and_then(|n| n.parse().ok()).unwrap();
    assert!(retried > 0, "write limits should have throttled some records: {stdout}");

    // Read everything back and compare: each line exactly once.
    let stream = KinesisStream::open(client, "put-test", KinesisOptions::default()).await.unwrap();
    let mut seen: BTreeMap<String, u32> = BTreeMap::new();
    for shard in stream.list_shards().await.unwrap() {
        let mut sub = stream.open(&shard.id, &StartingPosition::TrimHorizon, ReadMode::Polling).await.unwrap();
        loop {
            let b = sub.next().await.unwrap().unwrap();
            if b.records.is_empty() && b.millis_behind_latest == Some(0) {
                break;
            }
            for r in b.records {
                *seen.entry(String::from_utf8(r.data.to_vec()).unwrap()).or_default() += 1;
            }
        }
    }
    assert_eq!(seen.len(), 20_000, "every record stored");
    assert!(seen.values().all(|n| *n == 1), "no record stored twice");
    for l in &lines[..10] {
        assert_eq!(seen.get(l), Some(&1));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_lines_are_reported_with_line_numbers() {
    let emu = Emulator::start("ferrokinesis", &[]);
    let sdk = load_sdk_config(&AwsSettings::emulator(&emu.endpoint)).await;
    create_stream(&aws_sdk_kinesis::Client::new(&sdk), "bad-input", 1).await;
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("mixed.ndjson");
    let big = format!("{{\"tenantId\":\"t\",\"pad\":\"{}\"}}", "y".repeat(1024 * 1024));
    let text = [
        "{\"tenantId\":\"t-1\"}",
        "not json",
        "",
        "{\"toolName\":\"x\"}",
        &big,
        "{\"tenantId\":{\"a\":1}}",
        "{\"tenantId\":\"t-2\"}",
    ]
    .join("\n");
    std::fs::write(&input, text).unwrap();
    let out = weir_put(
        &emu.endpoint,
        &["--stream", "bad-input", "--input", input.to_str().unwrap(), "--partition-key", ".tenantId"],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "rejections make the command fail");
    for (line, what) in
        [(2, "not valid JSON"), (3, "empty line"), (4, "no field .tenantId"), (5, "at most"), (6, "not a scalar")]
    {
        assert!(
            stderr.contains(&format!("line {line}: rejected: ")) && stderr.contains(what),
            "line {line} ({what}) not reported: {stderr}"
        );
    }
    assert!(String::from_utf8_lossy(&out.stdout).contains("put 2 of 2"));
}
