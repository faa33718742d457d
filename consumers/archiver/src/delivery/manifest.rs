//! Intent manifests: how the intents of many objects stay out of a shard's lease.
//!
//! Exactly-once delivery stores, before putting an object, an intent per shard in it
//! (see [`crate::delivery`]). Intents live in the shard's lease item until a checkpoint
//! passes them, about one buffer interval, and a DynamoDB item holds at most 400 KB:
//! with thousands of partitions a shard would need thousands of intents (about 300
//! bytes each) at once. So a delivery round that puts many objects holding a shard's
//! records writes their intents into one *manifest* object first (create-only, gzip'd
//! JSON under `_weir/intents/<consumer>/<shard>/`) and stores one intent naming the
//! manifest in the lease, covering the whole range of its objects.
//!
//! The rule, per shard and round: inline intents (one per object, as before) while the
//! round has at most [`INLINE_PER_ROUND`] objects of the shard *and* the shard's lease
//! would hold at most [`INLINE_OPEN_MAX`] inline intents; a manifest otherwise. A lease
//! then holds at most 128 inline intents (about 40 KB) plus one manifest intent per
//! large round still open (about 250 bytes each; rounds come at most once per batch or
//! tick, and stay open about one buffer interval).
//!
//! A manifest is deleted when a checkpoint passes its intent
//! ([`weir_core::Consumer::on_intents_passed`]), by whichever worker wrote that
//! checkpoint. The next owner of a shard reads the manifests of its open intents and
//! resolves the objects they list exactly as inline intents. A manifest that cannot be
//! read (deleted by hand, corrupt) is reported and taken as "nothing written": the
//! records are archived again (duplicates, never a loss).
//!
//! Names start with `_weir/` (hidden from Hive, Athena and Glue, which skip names
//! starting with `_`) and end in `.manifest`, so no `*.gz` or `*.json` glob reading the
//! archive matches them.

use std::collections::HashMap;
use std::io::{Read, Write};

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use weir_core::{ExtendedSequenceNumber, Intent, ShardId};

/// The scope of an intent whose target is a manifest. (Data scopes are JSON objects,
/// error scopes start with `error:`.)
pub const MANIFEST_SCOPE: &str = "manifest";

/// Most objects of one shard in one round whose intents go inline into the lease.
pub const INLINE_PER_ROUND: usize = 16;

/// Most inline intents a shard's lease holds (about 40 KB of a 400 KB item).
pub const INLINE_OPEN_MAX: usize = 128;

/// Where the manifests of every consumer live.
pub const MANIFEST_ROOT: &str = "_weir/intents/";

/// Why a manifest could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    /// Not gzip, not JSON, or not a manifest of this shard.
    #[error("manifest {key} is unreadable: {reason}")]
    Unreadable {
        /// The manifest's key.
        key: String,
        /// What is wrong.
        reason: String,
    },
}

#[derive(Serialize, Deserialize)]
struct Body {
    version: u32,
    shard: ShardId,
    intents: Vec<Intent>,
}

/// A fresh manifest key of `consumer` for `shard`.
pub fn key(consumer: &str, shard: &ShardId) -> String {
    let id: u128 = rand::random();
    format!("{MANIFEST_ROOT}{consumer}/{shard}/{id:032x}.manifest")
}

/// Whether `intent` names a manifest.
pub fn is_manifest(intent: &Intent) -> bool {
    intent.scope == MANIFEST_SCOPE
}

/// The manifest of `intents` (all of `shard`): its body, and the one intent that goes
/// into the lease, covering every intent's range.
pub fn write(key: &str, shard: &ShardId, intents: Vec<Intent>) -> Option<(Bytes, Intent)> {
    let first: ExtendedSequenceNumber = intents.iter().map(|i| &i.first).min()?.clone();
    let last: ExtendedSequenceNumber = intents.iter().map(|i| &i.last).max()?.clone();
    let json = serde_json::to_vec(&Body { version: 1, shard: shard.clone(), intents }).ok()?;
    let mut gz = flate2::write::GzEncoder::new(Vec::with_capacity(json.len() / 4), flate2::Compression::fast());
    gz.write_all(&json).ok()?;
    let body = Bytes::from(gz.finish().ok()?);
    Some((body, Intent { target: key.to_owned(), scope: MANIFEST_SCOPE.to_owned(), first, last }))
}

