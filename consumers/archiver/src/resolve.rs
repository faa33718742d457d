//! Resolving an earlier owner's open intents when a shard opens (exactly-once mode).
//!
//! Each open intent names an object key that may or may not have been written. The
//! new owner first tries to *claim* the key: a create-only put of an empty object. If
//! the claim lands, the earlier owner's put can never land after it (it is create-only
//! too), so the records are not archived and will be archived again from the stream.
//! If the key exists and holds anything but a claim, the object was written: its
//! records (of this shard, in the intent's range, routed to the intent's scope) are
//! durable and are skipped when the stream delivers them again.

use std::collections::BTreeMap;

use bytes::Bytes;
use weir_core::ports::{ObjectSink, PutOptions, PutOutcome, SinkError};
use weir_core::{ExtendedSequenceNumber, Intent};

/// What a key turned out to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyState {
    /// A real object: its records are durable.
    Written,
    /// Claimed (now or earlier): nothing of it is durable.
    Claimed,
}

/// Claims `key` unless a real object is there.
pub async fn claim_or_check(sink: &dyn ObjectSink, key: &str, claim: &Bytes) -> Result<KeyState, SinkError> {
    match sink.put_if_absent(key, claim.clone(), &PutOptions::default()).await? {
        PutOutcome::Created => Ok(KeyState::Claimed),
        PutOutcome::AlreadyExists => {
            is_claim(sink, key, claim).await.map(|c| if c { KeyState::Claimed } else { KeyState::Written })
        }
    }
}

/// Whether the object at `key` is a claim.
pub async fn is_claim(sink: &dyn ObjectSink, key: &str, claim: &Bytes) -> Result<bool, SinkError> {
    match sink.stat(key).await? {
        None => Ok(false),
        Some(meta) if meta.size != claim.len() as u64 => Ok(false),
        Some(_) => Ok(sink.get(key).await?.is_some_and(|b| b == *claim)),
    }
}

/// Records of one shard to skip because an earlier object holds them.
#[derive(Debug, Default, Clone)]
pub struct SkipList {
    ranges: Vec<(String, ExtendedSequenceNumber, ExtendedSequenceNumber)>,
}

impl SkipList {
    /// Whether the record at `position` routed to `scope` is already durable. Positions
    /// must be asked in order (ranges behind them are dropped).
    pub fn covers(&mut self, scope: &str, position: &ExtendedSequenceNumber) -> bool {
        if self.ranges.is_empty() {
            return false;
        }
        self.ranges.retain(|(_, _, last)| last >= position);
        self.ranges.iter().any(|(s, first, last)| s == scope && first <= position && position <= last)
    }

    /// Ranges left.
    pub fn len(&self) -> usize {
        self.ranges.len()
    }

    /// Whether nothing is to be skipped.
    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }
}

/// Resolves every open intent of a shard. `own` answers for keys this process wrote
/// itself (`Some(true)`: durable here).
pub async fn resolve(
    sink: &dyn ObjectSink,
    intents: &[Intent],
    claim: &Bytes,
    own: impl Fn(&str) -> Option<KeyState>,
) -> Result<(SkipList, BTreeMap<String, KeyState>), SinkError> {
    let mut states: BTreeMap<String, KeyState> = BTreeMap::new();
    let mut skip = SkipList::default();
    for intent in intents {
        let state = match states.get(&intent.target) {
            Some(s) => *s,
            None => {
                let s = match own(&intent.target) {
                    Some(s) => s,
                    None => claim_or_check(sink, &intent.target, claim).await?,
                };
                states.insert(intent.target.clone(), s);
                s
            }
        };
        if state == KeyState::Written {
            skip.ranges.push((intent.scope.clone(), intent.first.clone(), intent.last.clone()));
        }
    }
    Ok((skip, states))
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_core::SequenceNumber;
    use weir_testkit::MemoryObjectSink;

    fn p(n: u128) -> ExtendedSequenceNumber {
        ExtendedSequenceNumber::plain(SequenceNumber::from_u128(n))
    }

    fn intent(key: &str, scope: &str, first: u128, last: u128) -> Intent {
        Intent { target: key.into(), scope: scope.into(), first: p(first), last: p(last) }
    }

    #[tokio::test]
    async fn written_keys_skip_claimed_keys_replay() {
        let sink = MemoryObjectSink::new();
        let claim = crate::body::claim_body(crate::firehose_config::Compression::Gzip);
        sink.put_if_absent("a/written.gz", Bytes::from_static(b"data"), &PutOptions::default()).await.unwrap();
        sink.put_if_absent("a/claimed.gz", claim.clone(), &PutOptions::default()).await.unwrap();
        let intents = [
            intent("a/written.gz", "t1", 1, 5),
            intent("a/missing.gz", "t2", 2, 6),
            intent("a/claimed.gz", "t1", 7, 9),
        ];
        let (mut skip, states) = resolve(&sink, &intents, &claim, |_| None).await.unwrap();
        assert_eq!(states["a/written.gz"], KeyState::Written);
        assert_eq!(states["a/missing.gz"], KeyState::Claimed);
        assert_eq!(states["a/claimed.gz"], KeyState::Claimed);
        assert_eq!(sink.get("a/missing.gz").await.unwrap().unwrap(), claim, "the missing key is claimed");
        assert!(skip.covers("t1", &p(1)));
        assert!(!skip.covers("t2", &p(3)), "other scopes are not skipped");
        assert!(skip.covers("t1", &p(5)));
        assert!(!skip.covers("t1", &p(8)), "claimed ranges are archived again");
        assert!(skip.is_empty(), "ranges behind the position are dropped");
        // A late put of the earlier owner now fails: the claim holds the key.
        let late = sink.put_if_absent("a/missing.gz", Bytes::from_static(b"late"), &PutOptions::default()).await;
        assert_eq!(late.unwrap(), PutOutcome::AlreadyExists);
    }
}
