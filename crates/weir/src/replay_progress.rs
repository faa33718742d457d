//! Replay progress: an indicatif bar on a terminal, a log line every 10 s otherwise.

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};

pub struct Progress {
    bar: Option<ProgressBar>,
    job: String,
    last_log: std::cell::Cell<Instant>,
}

impl Progress {
    pub fn new(shards: u64, job: &str) -> Self {
        let bar = std::io::stderr().is_terminal().then(|| {
            let b = ProgressBar::new(shards);
            b.set_style(
                ProgressStyle::with_template(
                    "{spinner} replay {prefix}: shards {pos}/{len} [{bar:30}] {msg} ({elapsed})",
                )
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
            );
            b.set_prefix(job.to_owned());
            b
        });
        Self { bar, job: job.to_owned(), last_log: std::cell::Cell::new(Instant::now()) }
    }

    pub fn update(&self, done: u64, total: u64, records: u64) {
        match &self.bar {
            Some(b) => {
                b.set_length(total);
                b.set_position(done);
                b.set_message(format!("{records} records"));
            }
            None if self.last_log.get().elapsed() >= Duration::from_secs(10) => {
                self.last_log.set(Instant::now());
                tracing::info!(job = %self.job, shards_done = done, shards = total, records, "replay progress");
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
