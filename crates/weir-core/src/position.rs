//! Where a read starts and where a consumer stands.

use serde::{Deserialize, Serialize};

use crate::sequence::{ExtendedSequenceNumber, SequenceNumber};
use crate::time::Timestamp;

/// Where a read of a shard begins (Kinesis `ShardIteratorType` / EFO `StartingPosition`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", content = "value", rename_all = "SCREAMING_SNAKE_CASE")]
pub enum StartingPosition {
    /// The oldest record still retained.
    TrimHorizon,
    /// Only records written after the read starts.
    Latest,
    /// The first record whose approximate arrival is at or after this time.
    AtTimestamp(Timestamp),
    /// The record with this sequence number, inclusive.
    AtSequenceNumber(SequenceNumber),
    /// The record after this sequence number.
    AfterSequenceNumber(SequenceNumber),
}

/// A consumer's durable position in one shard, as stored in the lease.
///
/// The sentinels (`TrimHorizon`, `Latest`, `AtTimestamp`) mean "nothing processed yet,
/// start here". `At(p)` means every record up to and including `p` is done.
/// `ShardEnd` means the whole shard is done.
///
/// Checkpoints never move backwards: see [`Checkpoint::can_advance_to`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", content = "value", rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Checkpoint {
    /// Nothing processed; start at the oldest record.
    TrimHorizon,
    /// Nothing processed; start at the tip.
    Latest,
    /// Nothing processed; start at records that arrived at or after this time.
    AtTimestamp(Timestamp),
    /// Done up to and including this position.
    At(ExtendedSequenceNumber),
    /// The shard is finished for this consumer.
    ShardEnd,
}

impl Checkpoint {
    /// Whether a checkpoint may move from `self` to `next`.
    ///
    /// Rules: equal values are allowed (idempotent writes); `ShardEnd` is final; a
    /// sentinel may move to a position or to `ShardEnd`; a position may only move to a
    /// position that is not smaller, or to `ShardEnd`; nothing moves back to a sentinel.
    pub fn can_advance_to(&self, next: &Checkpoint) -> bool {
        if self == next {
            return true;
        }
        match (self, next) {
            (Checkpoint::ShardEnd, _) => false,
            (_, Checkpoint::ShardEnd) => true,
            (Checkpoint::At(a), Checkpoint::At(b)) => b >= a,
            (Checkpoint::At(_), _) => false,
            (_, Checkpoint::At(_)) => true,
            _ => false,
        }
    }

    /// Whether a record at `position` (arrived at `arrival`) comes after this checkpoint,
    /// i.e. the consumer still has to receive it.
    pub fn wants(&self, position: &ExtendedSequenceNumber, arrival: Timestamp) -> bool {
        match self {
            Checkpoint::TrimHorizon | Checkpoint::Latest => true,
            Checkpoint::AtTimestamp(t) => arrival >= *t,
            Checkpoint::At(p) => position > p,
            Checkpoint::ShardEnd => false,
        }
    }

    /// The position a reader should start from to serve a consumer at this checkpoint.
    /// `None` for `ShardEnd` (nothing left to read).
    ///
    /// A position checkpoint restarts *at* its sequence number (not after), so that a
    /// restart inside a KPL aggregate re-reads the aggregate and the sub-records after
    /// the checkpointed one can be delivered; [`Checkpoint::wants`] filters the rest.
    pub fn start_position(&self) -> Option<StartingPosition> {
        Some(match self {
            Checkpoint::TrimHorizon => StartingPosition::TrimHorizon,
            Checkpoint::Latest => StartingPosition::Latest,
            Checkpoint::AtTimestamp(t) => StartingPosition::AtTimestamp(*t),
            Checkpoint::At(p) => StartingPosition::AtSequenceNumber(p.sequence.clone()),
            Checkpoint::ShardEnd => return None,
        })
    }

    /// The lowest of several checkpoints: where one shared read must start so that
    /// every consumer gets what it still needs. `None` when all are at `ShardEnd`.
    ///
    /// Order used: `TrimHorizon` < `AtTimestamp` (earliest) < `At` (smallest) <
    /// `Latest` < `ShardEnd`. A consumer at `Latest` is served by a read that starts
    /// earlier: it receives everything that read delivers.
    pub fn lowest<'a>(all: impl IntoIterator<Item = &'a Checkpoint>) -> Option<Checkpoint> {
        fn rank(c: &Checkpoint) -> u8 {
            match c {
                Checkpoint::TrimHorizon => 0,
                Checkpoint::AtTimestamp(_) => 1,
                Checkpoint::At(_) => 2,
                Checkpoint::Latest => 3,
                Checkpoint::ShardEnd => 4,
            }
        }
        let mut best: Option<&Checkpoint> = None;
        for c in all {
            best = Some(match best {
                None => c,
                Some(b) if rank(c) < rank(b) => c,
                Some(b) if rank(c) > rank(b) => b,
                Some(b) => match (b, c) {
                    (Checkpoint::AtTimestamp(x), Checkpoint::AtTimestamp(y)) if y < x => c,
                    (Checkpoint::At(x), Checkpoint::At(y)) if y < x => c,
                    _ => b,
                },
            });
        }
        match best {
            None | Some(Checkpoint::ShardEnd) => None,
            Some(b) => Some(b.clone()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(v: u128, sub: u64) -> Checkpoint {
        Checkpoint::At(ExtendedSequenceNumber::new(SequenceNumber::from_u128(v), sub))
    }

    #[test]
    fn never_backwards() {
        assert!(Checkpoint::TrimHorizon.can_advance_to(&at(5, 0)));
        assert!(at(5, 0).can_advance_to(&at(5, 1)));
        assert!(at(5, 1).can_advance_to(&at(5, 1)));
        assert!(!at(5, 1).can_advance_to(&at(5, 0)));
        assert!(!at(10, 0).can_advance_to(&at(9, 0)));
        assert!(!at(10, 0).can_advance_to(&Checkpoint::TrimHorizon));
        assert!(at(10, 0).can_advance_to(&Checkpoint::ShardEnd));
        assert!(!Checkpoint::ShardEnd.can_advance_to(&at(11, 0)));
        assert!(!Checkpoint::Latest.can_advance_to(&Checkpoint::TrimHorizon));
    }

    #[test]
    fn lowest_picks_earliest_read() {
        let all = [at(10, 0), at(7, 2), Checkpoint::Latest, Checkpoint::ShardEnd];
        assert_eq!(Checkpoint::lowest(&all), Some(at(7, 2)));
        let all = [at(10, 0), Checkpoint::TrimHorizon];
        assert_eq!(Checkpoint::lowest(&all), Some(Checkpoint::TrimHorizon));
        assert_eq!(Checkpoint::lowest(&[Checkpoint::ShardEnd]), None);
        assert_eq!(Checkpoint::lowest(&[]), None);
    }

    #[test]
    fn wants_filters_after_checkpoint() {
        let p = |v, sub| ExtendedSequenceNumber::new(SequenceNumber::from_u128(v), sub);
        let t = Timestamp::from_millis(0);
        assert!(!at(7, 2).wants(&p(7, 2), t));
        assert!(at(7, 2).wants(&p(7, 3), t));
        assert!(at(7, 2).wants(&p(8, 0), t));
        assert!(!Checkpoint::ShardEnd.wants(&p(8, 0), t));
        let ts = Checkpoint::AtTimestamp(Timestamp::from_millis(100));
        assert!(!ts.wants(&p(1, 0), Timestamp::from_millis(99)));
        assert!(ts.wants(&p(1, 0), Timestamp::from_millis(100)));
    }
}
