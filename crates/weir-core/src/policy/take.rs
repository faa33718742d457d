//! Which leases to take or steal: KCL's algorithm.
//!
//! - Expiry is judged by the observer's own clock: a lease whose counter has not
//!   changed for the failover time (as this worker saw it) is expired, and so is every
//!   lease of a worker whose heartbeat counter has not changed for the failover time (a
//!   worker's leases are valid only within the failover time of its last heartbeat's
//!   start, as of its last lease write's start). Clocks of different hosts are never
//!   compared.
//! - Target per worker: `ceil(active leases / live workers)`.
//! - Expired and free leases are taken first, up to the target.
//! - When none is free, leases are stolen (through graceful handoffs) from the most
//!   loaded workers, as many as this worker needs: from a worker above the target as
//!   many as it holds above it, from one at the target one while this worker needs more
//!   than one. (The KCL steals one lease per cycle; at 500 workers, where a new worker
//!   needs 20, one per cycle meant 20 readings of every lease per new worker.) Which of
//!   a worker's leases is stolen follows a hash of the stealer's id and the lease key,
//!   so that workers stealing at once pick different leases.
//!
//! [`plan_from_sample`] plans the same way from a sample of the leases (one part of a
//! spread table) and the fleet's [`Census`]: the census gives the target and what each
//! worker holds, the sample the leases to ask for.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use crate::ids::{ShardId, WorkerId};
use crate::lease::Lease;
use crate::policy::Census;
use crate::ports::WorkerHeartbeat;
use crate::time::Timestamp;

/// What a worker has seen of counters over time, by its own clock.
#[derive(Debug, Default, Clone)]
pub struct Observations {
    leases: HashMap<ShardId, (u64, Timestamp)>,
    workers: HashMap<WorkerId, (u64, Timestamp)>,
    /// Workers whose records report a load: written by a weir whose leases lapse with
    /// its heartbeat (see [`Observations::worker_gone`]).
    reporting: BTreeSet<WorkerId>,
}

impl Observations {
    /// Records the counters of every lease and every worker record seen at `now`
    /// ([`Observations::observe_leases`] and [`Observations::observe_workers`]).
    pub fn observe(&mut self, leases: &[Lease], workers: &[WorkerHeartbeat], now: Timestamp) {
        self.observe_leases(leases, now);
        self.observe_workers(workers, now);
    }

    /// Records the counters of every lease, listed at `now`. A counter seen for the
    /// first time, or changed, restarts its expiry clock; leases not listed are
    /// forgotten.
    pub fn observe_leases(&mut self, leases: &[Lease], now: Timestamp) {
        for l in leases {
            note(&mut self.leases, &l.key, l.counter, now);
        }
        let keys: BTreeSet<&ShardId> = leases.iter().map(|l| &l.key).collect();
        self.leases.retain(|k, _| keys.contains(k));
    }

    /// Records the counters of `leases`, some of the leases, listed at `now`; the
    /// others are kept as they were seen.
    pub fn observe_some_leases(&mut self, leases: &[Lease], now: Timestamp) {
        for l in leases {
            note(&mut self.leases, &l.key, l.counter, now);
        }
    }

    /// Records the counters of every worker record, listed at `now` (as
    /// [`Observations::observe_leases`]).
    pub fn observe_workers(&mut self, workers: &[WorkerHeartbeat], now: Timestamp) {
        for w in workers {
            note(&mut self.workers, &w.worker, w.counter, now);
        }
        let ids: BTreeSet<&WorkerId> = workers.iter().map(|w| &w.worker).collect();
        self.workers.retain(|k, _| ids.contains(k));
        self.reporting = workers
            .iter()
            .filter(|w| w.load != crate::ports::WorkerLoad::default())
            .map(|w| w.worker.clone())
            .collect();
    }

