//! Enrichment republishing to a second Kinesis stream with write limits enforced
//! (ferrokinesis `--enforce-limits true`): PutRecords is throttled, only failed records
//! are retried, and every input record appears exactly once in the output stream, in
//! input order per partition key.
#![allow(clippy::unwrap_used, clippy::print_stdout)] // a test: a failed expectation is a failed test

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use weir_aws::kinesis::producer::Producer;
use weir_aws::kinesis::writer::KinesisWriter;
use weir_aws::{AwsSettings, KinesisOptions, KinesisStream, load_sdk_config};
use weir_core::ports::{ReadMode, ShardReader, StreamCatalog};
use weir_core::{
    Consumer, ExtendedSequenceNumber, Record, RecordBatch, SequenceNumber, ShardId, StartingPosition, SystemClock,
    Timestamp,
};
use weir_e2e::create_stream;
use weir_enrichment::{Enricher, EnrichmentConfig};
use weir_testkit::{CrashSwitch, Emulator, SimAcks, SimLeases};

/// Records of about 2.5 KB in batches of 500: each PutRecords call is over the 1 MB a
/// shard takes per second, so throttling does not depend on how fast the machine is.
const RECORDS: u64 = 3_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_record_once_in_per_key_order_after_throttling() {
    let emu = Emulator::start("ferrokinesis", &["--enforce-limits", "true"]);
    let sdk = load_sdk_config(&AwsSettings::emulator(&emu.endpoint)).await;
    let client = aws_sdk_kinesis::Client::new(&sdk);
    create_stream(&client, "enriched", 1).await;
    let writer = Arc::new(KinesisWriter::new(Producer::new(client.clone(), "enriched"), "enriched"));
    let config: EnrichmentConfig = toml::from_str(
        r#"
name = "enrich"
add = ["shard_id", "sequence_number"]
partition_key = ".tenant_id"
reshape = "{tenant_id, session_id, shard_id, sequence_number, n: .duration_ms}"
"#,
    )
    .unwrap();
    let mut enricher = Enricher::new(config, writer.clone(), None, Arc::new(SystemClock)).unwrap();
    let leases = SimLeases::new();
    let acks = SimAcks::new(leases.clone(), 1, CrashSwitch::after(None));
    let shard = ShardId::new("shardId-000000000000");
    enricher.on_shard_open(&leases.take(&shard, 1)).await.unwrap();
    let pad = "x".repeat(2_400);
    let records: Vec<Record> = (0..RECORDS)
        .map(|i| Record {
            partition_key: format!("in-{i}"),
            position: ExtendedSequenceNumber::plain(SequenceNumber::from_u128(i as u128 + 1)),
            approximate_arrival: Timestamp::from_millis(1_764_400_000_000),
            data: Bytes::from(format!(r#"{{"tenantId":"t-{:02}","sessionId":"{pad}","durationMs":{i}}}"#, i % 12)),
        })
        .collect();
    for chunk in records.chunks(500) {
        let batch = RecordBatch {
            shard_id: shard.clone(),
            records: chunk.to_vec(),
            millis_behind_latest: None,
            child_shards: None,
        };
        enricher.on_batch(&batch, &acks).await.unwrap();
    }
    assert_eq!(leases.checkpoint(&shard).map(|p| p.sequence.to_string()), Some(RECORDS.to_string()));
    assert!(writer.retried() > 0, "write limits should have throttled some records");
    eprintln!("{} records retried after throttling", writer.retried());

    // Read the output stream back.
    let stream = KinesisStream::open(client, "enriched", KinesisOptions::default()).await.unwrap();
    let mut per_key: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for s in stream.list_shards().await.unwrap() {
        let mut sub = stream.open(&s.id, &StartingPosition::TrimHorizon, ReadMode::Polling).await.unwrap();
        loop {
            let b = sub.next().await.unwrap().unwrap();
            if b.records.is_empty() && b.millis_behind_latest == Some(0) {
                break;
            }
            for r in b.records {
                let v: serde_json::Value = serde_json::from_slice(&r.data).unwrap();
                assert_eq!(r.partition_key, v["tenant_id"].as_str().unwrap(), "partition key from the jq path");
                per_key.entry(r.partition_key).or_default().push(v["n"].as_u64().unwrap());
            }
        }
    }
    let total: usize = per_key.values().map(Vec::len).sum();
    assert_eq!(total as u64, RECORDS, "every record exactly once");
    for (key, ns) in &per_key {
        assert!(ns.windows(2).all(|w| w[0] < w[1]), "{key}: out of order {ns:?}");
    }
    let mut all: Vec<u64> = per_key.into_values().flatten().collect();
    all.sort();
    assert_eq!(all, (0..RECORDS).collect::<Vec<_>>());
}
