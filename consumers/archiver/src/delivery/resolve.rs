//! Resolving an earlier owner's open intents when a shard opens (exactly-once mode).
//!
//! Each open intent names an object key that may or may not have been written. The
//! new owner first tries to *claim* the key: a create-only put of an empty object. If
//! the claim lands, the earlier owner's put can never land after it (it is create-only
//! too), so the records are not archived and will be archived again from the stream.
//! If the key exists and holds anything but a claim, the object was written: its
//! records (of this shard, in the intent's range, routed to the intent's scope) are
//! durable and are skipped when the stream delivers them again.
//!
//! An intent that lists its parts exactly (an error output's) says more: the earlier
//! owner routed exactly those parts there. Written, they are skipped wherever they
//! would go now. A data intent names the parts of its range its owner sent elsewhere
//! (exceptions): those are not in it. A claimed error object says nothing: intents of
//! several owners stay open until a checkpoint passes them, and a part one owner sent to
//! an error output that never came may be in a later owner's data object.

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use futures::StreamExt;
use weir_core::ports::{ObjectSink, SinkError};
use weir_core::{ConsumerError, ExtendedSequenceNumber, Intent, PartPosition, PartRun, ShardId};

use crate::delivery::claim::{Claims, KeyState, RESOLVE_CONCURRENCY, WrittenKeys, claim_or_check};
use crate::delivery::expand;

/// What an earlier owner's open intents say about the records of one shard read again.
#[derive(Debug, Default, Clone)]
pub struct SkipList {
    /// Written objects of data partitions: the records in the range routed to the
    /// partition (scope) are durable, but for the exceptions (which went elsewhere).
    ranges: Vec<(String, ExtendedSequenceNumber, ExtendedSequenceNumber, Vec<PartRun>)>,
    /// Written objects that list their parts: those parts are durable.
    exact: Vec<PartRun>,
}

impl SkipList {
    /// Whether `part` routed to `scope` is already durable. Parts must be asked in order
    /// (ranges behind them are dropped).
    pub fn covers(&mut self, scope: &str, part: &PartPosition) -> bool {
        if self.ranges.is_empty() {
            return false;
        }
        let position = &part.position;
        self.ranges.retain(|(_, _, last, _)| last >= position);
        self.ranges.iter().any(|(s, first, last, except)| {
            s == scope && first <= position && position <= last && !except.iter().any(|r| r.holds(part))
        })
    }

    /// Whether `part` is in a written object that lists its parts (wherever it would go
    /// now). Parts must be asked in order.
    pub fn exactly(&mut self, part: &PartPosition) -> bool {
        if self.exact.is_empty() {
            return false;
        }
        self.exact.retain(|r| r.last >= *part);
        self.exact.iter().any(|r| r.holds(part))
    }

    /// Whether some written data object's range holds `part` (whatever its partition,
    /// and it is not one of the range's exceptions): a part whose partition is not known
    /// now may be in it.
    pub fn any_range_holds(&self, part: &PartPosition) -> bool {
        let position = &part.position;
        self.ranges.iter().any(|(_, first, last, except)| {
            first <= position && position <= last && !except.iter().any(|r| r.holds(part))
        })
    }

    /// Ranges and runs left.
    pub fn len(&self) -> usize {
        self.ranges.len() + self.exact.len()
    }

    /// Whether nothing is to be skipped.
    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty() && self.exact.is_empty()
    }
}

