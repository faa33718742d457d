//! The AWS SDK's retries of a throttled request, as the DynamoDB adapter gets them.
//!
//! The adapter builds its client with `BehaviorVersion::latest()` and no retry
//! settings, so the SDK's *standard* retry mode applies: at most 3 attempts, the n-th
//! retry after a random delay in `[0, min(1 s × 2^(n-1), 20 s))` (full jitter).
//! <https://docs.aws.amazon.com/sdkref/latest/guide/feature-retry-behavior.html>.
//! Only then does the adapter see the throttling error. Not modelled: the SDK's
//! client-side retry quota (a token bucket that stops retries after many failures).

use std::sync::Mutex;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// The standard retry mode's settings, and a seeded source of its jitter.
#[derive(Debug)]
pub struct SdkRetry {
    /// Attempts per call, the first included.
    pub max_attempts: u32,
    /// Base of the exponential backoff.
    pub initial_backoff: Duration,
    /// Cap of one delay.
    pub max_backoff: Duration,
    rng: Mutex<StdRng>,
}

impl SdkRetry {
    /// The SDK's standard mode, jitter from `seed`.
    pub fn standard(seed: u64) -> Self {
        Self {
            max_attempts: 3,
            initial_backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(20),
            rng: Mutex::new(StdRng::seed_from_u64(seed)),
        }
    }

    /// No retries: the first throttling error reaches the adapter (directed tests).
    pub fn none() -> Self {
        Self { max_attempts: 1, ..Self::standard(0) }
    }

    /// The delay before retry `n` (1 for the first retry).
    pub fn delay(&self, n: u32) -> Duration {
        let cap = self.initial_backoff.saturating_mul(1 << (n.saturating_sub(1)).min(16)).min(self.max_backoff);
        let jitter: f64 = self.rng.lock().unwrap_or_else(|p| p.into_inner()).random();
        cap.mul_f64(jitter)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_grow_and_stay_under_the_cap() {
        let r = SdkRetry::standard(7);
        for _ in 0..100 {
            assert!(r.delay(1) < Duration::from_secs(1));
            assert!(r.delay(2) < Duration::from_secs(2));
            assert!(r.delay(10) < Duration::from_secs(20));
        }
    }
}
