//! Which leases to create from the shard list: parents before children.

use std::collections::{BTreeMap, HashSet};

use crate::ids::ShardId;
use crate::lease::NewLease;
use crate::ports::ShardInfo;
use crate::position::Checkpoint;
use crate::record::ChildShard;

/// The leases missing for `shards`, ordered so that every parent comes before its
/// children (a crash between creations never leaves a child without its parent).
///
/// A shard whose parent is known (in the list or already leased) starts at
/// `TrimHorizon`: its records follow its parents' and must not be skipped. Other shards
/// start at `initial`, the application's configured starting position.
pub fn leases_to_create(shards: &[ShardInfo], existing: &HashSet<ShardId>, initial: &Checkpoint) -> Vec<NewLease> {
    let by_id: BTreeMap<&ShardId, &ShardInfo> = shards.iter().map(|s| (&s.id, s)).collect();
    let mut out = Vec::new();
    let mut placed: HashSet<ShardId> = HashSet::new();
    for shard in shards {
        visit(shard, &by_id, existing, initial, &mut placed, &mut out, 0);
    }
    out
}

fn visit(
    shard: &ShardInfo,
    by_id: &BTreeMap<&ShardId, &ShardInfo>,
    existing: &HashSet<ShardId>,
    initial: &Checkpoint,
    placed: &mut HashSet<ShardId>,
    out: &mut Vec<NewLease>,
    depth: usize,
) {
    if placed.contains(&shard.id) || depth > by_id.len() {
        return;
    }
    placed.insert(shard.id.clone());
    for parent in &shard.parents {
        if let Some(p) = by_id.get(parent) {
            visit(p, by_id, existing, initial, placed, out, depth + 1);
        }
    }
    if existing.contains(&shard.id) {
        return;
    }
    let has_known_parent = shard.parents.iter().any(|p| by_id.contains_key(p) || existing.contains(p));
    out.push(NewLease {
        key: shard.id.clone(),
        initial: if has_known_parent { Checkpoint::TrimHorizon } else { initial.clone() },
        parents: shard.parents.clone(),
        hash_range: Some(shard.hash_range),
    });
}

/// The leases of the children that shard ends named (Kinesis's `ChildShards`), each
/// once, in the order first named. Their parents are the ended shards (and, for a
/// merge, an open sibling), whose leases exist, so no ordering is needed; each starts
/// at `TrimHorizon`, after its parents. Reading them from the end saves listing the
/// whole stream (`ListShards`) after each batch of ends: at 10,000 shards a reshard ends
/// thousands of shards within seconds, and the stream takes a limited number of
/// listings a second.
pub fn leases_from_child_shards<'a>(children: impl IntoIterator<Item = &'a ChildShard>) -> Vec<NewLease> {
    let mut seen = HashSet::new();
    children
        .into_iter()
        .filter(|c| seen.insert(c.shard_id.clone()))
        .map(|c| NewLease {
            key: c.shard_id.clone(),
            initial: Checkpoint::TrimHorizon,
            parents: c.parents.clone(),
            hash_range: Some(c.hash_range),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::HashKeyRange;

    fn shard(id: &str, parents: &[&str]) -> ShardInfo {
        ShardInfo {
            id: ShardId::new(id),
            parents: parents.iter().map(|p| ShardId::new(*p)).collect(),
            hash_range: HashKeyRange::FULL,
            closed: false,
        }
    }

    #[test]
    fn parents_before_children_whatever_the_listing_order() {
        let shards = [shard("c", &["a", "b"]), shard("b", &[]), shard("d", &["c"]), shard("a", &[])];
        let got: Vec<String> =
            leases_to_create(&shards, &HashSet::new(), &Checkpoint::Latest).iter().map(|l| l.key.to_string()).collect();
        let pos = |k: &str| got.iter().position(|g| g == k).unwrap();
        assert_eq!(got.len(), 4);
        assert!(pos("a") < pos("c") && pos("b") < pos("c") && pos("c") < pos("d"));
    }

    #[test]
    fn children_start_at_trim_horizon_roots_at_initial() {
        let shards = [shard("a", &[]), shard("b", &["a"])];
        let leases = leases_to_create(&shards, &HashSet::new(), &Checkpoint::Latest);
        assert_eq!(leases[0].initial, Checkpoint::Latest);
        assert_eq!(leases[1].initial, Checkpoint::TrimHorizon);
        // Parent already leased, child new: child still from the start.
        let existing: HashSet<ShardId> = [ShardId::new("a")].into();
        let leases = leases_to_create(&shards[1..], &existing, &Checkpoint::Latest);
        assert_eq!(leases.len(), 1);
        assert_eq!(leases[0].initial, Checkpoint::TrimHorizon);
    }

    #[test]
    fn existing_leases_are_skipped_and_cycles_terminate() {
        let shards = [shard("a", &["b"]), shard("b", &["a"])];
        let existing: HashSet<ShardId> = [ShardId::new("a")].into();
        let leases = leases_to_create(&shards, &existing, &Checkpoint::TrimHorizon);
        assert_eq!(leases.len(), 1);
        assert_eq!(leases[0].key, ShardId::new("b"));
    }

    #[test]
    fn child_shards_become_leases_once_each_after_their_parents() {
        let child = |id: &str, parents: &[&str]| ChildShard {
            shard_id: ShardId::new(id),
            parents: parents.iter().map(|p| ShardId::new(*p)).collect(),
            hash_range: HashKeyRange::FULL,
        };
        // A split's two halves, and a merge named by the ends of both its parents.
        let named = [child("c1", &["p"]), child("c2", &["p"]), child("m", &["a", "b"]), child("m", &["a", "b"])];
        let got = leases_from_child_shards(&named);
        let keys: Vec<&str> = got.iter().map(|l| l.key.as_str()).collect();
        assert_eq!(keys, ["c1", "c2", "m"]);
        assert!(got.iter().all(|l| l.initial == Checkpoint::TrimHorizon && l.hash_range == Some(HashKeyRange::FULL)));
        assert_eq!(got[2].parents, [ShardId::new("a"), ShardId::new("b")]);
    }
}
