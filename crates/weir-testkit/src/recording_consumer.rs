use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use bytes::Bytes;
use tokio::sync::watch;
use weir_core::{
    Acks, CloseReason, Consumer, ConsumerError, ExtendedSequenceNumber, RecordBatch, ShardContext, ShardId, Timestamp,
};

/// When a [`RecordingConsumer`] acknowledges.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AckMode {
    /// At the end of every batch.
    Immediately,
    /// On the next tick (acknowledgement lag).
    OnTick,
    /// Only when the shard closes with a flushing reason.
    OnClose,
}

/// One thing that happened to a [`RecordingConsumer`], for ordering checks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A shard opened.
    Open,
    /// A batch with this many records was handed over (recorded on entry, before any
    /// stall or injected failure).
    Batch(usize),
    /// A shard closed.
    Close(CloseReason),
}

/// What a [`RecordingConsumer`] saw and did.
#[derive(Debug, Default, Clone)]
pub struct Recorded {
    /// Every record delivered (shard, position, data, time of delivery by the clock).
    pub records: Vec<(ShardId, ExtendedSequenceNumber, Bytes)>,
    /// Shards opened, in order.
    pub opens: Vec<ShardContext>,
    /// Shards closed, in order.
    pub closes: Vec<(ShardId, CloseReason)>,
    /// Acknowledgements sent.
    pub acks: Vec<(ShardId, ExtendedSequenceNumber)>,
    /// `on_batch` calls that failed on purpose.
    pub injected_failures: u32,
    /// Everything in order, with the tokio time it happened.
    pub timeline: Vec<(tokio::time::Instant, ShardId, Event)>,
}

impl Recorded {
    /// Positions delivered for one shard.
    pub fn positions(&self, shard: &ShardId) -> Vec<ExtendedSequenceNumber> {
        self.records.iter().filter(|(s, _, _)| s == shard).map(|(_, p, _)| p.clone()).collect()
    }
}

/// Handle to steer a [`RecordingConsumer`] from a test.
#[derive(Debug, Clone)]
pub struct ConsumerControl {
    recorded: Arc<Mutex<Recorded>>,
    stall: Arc<watch::Sender<bool>>,
    fail_next: Arc<Mutex<(u32, bool)>>,
    mode: Arc<Mutex<AckMode>>,
}

impl ConsumerControl {
    /// A copy of what was recorded.
    pub fn recorded(&self) -> Recorded {
        self.recorded.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Makes `on_batch` wait until [`ConsumerControl::resume`].
    pub fn stall(&self) {
        self.stall.send_replace(true);
    }

    /// Ends a stall.
    pub fn resume(&self) {
        self.stall.send_replace(false);
    }

    /// Makes the next `n` `on_batch` calls fail (or panic, with `panic`).
    pub fn fail_next(&self, n: u32, panic: bool) {
        *self.fail_next.lock().unwrap_or_else(|p| p.into_inner()) = (n, panic);
    }

    /// Changes when acknowledgements are sent.
    pub fn set_ack_mode(&self, mode: AckMode) {
        *self.mode.lock().unwrap_or_else(|p| p.into_inner()) = mode;
    }
}

/// A consumer that records every delivery, for tests. Steered through a
/// [`ConsumerControl`].
pub struct RecordingConsumer {
    name: String,
    control: ConsumerControl,
    stall_rx: watch::Receiver<bool>,
    pending: BTreeMap<ShardId, ExtendedSequenceNumber>,
}

impl RecordingConsumer {
    /// A consumer named `name` acknowledging in `mode`, and its control handle.
    pub fn new(name: &str, mode: AckMode) -> (Self, ConsumerControl) {
        let (tx, rx) = watch::channel(false);
        let control = ConsumerControl {
            recorded: Arc::default(),
            stall: Arc::new(tx),
            fail_next: Arc::default(),
            mode: Arc::new(Mutex::new(mode)),
        };
        let consumer = Self { name: name.to_owned(), control: control.clone(), stall_rx: rx, pending: BTreeMap::new() };
        (consumer, control)
    }

    fn ack(&mut self, shard: &ShardId, acks: &dyn Acks) {
        if let Some(p) = self.pending.remove(shard) {
            acks.durable(shard, &p);
            self.lock().acks.push((shard.clone(), p));
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Recorded> {
        self.control.recorded.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn mode(&self) -> AckMode {
        *self.control.mode.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[async_trait]
impl Consumer for RecordingConsumer {
    fn name(&self) -> &str {
        &self.name
    }

    async fn on_shard_open(&mut self, shard: &ShardContext) -> Result<(), ConsumerError> {
        let mut rec = self.lock();
        rec.opens.push(shard.clone());
        rec.timeline.push((tokio::time::Instant::now(), shard.shard_id.clone(), Event::Open));
        Ok(())
    }

    async fn on_batch(&mut self, batch: &RecordBatch, acks: &dyn Acks) -> Result<(), ConsumerError> {
        self.lock().timeline.push((
            tokio::time::Instant::now(),
            batch.shard_id.clone(),
            Event::Batch(batch.records.len()),
        ));
        while *self.stall_rx.borrow_and_update() {
            if self.stall_rx.changed().await.is_err() {
                break;
            }
        }
        let fail = {
            let mut f = self.control.fail_next.lock().unwrap_or_else(|p| p.into_inner());
            if f.0 > 0 {
                f.0 -= 1;
                Some(f.1)
            } else {
                None
            }
        };
        if let Some(panic) = fail {
            self.lock().injected_failures += 1;
            if panic {
                panic!("injected consumer panic");
            }
            return Err(ConsumerError::msg("injected consumer failure"));
        }
        {
            let mut rec = self.lock();
            for r in &batch.records {
                rec.records.push((batch.shard_id.clone(), r.position.clone(), r.data.clone()));
            }
        }
        if let Some(last) = batch.last_position() {
            self.pending.insert(batch.shard_id.clone(), last.clone());
        }
        if self.mode() == AckMode::Immediately {
            self.ack(&batch.shard_id, acks);
        }
        Ok(())
    }

    async fn on_tick(&mut self, _now: Timestamp, acks: &dyn Acks) -> Result<(), ConsumerError> {
        if self.mode() == AckMode::OnTick {
            let shards: Vec<ShardId> = self.pending.keys().cloned().collect();
            for s in shards {
                self.ack(&s, acks);
            }
        }
        Ok(())
    }

    async fn on_shard_close(
        &mut self,
        shard: &ShardId,
        reason: CloseReason,
        acks: &dyn Acks,
    ) -> Result<(), ConsumerError> {
        {
            let mut rec = self.lock();
            rec.closes.push((shard.clone(), reason));
            rec.timeline.push((tokio::time::Instant::now(), shard.clone(), Event::Close(reason)));
        }
        if reason.should_flush() {
            self.ack(shard, acks);
        } else {
            self.pending.remove(shard);
        }
        Ok(())
    }
}
