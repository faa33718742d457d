//! The table writer against iceberg's in-memory catalog over a local warehouse: rows
//! read back by iceberg's own scan, positions, zombies and lost races.
#![allow(clippy::unwrap_used)] // a test: a failed expectation is a failed test

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use futures::TryStreamExt;
use iceberg::io::LocalFsStorageFactory;
use iceberg::memory::{MEMORY_CATALOG_WAREHOUSE, MemoryCatalogBuilder};
use iceberg::spec::{ListType, NestedField, PrimitiveType, Schema, StructType, Transform, Type, UnboundPartitionSpec};
use iceberg::table::Table;
use iceberg::{
    Catalog, CatalogBuilder, Namespace, NamespaceIdent, Result as IceResult, TableCommit, TableCreation, TableIdent,
};
use tokio::sync::Mutex;
use weir_core::{ExtendedSequenceNumber, SequenceNumber, ShardId};
use weir_iceberg::{Delivery, IcebergError, ShardRecords, TableWriter};

fn pos(n: u128) -> ExtendedSequenceNumber {
    ExtendedSequenceNumber::plain(SequenceNumber::from_u128(n))
}

fn schema() -> Schema {
    let arguments = StructType::new(vec![
        NestedField::optional(9, "query", Type::Primitive(PrimitiveType::String)).into(),
        NestedField::optional(10, "limit", Type::Primitive(PrimitiveType::Int)).into(),
    ]);
    Schema::builder()
        .with_fields(vec![
            NestedField::required(1, "tenantId", Type::Primitive(PrimitiveType::String)).into(),
            NestedField::optional(2, "toolName", Type::Primitive(PrimitiveType::String)).into(),
            NestedField::optional(3, "sessionId", Type::Primitive(PrimitiveType::String)).into(),
            NestedField::optional(4, "ts", Type::Primitive(PrimitiveType::Timestamptz)).into(),
            NestedField::optional(5, "durationMs", Type::Primitive(PrimitiveType::Long)).into(),
            NestedField::optional(6, "success", Type::Primitive(PrimitiveType::Boolean)).into(),
            NestedField::optional(7, "errorCode", Type::Primitive(PrimitiveType::String)).into(),
            NestedField::optional(8, "arguments", Type::Struct(arguments)).into(),
            NestedField::optional(11, "cost", Type::Primitive(PrimitiveType::Decimal { precision: 10, scale: 2 }))
                .into(),
            NestedField::optional(
                12,
                "tags",
                Type::List(ListType::new(
                    NestedField::list_element(13, Type::Primitive(PrimitiveType::String), false).into(),
                )),
            )
            .into(),
        ])
        .build()
        .unwrap()
}

async fn catalog(dir: &std::path::Path) -> Arc<dyn Catalog> {
    let catalog = MemoryCatalogBuilder::default()
        .with_storage_factory(Arc::new(LocalFsStorageFactory))
        .load("memory", HashMap::from([(MEMORY_CATALOG_WAREHOUSE.to_string(), format!("file://{}", dir.display()))]))
        .await
        .unwrap();
    Arc::new(catalog)
}

async fn create(catalog: &dyn Catalog) -> TableIdent {
    let ns = NamespaceIdent::new("mcp".into());
    catalog.create_namespace(&ns, HashMap::new()).await.unwrap();
    let spec = UnboundPartitionSpec::builder().add_partition_field(1, "tenant", Transform::Identity).unwrap().build();
    let creation = TableCreation::builder().name("events".into()).schema(schema()).partition_spec(spec).build();
    catalog.create_table(&ns, creation).await.unwrap();
    TableIdent::new(ns, "events".into())
}

fn event(i: u128) -> Bytes {
    Bytes::from(format!(
        r#"{{"tenantId":"t{}","toolName":"search","sessionId":"s{i}","ts":"2026-12-06T00:00:{:02}Z","durationMs":{i},"success":true,"arguments":{{"query":"q{i}","limit":{}}},"cost":"1.{:02}","tags":["a","b{i}"]}}"#,
        i % 3,
        i % 60,
        i % 7,
        i % 100
    ))
}

