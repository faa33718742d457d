//! `type = "multilang"`: KCL MultiLang record processors (Python `amazon_kclpy`,
//! Node.js `aws-kcl`, Ruby, .NET) run unchanged, one child process per shard as the
//! Java MultiLangDaemon runs them, the shards' children at the same time.
//!
//! Each shard has a task of its own ([`super::shard_task`]) that owns its child and
//! serves the shard's batches and its close in order. `on_batch` defers the batch
//! ([`weir_core::Acks::defer`]) to that task and returns, so one slow processor holds
//! up only its shard; the runtime counts a shard's deferred batches as queued, so a
//! processor that falls behind is detached from its shard as any slow consumer is.
//! `on_shard_close` waits for the shard's task to finish what it was given.
//!
//! A child's `checkpoint` is written to the lease table at once (the shard's owned
//! [`weir_core::ShardAcks`]) and answered only once stored, as the KCL answers:
//! `ShutdownException` when the lease is no longer held; a processor that never
//! checkpoints never moves its checkpoint. Stdout lines that are not protocol messages
//! (JSON ones too: a processor logging JSON) are logged and skipped, as the KCL skips
//! them. A child that cannot start, exits or hangs past `timeout` fails its batch: its
//! stderr tail is in the error, it is stopped, and the runtime retries with backoff
//! (detaching the consumer from the shard so the others keep flowing); the next batch
//! starts a new child, initialised at the last checkpoint, which then receives the
//! batch that failed. Records a child answered `status` for are not sent again to its
//! successor on this worker; a new lease owner starts at the checkpoint, as in KCL.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Result, bail};
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use weir_core::{Acks, CloseReason, Consumer, ConsumerError, RecordBatch, ShardContext, ShardId};

use super::shard_task::{Finish, Job, Settings, ShardTask};
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

/// A shard's task: where its jobs go, and the task (stopped when dropped, which kills
/// its child; closing the shard ends it first).
struct ShardHandle {
    jobs: mpsc::UnboundedSender<Job>,
    task: JoinHandle<()>,
}

impl Drop for ShardHandle {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The multilang consumer.
pub struct MultiLang {
    settings: Arc<Settings>,
    shards: HashMap<ShardId, ShardHandle>,
}

impl MultiLang {
    fn gone(&self, shard: &ShardId) -> ConsumerError {
        ConsumerError::msg(format!("multilang {} on {shard}: the shard's task has ended", self.settings.name))
    }

    /// Starts the shard's task (its child starts at once, initialised at `checkpoint`).
    fn start_task(&mut self, shard: &ShardId, checkpoint: weir_core::Checkpoint) {
        let (jobs, rx) = mpsc::unbounded_channel();
        let task = ShardTask::new(self.settings.clone(), shard.clone(), checkpoint);
        self.shards.insert(shard.clone(), ShardHandle { jobs, task: tokio::spawn(task.run(rx)) });
    }

    /// Ends the shard's task, if any, as for a lost lease, and waits for it.
    async fn end_task(&mut self, shard: &ShardId) {
        let Some(mut handle) = self.shards.remove(shard) else { return };
        let (reply, answer) = oneshot::channel();
        if handle.jobs.send(Job::Close { reason: CloseReason::LeaseLost, acks: None, reply }).is_ok() {
            let _ = answer.await;
        }
        let _ = (&mut handle.task).await;
    }
}

#[async_trait]
impl Consumer for MultiLang {
    fn name(&self) -> &str {
        &self.settings.name
    }

    async fn on_shard_open(&mut self, shard: &ShardContext) -> Result<(), ConsumerError> {
        // A task left from an earlier opening is not expected (every opening is closed
        // first); if there is one, it goes before the new one starts.
        self.end_task(&shard.shard_id).await;
        self.start_task(&shard.shard_id, shard.checkpoint.clone());
        Ok(())
    }

    async fn on_batch(&mut self, batch: &RecordBatch, acks: &dyn Acks) -> Result<(), ConsumerError> {
        // As KCL without callProcessRecordsEvenForEmptyRecordList: no empty batches.
        if batch.records.is_empty() {
            return Ok(());
        }
        let shard = &batch.shard_id;
        let Some(handle) = acks.shard(shard) else {
            return Err(ConsumerError::msg(format!(
                "multilang {} on {shard}: the shard is not open",
                self.settings.name
            )));
        };
        if !self.shards.contains_key(shard) {
            // A batch before on_shard_open (a runtime that skips it): as KCL, from the start.
            self.start_task(shard, weir_core::Checkpoint::TrimHorizon);
        }
        let jobs = &self.shards[shard].jobs;
        let (finish, answer) = match acks.defer() {
            Some(deferred) => (Finish::Later(deferred), None),
            None => {
                let (tx, rx) = oneshot::channel();
                (Finish::Now(tx), Some(rx))
            }
        };
        if jobs.send(Job::Batch { batch: batch.clone(), finish, acks: handle }).is_err() {
            return Err(self.gone(shard));
        }
        match answer {
            None => Ok(()),
            Some(rx) => rx.await.unwrap_or_else(|_| Err(self.gone(shard))),
        }
    }

    async fn on_shard_close(
        &mut self,
        shard: &ShardId,
        reason: CloseReason,
        acks: &dyn Acks,
    ) -> Result<(), ConsumerError> {
        let Some(handle) = self.shards.get(shard) else { return Ok(()) };
        let (reply, answer) = oneshot::channel();
        let job = Job::Close { reason, acks: acks.shard(shard), reply };
        let result = if handle.jobs.send(job).is_ok() {
            answer.await.unwrap_or_else(|_| Err(self.gone(shard)))
        } else {
            Err(self.gone(shard))
        };
        if result.is_ok() || reason == CloseReason::LeaseLost {
            // The task ends after this answer, its child stopped.
            if let Some(mut handle) = self.shards.remove(shard)
                && let Err(e) = (&mut handle.task).await
            {
                tracing::warn!(consumer = %self.settings.name, %shard, error = %e, "shard task failed");
            }
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
        let settings = Settings {
            name: ctx.name().to_owned(),
            command: section.command,
            cwd: section.cwd,
            env: section.env.into_iter().collect(),
            timeout: section.timeout,
            shutdown_grace: section.shutdown_grace,
        };
        Ok(Self { settings: Arc::new(settings), shards: HashMap::new() })
    }
}
