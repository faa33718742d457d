//! Records whose route can differ between a shard's owners: a Lambda that fails a
//! record once and not the next time, a line that does not fit the Parquet table. An
//! earlier owner's objects were written or claimed in any mix; whatever the new owner's
//! route for a record, it ends in exactly one object, never in both the data and the
//! error output, never in neither.
#![allow(clippy::unwrap_used, clippy::print_stdout)] // a test: a failed expectation is a failed test

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use bytes::Bytes;
use support::*;
use weir_archiver::{Archiver, ArchiverOptions, LambdaTransform, Transformer};
use weir_core::ports::{FunctionInvoker, InvokeError};
use weir_core::ports::{ObjectMeta, ObjectSink, PutOptions, PutOutcome, SinkError};
use weir_core::{Clock, CloseReason, Consumer, ShardId, Timestamp};
use weir_firehose::LambdaSettings;
use weir_testkit::{CrashSwitch, ManualClock, MemoryObjectSink, SimAcks, SimLeases};

/// A Lambda that gives records back as they came, but fails the ones whose session id
/// is in `failing` (`ProcessingFailed`).
#[derive(Default)]
struct Flaky {
    failing: Mutex<BTreeSet<String>>,
}

impl Flaky {
    fn fail(&self, ids: &[&str]) {
        *self.failing.lock().unwrap() = ids.iter().map(|s| (*s).to_owned()).collect();
    }
}

#[async_trait]
impl FunctionInvoker for Flaky {
    async fn invoke(&self, _function: &str, payload: Bytes) -> Result<Bytes, InvokeError> {
        let event: serde_json::Value = serde_json::from_slice(&payload).unwrap();
        let failing = self.failing.lock().unwrap().clone();
        let records: Vec<serde_json::Value> = event["records"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                let data = B64.decode(r["data"].as_str().unwrap()).unwrap();
                let v: serde_json::Value = serde_json::from_slice(&data).unwrap();
                if failing.contains(v["sessionId"].as_str().unwrap()) {
                    serde_json::json!({"recordId": r["recordId"], "result": "ProcessingFailed"})
                } else {
                    serde_json::json!({"recordId": r["recordId"], "result": "Ok", "data": r["data"]})
                }
            })
            .collect();
        Ok(Bytes::from(serde_json::json!({ "records": records }).to_string()))
    }
}

/// An archiver of raw MCP events (tenant and tool from the event's own fields), with the
/// Lambda `lambda`, or with the Parquet table of mcp-normalize's lines.
fn archiver(sink: Arc<dyn ObjectSink>, clock: &ManualClock, lambda: Option<Arc<Flaky>>) -> Archiver {
    let mut s = settings(64 << 20);
    let mut o = match lambda {
        Some(flaky) => {
            s.metadata_query = Some("{tenantId: .tenantId, toolName: .toolName}".into());
            s.append_delimiter = true;
            let lambda = LambdaSettings {
                arn: "arn:aws:lambda:us-east-1:123456789012:function:t".into(),
                retries: 0,
                buffer_bytes: 1 << 20,
                buffer_interval: Duration::from_secs(60),
            };
            s.lambda = Some(lambda.clone());
            let mut o = ArchiverOptions::new("mcp-archive", s);
            o.transformer = Transformer::Lambda(LambdaTransform {
                invoker: flaky,
                settings: lambda,
                delivery_arn: "arn:aws:firehose:us-east-1:123456789012:deliverystream/t".into(),
                source_arn: "arn:aws:kinesis:us-east-1:123456789012:stream/t".into(),
                region: "us-east-1".into(),
            });
            o
        }
        None => {
            s.compression = weir_firehose::Compression::Parquet;
            s.error_compression = weir_firehose::Compression::Uncompressed;
            s.file_extension = ".parquet".into();
            s.conversion = Some(mcp_table());
            let mut o = ArchiverOptions::new("mcp-archive", s);
            o.transformer = Transformer::McpNormalize;
            o
        }
    };
    o.max_buffer_memory = 64 << 20;
    Archiver::new(o, sink, Arc::new(clock.clone())).unwrap()
}

