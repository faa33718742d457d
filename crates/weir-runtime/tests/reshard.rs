//! Split and merge during processing: parents are fully processed and checkpointed at
//! their end before any child starts; nothing is lost.
#![allow(clippy::unwrap_used, clippy::print_stdout)] // a test: a failed expectation is a failed test
mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use common::{Fleet, config, eventually, stream_data};
use weir_core::ports::LeaseTable;
use weir_core::{Acks, Checkpoint, CloseReason, Consumer, ConsumerError, RecordBatch, ShardContext, ShardId};
use weir_runtime::{TokioClock, Worker};
use weir_testkit::{AckMode, Event};

/// On every shard open, checks in the lease table that each parent has ended with
/// every consumer at `ShardEnd`.
struct ParentChecker {
    table: Arc<dyn LeaseTable>,
    violations: Arc<Mutex<Vec<String>>>,
    opened_children: Arc<Mutex<Vec<ShardId>>>,
}

#[async_trait]
impl Consumer for ParentChecker {
    fn name(&self) -> &str {
        "parent-checker"
    }
    async fn on_shard_open(&mut self, shard: &ShardContext) -> Result<(), ConsumerError> {
        for p in &shard.parents {
            let lease = self.table.get(p).await.unwrap().unwrap();
            let all_end = ["parent-checker", "a", "b"]
                .iter()
                .all(|c| lease.checkpoint_for(&(*c).into()) == &Checkpoint::ShardEnd);
            if !lease.ended || !all_end {
                self.violations
                    .lock()
                    .unwrap()
                    .push(format!("{} opened before parent {p} finished: {lease:?}", shard.shard_id));
            }
        }
        if !shard.parents.is_empty() {
            self.opened_children.lock().unwrap().push(shard.shard_id.clone());
        }
        Ok(())
    }
    async fn on_batch(&mut self, b: &RecordBatch, acks: &dyn Acks) -> Result<(), ConsumerError> {
        if let Some(l) = b.last_position() {
            acks.durable(&b.shard_id, l);
        }
        Ok(())
    }
    async fn on_shard_close(&mut self, _: &ShardId, _: CloseReason, _: &dyn Acks) -> Result<(), ConsumerError> {
        Ok(())
    }
}

#[tokio::test(start_paused = true)]
async fn split_and_merge_respect_parent_order() {
    // Consumer "b" acknowledges only on ticks and close: shard end must wait for it.
    let fleet = Fleet::new(2, 25, &[("a", AckMode::Immediately), ("b", AckMode::OnTick)]);
    let violations = Arc::new(Mutex::new(Vec::new()));
    let opened_children = Arc::new(Mutex::new(Vec::new()));
    let mut workers = Vec::new();
    let mut controls = Vec::new();
    for id in ["w1", "w2"] {
        let (a, ca) = weir_testkit::RecordingConsumer::new("a", AckMode::Immediately);
        let (b, cb) = weir_testkit::RecordingConsumer::new("b", AckMode::OnTick);
        controls.push((ca, cb));
        let checker = ParentChecker {
            table: fleet.table.clone(),
            violations: violations.clone(),
            opened_children: opened_children.clone(),
        };
        let w = Worker::new(
            config(id),
            fleet.table.clone(),
            fleet.reader.clone(),
            Arc::new(fleet.stream.clone()),
            vec![Box::new(a), Box::new(b), Box::new(checker)],
            Arc::new(TokioClock::new()),
        )
        .unwrap();
        let stop = tokio_util::sync::CancellationToken::new();
        let t = stop.clone();
        workers.push((tokio::spawn(async move { w.run(t).await.unwrap() }), stop));
    }
    let producer = fleet.produce(3_000, Duration::from_millis(10));
    tokio::time::sleep(Duration::from_secs(5)).await;
    let shards = fleet.stream.open_shards();
    let (c1, c2) = fleet.stream.split(&shards[0]).unwrap();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let merged = fleet.stream.merge(&c1, &c2).unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (c3, _c4) = fleet.stream.split(&shards[1]).unwrap();
    producer.await.unwrap();

    let want = stream_data(&fleet.stream);
    eventually("every record delivered to a and b", Duration::from_secs(600), || async {
        let got = |i: usize| {
            controls
                .iter()
                .map(|c| if i == 0 { c.0.recorded().records.len() } else { c.1.recorded().records.len() })
                .sum::<usize>()
        };
        got(0) >= 3_000 && got(1) >= 3_000
    })
    .await;
    eventually("parents ended", Duration::from_secs(120), || async {
        let leases = fleet.table.list().await.unwrap();
        [&shards[0], &c1, &c2, &shards[1]].iter().all(|k| leases.iter().any(|l| &&l.key == k && l.ended))
    })
    .await;
    assert!(violations.lock().unwrap().is_empty(), "{:?}", violations.lock().unwrap());
    let children = opened_children.lock().unwrap().clone();
    for c in [&c1, &c2, &merged, &c3] {
        assert!(children.contains(c), "child {c} was processed");
    }
    // Nothing lost, no duplicates, per shard in order (both workers together).
    for (i, name) in ["a", "b"].iter().enumerate() {
        for (shard, data) in &want {
            let mut got = Vec::new();
            for c in &controls {
                let rec = if i == 0 { c.0.recorded() } else { c.1.recorded() };
                got.extend(rec.records.iter().filter(|(s, _, _)| s == shard).map(|(_, p, d)| (p.clone(), d.clone())));
            }
            got.sort();
            got.dedup();
            let got: Vec<_> = got.into_iter().map(|(_, d)| d).collect();
            assert_eq!(&got, data, "{name} on {shard}");
        }
    }
    for (h, stop) in workers {
        stop.cancel();
        h.await.unwrap();
    }
}

