//! Replay progress: an indicatif bar on a terminal (records, bytes, shards done, the
//! part of the window covered, ETA), a structured log line every 10 s otherwise, and
//! job gauges for `/metrics`.

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use indicatif::{HumanBytes, ProgressBar, ProgressStyle};
use weir_core::Timestamp;

/// One look at a job from this worker.
#[derive(Debug, Clone, Copy)]
pub struct Snapshot {
    pub shards_done: u64,
    pub shards: u64,
    pub records: u64,
    pub bytes: u64,
    /// Every record before this arrival time has been read by this worker's shards.
    pub covered_to: Timestamp,
}

/// What the bar measures.
#[derive(Debug, Clone, Copy)]
pub enum Measure {
    /// The window's time covered, in seconds (stream replays).
    Window { from: Timestamp, to: Timestamp },
    /// Shards done (archive replays: one shard per run of objects).
    Objects,
}

pub struct Progress {
    bar: Option<ProgressBar>,
    job: String,
    measure: Measure,
    last_log: Instant,
}

fn iso(t: Timestamp) -> String {
    chrono::DateTime::from_timestamp_millis(t.as_millis())
        .map(|d| d.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
        .unwrap_or_else(|| t.as_millis().to_string())
}

impl Progress {
    pub fn new(job: &str, measure: Measure) -> Self {
        let bar = std::io::stderr().is_terminal().then(|| {
            let b = ProgressBar::new(0);
            b.set_style(
                ProgressStyle::with_template("{spinner} replay {prefix} [{bar:30}] {msg} · {elapsed} · eta {eta}")
                    .unwrap_or_else(|_| ProgressStyle::default_bar()),
            );
            b.set_prefix(job.to_owned());
            b.enable_steady_tick(Duration::from_millis(200));
            b
        });
        Self { bar, job: job.to_owned(), measure, last_log: Instant::now() }
    }

    pub fn update(&mut self, s: Snapshot) {
        let labels = [("job", self.job.clone())];
        metrics::gauge!("weir_replay_shards", &labels).set(s.shards as f64);
        metrics::gauge!("weir_replay_shards_done", &labels).set(s.shards_done as f64);
        metrics::gauge!("weir_replay_covered_to_seconds", &labels).set(s.covered_to.as_millis() as f64 / 1000.0);
        let (pos, len) = match self.measure {
            Measure::Window { from, to } => (
                (s.covered_to.as_millis().clamp(from.as_millis(), to.as_millis()) - from.as_millis()) as u64 / 1000,
                (to.as_millis() - from.as_millis()) as u64 / 1000,
            ),
            Measure::Objects => (s.shards_done, s.shards),
        };
        match &self.bar {
            Some(b) => {
                b.set_length(len);
                b.set_position(pos);
                b.set_message(format!(
                    "shards {}/{} · {} records · {} · covered to {}",
                    s.shards_done,
                    s.shards,
                    s.records,
                    HumanBytes(s.bytes),
                    iso(s.covered_to)
                ));
            }
            None if self.last_log.elapsed() >= Duration::from_secs(10) => {
                self.last_log = Instant::now();
                tracing::info!(
                    job = %self.job,
                    shards_done = s.shards_done,
                    shards = s.shards,
                    records = s.records,
                    bytes = s.bytes,
                    covered_to = %iso(s.covered_to),
                    "replay progress"
                );
            }
            None => {}
        }
    }

    pub fn finish(&self) {
        if let Some(b) = &self.bar {
            b.finish();
        }
    }
}
