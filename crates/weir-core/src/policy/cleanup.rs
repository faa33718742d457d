//! Which ended leases may be deleted (`weir leases delete-ended`).
//!
//! An ended lease is kept while its shard is still listed by the stream: workers
//! create a lease for every listed shard that has none, so deleting it would make them
//! read the whole shard again. A shard leaves the list only after the stream's
//! retention period, so that rule is also the age rule. It is also kept until every
//! child has started for every consumer that finished the shard (a checkpoint past the
//! child's start, or the child ended), so `weir leases list` and `weir doctor` keep
//! showing the lineage while children wait for it; a child without a lease that the
//! stream no longer lists is gone too and does not hold its parent.

use std::collections::{BTreeMap, HashSet};

use crate::Checkpoint;
use crate::ids::ShardId;
use crate::lease::Lease;

/// What to do with one ended lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cleanup {
    /// Nothing depends on it any more.
    Delete,
    /// Kept, and why.
    Keep(String),
}

/// For every ended lease of `leases`, whether it may be deleted, given the shards the
/// stream lists now.
pub fn ended_lease_cleanup<'l>(leases: &'l [Lease], listed: &HashSet<ShardId>) -> Vec<(&'l Lease, Cleanup)> {
    let by_key: BTreeMap<&ShardId, &Lease> = leases.iter().map(|l| (&l.key, l)).collect();
    leases.iter().filter(|l| l.ended).map(|l| (l, verdict(l, &by_key, listed))).collect()
}

fn verdict(lease: &Lease, by_key: &BTreeMap<&ShardId, &Lease>, listed: &HashSet<ShardId>) -> Cleanup {
    if lease.owner.is_some() {
        return Cleanup::Keep(format!("held by {}", lease.owner.as_ref().map(|o| o.as_str()).unwrap_or_default()));
    }
    if listed.contains(&lease.key) {
        return Cleanup::Keep(
            "the stream still lists the shard (until its retention passes); without a lease workers would read it again"
                .into(),
        );
    }
    for child in &lease.children {
        match by_key.get(child) {
            None if listed.contains(child) => {
                return Cleanup::Keep(format!("child {child} has no lease yet"));
            }
            None => {}
            Some(c) if c.ended => {}
            Some(c) => {
                let waiting: Vec<&str> = lease
                    .checkpoints
                    .keys()
                    .filter(|name| !started(c.checkpoint_for(name)))
                    .map(|n| n.as_str())
                    .collect();
                if !waiting.is_empty() {
                    return Cleanup::Keep(format!("child {child} not started by {}", waiting.join(", ")));
                }
            }
        }
    }
    Cleanup::Delete
}

/// Whether a checkpoint is past the shard's start.
fn started(checkpoint: &Checkpoint) -> bool {
    matches!(checkpoint, Checkpoint::At(_) | Checkpoint::ShardEnd)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::{ConsumerName, WorkerId};
    use crate::sequence::{ExtendedSequenceNumber, SequenceNumber};

    fn lease(key: &str, children: &[&str], ended: bool) -> Lease {
        let mut l = Lease {
            key: ShardId::new(key),
            owner: None,
            counter: 3,
            initial: Checkpoint::TrimHorizon,
            checkpoints: BTreeMap::new(),
            parents: vec![],
            children: children.iter().map(|c| ShardId::new(*c)).collect(),
            hash_range: None,
            ended,
            handoff_to: None,
            intents: BTreeMap::new(),
        };
        if ended {
            for c in ["archive", "alerts"] {
                l.checkpoints.insert(ConsumerName::new(c), Checkpoint::ShardEnd);
            }
        }
        l
    }

    fn at(n: u128) -> Checkpoint {
        Checkpoint::At(ExtendedSequenceNumber::plain(SequenceNumber::from_u128(n)))
    }

    fn listed(keys: &[&str]) -> HashSet<ShardId> {
        keys.iter().map(|k| ShardId::new(*k)).collect()
    }

    fn verdicts(leases: &[Lease], shards: &[&str]) -> Vec<(String, Cleanup)> {
        ended_lease_cleanup(leases, &listed(shards)).into_iter().map(|(l, c)| (l.key.to_string(), c)).collect()
    }

    #[test]
    fn a_parent_goes_once_the_stream_dropped_it_and_its_children_started() {
        let mut child = lease("s-1", &[], false);
        child.checkpoints.insert(ConsumerName::new("archive"), at(10));
        child.checkpoints.insert(ConsumerName::new("alerts"), at(12));
        let leases = [lease("s-0", &["s-1"], true), child];
        assert_eq!(verdicts(&leases, &["s-1"]), vec![("s-0".into(), Cleanup::Delete)]);
    }

    #[test]
    fn a_listed_shard_is_kept_whatever_its_children() {
        let leases = [lease("s-0", &[], true)];
        let v = verdicts(&leases, &["s-0"]);
        assert!(matches!(&v[0].1, Cleanup::Keep(why) if why.contains("still lists the shard")), "{v:?}");
    }

    #[test]
    fn a_child_some_consumer_has_not_started_keeps_its_parent() {
        let mut child = lease("s-1", &[], false);
        child.checkpoints.insert(ConsumerName::new("archive"), at(10));
        let leases = [lease("s-0", &["s-1"], true), child];
        let v = verdicts(&leases, &["s-1"]);
        assert_eq!(v[0].1, Cleanup::Keep("child s-1 not started by alerts".into()));
    }

    #[test]
    fn children_ended_or_gone_do_not_hold_a_parent_but_a_listed_one_without_a_lease_does() {
        let leases = [lease("s-0", &["s-1", "s-2"], true), lease("s-1", &[], true)];
        assert_eq!(verdicts(&leases, &[]), vec![("s-0".into(), Cleanup::Delete), ("s-1".into(), Cleanup::Delete)]);
        let v = verdicts(&leases, &["s-2"]);
        assert_eq!(v[0].1, Cleanup::Keep("child s-2 has no lease yet".into()));
    }

    #[test]
    fn leases_not_ended_or_held_are_not_deleted() {
        let mut held = lease("s-3", &[], true);
        held.owner = Some(WorkerId::new("w1"));
        let leases = [lease("s-2", &[], false), held];
        assert_eq!(verdicts(&leases, &[]), vec![("s-3".into(), Cleanup::Keep("held by w1".into()))]);
    }
}
