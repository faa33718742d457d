//! One shard's processor task: it owns the shard's child process and serves the
//! shard's jobs in order (batches, then the close), so each shard's child runs at the
//! same time as the others, as the KCL runs each shard's record processor.
//!
//! ```text
//! jobs ─▶ Batch ─▶ (start child: initialize) ─▶ processRecords ─▶ done / failed
//!      ─▶ Close ─▶ shardEnded | shutdownRequested, leaseLost | leaseLost ─▶ stop child ─▶ task ends
//! channel closed (the consumer went) ─▶ stop child ─▶ task ends
//! ```
//! A batch whose exchange fails stops the child; the batches queued behind it are no
//! longer wanted (the runtime delivers them again after the last finished one) and are
//! skipped; the next batch starts a new child, initialised at the last checkpoint.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use weir_core::{
    Checkpoint, CheckpointError, CloseReason, ConsumerError, DeferredBatch, ExtendedSequenceNumber, RecordBatch,
    SequenceNumber, ShardAcks, ShardId,
};

use super::child::{CheckpointRequest, Child, ChildError, Spawn, Verdict};
use super::protocol::{JsonRecord, ToChild};

/// What every shard's task of one consumer shares.
pub(super) struct Settings {
    pub name: String,
    pub command: Vec<String>,
    pub cwd: Option<PathBuf>,
    pub env: Vec<(String, String)>,
    pub timeout: Duration,
    pub shutdown_grace: Duration,
}

/// A job for a shard's task, served in order.
pub(super) enum Job {
    /// Process these records (never empty).
    Batch { batch: RecordBatch, finish: Finish, acks: Arc<dyn ShardAcks> },
    /// Close the shard; the task ends after answering `Ok` (or any answer to `LeaseLost`).
    Close { reason: CloseReason, acks: Option<Arc<dyn ShardAcks>>, reply: oneshot::Sender<Result<(), ConsumerError>> },
}

/// How a batch's outcome reaches the runtime.
pub(super) enum Finish {
    /// A deferred batch: the runtime learns when it is done.
    Later(Box<dyn DeferredBatch>),
    /// `on_batch` waits for the answer (a runtime that cannot defer).
    Now(oneshot::Sender<Result<(), ConsumerError>>),
}

impl Finish {
    fn wanted(&self) -> bool {
        match self {
            Finish::Later(d) => d.wanted(),
            Finish::Now(reply) => !reply.is_closed(),
        }
    }

    fn finish(self, result: Result<(), ConsumerError>) {
        match (self, result) {
            (Finish::Later(d), Ok(())) => d.done(),
            (Finish::Later(d), Err(e)) => d.failed(e),
            (Finish::Now(reply), r) => {
                let _ = reply.send(r);
            }
        }
    }
}

/// How a checkpoint request is judged.
#[derive(Clone, Copy)]
enum Phase {
    /// Records were delivered: a checkpoint up to the last of them is allowed.
    Processing,
    /// In `shardEnded`: a checkpoint without a sequence number finishes the shard.
    ShardEnded,
    /// After `leaseLost`: every checkpoint is refused.
    LeaseLost,
}

/// Where a shard's processor stands.
#[derive(Debug, Clone)]
struct Positions {
    /// The checkpoint: the shard's when it opened, then the child's last accepted one.
    checkpoint: Checkpoint,
    /// The last record sent to a child.
    delivered: Option<ExtendedSequenceNumber>,
}

/// Judges a child's checkpoint request; `Ok(Some(p))` acknowledges `p`.
fn judge(
    request: &CheckpointRequest,
    at: &Positions,
    phase: Phase,
) -> Result<Option<ExtendedSequenceNumber>, &'static str> {
    if matches!(phase, Phase::LeaseLost) {
        return Err("ShutdownException");
    }
    let target = match &request.0 {
        None => match &at.delivered {
            Some(p) => p.clone(),
            // Nothing delivered: nothing to move (allowed, as a no-op).
            None => return Ok(None),
        },
        Some(text) => {
            let Ok(sequence) = SequenceNumber::parse(text) else { return Err("IllegalArgumentException") };
            ExtendedSequenceNumber::new(sequence, request.1.unwrap_or(0))
        }
    };
    let beyond_delivered = at.delivered.as_ref().is_none_or(|d| &target > d);
    let behind_checkpoint = matches!(&at.checkpoint, Checkpoint::At(c) if &target < c);
    if beyond_delivered || behind_checkpoint {
        return Err("IllegalArgumentException");
    }
    Ok(Some(target))
}

