//! The shard-reader conformance suite on real Kinesis emulators: ferrokinesis (EFO and
//! polling) and kinesis-mock (EFO; it never sends ChildShards on EFO, so shard ends go
//! through the confirmed polling fallback).
#![allow(clippy::unwrap_used, clippy::print_stdout)] // a test: a failed expectation is a failed test

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_kinesis::primitives::Blob;
use bytes::Bytes;
use weir_aws::{AwsSettings, KinesisOptions, KinesisStream, load_sdk_config};
use weir_core::ports::{ReadMode, ShardReader, StreamCatalog};
use weir_core::{Clock, SequenceNumber, ShardId, SystemClock, Timestamp};
use weir_testkit::Emulator;
use weir_testkit::conformance::{Quirks, StreamHarness, shard_reader_suite, shard_reader_suite_with};

struct KinesisHarness {
    client: aws_sdk_kinesis::Client,
    name: String,
    stream: KinesisStream,
}

async fn wait_active(client: &aws_sdk_kinesis::Client, name: &str) {
    for _ in 0..200 {
        let s = client.describe_stream_summary().stream_name(name).send().await.unwrap();
        let status = s.stream_description_summary().map(|d| d.stream_status().clone());
        if status == Some(aws_sdk_kinesis::types::StreamStatus::Active) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("stream {name} never became ACTIVE");
}

impl KinesisHarness {
    async fn new(endpoint: &str, efo: bool) -> Self {
        let sdk = load_sdk_config(&AwsSettings::emulator(endpoint)).await;
        let client = aws_sdk_kinesis::Client::new(&sdk);
        let name = format!("weir-test-{:08x}", rand::random::<u32>());
        client.create_stream().stream_name(&name).shard_count(1).send().await.unwrap();
        wait_active(&client, &name).await;
        let options = KinesisOptions {
            efo_consumer: efo.then(|| "weir-test".to_owned()),
            idle_poll_interval: Duration::from_millis(200),
            ..KinesisOptions::default()
        };
        let stream = KinesisStream::open(client.clone(), &name, options).await.unwrap();
        Self { client, name, stream }
    }
}

#[async_trait]
impl StreamHarness for KinesisHarness {
    fn reader(&self) -> Arc<dyn ShardReader> {
        Arc::new(self.stream.clone())
    }
    fn catalog(&self) -> Arc<dyn StreamCatalog> {
        Arc::new(self.stream.clone())
    }
    async fn put(&self, partition_key: &str, data: Bytes) -> (ShardId, SequenceNumber) {
        let out = self
            .client
            .put_record()
            .stream_name(&self.name)
            .partition_key(partition_key)
            .data(Blob::new(data.to_vec()))
            .send()
            .await
            .unwrap();
        (ShardId::from(out.shard_id()), SequenceNumber::parse(out.sequence_number()).unwrap())
    }
    async fn split(&self, shard: &ShardId) {
        let shards = self.stream.list_shards().await.unwrap();
        let r = shards.iter().find(|s| &s.id == shard).unwrap().hash_range;
        let mid = r.start + (r.end - r.start) / 2 + 1;
        self.client
            .split_shard()
            .stream_name(&self.name)
            .shard_to_split(shard.as_str())
            .new_starting_hash_key(mid.to_string())
            .send()
            .await
            .unwrap();
        wait_active(&self.client, &self.name).await;
    }
    async fn merge(&self, a: &ShardId, b: &ShardId) {
        self.client
            .merge_shards()
            .stream_name(&self.name)
            .shard_to_merge(a.as_str())
            .adjacent_shard_to_merge(b.as_str())
            .send()
            .await
            .unwrap();
        wait_active(&self.client, &self.name).await;
    }
    fn now(&self) -> Timestamp {
        SystemClock.now()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ferrokinesis_efo_passes_reader_conformance() {
    let emu = Emulator::start("ferrokinesis", &[]);
    let h = KinesisHarness::new(&emu.endpoint, true).await;
    shard_reader_suite(&h, ReadMode::Live).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ferrokinesis_polling_passes_reader_conformance() {
    let emu = Emulator::start("ferrokinesis", &[]);
    let h = KinesisHarness::new(&emu.endpoint, false).await;
    shard_reader_suite(&h, ReadMode::Polling).await;
}

/// kinesis-mock: its EFO sends no ChildShards (shard ends go through the confirmed
/// polling fallback) and never delivers on LATEST (covered by its polling run below).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kinesis_mock_efo_passes_reader_conformance() {
    let emu = Emulator::start("kinesis-local", &[]);
    let h = KinesisHarness::new(&emu.endpoint, true).await;
    shard_reader_suite_with(&h, ReadMode::Live, Quirks { latest_delivers: false }).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kinesis_mock_polling_passes_reader_conformance() {
    let emu = Emulator::start("kinesis-local", &[]);
    let h = KinesisHarness::new(&emu.endpoint, false).await;
    shard_reader_suite(&h, ReadMode::Polling).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_stream_is_a_clear_error() {
    let emu = Emulator::start("ferrokinesis", &[]);
    let sdk = load_sdk_config(&AwsSettings::emulator(&emu.endpoint)).await;
    let err =
        KinesisStream::open(aws_sdk_kinesis::Client::new(&sdk), "nope", KinesisOptions::default()).await.unwrap_err();
    let text = err.to_string();
    assert!(text.contains("nope") && text.contains("not found"), "{text}");
}

/// An iterator that expires between two polls is replaced from after the last record
/// delivered: nothing is skipped or repeated.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn polling_recovers_from_expired_iterators() {
    let emu = Emulator::start("ferrokinesis", &["--iterator-ttl-seconds", "1"]);
    let h = KinesisHarness::new(&emu.endpoint, false).await;
    let shard = h.stream.list_shards().await.unwrap()[0].id.clone();
    for i in 0..5 {
        h.put("k", Bytes::from(format!("a{i}"))).await;
    }
    let mut sub = h.stream.open(&shard, &weir_core::StartingPosition::TrimHorizon, ReadMode::Polling).await.unwrap();
    let mut got = Vec::new();
    while got.len() < 5 {
        got.extend(sub.next().await.unwrap().unwrap().records.into_iter().map(|r| r.data));
    }
    // Let the iterator the subscription holds expire (the emulator's TTL is 1 s).
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    for i in 0..3 {
        h.put("k", Bytes::from(format!("b{i}"))).await;
    }
    while got.len() < 8 {
        got.extend(sub.next().await.expect("expired iterator recovered").unwrap().records.into_iter().map(|r| r.data));
    }
    let want: Vec<Bytes> =
        (0..5).map(|i| Bytes::from(format!("a{i}"))).chain((0..3).map(|i| Bytes::from(format!("b{i}")))).collect();
    assert_eq!(got, want);
}

/// Polling asks each GetRecords call for about `max_bytes_per_call` of records, learnt
/// from the first call's sizes, and still reads every record once, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn polling_calls_carry_about_max_bytes_per_call() {
    let emu = Emulator::start("ferrokinesis", &[]);
    let h = KinesisHarness::new(&emu.endpoint, false).await;
    let payload = |i: usize| Bytes::from(format!("{i:06}{}", "x".repeat(994)));
    for chunk in (0..600).collect::<Vec<_>>().chunks(300) {
        let entries = chunk.iter().map(|&i| {
            aws_sdk_kinesis::types::PutRecordsRequestEntry::builder()
                .partition_key("k")
                .data(Blob::new(payload(i).to_vec()))
                .build()
                .unwrap()
        });
        let out =
            h.client.put_records().stream_name(&h.name).set_records(Some(entries.collect())).send().await.unwrap();
        assert_eq!(out.failed_record_count(), Some(0));
    }
    let options = KinesisOptions {
        max_bytes_per_call: 20_000,
        poll_interval: Duration::from_millis(5),
        ..KinesisOptions::default()
    };
    let stream = KinesisStream::open(h.client.clone(), &h.name, options).await.unwrap();
    let shard = stream.list_shards().await.unwrap()[0].id.clone();
    let mut sub = stream.open(&shard, &weir_core::StartingPosition::TrimHorizon, ReadMode::Polling).await.unwrap();
    let (mut got, mut sizes) = (Vec::new(), Vec::new());
    while got.len() < 600 {
        let batch = sub.next().await.unwrap().unwrap();
        sizes.push(batch.records.len());
        got.extend(batch.records.into_iter().map(|r| r.data));
    }
    assert_eq!(got, (0..600).map(payload).collect::<Vec<_>>());
    // 1,001 bytes of data and key and 256 of overhead a record: the first call asks for
    // one record (20,000 bytes cannot hold two of the largest), every later one for 15.
    assert_eq!(sizes[0], 1, "{sizes:?}");
    assert!(sizes[1..].iter().all(|&n| n <= 15), "{sizes:?}");
    assert!(sizes[1..sizes.len() - 1].iter().all(|&n| n == 15), "{sizes:?}");
}

/// A stream of two shards written by [`KinesisWriter`] and read back shard by shard.
struct WriterHarness {
    client: aws_sdk_kinesis::Client,
    name: String,
    writer: Arc<weir_aws::kinesis::writer::KinesisWriter>,
}

#[async_trait]
impl weir_testkit::conformance::WriterHarness for WriterHarness {
    fn writer(&self) -> Arc<dyn weir_core::ports::StreamWriter> {
        self.writer.clone()
    }
    async fn accepted(&self) -> Vec<Bytes> {
        let shards = self.client.list_shards().stream_name(&self.name).send().await.unwrap();
        let mut out = Vec::new();
        for shard in shards.shards() {
            let mut iterator = self
                .client
                .get_shard_iterator()
                .stream_name(&self.name)
                .shard_id(shard.shard_id())
                .shard_iterator_type(aws_sdk_kinesis::types::ShardIteratorType::TrimHorizon)
                .send()
                .await
                .unwrap()
                .shard_iterator()
                .map(str::to_owned);
            while let Some(it) = iterator {
                let page = self.client.get_records().shard_iterator(it).send().await.unwrap();
                out.extend(page.records().iter().map(|r| Bytes::copy_from_slice(r.data().as_ref())));
                let caught_up = page.records().is_empty() && page.millis_behind_latest() == Some(0);
                iterator = if caught_up { None } else { page.next_shard_iterator().map(str::to_owned) };
            }
        }
        out
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ferrokinesis_passes_writer_conformance() {
    let emu = Emulator::start("ferrokinesis", &[]);
    let sdk = load_sdk_config(&AwsSettings::emulator(&emu.endpoint)).await;
    let client = aws_sdk_kinesis::Client::new(&sdk);
    let name = format!("weir-writer-{:08x}", rand::random::<u32>());
    client.create_stream().stream_name(&name).shard_count(2).send().await.unwrap();
    wait_active(&client, &name).await;
    let producer = weir_aws::kinesis::producer::Producer::new(client.clone(), &name);
    let writer = Arc::new(weir_aws::kinesis::writer::KinesisWriter::new(producer, &name));
    weir_testkit::conformance::stream_writer_suite(&WriterHarness { client, name, writer }).await;
}

/// The Kinesis request timeouts bound a `SubscribeToShard` only until its event stream
/// opens: a subscription outlives the operation timeout (here scaled down to 2 s) and
/// keeps delivering, so the 30 s production timeout never cuts a 5-minute subscription.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_timeouts_do_not_cut_an_open_subscription() {
    let emu = Emulator::start("ferrokinesis", &[]);
    let mut settings = AwsSettings::emulator(&emu.endpoint);
    settings.timeouts = Some(weir_aws::request_timeouts(Duration::from_secs(1), Duration::from_secs(2)));
    let client = aws_sdk_kinesis::Client::new(&load_sdk_config(&settings).await);
    let name = format!("weir-timeouts-{:08x}", rand::random::<u32>());
    client.create_stream().stream_name(&name).shard_count(1).send().await.unwrap();
    wait_active(&client, &name).await;
    let arn = client.describe_stream_summary().stream_name(&name).send().await.unwrap();
    let arn = arn.stream_description_summary().unwrap().stream_arn().to_owned();
    let consumer = client.register_stream_consumer().stream_arn(&arn).consumer_name("t").send().await.unwrap();
    let consumer_arn = consumer.consumer().unwrap().consumer_arn().to_owned();
    for _ in 0..200 {
        let d = client.describe_stream_consumer().consumer_arn(&consumer_arn).send().await.unwrap();
        if d.consumer_description().unwrap().consumer_status() == &aws_sdk_kinesis::types::ConsumerStatus::Active {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let shard = client.list_shards().stream_name(&name).send().await.unwrap().shards()[0].shard_id().to_owned();
    let position = aws_sdk_kinesis::types::StartingPosition::builder()
        .r#type(aws_sdk_kinesis::types::ShardIteratorType::TrimHorizon)
        .build()
        .unwrap();
    let mut out = client
        .subscribe_to_shard()
        .consumer_arn(&consumer_arn)
        .shard_id(&shard)
        .starting_position(position)
        .send()
        .await
        .unwrap();
    let opened = std::time::Instant::now();
    let mut records = 0;
    let mut put = 0;
    // Three operation timeouts long: every record put meanwhile arrives on the one stream.
    while opened.elapsed() < Duration::from_secs(6) {
        client
            .put_record()
            .stream_name(&name)
            .partition_key("k")
            .data(Blob::new(format!("r{put}")))
            .send()
            .await
            .unwrap();
        put += 1;
        while records < put {
            let event = out.event_stream.recv().await.expect("the subscription outlives the operation timeout");
            let event = event.expect("the subscription ended early");
            if let aws_sdk_kinesis::types::SubscribeToShardEventStream::SubscribeToShardEvent(e) = event {
                records += e.records().len();
            }
        }
    }
    assert_eq!(records, put);
    assert!(put >= 6, "{put} records in 6 s");
}
