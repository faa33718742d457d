//! How long this worker's heartbeat vouches for its leases.
//!
//! Other workers take every lease of a worker whose heartbeat record has not changed
//! for the failover time by their own clocks ([`weir_core::policy::Observations`]),
//! without waiting for each lease's own counter to stand still. That is safe because a
//! worker uses a lease only while its own last heartbeat is fresh too: until the
//! validity (90% of failover, as for lease writes) after the start of the last
//! heartbeat that landed. An observer can only have seen that heartbeat's counter
//! after the write started, so when it judges the worker gone, the worker has stopped.
//!
//! Once the validity has run out, a heartbeat that lands later does not revive the
//! leases held then (others may have taken them meanwhile): it starts a new *epoch*, and
//! only leases taken (or adopted, with a write of their own) in it are valid.

use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// The end of the validity this worker's heartbeats have earned. Shared by the
/// heartbeat (which extends it) and every held lease (which ends with it).
#[derive(Debug)]
pub(crate) struct Liveness {
    validity: Duration,
    state: Mutex<State>,
}

#[derive(Debug, Clone, Copy)]
struct State {
    epoch: u64,
    until: Instant,
    /// When the last epoch ran out.
    lapsed: Instant,
}

impl Liveness {
    /// After a heartbeat that started at `started` landed.
    pub(crate) fn new(started: Instant, validity: Duration) -> Self {
        Self { validity, state: Mutex::new(State { epoch: 0, until: started + validity, lapsed: started }) }
    }

    fn state(&self) -> State {
        *self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A heartbeat that started at `started` landed.
    pub(crate) fn landed(&self, started: Instant) {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if Instant::now() >= s.until {
            *s = State { epoch: s.epoch + 1, until: started + self.validity, lapsed: s.until };
        } else {
            s.until = s.until.max(started + self.validity);
        }
    }

    /// The current epoch: what a lease taken now is valid in.
    pub(crate) fn epoch(&self) -> u64 {
        self.state().epoch
    }

    /// Until when the heartbeats vouch for leases taken in `epoch` (a time past for an
    /// epoch that ran out).
    pub(crate) fn until(&self, epoch: u64) -> Instant {
        let s = self.state();
        if epoch == s.epoch { s.until } else { s.lapsed }
    }

    /// Whether a heartbeat that landed started less than `within` ago.
    pub(crate) fn written_within(&self, within: Duration) -> bool {
        Instant::now() + self.validity < self.state().until + within
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn validity_runs_from_the_latest_heartbeat_that_landed() {
        let t0 = Instant::now();
        let l = Liveness::new(t0, Duration::from_secs(9));
        assert_eq!(l.until(0), t0 + Duration::from_secs(9));
        l.landed(t0 + Duration::from_secs(3));
        l.landed(t0 + Duration::from_secs(1)); // an older one answered late
        assert_eq!(l.until(0), t0 + Duration::from_secs(12));
        tokio::time::advance(Duration::from_secs(5)).await;
        assert!(l.written_within(Duration::from_secs(3)), "landed 2 s ago");
        assert!(!l.written_within(Duration::from_secs(2)));
    }

    #[tokio::test(start_paused = true)]
    async fn a_heartbeat_after_a_lapse_revives_no_lease_of_the_old_epoch() {
        let t0 = Instant::now();
        let l = Liveness::new(t0, Duration::from_secs(9));
        tokio::time::advance(Duration::from_secs(10)).await;
        l.landed(Instant::now());
        assert_eq!(l.epoch(), 1);
        assert!(l.until(0) <= Instant::now(), "leases of epoch 0 stay lapsed");
        assert_eq!(l.until(1), Instant::now() + Duration::from_secs(9));
    }
}