/// One shard's processor: its child (when running) and positions.
pub(super) struct ShardTask {
    settings: Arc<Settings>,
    shard: ShardId,
    child: Option<Child>,
    at: Positions,
    /// A batch failed or was skipped since the last one processed: the runtime delivers
    /// it again, so a shard-end close now is early (the runtime checks that before it
    /// sends the close, but a deferred batch can fail after).
    owed: bool,
}

impl ShardTask {
    pub(super) fn new(settings: Arc<Settings>, shard: ShardId, checkpoint: Checkpoint) -> Self {
        Self { settings, shard, child: None, at: Positions { checkpoint, delivered: None }, owed: false }
    }

    /// Serves `jobs` until the shard closes or the channel does; the child is stopped
    /// before it returns.
    pub(super) async fn run(mut self, mut jobs: mpsc::UnboundedReceiver<Job>) {
        // Started at once, so a worker's children start together; a failure here is
        // the first batch's to report (it tries again).
        if let Err(e) = self.ensure_child().await {
            tracing::warn!(consumer = %self.settings.name, shard = %self.shard, error = %e, "processor did not start");
        }
        while let Some(job) = jobs.recv().await {
            match job {
                Job::Batch { batch, finish, acks } => {
                    // Not wanted: an earlier batch failed or the shard went; the runtime
                    // delivers it again if it still needs to.
                    if !finish.wanted() {
                        self.owed = true;
                        continue;
                    }
                    let result = self.process(&batch, acks.as_ref()).await;
                    self.owed = result.is_err();
                    finish.finish(result);
                }
                Job::Close { reason, acks, reply } => {
                    let result = self.close(reason, acks.as_deref()).await;
                    let last = result.is_ok() || reason == CloseReason::LeaseLost;
                    let _ = reply.send(result);
                    if last {
                        break;
                    }
                }
            }
        }
        self.stop_child().await;
    }

    fn failure(&self, e: ChildError, tail: String) -> ConsumerError {
        let tail = if tail.is_empty() { String::new() } else { format!("; its stderr ended with:\n{tail}") };
        ConsumerError::msg(format!("multilang {} on {}: {e}{tail}", self.settings.name, self.shard))
    }