/// Where each session id is: (data objects, error objects).
fn places(store: &MemoryObjectSink) -> BTreeMap<String, (usize, usize)> {
    let mut out: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    for (key, body) in store.snapshot() {
        if key.starts_with("_weir/") {
            continue;
        }
        let text = object_text(&body);
        for line in text.lines() {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            if let Some(raw) = v.get("rawData").and_then(serde_json::Value::as_str) {
                let raw = String::from_utf8(B64.decode(raw).unwrap()).unwrap();
                let id = raw.split("\"sessionId\":\"").nth(1).or_else(|| raw.split("\"session_id\":\"").nth(1));
                out.entry(id.unwrap().split('"').next().unwrap().to_owned()).or_default().1 += 1;
            } else {
                let id = v.get("sessionId").or_else(|| v.get("session_id")).unwrap().as_str().unwrap();
                out.entry(id.to_owned()).or_default().0 += 1;
            }
        }
    }
    out
}

/// Records 1..=4 of shard 0, one partition (tenant t0, tool search).
fn records() -> weir_core::RecordBatch {
    batch(&ShardId::new("shard-0"), (1..=4).map(|n| record_of_tenant(0, n, 1)).collect())
}

/// The first owner archived a record as data (the Lambda took it) and died before its
/// checkpoint. The next owner's Lambda fails that record, for longer than any patience
/// (weir-sim seed 50225 kept it failing past five minutes): the record must not go to
/// the error output as well, nor be dropped. Data objects behind a Lambda list their
/// parts in their intents, so the next owner knows it is archived and skips it at once,
/// whatever its Lambda says now.
#[tokio::test(start_paused = true)]
async fn a_record_archived_as_data_is_skipped_by_the_next_owner_whose_lambda_fails_it() {
    let (store, leases, clock) =
        (Arc::new(MemoryObjectSink::new()), SimLeases::new(), ManualClock::new(Timestamp::from_millis(T0)));
    let shard = ShardId::new("shard-0");
    let lambda = Arc::new(Flaky::default());
    // Intents stored, objects put, acknowledgements lost with the process.
    let acks = SimAcks::new(leases.clone(), 1, CrashSwitch::after(Some(1)));
    let mut a = archiver(store.clone(), &clock, Some(lambda.clone()));
    a.on_shard_open(&leases.take(&shard, 1)).await.unwrap();
    a.on_batch(&records(), &acks).await.unwrap();
    let _ = a.on_shard_close(&shard, CloseReason::Shutdown, &acks).await;
    drop(a);
    assert_eq!(leases.checkpoint(&shard), None);
    lambda.fail(&["s0-2"]);
    let acks = SimAcks::new(leases.clone(), 2, CrashSwitch::after(None));
    let mut b = archiver(store.clone(), &clock, Some(lambda.clone()));
    b.on_shard_open(&leases.take(&shard, 2)).await.unwrap();
    clock.advance(Duration::from_secs(3600));
    b.on_batch(&records(), &acks).await.unwrap();
    b.on_shard_close(&shard, CloseReason::Shutdown, &acks).await.unwrap();
    let places = places(&store);
    for n in 1..=4 {
        assert_eq!(places.get(&format!("s0-{n}")), Some(&(1, 0)), "s0-{n}: {places:?}");
    }
    assert_eq!(leases.checkpoint(&shard), Some(pos(4)));
}