    /// Whether `lease` is free, its owner stopped renewing it, or its owner's heartbeat
    /// stopped (a lease whose owner has no record is judged by its own counter only:
    /// leases imported from the KCL, or an owner that removed its record on leaving).
    pub fn is_expired(&self, lease: &Lease, now: Timestamp, failover: Duration) -> bool {
        let Some(owner) = &lease.owner else { return true };
        if self.worker_gone(owner, now, failover) {
            return true;
        }
        match self.leases.get(&lease.key) {
            Some((counter, since)) if *counter == lease.counter => now.saturating_since(*since) >= failover,
            _ => false,
        }
    }

    /// Whether `worker`'s record was seen and has not changed for `failover`, and it
    /// reports a load. A record without one was written by an earlier weir, which
    /// heartbeats only every taker cycle and keeps using its leases while their own
    /// writes land: its leases are judged by their own counters (a fleet in the middle
    /// of an upgrade does not take the leases of its older workers).
    pub fn worker_gone(&self, worker: &WorkerId, now: Timestamp, failover: Duration) -> bool {
        self.reporting.contains(worker)
            && self.workers.get(worker).is_some_and(|(_, since)| now.saturating_since(*since) >= failover)
    }

    /// Whether `worker`'s record was seen and changed within `failover`.
    pub fn worker_alive(&self, worker: &WorkerId, now: Timestamp, failover: Duration) -> bool {
        match self.workers.get(worker) {
            Some((_, since)) => now.saturating_since(*since) < failover,
            None => false,
        }
    }
}

/// Records `counter` for `key` at `now` unless it is the counter already recorded.
fn note<K: std::hash::Hash + Eq + Clone>(
    map: &mut HashMap<K, (u64, Timestamp)>,
    key: &K,
    counter: u64,
    now: Timestamp,
) {
    match map.get_mut(key) {
        Some(entry) if entry.0 == counter => {}
        Some(entry) => *entry = (counter, now),
        None => {
            map.insert(key.clone(), (counter, now));
        }
    }
}

/// What to do this cycle.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct TakePlan {
    /// Free or expired leases to take.
    pub take: Vec<Lease>,
    /// Leases to steal (through graceful handoffs) from more loaded workers.
    pub steal: Vec<Lease>,
    /// The per-worker target used (active leases over live workers, rounded up). A
    /// worker below it looks again at the renewal interval rather than the taker
    /// interval, so that leases a draining worker lets go are taken in seconds.
    pub target: usize,
}

/// Decides which leases `me` takes or steals this cycle. Ended leases are ignored.
pub fn plan_takes(
    me: &WorkerId,
    leases: &[Lease],
    workers: &[WorkerHeartbeat],
    seen: &Observations,
    now: Timestamp,
    failover: Duration,
) -> TakePlan {
    let active: Vec<&Lease> = leases.iter().filter(|l| !l.ended).collect();
    if active.is_empty() {
        return TakePlan::default();
    }
    let mut expired = Vec::new();
    // Load per worker; a lease with a pending handoff counts for its recipient.
    let mut load: BTreeMap<WorkerId, Vec<&Lease>> = BTreeMap::new();
    load.entry(me.clone()).or_default();
    for w in workers {
        if seen.worker_alive(&w.worker, now, failover) {
            load.entry(w.worker.clone()).or_default();
        }
    }
    for lease in &active {
        if seen.is_expired(lease, now, failover) {
            expired.push((*lease).clone());
            continue;
        }
        let holder = lease.handoff_to.as_ref().or(lease.owner.as_ref());
        if let Some(holder) = holder {
            load.entry(holder.clone()).or_default().push(lease);
        }
    }
    let target = active.len().div_ceil(load.len());
    let mine = load.get(me).map_or(0, Vec::len);
    let mut plan = TakePlan { target, ..TakePlan::default() };
    if mine >= target {
        return plan;
    }
    let needed = target - mine;
    if !expired.is_empty() {
        // Prefer leases this worker held before, then by key: stable and predictable.
        expired.sort_by(|a, b| (!a.is_owned_by(me), &a.key).cmp(&(!b.is_owned_by(me), &b.key)));
        expired.truncate(needed);
        plan.take = expired;
        return plan;
    }
    let mut victims: Vec<(&WorkerId, &Vec<&Lease>)> = load.iter().filter(|(w, _)| *w != me).collect();
    victims.sort_by(|a, b| b.1.len().cmp(&a.1.len()).then_with(|| a.0.cmp(b.0)));
    for (_, their) in victims {
        let wanted = needed - plan.steal.len();
        let count = their.len();
        let allowance = if count > target {
            count - target
        } else if count == target && wanted > 1 {
            1
        } else {
            break;
        };
        let mut open: Vec<&&Lease> = their.iter().filter(|l| l.handoff_to.is_none()).collect();
        open.sort_by_key(|l| steal_order(me, &l.key));
        plan.steal.extend(open.into_iter().take(allowance.min(wanted)).map(|l| (*l).clone()));
        if plan.steal.len() >= needed {
            break;
        }
    }
    plan
}

