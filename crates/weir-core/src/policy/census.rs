//! Whether a worker's lease cycle needs to read every lease, judged from the worker
//! records alone.
//!
//! Reading every lease is the costly part of a cycle (at 10,000 shards and 500
//! workers, a namespace read by every worker every 10 s is over a hundred thousand read
//! units a second). A worker record is small and carries what its worker holds and how
//! many leases are active ([`WorkerLoad`]); from the records a worker can tell whether
//! there is anything for it to take without reading the leases:
//!
//! - the fleet's size: live workers (records that changed within the failover time,
//!   this worker included);
//! - the active leases: the larger of the *leader*'s last count (the live worker with
//!   the smallest id, the one that syncs leases with the shards; while it has not
//!   counted, as just after its restart, the largest count another live worker
//!   reports) and this worker's own (a worker whose shard ended counts the children it
//!   created before the leader's next sync does; counting too many costs a reading,
//!   too few a wait);
//! - the target per worker: active leases over live workers, rounded up (as
//!   [`super::plan_takes`] computes it);
//! - free leases: active leases less those live workers hold (a dead worker's leases are
//!   free: they expire with its heartbeat).
//!
//! A worker at or above the target reads nothing. Below it, the workers below target
//! are ranked by (held, id) and what there is to take is dealt out in that order: the
//! free leases and the leases workers hold above the target (each needy worker steals
//! one at a time from the most loaded). A worker reads every lease only when something
//! is left at its rank, or when it is the neediest and some worker holds the target
//! while this one needs more than one (the steal [`super::plan_takes`] makes then). So
//! a departure makes a few workers read, not the whole fleet. Everything the
//! records cannot show (a handoff completed, a lease lost by its holder's renewals)
//! is caught by the coordinator's periodic full reading.

use std::time::Duration;

use crate::ids::WorkerId;
use crate::policy::Observations;
use crate::ports::WorkerHeartbeat;
use crate::time::Timestamp;

/// The fleet as the worker records show it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Census {
    /// Live workers, this one included.
    pub live: usize,
    /// Active leases (see the module documentation).
    pub active: usize,
    /// Leases live workers hold, this one's `mine` included.
    pub held: usize,
    /// Active leases over live workers, rounded up.
    pub target: usize,
    /// Active leases no live worker holds (free, or a dead worker's).
    pub free: usize,
    /// Whether this worker is the leader (the live worker with the smallest id).
    pub leader: bool,
    /// Whether this worker should read every lease this cycle.
    pub list: bool,
}

