//! DynamoDB lease table and S3 object sink against real emulators (moto; s3s-fs as a
//! second S3), through the same conformance suites as the embedded implementations.
#![allow(clippy::unwrap_used, clippy::print_stdout)] // a test: a failed expectation is a failed test

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use weir_aws::{AwsSettings, DynamoDbLeaseTable, S3ObjectSink, S3Options, load_sdk_config};
use weir_core::ports::{LeaseTable, ObjectSink};
use weir_testkit::Emulator;
use weir_testkit::conformance::{SinkQuirks, lease_table_suite, object_sink_suite_with};

fn unique(prefix: &str) -> String {
    format!("{prefix}-{:08x}", rand::random::<u32>())
}

async fn dynamodb(endpoint: &str) -> aws_sdk_dynamodb::Client {
    aws_sdk_dynamodb::Client::new(&load_sdk_config(&AwsSettings::emulator(endpoint)).await)
}

async fn s3(endpoint: &str) -> aws_sdk_s3::Client {
    let sdk = load_sdk_config(&AwsSettings::emulator(endpoint)).await;
    aws_sdk_s3::Client::from_conf(aws_sdk_s3::config::Builder::from(&sdk).force_path_style(true).build())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dynamodb_lease_table_passes_conformance_on_moto() {
    let moto = Emulator::start("moto", &[]);
    let client = dynamodb(&moto.endpoint).await;
    let table = unique("weir-leases");
    let n = AtomicU32::new(0);
    lease_table_suite(|| {
        let ns = format!("app-{}", n.fetch_add(1, Ordering::SeqCst));
        let (client, table) = (client.clone(), table.clone());
        async move {
            Arc::new(
                DynamoDbLeaseTable::open(client, &table, &ns, true)
                    .await
                    .unwrap(),
            ) as Arc<dyn LeaseTable>
        }
    })
    .await;
}

/// The hash keys holding a namespace's lease items, read straight from the table.
async fn lease_hash_keys(client: &aws_sdk_dynamodb::Client, table: &str) -> std::collections::BTreeMap<String, usize> {
    hash_keys_of(client, table, "lease#").await
}

/// The hash keys items whose sort key starts with `prefix` are under, with their counts.
async fn hash_keys_of(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
    prefix: &str,
) -> std::collections::BTreeMap<String, usize> {
    let mut keys = std::collections::BTreeMap::new();
    for item in client.scan().table_name(table).send().await.unwrap().items() {
        let sk = item["sk"].as_s().unwrap();
        if sk.starts_with(prefix) {
            *keys.entry(item["pk"].as_s().unwrap().clone()).or_insert(0) += 1;
        }
    }
    keys
}

/// A new namespace spreads its leases over `LEASE_PARTITIONS` hash keys and its worker
/// records over `WORKER_PARTITIONS`, and says so in its record; a namespace written
/// before (leases or worker records under the namespace itself, a record without a
/// partition count, or no record) is read and written where it is, also after its
/// record is rewritten in the current format.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_spread_over_hash_keys_and_older_namespaces_keep_theirs() {
    use aws_sdk_dynamodb::types::AttributeValue;
    use weir_core::ports::{LEASE_FORMAT, LEASE_PARTITIONS, NamespaceMeta, WORKER_PARTITIONS, WorkerLoad};
    use weir_core::{LeaseChange, LeaseMutation, NewLease, ShardId, WorkerId};
    let moto = Emulator::start("moto", &[]);
    let client = dynamodb(&moto.endpoint).await;
    let name = unique("weir-leases");
    let lease = |key: &str| NewLease {
        key: ShardId::new(key),
        initial: weir_core::Checkpoint::TrimHorizon,
        parents: vec![],
        hash_range: None,
    };

    let new = DynamoDbLeaseTable::open(client.clone(), &name, "new", true).await.unwrap();
    assert_eq!(new.partitions(), LEASE_PARTITIONS);
    assert_eq!(new.worker_partitions(), WORKER_PARTITIONS);
    assert!(new.put_namespace_meta(&NamespaceMeta { stream: "s".into(), format: LEASE_FORMAT }, None).await.unwrap());
    for i in 0..40 {
        new.heartbeat(&WorkerId::new(format!("worker-{i}")), "a", WorkerLoad { held: i, active: 200 }).await.unwrap();
    }
    let workers = hash_keys_of(&client, &name, "worker#").await;
    assert!(workers.keys().all(|pk| pk.starts_with("new#workers-")), "{workers:?}");
    assert!(workers.len() >= 6, "40 records over 8 hash keys: {} used", workers.len());
    let listed = new.list_workers().await.unwrap();
    assert_eq!(listed.len(), 40, "a census reads every partition");
    assert!(listed.iter().all(|w| w.load.held == w.worker.as_str()[7..].parse::<u32>().unwrap()), "{listed:?}");
    assert_eq!(new.list_workers_relaxed().await.unwrap().len(), 40);
    for i in 0..200 {
        assert!(new.create_if_absent(lease(&format!("shardId-{i:012}"))).await.unwrap());
    }
    let keys = lease_hash_keys(&client, &name).await;
    assert!(keys.keys().all(|pk| pk.starts_with("new#leases-")), "{keys:?}");
    assert!(keys.len() >= 56, "200 leases over 64 hash keys: {} used", keys.len());
    assert!(keys.values().all(|n| *n <= 12), "none much above 200 / 64: {keys:?}");
    let listed = new.list().await.unwrap();
    assert_eq!(listed.len(), 200, "a listing reads every partition");
    assert_eq!(new.lease_parts(), LEASE_PARTITIONS, "a part per hash key");
    for part in [0, 17] {
        let sampled = new.list_part_relaxed(part).await.unwrap();
        let pk = format!("new#leases-{part}");
        assert_eq!(sampled.len(), keys[&pk], "part {part} is the leases of {pk}");
        assert!(sampled.iter().all(|l| weir_core::ports::lease_partition(l.key.as_str(), LEASE_PARTITIONS) == part));
    }
    let again = DynamoDbLeaseTable::open(client.clone(), &name, "new", false).await.unwrap();
    assert_eq!(again.partitions(), LEASE_PARTITIONS, "the record names the layout");
    assert_eq!(again.worker_partitions(), WORKER_PARTITIONS);
    assert_eq!(again.list_workers().await.unwrap().len(), 40);
    let meta = client
        .get_item()
        .table_name(&name)
        .key("pk", AttributeValue::S("new".into()))
        .key("sk", AttributeValue::S("meta".into()))
        .send()
        .await
        .unwrap();
    assert_eq!(*meta.item().unwrap()["buckets"].as_n().unwrap(), LEASE_PARTITIONS.to_string());
    assert_eq!(meta.item().unwrap()["worker_buckets"].as_n().unwrap(), "8");

    // Written by a weir that kept every lease under the namespace: items as it wrote them.
    let old_lease = lease("shardId-000000000007").into_lease();
    let put = |pk: &str, sk: &str| {
        client
            .put_item()
            .table_name(&name)
            .item("pk", AttributeValue::S(pk.into()))
            .item("sk", AttributeValue::S(sk.into()))
    };
    put("old", "lease#shardId-000000000007")
        .item("counter", AttributeValue::N("0".into()))
        .item("ended", AttributeValue::Bool(false))
        .item("lease", AttributeValue::S(serde_json::to_string(&old_lease).unwrap()))
        .send()
        .await
        .unwrap();
    put("old", "meta")
        .item("stream", AttributeValue::S("s".into()))
        .item("format", AttributeValue::N("1".into()))
        .send()
        .await
        .unwrap();
    put("old", "worker#w-old")
        .item("counter", AttributeValue::N("3".into()))
        .item("instance", AttributeValue::S(String::new()))
        .send()
        .await
        .unwrap();
    // Format 2: leases spread, worker records under the namespace.
    put("two", "meta")
        .item("stream", AttributeValue::S("s".into()))
        .item("format", AttributeValue::N("2".into()))
        .item("buckets", AttributeValue::N("32".into()))
        .send()
        .await
        .unwrap();
    put("two", "worker#w-two")
        .item("counter", AttributeValue::N("3".into()))
        .item("instance", AttributeValue::S(String::new()))
        .send()
        .await
        .unwrap();
    // A lease where a weir that spread leases over 32 keys put it.
    let spread = "shardId-000000000011";
    let old_key = format!("two#leases-{}", weir_core::ports::lease_partition(spread, 32));
    put(&old_key, &format!("lease#{spread}"))
        .item("counter", AttributeValue::N("0".into()))
        .item("ended", AttributeValue::Bool(false))
        .item("lease", AttributeValue::S(serde_json::to_string(&lease(spread).into_lease()).unwrap()))
        .send()
        .await
        .unwrap();
    let two = DynamoDbLeaseTable::open(client.clone(), &name, "two", false).await.unwrap();
    assert_eq!((two.partitions(), two.worker_partitions()), (32, 0), "the count its record names");
    assert_eq!(two.list().await.unwrap().len(), 1, "its lease is found");
    assert!(two.get(&ShardId::new(spread)).await.unwrap().is_some(), "and read by key");
    assert_eq!(two.list_workers().await.unwrap().len(), 1, "a format-2 record is found");
    two.heartbeat(&WorkerId::new("w-new"), "b", WorkerLoad::default()).await.unwrap();
    let stored = two.namespace_meta().await.unwrap();
    let next = NamespaceMeta { stream: "s".into(), format: LEASE_FORMAT };
    assert!(two.put_namespace_meta(&next, stored.as_ref()).await.unwrap());
    let reopened = DynamoDbLeaseTable::open(client.clone(), &name, "two", false).await.unwrap();
    assert_eq!(reopened.worker_partitions(), 0, "the rewritten record keeps where the records are");
    assert_eq!(reopened.list_workers().await.unwrap().len(), 2);
    put("older", "lease#shardId-000000000009")
        .item("counter", AttributeValue::N("0".into()))
        .item("ended", AttributeValue::Bool(false))
        .item("lease", AttributeValue::S(serde_json::to_string(&lease("shardId-000000000009").into_lease()).unwrap()))
        .send()
        .await
        .unwrap();
    for ns in ["old", "older"] {
        let t = DynamoDbLeaseTable::open(client.clone(), &name, ns, false).await.unwrap();
        assert_eq!((t.partitions(), t.worker_partitions()), (0, 0), "{ns}: the single-key layout");
        let listed = t.list().await.unwrap();
        assert_eq!(listed.len(), 1, "{ns}: its lease is found");
        assert_eq!(t.lease_parts(), 1, "{ns}: one part, the namespace's own key");
        assert_eq!(t.list_part_relaxed(0).await.unwrap(), listed);
        let taken =
            t.mutate(&LeaseMutation::on(&listed[0], LeaseChange::Take { owner: WorkerId::new("w") })).await.unwrap();
        assert_eq!(t.get(&taken.key).await.unwrap().unwrap().owner, Some(WorkerId::new("w")));
        assert!(t.create_if_absent(lease("shardId-000000000100")).await.unwrap());
        let stored = t.namespace_meta().await.unwrap();
        t.heartbeat(&WorkerId::new("w"), "a", WorkerLoad::default()).await.unwrap();
        let next = NamespaceMeta { stream: "s".into(), format: LEASE_FORMAT };
        assert!(t.put_namespace_meta(&next, stored.as_ref()).await.unwrap(), "{ns}: claimed in the current format");
        let reopened = DynamoDbLeaseTable::open(client.clone(), &name, ns, false).await.unwrap();
        assert_eq!(
            (reopened.partitions(), reopened.worker_partitions()),
            (0, 0),
            "{ns}: the rewritten record keeps the layout"
        );
        assert_eq!(reopened.list().await.unwrap().len(), 2);
    }
    let keys = lease_hash_keys(&client, &name).await;
    assert_eq!((keys.get("old"), keys.get("older")), (Some(&2), Some(&2)), "written where they were: {keys:?}");
    let workers = hash_keys_of(&client, &name, "worker#").await;
    assert_eq!(
        (workers.get("old"), workers.get("older"), workers.get("two")),
        (Some(&2), Some(&1), Some(&2)),
        "worker records written where the namespace keeps them: {workers:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_lease_table_is_a_clear_error() {
    let moto = Emulator::start("moto", &[]);
    let client = dynamodb(&moto.endpoint).await;
    let err = DynamoDbLeaseTable::open(client, "no-such-table", "app", false).await.unwrap_err().to_string();
    assert!(err.contains("no-such-table") && err.contains("does not exist"), "{err}");
    assert!(err.contains("create_table"), "the error says how to fix it: {err}");
}

async fn s3_suite(endpoint: &str, quirks: SinkQuirks) {
    let client = s3(endpoint).await;
    let bucket = unique("weir-archive");
    let sink =
        S3ObjectSink::new(client, &bucket, S3Options { multipart_threshold: 5 * 1024 * 1024, ..S3Options::default() });
    sink.ensure_bucket().await.unwrap();
    object_sink_suite_with(
        || {
            let sink = sink.clone();
            async move { Arc::new(sink) as Arc<dyn ObjectSink> }
        },
        quirks,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_sink_passes_conformance_on_moto() {
    let moto = Emulator::start("moto", &[]);
    s3_suite(&moto.endpoint, SinkQuirks::default()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_sink_passes_conformance_on_s3s_fs() {
    let s3s = Emulator::start("s3s-fs", &[]);
    // s3s-fs judges If-None-Match before writing, not atomically (seen in CI).
    s3_suite(&s3s.endpoint, SinkQuirks { atomic_concurrent_creates: false, stat_of_a_prefix_is_absent: false }).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_are_classified_not_all_retried() {
    use weir_core::LeaseError;
    let moto = Emulator::start("moto", &[]);
    let client = dynamodb(&moto.endpoint).await;
    let table = DynamoDbLeaseTable::open(client.clone(), &unique("weir-leases"), "app", true).await.unwrap();
    // Permanent: the table is deleted under the worker.
    let name = client.list_tables().send().await.unwrap().table_names()[0].clone();
    client.delete_table().table_name(&name).send().await.unwrap();
    match table.list().await {
        Err(LeaseError::Store { retryable, message, .. }) => {
            assert!(!retryable, "a missing table is not retryable: {message}");
            assert!(message.contains("ResourceNotFound"), "{message}");
        }
        other => panic!("expected a store error, got {other:?}"),
    }
    // Transient: nothing listens on the endpoint any more.
    let port = moto.port;
    drop(moto);
    let gone = dynamodb(&format!("http://127.0.0.1:{port}")).await;
    let err = DynamoDbLeaseTable::open(gone, "t", "app", false).await.unwrap_err();
    assert!(matches!(err, LeaseError::Store { .. }), "{err}");
    assert!(err.to_string().contains("could not send") || err.to_string().contains("cannot describe"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_puts_carry_encryption_headers_and_metadata() {
    use weir_aws::ServerSideEncryption;
    use weir_core::ports::PutOptions;
    let moto = Emulator::start("moto", &[]);
    let client = s3(&moto.endpoint).await;
    let bucket = unique("weir-sse");
    for (sse, want) in [
        (ServerSideEncryption::S3, aws_sdk_s3::types::ServerSideEncryption::Aes256),
        (ServerSideEncryption::Kms(Some("alias/weir".into())), aws_sdk_s3::types::ServerSideEncryption::AwsKms),
    ] {
        let sink =
            S3ObjectSink::new(client.clone(), &bucket, S3Options { encryption: sse.clone(), ..S3Options::default() });
        sink.ensure_bucket().await.unwrap();
        let key = format!("obj-{want:?}.gz");
        let options = PutOptions {
            content_type: Some("application/x-ndjson".into()),
            content_encoding: Some("gzip".into()),
            metadata: vec![("weir-shards".into(), "shardId-0".to_owned())],
        };
        sink.put_if_absent(&key, bytes::Bytes::from_static(b"x"), &options).await.unwrap();
        let head = client.head_object().bucket(&bucket).key(&key).send().await.unwrap();
        assert_eq!(head.server_side_encryption(), Some(&want), "{sse:?}");
        assert_eq!(head.content_type(), Some("application/x-ndjson"));
        assert_eq!(head.content_encoding(), Some("gzip"));
        assert_eq!(head.metadata().and_then(|m| m.get("weir-shards")).map(String::as_str), Some("shardId-0"));
    }
}
