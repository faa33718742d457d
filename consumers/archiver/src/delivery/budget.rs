//! What a shard's lease holds of this archiver's intents, and the bound that keeps a
//! lease item far below DynamoDB's 400 KB whatever the partition count, the buffer
//! interval or the rounds per second.
//!
//! Per shard and round, the intents of the round's objects go:
//! - **inline** into the lease while the round has at most [`InlineLimits::per_round`]
//!   objects of the shard and the lease's inline intents of this archiver stay within
//!   [`InlineLimits::per_lease`] intents and [`InlineLimits::bytes`] bytes (their JSON;
//!   keys and partition values can be a kilobyte each, and error outputs list their
//!   records);
//! - else into a **manifest** object, whose one intent (about 250 bytes) goes into the
//!   lease. A lease holds at most [`InlineLimits::manifests`] manifest intents of this
//!   archiver: the round that would pass that writes a manifest that also *absorbs*
//!   the open ones (lists their keys; its range covers theirs), and its intent replaces
//!   them in the same conditional write.
//!
//! So one archiver's intents take at most `bytes + manifests × ~300` bytes of a lease
//! (about 34 KB by default), however long its intents stay open (a 900 s interval at a
//! round a second is 900 rounds, which used to mean 900 manifest intents: 225 KB). An
//! absorbing manifest lists the keys of the manifests still open, so its size grows
//! with the rounds of one interval (tens of kilobytes), and it is written once in
//! `manifests` rounds.
//!
//! The counts are this archiver's knowledge of the lease: what it found at open, what it
//! recorded, less what checkpoints passed.

use std::collections::HashMap;

use weir_core::{ExtendedSequenceNumber, Intent, SequenceNumber, ShardId};

use crate::delivery::manifest::{IntentRef, is_manifest};

/// Most objects of one shard in one round whose intents go inline into the lease.
pub const INLINE_PER_ROUND: usize = 16;

/// Most inline intents a shard's lease holds per archiver.
pub const INLINE_OPEN_MAX: usize = 128;

/// Most bytes of inline intents (their JSON) a shard's lease holds per archiver.
pub const INLINE_BYTES: usize = 24 << 10;

/// Most manifest intents a shard's lease holds per archiver.
pub const MANIFESTS_PER_LEASE: usize = 32;

/// When a round's intents go inline into the leases, and how many manifest intents a
/// lease holds (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InlineLimits {
    /// Most objects of one shard in one round with inline intents.
    pub per_round: usize,
    /// Most inline intents one lease holds.
    pub per_lease: usize,
    /// Most bytes of inline intents one lease holds.
    pub bytes: usize,
    /// Most manifest intents one lease holds (at least one).
    pub manifests: usize,
}

impl Default for InlineLimits {
    fn default() -> Self {
        Self {
            per_round: INLINE_PER_ROUND,
            per_lease: INLINE_OPEN_MAX,
            bytes: INLINE_BYTES,
            manifests: MANIFESTS_PER_LEASE,
        }
    }
}

/// Where a round's intents of one shard go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Placement {
    /// Inline, this many bytes.
    Inline(usize),
    /// Into a manifest, which absorbs the manifests of these intents (replacing them in
    /// the lease).
    Manifest {
        /// The open manifest intents it absorbs (none while the lease has room).
        absorbing: Vec<Intent>,
    },
}

#[derive(Debug, Default)]
struct Held {
    inline: usize,
    inline_bytes: usize,
    manifests: Vec<Intent>,
}

/// What each shard's lease holds of this archiver's intents.
#[derive(Debug, Default)]
pub struct LeaseBudget {
    limits: InlineLimits,
    shards: HashMap<ShardId, Held>,
}

/// The bytes an intent takes in a lease (its JSON).
pub fn bytes_of(intent: &Intent) -> usize {
    serde_json::to_vec(intent).map_or(usize::MAX / 4, |v| v.len())
}

/// The position with the most digits a sequence number can have (129, Kinesis's
/// API limit) and the largest sub-sequence: the longest a position takes in a lease.
pub fn longest_position() -> ExtendedSequenceNumber {
    let nines = "9".repeat(weir_core::sequence::MAX_SEQUENCE_DIGITS);
    let sequence = SequenceNumber::parse(&nines).unwrap_or_else(|_| SequenceNumber::from_u128(u128::MAX));
    ExtendedSequenceNumber::new(sequence, u64::MAX)
}