/// The shard end is read while the consumer is stuck; the batch it was stuck on fails.
/// The close queued behind that batch must not be served (the consumer has not
/// finished the shard: its records come again on a catch-up read), so the consumer is
/// never handed a batch of a shard after closing it.
#[tokio::test(start_paused = true)]
async fn a_shard_is_not_closed_behind_a_failed_batch() {
    let mut fleet = Fleet::new(1, 10, &[("a", AckMode::Immediately)]);
    fleet.start("w1");
    fleet.produce(50, Duration::from_millis(20)).await.unwrap();
    let control = fleet.control("w1", "a");
    eventually("records flow", Duration::from_secs(60), || async { control.recorded().records.len() >= 50 }).await;
    control.stall();
    // The consumer gets stuck on the first of these; the rest queue behind it (fewer
    // than the queue's capacity, so the lane stays attached).
    fleet.produce(5, Duration::from_millis(20)).await.unwrap();
    let parent = fleet.stream.open_shards()[0].clone();
    fleet.stream.split(&parent).unwrap();
    // Everything queued behind the stuck batch fails, the end included.
    control.fail_next(1, false);
    let queued = |c: &weir_testkit::ConsumerControl| {
        c.recorded().timeline.iter().filter(|(_, s, e)| *s == parent && matches!(e, Event::Batch(_))).count()
    };
    let before = queued(&control);
    // The checkpoint ticks send the close once the end is read (it waits in the lane);
    // less than `detach_after` (5 s), so the lane is not detached as backed up.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(queued(&control), before, "still stuck");
    control.resume();
    eventually("the parent ends", Duration::from_secs(120), || async {
        fleet.table.get(&parent).await.unwrap().unwrap().ended
    })
    .await;
    let timeline = control.recorded().timeline;
    let first_close = timeline.iter().position(|(_, s, e)| *s == parent && matches!(e, Event::Close(_))).unwrap();
    let after: Vec<_> =
        timeline[first_close..].iter().filter(|(_, s, e)| *s == parent && matches!(e, Event::Batch(_))).collect();
    assert!(after.is_empty(), "batches after the close: {after:?}");
    assert_eq!(control.recorded().injected_failures, 1);
    common::assert_exactly_once_in_order(&fleet.stream, &control.recorded(), "after a failed end");
}

/// Holds back a consumer's acknowledgements past a position (`cap`) until released;
/// held ones go out on the first tick after the release. What it wraps acknowledges as
/// usual, at its close too: held acknowledgements of a shard arrive after the close
/// returned, which the runtime must wait for before it ends the shard.
#[derive(Default)]
struct AckGate {
    cap: Mutex<Option<weir_core::ExtendedSequenceNumber>>,
    held: Mutex<std::collections::BTreeMap<ShardId, weir_core::ExtendedSequenceNumber>>,
}

struct GatedAcks<'a> {
    inner: &'a dyn Acks,
    gate: &'a AckGate,
}

impl Acks for GatedAcks<'_> {
    fn durable(&self, shard: &ShardId, position: &weir_core::ExtendedSequenceNumber) {
        if self.gate.cap.lock().unwrap().as_ref().is_some_and(|cap| position > cap) {
            let mut held = self.gate.held.lock().unwrap();
            let slot = held.entry(shard.clone()).or_insert_with(|| position.clone());
            *slot = slot.clone().max(position.clone());
            return;
        }
        self.inner.durable(shard, position);
    }
}

struct LateAcks {
    inner: weir_testkit::RecordingConsumer,
    gate: Arc<AckGate>,
}