/// Resolves every open intent of a shard, up to [`RESOLVE_CONCURRENCY`] keys at once.
/// `own` answers for keys this process wrote itself. On an error some keys may be
/// claimed already; resolving again finds those claims and gives the same answer.
pub async fn resolve(
    sink: &dyn ObjectSink,
    intents: &[Intent],
    claims: &Claims,
    own: impl Fn(&str) -> Option<KeyState>,
) -> Result<(SkipList, BTreeMap<String, KeyState>), SinkError> {
    let mut states: BTreeMap<String, KeyState> = BTreeMap::new();
    let mut ask: Vec<(String, Bytes)> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for intent in intents {
        if !seen.insert(intent.target.as_str()) {
            continue;
        }
        match own(&intent.target) {
            Some(s) => {
                states.insert(intent.target.clone(), s);
            }
            None => ask.push((intent.target.clone(), claims.of_scope(&intent.scope).clone())),
        }
    }
    let answers: Vec<(String, Result<KeyState, SinkError>)> = futures::stream::iter(ask)
        .map(|(key, claim): (String, Bytes)| async move {
            let state = claim_or_check(sink, &key, &claim).await;
            (key, state)
        })
        .buffer_unordered(RESOLVE_CONCURRENCY)
        .collect()
        .await;
    for (key, state) in answers {
        states.insert(key, state?);
    }
    let mut skip = SkipList::default();
    for intent in intents {
        match (states.get(&intent.target), intent.parts.is_empty()) {
            (Some(KeyState::Written), true) => {
                let except = intent.except.clone();
                skip.ranges.push((intent.scope.clone(), intent.first.clone(), intent.last.clone(), except));
            }
            (Some(KeyState::Written), false) => skip.exact.extend(intent.parts.iter().cloned()),
            _ => {}
        }
    }
    skip.exact.sort_by(|a, b| a.first.cmp(&b.first));
    Ok((skip, states))
}

/// A shard's resolved intents.
#[derive(Debug, Default)]
pub struct Resolved {
    /// What to skip.
    pub skip: SkipList,
    /// What each key turned out to be.
    pub states: BTreeMap<String, KeyState>,
    /// How many intents (manifests expanded) there were.
    pub intents: usize,
    /// Manifests of the shard no open intent reaches, listed while resolving: deleted
    /// only once a conditional lease write of this owner, made after the listing, has
    /// landed ([`expand::delete_manifests`]).
    pub leftovers: Vec<String>,
}

/// The resolution of a shard's open intents.
pub type Resolution = Result<Resolved, ConsumerError>;