/// The intents a manifest of `shard` lists.
pub fn read(key: &str, shard: &ShardId, body: &[u8]) -> Result<Vec<Intent>, ManifestError> {
    let bad = |reason: String| ManifestError::Unreadable { key: key.to_owned(), reason };
    let mut json = Vec::new();
    flate2::read::GzDecoder::new(body).read_to_end(&mut json).map_err(|e| bad(format!("not gzip: {e}")))?;
    let b: Body = serde_json::from_slice(&json).map_err(|e| bad(format!("not a manifest: {e}")))?;
    if b.version != 1 {
        return Err(bad(format!("version {} (this weir reads version 1)", b.version)));
    }
    if b.shard != *shard {
        return Err(bad(format!("it belongs to shard {}", b.shard)));
    }
    Ok(b.intents)
}

/// When intents go inline into a lease rather than into a manifest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InlineLimits {
    /// Most objects of one shard in one round with inline intents.
    pub per_round: usize,
    /// Most inline intents one lease holds.
    pub per_lease: usize,
}

impl Default for InlineLimits {
    fn default() -> Self {
        Self { per_round: INLINE_PER_ROUND, per_lease: INLINE_OPEN_MAX }
    }
}

/// How many inline intents each shard's lease holds (as far as this archiver knows:
/// the ones it found at open and recorded, less the ones checkpoints passed).
#[derive(Debug, Default)]
pub struct InlineCounts {
    limits: InlineLimits,
    open: HashMap<ShardId, usize>,
}

impl InlineCounts {
    /// Counts kept against `limits`.
    pub fn new(limits: InlineLimits) -> Self {
        Self { limits, open: HashMap::new() }
    }

    /// A shard opened with these intents.
    pub fn opened(&mut self, shard: &ShardId, intents: &[Intent]) {
        self.open.insert(shard.clone(), intents.iter().filter(|i| !is_manifest(i)).count());
    }

    /// Whether `n` more inline intents fit in the shard's lease (and the round is small).
    pub fn fits(&self, shard: &ShardId, n: usize) -> bool {
        n <= self.limits.per_round && self.open.get(shard).copied().unwrap_or(0) + n <= self.limits.per_lease
    }

    /// `n` inline intents were stored.
    pub fn recorded(&mut self, shard: &ShardId, n: usize) {
        *self.open.entry(shard.clone()).or_default() += n;
    }

    /// A checkpoint passed these intents.
    pub fn passed(&mut self, shard: &ShardId, intents: &[Intent]) {
        if let Some(n) = self.open.get_mut(shard) {
            *n = n.saturating_sub(intents.iter().filter(|i| !is_manifest(i)).count());
        }
    }

    /// The shard is gone from this worker.
    pub fn forget(&mut self, shard: &ShardId) {
        self.open.remove(shard);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_core::SequenceNumber;

    fn p(n: u128) -> ExtendedSequenceNumber {
        ExtendedSequenceNumber::plain(SequenceNumber::from_u128(n))
    }

    fn intent(key: &str, first: u128, last: u128) -> Intent {
        Intent { target: key.into(), scope: "{\"tenant\":\"t\"}".into(), first: p(first), last: p(last) }
    }

    #[test]
    fn a_manifest_round_trips_and_covers_its_intents() {
        let shard = ShardId::new("shardId-000000000001");
        let k = key("archive", &shard);
        assert!(k.starts_with("_weir/intents/archive/shardId-000000000001/"), "{k}");
        assert!(k.ends_with(".manifest"));
        weir_core::ports::validate_key(&k).unwrap();
        let intents = vec![intent("a.gz", 5, 9), intent("b.gz", 2, 20), intent("c.gz", 7, 8)];
        let (body, lease_intent) = write(&k, &shard, intents.clone()).unwrap();
        assert!(is_manifest(&lease_intent));
        assert_eq!((lease_intent.first, lease_intent.last), (p(2), p(20)));
        assert_eq!(read(&k, &shard, &body).unwrap(), intents);
        let other = ShardId::new("shardId-000000000002");
        assert!(read(&k, &other, &body).is_err(), "another shard's manifest is refused");
        assert!(read(&k, &shard, b"not gzip").is_err());
        assert!(write(&k, &shard, Vec::new()).is_none(), "no manifest of nothing");
    }

    #[test]
    fn inline_intents_are_bounded_per_round_and_per_lease() {
        let s = ShardId::new("s");
        let mut c = InlineCounts::default();
        c.opened(&s, &[intent("a", 1, 2), Intent { scope: MANIFEST_SCOPE.into(), ..intent("m", 1, 2) }]);
        assert!(c.fits(&s, INLINE_PER_ROUND));
        assert!(!c.fits(&s, INLINE_PER_ROUND + 1), "a large round goes to a manifest");
        c.recorded(&s, INLINE_OPEN_MAX - 1);
        assert!(!c.fits(&s, 1), "the lease is full of inline intents");
        c.passed(&s, &[intent("a", 1, 2)]);
        assert!(c.fits(&s, 1));
    }
}
