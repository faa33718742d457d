//! The Iceberg consumer through crashes, a zombie and a handoff, with the lease
//! simulation of weir-testkit: every record in the table once or in the error output
//! once, and checkpoints never past what a stored commit holds.
#![allow(clippy::unwrap_used)] // a test: a failed expectation is a failed test

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use futures::TryStreamExt;
use iceberg::io::LocalFsStorageFactory;
use iceberg::memory::{MEMORY_CATALOG_WAREHOUSE, MemoryCatalogBuilder};
use iceberg::spec::{NestedField, PrimitiveType, Schema, Type};
use iceberg::{Catalog, CatalogBuilder, NamespaceIdent, TableCreation, TableIdent};
use weir_core::ports::ObjectSink;
use weir_core::{
    CloseReason, Consumer, ExtendedSequenceNumber, Record, RecordBatch, SequenceNumber, ShardId, Timestamp,
};
use weir_iceberg::{BufferHints, IcebergConsumer, TableWriter, Tables};
use weir_testkit::{CrashSwitch, MemoryObjectSink, SimAcks, SimLeases};

fn pos(n: u64) -> ExtendedSequenceNumber {
    ExtendedSequenceNumber::plain(SequenceNumber::from_u128(u128::from(n)))
}

async fn table(dir: &std::path::Path) -> (Arc<dyn Catalog>, TableIdent) {
    let catalog: Arc<dyn Catalog> = Arc::new(
        MemoryCatalogBuilder::default()
            .with_storage_factory(Arc::new(LocalFsStorageFactory))
            .load(
                "memory",
                HashMap::from([(MEMORY_CATALOG_WAREHOUSE.to_string(), format!("file://{}", dir.display()))]),
            )
            .await
            .unwrap(),
    );
    let ns = NamespaceIdent::new("mcp".into());
    catalog.create_namespace(&ns, HashMap::new()).await.unwrap();
    (catalog.clone(), create(catalog.as_ref(), "events").await)
}

async fn create(catalog: &dyn Catalog, name: &str) -> TableIdent {
    let ns = NamespaceIdent::new("mcp".into());
    let schema = Schema::builder()
        .with_fields(vec![
            NestedField::required(1, "tenantId", Type::Primitive(PrimitiveType::String)).into(),
            NestedField::required(2, "sessionId", Type::Primitive(PrimitiveType::String)).into(),
        ])
        .build()
        .unwrap();
    catalog.create_table(&ns, TableCreation::builder().name(name.into()).schema(schema).build()).await.unwrap();
    TableIdent::new(ns, name.into())
}

