//! Keeping the buffers within their memory budget: stages compressed early, buffers
//! spilled to local disk, and only then buffers sealed, the largest first (the rules
//! are in [`crate::delivery::buffers`]).

use crate::delivery::buffers::{BufferError, Buffers, MIN_COMPACT};
use crate::delivery::sealed::{FlushReason, Sealed};
use crate::delivery::spill::SpillError;

impl Buffers {
    /// Brings [`Buffers::held_bytes`] down to three quarters of the budget: stages compressed
    /// largest first, then buffers sealed largest first (see the module docs).
    pub(crate) fn relieve(&mut self) -> Result<Vec<Sealed>, BufferError> {
        let target = self.limits.memory / 4 * 3;
        let mut stages: Vec<(usize, Box<[u8]>)> = self
            .open
            .iter()
            .filter(|(_, b)| b.body.staged() >= MIN_COMPACT && b.spilled_stage.is_empty())
            .map(|(k, b)| (b.body.staged(), k.clone()))
            .collect();
        stages.sort_unstable_by_key(|s| std::cmp::Reverse(s.0));
        for (_, key) in stages {
            if self.held <= target {
                break;
            }
            if let Some(b) = self.open.get_mut(&key) {
                b.body.compact(&mut self.deflater)?;
            }
            self.remeasure(&key);
        }
        if self.held > target && self.spill.is_some() {
            let mut largest: Vec<(usize, Box<[u8]>)> = self.open.iter().map(|(k, b)| (b.cost, k.clone())).collect();
            largest.sort_unstable_by_key(|s| std::cmp::Reverse(s.0));
            for (_, key) in largest {
                if self.held <= target {
                    break;
                }
                if let Err(e) = self.spill_one(&key) {
                    metrics::counter!(crate::metrics::SPILL_FAILURES).increment(1);
                    tracing::error!(error = %e, "cannot spill buffers to disk; sealing them early, and refusing new records until it works");
                    self.spill_failure = Some(e.to_string());
                    break;
                }
            }
        }
        let mut sealed = Vec::new();
        if self.held > target {
            // Not the buffers of a record being appended: their seals wait for its end.
            let mut largest: Vec<(usize, Box<[u8]>)> =
                self.open.iter().filter(|(k, _)| !self.in_record(k)).map(|(k, b)| (b.cost, k.clone())).collect();
            largest.sort_unstable_by_key(|s| std::cmp::Reverse(s.0));
            for (_, key) in largest {
                if self.held <= target {
                    break;
                }
                sealed.push(self.seal(&key, FlushReason::Memory)?);
            }
        }
        Ok(sealed)
    }

