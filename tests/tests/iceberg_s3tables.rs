//! weir's Iceberg writer on Amazon S3 Tables, served by moto: a table bucket, a
//! namespace and a table made with the S3 Tables API (boto3), its first metadata file
//! written by pyiceberg; weir's writers append through `GetTableMetadataLocation` and
//! `UpdateTableMetadataLocation` (conditional on the version token: moto checks it);
//! pyiceberg reads the table back from the metadata file S3 Tables names.
#![allow(clippy::unwrap_used)] // a test: a failed expectation is a failed test

use std::sync::Arc;

use bytes::Bytes;
use iceberg::{NamespaceIdent, TableIdent};
use weir_aws::iceberg_catalog::S3FileSettings;
use weir_aws::iceberg_s3tables::S3TablesCatalog;
use weir_core::{ExtendedSequenceNumber, SequenceNumber, ShardId};
use weir_iceberg::{ShardRecords, TableWriter};
use weir_testkit::Emulator;

/// `create` makes table bucket `lake`, namespace `mcp` and table `events` (its first
/// metadata file by pyiceberg) and prints the bucket's ARN; `read ARN` prints the
/// table's session ids, sorted.
const PY: &str = r#"
import json, sys, boto3
endpoint, action = sys.argv[1], sys.argv[2]
s3tables = boto3.client("s3tables", endpoint_url=endpoint, region_name="us-east-1",
                        aws_access_key_id="test", aws_secret_access_key="test")
props = {"s3.endpoint": endpoint, "s3.access-key-id": "test", "s3.secret-access-key": "test",
         "s3.region": "us-east-1", "s3.force-virtual-addressing": "false"}
if action == "create":
    from pyiceberg.schema import Schema
    from pyiceberg.types import NestedField, StringType, LongType, TimestamptzType
    arn = s3tables.create_table_bucket(name="lake")["arn"]
    s3tables.create_namespace(tableBucketARN=arn, namespace=["mcp"])
    s3tables.create_table(tableBucketARN=arn, namespace="mcp", name="events", format="ICEBERG")
    where = s3tables.get_table_metadata_location(tableBucketARN=arn, namespace="mcp", name="events")
    schema = Schema(
        NestedField(1, "tenantId", StringType(), required=True),
        NestedField(2, "sessionId", StringType(), required=True),
        NestedField(3, "ts", TimestamptzType(), required=False),
        NestedField(4, "durationMs", LongType(), required=False),
    )
    # Table buckets refuse listings (pyarrow's existence check lists): the first
    # metadata file is made by pyiceberg and put with boto3.
    import uuid
    from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC
    from pyiceberg.table.metadata import new_table_metadata
    from pyiceberg.table.sorting import UNSORTED_SORT_ORDER
    warehouse = where["warehouseLocation"]
    metadata = new_table_metadata(schema, UNPARTITIONED_PARTITION_SPEC, UNSORTED_SORT_ORDER, warehouse, {})
    bucket = warehouse.removeprefix("s3://").split("/")[0]
    key = f"metadata/00000-{uuid.uuid4()}.metadata.json"
    s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                      aws_access_key_id="test", aws_secret_access_key="test")
    s3.put_object(Bucket=bucket, Key=key, Body=metadata.model_dump_json().encode())
    s3tables.update_table_metadata_location(tableBucketARN=arn, namespace="mcp", name="events",
                                            versionToken=where["versionToken"],
                                            metadataLocation=f"s3://{bucket}/{key}")
    print(json.dumps(arn))
else:
    from pyiceberg.table import StaticTable
    where = s3tables.get_table_metadata_location(tableBucketARN=sys.argv[3], namespace="mcp", name="events")
    table = StaticTable.from_metadata(where["metadataLocation"], properties=props)
    print(json.dumps(sorted(r["sessionId"] for r in table.scan().to_arrow().to_pylist())))
"#;

fn pos(n: u64) -> ExtendedSequenceNumber {
    ExtendedSequenceNumber::plain(SequenceNumber::from_u128(u128::from(n) * 1000 + 3))
}

fn event(i: u64) -> Bytes {
    Bytes::from(format!(
        r#"{{"tenantId":"t{}","sessionId":"s-{i:04}","ts":{},"durationMs":{i}}}"#,
        i % 3,
        1_780_000_000_000u64 + i
    ))
}

async fn writer(endpoint: &str, arn: &str) -> TableWriter {
    let sdk = weir_aws::load_sdk_config(&weir_aws::AwsSettings::emulator(endpoint)).await;
    let files = S3FileSettings {
        region: Some("us-east-1".into()),
        endpoint_url: Some(endpoint.to_owned()),
        credentials: sdk.credentials_provider(),
    };
    let catalog = Arc::new(S3TablesCatalog::new(aws_sdk_s3tables::Client::new(&sdk), arn, &files));
    TableWriter::new(catalog, TableIdent::new(NamespaceIdent::new("mcp".into()), "events".into()), "archive")
        .with_attempts(50)
}

