//! Shard ends of a replay close together ([`RuntimeConfig::close_ends_together`]):
//! archived objects read one after another (one open read at a time, a second a
//! batch) are closed for a consumer that acknowledges only at a close once the last
//! object has been read and every batch processed, not each at its own end (nor while
//! batches of other objects still wait in the consumer's queues); a consumer that
//! acknowledges on its own has its shards closed as they end. Either way every lease
//! ends, every record is delivered once.
#![allow(clippy::unwrap_used, clippy::print_stdout)] // a test: a failed expectation is a failed test
mod common;

use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use chrono_tz::Tz;
use common::{config, eventually};
use flate2::Compression;
use flate2::write::GzEncoder;
use weir_core::ports::{
    LeaseTable, ObjectSink, PutOptions, ReadError, ReadMode, ShardReader, ShardSubscription, StreamCatalog,
};
use weir_core::{CloseReason, RecordBatch, ShardId, StartingPosition, Timestamp};
use weir_runtime::archive::ArchiveSource;
use weir_runtime::{RuntimeConfig, TokioClock, Worker};
use weir_testkit::{AckMode, Event, MemoryLeaseTable, MemoryObjectSink, Recorded, RecordingConsumer};

const OBJECTS: usize = 5;
/// Three batches an object (the source reads 1,000 lines a batch).
const LINES: usize = 2_500;

/// A reader whose every batch takes a second of (paused) time.
struct Slow(Arc<ArchiveSource>);

struct SlowSub(Box<dyn ShardSubscription>);

#[async_trait]
impl ShardReader for Slow {
    async fn open(
        &self,
        shard: &ShardId,
        from: &StartingPosition,
        mode: ReadMode,
    ) -> Result<Box<dyn ShardSubscription>, ReadError> {
        Ok(Box::new(SlowSub(self.0.open(shard, from, mode).await?)))
    }
}

#[async_trait]
impl ShardSubscription for SlowSub {
    async fn next(&mut self) -> Result<Option<RecordBatch>, ReadError> {
        tokio::time::sleep(Duration::from_secs(1)).await;
        self.0.next().await
    }
}

async fn archive() -> Arc<ArchiveSource> {
    let sink: Arc<dyn ObjectSink> = Arc::new(MemoryObjectSink::new());
    for o in 0..OBJECTS {
        let mut gz = GzEncoder::new(Vec::new(), Compression::fast());
        for i in 0..LINES {
            writeln!(gz, "{{\"object\":{o},\"n\":{i}}}").unwrap();
        }
        let key = format!("a/s-1-2026-11-29-10-0{o}-00-{o}.gz");
        sink.put_if_absent(&key, Bytes::from(gz.finish().unwrap()), &PutOptions::default()).await.unwrap();
    }
    let (from, to) = (Timestamp::from_millis(1_795_000_000_000), Timestamp::from_millis(1_796_000_000_000));
    // One shard per object: how shards that end together close is what this tests.
    Arc::new(ArchiveSource::open(sink, "a/", from, to, Tz::UTC).await.unwrap().with_runs(u64::MAX, 1).with_max_open(1))
}

/// Replays the archive with `mode`; what the consumer saw, once every lease ended.
/// With `stalled`, the consumer takes no batch for that long, while reads go on.
async fn replay(mode: AckMode, together: bool, stalled: Option<Duration>) -> Recorded {
    let source = archive().await;
    let table: Arc<dyn LeaseTable> = Arc::new(MemoryLeaseTable::new());
    let mut c: RuntimeConfig = config("replayer");
    c.close_ends_together = together;
    let (consumer, control) = RecordingConsumer::new("archiver", mode);
    if stalled.is_some() {
        control.stall();
    }
    let catalog: Arc<dyn StreamCatalog> = source.clone();
    let worker = Worker::new(
        c,
        table.clone(),
        Arc::new(Slow(source)),
        catalog,
        vec![Box::new(consumer)],
        Arc::new(TokioClock::new()),
    )
    .unwrap();
    let stop = tokio_util::sync::CancellationToken::new();
    let run = tokio::spawn(worker.run(stop.clone()));
    if let Some(d) = stalled {
        tokio::time::sleep(d).await;
        control.resume();
    }
    eventually("every lease ended", Duration::from_secs(120), || {
        let table = table.clone();
        async move {
            let leases = table.list().await.unwrap();
            leases.len() == OBJECTS && leases.iter().all(|l| l.ended)
        }
    })
    .await;
    stop.cancel();
    run.await.unwrap().unwrap();
    let seen = control.recorded();
    assert_eq!(seen.records.len(), OBJECTS * LINES, "every record once");
    assert_eq!(seen.closes.len(), OBJECTS);
    assert!(seen.closes.iter().all(|(_, r)| *r == CloseReason::ShardEnded), "{:?}", seen.closes);
    seen
}

/// Whether a close came before the consumer's last batch.
fn closed_before_the_last_batch(seen: &Recorded) -> bool {
    let first_close = seen.timeline.iter().position(|(_, _, e)| matches!(e, Event::Close(_))).unwrap();
    let last_batch = seen.timeline.iter().rposition(|(_, _, e)| matches!(e, Event::Batch(_))).unwrap();
    first_close < last_batch
}

#[tokio::test(start_paused = true)]
async fn ended_objects_close_once_the_last_read_ended() {
    assert!(!closed_before_the_last_batch(&replay(AckMode::OnClose, true, None).await));
}

#[tokio::test(start_paused = true)]
async fn ended_objects_close_once_every_batch_read_is_processed() {
    // Every object is read (and queued for the consumer) long before it takes a batch.
    let seen = replay(AckMode::OnClose, true, Some(Duration::from_secs(30))).await;
    assert!(!closed_before_the_last_batch(&seen), "{:?}", seen.timeline);
}

#[tokio::test(start_paused = true)]
async fn without_it_each_object_closes_at_its_own_end() {
    assert!(closed_before_the_last_batch(&replay(AckMode::OnClose, false, None).await));
}

#[tokio::test(start_paused = true)]
async fn what_the_consumer_acknowledged_itself_closes_at_its_end() {
    assert!(closed_before_the_last_batch(&replay(AckMode::OnTick, true, None).await), "nothing to flush: no wait");
}
