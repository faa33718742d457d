//! `type = "multilang"`: KCL MultiLang record processors (Python `amazon_kclpy`,
//! Node.js `aws-kcl`, Ruby, .NET) run unchanged, one child process per shard as the
//! Java MultiLangDaemon runs them.
//!
//! A child's `checkpoint` is written to the lease table at once (the runtime's
//! [`weir_core::Checkpointer`]) and answered only once stored, as the KCL answers:
//! `ShutdownException` when the lease is no longer held; a processor that never
//! checkpoints never moves its checkpoint. Stdout lines that are not protocol messages
//! (JSON ones too: a processor logging JSON) are logged and skipped, as the KCL skips
//! them. A child that cannot start, exits or hangs past `timeout` fails the call: its
//! stderr tail is in the error, it is stopped, and the runtime retries with backoff (detaching the
//! consumer so the others keep flowing); the next call starts a new child, initialised
//! at the last checkpoint, which then receives the batch that failed. Records a child
//! answered `status` for are not sent again to its successor on this worker; a new
//! lease owner starts at the checkpoint, as in KCL.
//!
//! The runtime calls one consumer instance for one batch at a time, so a worker's
//! children process their shards in turn, not at once: a slow processor bounds the
//! worker's throughput (run more workers).

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Result, bail};
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use weir_core::{
    Acks, Checkpoint, CheckpointError, CloseReason, Consumer, ConsumerError, ExtendedSequenceNumber, RecordBatch,
    SequenceNumber, ShardContext, ShardId,
};

use super::child::{CheckpointRequest, Child, ChildError, Spawn, Verdict};
use super::protocol::{JsonRecord, ToChild};
use crate::plugin::{Context, Plugin};

/// `type = "multilang"`: a KCL MultiLang processor, one child process per shard.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MultiLangSection {
    /// The processor's command line, e.g. `["python3", "app.py"]`.
    pub command: Vec<String>,
    /// Working directory of the processes (default: weir's).
    #[serde(default)]
    pub cwd: Option<PathBuf>,
    /// Environment variables added for the processes.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Longest wait for a processor's `status` reply to one message (KCL's
    /// `timeoutInSeconds`); past it the processor counts as hung and is stopped.
    #[serde(default = "default_timeout", with = "humantime_serde")]
    pub timeout: Duration,
    /// How long a processor may take to exit after its stdin closes before it is killed.
    #[serde(default = "default_grace", with = "humantime_serde")]
    pub shutdown_grace: Duration,
}

fn default_timeout() -> Duration {
    Duration::from_secs(300)
}
fn default_grace() -> Duration {
    Duration::from_secs(5)
}

/// One shard's processor and its positions.
struct ShardState {
    child: Option<Child>,
    /// The checkpoint: the shard's when it opened, then the child's last accepted one.
    checkpoint: Checkpoint,
    /// The last record sent to a child.
    delivered: Option<ExtendedSequenceNumber>,
}

/// The multilang consumer.
pub struct MultiLang {
    name: String,
    section: MultiLangSection,
    env: Vec<(String, String)>,
    shards: HashMap<ShardId, ShardState>,
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

/// Judges a child's checkpoint request; `Ok(Some(p))` acknowledges `p`.
fn judge(
    request: &CheckpointRequest,
    state: &ShardState,
    phase: Phase,
) -> Result<Option<ExtendedSequenceNumber>, &'static str> {
    if matches!(phase, Phase::LeaseLost) {
        return Err("ShutdownException");
    }
    let target = match &request.0 {
        None => match &state.delivered {
            Some(p) => p.clone(),
            // Nothing delivered: nothing to move (allowed, as a no-op).
            None => return Ok(None),
        },
        Some(text) => {
            let Ok(sequence) = SequenceNumber::parse(text) else { return Err("IllegalArgumentException") };
            ExtendedSequenceNumber::new(sequence, request.1.unwrap_or(0))
        }
    };
    let beyond_delivered = state.delivered.as_ref().is_none_or(|d| &target > d);
    let behind_checkpoint = matches!(&state.checkpoint, Checkpoint::At(c) if &target < c);
    if beyond_delivered || behind_checkpoint {
        return Err("IllegalArgumentException");
    }
    Ok(Some(target))
}

impl MultiLang {
    fn failure(&self, shard: &ShardId, e: ChildError, tail: String) -> ConsumerError {
        let tail = if tail.is_empty() { String::new() } else { format!("; its stderr ended with:\n{tail}") };
        ConsumerError::msg(format!("multilang {} on {shard}: {e}{tail}", self.name))
    }

