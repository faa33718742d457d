//! One processor child process: spawn, exchange protocol messages on stdin/stdout,
//! forward stderr to the log, stop.

use std::collections::VecDeque;
use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{ChildStdin, ChildStdout};
use tokio::task::JoinHandle;

use super::protocol::{FromChild, Line, ToChild, parse_line, truncate};

/// Lines of stderr kept for error messages.
const STDERR_TAIL: usize = 20;
/// A stderr line is logged at this length even without a newline (processors such as
/// the `amazon_kclpy` sample write without newlines).
const STDERR_CHUNK: usize = 4096;
/// Longest stdout line read; a longer one is a protocol failure.
const MAX_LINE: usize = 16 << 20;

/// Why an exchange with the child failed.
#[derive(Debug, thiserror::Error)]
pub enum ChildError {
    /// The process could not be started.
    #[error("cannot start {command:?}: {source}")]
    Spawn { command: Vec<String>, source: std::io::Error },
    /// The child closed stdout or exited.
    #[error("the processor exited ({status}) during {action}")]
    Exited { action: &'static str, status: String },
    /// No `status` for the action within the timeout.
    #[error("no status for {action} within {timeout:?} (hung processor)")]
    Timeout { action: &'static str, timeout: Duration },
    /// The child wrote something the protocol does not allow.
    #[error("protocol error during {action}: {detail}")]
    Protocol { action: &'static str, detail: String },
    /// Writing to the child failed.
    #[error("cannot write {action} to the processor: {source}")]
    Write { action: &'static str, source: std::io::Error },
}

/// What the child asked for during an action: a checkpoint at this sequence number
/// (none: the last record delivered). The answer is the error name, if any.
pub type CheckpointRequest = (Option<String>, Option<u64>);

/// The answer to a checkpoint request, once known: `None` when the checkpoint is
/// stored, else the exception name the child is told (as the KCL answers).
pub type Verdict<'c> = std::pin::Pin<Box<dyn std::future::Future<Output = Option<String>> + Send + 'c>>;

/// A running processor.
pub struct Child {
    process: tokio::process::Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
    stderr: JoinHandle<()>,
    tail: Arc<Mutex<VecDeque<String>>>,
}

/// How to start a child.
pub struct Spawn<'a> {
    pub command: &'a [String],
    pub cwd: Option<&'a Path>,
    pub env: &'a [(String, String)],
    /// For log lines: consumer and shard.
    pub consumer: &'a str,
    pub shard: &'a str,
}

impl Child {
    /// Starts the process; its stderr lines go to the log with the shard id.
    pub fn spawn(s: &Spawn<'_>) -> Result<Self, ChildError> {
        let spawn_error = |source| ChildError::Spawn { command: s.command.to_vec(), source };
        let (program, args) = s
            .command
            .split_first()
            .ok_or_else(|| spawn_error(std::io::Error::new(std::io::ErrorKind::InvalidInput, "empty command")))?;
        let mut cmd = tokio::process::Command::new(program);
        cmd.args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .envs(s.env.iter().map(|(k, v)| (k, v)));
        // Its own process group: a Ctrl-C in weir's terminal is for weir, which then
        // shuts the processor down through the protocol (shutdownRequested, EOF).
        #[cfg(unix)]
        cmd.process_group(0);
        if let Some(dir) = s.cwd {
            cmd.current_dir(dir);
        }
        let mut process = cmd.spawn().map_err(spawn_error)?;
        let stdin = process.stdin.take();
        let stdout = BufReader::new(process.stdout.take().expect("stdout is piped"));
        let stderr = process.stderr.take().expect("stderr is piped");
        let tail = Arc::new(Mutex::new(VecDeque::new()));
        let stderr = tokio::spawn(drain_stderr(stderr, tail.clone(), s.consumer.to_owned(), s.shard.to_owned()));
        Ok(Self { process, stdin, stdout, stderr, tail })
    }

    /// The last lines the child wrote to stderr.
    pub fn stderr_tail(&self) -> String {
        let tail = self.tail.lock().unwrap_or_else(|p| p.into_inner());
        tail.iter().cloned().collect::<Vec<_>>().join("\n")
    }

    /// Sends `message` and reads until the child's `status` for it, answering each
    /// checkpoint request with `checkpoint`'s verdict once it is known (the checkpoint
    /// stored, or why not); all within `timeout`.
    pub async fn exchange<'c>(
        &mut self,
        message: &ToChild,
        timeout: Duration,
        checkpoint: &mut (dyn FnMut(CheckpointRequest) -> Verdict<'c> + Send + 'c),
    ) -> Result<(), ChildError> {
        let action = message.action();
        let exchange = async {
            self.send(message).await?;
            loop {
                match self.read(action).await? {
                    FromChild::Status { response_for } if response_for.as_deref() == Some(action) => return Ok(()),
                    FromChild::Status { response_for } => {
                        return Err(ChildError::Protocol {
                            action,
                            detail: format!("status for {response_for:?} while {action} was pending"),
                        });
                    }
                    FromChild::Checkpoint { sequence_number, sub_sequence_number } => {
                        let error = checkpoint((sequence_number.clone(), sub_sequence_number)).await;
                        let answer = ToChild::Checkpoint { sequence_number, sub_sequence_number, error };
                        self.send(&answer).await?;
                    }
                }
            }
        };
        match tokio::time::timeout(timeout, exchange).await {
            Ok(r) => r,
            Err(_) => Err(ChildError::Timeout { action, timeout }),
        }
    }

    async fn send(&mut self, message: &ToChild) -> Result<(), ChildError> {
        let action = message.action();
        let stdin = self.stdin.as_mut().ok_or_else(|| ChildError::Write {
            action,
            source: std::io::Error::new(std::io::ErrorKind::BrokenPipe, "stdin closed"),
        })?;
        let mut line = serde_json::to_vec(message).expect("messages serialise");
        line.push(b'\n');
        let written = async {
            stdin.write_all(&line).await?;
            stdin.flush().await
        };
        written.await.map_err(|source| ChildError::Write { action, source })
    }

    /// The next protocol message; the child's other output is logged and skipped.
    async fn read(&mut self, action: &'static str) -> Result<FromChild, ChildError> {
        let mut buf = Vec::new();
        loop {
            buf.clear();
            let n = (&mut self.stdout)
                .take(MAX_LINE as u64 + 1)
                .read_until(b'\n', &mut buf)
                .await
                .map_err(|e| ChildError::Protocol { action, detail: format!("reading stdout: {e}") })?;
            if n == 0 {
                let status = match tokio::time::timeout(Duration::from_secs(1), self.process.wait()).await {
                    Ok(Ok(s)) => s.to_string(),
                    _ => "stdout closed".into(),
                };
                return Err(ChildError::Exited { action, status });
            }
            if n > MAX_LINE {
                return Err(ChildError::Protocol { action, detail: format!("a stdout line over {MAX_LINE} bytes") });
            }
            let text = String::from_utf8_lossy(&buf);
            match parse_line(&text) {
                Line::Message(m) => return Ok(m),
                Line::Other => {
                    let text = text.trim();
                    if !text.is_empty() {
                        tracing::debug!(stdout = %truncate(text, 1000), "processor output (not a message)");
                    }
                }
                // JSON that is not a message the protocol knows (a processor logging
                // JSON to stdout): skipped, as the KCL's MultiLangDaemon skips it.
                Line::Invalid(detail) => {
                    tracing::warn!(action, detail = %detail, "processor output is not a protocol message; skipped");
                }
            }
        }
    }

    /// Closes stdin (the processor's loop ends on EOF), waits up to `grace` for it to
    /// exit, then kills it; waits for its stderr to be logged.
    pub async fn stop(mut self, grace: Duration) {
        drop(self.stdin.take());
        if tokio::time::timeout(grace, self.process.wait()).await.is_err() {
            let _ = self.process.kill().await;
        }
        let _ = tokio::time::timeout(grace, &mut self.stderr).await;
    }
}

async fn drain_stderr(
    mut stderr: tokio::process::ChildStderr,
    tail: Arc<Mutex<VecDeque<String>>>,
    consumer: String,
    shard: String,
) {
    let mut pending: Vec<u8> = Vec::new();
    let mut buf = vec![0u8; 8192];
    // A line loses its line ending; a chunk of a longer line is kept as it is, so the
    // chunks of one shard, joined, are what the processor wrote.
    let emit = |bytes: &[u8], line_end: bool| {
        let text = String::from_utf8_lossy(bytes);
        let line = if line_end { text.trim_end_matches('\r').to_owned() } else { text.into_owned() };
        if line.is_empty() {
            return;
        }
        tracing::info!(consumer = %consumer, shard = %shard, stderr = %line, "processor stderr");
        let mut t = tail.lock().unwrap_or_else(|p| p.into_inner());
        if t.len() == STDERR_TAIL {
            t.pop_front();
        }
        t.push_back(line);
    };
    loop {
        let n = match stderr.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        pending.extend_from_slice(&buf[..n]);
        while let Some(i) = pending.iter().position(|&b| b == b'\n') {
            emit(&pending[..i], true);
            pending.drain(..=i);
        }
        while pending.len() >= STDERR_CHUNK {
            let rest = pending.split_off(STDERR_CHUNK);
            emit(&pending, false);
            pending = rest;
        }
    }
    emit(&pending, false);
}