fn shard(name: &str, range: std::ops::RangeInclusive<u128>) -> ShardRecords {
    ShardRecords {
        shard: ShardId::new(name),
        end: pos(*range.end()),
        records: range.map(|i| (pos(i), event(i))).collect(),
    }
}

/// Every row's `sessionId`, from iceberg's own scan of the table.
async fn sessions(catalog: &dyn Catalog, table: &TableIdent) -> Vec<String> {
    let table = catalog.load_table(table).await.unwrap();
    if table.metadata().current_snapshot().is_none() {
        return Vec::new();
    }
    let batches: Vec<_> =
        table.scan().select_all().build().unwrap().to_arrow().await.unwrap().try_collect().await.unwrap();
    let mut out = Vec::new();
    for b in batches {
        let column = b.column_by_name("sessionId").unwrap();
        let strings = arrow_array::cast::AsArray::as_string::<i32>(column);
        out.extend(strings.iter().map(|s| s.unwrap().to_owned()));
    }
    out.sort();
    out
}

fn expected(ranges: &[std::ops::RangeInclusive<u128>]) -> Vec<String> {
    let mut out: Vec<String> = ranges.iter().flat_map(|r| r.clone().map(|i| format!("s{i}"))).collect();
    out.sort();
    out
}

#[tokio::test]
async fn records_land_once_with_each_shards_position() {
    let dir = tempfile::tempdir().unwrap();
    let catalog = catalog(dir.path()).await;
    let table = create(catalog.as_ref()).await;
    let writer = TableWriter::new(catalog.clone(), table.clone(), "archive");
    let report = writer.commit(&[shard("shard-a", 1..=20), shard("shard-b", 101..=110)]).await.unwrap();
    assert_eq!(report.rows, 30);
    assert_eq!(report.data_files, 3, "one file per tenant partition");
    assert!(report.snapshot.is_some());
    assert_eq!(
        report.positions,
        BTreeMap::from([(ShardId::new("shard-a"), pos(20)), (ShardId::new("shard-b"), pos(110))])
    );
    assert_eq!(sessions(catalog.as_ref(), &table).await, expected(&[1..=20, 101..=110]));
    // What the table says, as a new owner would read it.
    let shards = [ShardId::new("shard-a"), ShardId::new("shard-b"), ShardId::new("shard-c")];
    assert_eq!(writer.positions(&shards).await.unwrap(), report.positions);

    // The same records again (a retry after an error, or a new owner from an older
    // checkpoint): nothing appended twice, the rest appended.
    let again = writer.commit(&[shard("shard-a", 11..=30)]).await.unwrap();
    assert_eq!((again.rows, again.already_committed), (10, 10));
    let none = writer.commit(&[shard("shard-a", 1..=30), shard("shard-b", 101..=110)]).await.unwrap();
    assert_eq!((none.rows, none.snapshot, none.already_committed), (0, None, 40));
    assert_eq!(sessions(catalog.as_ref(), &table).await, expected(&[1..=30, 101..=110]));
}

#[tokio::test]
async fn a_zombies_stale_batch_is_dropped_whichever_commits_first() {
    for zombie_first in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let catalog = catalog(dir.path()).await;
        let table = create(catalog.as_ref()).await;
        let owner = TableWriter::new(catalog.clone(), table.clone(), "archive");
        let zombie = TableWriter::new(catalog.clone(), table.clone(), "archive");
        // Both read from the checkpoint at 0; the zombie stopped at 5, the new owner at 10.
        if zombie_first {
            assert_eq!(zombie.commit(&[shard("s", 1..=5)]).await.unwrap().rows, 5);
            let r = owner.commit(&[shard("s", 1..=10)]).await.unwrap();
            assert_eq!((r.rows, r.already_committed), (5, 5));
        } else {
            assert_eq!(owner.commit(&[shard("s", 1..=10)]).await.unwrap().rows, 10);
            let r = zombie.commit(&[shard("s", 1..=5)]).await.unwrap();
            assert_eq!((r.rows, r.already_committed, r.snapshot), (0, 5, None));
            assert_eq!(r.positions[&ShardId::new("s")], pos(10), "the zombie learns where the shard stands");
        }
        assert_eq!(sessions(catalog.as_ref(), &table).await, expected(&[1..=10]), "zombie first: {zombie_first}");
    }
}

