//! Deadlines that fail on no progress, not on wall time alone.
//!
//! CI machines are shared and slow down several-fold; a fixed wall deadline then fails
//! a test that was working, only slowly. A [`Patience`] is given what the test can see
//! move (a child's CPU time and log, a count of objects, a set of checkpoints) and runs
//! out only when none of it moved for `limit`, or, as a backstop against something
//! that moves forever without finishing, after `limit × BACKSTOP` in all.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::Path;
use std::time::Duration;

// tokio's clock: std's outside a runtime, and pausable in this module's tests.
use tokio::time::Instant;

/// How many `limit`s a wait may last in all while it keeps moving.
pub const BACKSTOP: u32 = 10;

/// A wait's deadline, pushed back each time the observation changes.
#[derive(Debug)]
pub struct Patience {
    limit: Duration,
    started: Instant,
    moved: Instant,
    last: Option<u64>,
}

impl Patience {
    /// Runs out after `limit` without progress.
    pub fn new(limit: Duration) -> Self {
        let now = Instant::now();
        Self { limit, started: now, moved: now, last: None }
    }

    /// Records what the test sees now; `Err` with why, once nothing moved for `limit`
    /// or the backstop passed.
    pub fn observe(&mut self, seen: impl Hash) -> Result<(), String> {
        let mut h = DefaultHasher::new();
        seen.hash(&mut h);
        let seen = h.finish();
        if self.last != Some(seen) {
            self.last = Some(seen);
            self.moved = Instant::now();
        }
        if self.moved.elapsed() > self.limit {
            Err(format!("no progress for {:?} ({:?} in all)", self.limit, self.started.elapsed()))
        } else if self.started.elapsed() > self.limit * BACKSTOP {
            Err(format!(
                "still moving but unfinished after {:?} ({BACKSTOP} × {:?})",
                self.started.elapsed(),
                self.limit
            ))
        } else {
            Ok(())
        }
    }

    /// Time since the wait began.
    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }
}

/// CPU time (clock ticks, user + system) process `pid` has used, or 0 once it is gone.
pub fn cpu_ticks(pid: u32) -> u64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return 0 };
    // Fields after the command name, which is in parentheses and may hold spaces.
    let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else { return 0 };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the whole line: 12 and 13 after ')'.
    let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<u64>().ok()).unwrap_or(0);
    ticks(11) + ticks(12)
}

/// Length of a file (a log), or 0 if it is not there.
pub fn file_len(path: &Path) -> u64 {
    std::fs::metadata(path).map(|m| m.len()).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn runs_out_without_progress_and_not_while_moving() {
        let mut p = Patience::new(Duration::from_secs(5));
        for i in 0..8 {
            p.observe(i).unwrap();
            tokio::time::advance(Duration::from_secs(2)).await;
        }
        assert!(p.elapsed() > Duration::from_secs(15), "moving: waited past the limit");
        p.observe(7).unwrap();
        tokio::time::advance(Duration::from_secs(6)).await;
        assert!(p.observe(7).is_err(), "no progress for longer than the limit");
    }

    #[tokio::test(start_paused = true)]
    async fn the_backstop_ends_a_wait_that_moves_forever() {
        let mut p = Patience::new(Duration::from_secs(5));
        let mut i = 0u64;
        let err = loop {
            i += 1;
            if let Err(e) = p.observe(i) {
                break e;
            }
            tokio::time::advance(Duration::from_secs(1)).await;
        };
        assert!(err.contains("still moving"), "{err}");
        assert_eq!(i, 52, "stopped right after 10 × 5 s");
    }

    #[test]
    fn this_process_uses_cpu() {
        let before = cpu_ticks(std::process::id());
        let started = std::time::Instant::now();
        let mut x = 0u64;
        while started.elapsed() < Duration::from_millis(100) {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
        }
        assert!(cpu_ticks(std::process::id()) > before, "CPU ticks move while spinning");
    }
}