/// Decides which leases `me`, holding `mine`, takes or steals this cycle from
/// `sample`, some of the active leases, as [`plan_takes`] decides from all of them:
/// free and expired leases first, up to `fleet.target`; when the sample has none,
/// handoffs from the workers holding the most (as their records report it), as many
/// as each holds above the target (one from a worker at the target while this one
/// needs more than one), among their leases in the sample. Ended leases are ignored.
/// A plan with fewer leases than needed means the sample was too small.
#[allow(clippy::too_many_arguments)]
pub fn plan_from_sample(
    me: &WorkerId,
    mine: usize,
    sample: &[Lease],
    fleet: &Census,
    workers: &[WorkerHeartbeat],
    seen: &Observations,
    now: Timestamp,
    failover: Duration,
) -> TakePlan {
    let target = fleet.target;
    let mut plan = TakePlan { target, ..TakePlan::default() };
    if mine >= target {
        return plan;
    }
    let needed = target - mine;
    let active: Vec<&Lease> = sample.iter().filter(|l| !l.ended).collect();
    let mut expired: Vec<Lease> =
        active.iter().filter(|l| seen.is_expired(l, now, failover)).map(|l| (*l).clone()).collect();
    if !expired.is_empty() {
        // Leases this worker held before first, then in an order of its own (workers
        // sampling the same part at once pick different ones).
        expired.sort_by_key(|l| (!l.is_owned_by(me), steal_order(me, &l.key)));
        expired.truncate(needed);
        plan.take = expired;
        return plan;
    }
    let mut victims: Vec<&WorkerHeartbeat> =
        workers.iter().filter(|w| w.worker != *me && seen.worker_alive(&w.worker, now, failover)).collect();
    victims.sort_by(|a, b| b.load.held.cmp(&a.load.held).then_with(|| a.worker.cmp(&b.worker)));
    for victim in victims {
        let wanted = needed - plan.steal.len();
        let count = victim.load.held as usize;
        let allowance = if count > target {
            count - target
        } else if count == target && wanted > 1 {
            1
        } else {
            break;
        };
        let mut open: Vec<&&Lease> =
            active.iter().filter(|l| l.is_owned_by(&victim.worker) && l.handoff_to.is_none()).collect();
        open.sort_by_key(|l| steal_order(me, &l.key));
        plan.steal.extend(open.into_iter().take(allowance.min(wanted)).map(|l| (*l).clone()));
        if plan.steal.len() >= needed {
            break;
        }
    }
    plan
}

