//! Which records of each shard are durable: the positions the archiver acknowledges.
//!
//! Records of a shard arrive in order and each ends up in zero or more buffers (zero:
//! dropped by the transform, or already durable per an earlier owner's intent; more
//! than one: a de-aggregated record whose parts go to different partitions). A buffer
//! generation that holds records of a shard remembers the position of the last record
//! *finished* before its first one. The shard is durable up to: the last finished
//! record when no generation holding it is pending, else the remembered position of
//! the pending generation with the smallest first record.

use std::collections::{HashMap, VecDeque};

use weir_core::{ExtendedSequenceNumber, ShardId};

/// A place in [`ShardLedger::pending`].
#[derive(Debug)]
enum Slot {
    /// Pending: the position finished before its first record.
    Pending(Option<ExtendedSequenceNumber>),
    /// Durable (or abandoned).
    Settled,
}

#[derive(Debug, Default)]
struct ShardLedger {
    /// Last record fully processed (routed to buffers, dropped or skipped).
    finished: Option<ExtendedSequenceNumber>,
    /// Generations in the order they took their first record of the shard (records of
    /// a shard arrive in stream order, so this is the order of their first positions):
    /// the position finished before each one's first record while it is pending. The
    /// front is always pending (settled ones there are dropped), so the durable
    /// position, asked after every batch, is read, not searched; settling one of
    /// 100,000 objects marks its place, with no tree to rebalance.
    pending: VecDeque<Slot>,
    /// The place of each pending generation (counted from the first place ever opened).
    firsts: HashMap<u64, u64, crate::hashing::FastHash>,
    /// The place of `pending`'s front.
    base: u64,
    /// Generations opened so far (the next place).
    opened: u64,
    /// Last position acknowledged.
    acked: Option<ExtendedSequenceNumber>,
    /// Listed in [`Ledger::touched`].
    touched: bool,
}

impl ShardLedger {
    /// `generation` took its first record of this shard at `first`, right after
    /// `previous` (`None`: after the last record finished before); nothing if it is
    /// pending already.
    fn open(&mut self, generation: u64, previous: Option<&ExtendedSequenceNumber>) {
        if let std::collections::hash_map::Entry::Vacant(e) = self.firsts.entry(generation) {
            e.insert(self.opened);
            let before = previous.cloned().or_else(|| self.finished.clone());
            self.pending.push_back(Slot::Pending(before));
            self.opened += 1;
        }
    }

    /// `generation` is no longer pending.
    fn settle(&mut self, generation: u64) {
        let Some(place) = self.firsts.remove(&generation) else { return };
        if let Some(slot) = self.pending.get_mut((place - self.base) as usize) {
            *slot = Slot::Settled;
        }
        while let Some(Slot::Settled) = self.pending.front() {
            self.pending.pop_front();
            self.base += 1;
        }
    }

    /// The position every record up to which is durable.
    fn durable(&self) -> Option<ExtendedSequenceNumber> {
        match self.pending.front() {
            Some(Slot::Pending(before)) => before.clone(),
            _ => self.finished.clone(),
        }
    }
}

/// Durable positions per shard.
#[derive(Debug, Default)]
pub struct Ledger {
    shards: HashMap<ShardId, ShardLedger, crate::hashing::FastHash>,
    /// The shards whose durable position may have moved since [`Ledger::advance_all`]
    /// last looked (a batch or a settle changed them), each once: a backfill holds
    /// thousands of shards and delivers after every batch, and walking them all each
    /// time grew its CPU per record with the number of input objects.
    touched: Vec<ShardId>,
}

impl Ledger {
    /// Lists `shard` for the next [`Ledger::advance_all`].
    fn touch(touched: &mut Vec<ShardId>, shard: &ShardId, l: &mut ShardLedger) {
        if !l.touched {
            l.touched = true;
            touched.push(shard.clone());
        }
    }
}

impl Ledger {
    /// A record of `shard` at `position` went into `generation` (call before
    /// `finished` for that record). Record by record, the reference model of
    /// [`Ledger::batch`], which the archiver uses.
    #[cfg(test)]
    pub fn buffered(&mut self, shard: &ShardId, _position: &ExtendedSequenceNumber, generation: u64) {
        let l = self.shards.entry(shard.clone()).or_default();
        l.open(generation, None);
        Self::touch(&mut self.touched, shard, l);
    }

    /// Every part of the record at `position` is routed (with `buffered`, the
    /// reference model of [`Ledger::batch`]).
    #[cfg(test)]
    pub fn finished(&mut self, shard: &ShardId, position: &ExtendedSequenceNumber) {
        let l = self.shards.entry(shard.clone()).or_default();
        l.finished = Some(position.clone());
        Self::touch(&mut self.touched, shard, l);
    }