    /// The shard's child, started and initialised if there is none.
    async fn ensure_child(&mut self, shard: &ShardId) -> Result<(), ConsumerError> {
        let state = self.shards.entry(shard.clone()).or_insert_with(|| ShardState {
            child: None,
            checkpoint: Checkpoint::TrimHorizon,
            delivered: None,
        });
        if state.child.is_some() {
            return Ok(());
        }
        let spawn = Spawn {
            command: &self.section.command,
            cwd: self.section.cwd.as_deref(),
            env: &self.env,
            consumer: &self.name,
            shard: shard.as_str(),
        };
        let mut child =
            Child::spawn(&spawn).map_err(|e| ConsumerError::msg(format!("multilang {}: {e}", self.name)))?;
        let init = ToChild::initialize(shard.as_str(), &state.checkpoint);
        let refuse = &mut |_: CheckpointRequest| -> Verdict<'static> {
            Box::pin(std::future::ready(Some("InvalidStateException".to_owned())))
        };
        if let Err(e) = child.exchange(&init, self.section.timeout, refuse).await {
            let tail = child.stderr_tail();
            child.stop(self.section.shutdown_grace).await;
            return Err(self.failure(shard, e, tail));
        }
        tracing::debug!(consumer = %self.name, shard = %shard, "processor started");
        if let Some(s) = self.shards.get_mut(shard) {
            s.child = Some(child);
        }
        Ok(())
    }

    /// Sends `message` to the shard's child, judging its checkpoints in `phase`; on
    /// failure the child is stopped. Returns whether the child checkpointed without a
    /// sequence number (the shard-end checkpoint).
    async fn exchange(
        &mut self,
        shard: &ShardId,
        message: ToChild,
        phase: Phase,
        acks: &dyn Acks,
    ) -> Result<bool, ConsumerError> {
        let timeout = self.section.timeout;
        let grace = self.section.shutdown_grace;
        let Some(state) = self.shards.get_mut(shard) else { return Ok(false) };
        let Some(mut child) = state.child.take() else { return Ok(false) };
        let mut ended = false;
        let shard_id = shard.clone();
        // The reply waits for the checkpoint to be stored, as the KCL's does
        // (`ShardRecordProcessorCheckpointer` answers after the lease table write):
        // a processor told "saved" is never started again before that position.
        let mut judged = |request: CheckpointRequest| -> Verdict<'_> {
            match judge(&request, state, phase) {
                Err(name) => Box::pin(std::future::ready(Some(name.to_owned()))),
                Ok(position) => {
                    if request.0.is_none() && matches!(phase, Phase::ShardEnded) {
                        ended = true;
                    }
                    let Some(p) = position else { return Box::pin(std::future::ready(None)) };
                    state.checkpoint = Checkpoint::At(p.clone());
                    let shard = shard_id.clone();
                    Box::pin(async move {
                        let Some(checkpointer) = acks.checkpointer() else {
                            acks.durable(&shard, &p);
                            return None;
                        };
                        match checkpointer.checkpoint(&shard, &p).await {
                            Ok(()) => None,
                            Err(CheckpointError::NotHeld(_)) => Some("ShutdownException".to_owned()),
                            Err(CheckpointError::Invalid(_)) => Some("IllegalArgumentException".to_owned()),
                            Err(CheckpointError::Store(_)) => Some("KinesisClientLibDependencyException".to_owned()),
                        }
                    })
                }
            }
        };
        let result = child.exchange(&message, timeout, &mut judged).await;
        match result {
            Ok(()) => {
                if let Some(s) = self.shards.get_mut(shard) {
                    s.child = Some(child);
                }
                Ok(ended)
            }
            Err(e) => {
                let tail = child.stderr_tail();
                child.stop(grace).await;
                Err(self.failure(shard, e, tail))
            }
        }
    }

    async fn stop_child(&mut self, shard: &ShardId) {
        if let Some(child) = self.shards.get_mut(shard).and_then(|s| s.child.take()) {
            child.stop(self.section.shutdown_grace).await;
        }
    }
}

#[async_trait]
impl Consumer for MultiLang {
    fn name(&self) -> &str {
        &self.name
    }

    async fn on_shard_open(&mut self, shard: &ShardContext) -> Result<(), ConsumerError> {
        self.stop_child(&shard.shard_id).await;
        self.shards.insert(
            shard.shard_id.clone(),
            ShardState { child: None, checkpoint: shard.checkpoint.clone(), delivered: None },
        );
        self.ensure_child(&shard.shard_id).await
    }

    async fn on_batch(&mut self, batch: &RecordBatch, acks: &dyn Acks) -> Result<(), ConsumerError> {
        // As KCL without callProcessRecordsEvenForEmptyRecordList: no empty batches.
        let Some(last) = batch.last_position() else { return Ok(()) };
        self.ensure_child(&batch.shard_id).await?;
        let message = ToChild::ProcessRecords {
            records: batch.records.iter().map(JsonRecord::of).collect(),
            millis_behind_latest: batch.millis_behind_latest,
        };
        let previous = self.shards.get_mut(&batch.shard_id).and_then(|s| s.delivered.replace(last.clone()));
        let r = self.exchange(&batch.shard_id, message, Phase::Processing, acks).await;
        if r.is_err()
            && let Some(s) = self.shards.get_mut(&batch.shard_id)
        {
            // The batch will be delivered again: the child did not finish it.
            s.delivered = previous;
        }
        r.map(|_| ())
    }