/// The most bytes the intents of the archiver named `consumer`, kept against `limits`,
/// take in the JSON of the lease item of `shard`: inline intents of at most
/// `limits.bytes` bytes with a separator each (at most `limits.per_lease` of them),
/// `limits.manifests` manifest intents whose positions are [`longest_position`], each
/// with a separator, and the map entry that holds them under the archiver's name.
/// 44,080 bytes with the default limits, a 10-character name and 128-character shard
/// ids; a lease item holds what every exactly-once archiver reading the shard keeps.
pub fn lease_bytes_bound(limits: &InlineLimits, consumer: &str, shard: &ShardId) -> usize {
    let manifest = Intent {
        target: crate::delivery::manifest::key(consumer, shard),
        scope: crate::delivery::manifest::MANIFEST_SCOPE.to_owned(),
        first: longest_position(),
        last: longest_position(),
        parts: Vec::new(),
        except: Vec::new(),
    };
    let inline = limits.bytes + limits.per_lease;
    let manifests = limits.manifests.max(1) * (bytes_of(&manifest) + 1);
    // `"<consumer>":[…],`
    let entry = consumer.len() + 6;
    inline + manifests + entry
}

impl LeaseBudget {
    /// Budgets kept against `limits`.
    pub fn new(limits: InlineLimits) -> Self {
        Self { limits, shards: HashMap::new() }
    }

    /// A shard opened with these intents of this archiver.
    pub fn opened(&mut self, shard: &ShardId, intents: &[Intent]) {
        let mut held = Held::default();
        for i in intents {
            if is_manifest(i) {
                held.manifests.push(i.clone());
            } else {
                held.inline += 1;
                held.inline_bytes += bytes_of(i);
            }
        }
        self.shards.insert(shard.clone(), held);
    }

