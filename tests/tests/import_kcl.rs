//! `weir import-kcl` against ferrokinesis and moto: a KCL application's lease table (items
//! as KCL's `DynamoDBLeaseSerializer` writes them, multi-stream keys, a KCL 3 entity
//! that is not a lease) is refused while a lease is still renewed, then imported; `weir
//! run --until-caught-up` continues exactly where the KCL application stopped: every
//! record after the KCL checkpoint once, nothing at or before it.
#![allow(clippy::unwrap_used, clippy::print_stdout)] // a test: a failed expectation is a failed test

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use aws_sdk_dynamodb::types::{
    AttributeDefinition, AttributeValue, BillingMode, KeySchemaElement, KeyType, ScalarAttributeType,
};
use bytes::Bytes;
use weir_aws::kinesis::producer::{Outgoing, Producer};
use weir_e2e::{create_stream, dynamodb, kinesis, session_ids, tenant_archiver_toml, weir_command, worker_toml};
use weir_testkit::Emulator;

const STREAM: &str = "kcl-events";
const KCL_TABLE: &str = "kcl-app";

fn config(dir: &Path, kinesis: &str, moto: &str) -> std::path::PathBuf {
    let cfg = dir.join("weir.toml");
    let text = format!(
        "{worker}\n[stream]\nkind = \"kinesis\"\nname = \"{STREAM}\"\n\
         [leases]\nkind = \"dynamodb\"\ntable = \"weir-leases\"\ncreate_table = true\nnamespace = \"moved\"\n\
         [aws]\nkinesis_endpoint_url = \"{kinesis}\"\ndynamodb_endpoint_url = \"{moto}\"\n[http]\nlisten = \"\"\n{archiver}",
        worker = worker_toml(None),
        archiver = tenant_archiver_toml(&dir.join("out")),
    );
    std::fs::write(&cfg, text).unwrap();
    cfg
}

fn kcl_item(
    key: &str,
    owner: &str,
    counter: u64,
    checkpoint: &str,
) -> std::collections::HashMap<String, AttributeValue> {
    let mut item = std::collections::HashMap::new();
    item.insert("leaseKey".to_owned(), AttributeValue::S(key.into()));
    item.insert("leaseOwner".to_owned(), AttributeValue::S(owner.into()));
    item.insert("leaseCounter".to_owned(), AttributeValue::N(counter.to_string()));
    item.insert("ownerSwitchesSinceCheckpoint".to_owned(), AttributeValue::N("0".into()));
    item.insert("checkpoint".to_owned(), AttributeValue::S(checkpoint.into()));
    item.insert("checkpointSubSequenceNumber".to_owned(), AttributeValue::N("0".into()));
    item.insert("entityType".to_owned(), AttributeValue::S("LEASE".into()));
    item
}

