//! The runtime's randomness (timer jitter, backoff, instance ids), from one generator
//! per thread that a simulation can seed.
//!
//! Production draws from the operating system's entropy. A simulation that runs every
//! worker on one current-thread tokio runtime calls [`seed_this_thread`] first, and then
//! the same seed gives the same run: no draw here depends on a clock or an address.

use std::cell::RefCell;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

thread_local! {
    static RNG: RefCell<StdRng> = RefCell::new(StdRng::from_os_rng());
}

/// Replaces this thread's generator with one seeded by `seed`. Draws made by tasks on
/// this thread afterwards repeat from run to run.
pub fn seed_this_thread(seed: u64) {
    RNG.with(|r| *r.borrow_mut() = StdRng::seed_from_u64(seed));
}

/// A uniform value in `[0, 1)`.
pub(crate) fn fraction() -> f64 {
    RNG.with(|r| r.borrow_mut().random::<f64>())
}

/// A uniform value in `[0, n)`; 0 when `n` is 0.
pub(crate) fn below(n: u32) -> u32 {
    if n == 0 { 0 } else { RNG.with(|r| r.borrow_mut().random_range(0..n)) }
}

/// A uniform value in `[0, n]`.
pub(crate) fn up_to(n: u64) -> u64 {
    RNG.with(|r| r.borrow_mut().random_range(0..=n))
}

/// 128 random bits.
pub(crate) fn bits128() -> u128 {
    RNG.with(|r| r.borrow_mut().random::<u128>())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_repeats_its_draws() {
        let draw = || (fraction(), below(1_000), up_to(7), bits128());
        seed_this_thread(36);
        let first = (draw(), draw());
        seed_this_thread(36);
        assert_eq!((draw(), draw()), first);
        seed_this_thread(37);
        assert_ne!(draw(), first.0);
    }

    #[test]
    fn draws_stay_in_range() {
        seed_this_thread(1);
        for _ in 0..1_000 {
            assert!((0.0..1.0).contains(&fraction()));
            assert!(below(3) < 3);
            assert!(up_to(3) <= 3);
        }
        assert_eq!(below(0), 0);
        assert_eq!(up_to(0), 0);
    }
}