    /// Where a round's `intents` of `shard` go.
    pub fn place(&self, shard: &ShardId, intents: &[IntentRef<'_>]) -> Placement {
        let held = self.shards.get(shard);
        let (inline, inline_bytes) = held.map_or((0, 0), |h| (h.inline, h.inline_bytes));
        if intents.len() <= self.limits.per_round && inline + intents.len() <= self.limits.per_lease {
            let bytes: usize = intents.iter().map(|i| bytes_of(&i.to_intent())).sum();
            if inline_bytes + bytes <= self.limits.bytes {
                return Placement::Inline(bytes);
            }
        }
        let manifests = held.map_or(&[][..], |h| h.manifests.as_slice());
        if manifests.len() < self.limits.manifests.max(1) {
            Placement::Manifest { absorbing: Vec::new() }
        } else {
            Placement::Manifest { absorbing: manifests.to_vec() }
        }
    }

    /// `n` inline intents of `bytes` were stored.
    pub fn recorded_inline(&mut self, shard: &ShardId, n: usize, bytes: usize) {
        let held = self.shards.entry(shard.clone()).or_default();
        held.inline += n;
        held.inline_bytes += bytes;
    }

    /// A manifest's intent was stored, replacing the manifest intents it absorbed.
    pub fn recorded_manifest(&mut self, shard: &ShardId, intent: Intent, absorbed: &[Intent]) {
        let held = self.shards.entry(shard.clone()).or_default();
        held.manifests.retain(|m| !absorbed.iter().any(|a| a.target == m.target));
        held.manifests.push(intent);
    }

    /// A checkpoint passed these intents.
    pub fn passed(&mut self, shard: &ShardId, intents: &[Intent]) {
        let Some(held) = self.shards.get_mut(shard) else { return };
        for i in intents {
            if is_manifest(i) {
                held.manifests.retain(|m| m.target != i.target);
            } else {
                held.inline = held.inline.saturating_sub(1);
                held.inline_bytes = held.inline_bytes.saturating_sub(bytes_of(i));
            }
        }
    }

    /// The shard is gone from this worker.
    pub fn forget(&mut self, shard: &ShardId) {
        self.shards.remove(shard);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::delivery::manifest::MANIFEST_SCOPE;
    use weir_core::{ExtendedSequenceNumber, SequenceNumber};

    fn p(n: u128) -> ExtendedSequenceNumber {
        ExtendedSequenceNumber::plain(SequenceNumber::from_u128(n))
    }

    fn intent(key: &str, first: u128, last: u128) -> Intent {
        Intent {
            target: key.into(),
            scope: "{\"tenant\":\"t\"}".into(),
            first: p(first),
            last: p(last),
            parts: vec![],
            except: vec![],
        }
    }

    fn refs(intents: &[Intent]) -> Vec<IntentRef<'_>> {
        intents
            .iter()
            .map(|i| IntentRef {
                target: &i.target,
                scope: &i.scope,
                first: &i.first,
                last: &i.last,
                parts: &i.parts,
                except: &i.except,
            })
            .collect()
    }

    #[test]
    fn inline_intents_are_bounded_per_round_per_lease_and_in_bytes() {
        let s = ShardId::new("s");
        let mut b = LeaseBudget::new(InlineLimits::default());
        b.opened(&s, &[intent("a", 1, 2), Intent { scope: MANIFEST_SCOPE.into(), ..intent("m", 1, 2) }]);
        let round: Vec<Intent> = (0..INLINE_PER_ROUND).map(|i| intent(&format!("k{i}"), 1, 2)).collect();
        assert!(matches!(b.place(&s, &refs(&round)), Placement::Inline(_)));
        let big: Vec<Intent> = (0..=INLINE_PER_ROUND).map(|i| intent(&format!("k{i}"), 1, 2)).collect();
        assert_eq!(b.place(&s, &refs(&big)), Placement::Manifest { absorbing: vec![] }, "a large round");
        b.recorded_inline(&s, INLINE_OPEN_MAX - 1, 100);
        assert!(matches!(b.place(&s, &refs(&round[..2])), Placement::Manifest { .. }), "the lease is full of intents");
        b.passed(&s, &[intent("a", 1, 2)]);
        assert!(matches!(b.place(&s, &refs(&round[..1])), Placement::Inline(_)));
        // Long keys: a few intents fill the bytes.
        let long: Vec<Intent> = (0..8).map(|i| intent(&format!("{i}{}", "k".repeat(4_000)), 1, 2)).collect();
        let mut fresh = LeaseBudget::new(InlineLimits::default());
        assert!(matches!(fresh.place(&s, &refs(&long[..4])), Placement::Inline(_)));
        fresh.recorded_inline(&s, 4, 4 * 4_100);
        assert!(matches!(fresh.place(&s, &refs(&long[4..])), Placement::Manifest { .. }), "past the inline bytes");
    }

    /// One archiver's intents, inline ones up to the bytes `place` lets in and then
    /// every manifest intent a lease holds, take no more of the lease's JSON than
    /// `lease_bytes_bound`, and not much less.
    #[test]
    fn a_lease_full_of_an_archivers_intents_is_within_its_bound() {
        let s = ShardId::new("s".repeat(128));
        let limits = InlineLimits::default();
        let bound = lease_bytes_bound(&limits, "archive", &s);
        let mut b = LeaseBudget::new(limits);
        let mut intents = Vec::new();
        for n in 0u128.. {
            let i = intent(&format!("archive/tenant=t{n}/{}", "k".repeat(150)), n, n + 1);
            if !matches!(b.place(&s, &refs(std::slice::from_ref(&i))), Placement::Inline(_)) {
                break;
            }
            b.recorded_inline(&s, 1, bytes_of(&i));
            intents.push(i);
        }
        for _ in 0..limits.manifests {
            intents.push(Intent {
                target: crate::delivery::manifest::key("archive", &s),
                scope: MANIFEST_SCOPE.into(),
                first: longest_position(),
                last: longest_position(),
                parts: vec![],
                except: vec![],
            });
        }
        let lease = std::collections::BTreeMap::from([("archive", intents)]);
        let bytes = serde_json::to_vec(&lease).map_or(usize::MAX, |v| v.len());
        assert!(bytes <= bound, "{bytes} bytes, bound {bound}");
        assert!(bound - bytes < 1_000, "{bytes} bytes, bound {bound}");
    }

    /// However many rounds go into manifests, a lease holds at most `manifests` of them:
    /// the round past that absorbs the open ones.
    #[test]
    fn manifests_in_a_lease_are_bounded_by_absorbing() {
        let s = ShardId::new("s");
        let mut b = LeaseBudget::new(InlineLimits { per_round: 0, manifests: 3, ..InlineLimits::default() });
        let round = [intent("k", 1, 2)];
        let mut held = 0;
        for r in 0..100u128 {
            let placement = b.place(&s, &refs(&round));
            let Placement::Manifest { absorbing } = placement else { panic!("{placement:?}") };
            let m = Intent { scope: MANIFEST_SCOPE.into(), ..intent(&format!("m{r}"), r, r + 1) };
            held = held - absorbing.len() + 1;
            b.recorded_manifest(&s, m, &absorbing);
            assert!(held <= 3, "round {r}: {held} manifest intents");
            assert_eq!(b.shards[&s].manifests.len(), held);
        }
    }
}