#[async_trait]
impl Consumer for LateAcks {
    fn name(&self) -> &str {
        self.inner.name()
    }
    async fn on_shard_open(&mut self, shard: &ShardContext) -> Result<(), ConsumerError> {
        self.inner.on_shard_open(shard).await
    }
    async fn on_batch(&mut self, batch: &RecordBatch, acks: &dyn Acks) -> Result<(), ConsumerError> {
        self.inner.on_batch(batch, &GatedAcks { inner: acks, gate: &self.gate }).await
    }
    async fn on_tick(&mut self, now: weir_core::Timestamp, acks: &dyn Acks) -> Result<(), ConsumerError> {
        if self.gate.cap.lock().unwrap().is_none() {
            let held = std::mem::take(&mut *self.gate.held.lock().unwrap());
            for (shard, position) in held {
                acks.durable(&shard, &position);
            }
        }
        self.inner.on_tick(now, &GatedAcks { inner: acks, gate: &self.gate }).await
    }
    async fn on_shard_close(
        &mut self,
        shard: &ShardId,
        reason: CloseReason,
        acks: &dyn Acks,
    ) -> Result<(), ConsumerError> {
        self.inner.on_shard_close(shard, reason, &GatedAcks { inner: acks, gate: &self.gate }).await
    }
}

/// A lane detached as backed up catches up by itself and reads to the shard end (the
/// live read has read the end meanwhile, so it never rejoins). The consumer closes the
/// shard and acknowledges the catch-up's last records only later: the shard end must
/// not be checkpointed before they are acknowledged. (Before the fix the shard counted
/// as done once the position the live read had sent before the detach was
/// acknowledged, and the shard end passed records nobody had acknowledged.)
#[tokio::test(start_paused = true)]
async fn a_catch_up_to_the_shard_end_is_acknowledged_before_the_end_is_checkpointed() {
    let fleet = Fleet::new(1, 10, &[]);
    let (recording, control) = weir_testkit::RecordingConsumer::new("a", AckMode::Immediately);
    let gate = Arc::new(AckGate::default());
    let mut c = config("w1");
    // Four batches in flight detach the lane at once.
    c.queue_capacity = 2;
    let worker = Worker::new(
        c,
        fleet.table.clone(),
        fleet.reader.clone(),
        Arc::new(fleet.stream.clone()),
        vec![Box::new(LateAcks { inner: recording, gate: gate.clone() })],
        Arc::new(TokioClock::new()),
    )
    .unwrap();
    let stats = worker.stats();
    let stop = tokio_util::sync::CancellationToken::new();
    let token = stop.clone();
    let handle = tokio::spawn(async move { worker.run(token).await.unwrap() });

    fleet.produce(20, Duration::ZERO).await.unwrap();
    eventually("records flow", Duration::from_secs(60), || async { control.recorded().records.len() >= 20 }).await;
    let parent = fleet.stream.open_shards()[0].clone();
    let lane = (parent.clone(), weir_core::ConsumerName::new("a"));
    // Stuck on the next batch, the consumer backs up and is detached; the rest of the
    // shard, its end included, is read by the live read without it.
    control.stall();
    fleet.produce(100, Duration::ZERO).await.unwrap();
    eventually("the lane is detached", Duration::from_secs(60), || async {
        stats.lanes().get(&lane).is_some_and(|l| l.detached)
    })
    .await;
    fleet.stream.split(&parent).unwrap();
    eventually("the live read reads every record", Duration::from_secs(60), || async {
        stats.reads().get(&parent).is_some_and(|r| r.records >= 120)
    })
    .await;
    // A few more polls of the live read, which returns the end after the last records.
    tokio::time::sleep(Duration::from_secs(3)).await;

    // Acknowledgements past the 110th record wait: the catch-up's last batches are
    // processed, and the shard closed, before they are acknowledged.
    let cap = fleet.stream.all_records()[109].1.position.clone();
    *gate.cap.lock().unwrap() = Some(cap.clone());
    control.resume();
    eventually("the consumer closes the shard", Duration::from_secs(120), || async {
        control.recorded().closes.contains(&(parent.clone(), CloseReason::ShardEnded))
    })
    .await;
    assert!(stats.lanes()[&lane].detached, "the catch-up, not the live read, took the consumer to the end");
    assert!(!gate.held.lock().unwrap().is_empty(), "the last acknowledgements are held");
    // Checkpoint ticks every second: five pass with the acknowledgements still held.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let lease = fleet.table.get(&parent).await.unwrap().unwrap();
    assert!(!lease.ended, "the shard ended before its last records were acknowledged: {lease:?}");
    match lease.checkpoint_for(&"a".into()) {
        Checkpoint::At(p) => assert!(p <= &cap, "checkpoint {p} passes the acknowledged {cap}"),
        other => panic!("checkpoint {other:?} passes the acknowledged {cap}"),
    }

    *gate.cap.lock().unwrap() = None;
    eventually("the shard ends once acknowledged", Duration::from_secs(60), || async {
        let lease = fleet.table.get(&parent).await.unwrap().unwrap();
        lease.ended && lease.checkpoint_for(&"a".into()) == &Checkpoint::ShardEnd
    })
    .await;
    common::assert_exactly_once_in_order(&fleet.stream, &control.recorded(), "after a catch-up to the end");
    stop.cancel();
    handle.await.unwrap();
}
