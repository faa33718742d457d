//! Lines for stderr (logs) and stdout (CloudWatch EMF lines) that never hold the
//! process: a writer queues each line and a thread of its own writes them out. A reader
//! that stalls (a container log driver in blocking mode, a full pipe) stalls only that
//! thread; once `queue` lines wait, new lines are dropped and counted in
//! [`DROPPED_LINES`] (label `stream`). A closed stream (`weir run 2>&1 | head -3`) is
//! not an error either: its lines are dropped and counted the same way, and nothing
//! panics.
//!
//! Hand-written rather than `tracing-appender`'s non-blocking writer: its guard, when
//! dropped with a full queue at exit, reports with `println!`, which blocks on a stalled
//! stdout and panics on a closed one; and it counts no write failures.

use std::io::{self, Write};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use std::time::Duration;

/// Lines dropped: the queue was full (a slow or stalled reader) or the stream closed.
pub const DROPPED_LINES: &str = "weir_log_lines_dropped_total";

/// Lines held for a slow reader by default, per stream.
pub const DEFAULT_QUEUE: usize = 8_192;

/// Which stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Output {
    /// Standard error (logs).
    Stderr,
    /// Standard output (CloudWatch EMF lines).
    Stdout,
}

impl Output {
    fn name(self) -> &'static str {
        match self {
            Output::Stderr => "stderr",
            Output::Stdout => "stdout",
        }
    }

    fn write_line(self, line: &[u8]) -> io::Result<()> {
        match self {
            Output::Stderr => io::stderr().lock().write_all(line),
            Output::Stdout => {
                let mut out = io::stdout().lock();
                out.write_all(line)?;
                out.flush()
            }
        }
    }
}

enum Msg {
    Line(Vec<u8>),
    /// Answered once every line queued before it was written.
    Flush(std::sync::mpsc::Sender<()>),
}

/// A cloneable writer of whole lines (one `write` call per line, as tracing's
/// formatter and [`LossyLines::line`] make them). It lives as long as the process: its
/// thread ends when every clone is dropped, and [`LossyLines::flush_for`] is its
/// shutdown path.
#[derive(Clone)]
pub struct LossyLines {
    tx: SyncSender<Msg>,
    output: Output,
}

impl std::fmt::Debug for LossyLines {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LossyLines").field("output", &self.output).finish()
    }
}

impl LossyLines {
    /// Starts the thread writing to `output`, holding at most `queue` lines.
    pub fn start(output: Output, queue: usize) -> io::Result<Self> {
        let (tx, rx) = sync_channel(queue.max(1));
        std::thread::Builder::new().name(format!("weir-{}", output.name())).spawn(move || pump(output, rx))?;
        Ok(Self { tx, output })
    }

    /// Queues `line` (a newline is added); dropped and counted when the queue is full.
    pub fn line(&self, line: &str) {
        let mut bytes = Vec::with_capacity(line.len() + 1);
        bytes.extend_from_slice(line.as_bytes());
        bytes.push(b'\n');
        self.send(bytes);
    }

    fn send(&self, bytes: Vec<u8>) {
        match self.tx.try_send(Msg::Line(bytes)) {
            Ok(()) => {}
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => dropped(self.output),
        }
    }

    /// Waits until the lines queued so far are written, at most `patience`. Returns
    /// at once (`false`) when the queue is full: its reader is not keeping up, and the
    /// process does not wait for it.
    pub fn flush_for(&self, patience: Duration) -> bool {
        let (done, written) = std::sync::mpsc::channel();
        if self.tx.try_send(Msg::Flush(done)).is_err() {
            return false;
        }
        written.recv_timeout(patience).is_ok()
    }
}

fn dropped(output: Output) {
    metrics::counter!(DROPPED_LINES, "stream" => output.name()).increment(1);
}

fn pump(output: Output, rx: Receiver<Msg>) {
    for msg in rx {
        match msg {
            Msg::Line(line) => {
                if output.write_line(&line).is_err() {
                    dropped(output);
                }
            }
            Msg::Flush(done) => {
                let _ = done.send(());
            }
        }
    }
}

impl Write for LossyLines {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.send(buf.to_vec());
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for LossyLines {
    type Writer = LossyLines;

    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lines reach the stream in order, and a flush waits for them.
    #[test]
    fn lines_are_written_and_flushed() {
        let out = LossyLines::start(Output::Stdout, 4).unwrap();
        for n in 0..3 {
            out.line(&format!("lossy test line {n}"));
        }
        assert!(out.flush_for(Duration::from_secs(10)));
    }

    /// A full queue drops the line and counts it, and the caller goes on.
    #[test]
    fn a_full_queue_drops_and_counts() {
        let recorder = metrics_util::debugging::DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        // No thread: nothing drains the queue of one.
        let (tx, _rx) = sync_channel(1);
        let out = LossyLines { tx, output: Output::Stderr };
        metrics::with_local_recorder(&recorder, || {
            out.line("queued");
            out.line("dropped");
            out.line("dropped too");
            assert!(!out.flush_for(Duration::from_secs(10)), "a full queue is not waited for");
        });
        let dropped: u64 = snapshotter
            .snapshot()
            .into_vec()
            .into_iter()
            .filter(|(k, ..)| k.key().name() == DROPPED_LINES)
            .map(|(.., v)| match v {
                metrics_util::debugging::DebugValue::Counter(n) => n,
                _ => 0,
            })
            .sum();
        assert_eq!(dropped, 2);
    }
}
