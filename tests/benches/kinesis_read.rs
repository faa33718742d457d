//! Read throughput of one worker from ferrokinesis: 4 shards, 1 KB records, a counting
//! consumer, enhanced fan-out and polling measured in the same run, beside the SDK alone
//! reading the same records with plain `GetRecords` calls of the size weir asks for (the
//! cost of the Kinesis protocol: HTTP, JSON, base64), as fast as it can (weir keeps to
//! 5 calls a second per shard, so its seconds are not comparable). Prints a table with records/s and CPU-seconds (of
//! this process: reading, decoding, dispatch) per 100k records, and weir's CPU per
//! record over the SDK's.
//!
//! cargo bench -p weir-e2e --bench kinesis_read        (100,000 records)
//! Under `cargo test` it runs once with 2,000 records as a smoke test.
#![allow(clippy::unwrap_used, clippy::print_stdout)] // a test: a failed expectation is a failed test

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use tokio::sync::Notify;
use weir_aws::{KinesisOptions, KinesisStream};
use weir_core::{Acks, CloseReason, Consumer, ConsumerError, RecordBatch, ShardId};
use weir_e2e::{cpu_seconds, create_stream, kinesis, put_kilobyte_records};
use weir_runtime::{RuntimeConfig, TokioClock, Worker};
use weir_testkit::{Emulator, MemoryLeaseTable};

struct Count {
    seen: Arc<AtomicU64>,
    target: u64,
    done: Arc<Notify>,
}

#[async_trait]
impl Consumer for Count {
    fn name(&self) -> &str {
        "count"
    }
    async fn on_batch(&mut self, b: &RecordBatch, acks: &dyn Acks) -> Result<(), ConsumerError> {
        if let Some(last) = b.last_position() {
            acks.durable(&b.shard_id, last);
        }
        if self.seen.fetch_add(b.records.len() as u64, Ordering::SeqCst) + b.records.len() as u64 >= self.target {
            self.done.notify_one();
        }
        Ok(())
    }
    async fn on_shard_close(&mut self, _: &ShardId, _: CloseReason, _: &dyn Acks) -> Result<(), ConsumerError> {
        Ok(())
    }
}

async fn read_all(client: aws_sdk_kinesis::Client, stream: &str, efo: Option<&str>, n: u64) -> (Duration, f64) {
    let options = KinesisOptions { efo_consumer: efo.map(str::to_owned), ..KinesisOptions::default() };
    let source = KinesisStream::open(client, stream, options).await.expect("open stream");
    let done = Arc::new(Notify::new());
    let consumer = Count { seen: Arc::default(), target: n, done: done.clone() };
    let worker = Worker::new(
        RuntimeConfig::new(format!("bench-{}", efo.unwrap_or("polling")).as_str().into()),
        Arc::new(MemoryLeaseTable::new()),
        Arc::new(source.clone()),
        Arc::new(source),
        vec![Box::new(consumer)],
        Arc::new(TokioClock::new()),
    )
    .expect("worker");
    let stop = tokio_util::sync::CancellationToken::new();
    let token = stop.clone();
    let (t0, c0) = (Instant::now(), cpu_seconds(false));
    let handle = tokio::spawn(async move { worker.run(token).await });
    done.notified().await;
    let (wall, cpu) = (t0.elapsed(), cpu_seconds(false) - c0);
    stop.cancel();
    handle.await.expect("join").expect("worker");
    (wall, cpu)
}

/// The SDK alone, as the yardstick for weir's own share: every shard read with plain
/// `GetRecords` calls (10,000 records each, the shards concurrently, no pause), the
/// records counted and dropped. Returns wall and CPU time of this process.
async fn sdk_alone(client: aws_sdk_kinesis::Client, stream: &str, n: u64) -> (Duration, f64) {
    let shards = client.list_shards().stream_name(stream).send().await.expect("list shards");
    let ids: Vec<String> = shards.shards().iter().map(|s| s.shard_id().to_owned()).collect();
    let (t0, c0) = (Instant::now(), cpu_seconds(false));
    let mut tasks = Vec::new();
    for id in ids {
        let (client, stream) = (client.clone(), stream.to_owned());
        tasks.push(tokio::spawn(async move {
            let it = client
                .get_shard_iterator()
                .stream_name(&stream)
                .shard_id(&id)
                .shard_iterator_type(aws_sdk_kinesis::types::ShardIteratorType::TrimHorizon)
                .send()
                .await
                .expect("iterator");
            let mut iterator = it.shard_iterator().map(str::to_owned);
            let mut count = 0u64;
            while let Some(it) = iterator {
                let out = client.get_records().shard_iterator(it).limit(SDK_LIMIT).send().await.expect("get records");
                count += out.records().len() as u64;
                if out.records().is_empty() && out.millis_behind_latest() == Some(0) {
                    break;
                }
                iterator = out.next_shard_iterator().map(str::to_owned);
            }
            count
        }));
    }
    let mut total = 0;
    for t in tasks {
        total += t.await.expect("join");
    }
    assert_eq!(total, n, "the SDK read every record");
    (t0.elapsed(), cpu_seconds(false) - c0)
}

/// The records weir's polling asks each call for here, once it has seen their size:
/// its default 1 MiB over 1 KB of data, a key of about 5 bytes and 256 bytes of counted
/// overhead. The SDK alone reads the same responses.
const SDK_LIMIT: i32 = (1 << 20) / (1_024 + 5 + 256);

#[tokio::main]
async fn main() {
    let full = std::env::args().any(|a| a == "--bench");
    let n: u64 = if full { 100_000 } else { 2_000 };
    let emu = Emulator::start("ferrokinesis", &[]);
    let client = kinesis(&emu.endpoint).await;
    create_stream(&client, "bench", 4).await;
    put_kilobyte_records(&client, "bench", n).await;

    let efo = read_all(client.clone(), "bench", Some("bench-efo"), n).await;
    let polling = read_all(client.clone(), "bench", None, n).await;
    let sdk = sdk_alone(client, "bench", n).await;
    println!("\nRead of {n} records of 1 KB from ferrokinesis, 4 shards, one worker");
    println!("{:<22} {:>12} {:>12} {:>22}", "mode", "seconds", "records/s", "CPU-s per 100k records");
    for (mode, (wall, cpu)) in
        [("enhanced fan-out", efo), ("polling (GetRecords)", polling), ("SDK alone (polling)", sdk)]
    {
        let rate = n as f64 / wall.as_secs_f64();
        println!("{mode:<22} {:>12.2} {rate:>12.0} {:>22.2}", wall.as_secs_f64(), cpu * 100_000.0 / n as f64);
    }
    println!("EFO/polling throughput ratio: {:.2}", polling.0.as_secs_f64() / efo.0.as_secs_f64());
    println!("weir polling / SDK alone, CPU per record: {:.2}", polling.1 / sdk.1);
}