fn import(cfg: &str, observe: &str) -> std::process::Output {
    let mut cmd = weir_command();
    cmd.args(["import-kcl", "--table", KCL_TABLE, "--config", cfg, "--observe", observe]);
    weir_e2e::timed(cmd, Duration::from_secs(60)).0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn weir_continues_where_the_kcl_application_stopped() {
    let fk = Emulator::start("ferrokinesis", &[]);
    let moto = Emulator::start("moto", &[]);
    let k = kinesis(&fk.endpoint).await;
    create_stream(&k, STREAM, 2).await;
    let records = (0..600u64)
        .map(|i| Outgoing {
            id: i,
            partition_key: format!("pk-{i}"),
            data: Bytes::from(format!(r#"{{"tenantId":"t-{}","toolName":"x","sessionId":"r{i}"}}"#, i % 3)),
        })
        .collect();
    let report = Producer::new(k.clone(), STREAM).put_all(records).await;
    assert_eq!(report.accepted.len(), 600);
    let mut shards: Vec<_> =
        report.accepted.iter().map(|a| a.shard.clone()).collect::<BTreeSet<_>>().into_iter().collect();
    shards.sort();
    assert_eq!(shards.len(), 2, "records on both shards");
    // The KCL application processed shard 0 up to its 100th record and nothing of shard 1.
    let mut on_first: Vec<_> = report.accepted.iter().filter(|a| a.shard == shards[0]).collect();
    on_first.sort_by(|a, b| a.sequence.cmp(&b.sequence));
    let checkpoint = on_first[99].sequence.to_string();
    let expected: BTreeSet<String> = report
        .accepted
        .iter()
        .filter(|a| a.shard != shards[0] || a.sequence > on_first[99].sequence)
        .map(|a| format!("r{}", a.id))
        .collect();
    assert_eq!(expected.len(), 500);

    // The KCL lease table, multi-stream keys as KCL 2.3+ writes them.
    let ddb = dynamodb(&moto.endpoint).await;
    ddb.create_table()
        .table_name(KCL_TABLE)
        .key_schema(KeySchemaElement::builder().attribute_name("leaseKey").key_type(KeyType::Hash).build().unwrap())
        .attribute_definitions(
            AttributeDefinition::builder()
                .attribute_name("leaseKey")
                .attribute_type(ScalarAttributeType::S)
                .build()
                .unwrap(),
        )
        .billing_mode(BillingMode::PayPerRequest)
        .send()
        .await
        .unwrap();
    let key = |shard: &str| format!("123456789012:{STREAM}:1764400000:{shard}");
    let items = [
        kcl_item(&key(shards[0].as_str()), "kcl-worker-1", 42, &checkpoint),
        kcl_item(&key(shards[1].as_str()), "kcl-worker-2", 17, "TRIM_HORIZON"),
        kcl_item("123456789012:other-stream:1764400000:shardId-000000000000", "kcl-worker-1", 9, "LATEST"),
    ];
    for item in items {
        ddb.put_item().table_name(KCL_TABLE).set_item(Some(item)).send().await.unwrap();
    }
    let mut entity = kcl_item("kcl-worker-1", "kcl-worker-1", 1, "TRIM_HORIZON");
    entity.insert("entityType".into(), AttributeValue::S("WORKER_METRICS".into()));
    ddb.put_item().table_name(KCL_TABLE).set_item(Some(entity)).send().await.unwrap();

    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), &fk.endpoint, &moto.endpoint);
    let cfg = cfg.to_str().unwrap();

    // A KCL worker still renewing shard 0: refused, nothing written.
    let renewing = {
        let (ddb, key) = (ddb.clone(), key(shards[0].as_str()));
        tokio::spawn(async move {
            for counter in 43.. {
                let item = kcl_item(&key, "kcl-worker-1", counter, "TRIM_HORIZON");
                let _ = ddb.put_item().table_name(KCL_TABLE).set_item(Some(item)).send().await;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        })
    };
    let out = tokio::task::spawn_blocking({
        let cfg = cfg.to_owned();
        move || import(&cfg, "1s")
    })
    .await
    .unwrap();
    renewing.abort();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "imported beside a running KCL worker");
    assert!(stderr.contains("KCL workers still renew 1 leases") && stderr.contains(shards[0].as_str()), "{stderr}");
    // The worker stopped: put its last state back (counter moved, checkpoint as it left it).
    let item = kcl_item(&key(shards[0].as_str()), "kcl-worker-1", 1_000, &checkpoint);
    ddb.put_item().table_name(KCL_TABLE).set_item(Some(item)).send().await.unwrap();

    let out = tokio::task::spawn_blocking({
        let cfg = cfg.to_owned();
        move || import(&cfg, "1s")
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains(&format!("{}: {checkpoint} for archive", shards[0])), "{stdout}");
    assert!(stdout.contains(&format!("{}: TRIM_HORIZON for archive", shards[1])), "{stdout}");
    assert!(
        stdout.contains(
            "skipped 123456789012:other-stream:1764400000:shardId-000000000000: a lease of stream other-stream"
        ),
        "{stdout}"
    );
    assert!(stdout.contains("skipped kcl-worker-1: entity type WORKER_METRICS"), "{stdout}");
    assert!(stdout.contains("wrote 2 leases for 1 consumers"), "{stdout}");

    // weir continues: everything after the KCL checkpoint, once; nothing before it.
    let mut cmd = weir_command();
    cmd.args(["run", "--config", cfg, "--until-caught-up"]);
    let (out, _) = weir_e2e::timed(cmd, Duration::from_secs(90));
    assert!(out.status.success(), "{}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    let got = session_ids(&dir.path().join("out"));
    let unique: BTreeSet<String> = got.iter().cloned().collect();
    assert_eq!(got.len(), unique.len(), "no record twice");
    assert_eq!(unique, expected, "exactly the records after the KCL checkpoints");
    // Both commands say what they asked of AWS, counted by the SDK interceptor.
    let stdout = String::from_utf8_lossy(&out.stdout);
    let requests = stdout.lines().find(|l| l.starts_with("AWS requests: ")).unwrap_or_else(|| panic!("{stdout}"));
    for op in ["dynamodb PutItem", "dynamodb UpdateItem", "kinesis GetRecords", "kinesis ListShards"] {
        assert!(requests.contains(op), "{op} missing from {requests}");
    }
    let list = weir_command().args(["leases", "list", "--config", cfg]).output().unwrap();
    let stdout = String::from_utf8_lossy(&list.stdout);
    assert!(list.status.success(), "{stdout}");
    let requests = stdout.lines().last().unwrap_or_default();
    assert!(requests.starts_with("AWS requests: dynamodb "), "{stdout}");
    assert!(!requests.contains("PutItem") && !requests.contains("UpdateItem"), "listing writes nothing: {requests}");
}