/// The first owner had no Lambda (one was configured later, or an earlier weir wrote
/// its intents): its data objects' intents name ranges, not parts. The next owner's
/// Lambda fails a record such an object's range holds: it cannot tell whether the
/// record is in it, so the batch is tried again, not sent to the error output; once the
/// Lambda takes it, it is skipped as archived.
#[tokio::test(start_paused = true)]
async fn a_record_in_a_range_without_parts_is_tried_again_while_the_lambda_fails_it() {
    let (store, leases, clock) =
        (Arc::new(MemoryObjectSink::new()), SimLeases::new(), ManualClock::new(Timestamp::from_millis(T0)));
    let shard = ShardId::new("shard-0");
    let lambda = Arc::new(Flaky::default());
    let acks = SimAcks::new(leases.clone(), 1, CrashSwitch::after(Some(1)));
    let mut s = settings(64 << 20);
    s.metadata_query = Some("{tenantId: .tenantId, toolName: .toolName}".into());
    s.append_delimiter = true;
    let mut a = Archiver::new(ArchiverOptions::new("mcp-archive", s), store.clone(), Arc::new(clock.clone())).unwrap();
    a.on_shard_open(&leases.take(&shard, 1)).await.unwrap();
    a.on_batch(&records(), &acks).await.unwrap();
    let _ = a.on_shard_close(&shard, CloseReason::Shutdown, &acks).await;
    drop(a);
    assert_eq!(leases.checkpoint(&shard), None);
    lambda.fail(&["s0-2"]);
    let acks = SimAcks::new(leases.clone(), 2, CrashSwitch::after(None));
    let mut b = archiver(store.clone(), &clock, Some(lambda.clone()));
    b.on_shard_open(&leases.take(&shard, 2)).await.unwrap();
    let uncertain = b.on_batch(&records(), &acks).await;
    assert!(uncertain.is_err(), "tried again, not sent to the error output");
    lambda.fail(&[]);
    b.on_batch(&records(), &acks).await.unwrap();
    b.on_shard_close(&shard, CloseReason::Shutdown, &acks).await.unwrap();
    let places = places(&store);
    for n in 1..=4 {
        assert_eq!(places.get(&format!("s0-{n}")), Some(&(1, 0)), "s0-{n}: {places:?}");
    }
    assert_eq!(leases.checkpoint(&shard), Some(pos(4)));
}

