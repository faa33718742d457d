//! A replay window through the real runtime: records arrive in three waves (before,
//! inside and after the window) with a split inside the window; a worker started at
//! `AT_TIMESTAMP(from)` with a [`WindowReader`] ending at `to`, in its own lease table,
//! delivers exactly the records of the window, follows the split's children, and ends
//! every lease.
#![allow(clippy::unwrap_used, clippy::print_stdout)] // a test: a failed expectation is a failed test
mod common;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use common::{config, eventually};
use weir_core::ports::LeaseTable;
use weir_core::{Checkpoint, Clock};
use weir_local::{MemoryStream, StreamOptions};
use weir_runtime::{TokioClock, WindowReader, Worker};
use weir_testkit::{AckMode, MemoryLeaseTable, RecordingConsumer};

#[tokio::test(start_paused = true)]
async fn a_window_across_a_split_is_read_exactly() {
    let clock = Arc::new(TokioClock::new());
    let stream =
        MemoryStream::new(StreamOptions { shards: 2, max_batch: 7, subscription_lifetime: None }, clock.clone());
    let put = |wave: &str, n: usize| {
        for i in 0..n {
            stream.put(&format!("k{i}"), Bytes::from(format!("{wave}-{i}")));
        }
    };
    put("before", 50);
    tokio::time::advance(Duration::from_secs(10)).await;
    let from = clock.now();
    put("inside", 50);
    let first = stream.open_shards()[0].clone();
    stream.split(&first).unwrap();
    put("inside-after-split", 50);
    tokio::time::advance(Duration::from_secs(10)).await;
    let to = clock.now();
    put("after", 50);
    tokio::time::advance(Duration::from_secs(10)).await;

    let table: Arc<dyn LeaseTable> = Arc::new(MemoryLeaseTable::new());
    let mut c = config("replayer");
    c.initial_position = Checkpoint::AtTimestamp(from);
    let reader = Arc::new(WindowReader::new(Arc::new(stream.clone()), to, clock.clone(), true));
    let (consumer, control) = RecordingConsumer::new("replay", AckMode::Immediately);
    let worker =
        Worker::new(c, table.clone(), reader, Arc::new(stream.clone()), vec![Box::new(consumer)], clock.clone())
            .unwrap();
    let stop = tokio_util::sync::CancellationToken::new();
    let run = tokio::spawn(worker.run(stop.clone()));
    eventually("every lease ended", Duration::from_secs(120), || {
        let table = table.clone();
        async move {
            let leases = table.list().await.unwrap();
            leases.len() == 4 && leases.iter().all(|l| l.ended)
        }
    })
    .await;
    stop.cancel();
    run.await.unwrap().unwrap();

    let got: Vec<String> =
        control.recorded().records.iter().map(|(_, _, d)| String::from_utf8(d.to_vec()).unwrap()).collect();
    let unique: BTreeSet<&String> = got.iter().collect();
    assert_eq!(unique.len(), got.len(), "no record twice");
    let want: BTreeSet<String> =
        (0..50).flat_map(|i| [format!("inside-{i}"), format!("inside-after-split-{i}")]).collect();
    assert_eq!(unique.into_iter().cloned().collect::<BTreeSet<_>>(), want, "exactly the window");
}