/// Judges the fleet from `workers` (this cycle's records, already observed in `seen`)
/// for `me`, which holds `mine` leases and last counted `my_active` active leases.
pub fn census(
    me: &WorkerId,
    mine: usize,
    my_active: usize,
    workers: &[WorkerHeartbeat],
    seen: &Observations,
    now: Timestamp,
    failover: Duration,
) -> Census {
    let others: Vec<&WorkerHeartbeat> =
        workers.iter().filter(|w| w.worker != *me && seen.worker_alive(&w.worker, now, failover)).collect();
    let live = others.len() + 1;
    let leader_record = others.iter().filter(|w| w.worker < *me).min_by(|a, b| a.worker.cmp(&b.worker));
    let leader = leader_record.is_none();
    // A leader that has not counted yet (just restarted) reports zero: then the
    // largest count another live worker reports.
    let others_active = || others.iter().map(|w| w.load.active as usize).max().unwrap_or(0);
    let counted = leader_record.map_or(0, |l| l.load.active as usize);
    let active = if counted > 0 { counted } else { others_active() }.max(my_active);
    let held = mine + others.iter().map(|w| w.load.held as usize).sum::<usize>();
    let target = active.div_ceil(live);
    let free = active.saturating_sub(held);
    let mut census = Census { live, active, held, target, free, leader, list: false };
    if mine >= target {
        return census;
    }
    let excess: usize = others.iter().map(|w| (w.load.held as usize).saturating_sub(target)).sum();
    // Workers below target, neediest first; this one among them.
    let mut needy: Vec<(usize, &WorkerId)> =
        others.iter().map(|w| (w.load.held as usize, &w.worker)).filter(|(h, _)| *h < target).collect();
    needy.push((mine, me));
    needy.sort();
    let mut before = 0;
    for (held_by, who) in &needy {
        if *who == me {
            break;
        }
        before += target - held_by;
    }
    let at_target = others.iter().any(|w| w.load.held as usize == target) && target - mine > 1;
    census.list = free + excess > before || (needy[0].1 == me && at_target);
    census
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ports::WorkerLoad;

    const F: Duration = Duration::from_secs(10);

    fn hb(w: &str, counter: u64, held: u32, active: u32) -> WorkerHeartbeat {
        WorkerHeartbeat {
            worker: WorkerId::new(w),
            counter,
            instance: String::new(),
            load: WorkerLoad { held, active },
        }
    }

    fn judge(me: &str, mine: usize, my_active: usize, workers: &[WorkerHeartbeat]) -> Census {
        let mut seen = Observations::default();
        seen.observe_workers(workers, Timestamp::from_millis(0));
        census(&WorkerId::new(me), mine, my_active, workers, &seen, Timestamp::from_millis(1_000), F)
    }

    #[test]
    fn a_balanced_fleet_reads_no_lease() {
        let workers: Vec<_> = ["a", "b", "c", "d"].iter().map(|w| hb(w, 1, 25, 100)).collect();
        for me in ["a", "b", "c", "d"] {
            let c = judge(me, 25, 100, &workers);
            assert_eq!((c.live, c.active, c.held, c.target, c.free, c.list), (4, 100, 100, 25, 0, false), "{me}");
        }
        assert!(judge("a", 25, 100, &workers).leader);
        assert!(!judge("b", 25, 100, &workers).leader);
    }

    #[test]
    fn free_leases_are_dealt_to_the_neediest_first() {
        // 20 leases left by a worker that stopped: 5 workers at 20, target 25 (100 / 4 live).
        let mut workers: Vec<_> = ["a", "b", "c", "d"].iter().map(|w| hb(w, 1, 20, 100)).collect();
        workers[2].load.held = 25; // c took some already
        let mine = |me: &str, workers: &[WorkerHeartbeat]| {
            workers.iter().find(|w| w.worker.as_str() == me).map_or(0, |w| w.load.held as usize)
        };
        let reads: Vec<bool> =
            ["a", "b", "c", "d"].iter().map(|me| judge(me, mine(me, &workers), 100, &workers).list).collect();
        // free = 100 - 85 = 15; a needs 5, b needs 5, d needs 5: all three read, c is at target.
        assert_eq!(reads, [true, true, false, true]);
        // 100 over 6: target 17; four leases above it (two each on e and f), nothing
        // free: a (needs 2) and b (needs 2) read, c's turn would start past the four.
        let workers: Vec<_> =
            [("a", 15), ("b", 15), ("c", 15), ("d", 17), ("e", 19), ("f", 19)].map(|(w, h)| hb(w, 1, h, 100)).to_vec();
        let reads: Vec<bool> =
            ["a", "b", "c"].iter().map(|me| judge(me, mine(me, &workers), 100, &workers).list).collect();
        assert_eq!(reads, [true, true, false]);
    }

    #[test]
    fn a_dead_workers_leases_are_free_once_its_heartbeat_stops() {
        let workers = [hb("a", 1, 30, 90), hb("b", 1, 30, 90), hb("c", 1, 30, 90)];
        let mut seen = Observations::default();
        seen.observe_workers(&workers, Timestamp::from_millis(0));
        let moved = [hb("a", 2, 30, 90), hb("b", 2, 30, 90), hb("c", 1, 30, 90)];
        seen.observe_workers(&moved, Timestamp::from_millis(10_000));
        let c = census(&WorkerId::new("a"), 30, 90, &moved, &seen, Timestamp::from_millis(10_000), F);
        assert_eq!((c.live, c.target, c.held, c.list), (2, 45, 60, true), "c is gone: 30 free, a reads");
        let c = census(&WorkerId::new("a"), 30, 90, &moved, &seen, Timestamp::from_millis(9_999), F);
        assert!(!c.list, "c still alive at 9.999 s");
    }

    #[test]
    fn new_workers_read_to_steal_what_others_hold_above_the_target() {
        let workers = [hb("a", 1, 50, 100), hb("b", 1, 50, 100), hb("c", 1, 0, 0)];
        let c = judge("c", 0, 0, &workers);
        assert_eq!((c.active, c.target, c.list), (100, 34, true), "c is the neediest; a and b are over target");
        // The first worker took everything: every new one steals.
        let workers = [hb("a", 1, 100, 100), hb("b", 1, 0, 0), hb("c", 1, 0, 0), hb("d", 1, 0, 0)];
        assert!(["b", "c", "d"].iter().all(|me| judge(me, 0, 0, &workers).list));
        // 2 above the target (26 and 26 of 100 over 4): the two neediest read.
        let workers = [hb("a", 1, 26, 100), hb("b", 1, 26, 100), hb("c", 1, 24, 0), hb("d", 1, 24, 0)];
        assert!(judge("c", 24, 0, &workers).list);
        assert!(judge("d", 24, 0, &workers).list);
        let workers = [hb("a", 1, 26, 100), hb("b", 1, 25, 100), hb("c", 1, 24, 0), hb("d", 1, 25, 0)];
        assert!(judge("c", 24, 0, &workers).list, "one above the target, c the neediest");
        assert!(!judge("d", 25, 0, &workers).list, "d is at target");
    }

    #[test]
    fn the_neediest_steals_from_a_worker_at_target_when_it_needs_more_than_one() {
        // 30 leases over 3: target 10; c holds 8 (two short), nothing free, nobody above.
        let workers = [hb("a", 1, 10, 30), hb("b", 1, 10, 30), hb("c", 1, 8, 30)];
        assert!(judge("c", 8, 30, &workers).list);
        let workers = [hb("a", 1, 10, 29), hb("b", 1, 10, 29), hb("c", 1, 9, 29)];
        assert!(!judge("c", 9, 29, &workers).list, "one short: plan_takes steals nothing either");
    }

    #[test]
    fn the_leaders_count_of_active_leases_wins_over_a_stale_one() {
        // The leader counted 200 after a reshard; b last listed 100.
        let workers = [hb("a", 1, 100, 200), hb("b", 1, 50, 100)];
        let c = judge("b", 50, 100, &workers);
        assert_eq!((c.active, c.target, c.list), (200, 100, true));
        // A leader that reports nothing (a weir that reports no load): b's own count.
        let workers = [hb("a", 1, 50, 0), hb("b", 1, 50, 100)];
        assert_eq!(judge("b", 50, 100, &workers).active, 100);
        // b created children the leader has not counted yet.
        let workers = [hb("a", 1, 50, 100), hb("b", 1, 49, 102)];
        assert_eq!(judge("b", 49, 102, &workers).active, 102);
    }

    /// A restarted leader has not counted yet: the others' count stands in, so a
    /// deploy's first wave finds its free leases at once.
    #[test]
    fn a_leader_that_has_not_counted_yet_is_replaced_by_the_others_count() {
        // a (the leader) just restarted: 0 held, 0 counted; b and c counted 100, 20 are free.
        let workers = [hb("a", 1, 0, 0), hb("b", 1, 40, 100), hb("c", 1, 40, 99), hb("d", 1, 0, 0)];
        let c = judge("d", 0, 0, &workers);
        assert_eq!((c.active, c.target, c.free, c.list), (100, 25, 20, true));
    }
}