    async fn on_shard_close(
        &mut self,
        shard: &ShardId,
        reason: CloseReason,
        acks: &dyn Acks,
    ) -> Result<(), ConsumerError> {
        let result = match reason {
            CloseReason::ShardEnded => {
                self.ensure_child(shard).await?;
                match self.exchange(shard, ToChild::ShardEnded {}, Phase::ShardEnded, acks).await {
                    Ok(true) => Ok(()),
                    Ok(false) => Err(ConsumerError::msg(format!(
                        "multilang {} on {shard}: the processor did not checkpoint in shardEnded \
                         (call checkpointer.checkpoint() there, as KCL requires); the shard stays open",
                        self.name
                    ))),
                    Err(e) => Err(e),
                }
            }
            CloseReason::Handoff | CloseReason::Shutdown => {
                if self.shards.get(shard).is_some_and(|s| s.child.is_some()) {
                    let r = self.exchange(shard, ToChild::ShutdownRequested {}, Phase::Processing, acks).await;
                    // The lease goes once the shard closes: the processor then hears
                    // leaseLost, as the KCL's processors do after shutdownRequested.
                    if r.is_ok()
                        && self.shards.get(shard).is_some_and(|s| s.child.is_some())
                        && let Err(e) = self.exchange(shard, ToChild::LeaseLost {}, Phase::LeaseLost, acks).await
                    {
                        tracing::warn!(consumer = %self.name, shard = %shard, error = %e, "leaseLost after shutdownRequested");
                    }
                    r.map(|_| ())
                } else {
                    Ok(())
                }
            }
            CloseReason::LeaseLost => {
                if self.shards.get(shard).is_some_and(|s| s.child.is_some())
                    && let Err(e) = self.exchange(shard, ToChild::LeaseLost {}, Phase::LeaseLost, acks).await
                {
                    tracing::warn!(consumer = %self.name, shard = %shard, error = %e, "leaseLost");
                }
                Ok(())
            }
        };
        if result.is_ok() || reason == CloseReason::LeaseLost {
            self.stop_child(shard).await;
            self.shards.remove(shard);
        }
        result
    }
}

impl Plugin for MultiLang {
    type Config = MultiLangSection;
    const ABOUT: &'static str = "KCL MultiLang record processors (Python, Node.js, ...), a process per shard";

    fn check(c: &MultiLangSection, at: &str) -> Result<Vec<String>> {
        if c.command.is_empty() || c.command[0].is_empty() {
            bail!("field `{at}.command`: name the processor's program, e.g. [\"python3\", \"app.py\"]");
        }
        if c.timeout.is_zero() {
            bail!("field `{at}.timeout`: must be positive");
        }
        if let Some(dir) = &c.cwd
            && !dir.is_dir()
        {
            bail!("field `{at}.cwd`: {} is not a directory", dir.display());
        }
        Ok(Vec::new())
    }

    async fn build(section: MultiLangSection, ctx: &Context) -> Result<Self> {
        let env = section.env.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        Ok(Self { name: ctx.name().to_owned(), section, env, shards: HashMap::new() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(n: u128) -> ExtendedSequenceNumber {
        ExtendedSequenceNumber::new(SequenceNumber::from_u128(n), 0)
    }

    #[test]
    fn checkpoints_are_judged_as_kcl_does() {
        let state = ShardState { child: None, checkpoint: Checkpoint::At(at(10)), delivered: Some(at(20)) };
        let p = Phase::Processing;
        assert_eq!(judge(&(None, None), &state, p), Ok(Some(at(20))));
        assert_eq!(judge(&(Some("15".into()), None), &state, p), Ok(Some(at(15))));
        assert_eq!(judge(&(Some("15".into()), Some(2)), &state, p).unwrap().unwrap().sub_sequence, 2);
        assert_eq!(judge(&(Some("21".into()), None), &state, p), Err("IllegalArgumentException"));
        assert_eq!(judge(&(Some("9".into()), None), &state, p), Err("IllegalArgumentException"));
        assert_eq!(judge(&(Some("x".into()), None), &state, p), Err("IllegalArgumentException"));
        assert_eq!(judge(&(None, None), &state, Phase::LeaseLost), Err("ShutdownException"));
        let fresh = ShardState { child: None, checkpoint: Checkpoint::TrimHorizon, delivered: None };
        assert_eq!(judge(&(None, None), &fresh, Phase::ShardEnded), Ok(None));
        assert_eq!(judge(&(Some("1".into()), None), &fresh, p), Err("IllegalArgumentException"));
    }
}