    /// A whole batch of `shard` at once, the same as `buffered` and `finished` called
    /// record by record (a property test checks it): `positions` are the batch's records
    /// in order, all routed; `placed` lists, in record order, (record index, generation)
    /// for every buffer a record went into.
    pub fn batch<'p>(
        &mut self,
        shard: &ShardId,
        positions: impl IntoIterator<Item = &'p ExtendedSequenceNumber>,
        placed: &[(usize, u64)],
    ) {
        let l = self.shards.entry(shard.clone()).or_default();
        Self::touch(&mut self.touched, shard, l);
        let mut placed = placed.iter().peekable();
        let mut previous: Option<&ExtendedSequenceNumber> = None;
        for (i, position) in positions.into_iter().enumerate() {
            while let Some(&&(record, generation)) = placed.peek()
                && record == i
            {
                l.open(generation, previous);
                placed.next();
            }
            previous = Some(position);
        }
        if let Some(last) = previous {
            l.finished = Some(last.clone());
        }
    }

    /// `generation` is durable (or, with `durable == false`, abandoned) for `shard`.
    pub fn settle(&mut self, shard: &ShardId, generation: u64) {
        if let Some(l) = self.shards.get_mut(shard) {
            l.settle(generation);
            Self::touch(&mut self.touched, shard, l);
        }
    }

    /// Forgets a shard (lease lost or shard closed).
    pub fn forget(&mut self, shard: &ShardId) {
        self.shards.remove(shard);
    }

    /// Whether anything of the shard is waiting for an object.
    pub fn has_pending(&self, shard: &ShardId) -> bool {
        self.shards.get(shard).is_some_and(|l| !l.firsts.is_empty())
    }

    /// The last position of `shard` acknowledged.
    pub fn acked(&self, shard: &ShardId) -> Option<&ExtendedSequenceNumber> {
        self.shards.get(shard)?.acked.as_ref()
    }

    /// The durable position of `shard`, if it moved since the last call.
    pub fn advance(&mut self, shard: &ShardId) -> Option<ExtendedSequenceNumber> {
        Self::advance_shard(self.shards.get_mut(shard)?)
    }

    /// [`Ledger::advance`] for every shard: the shards whose durable position moved,
    /// in shard order. Looks only at the shards touched since its last call; the
    /// durable position of any other is where it was.
    pub fn advance_all(&mut self) -> Vec<(ShardId, ExtendedSequenceNumber)> {
        let mut moved = Vec::new();
        for shard in std::mem::take(&mut self.touched) {
            // A shard forgotten since (and perhaps opened again, and listed again).
            let Some(l) = self.shards.get_mut(&shard).filter(|l| l.touched) else { continue };
            l.touched = false;
            if let Some(position) = Self::advance_shard(l) {
                moved.push((shard, position));
            }
        }
        moved.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        moved
    }

    fn advance_shard(l: &mut ShardLedger) -> Option<ExtendedSequenceNumber> {
        let durable = l.durable()?;
        if l.acked.as_ref().is_some_and(|a| *a >= durable) {
            return None;
        }
        l.acked = Some(durable.clone());
        Some(durable)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_core::SequenceNumber;

    fn p(n: u128) -> ExtendedSequenceNumber {
        ExtendedSequenceNumber::plain(SequenceNumber::from_u128(n))
    }

    #[test]
    fn durable_stops_before_the_oldest_pending_record() {
        let s = ShardId::new("s");
        let mut l = Ledger::default();
        l.buffered(&s, &p(1), 10);
        l.finished(&s, &p(1));
        l.buffered(&s, &p(2), 11);
        l.finished(&s, &p(2));
        l.finished(&s, &p(3)); // dropped
        l.buffered(&s, &p(4), 10);
        l.finished(&s, &p(4));
        assert_eq!(l.advance(&s), None, "generation 10 holds record 1");
        l.settle(&s, 11);
        assert_eq!(l.advance(&s), None, "record 1 still pending");
        l.settle(&s, 10);
        assert_eq!(l.advance(&s), Some(p(4)));
        assert_eq!(l.advance(&s), None, "no change, no ack");
    }

    proptest::proptest! {
        /// `batch` leaves the ledger as the record-by-record calls do.
        #[test]
        fn a_batch_is_its_records(
            batches in proptest::collection::vec(proptest::collection::vec(proptest::collection::vec(1u64..5, 0..3), 0..6), 1..4),
            settled in proptest::collection::vec(1u64..5, 0..4),
        ) {
            let s = ShardId::new("s");
            let (mut one, mut all) = (Ledger::default(), Ledger::default());
            let mut n = 0u128;
            for batch in &batches {
                let positions: Vec<_> = batch.iter().map(|_| { n += 1; p(n) }).collect();
                let mut placed = Vec::new();
                for (i, gens) in batch.iter().enumerate() {
                    for g in gens {
                        one.buffered(&s, &positions[i], *g);
                        placed.push((i, *g));
                    }
                    one.finished(&s, &positions[i]);
                }
                all.batch(&s, &positions, &placed);
            }
            for g in settled {
                one.settle(&s, g);
                all.settle(&s, g);
            }
            proptest::prop_assert_eq!(one.has_pending(&s), all.has_pending(&s));
            proptest::prop_assert_eq!(one.advance(&s), all.advance(&s));
        }

        /// The durable position is the rule of the module docs, computed from scratch:
        /// what was finished before the pending generation with the oldest first record,
        /// else the last record finished.
        #[test]
        fn the_durable_position_follows_the_rule(
            batches in proptest::collection::vec(proptest::collection::vec(proptest::collection::vec(1u64..6, 0..3), 0..6), 1..5),
            settles in proptest::collection::vec(proptest::collection::vec(1u64..6, 0..3), 5),
        ) {
            let s = ShardId::new("s");
            let mut ledger = Ledger::default();
            // The model: (generation, first, finished before it) of each pending generation.
            let mut model: Vec<(u64, u128, Option<u128>)> = Vec::new();
            let mut finished: Option<u128> = None;
            let mut acked: Option<u128> = None;
            let mut n = 0u128;
            for (batch, settle) in batches.iter().zip(&settles) {
                let positions: Vec<_> = batch.iter().map(|_| { n += 1; n }).collect();
                let mut placed = Vec::new();
                for (i, gens) in batch.iter().enumerate() {
                    for g in gens {
                        if !model.iter().any(|(m, _, _)| m == g) {
                            model.push((*g, positions[i], finished));
                        }
                        placed.push((i, *g));
                    }
                    finished = Some(positions[i]);
                }
                let esn: Vec<_> = positions.iter().map(|n| p(*n)).collect();
                ledger.batch(&s, &esn, &placed);
                for g in settle {
                    model.retain(|(m, _, _)| m != g);
                    ledger.settle(&s, *g);
                }
                let durable = match model.iter().min_by_key(|(_, first, _)| *first) {
                    Some((_, _, before)) => *before,
                    None => finished,
                };
                let expected = durable.filter(|d| acked.is_none_or(|a| a < *d));
                if expected.is_some() {
                    acked = expected;
                }
                proptest::prop_assert_eq!(ledger.advance(&s), expected.map(p));
                proptest::prop_assert_eq!(ledger.has_pending(&s), !model.is_empty());
            }
        }
    }

    proptest::proptest! {
        /// `advance_all`, which looks only at the shards touched since it last ran, moves
        /// what advancing every shard one by one moves.
        #[test]
        fn advance_all_is_every_shard_advanced(
            steps in proptest::collection::vec((0u8..4, 0u8..3, 1u64..5, proptest::bool::ANY), 1..60),
        ) {
            let shards: Vec<ShardId> = (0..3).map(|i| ShardId::new(format!("s{i}"))).collect();
            let (mut all, mut each) = (Ledger::default(), Ledger::default());
            for (n, (op, s, g, advance)) in steps.into_iter().enumerate() {
                let (shard, position) = (&shards[s as usize], p(n as u128 + 1));
                for l in [&mut all, &mut each] {
                    match op {
                        0 => l.buffered(shard, &position, g),
                        1 => l.finished(shard, &position),
                        2 => l.settle(shard, g),
                        _ => l.forget(shard),
                    }
                }
                if advance {
                    let expected: Vec<_> =
                        shards.iter().filter_map(|s| each.advance(s).map(|p| (s.clone(), p))).collect();
                    proptest::prop_assert_eq!(all.advance_all(), expected);
                }
            }
        }
    }

    #[test]
    fn a_younger_durable_generation_acks_up_to_the_older_pending_one() {
        let s = ShardId::new("s");
        let mut l = Ledger::default();
        l.finished(&s, &p(1));
        l.buffered(&s, &p(2), 1);
        l.finished(&s, &p(2));
        l.buffered(&s, &p(3), 2);
        l.finished(&s, &p(3));
        assert_eq!(l.advance(&s), Some(p(1)));
        l.settle(&s, 1);
        assert_eq!(l.advance(&s), Some(p(2)));
        assert!(l.has_pending(&s));
    }
}