/// Resolves the open intents of `shard` (manifests expanded); `written` are keys this
/// process wrote itself. Then lists the manifests of the shard under `manifests` (its
/// manifest prefix, [`crate::delivery::manifest::prefix`]) that no open intent reaches: left by a round
/// whose intent write never landed (a crash between the two, a lost lease). The listing
/// runs before this owner writes any manifest of the shard, so none of its own are in
/// it, and a manifest a zombie writes can never be named (the zombie's lease write
/// fails).
///
/// They are not deleted here: this owner may have lost the lease before it listed (a
/// pause anywhere in resolving), and the new holder's manifests, named by its lease,
/// would then be listed as leftovers. Deleting them makes whoever opens the shard next
/// take their objects as never written and archive them twice. The caller deletes them
/// after a conditional lease write made after the listing lands: that proves no one took
/// the lease between this owner's take and the listing. Sweeping is best effort: a
/// refused or failed list (no `s3:ListBucket`) finds none.
pub async fn resolve_shard(
    sink: Arc<dyn ObjectSink>,
    shard: &ShardId,
    open: Vec<Intent>,
    claims: &Claims,
    written: &WrittenKeys,
    manifests: &str,
) -> Resolution {
    let expanded = expand::expand_manifests(sink.as_ref(), shard, open).await?;
    let own = |key: &str| written.contains(key).then_some(KeyState::Written);
    let (skip, states) = resolve(sink.as_ref(), &expanded.intents, claims, own)
        .await
        .map_err(|e| ConsumerError::with_source(format!("cannot resolve open intents of {shard}"), e))?;
    let leftovers = if expanded.complete {
        expand::leftover_manifests(sink.as_ref(), shard, manifests, &expanded.reached).await
    } else {
        Vec::new()
    };
    Ok(Resolved { skip, states, intents: expanded.intents.len(), leftovers })
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_core::SequenceNumber;
    use weir_core::ports::{PutOptions, PutOutcome};
    use weir_testkit::MemoryObjectSink;

    fn p(n: u128) -> ExtendedSequenceNumber {
        ExtendedSequenceNumber::plain(SequenceNumber::from_u128(n))
    }

    fn intent(key: &str, scope: &str, first: u128, last: u128) -> Intent {
        Intent {
            target: key.into(),
            scope: scope.into(),
            first: p(first),
            last: p(last),
            parts: vec![],
            except: vec![],
        }
    }

    #[tokio::test]
    async fn written_keys_skip_claimed_keys_replay() {
        let sink = MemoryObjectSink::new();
        let claim = crate::delivery::body::claim_body(weir_firehose::Compression::Gzip, None);
        sink.put_if_absent("a/written.gz", Bytes::from_static(b"data"), &PutOptions::default()).await.unwrap();
        sink.put_if_absent("a/claimed.gz", claim.clone(), &PutOptions::default()).await.unwrap();
        let intents = [
            intent("a/written.gz", "t1", 1, 5),
            intent("a/missing.gz", "t2", 2, 6),
            intent("a/claimed.gz", "t1", 7, 9),
            // Left by a configuration whose prefix made keys the store refuses.
            intent("a/../escape.gz", "t3", 3, 4),
        ];
        let (mut skip, states) = resolve(&sink, &intents, &Claims::same(claim.clone()), |_| None).await.unwrap();
        assert_eq!(states["a/written.gz"], KeyState::Written);
        assert_eq!(states["a/missing.gz"], KeyState::Claimed);
        assert_eq!(states["a/claimed.gz"], KeyState::Claimed);
        assert_eq!(states["a/../escape.gz"], KeyState::Claimed, "an invalid key holds nothing; no retry forever");
        assert_eq!(sink.get("a/missing.gz").await.unwrap().unwrap(), claim, "the missing key is claimed");
        let at = |n| PartPosition { position: p(n), part: 0 };
        assert!(skip.covers("t1", &at(1)));
        assert!(!skip.covers("t2", &at(3)), "other scopes are not skipped");
        assert!(skip.covers("t1", &at(5)));
        assert!(!skip.covers("t1", &at(8)), "claimed ranges are archived again");
        assert!(skip.is_empty(), "ranges behind the position are dropped");
        // A late put of the earlier owner now fails: the claim holds the key.
        let late = sink.put_if_absent("a/missing.gz", Bytes::from_static(b"late"), &PutOptions::default()).await;
        assert_eq!(late.unwrap(), PutOutcome::AlreadyExists);
    }

    /// A store whose every call takes 100 ms.
    struct Slow(MemoryObjectSink);

    #[async_trait::async_trait]
    impl ObjectSink for Slow {
        async fn put_if_absent(&self, key: &str, body: Bytes, o: &PutOptions) -> Result<PutOutcome, SinkError> {
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            self.0.put_if_absent(key, body, o).await
        }
        async fn get(&self, key: &str) -> Result<Option<Bytes>, SinkError> {
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            self.0.get(key).await
        }
        async fn stat(&self, key: &str) -> Result<Option<weir_core::ports::ObjectMeta>, SinkError> {
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            self.0.stat(key).await
        }
        async fn list(&self, prefix: &str) -> Result<Vec<weir_core::ports::ObjectMeta>, SinkError> {
            self.0.list(prefix).await
        }
        async fn delete(&self, key: &str) -> Result<(), SinkError> {
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            self.0.delete(key).await
        }
        fn location(&self) -> String {
            "slow".into()
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_thousand_intents_resolve_in_two_seconds_at_100_ms_a_call() {
        let sink = Slow(MemoryObjectSink::new());
        let claim = crate::delivery::body::claim_body(weir_firehose::Compression::Gzip, None);
        let mut intents = Vec::new();
        for i in 0..1_000u128 {
            let key = format!("t/{i}.gz");
            if i % 2 == 0 {
                sink.0.put_if_absent(&key, Bytes::from_static(b"data"), &PutOptions::default()).await.unwrap();
            }
            intents.push(intent(&key, "t", i * 10 + 1, i * 10 + 5));
        }
        let started = tokio::time::Instant::now();
        let (mut skip, states) = resolve(&sink, &intents, &Claims::same(claim.clone()), |_| None).await.unwrap();
        let took = started.elapsed();
        assert!(took <= std::time::Duration::from_secs(2), "took {took:?}");
        assert_eq!(states.values().filter(|s| **s == KeyState::Written).count(), 500);
        assert_eq!(skip.len(), 500);
        assert!(skip.covers("t", &PartPosition { position: p(3), part: 0 }), "written: skipped");
        assert!(!skip.covers("t", &PartPosition { position: p(13), part: 0 }), "claimed: archived again");
    }
}