#[tokio::test]
async fn at_least_once_keeps_no_positions_and_appends_a_repeat_again() {
    let dir = tempfile::tempdir().unwrap();
    let catalog = catalog(dir.path()).await;
    let table = create(catalog.as_ref()).await;
    let writer = TableWriter::new(catalog.clone(), table.clone(), "archive").with_delivery(Delivery::AtLeastOnce);
    assert_eq!(writer.commit(&[shard("s", 1..=10)]).await.unwrap().rows, 10);
    // A new owner from the checkpoint before that commit: the table cannot tell it.
    let r = writer.commit(&[shard("s", 6..=12)]).await.unwrap();
    assert_eq!((r.rows, r.already_committed), (7, 0));
    assert_eq!(writer.positions(&[ShardId::new("s")]).await.unwrap(), BTreeMap::new());
    let exactly = TableWriter::new(catalog.clone(), table.clone(), "archive");
    assert_eq!(exactly.positions(&[ShardId::new("s")]).await.unwrap(), BTreeMap::new(), "nothing in the summary");
    let mut want = expected(&[1..=12, 6..=10]);
    want.sort();
    assert_eq!(sessions(catalog.as_ref(), &table).await, want);
}

/// A catalog that lets another writer commit at the worst moment: after the writer
/// loaded the table and read its positions, before the writer's commit reaches the
/// catalog (at the writer's second load of the table, or its first commit, whichever
/// comes first).
#[derive(Debug)]
struct Interleave {
    inner: Arc<dyn Catalog>,
    other: Mutex<Option<(TableWriter, Vec<ShardRecords>)>>,
    loads: std::sync::atomic::AtomicUsize,
}

impl Interleave {
    fn new(inner: Arc<dyn Catalog>, other: TableWriter, batches: Vec<ShardRecords>) -> Self {
        Self { inner, other: Mutex::new(Some((other, batches))), loads: Default::default() }
    }

    async fn other_commits(&self) {
        if let Some((writer, batches)) = self.other.lock().await.take() {
            writer.commit(&batches).await.unwrap();
        }
    }
}

#[async_trait]
impl Catalog for Interleave {
    async fn list_namespaces(&self, p: Option<&NamespaceIdent>) -> IceResult<Vec<NamespaceIdent>> {
        self.inner.list_namespaces(p).await
    }
    async fn create_namespace(&self, n: &NamespaceIdent, p: HashMap<String, String>) -> IceResult<Namespace> {
        self.inner.create_namespace(n, p).await
    }
    async fn get_namespace(&self, n: &NamespaceIdent) -> IceResult<Namespace> {
        self.inner.get_namespace(n).await
    }
    async fn namespace_exists(&self, n: &NamespaceIdent) -> IceResult<bool> {
        self.inner.namespace_exists(n).await
    }
    async fn update_namespace(&self, n: &NamespaceIdent, p: HashMap<String, String>) -> IceResult<()> {
        self.inner.update_namespace(n, p).await
    }
    async fn drop_namespace(&self, n: &NamespaceIdent) -> IceResult<()> {
        self.inner.drop_namespace(n).await
    }
    async fn list_tables(&self, n: &NamespaceIdent) -> IceResult<Vec<TableIdent>> {
        self.inner.list_tables(n).await
    }
    async fn create_table(&self, n: &NamespaceIdent, c: TableCreation) -> IceResult<Table> {
        self.inner.create_table(n, c).await
    }
    async fn load_table(&self, t: &TableIdent) -> IceResult<Table> {
        if self.loads.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 1 {
            self.other_commits().await;
        }
        self.inner.load_table(t).await
    }
    async fn drop_table(&self, t: &TableIdent) -> IceResult<()> {
        self.inner.drop_table(t).await
    }
    async fn purge_table(&self, t: &TableIdent) -> IceResult<()> {
        self.inner.purge_table(t).await
    }
    async fn table_exists(&self, t: &TableIdent) -> IceResult<bool> {
        self.inner.table_exists(t).await
    }
    async fn rename_table(&self, s: &TableIdent, d: &TableIdent) -> IceResult<()> {
        self.inner.rename_table(s, d).await
    }
    async fn register_table(&self, t: &TableIdent, m: String) -> IceResult<Table> {
        self.inner.register_table(t, m).await
    }
    async fn update_table(&self, commit: TableCommit) -> IceResult<Table> {
        self.other_commits().await;
        self.inner.update_table(commit).await
    }
}

