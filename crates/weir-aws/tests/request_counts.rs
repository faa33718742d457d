//! The request counter ([`weir_aws::RequestCounter`]) on real emulators: a known
//! sequence of calls on Kinesis (ferrokinesis, with its write limits on), DynamoDB and
//! S3 (moto) is counted exactly, by operation and outcome, with retries and throttles.
#![allow(clippy::unwrap_used, clippy::print_stdout)] // a test: a failed expectation is a failed test

use std::collections::BTreeMap;
use std::sync::Arc;

use aws_sdk_dynamodb::types::{AttributeDefinition, AttributeValue, KeySchemaElement, KeyType, ScalarAttributeType};
use weir_aws::requests::{OperationCounts, Outcome};
use weir_aws::{AwsSettings, RequestCounter, RequestLedger, Service, load_sdk_config};
use weir_testkit::Emulator;

type Counts = BTreeMap<(&'static str, String), OperationCounts>;

fn calls(counts: &Counts, service: &'static str, operation: &str) -> BTreeMap<Outcome, u64> {
    counts.get(&(service, operation.to_owned())).map(|c| c.calls.clone()).unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_known_sequence_of_calls_is_counted_exactly() {
    let moto = Emulator::start("moto", &[]);
    let sdk = load_sdk_config(&AwsSettings::emulator(&moto.endpoint)).await;
    let ledger = RequestLedger::new();
    let ddb = aws_sdk_dynamodb::Client::from_conf(
        aws_sdk_dynamodb::config::Builder::from(&sdk)
            .interceptor(RequestCounter::new(Service::DynamoDb, ledger.clone()))
            .build(),
    );
    let s3 = aws_sdk_s3::Client::from_conf(
        aws_sdk_s3::config::Builder::from(&sdk)
            .force_path_style(true)
            .interceptor(RequestCounter::new(Service::S3, ledger.clone()))
            .build(),
    );

    ddb.create_table()
        .table_name("counted")
        .key_schema(KeySchemaElement::builder().attribute_name("k").key_type(KeyType::Hash).build().unwrap())
        .attribute_definitions(
            AttributeDefinition::builder().attribute_name("k").attribute_type(ScalarAttributeType::S).build().unwrap(),
        )
        .billing_mode(aws_sdk_dynamodb::types::BillingMode::PayPerRequest)
        .send()
        .await
        .unwrap();
    for k in ["a", "b"] {
        ddb.put_item().table_name("counted").item("k", AttributeValue::S(k.into())).send().await.unwrap();
    }
    // A conditional write that fails, as a lost lease race does: a client error.
    let refused = ddb
        .put_item()
        .table_name("counted")
        .item("k", AttributeValue::S("a".into()))
        .condition_expression("attribute_not_exists(k)")
        .send()
        .await;
    assert!(refused.is_err());
    ddb.get_item().table_name("counted").key("k", AttributeValue::S("a".into())).send().await.unwrap();

    s3.create_bucket().bucket("counted").send().await.unwrap();
    s3.put_object().bucket("counted").key("o").body(b"x".to_vec().into()).send().await.unwrap();
    assert!(s3.get_object().bucket("counted").key("missing").send().await.is_err());
    s3.get_object().bucket("counted").key("o").send().await.unwrap();

    let counts = ledger.snapshot();
    let ok = |n| BTreeMap::from([(Outcome::Ok, n)]);
    assert_eq!(calls(&counts, "dynamodb", "CreateTable"), ok(1));
    assert_eq!(calls(&counts, "dynamodb", "PutItem"), BTreeMap::from([(Outcome::Ok, 2), (Outcome::ClientError, 1)]));
    assert_eq!(calls(&counts, "dynamodb", "GetItem"), ok(1));
    assert_eq!(calls(&counts, "s3", "CreateBucket"), ok(1));
    assert_eq!(calls(&counts, "s3", "PutObject"), ok(1));
    assert_eq!(calls(&counts, "s3", "GetObject"), BTreeMap::from([(Outcome::Ok, 1), (Outcome::ClientError, 1)]));
    assert_eq!(counts.len(), 6, "{counts:?}");
    assert!(counts.values().all(|c| c.retries == 0 && c.throttles == 0), "{counts:?}");
}

/// ferrokinesis with `--enforce-limits true` throttles a shard past 1 MiB/s: single
/// `PutRecord`s of 512 KiB are refused with `ProvisionedThroughputExceededException`,
/// which the SDK retries. Every throttled attempt is counted, either as a retry or as
/// the outcome of a call that ran out of attempts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn throttled_attempts_and_retries_are_counted() {
    let emu = Emulator::start("ferrokinesis", &["--enforce-limits", "true"]);
    let sdk = load_sdk_config(&AwsSettings::emulator(&emu.endpoint)).await;
    let setup = aws_sdk_kinesis::Client::new(&sdk);
    setup.create_stream().stream_name("throttled").shard_count(1).send().await.unwrap();
    for _ in 0..200 {
        let s = setup.describe_stream_summary().stream_name("throttled").send().await.unwrap();
        if s.stream_description_summary().unwrap().stream_status() == &aws_sdk_kinesis::types::StreamStatus::Active {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await; // polling the emulator, not synchronising
    }
    let ledger = RequestLedger::new();
    let kinesis = aws_sdk_kinesis::Client::from_conf(
        aws_sdk_kinesis::config::Builder::from(&sdk)
            .interceptor(RequestCounter::new(Service::Kinesis, Arc::clone(&ledger)))
            .build(),
    );
    let data = vec![b'x'; 512 * 1024];
    let n = 8;
    let mut refused = 0;
    for _ in 0..n {
        let put = kinesis.put_record().stream_name("throttled").partition_key("k").data(data.clone().into());
        if put.send().await.is_err() {
            refused += 1;
        }
    }
    kinesis.list_shards().stream_name("throttled").send().await.unwrap();

    let counts = ledger.snapshot();
    let put = counts.get(&("kinesis", "PutRecord".to_owned())).unwrap();
    println!("PutRecord: {put:?}");
    assert_eq!(put.total_calls(), n);
    let final_throttled = put.calls.get(&Outcome::Throttled).copied().unwrap_or(0);
    assert_eq!(final_throttled, refused, "calls that failed are those whose last attempt was throttled");
    assert_eq!(put.calls.get(&Outcome::Ok).copied().unwrap_or(0), n - refused);
    assert!(put.throttles >= 1, "4 MiB into a 1 MiB/s shard: {put:?}");
    assert_eq!(put.throttles, put.retries + final_throttled, "every throttled attempt is retried or final: {put:?}");
    assert_eq!(calls(&counts, "kinesis", "ListShards"), BTreeMap::from([(Outcome::Ok, 1)]));
    assert_eq!(counts.len(), 2, "{counts:?}");
}
