use weir_core::{Clock, SystemClock, Timestamp};

/// Wall-clock time that advances with `tokio::time`: the wall clock is read once at
/// creation and then moved by tokio's monotonic clock. Under `tokio::time::pause()` it
/// stands still until the test advances time, so timing logic is deterministic.
#[derive(Debug, Clone)]
pub struct TokioClock {
    base: Timestamp,
    start: tokio::time::Instant,
}

impl TokioClock {
    /// A clock starting at the current wall-clock time.
    pub fn new() -> Self {
        Self::starting_at(SystemClock.now())
    }

    /// A clock starting at `base`.
    pub fn starting_at(base: Timestamp) -> Self {
        Self { base, start: tokio::time::Instant::now() }
    }
}

impl Default for TokioClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for TokioClock {
    fn now(&self) -> Timestamp {
        self.base.saturating_add(self.start.elapsed())
    }
}