#[tokio::test(start_paused = true)]
async fn a_commit_that_loses_the_race_reads_the_positions_again() {
    let dir = tempfile::tempdir().unwrap();
    let inner = catalog(dir.path()).await;
    let table = create(inner.as_ref()).await;
    // The zombie checked the positions (none), then the new owner committed 1..=8 of
    // the same shard and 50..=52 of another before the zombie's commit reached the
    // catalog.
    let owner = TableWriter::new(inner.clone(), table.clone(), "archive");
    let interleave = Arc::new(Interleave::new(inner.clone(), owner, vec![shard("s", 1..=8), shard("t", 50..=52)]));
    let zombie = TableWriter::new(interleave, table.clone(), "archive");
    let r = zombie.commit(&[shard("s", 1..=12), shard("u", 70..=71)]).await.unwrap();
    assert_eq!(r.conflicts, 1);
    assert_eq!((r.rows, r.already_committed), (6, 8));
    assert_eq!(sessions(inner.as_ref(), &table).await, expected(&[1..=12, 50..=52, 70..=71]));
}

#[tokio::test(start_paused = true)]
async fn a_writer_gives_up_after_its_attempts_and_appends_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let inner = catalog(dir.path()).await;
    let table = create(inner.as_ref()).await;
    let owner = TableWriter::new(inner.clone(), table.clone(), "other");
    let interleave = Arc::new(Interleave::new(inner.clone(), owner, vec![shard("x", 1..=1)]));
    let writer = TableWriter::new(interleave, table.clone(), "archive").with_attempts(1);
    let e = writer.commit(&[shard("s", 1..=3)]).await.unwrap_err();
    assert!(matches!(e, IcebergError::Conflicts { attempts: 1, .. }), "{e}");
    assert_eq!(sessions(inner.as_ref(), &table).await, expected(&[1..=1]));
}

#[tokio::test]
async fn records_that_do_not_fit_are_returned_with_the_reason_and_not_appended() {
    let dir = tempfile::tempdir().unwrap();
    let catalog = catalog(dir.path()).await;
    let table = create(catalog.as_ref()).await;
    let writer = TableWriter::new(catalog.clone(), table.clone(), "archive");
    let mut batch = shard("s", 1..=4);
    batch.records[1].1 = Bytes::from_static(br#"{"toolName":"no tenant","sessionId":"x"}"#);
    batch.records[2].1 = Bytes::from_static(b"not json");
    let r = writer.commit(&[batch]).await.unwrap();
    assert_eq!(r.rows, 2);
    let reasons: Vec<_> = r.rejected.iter().map(|x| (x.position.clone(), x.reason.clone())).collect();
    assert_eq!(reasons.len(), 2, "{reasons:?}");
    assert_eq!(reasons[0].0, pos(2));
    assert!(reasons[0].1.contains("tenantId"), "{}", reasons[0].1);
    assert_eq!(reasons[1].0, pos(3));
    assert_eq!(r.positions[&ShardId::new("s")], pos(4), "the shard's position passes the rejected records");
    assert_eq!(sessions(catalog.as_ref(), &table).await, expected(&[1..=1, 4..=4]));
}

#[tokio::test]
async fn a_table_with_a_type_weir_does_not_write_is_refused_naming_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let catalog = catalog(dir.path()).await;
    let ns = NamespaceIdent::new("mcp".into());
    catalog.create_namespace(&ns, HashMap::new()).await.unwrap();
    let schema = Schema::builder()
        .with_fields(vec![NestedField::optional(1, "at", Type::Primitive(PrimitiveType::Time)).into()])
        .build()
        .unwrap();
    catalog.create_table(&ns, TableCreation::builder().name("t".into()).schema(schema).build()).await.unwrap();
    let writer = TableWriter::new(catalog.clone(), TableIdent::new(ns, "t".into()), "archive");
    let e = writer.commit(&[shard("s", 1..=1)]).await.unwrap_err();
    assert!(e.to_string().contains("\"at\"") && e.to_string().contains("time"), "{e}");
}