/// Two writers racing over overlapping batches of one shard: S3 Tables refuses the
/// commit made on a stale version token, the loser reads the positions again, and
/// pyiceberg finds every record once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writers_racing_on_an_s3_table_leave_each_record_once() {
    let moto = Emulator::start("moto", &[]);
    let arn: String = serde_json::from_value(weir_e2e::pyiceberg(PY, &[moto.endpoint.as_str(), "create"])).unwrap();
    let (a, b) = (writer(&moto.endpoint, &arn).await, writer(&moto.endpoint, &arn).await);
    let records: Vec<_> = (0..240).map(|i| (pos(i), event(i))).collect();
    let shard = ShardId::new("shardId-000000000000");
    let batch = |from: usize, to: usize| {
        vec![ShardRecords { shard: shard.clone(), end: pos(to as u64 - 1), records: records[from..to].to_vec() }]
    };
    let mut conflicts = 0;
    for round in 0..8 {
        let (x, y) = (round * 30, round * 30 + 30);
        let (ba, bb) = (batch(x, y), batch(x.saturating_sub(10), y - 5));
        let (ra, rb) = tokio::join!(a.commit(&ba), b.commit(&bb));
        conflicts += ra.unwrap().conflicts + rb.unwrap().conflicts;
    }
    let got: Vec<String> =
        serde_json::from_value(weir_e2e::pyiceberg(PY, &[moto.endpoint.as_str(), "read", arn.as_str()])).unwrap();
    let want: Vec<String> = (0..240).map(|i| format!("s-{i:04}")).collect();
    assert_eq!(got, want, "each record once, none lost");
    println!("S3 Tables commit conflicts over 8 racing rounds: {conflicts}");
    assert!(conflicts > 0, "the writers raced: S3 Tables refused a commit on a stale version token");
}

/// `weir run` with a delivery stream's Iceberg destination whose `CatalogARN` is S3
/// Tables' federated catalog in Glue (`…:catalog/s3tablescatalog/lake`): weir writes
/// the table bucket's table through the S3 Tables API (`[aws] s3tables_endpoint_url`);
/// pyiceberg reads each record once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn weir_run_writes_a_firehose_destinations_s3_table() {
    use weir_aws::kinesis::producer::{Outgoing, Producer};
    let moto = Emulator::start("moto", &[]);
    let fk = Emulator::start("ferrokinesis", &[]);
    let arn: String = serde_json::from_value(weir_e2e::pyiceberg(PY, &[moto.endpoint.as_str(), "create"])).unwrap();
    weir_e2e::s3(&moto.endpoint).await.create_bucket().bucket("firehose-errors").send().await.unwrap();
    let k = weir_e2e::kinesis(&fk.endpoint).await;
    weir_e2e::create_stream(&k, "s3tables-events", 2).await;
    let records = (0..300u64).map(|i| Outgoing { id: i, partition_key: format!("pk-{i}"), data: event(i) }).collect();
    assert_eq!(Producer::new(k.clone(), "s3tables-events").put_all(records).await.accepted.len(), 300);
    let destination = serde_json::json!({
        "DestinationTableConfigurationList": [{"DestinationDatabaseName": "mcp", "DestinationTableName": "events"}],
        "CatalogConfiguration": {"CatalogARN": "arn:aws:glue:us-east-1:123456789012:catalog/s3tablescatalog/lake"},
        "BufferingHints": {"IntervalInSeconds": 0},
        "S3Configuration": {"BucketARN": "arn:aws:s3:::firehose-errors"},
    });
    let consumer =
        serde_json::json!({"consumers": [{"name": "s3-table", "type": "iceberg", "destination": destination}]});
    let dir = tempfile::tempdir().unwrap();
    let aws = format!(
        "kinesis_endpoint_url = \"{}\"\ns3tables_endpoint_url = \"{m}\"\ns3_endpoint_url = \"{m}\"\ns3_force_path_style = true\n",
        fk.endpoint,
        m = moto.endpoint
    );
    let cfg =
        weir_e2e::one_worker_config(dir.path(), "s3tables-events", "s3t", &aws, &toml::to_string(&consumer).unwrap());
    weir_e2e::run_until_caught_up(&cfg);
    assert_eq!(arn, "arn:aws:s3tables:us-east-1:123456789012:bucket/lake");
    let got: Vec<String> =
        serde_json::from_value(weir_e2e::pyiceberg(PY, &[moto.endpoint.as_str(), "read", arn.as_str()])).unwrap();
    let want: Vec<String> = (0..300).map(|i| format!("s-{i:04}")).collect();
    assert_eq!(got, want, "each record once");
}
