//! Enrichment's tenant lookup from an S3 object (moto), refreshed on its interval when
//! an operator replaces the object.
#![allow(clippy::unwrap_used, clippy::print_stdout)] // a test: a failed expectation is a failed test

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use weir_aws::{S3ObjectSink, S3Options};
use weir_core::ports::{ObjectSink, OutRecord, StreamWriter, WriteError};
use weir_core::{Clock, Consumer, ExtendedSequenceNumber, Record, RecordBatch, SequenceNumber, ShardId, Timestamp};
use weir_e2e::s3;
use weir_enrichment::{Enricher, EnrichmentConfig};
use weir_testkit::{CrashSwitch, Emulator, ManualClock, SimAcks, SimLeases};

#[derive(Default)]
struct Collect(Mutex<Vec<OutRecord>>);

#[async_trait]
impl StreamWriter for Collect {
    async fn write(&self, records: Vec<OutRecord>) -> Result<(), WriteError> {
        self.0.lock().unwrap().extend(records);
        Ok(())
    }
    fn location(&self) -> String {
        "memory".into()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lookup_rows_come_from_s3_and_refresh() {
    let moto = Emulator::start("moto", &[]);
    let client = s3(&moto.endpoint).await;
    client.create_bucket().bucket("weir-config").send().await.unwrap();
    let put = |body: &'static str| {
        client
            .put_object()
            .bucket("weir-config")
            .key("tenants.json")
            .body(Bytes::from_static(body.as_bytes()).into())
            .send()
    };
    put(r#"{"t-1": {"plan": "free"}}"#).await.unwrap();
    let store: Arc<dyn ObjectSink> = Arc::new(S3ObjectSink::new(client.clone(), "weir-config", S3Options::default()));
    let config: EnrichmentConfig =
        toml::from_str("name = \"e\"\nadd = []\n[lookup]\nobject = \"tenants.json\"\nrefresh = \"30s\"\n").unwrap();
    let out = Arc::new(Collect::default());
    let clock = ManualClock::new(Timestamp::from_millis(1_764_400_000_000));
    let mut e = Enricher::new(config, out.clone(), Some(store), Arc::new(clock.clone())).unwrap();
    let leases = SimLeases::new();
    let acks = SimAcks::new(leases.clone(), 1, CrashSwitch::after(None));
    let shard = ShardId::new("s");
    e.on_shard_open(&leases.take(&shard, 1)).await.unwrap();
    let batch = |n: u128| RecordBatch {
        shard_id: shard.clone(),
        records: vec![Record {
            partition_key: "p".into(),
            position: ExtendedSequenceNumber::plain(SequenceNumber::from_u128(n)),
            approximate_arrival: Timestamp::from_millis(1_764_400_000_000),
            data: Bytes::from_static(br#"{"tenantId":"t-1"}"#),
        }],
        millis_behind_latest: None,
        child_shards: None,
    };
    e.on_batch(&batch(1), &acks).await.unwrap();
    put(r#"{"t-1": {"plan": "pro"}}"#).await.unwrap();
    clock.advance(Duration::from_secs(10));
    e.on_tick(clock.now(), &acks).await.unwrap();
    e.on_batch(&batch(2), &acks).await.unwrap();
    clock.advance(Duration::from_secs(30));
    e.on_tick(clock.now(), &acks).await.unwrap();
    e.on_batch(&batch(3), &acks).await.unwrap();
    let plans: Vec<String> = out
        .0
        .lock()
        .unwrap()
        .iter()
        .map(|r| {
            serde_json::from_slice::<serde_json::Value>(&r.data).unwrap()["tenant"]["plan"].as_str().unwrap().to_owned()
        })
        .collect();
    assert_eq!(plans, vec!["free", "free", "pro"], "reloaded only after the refresh interval");
}