    /// Moves buffer `key`'s bytes to the spill store: its compressed runs as they are,
    /// its stage uncompressed (compressed later with what follows it, see
    /// [`Open::spilled_stage`](crate::delivery::buffers::Open::spilled_stage)). On a write error the buffer is as it was.
    fn spill_one(&mut self, key: &[u8]) -> Result<(), SpillError> {
        let (Some(b), Some(spill)) = (self.open.get_mut(key), self.spill.as_mut()) else { return Ok(()) };
        let runs = b.body.spill_out();
        if !runs.is_empty() {
            match spill.write(&runs) {
                Ok(r) => b.spilled.push(r),
                Err(e) => {
                    b.body.unspill(runs);
                    return Err(e);
                }
            }
        }
        let stage = b.body.take_stage();
        if !stage.is_empty() {
            match spill.write(&stage) {
                Ok(r) => {
                    b.spilled_stage_len += stage.len();
                    b.spilled_stage.push(r);
                }
                Err(e) => {
                    b.body.prepend_stage(stage);
                    self.remeasure(key);
                    return Err(e);
                }
            }
        }
        metrics::counter!(crate::metrics::SPILLS).increment(1);
        self.remeasure(key);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;
    use weir_core::ShardId;

    use super::*;
    use crate::delivery::buffers::OPEN_COST;
    use crate::delivery::spill::Spill;
    use crate::delivery::testing::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        /// For any records over any number of partitions and any budget: every record
        /// lands in exactly one object, the buffers never hold more than the budget
        /// once an append returns, and no buffer is sealed for memory while a larger
        /// one stays open.
        #[test]
        fn memory_stays_within_the_budget(
            ops in proptest::collection::vec((0u16..3000, 1usize..3000), 1..250),
            memory in 2_000usize..200_000,
        ) {
            let mut b = Buffers::new(budget(memory));
            let s = ShardId::new("s0");
            let mut expected: BTreeMap<String, String> = BTreeMap::new();
            let mut sealed = Vec::new();
            for (i, (partition, len)) in ops.iter().enumerate() {
                let k = key(&format!("t{partition}"));
                let line = mixed_line(i, *len);
                expected.entry(k.scope()).or_default().push_str(&line);
                let out = b.append(&k, line.as_bytes(), &s, &pos(i as u128 + 1), t(0), t(0)).unwrap().sealed;
                prop_assert!(b.held_bytes() <= memory, "held {} over {memory}", b.held_bytes());
                let largest_open = b.costs().into_iter().max().unwrap_or(0);
                for f in out.iter().filter(|f| f.reason == FlushReason::Memory) {
                    prop_assert!(f.held >= largest_open, "sealed {} while {largest_open} stays open", f.held);
                }
                sealed.extend(out);
            }
            sealed.extend(b.all().unwrap());
            prop_assert_eq!(b.held_bytes(), 0);
            prop_assert_eq!(contents(&sealed), expected);
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]
        /// With a spill directory: every record lands in exactly one object, memory stays
        /// within the budget, and while the disk takes the spills no buffer is sealed
        /// for memory (the budget here holds every partition's bookkeeping); when
        /// spill writes fail, buffers are sealed for memory instead and nothing is lost.
        #[test]
        fn spilled_buffers_keep_growing(
            ops in proptest::collection::vec((0u16..200, 1usize..6000, 0u8..20), 1..600),
            memory in 819_200usize..1_200_000,
            disk_fails_from in proptest::option::of(0usize..600),
        ) {
            let dir = tempfile::tempdir().unwrap();
            let spill = Spill::open(dir.path(), "t").unwrap();
            let mut b = Buffers::new(budget(memory)).with_spill(spill);
            let s = ShardId::new("s0");
            let mut expected: BTreeMap<String, String> = BTreeMap::new();
            let mut sealed = Vec::new();
            for (i, (partition, len, _)) in ops.iter().enumerate() {
                if disk_fails_from == Some(i) {
                    b.spill_mut().unwrap().fail_writes(true);
                }
                let k = key(&format!("t{partition}"));
                let line = mixed_line(i, *len);
                expected.entry(k.scope()).or_default().push_str(&line);
                let out = b.append(&k, line.as_bytes(), &s, &pos(i as u128 + 1), t(0), t(0)).unwrap().sealed;
                prop_assert!(b.held_bytes() <= memory, "held {} over {memory}", b.held_bytes());
                if disk_fails_from.is_none_or(|f| i < f) {
                    prop_assert!(out.iter().all(|f| f.reason != FlushReason::Memory), "sealed for memory while the disk works");
                }
                sealed.extend(out);
            }
            sealed.extend(b.all().unwrap());
            prop_assert_eq!(b.held_bytes(), 0);
            prop_assert_eq!(b.spilled_bytes(), 0, "every spilled piece released");
            prop_assert_eq!(contents(&sealed), expected);
            drop(b);
            prop_assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0, "spill files deleted");
        }
    }

    #[test]
    fn stages_are_compressed_before_anything_is_sealed() {
        // Four partitions with 12 KiB staged each under a 48 KiB budget: compressing the
        // stages is enough, nothing is sealed.
        let mut b = Buffers::new(budget(48 << 10));
        let s = ShardId::new("s0");
        let line = format!("{}\n", "abc".repeat(100));
        let mut sealed = Vec::new();
        for i in 0..160u128 {
            let k = key(&format!("t{}", i % 4));
            sealed.extend(b.append(&k, line.as_bytes(), &s, &pos(i + 1), t(0), t(0)).unwrap().sealed);
        }
        assert!(sealed.is_empty(), "{:?}", sealed.iter().map(|f| f.reason).collect::<Vec<_>>());
        assert!(b.compressed_bytes() > 0, "stages were compressed");
        assert!(b.held_bytes() <= 48 << 10);
        let all = b.all().unwrap();
        assert_eq!(all.iter().map(Sealed::records).sum::<u64>(), 160);
        assert!(all.iter().all(|f| gunzip(&f.body) == line.repeat(40)));
    }

    #[test]
    fn reliefs_free_a_quarter_of_the_budget_so_partitions_do_not_thrash() {
        // 3,000 partitions in turn under a budget that holds about 200 of them: each
        // relief frees a quarter of the budget, so reliefs are few.
        let memory = 200 * (OPEN_COST + 1_200);
        let mut b = Buffers::new(budget(memory));
        let s = ShardId::new("s0");
        let (mut reliefs, mut freed) = (0usize, 0usize);
        for i in 0..6_000u128 {
            let k = key(&format!("t{}", (i * 7919) % 3_000));
            let line = format!("{i:>60}\n");
            let out = b.append(&k, line.as_bytes(), &s, &pos(i + 1), t(0), t(0)).unwrap().sealed;
            assert!(out.iter().all(|f| f.reason == FlushReason::Memory));
            reliefs += usize::from(!out.is_empty());
            freed += out.iter().map(|f| f.held).sum::<usize>();
        }
        // Stages stay under MIN_COMPACT here, so costs only grow until a buffer is
        // sealed: everything added is what was freed plus what is held.
        let added = freed + b.held_bytes();
        assert!(reliefs <= added / (memory / 4) + 1, "{reliefs} reliefs for {added} bytes");
        assert!(reliefs >= 2, "the budget was reached");
        assert!(b.held_bytes() <= memory);
    }
}