/// Record `i`; every tenth has no tenant and belongs in the error output.
fn batch(shard: &ShardId, range: std::ops::RangeInclusive<u64>) -> RecordBatch {
    let records = range
        .map(|i| {
            let data = if i % 10 == 0 {
                format!(r#"{{"sessionId":"s{i}"}}"#)
            } else {
                format!(r#"{{"tenantId":"t{}","sessionId":"s{i}"}}"#, i % 3)
            };
            Record {
                partition_key: format!("k{i}"),
                position: pos(i),
                approximate_arrival: Timestamp::from_millis(1_000 * i as i64),
                data: Bytes::from(data),
            }
        })
        .collect();
    RecordBatch { shard_id: shard.clone(), records, millis_behind_latest: None, child_shards: None }
}

fn consumer(catalog: &Arc<dyn Catalog>, t: &TableIdent, errors: &Arc<MemoryObjectSink>) -> IcebergConsumer {
    let writer = TableWriter::new(catalog.clone(), t.clone(), "events");
    let hints = BufferHints { interval_millis: 60_000, size_bytes: 1 << 20 };
    IcebergConsumer::new(
        "events",
        Tables::single(writer),
        errors.clone() as Arc<dyn ObjectSink>,
        "iceberg-failed/",
        hints,
    )
}

async fn sessions(catalog: &dyn Catalog, t: &TableIdent) -> Vec<u64> {
    let table = catalog.load_table(t).await.unwrap();
    let batches: Vec<_> =
        table.scan().select_all().build().unwrap().to_arrow().await.unwrap().try_collect().await.unwrap();
    let mut out: Vec<u64> = batches
        .iter()
        .flat_map(|b| {
            let c = arrow_array::cast::AsArray::as_string::<i32>(b.column_by_name("sessionId").unwrap()).clone();
            c.iter().map(|s| s.unwrap()[1..].parse().unwrap()).collect::<Vec<_>>()
        })
        .collect();
    out.sort();
    out
}

/// Positions of the records in the error output, each object's lines.
fn rejected(errors: &MemoryObjectSink) -> Vec<u64> {
    let mut out: Vec<u64> = errors
        .snapshot()
        .values()
        .flat_map(|body| {
            String::from_utf8(body.to_vec())
                .unwrap()
                .lines()
                .map(|l| {
                    serde_json::from_str::<serde_json::Value>(l).unwrap()["sequenceNumber"]
                        .as_str()
                        .unwrap()
                        .parse()
                        .unwrap()
                })
                .collect::<Vec<u64>>()
        })
        .collect();
    out.sort();
    out
}

#[tokio::test]
async fn a_crash_after_commit_and_a_zombie_leave_each_record_once() {
    let dir = tempfile::tempdir().unwrap();
    let (catalog, t) = table(dir.path()).await;
    let errors = Arc::new(MemoryObjectSink::new());
    let leases = SimLeases::new();
    let shard = ShardId::new("shardId-000000000000");

    // Owner 1 commits 1..=12 on the interval; its checkpoint follows.
    let mut a = consumer(&catalog, &t, &errors);
    let acks_a = SimAcks::new(leases.clone(), 1, CrashSwitch::after(None));
    a.on_shard_open(&leases.take(&shard, 1)).await.unwrap();
    a.on_batch(&batch(&shard, 1..=12), &acks_a).await.unwrap();
    a.on_tick(Timestamp::from_millis(30_000), &acks_a).await.unwrap();
    assert_eq!(leases.checkpoint(&shard), None, "nothing committed before the interval");
    a.on_tick(Timestamp::from_millis(61_000), &acks_a).await.unwrap();
    assert_eq!(leases.checkpoint(&shard), Some(pos(12)));

    // Its next commit (13..=24) is stored, but the process dies before the checkpoint.
    let dying = SimAcks::new(leases.clone(), 1, CrashSwitch::after(Some(0)));
    a.on_batch(&batch(&shard, 13..=24), &dying).await.unwrap();
    a.on_tick(Timestamp::from_millis(200_000), &dying).await.unwrap();
    assert_eq!(leases.checkpoint(&shard), Some(pos(12)), "the checkpoint write died");

    // Owner 2 takes the shard at checkpoint 12; the table says 24: it skips 13..=24.
    let mut b = consumer(&catalog, &t, &errors);
    let acks_b = SimAcks::new(leases.clone(), 2, CrashSwitch::after(None));
    b.on_shard_open(&leases.take(&shard, 2)).await.unwrap();
    b.on_batch(&batch(&shard, 13..=30), &acks_b).await.unwrap();

    // Meanwhile a zombie (owner 1 in another process that missed the handoff) still
    // holds 25..=27 and commits first.
    let mut zombie = consumer(&catalog, &t, &errors);
    zombie.on_shard_open(&leases.take(&shard, 1)).await.unwrap();
    leases.take(&shard, 2);
    zombie.on_batch(&batch(&shard, 25..=27), &acks_a).await.unwrap();
    zombie.on_shard_close(&shard, CloseReason::Shutdown, &acks_a).await.unwrap();
    assert_eq!(leases.checkpoint(&shard), Some(pos(12)), "a zombie's acknowledgement is refused");

    b.on_shard_close(&shard, CloseReason::Handoff, &acks_b).await.unwrap();
    assert_eq!(leases.checkpoint(&shard), Some(pos(30)));

    let fits: Vec<u64> = (1..=30).filter(|i| i % 10 != 0).collect();
    assert_eq!(sessions(catalog.as_ref(), &t).await, fits, "each record that fits once");
    // 20 was rejected by owner 1's stored commit and again by owner 2, which cannot
    // tell whether owner 1 lived to write it: in the error output at least once.
    let mut once = rejected(&errors);
    once.dedup();
    assert_eq!(once, vec![10, 20, 30], "each record that does not fit in the error output");
    assert_eq!(rejected(&errors).len(), 4, "only the crashed commit's rejection twice");
}

/// The worker whose commit was stored dies before it writes the records that did not
/// fit: the next owner's commit finds them in its stale records and writes them.
#[tokio::test]
async fn rejections_a_crash_did_not_write_are_written_by_the_next_owner() {
    let dir = tempfile::tempdir().unwrap();
    let (catalog, t) = table(dir.path()).await;
    let store = Arc::new(MemoryObjectSink::new());
    let leases = SimLeases::new();
    let shard = ShardId::new("s");
    let dying = Arc::new(weir_testkit::CrashingSink::new(store.clone(), CrashSwitch::after(Some(0)), false));
    let writer = TableWriter::new(catalog.clone(), t.clone(), "events");
    let hints = BufferHints { interval_millis: 60_000, size_bytes: 1 << 20 };
    let mut a = IcebergConsumer::new("events", Tables::single(writer), dying, "iceberg-failed/", hints);
    let acks = SimAcks::new(leases.clone(), 1, CrashSwitch::after(None));
    a.on_shard_open(&leases.take(&shard, 1)).await.unwrap();
    a.on_batch(&batch(&shard, 1..=12), &acks).await.unwrap();
    assert!(a.on_tick(Timestamp::from_millis(100_000), &acks).await.is_err(), "the error output write died");
    assert_eq!(leases.checkpoint(&shard), None);
    assert_eq!(sessions(catalog.as_ref(), &t).await.len(), 11, "the commit was stored");
    assert_eq!(rejected(&store), Vec::<u64>::new());

    let mut b = consumer(&catalog, &t, &store);
    let acks = SimAcks::new(leases.clone(), 2, CrashSwitch::after(None));
    b.on_shard_open(&leases.take(&shard, 2)).await.unwrap();
    b.on_batch(&batch(&shard, 1..=12), &acks).await.unwrap();
    b.on_tick(Timestamp::from_millis(100_000), &acks).await.unwrap();
    assert_eq!(leases.checkpoint(&shard), Some(pos(12)));
    assert_eq!(sessions(catalog.as_ref(), &t).await, (1..=12).filter(|i| i % 10 != 0).collect::<Vec<_>>());
    assert_eq!(rejected(&store), vec![10], "not lost");
}

#[tokio::test]
async fn a_lost_lease_drops_the_buffer_and_checkpoints_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (catalog, t) = table(dir.path()).await;
    let errors = Arc::new(MemoryObjectSink::new());
    let leases = SimLeases::new();
    let shard = ShardId::new("s");
    let mut a = consumer(&catalog, &t, &errors);
    let acks = SimAcks::new(leases.clone(), 1, CrashSwitch::after(None));
    a.on_shard_open(&leases.take(&shard, 1)).await.unwrap();
    a.on_batch(&batch(&shard, 1..=5), &acks).await.unwrap();
    a.on_shard_close(&shard, CloseReason::LeaseLost, &acks).await.unwrap();
    a.on_tick(Timestamp::from_millis(1_000_000), &acks).await.unwrap();
    assert_eq!(leases.checkpoint(&shard), None);
    assert!(catalog.load_table(&t).await.unwrap().metadata().current_snapshot().is_none());
}

/// Commits, rows, files, rejected records and freshness, per consumer and table.
#[test]
fn commits_rows_files_rejections_and_freshness_are_measured() {
    use metrics_util::debugging::{DebugValue, DebuggingRecorder};
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let dir = tempfile::tempdir().unwrap();
    metrics::with_local_recorder(&recorder, || {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let (catalog, t) = table(dir.path()).await;
            let errors = Arc::new(MemoryObjectSink::new());
            let leases = SimLeases::new();
            let shard = ShardId::new("s");
            let mut a = consumer(&catalog, &t, &errors);
            let acks = SimAcks::new(leases.clone(), 1, CrashSwitch::after(None));
            a.on_shard_open(&leases.take(&shard, 1)).await.unwrap();
            a.on_batch(&batch(&shard, 1..=20), &acks).await.unwrap();
            // 20 s after the first record arrived (at 1 s): not due yet.
            a.on_tick(Timestamp::from_millis(21_000), &acks).await.unwrap();
        });
    });
    let values: HashMap<String, (Vec<(String, String)>, DebugValue)> = snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .map(|(k, .., v)| {
            let labels = k.key().labels().map(|l| (l.key().to_owned(), l.value().to_owned())).collect();
            (k.key().name().to_owned(), (labels, v))
        })
        .collect();
    let labels = vec![("consumer".to_owned(), "events".to_owned()), ("table".to_owned(), "mcp.events".to_owned())];
    let gauge = |name: &str| match &values[name] {
        (l, DebugValue::Gauge(g)) if *l == labels => g.into_inner(),
        other => panic!("{name}: {other:?}"),
    };
    assert_eq!(gauge("weir_iceberg_data_freshness_seconds"), 20.0);
    assert!(gauge("weir_iceberg_buffered_bytes") > 0.0);
    assert!(!values.contains_key("weir_iceberg_commits_total"), "nothing committed before the interval");

    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    metrics::with_local_recorder(&recorder, || {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let dir = tempfile::tempdir().unwrap();
            let (catalog, t) = table(dir.path()).await;
            let errors = Arc::new(MemoryObjectSink::new());
            let leases = SimLeases::new();
            let shard = ShardId::new("s");
            let mut a = consumer(&catalog, &t, &errors);
            let acks = SimAcks::new(leases.clone(), 1, CrashSwitch::after(None));
            a.on_shard_open(&leases.take(&shard, 1)).await.unwrap();
            a.on_batch(&batch(&shard, 1..=20), &acks).await.unwrap();
            a.on_tick(Timestamp::from_millis(70_000), &acks).await.unwrap();
            a.on_tick(Timestamp::from_millis(71_000), &acks).await.unwrap();
        });
    });
    let values: HashMap<String, DebugValue> =
        snapshotter.snapshot().into_vec().into_iter().map(|(k, .., v)| (k.key().name().to_owned(), v)).collect();
    assert_eq!(values["weir_iceberg_commits_total"], DebugValue::Counter(1));
    assert_eq!(values["weir_iceberg_rows_total"], DebugValue::Counter(18));
    assert_eq!(values["weir_iceberg_rejected_records_total"], DebugValue::Counter(2));
    assert_eq!(values["weir_iceberg_commit_conflicts_total"], DebugValue::Counter(0));
    assert!(matches!(values["weir_iceberg_data_files_total"], DebugValue::Counter(n) if n >= 1));
    assert_eq!(values["weir_iceberg_data_freshness_seconds"], DebugValue::Gauge(0.0.into()), "nothing buffered");
}

