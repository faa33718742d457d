//! Findings from the lease table, read twice `observed` apart: parents that some
//! consumer has not finished (named), a holder whose renewals stopped, a lease nobody
//! holds, a handoff that does not complete, a consumer whose checkpoint did not move
//! on a shard its worker renews.

use std::time::Duration;

use weir_core::{Checkpoint, ConsumerName, Lease};

use super::Finding;
use crate::commands::leases::checkpoint_text;

/// The findings for the table as read `observed` apart (`before`, then `after`).
pub(crate) fn diagnose(
    before: &[Lease],
    after: &[Lease],
    observed: Duration,
    consumers: &[ConsumerName],
) -> Vec<Finding> {
    let mut out = Vec::new();
    for l in after.iter().filter(|l| !l.ended) {
        let finding = |stuck, text: String| Finding { shard: l.key.to_string(), stuck, text };
        let earlier = before.iter().find(|b| b.key == l.key);
        // Parents some consumer has not finished: stuck only if such a parent is not
        // being processed itself (nobody holds it, or its holder stopped renewing).
        let mut waiting = Vec::new();
        let mut parent_stuck = false;
        for p in &l.parents {
            let Some(parent) = after.iter().find(|x| &x.key == p) else { continue };
            if parent.ended {
                continue;
            }
            let parent_renewed =
                before.iter().find(|b| b.key == parent.key).is_some_and(|b| b.counter != parent.counter);
            parent_stuck |= parent.owner.is_none() || !parent_renewed;
            let unfinished: Vec<String> = consumers
                .iter()
                .filter(|c| *parent.checkpoint_for(c) != Checkpoint::ShardEnd)
                .map(|c| format!("{c} at {}", checkpoint_text(parent.checkpoint_for(c))))
                .collect();
            waiting.push(format!("{p} ({})", unfinished.join(", ")));
        }
        if !waiting.is_empty() {
            let why = if parent_stuck { "which is not being processed: look at the parent" } else { "being processed" };
            out.push(finding(
                parent_stuck,
                format!("waits for parent {} to be finished by every consumer, {why}", waiting.join(", ")),
            ));
            continue;
        }
        let renewed = earlier.is_some_and(|b| b.counter != l.counter);
        match (&l.owner, &l.handoff_to) {
            (None, _) => out.push(finding(
                true,
                format!("no worker holds it (for {observed:?}); are workers running on this namespace, with room for it?"),
            )),
            (Some(owner), _) if !renewed => out.push(finding(
                true,
                format!(
                    "held by {owner}, but its counter ({}) did not move in {observed:?}: the worker stopped renewing (dead, paused or cut off); another worker takes the lease after worker.failover",
                    l.counter
                ),
            )),
            (Some(owner), Some(to)) if earlier.is_some_and(|b| b.handoff_to.as_ref() == Some(to)) => out.push(finding(
                false,
                format!("held by {owner}, handing over to {to} for at least {observed:?} (forced after handoff_timeout + failover)"),
            )),
            (Some(owner), _) => {
                for c in consumers {
                    let was = earlier.map(|b| b.checkpoint_for(c));
                    let now = l.checkpoint_for(c);
                    if was == Some(now) && *now != Checkpoint::ShardEnd {
                        out.push(finding(
                            false,
                            format!(
                                "held and renewed by {owner}, but {c}'s checkpoint stayed at {} for {observed:?}: no new records, or {c} is failing (its errors are in {owner}'s log and weir_consumer_failures_total)",
                                checkpoint_text(now)
                            ),
                        ));
                    }
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_core::{ExtendedSequenceNumber, SequenceNumber, ShardId, WorkerId};

    fn lease(key: &str, owner: Option<&str>, counter: u64) -> Lease {
        let mut l = weir_testkit::fixtures::new_lease(key, &[]).into_lease();
        l.owner = owner.map(WorkerId::new);
        l.counter = counter;
        l
    }

    fn at(n: u128) -> Checkpoint {
        Checkpoint::At(ExtendedSequenceNumber::plain(SequenceNumber::from_u128(n)))
    }

    const T: Duration = Duration::from_secs(10);

    #[test]
    fn each_situation_is_explained() {
        let cs = [ConsumerName::new("archive"), ConsumerName::new("alerts")];
        // A parent the archive consumer has not finished; its child waits.
        let mut parent = lease("p", Some("w1"), 5);
        parent.checkpoints.insert(cs[0].clone(), at(7));
        parent.checkpoints.insert(cs[1].clone(), Checkpoint::ShardEnd);
        let mut child = lease("c", None, 0);
        child.parents = vec![ShardId::new("p")];
        let mut parent_later = parent.clone();
        parent_later.counter = 9;
        parent_later.checkpoints.insert(cs[0].clone(), at(8));
        // A holder that stopped renewing; a lease nobody holds; a healthy one.
        let dead = lease("dead", Some("w2"), 3);
        let free = lease("free", None, 1);
        let mut healthy = lease("ok", Some("w1"), 10);
        healthy.checkpoints.insert(cs[0].clone(), at(1));
        healthy.checkpoints.insert(cs[1].clone(), at(1));
        let mut healthy_later = healthy.clone();
        healthy_later.counter = 12;
        healthy_later.checkpoints.insert(cs[0].clone(), at(5));
        let before = vec![parent, child.clone(), dead.clone(), free.clone(), healthy];
        let after = vec![parent_later, child, dead, free, healthy_later];
        let f = diagnose(&before, &after, T, &cs);
        let of = |s: &str| f.iter().filter(|x| x.shard == s).cloned().collect::<Vec<_>>();
        assert!(of("p").is_empty(), "a moving parent is fine: {f:?}");
        let c = &of("c")[0];
        assert!(!c.stuck && c.text.contains("waits for parent p (archive at 8)"), "{c:?}");
        assert!(c.text.contains("being processed"), "{c:?}");
        assert!(!c.text.contains("alerts"), "alerts finished the parent: {c:?}");
        let d = &of("dead")[0];
        assert!(d.stuck && d.text.contains("held by w2, but its counter (3) did not move"), "{d:?}");
        let fr = &of("free")[0];
        assert!(fr.stuck && fr.text.contains("no worker holds it"), "{fr:?}");
        let ok = of("ok");
        assert_eq!(ok.len(), 1, "only alerts' checkpoint did not move: {ok:?}");
        assert!(!ok[0].stuck && ok[0].text.contains("alerts's checkpoint stayed at"), "{ok:?}");
        assert_eq!(f.iter().filter(|x| x.stuck).count(), 2);
        // The same child under a parent whose holder stopped renewing is stuck.
        let f = diagnose(&before, &before, T, &cs);
        let c = f.iter().find(|x| x.shard == "c").unwrap();
        assert!(c.stuck && c.text.contains("not being processed"), "{c:?}");
    }
}