/// The order in which `stealer` prefers another worker's leases: FNV-1a of both.
fn steal_order(stealer: &WorkerId, key: &ShardId) -> u64 {
    crate::stable_hash::fnv1a(stealer.as_str().bytes().chain([0]).chain(key.as_str().bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lease::NewLease;
    use crate::position::Checkpoint;

    fn lease(key: &str, owner: Option<&str>, counter: u64) -> Lease {
        let mut l =
            NewLease { key: ShardId::new(key), initial: Checkpoint::TrimHorizon, parents: vec![], hash_range: None }
                .into_lease();
        l.owner = owner.map(WorkerId::new);
        l.counter = counter;
        l
    }

    fn hb(w: &str, c: u64) -> WorkerHeartbeat {
        let load = crate::ports::WorkerLoad { held: 1, active: 1 };
        WorkerHeartbeat { worker: WorkerId::new(w), counter: c, instance: String::new(), load }
    }

    /// An earlier weir's record (no load) heartbeats every taker cycle and does not
    /// tie its leases to it: its leases go by their own counters only.
    #[test]
    fn an_earlier_weirs_stale_record_takes_none_of_its_leases() {
        let me = WorkerId::new("a");
        let leases = vec![lease("s0", Some("old"), 7)];
        let old = WorkerHeartbeat { load: Default::default(), ..hb("old", 4) };
        let mut seen = Observations::default();
        seen.observe(&leases, &[hb("a", 1), old.clone()], Timestamp::from_millis(0));
        let moved = vec![lease("s0", Some("old"), 8)];
        seen.observe_leases(&moved, Timestamp::from_millis(9_000));
        seen.observe_workers(&[hb("a", 2), old.clone()], Timestamp::from_millis(10_000));
        let plan = plan_takes(&me, &moved, &[hb("a", 2), old], &seen, Timestamp::from_millis(10_000), F);
        assert!(plan.take.is_empty(), "the lease's own counter moved: {plan:?}");
    }

    #[test]
    fn leases_of_a_worker_whose_heartbeat_stopped_expire_with_it() {
        let me = WorkerId::new("a");
        let leases = vec![lease("s0", Some("b"), 7), lease("s1", Some("kcl-worker"), 3)];
        let mut seen = Observations::default();
        seen.observe(&leases, &[hb("a", 1), hb("b", 4)], Timestamp::from_millis(0));
        // The leases' counters keep moving; b's heartbeat does not.
        let moved = vec![lease("s0", Some("b"), 9), lease("s1", Some("kcl-worker"), 5)];
        seen.observe_leases(&moved, Timestamp::from_millis(9_000));
        seen.observe_workers(&[hb("a", 2), hb("b", 4)], Timestamp::from_millis(9_000));
        let at = |ms| plan_takes(&me, &moved, &[hb("a", 2), hb("b", 4)], &seen, Timestamp::from_millis(ms), F);
        assert!(at(9_999).take.is_empty(), "b's heartbeat seen within failover");
        let plan = at(10_000);
        let taken: Vec<&str> = plan.take.iter().map(|l| l.key.as_str()).collect();
        assert_eq!(taken, ["s0"], "b's lease goes with its heartbeat; an owner without a record keeps its own counter");
    }

    const F: Duration = Duration::from_secs(10);

    #[test]
    fn takes_free_leases_up_to_target() {
        let leases: Vec<Lease> = (0..12).map(|i| lease(&format!("s{i:02}"), None, 0)).collect();
        let workers = [hb("a", 1), hb("b", 1), hb("c", 1)];
        let mut seen = Observations::default();
        let t0 = Timestamp::from_millis(0);
        seen.observe(&leases, &workers, t0);
        let plan = plan_takes(&WorkerId::new("a"), &leases, &workers, &seen, t0, F);
        assert_eq!(plan.target, 4);
        assert_eq!(plan.take.len(), 4);
        assert!(plan.steal.is_empty());
    }

    #[test]
    fn expiry_uses_observer_clock() {
        let leases = vec![lease("s0", Some("b"), 7)];
        let mut seen = Observations::default();
        let me = WorkerId::new("a");
        seen.observe(&leases, &[], Timestamp::from_millis(1_000));
        let at = |ms| plan_takes(&me, &leases, &[], &seen, Timestamp::from_millis(ms), F);
        assert!(at(10_999).take.is_empty(), "not expired before failover");
        assert_eq!(at(11_000).take.len(), 1, "expired after failover unchanged");
        // A renewal seen restarts the clock.
        let renewed = vec![lease("s0", Some("b"), 8)];
        seen.observe(&renewed, &[], Timestamp::from_millis(10_000));
        let plan = plan_takes(&me, &renewed, &[], &seen, Timestamp::from_millis(15_000), F);
        assert!(plan.take.is_empty());
    }

    #[test]
    fn steals_one_from_most_loaded() {
        let mut leases = Vec::new();
        for i in 0..4 {
            leases.push(lease(&format!("a{i}"), Some("a"), 1));
            leases.push(lease(&format!("b{i}"), Some("b"), 1));
            leases.push(lease(&format!("c{i}"), Some("c"), 1));
        }
        leases.push(lease("c4", Some("c"), 1));
        let workers = [hb("a", 1), hb("b", 1), hb("c", 1), hb("d", 1)];
        let mut seen = Observations::default();
        let t = Timestamp::from_millis(0);
        seen.observe(&leases, &workers, t);
        let plan = plan_takes(&WorkerId::new("d"), &leases, &workers, &seen, t, F);
        assert_eq!(plan.target, 4); // ceil(13 / 4)
        assert!(plan.take.is_empty());
        let owners: Vec<_> = plan.steal.iter().map(|l| l.owner.clone().unwrap()).collect();
        // d needs 4: one from c (5, above the target), then one each from a and b (at
        // the target, while d still needs more than one); then d needs one: no more.
        assert_eq!(owners, [WorkerId::new("c"), WorkerId::new("a"), WorkerId::new("b")]);
    }

    #[test]
    fn a_new_worker_steals_all_it_needs_at_once_and_stealers_pick_different_leases() {
        let mut leases = Vec::new();
        for i in 0..40 {
            leases.push(lease(&format!("a{i:02}"), Some("a"), 1));
        }
        let workers = [hb("a", 1), hb("b", 1), hb("c", 1), hb("d", 1)];
        let mut seen = Observations::default();
        let t = Timestamp::from_millis(0);
        seen.observe(&leases, &workers, t);
        let plans: Vec<TakePlan> =
            ["b", "c", "d"].iter().map(|me| plan_takes(&WorkerId::new(*me), &leases, &workers, &seen, t, F)).collect();
        for p in &plans {
            assert_eq!((p.target, p.steal.len()), (10, 10), "each needs 10 of a's 30 above the target");
        }
        let keys = |p: &TakePlan| p.steal.iter().map(|l| l.key.clone()).collect::<BTreeSet<_>>();
        let common = keys(&plans[0]).intersection(&keys(&plans[1])).count();
        assert!(common < 10, "b and c prefer different leases: {common} in common");
    }

    #[test]
    fn balanced_fleet_steals_nothing() {
        let mut leases = Vec::new();
        for i in 0..4 {
            leases.push(lease(&format!("a{i}"), Some("a"), 1));
            leases.push(lease(&format!("b{i}"), Some("b"), 1));
        }
        let workers = [hb("a", 1), hb("b", 1)];
        let mut seen = Observations::default();
        let t = Timestamp::from_millis(0);
        seen.observe(&leases, &workers, t);
        let plan = plan_takes(&WorkerId::new("a"), &leases, &workers, &seen, t, F);
        assert_eq!(plan, TakePlan { target: 4, ..TakePlan::default() });
    }

    #[test]
    fn pending_handoff_counts_for_recipient() {
        let mut leases = vec![lease("a0", Some("a"), 1), lease("a1", Some("a"), 1)];
        leases[1].handoff_to = Some(WorkerId::new("b"));
        let workers = [hb("a", 1), hb("b", 1)];
        let mut seen = Observations::default();
        let t = Timestamp::from_millis(0);
        seen.observe(&leases, &workers, t);
        let plan = plan_takes(&WorkerId::new("b"), &leases, &workers, &seen, t, F);
        assert!(plan.steal.is_empty() && plan.take.is_empty());
    }

    #[test]
    fn ended_leases_are_ignored() {
        let mut l = lease("s0", None, 3);
        l.ended = true;
        let plan = plan_takes(&WorkerId::new("a"), &[l], &[], &Observations::default(), Timestamp::default(), F);
        assert!(plan.take.is_empty());
    }

    #[test]
    fn dead_workers_do_not_count() {
        let leases: Vec<Lease> = (0..4).map(|i| lease(&format!("s{i}"), None, 0)).collect();
        let workers = [hb("a", 1), hb("gone", 5)];
        let mut seen = Observations::default();
        seen.observe(&leases, &workers, Timestamp::from_millis(0));
        let later = Timestamp::from_millis(20_000);
        let plan = plan_takes(&WorkerId::new("a"), &leases, &workers, &seen, later, F);
        assert_eq!(plan.target, 4);
    }

    fn loaded(w: &str, held: u32) -> WorkerHeartbeat {
        let load = crate::ports::WorkerLoad { held, active: 100 };
        WorkerHeartbeat { worker: WorkerId::new(w), counter: 1, instance: String::new(), load }
    }

    fn fleet(target: usize) -> Census {
        Census { live: 4, active: 100, held: 100, target, free: 0, leader: false, list: true }
    }

    /// From a sample, free and expired leases first, up to what the census's target
    /// leaves this worker to take.
    #[test]
    fn a_sample_gives_its_free_leases_up_to_the_census_target() {
        let me = WorkerId::new("d");
        let sample: Vec<Lease> =
            (0..10).map(|i| lease(&format!("s{i}"), if i < 4 { None } else { Some("a") }, 1)).collect();
        let workers = [loaded("a", 30), loaded("b", 25), loaded("c", 25), loaded("d", 20)];
        let mut seen = Observations::default();
        let t0 = Timestamp::from_millis(0);
        seen.observe(&sample, &workers, t0);
        let plan = plan_from_sample(&me, 22, &sample, &fleet(25), &workers, &seen, t0, F);
        assert_eq!(plan.target, 25);
        assert_eq!(plan.take.len(), 3, "three to reach 25");
        assert!(plan.take.iter().all(|l| l.owner.is_none()), "free ones only: {plan:?}");
        let other = plan_from_sample(&WorkerId::new("e"), 22, &sample, &fleet(25), &workers, &seen, t0, F);
        assert_ne!(other.take, plan.take, "another worker picks in its own order");
        assert!(plan.steal.is_empty());
        assert_eq!(
            plan_from_sample(&me, 25, &sample, &fleet(25), &workers, &seen, t0, F),
            TakePlan { target: 25, ..TakePlan::default() }
        );
    }

    /// Without free leases in the sample: handoffs from the workers the census shows
    /// above the target, as many as each holds above it, among their sampled leases.
    #[test]
    fn a_sample_without_free_leases_gives_handoffs_from_the_most_loaded() {
        let me = WorkerId::new("d");
        let mut sample: Vec<Lease> = (0..6).map(|i| lease(&format!("a{i}"), Some("a"), 1)).collect();
        sample.extend((0..6).map(|i| lease(&format!("b{i}"), Some("b"), 1)));
        let mut handed = lease("a9", Some("a"), 1);
        handed.handoff_to = Some(WorkerId::new("c"));
        sample.push(handed);
        let workers = [loaded("a", 28), loaded("b", 26), loaded("c", 25), loaded("d", 20)];
        let mut seen = Observations::default();
        let t0 = Timestamp::from_millis(0);
        seen.observe(&sample, &workers, t0);
        let plan = plan_from_sample(&me, 20, &sample, &fleet(25), &workers, &seen, t0, F);
        assert!(plan.take.is_empty());
        let from = |w: &str| plan.steal.iter().filter(|l| l.is_owned_by(&WorkerId::new(w))).count();
        // c, at the target, would give one, but none of its leases is in the sample:
        // four of the five needed (the coordinator reads another part).
        assert_eq!((from("a"), from("b"), from("c")), (3, 1, 0), "a's excess, then b's: {plan:?}");
        assert!(plan.steal.iter().all(|l| l.handoff_to.is_none()), "a lease already asked for is not asked for again");
    }
}