/// A store that refuses every object whose key holds `needle` (its puts fail): with
/// `tool-events-errors/`, an owner's error objects stay unwritten while its data
/// objects land.
struct Refusing(Arc<MemoryObjectSink>, &'static str);

#[async_trait]
impl ObjectSink for Refusing {
    async fn put_if_absent(&self, key: &str, body: Bytes, o: &PutOptions) -> Result<PutOutcome, SinkError> {
        if key.contains(self.1) {
            return Err(SinkError::Store { message: "injected".into(), retryable: true, source: None });
        }
        self.0.put_if_absent(key, body, o).await
    }
    async fn get(&self, key: &str) -> Result<Option<Bytes>, SinkError> {
        self.0.get(key).await
    }
    async fn stat(&self, key: &str) -> Result<Option<ObjectMeta>, SinkError> {
        self.0.stat(key).await
    }
    async fn list(&self, prefix: &str) -> Result<Vec<ObjectMeta>, SinkError> {
        self.0.list(prefix).await
    }
    async fn delete(&self, key: &str) -> Result<(), SinkError> {
        self.0.delete(key).await
    }
    fn location(&self) -> String {
        "refusing".into()
    }
}

/// The first owner's Lambda took every record; of its two partitions' objects one was
/// written (tenant t1: records 1 and 3) and one never was (tenant t0: 2 and 4), and it
/// died. The next owner's Lambda fails record 2: it is in no object, so it goes to the
/// error output now, once, without waiting, though the written object's range holds its
/// position (with ranges alone the next owner could not tell, and waited).
#[tokio::test(start_paused = true)]
async fn a_record_in_no_written_object_goes_to_the_error_output_without_waiting() {
    let (store, leases, clock) =
        (Arc::new(MemoryObjectSink::new()), SimLeases::new(), ManualClock::new(Timestamp::from_millis(T0)));
    let shard = ShardId::new("shard-0");
    let lambda = Arc::new(Flaky::default());
    let two_tenants = || batch(&shard, (1..=4).map(|n| record_of_tenant(0, n, 2)).collect());
    let acks = SimAcks::new(leases.clone(), 1, CrashSwitch::after(None));
    let mut a = archiver(Arc::new(Refusing(store.clone(), "tenant=t0/")), &clock, Some(lambda.clone()));
    a.on_shard_open(&leases.take(&shard, 1)).await.unwrap();
    a.on_batch(&two_tenants(), &acks).await.unwrap();
    assert!(a.on_shard_close(&shard, CloseReason::Shutdown, &acks).await.is_err(), "t0's object waits");
    drop(a);
    let written = places(&store);
    assert_eq!(written.get("s0-3"), Some(&(1, 0)), "t1's object was written: {written:?}");
    assert_eq!(written.get("s0-2"), None, "t0's was not: {written:?}");
    lambda.fail(&["s0-2"]);
    let acks = SimAcks::new(leases.clone(), 2, CrashSwitch::after(None));
    let mut b = archiver(store.clone(), &clock, Some(lambda.clone()));
    b.on_shard_open(&leases.take(&shard, 2)).await.unwrap();
    b.on_batch(&two_tenants(), &acks).await.unwrap();
    b.on_shard_close(&shard, CloseReason::Shutdown, &acks).await.unwrap();
    let places = places(&store);
    assert_eq!(places.get("s0-2"), Some(&(0, 1)), "{places:?}");
    for n in [1, 3, 4] {
        assert_eq!(places.get(&format!("s0-{n}")), Some(&(1, 0)), "s0-{n}: {places:?}");
    }
    assert_eq!(leases.checkpoint(&shard), Some(pos(4)));
}

/// The first owner's Lambda failed a record; its error object was never written (the
/// owner died), its data object for the same partition was. The next owner's Lambda
/// takes the record: it is archived as data, not skipped because the written data
/// object's range holds its position (the first owner sent it elsewhere).
#[tokio::test(start_paused = true)]
async fn a_record_the_first_owner_failed_is_archived_by_the_next() {
    let (store, leases, clock) =
        (Arc::new(MemoryObjectSink::new()), SimLeases::new(), ManualClock::new(Timestamp::from_millis(T0)));
    let shard = ShardId::new("shard-0");
    let lambda = Arc::new(Flaky::default());
    lambda.fail(&["s0-2"]);
    let acks = SimAcks::new(leases.clone(), 1, CrashSwitch::after(None));
    let mut a = archiver(Arc::new(Refusing(store.clone(), "tool-events-errors/")), &clock, Some(lambda.clone()));
    a.on_shard_open(&leases.take(&shard, 1)).await.unwrap();
    a.on_batch(&records(), &acks).await.unwrap();
    assert!(a.on_shard_close(&shard, CloseReason::Shutdown, &acks).await.is_err(), "the error object waits");
    drop(a);
    lambda.fail(&[]);
    let acks = SimAcks::new(leases.clone(), 2, CrashSwitch::after(None));
    let mut b = archiver(store.clone(), &clock, Some(lambda.clone()));
    b.on_shard_open(&leases.take(&shard, 2)).await.unwrap();
    b.on_batch(&records(), &acks).await.unwrap();
    b.on_shard_close(&shard, CloseReason::Shutdown, &acks).await.unwrap();
    let places = places(&store);
    for n in 1..=4 {
        assert_eq!(places.get(&format!("s0-{n}")), Some(&(1, 0)), "s0-{n}: {places:?}");
    }
}

/// The same with a record the first owner's Lambda failed and whose error object was
/// written: the next owner, whose Lambda takes it, skips it wherever it would go now.
#[tokio::test(start_paused = true)]
async fn a_record_in_a_written_error_object_is_skipped_by_the_next_owner() {
    let (store, leases, clock) =
        (Arc::new(MemoryObjectSink::new()), SimLeases::new(), ManualClock::new(Timestamp::from_millis(T0)));
    let shard = ShardId::new("shard-0");
    let lambda = Arc::new(Flaky::default());
    lambda.fail(&["s0-2"]);
    let acks = SimAcks::new(leases.clone(), 1, CrashSwitch::after(Some(1)));
    let mut a = archiver(store.clone(), &clock, Some(lambda.clone()));
    a.on_shard_open(&leases.take(&shard, 1)).await.unwrap();
    a.on_batch(&records(), &acks).await.unwrap();
    let _ = a.on_shard_close(&shard, CloseReason::Shutdown, &acks).await;
    drop(a);
    lambda.fail(&[]);
    let acks = SimAcks::new(leases.clone(), 2, CrashSwitch::after(None));
    let mut b = archiver(store.clone(), &clock, Some(lambda.clone()));
    b.on_shard_open(&leases.take(&shard, 2)).await.unwrap();
    b.on_batch(&records(), &acks).await.unwrap();
    b.on_shard_close(&shard, CloseReason::Shutdown, &acks).await.unwrap();
    let places = places(&store);
    assert_eq!(places.get("s0-2"), Some(&(0, 1)), "{places:?}");
    for n in [1, 3, 4] {
        assert_eq!(places.get(&format!("s0-{n}")), Some(&(1, 0)), "s0-{n}: {places:?}");
    }
}

/// A line that does not fit the Parquet table goes to the error output for every owner.
/// The first owner's error object was never written, its data object of the same
/// partition was: the next owner archives the misfit again (to the error output), not
/// skipped because that data object's range holds its position (found by weir-sim,
/// seed 161).
#[tokio::test(start_paused = true)]
async fn a_misfit_is_archived_again_when_only_its_partitions_data_was_written() {
    let (store, leases, clock) =
        (Arc::new(MemoryObjectSink::new()), SimLeases::new(), ManualClock::new(Timestamp::from_millis(T0)));
    let shard = ShardId::new("shard-0");
    let mut batch = records();
    // durationMs as text: mcp-normalize keeps it, the table's bigint refuses it.
    let misfit =
        String::from_utf8(batch.records[1].data.to_vec()).unwrap().replace("\"durationMs\":3", "\"durationMs\":\"x\"");
    batch.records[1].data = Bytes::from(misfit);
    let acks = SimAcks::new(leases.clone(), 1, CrashSwitch::after(None));
    let mut a = archiver(Arc::new(Refusing(store.clone(), "tool-events-errors/")), &clock, None);
    a.on_shard_open(&leases.take(&shard, 1)).await.unwrap();
    a.on_batch(&batch, &acks).await.unwrap();
    assert!(a.on_shard_close(&shard, CloseReason::Shutdown, &acks).await.is_err(), "the error object waits");
    drop(a);
    let acks = SimAcks::new(leases.clone(), 2, CrashSwitch::after(None));
    let mut b = archiver(store.clone(), &clock, None);
    b.on_shard_open(&leases.take(&shard, 2)).await.unwrap();
    b.on_batch(&batch, &acks).await.unwrap();
    b.on_shard_close(&shard, CloseReason::Shutdown, &acks).await.unwrap();
    let places = places(&store);
    assert_eq!(places.get("s0-2"), Some(&(0, 1)), "{places:?}");
    for n in [1, 3, 4] {
        assert_eq!(places.get(&format!("s0-{n}")), Some(&(1, 0)), "s0-{n}: {places:?}");
    }
}

/// The first owner's Lambda failed a record; before its error object was even sealed,
/// a data object of the same partition whose range holds the record was written, and
/// the owner died. The next owner's Lambda takes the record: it must be archived, not
/// skipped because the data object's range holds its position (the data object names
/// it as an exception: weir-sim seed 142 lost it).
#[tokio::test(start_paused = true)]
async fn a_record_sent_elsewhere_is_an_exception_of_the_data_object_around_it() {
    let (store, leases, clock) =
        (Arc::new(MemoryObjectSink::new()), SimLeases::new(), ManualClock::new(Timestamp::from_millis(T0)));
    let shard = ShardId::new("shard-0");
    let lambda = Arc::new(Flaky::default());
    lambda.fail(&["s0-2"]);
    // The data partition's buffer opens a minute before the error output's: its
    // interval runs out first, and the owner dies before the error output's does.
    let acks = SimAcks::new(leases.clone(), 1, CrashSwitch::after(Some(1)));
    let mut a = archiver_sized(store.clone(), &clock, lambda.clone(), 64 << 20);
    a.on_shard_open(&leases.take(&shard, 1)).await.unwrap();
    let all = records();
    let first = weir_core::RecordBatch { records: all.records[..1].to_vec(), ..all.clone() };
    let rest = weir_core::RecordBatch { records: all.records[1..].to_vec(), ..all };
    a.on_batch(&first, &acks).await.unwrap();
    clock.advance(Duration::from_secs(200));
    a.on_batch(&rest, &acks).await.unwrap();
    clock.advance(Duration::from_secs(150));
    a.on_tick(clock.now(), &acks).await.unwrap();
    drop(a);
    let written = places(&store);
    assert_eq!(written.get("s0-4"), Some(&(1, 0)), "the data object was written: {written:?}");
    assert_eq!(written.get("s0-2"), None, "the error object was not");
    lambda.fail(&[]);
    let acks = SimAcks::new(leases.clone(), 2, CrashSwitch::after(None));
    let mut b = archiver(store.clone(), &clock, Some(lambda.clone()));
    b.on_shard_open(&leases.take(&shard, 2)).await.unwrap();
    b.on_batch(&records(), &acks).await.unwrap();
    b.on_shard_close(&shard, CloseReason::Shutdown, &acks).await.unwrap();
    let places = places(&store);
    for n in 1..=4 {
        assert_eq!(places.get(&format!("s0-{n}")), Some(&(1, 0)), "s0-{n}: {places:?}");
    }
}

/// Intents of several owners stay open until a checkpoint passes them. The first
/// owner's Lambda failed a record and its error object was never written; the second
/// owner's Lambda took it, archived it as data and died before its checkpoint. The
/// third owner must skip it: the first owner's unwritten error object says where the
/// record is not, not that no one archived it (weir-sim seed 257 duplicated it).
#[tokio::test(start_paused = true)]
async fn a_record_an_earlier_owner_failed_and_a_later_one_archived_is_skipped() {
    let (store, leases, clock) =
        (Arc::new(MemoryObjectSink::new()), SimLeases::new(), ManualClock::new(Timestamp::from_millis(T0)));
    let shard = ShardId::new("shard-0");
    let lambda = Arc::new(Flaky::default());
    lambda.fail(&["s0-2"]);
    let acks = SimAcks::new(leases.clone(), 1, CrashSwitch::after(None));
    let mut a = archiver(Arc::new(Refusing(store.clone(), "tool-events-errors/")), &clock, Some(lambda.clone()));
    a.on_shard_open(&leases.take(&shard, 1)).await.unwrap();
    a.on_batch(&records(), &acks).await.unwrap();
    assert!(a.on_shard_close(&shard, CloseReason::Shutdown, &acks).await.is_err(), "the error object waits");
    drop(a);
    lambda.fail(&[]);
    // Intents stored, objects put, acknowledgements after the first lost with the
    // process.
    let acks = SimAcks::new(leases.clone(), 2, CrashSwitch::after(Some(2)));
    let mut b = archiver(store.clone(), &clock, Some(lambda.clone()));
    b.on_shard_open(&leases.take(&shard, 2)).await.unwrap();
    b.on_batch(&records(), &acks).await.unwrap();
    let _ = b.on_shard_close(&shard, CloseReason::Shutdown, &acks).await;
    drop(b);
    assert_eq!(
        leases.checkpoint(&shard),
        Some(pos(1)),
        "the first owner's checkpoint: s0-2 waited for its error object"
    );
    assert_eq!(places(&store).get("s0-2"), Some(&(1, 0)), "the second owner archived it");
    let acks = SimAcks::new(leases.clone(), 3, CrashSwitch::after(None));
    let mut c = archiver(store.clone(), &clock, Some(lambda.clone()));
    c.on_shard_open(&leases.take(&shard, 3)).await.unwrap();
    c.on_batch(&records(), &acks).await.unwrap();
    c.on_shard_close(&shard, CloseReason::Shutdown, &acks).await.unwrap();
    let places = places(&store);
    for n in 1..=4 {
        assert_eq!(places.get(&format!("s0-{n}")), Some(&(1, 0)), "s0-{n}: {places:?}");
    }
    assert_eq!(leases.checkpoint(&shard), Some(pos(4)));
}

/// [`archiver`] with a Lambda and a buffer size.
fn archiver_sized(sink: Arc<dyn ObjectSink>, clock: &ManualClock, lambda: Arc<Flaky>, size: u64) -> Archiver {
    let a = archiver(sink.clone(), clock, Some(lambda.clone()));
    drop(a);
    let mut s = settings(size);
    s.metadata_query = Some("{tenantId: .tenantId, toolName: .toolName}".into());
    s.append_delimiter = true;
    let settings_lambda = LambdaSettings {
        arn: "arn:aws:lambda:us-east-1:123456789012:function:t".into(),
        retries: 0,
        buffer_bytes: 1 << 20,
        buffer_interval: Duration::from_secs(60),
    };
    s.lambda = Some(settings_lambda.clone());
    let mut o = ArchiverOptions::new("mcp-archive", s);
    o.transformer = Transformer::Lambda(LambdaTransform {
        invoker: lambda,
        settings: settings_lambda,
        delivery_arn: "arn:aws:firehose:us-east-1:123456789012:deliverystream/t".into(),
        source_arn: "arn:aws:kinesis:us-east-1:123456789012:stream/t".into(),
        region: "us-east-1".into(),
    });
    Archiver::new(o, sink, Arc::new(clock.clone())).unwrap()
}
