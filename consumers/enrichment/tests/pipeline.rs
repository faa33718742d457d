//! The enrichment pipeline with a lookup table from a store, a filter, a reshape and a
//! partition key; malformed records are counted and acknowledged; a failed write
//! fails the batch (nothing acknowledged) so it is delivered again.
#![allow(clippy::unwrap_used, clippy::print_stdout)] // a test: a failed expectation is a failed test

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use bytes::Bytes;
use weir_core::ports::{ObjectSink, OutRecord, PutOptions, StreamWriter, WriteError};
use weir_core::{Consumer, ExtendedSequenceNumber, Record, RecordBatch, SequenceNumber, ShardId, Timestamp};
use weir_enrichment::{Enricher, EnrichmentConfig};
use weir_testkit::{CrashSwitch, ManualClock, MemoryObjectSink, SimAcks, SimLeases};

#[derive(Default)]
struct Collect {
    out: Mutex<Vec<OutRecord>>,
    fail: Mutex<bool>,
}

#[async_trait]
impl StreamWriter for Collect {
    async fn write(&self, records: Vec<OutRecord>) -> Result<(), WriteError> {
        if *self.fail.lock().unwrap() {
            return Err(WriteError { message: "down".into(), retryable: true });
        }
        self.out.lock().unwrap().extend(records);
        Ok(())
    }
    fn location(&self) -> String {
        "memory".into()
    }
}

fn record(n: u128, data: &str) -> Record {
    Record {
        partition_key: format!("in-{n}"),
        position: ExtendedSequenceNumber::plain(SequenceNumber::from_u128(n)),
        approximate_arrival: Timestamp::from_millis(1_764_400_000_000),
        data: Bytes::from(data.to_owned()),
    }
}

#[tokio::test]
async fn normalise_add_look_up_filter_reshape() {
    let store = Arc::new(MemoryObjectSink::new());
    store
        .put_if_absent(
            "tenants.csv",
            Bytes::from_static(b"id,plan,region\nt-1,pro,eu\nt-2,free,us\n"),
            &PutOptions::default(),
        )
        .await
        .unwrap();
    let config: EnrichmentConfig = toml::from_str(
        r#"
name = "enrich"
filter = ".tool_name != \"health_check\""
reshape = "{tenant: .tenant_id, plan: .tenant.plan, tool: .tool_name, ok: .success, shard: .shard_id, seq: .sequence_number, worker: .worker_id}"
partition_key = ".tenant_id"
[lookup]
object = "tenants.csv"
"#,
    )
    .unwrap();
    let out = Arc::new(Collect::default());
    let clock = ManualClock::new(Timestamp::from_millis(1_764_400_000_000));
    let mut e = Enricher::new(config, out.clone(), Some(store as Arc<dyn ObjectSink>), Arc::new(clock)).unwrap();
    let leases = SimLeases::new();
    let acks = SimAcks::new(leases.clone(), 1, CrashSwitch::after(None));
    let shard = ShardId::new("s-1");
    e.on_shard_open(&leases.take(&shard, 1)).await.unwrap();
    let records = vec![
        record(1, r#"{"tenantId":"t-1","toolName":"search","success":true}"#),
        record(2, r#"{"tenantId":"t-2","toolName":"health_check","success":true}"#),
        record(3, "not json"),
        record(4, r#"{"tenantId":"t-9","toolName":"fetch","success":false}"#),
    ];
    e.on_batch(
        &RecordBatch { shard_id: shard.clone(), records, millis_behind_latest: None, child_shards: None },
        &acks,
    )
    .await
    .unwrap();
    let got = out.out.lock().unwrap().clone();
    assert_eq!(got.len(), 2, "health_check filtered, not-json counted: {got:?}");
    let first: serde_json::Value = serde_json::from_slice(&got[0].data).unwrap();
    assert_eq!(
        first,
        serde_json::json!({"tenant":"t-1","plan":"pro","tool":"search","ok":true,"shard":"s-1","seq":"1","worker":"w1"})
    );
    assert_eq!(got[0].partition_key, "t-1");
    let unknown: serde_json::Value = serde_json::from_slice(&got[1].data).unwrap();
    assert_eq!(unknown["plan"], serde_json::Value::Null, "no row for t-9");
    assert_eq!(leases.checkpoint(&shard), Some(ExtendedSequenceNumber::plain(SequenceNumber::from_u128(4))));

    // The output fails: the batch fails and nothing more is acknowledged.
    *out.fail.lock().unwrap() = true;
    let batch = RecordBatch {
        shard_id: shard.clone(),
        records: vec![record(5, r#"{"tenantId":"t-1"}"#)],
        millis_behind_latest: None,
        child_shards: None,
    };
    assert!(e.on_batch(&batch, &acks).await.is_err());
    assert_eq!(leases.checkpoint(&shard), Some(ExtendedSequenceNumber::plain(SequenceNumber::from_u128(4))));
}

#[test]
fn bad_expressions_name_the_field() {
    let config: EnrichmentConfig = toml::from_str("name = \"e\"\nreshape = \"{a: .b\"\n").unwrap();
    let e = config.check().unwrap_err();
    assert_eq!(e.field, "reshape");
    assert!(e.message.contains("at character"), "{e}");
}
