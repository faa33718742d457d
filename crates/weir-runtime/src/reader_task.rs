//! A shard read that survives errors: it reopens after expiry (at once), throttling,
//! resource-in-use and transient errors (with backoff and jitter), always from after
//! the last record it delivered, so nothing is skipped or repeated.

use std::sync::Arc;

use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use weir_core::ports::{ReadError, ReadMode, ShardReader};
use weir_core::{RecordBatch, ShardId, StartingPosition};

use crate::Backoff;

pub(crate) enum ReadEvent {
    Batch(RecordBatch),
    /// A failure retrying will not fix quickly; the read keeps trying with the longest
    /// backoff, the owner reports it.
    Failing(ReadError),
}

/// An owned background read; dropping it stops the read.
pub(crate) struct ReaderTask {
    pub rx: mpsc::Receiver<ReadEvent>,
    handle: JoinHandle<()>,
}

impl Drop for ReaderTask {
    fn drop(&mut self) {
        self.handle.abort();
    }
}

fn kind(e: &ReadError) -> &'static str {
    match e {
        ReadError::Throttled(_) => "throttled",
        ReadError::ResourceInUse(_) => "resource_in_use",
        ReadError::Expired => "expired",
        ReadError::ShardNotFound(_) => "shard_not_found",
        ReadError::Transient(_) => "transient",
        ReadError::Fatal(_) => "fatal",
    }
}

pub(crate) fn spawn_reader(
    reader: Arc<dyn ShardReader>,
    shard: ShardId,
    start: StartingPosition,
    mode: ReadMode,
    mut backoff: Backoff,
    prefetch: usize,
) -> ReaderTask {
    let (tx, rx) = mpsc::channel(prefetch.max(1));
    let handle = tokio::spawn(async move {
        let mut pos = start;
        loop {
            let error = match reader.open(&shard, &pos, mode).await {
                Err(e) => e,
                Ok(mut sub) => loop {
                    match sub.next().await {
                        Ok(Some(batch)) => {
                            backoff.reset();
                            if let Some(last) = batch.last_position() {
                                pos = StartingPosition::AfterSequenceNumber(last.sequence.clone());
                            }
                            let end = batch.is_shard_end();
                            if tx.send(ReadEvent::Batch(batch)).await.is_err() || end {
                                return;
                            }
                        }
                        Ok(None) => break ReadError::Expired,
                        Err(e) => break e,
                    }
                },
            };
            metrics::counter!(crate::metrics::READ_ERRORS, "kind" => kind(&error)).increment(1);
            tracing::debug!(%shard, error = %error, "read interrupted; reopening");
            let delay = match &error {
                ReadError::Expired => None,
                e if e.is_retryable() => Some(backoff.next_delay()),
                _ => {
                    if tx.send(ReadEvent::Failing(error)).await.is_err() {
                        return;
                    }
                    // Longest delay for errors that need an operator.
                    while backoff.attempts() < 30 {
                        backoff.next_delay();
                    }
                    Some(backoff.next_delay())
                }
            };
            if let Some(d) = delay {
                tokio::time::sleep(d).await;
            }
        }
    });
    ReaderTask { rx, handle }
}