/// Records routed by a jq query to two tables, a missing one and an operation weir
/// cannot do; one table's commit fails after the other's was stored, and the retry
/// appends nothing twice.
#[tokio::test]
async fn routed_records_land_once_in_their_tables_and_the_rest_in_the_error_output() {
    let dir = tempfile::tempdir().unwrap();
    let (catalog, _) = table(dir.path()).await;
    let search = create(catalog.as_ref(), "search").await;
    let fetch = create(catalog.as_ref(), "fetch").await;
    let errors = Arc::new(MemoryObjectSink::new());
    let leases = SimLeases::new();
    let shard = ShardId::new("s");
    // i % 3: fetch, nosuch, search (by the tool's name); every tenth has no tenant,
    // every seventh asks for an update.
    let record = |i: u64| {
        let tool = ["search", "fetch", "nosuch"][(i % 3) as usize];
        let op = if i.is_multiple_of(7) { r#","op":"update""# } else { "" };
        let tenant = if i.is_multiple_of(10) { String::new() } else { format!(r#""tenantId":"t{}","#, i % 3) };
        Record {
            partition_key: format!("k{i}"),
            position: pos(i),
            approximate_arrival: Timestamp::from_millis(1_000 * i as i64),
            data: Bytes::from(format!(r#"{{{tenant}"sessionId":"s{i}","tool":"{tool}"{op}}}"#)),
        }
    };
    let batch = |range: std::ops::RangeInclusive<u64>| RecordBatch {
        shard_id: shard.clone(),
        records: range.map(record).collect(),
        millis_behind_latest: None,
        child_shards: None,
    };
    let routed = || {
        let query = weir_iceberg::RouteQuery::compile(
            r#"{destinationDatabaseName: "mcp", destinationTableName: .tool, operation: .op}"#,
        )
        .unwrap();
        let template = TableWriter::new(catalog.clone(), search.clone(), "events");
        let hints = BufferHints { interval_millis: 60_000, size_bytes: 1 << 20 };
        let tables = Tables::routed(template, Some(query), None);
        IcebergConsumer::new("events", tables, errors.clone() as Arc<dyn ObjectSink>, "iceberg-failed/", hints)
    };
    let mut a = routed();
    let acks = SimAcks::new(leases.clone(), 1, CrashSwitch::after(None));
    a.on_shard_open(&leases.take(&shard, 1)).await.unwrap();
    a.on_batch(&batch(1..=30), &acks).await.unwrap();
    // `search`'s data directory cannot be made (a file is in its place): `fetch`'s
    // commit (first routed) is stored, `search`'s fails, nothing is checkpointed.
    let location = catalog.load_table(&search).await.unwrap().metadata().location().to_owned();
    let data_dir = std::path::PathBuf::from(location.trim_start_matches("file://")).join("data");
    std::fs::create_dir_all(data_dir.parent().unwrap()).unwrap();
    std::fs::write(&data_dir, b"in the way").unwrap();
    assert!(a.on_tick(Timestamp::from_millis(200_000), &acks).await.is_err());
    assert_eq!(leases.checkpoint(&shard), None);
    std::fs::remove_file(&data_dir).unwrap();
    a.on_tick(Timestamp::from_millis(201_000), &acks).await.unwrap();
    assert_eq!(leases.checkpoint(&shard), Some(pos(30)));

    let fits = |table: u64| (1..=30).filter(move |i| i % 3 == table && i % 10 != 0 && i % 7 != 0).collect::<Vec<_>>();
    assert_eq!(sessions(catalog.as_ref(), &fetch).await, fits(1), "fetch: each once, though committed twice");
    assert_eq!(sessions(catalog.as_ref(), &search).await, fits(0));
    let mut bad: Vec<u64> = (1..=30).filter(|i| i % 3 == 2 || i % 10 == 0 || i % 7 == 0).collect();
    bad.sort();
    let mut got = rejected(&errors);
    got.dedup();
    assert_eq!(got, bad, "every record that fits no table, or not its table, in the error output");
    let codes: std::collections::BTreeSet<String> = errors
        .snapshot()
        .values()
        .flat_map(|b| {
            String::from_utf8(b.to_vec())
                .unwrap()
                .lines()
                .map(|l| {
                    serde_json::from_str::<serde_json::Value>(l).unwrap()["errorCode"].as_str().unwrap().to_owned()
                })
                .collect::<Vec<_>>()
        })
        .collect();
    let want = ["Iceberg.NoSuchTable", "Iceberg.SchemaMismatch", "Iceberg.UnsupportedOperation"];
    assert_eq!(codes, want.iter().map(|s| s.to_string()).collect());

    // `fetch` is dropped after records were routed to it: they go to the error output
    // (the worker is not wedged on a table that is gone).
    a.on_batch(&batch(31..=40), &acks).await.unwrap();
    catalog.drop_table(&fetch).await.unwrap();
    a.on_tick(Timestamp::from_millis(400_000), &acks).await.unwrap();
    assert_eq!(leases.checkpoint(&shard), Some(pos(40)));
    let mut got = rejected(&errors);
    got.dedup();
    assert!([31, 34, 37, 40].iter().all(|i| got.contains(i)), "{got:?}");
    let dropped =
        errors.snapshot().values().any(|b| String::from_utf8_lossy(b).contains("was dropped from the catalog"));
    assert!(dropped, "the reason names the dropped table");
}

/// A transform stamping each record's tenant with its version; it drops every fifth
/// record, fails every seventh, and sends every fourth to `other` by its route.
#[derive(Debug)]
struct Stamp(&'static str);

#[async_trait::async_trait]
impl weir_iceberg::RecordTransform for Stamp {
    async fn transform(&self, _: &ShardId, records: &[Record]) -> Vec<weir_iceberg::Transformed> {
        use weir_iceberg::Transformed;
        records
            .iter()
            .map(|r| {
                let i: u64 = r.position.sequence.to_string().parse().unwrap();
                if i.is_multiple_of(5) {
                    return Transformed::Dropped;
                }
                if i.is_multiple_of(7) {
                    return Transformed::Failed { code: "Lambda.ProcessingFailedStatus", reason: "no".into() };
                }
                let data = Bytes::from(format!(r#"{{"tenantId":"{}","sessionId":"s{i}"}}"#, self.0));
                let route = i
                    .is_multiple_of(4)
                    .then(|| weir_iceberg::Route { table: Some("other".into()), ..weir_iceberg::Route::default() });
                Transformed::Ok { data, route }
            })
            .collect()
    }
}

/// (session, tenant) of every row of `t`, sorted.
async fn rows(catalog: &dyn Catalog, t: &TableIdent) -> Vec<(u64, String)> {
    let table = catalog.load_table(t).await.unwrap();
    let batches: Vec<_> =
        table.scan().select_all().build().unwrap().to_arrow().await.unwrap().try_collect().await.unwrap();
    let mut out = Vec::new();
    for b in &batches {
        let s = arrow_array::cast::AsArray::as_string::<i32>(b.column_by_name("sessionId").unwrap()).clone();
        let t = arrow_array::cast::AsArray::as_string::<i32>(b.column_by_name("tenantId").unwrap()).clone();
        for (s, t) in s.iter().zip(t.iter()) {
            out.push((s.unwrap()[1..].parse().unwrap(), t.unwrap().to_owned()));
        }
    }
    out.sort();
    out
}

/// The transform answers differently the second time it sees a record (a Lambda
/// whose output is not deterministic) but routes it the same way: after a crash
/// between the commits and the checkpoint, each table keeps the first answer's rows,
/// once; dropped records are nowhere, failed ones in the error output as they were
/// read.
#[tokio::test]
async fn a_transform_read_again_after_a_crash_leaves_each_record_once() {
    let dir = tempfile::tempdir().unwrap();
    let (catalog, events) = table(dir.path()).await;
    let other = create(catalog.as_ref(), "other").await;
    let errors = Arc::new(MemoryObjectSink::new());
    let leases = SimLeases::new();
    let shard = ShardId::new("shardId-000000000000");
    let with = |version: &'static str| {
        let template = TableWriter::new(catalog.clone(), events.clone(), "events");
        let hints = BufferHints { interval_millis: 60_000, size_bytes: 1 << 20 };
        let tables = Tables::routed(template, None, Some(events.clone()));
        IcebergConsumer::new("events", tables, errors.clone() as Arc<dyn ObjectSink>, "iceberg-failed/", hints)
            .with_transform(Arc::new(Stamp(version)))
    };
    let mut a = with("v1");
    let dying = SimAcks::new(leases.clone(), 1, CrashSwitch::after(Some(0)));
    a.on_shard_open(&leases.take(&shard, 1)).await.unwrap();
    a.on_batch(&batch(&shard, 1..=12), &dying).await.unwrap();
    a.on_tick(Timestamp::from_millis(100_000), &dying).await.unwrap();
    assert_eq!(leases.checkpoint(&shard), None, "the checkpoint write died");

    let mut b = with("v2");
    let acks = SimAcks::new(leases.clone(), 2, CrashSwitch::after(None));
    b.on_shard_open(&leases.take(&shard, 2)).await.unwrap();
    b.on_batch(&batch(&shard, 1..=24), &acks).await.unwrap();
    b.on_shard_close(&shard, CloseReason::Handoff, &acks).await.unwrap();
    assert_eq!(leases.checkpoint(&shard), Some(pos(24)));

    let kept = |i: &u64| !i.is_multiple_of(5) && !i.is_multiple_of(7);
    let version = |i: u64| if i <= 12 { "v1" } else { "v2" }.to_owned();
    let want = |to_other: bool| -> Vec<(u64, String)> {
        (1..=24).filter(|i| kept(i) && i.is_multiple_of(4) == to_other).map(|i| (i, version(i))).collect()
    };
    assert_eq!(rows(catalog.as_ref(), &events).await, want(false), "events: the first answer's rows, once");
    assert_eq!(rows(catalog.as_ref(), &other).await, want(true), "other: the first answer's rows, once");
    let mut failed = rejected(&errors);
    failed.dedup();
    assert_eq!(failed, vec![7, 14, 21], "failed records in the error output");
    let originals: Vec<String> = errors
        .snapshot()
        .values()
        .flat_map(|b| String::from_utf8(b.to_vec()).unwrap().lines().map(str::to_owned).collect::<Vec<_>>())
        .map(|l| serde_json::from_str::<serde_json::Value>(&l).unwrap()["rawData"].as_str().unwrap().to_owned())
        .collect();
    use base64::Engine;
    let raw = base64::engine::general_purpose::STANDARD.decode(&originals[0]).unwrap();
    assert!(!String::from_utf8(raw).unwrap().contains("v1"), "the error output has the record as it was read");
}

/// Each table commits on its own buffer: a busy table fills `buffer_size_mib` and
/// commits while a quiet one keeps its few records until the interval. The shard's
/// checkpoint stops before the quiet table's first record; the next owner reads from
/// there, the busy table skips what it has, and each record is in its table once.
#[tokio::test]
async fn a_busy_table_commits_alone_and_the_checkpoint_waits_for_the_quiet_one() {
    let dir = tempfile::tempdir().unwrap();
    let (catalog, _) = table(dir.path()).await;
    let busy = create(catalog.as_ref(), "busy").await;
    let quiet = create(catalog.as_ref(), "quiet").await;
    let errors = Arc::new(MemoryObjectSink::new());
    let leases = SimLeases::new();
    let shard = ShardId::new("s");
    let batch = |range: std::ops::RangeInclusive<u64>| RecordBatch {
        shard_id: shard.clone(),
        records: range
            .map(|i| Record {
                partition_key: format!("k{i}"),
                position: pos(i),
                approximate_arrival: Timestamp::from_millis(1_000 * i as i64),
                data: Bytes::from(format!(
                    r#"{{"tenantId":"t","sessionId":"s{i}","to":"{}"}}"#,
                    if i % 10 == 0 { "quiet" } else { "busy" }
                )),
            })
            .collect(),
        millis_behind_latest: None,
        child_shards: None,
    };
    let consumer = || {
        let query = weir_iceberg::RouteQuery::compile(r#"{destinationDatabaseName: "mcp", destinationTableName: .to}"#)
            .unwrap();
        let template = TableWriter::new(catalog.clone(), busy.clone(), "events");
        // About 1 KB per table: the busy table's 36 records of 50 bytes fill it.
        let hints = BufferHints { interval_millis: 600_000, size_bytes: 1_000 };
        IcebergConsumer::new(
            "events",
            Tables::routed(template, Some(query), None),
            errors.clone() as Arc<dyn ObjectSink>,
            "iceberg-failed/",
            hints,
        )
    };
    let snapshots = |t: &TableIdent| {
        let (catalog, t) = (catalog.clone(), t.clone());
        async move { catalog.load_table(&t).await.unwrap().metadata().snapshots().count() }
    };
    let mut a = consumer();
    let acks = SimAcks::new(leases.clone(), 1, CrashSwitch::after(None));
    a.on_shard_open(&leases.take(&shard, 1)).await.unwrap();
    a.on_batch(&batch(1..=40), &acks).await.unwrap();
    a.on_tick(Timestamp::from_millis(100_000), &acks).await.unwrap();
    assert_eq!(snapshots(&busy).await, 1, "the busy table committed on its own size");
    assert_eq!(snapshots(&quiet).await, 0, "the quiet table waits for its interval");
    assert_eq!(leases.checkpoint(&shard), Some(pos(9)), "the checkpoint stops before the quiet table's first record");

    // The worker dies; the next owner reads from 9 and commits at the interval.
    drop(a);
    let mut b = consumer();
    let acks = SimAcks::new(leases.clone(), 2, CrashSwitch::after(None));
    b.on_shard_open(&leases.take(&shard, 2)).await.unwrap();
    b.on_batch(&batch(10..=44), &acks).await.unwrap();
    b.on_tick(Timestamp::from_millis(700_000), &acks).await.unwrap();
    assert_eq!(leases.checkpoint(&shard), Some(pos(44)));
    let want = |quiet: bool| (1..=44).filter(|i| (i % 10 == 0) == quiet).collect::<Vec<u64>>();
    assert_eq!(sessions(catalog.as_ref(), &busy).await, want(false), "busy: each once");
    assert_eq!(sessions(catalog.as_ref(), &quiet).await, want(true), "quiet: each once");
    assert_eq!(snapshots(&quiet).await, 1, "the quiet table: one commit for its four records");
    assert!(rejected(&errors).is_empty());
}
