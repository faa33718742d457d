use std::time::Duration;

/// Exponential backoff with full jitter: the n-th delay is uniform in
/// `[0, min(max, initial * 2^n)]`, never below `initial / 2`.
#[derive(Debug, Clone)]
pub struct Backoff {
    initial: Duration,
    max: Duration,
    attempt: u32,
}

impl Backoff {
    /// A backoff starting at `initial`, capped at `max`.
    pub fn new(initial: Duration, max: Duration) -> Self {
        Self { initial, max, attempt: 0 }
    }

    /// The next delay.
    pub fn next_delay(&mut self) -> Duration {
        let exp = self.initial.saturating_mul(1u32 << self.attempt.min(20));
        self.attempt = self.attempt.saturating_add(1);
        let cap = exp.min(self.max);
        let floor = (self.initial / 2).min(cap);
        let span = cap.saturating_sub(floor).as_millis() as u64;
        floor + Duration::from_millis(crate::jitter::up_to(span))
    }

    /// Back to the first delay (after a success).
    pub fn reset(&mut self) {
        self.attempt = 0;
    }

    /// Attempts since the last reset.
    pub fn attempts(&self) -> u32 {
        self.attempt
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_and_caps() {
        let mut b = Backoff::new(Duration::from_millis(100), Duration::from_secs(2));
        for _ in 0..50 {
            let d = b.next_delay();
            assert!(d >= Duration::from_millis(50) && d <= Duration::from_secs(2), "{d:?}");
        }
        b.reset();
        assert!(b.next_delay() <= Duration::from_millis(100));
    }
}