    /// The shard's child, started and initialised if there is none.
    async fn ensure_child(&mut self) -> Result<(), ConsumerError> {
        if self.child.is_some() {
            return Ok(());
        }
        let s = &self.settings;
        let spawn = Spawn {
            command: &s.command,
            cwd: s.cwd.as_deref(),
            env: &s.env,
            consumer: &s.name,
            shard: self.shard.as_str(),
        };
        let mut child = Child::spawn(&spawn).map_err(|e| ConsumerError::msg(format!("multilang {}: {e}", s.name)))?;
        let init = ToChild::initialize(self.shard.as_str(), &self.at.checkpoint);
        let refuse = &mut |_: CheckpointRequest| -> Verdict<'static> {
            Box::pin(std::future::ready(Some("InvalidStateException".to_owned())))
        };
        if let Err(e) = child.exchange(&init, s.timeout, refuse).await {
            let tail = child.stderr_tail();
            child.stop(s.shutdown_grace).await;
            return Err(self.failure(e, tail));
        }
        tracing::debug!(consumer = %s.name, shard = %self.shard, "processor started");
        self.child = Some(child);
        Ok(())
    }

    async fn process(&mut self, batch: &RecordBatch, acks: &dyn ShardAcks) -> Result<(), ConsumerError> {
        let Some(last) = batch.last_position() else { return Ok(()) };
        self.ensure_child().await?;
        let message = ToChild::ProcessRecords {
            records: batch.records.iter().map(JsonRecord::of).collect(),
            millis_behind_latest: batch.millis_behind_latest,
        };
        let previous = self.at.delivered.replace(last.clone());
        let r = self.exchange(message, Phase::Processing, Some(acks)).await;
        if r.is_err() {
            // The batch will be delivered again: the child did not finish it.
            self.at.delivered = previous;
        }
        r.map(|_| ())
    }

    /// Sends `message` to the child, judging its checkpoints in `phase`; on failure the
    /// child is stopped. Returns whether the child checkpointed without a sequence
    /// number (the shard-end checkpoint). `acks` is `None` once the lease has gone.
    async fn exchange(
        &mut self,
        message: ToChild,
        phase: Phase,
        acks: Option<&dyn ShardAcks>,
    ) -> Result<bool, ConsumerError> {
        let (timeout, grace) = (self.settings.timeout, self.settings.shutdown_grace);
        let Some(mut child) = self.child.take() else { return Ok(false) };
        let mut ended = false;
        let at = &mut self.at;
        // The last checkpoint stored during this exchange: only a stored one becomes
        // the child's checkpoint (where a restarted child starts, and what later
        // requests are judged against), as the KCL advances its checkpointer only once
        // the lease table write returns.
        let stored = std::sync::Mutex::new(None::<ExtendedSequenceNumber>);
        let stored = &stored;
        // The reply waits for the checkpoint to be stored, as the KCL's does
        // (`ShardRecordProcessorCheckpointer` answers after the lease table write):
        // a processor told "saved" is never started again before that position.
        let mut judged = |request: CheckpointRequest| -> Verdict<'_> {
            if let Some(p) = stored.lock().ok().and_then(|mut s| s.take()) {
                at.checkpoint = Checkpoint::At(p);
            }
            match judge(&request, at, phase) {
                Err(name) => Box::pin(std::future::ready(Some(name.to_owned()))),
                Ok(position) => {
                    if request.0.is_none() && matches!(phase, Phase::ShardEnded) {
                        ended = true;
                    }
                    let Some(p) = position else { return Box::pin(std::future::ready(None)) };
                    Box::pin(async move {
                        let Some(acks) = acks else { return Some("ShutdownException".to_owned()) };
                        match acks.checkpoint(&p).await {
                            Ok(()) => {
                                if let Ok(mut s) = stored.lock() {
                                    *s = Some(p);
                                }
                                None
                            }
                            Err(CheckpointError::NotHeld(_)) => Some("ShutdownException".to_owned()),
                            Err(CheckpointError::Invalid(_)) => Some("IllegalArgumentException".to_owned()),
                            Err(CheckpointError::Store(_)) => Some("KinesisClientLibDependencyException".to_owned()),
                        }
                    })
                }
            }
        };
        let exchanged = child.exchange(&message, timeout, &mut judged).await;
        if let Some(p) = stored.lock().ok().and_then(|mut s| s.take()) {
            self.at.checkpoint = Checkpoint::At(p);
        }
        match exchanged {
            Ok(()) => {
                self.child = Some(child);
                Ok(ended)
            }
            Err(e) => {
                let tail = child.stderr_tail();
                child.stop(grace).await;
                Err(self.failure(e, tail))
            }
        }
    }

    async fn close(&mut self, reason: CloseReason, acks: Option<&dyn ShardAcks>) -> Result<(), ConsumerError> {
        match reason {
            CloseReason::ShardEnded => {
                if self.owed {
                    return Err(ConsumerError::msg(format!(
                        "multilang {} on {}: a batch before the shard end failed; it is delivered again first",
                        self.settings.name, self.shard
                    )));
                }
                self.ensure_child().await?;
                match self.exchange(ToChild::ShardEnded {}, Phase::ShardEnded, acks).await? {
                    true => Ok(()),
                    false => Err(ConsumerError::msg(format!(
                        "multilang {} on {}: the processor did not checkpoint in shardEnded \
                         (call checkpointer.checkpoint() there, as KCL requires); the shard stays open",
                        self.settings.name, self.shard
                    ))),
                }
            }
            CloseReason::Handoff | CloseReason::Shutdown => {
                if self.child.is_none() {
                    return Ok(());
                }
                self.exchange(ToChild::ShutdownRequested {}, Phase::Processing, acks).await?;
                // The lease goes once the shard closes: the processor then hears
                // leaseLost, as the KCL's processors do after shutdownRequested.
                if self.child.is_some()
                    && let Err(e) = self.exchange(ToChild::LeaseLost {}, Phase::LeaseLost, None).await
                {
                    tracing::warn!(consumer = %self.settings.name, shard = %self.shard, error = %e, "leaseLost after shutdownRequested");
                }
                Ok(())
            }
            CloseReason::LeaseLost => {
                if self.child.is_some()
                    && let Err(e) = self.exchange(ToChild::LeaseLost {}, Phase::LeaseLost, None).await
                {
                    tracing::warn!(consumer = %self.settings.name, shard = %self.shard, error = %e, "leaseLost");
                }
                Ok(())
            }
        }
    }

    async fn stop_child(&mut self) {
        if let Some(child) = self.child.take() {
            child.stop(self.settings.shutdown_grace).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(n: u128) -> ExtendedSequenceNumber {
        ExtendedSequenceNumber::new(SequenceNumber::from_u128(n), 0)
    }

    /// Fails its first checkpoint as a lease table that is down does, then stores.
    struct FlakyStore(std::sync::Mutex<Vec<ExtendedSequenceNumber>>);

    #[async_trait::async_trait]
    impl ShardAcks for FlakyStore {
        fn durable(&self, _: &ExtendedSequenceNumber) {}
        async fn checkpoint(&self, p: &ExtendedSequenceNumber) -> Result<(), CheckpointError> {
            let mut calls = self.0.lock().unwrap();
            calls.push(p.clone());
            if calls.len() == 1 { Err(CheckpointError::Store("the table is down".into())) } else { Ok(()) }
        }
    }

    /// A checkpoint the store refused is not the child's checkpoint: a child started
    /// again starts where the last stored one is (here, where the shard began), as the
    /// KCL's checkpointer advances only once the write returns.
    #[tokio::test]
    async fn a_refused_checkpoint_is_not_where_a_new_child_starts() {
        let dir = tempfile::tempdir().unwrap();
        let script = r#"
import json, os, sys
def send(m):
    sys.stdout.write(json.dumps(m) + "\n"); sys.stdout.flush()
for line in sys.stdin:
    m = json.loads(line)
    a = m["action"]
    if a == "initialize":
        with open(os.environ["OUT"], "a") as f:
            f.write(str(m.get("sequenceNumber")) + "\n")
    elif a == "processRecords":
        send({"action": "checkpoint", "sequenceNumber": m["records"][-1]["sequenceNumber"], "subSequenceNumber": None})
        reply = json.loads(sys.stdin.readline())
        if reply.get("error"):
            sys.exit(3)
    send({"action": "status", "responseFor": a})
"#;
        let out = dir.path().join("inits");
        let settings = Arc::new(Settings {
            name: "py".into(),
            command: vec!["python3".into(), "-c".into(), script.into()],
            cwd: None,
            env: vec![("OUT".into(), out.display().to_string())],
            timeout: Duration::from_secs(60),
            shutdown_grace: Duration::from_secs(5),
        });
        let mut task = ShardTask::new(settings, ShardId::new("shardId-000000000000"), Checkpoint::TrimHorizon);
        let acks = FlakyStore(std::sync::Mutex::new(Vec::new()));
        let batch = |n: u128| RecordBatch {
            shard_id: ShardId::new("shardId-000000000000"),
            records: vec![weir_core::Record {
                partition_key: "pk".into(),
                position: at(n),
                approximate_arrival: weir_core::Timestamp::from_millis(0),
                data: bytes::Bytes::from_static(b"{}"),
            }],
            millis_behind_latest: None,
            child_shards: None,
        };
        assert!(task.process(&batch(5), &acks).await.is_err(), "the child exits when its checkpoint is refused");
        task.process(&batch(5), &acks).await.unwrap();
        task.stop_child().await;
        let inits = std::fs::read_to_string(&out).unwrap();
        assert_eq!(
            inits, "TRIM_HORIZON\nTRIM_HORIZON\n",
            "the refused checkpoint is not where the second child starts"
        );
        assert_eq!(acks.0.lock().unwrap().len(), 2);
    }

    #[test]
    fn checkpoints_are_judged_as_kcl_does() {
        let state = Positions { checkpoint: Checkpoint::At(at(10)), delivered: Some(at(20)) };
        let p = Phase::Processing;
        assert_eq!(judge(&(None, None), &state, p), Ok(Some(at(20))));
        assert_eq!(judge(&(Some("15".into()), None), &state, p), Ok(Some(at(15))));
        assert_eq!(judge(&(Some("15".into()), Some(2)), &state, p).unwrap().unwrap().sub_sequence, 2);
        assert_eq!(judge(&(Some("21".into()), None), &state, p), Err("IllegalArgumentException"));
        assert_eq!(judge(&(Some("9".into()), None), &state, p), Err("IllegalArgumentException"));
        assert_eq!(judge(&(Some("x".into()), None), &state, p), Err("IllegalArgumentException"));
        assert_eq!(judge(&(None, None), &state, Phase::LeaseLost), Err("ShutdownException"));
        let fresh = Positions { checkpoint: Checkpoint::TrimHorizon, delivered: None };
        assert_eq!(judge(&(None, None), &fresh, Phase::ShardEnded), Ok(None));
        assert_eq!(judge(&(Some("1".into()), None), &fresh, p), Err("IllegalArgumentException"));
    }
}
