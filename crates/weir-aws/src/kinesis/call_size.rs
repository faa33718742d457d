//! How many records one GetRecords call asks for: about `max_bytes` of records, judged
//! from the records the shard's last calls returned, never more than `max_records`.
//!
//! Why bytes and not a record count: the SDK holds a call's whole response while it
//! decodes it (the JSON body, then the decoded data, about 2.4 × the record bytes), so a
//! polling worker's memory is its shards × the bytes of one call. A fixed count of
//! 10,000 makes that 24 MB a shard for 1 KB events and 1 MB for 100 B ones. Kinesis
//! serves a shard 2 MB and 5 calls a second, so calls of 1 MiB at 5 a second still read
//! a shard as fast as the service allows; only the count of calls changes.
//!
//! A record's size is what Kinesis counts against its limits (data plus partition key)
//! plus [`RECORD_OVERHEAD`], what each record costs beyond its bytes while a response
//! is held: its sequence number, arrival time and key in the JSON and again as decoded
//! strings. Without it a call of 10,000 records of 100 B holds about 2.5 MB, not 1 MB
//! (measured: a polling worker peaked at 43 MiB instead of 38). The estimate rises at
//! once to a bigger average and falls by half per call, so a shard whose records grow
//! does not overshoot for long. The first call, with nothing known, asks for as many
//! records as fit `max_bytes` if each were as large as Kinesis allows by default
//! ([`LARGEST_RECORD`]): one, at the default 1 MiB. It once asked for 100, so every
//! reader that started on a shard of large records (a consumer catching up, say) held
//! a 10 MiB response: three consumers catching up on one shard of 1 MiB records made a
//! worker's peak memory jump by hundreds of MiB (`tests/faults/hostile.rs`). A shift
//! from tiny to huge records between two calls can still make one response as large
//! as Kinesis allows (10 MiB).

/// The largest record the first call is sized for: Kinesis's default limit on a
/// record's data and partition key (a stream with a raised limit can still return
/// more), plus [`RECORD_OVERHEAD`].
pub const LARGEST_RECORD: u64 = (1 << 20) + RECORD_OVERHEAD;

/// Bytes a record is counted beyond its data and partition key.
pub const RECORD_OVERHEAD: u64 = 256;

/// The record limit of a shard's next GetRecords call.
#[derive(Debug, Clone)]
pub struct CallSize {
    max_records: u32,
    max_bytes: u64,
    /// Bytes per record assumed for the next call; `None` before the first response
    /// that held records.
    estimate: Option<u64>,
}

impl CallSize {
    /// `max_records` in 1..=10,000 and `max_bytes` ≥ 1 (validated by the config).
    pub fn new(max_records: u32, max_bytes: u64) -> Self {
        Self { max_records: max_records.clamp(1, 10_000), max_bytes: max_bytes.max(1), estimate: None }
    }

    /// The `Limit` for the next call: between 1 and `max_records`.
    pub fn limit(&self) -> u32 {
        match self.estimate {
            None => u32::try_from(self.max_bytes / LARGEST_RECORD).unwrap_or(u32::MAX).clamp(1, self.max_records),
            Some(per_record) => {
                let fit = self.max_bytes / per_record.max(1);
                u32::try_from(fit).unwrap_or(u32::MAX).clamp(1, self.max_records)
            }
        }
    }

    /// Learns from a response of `records` records totalling `bytes` (data plus
    /// partition keys). An empty response teaches nothing.
    pub fn observe(&mut self, records: usize, bytes: u64) {
        if records == 0 {
            return;
        }
        let average = bytes / records as u64 + RECORD_OVERHEAD;
        self.estimate = Some(match self.estimate {
            Some(previous) => average.max(previous / 2),
            None => average,
        });
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    const MIB: u64 = 1 << 20;

    /// `n` records of `size` bytes each, counted as the reader counts them.
    fn observe(c: &mut CallSize, n: usize, size: u64) {
        c.observe(n, n as u64 * (size - RECORD_OVERHEAD));
    }

    #[test]
    fn first_call_is_small_then_fits_the_budget() {
        let mut c = CallSize::new(10_000, MIB);
        assert_eq!(c.limit(), 1, "one record of the largest size fits 1 MiB");
        assert_eq!(CallSize::new(10_000, 10 * MIB).limit(), 9);
        c.observe(100, 100 * 768);
        assert_eq!(c.limit(), 1_024, "768 B of data and key, 256 B of overhead");
        c.observe(0, 0);
        assert_eq!(c.limit(), 1_024, "an empty response changes nothing");
    }

    #[test]
    fn small_records_stop_at_max_records() {
        let mut c = CallSize::new(10_000, 8 * MIB);
        observe(&mut c, 500, 300);
        assert_eq!(c.limit(), 10_000);
        let mut c = CallSize::new(300, MIB);
        assert_eq!(c.limit(), 1);
        observe(&mut c, 100, 300);
        assert_eq!(c.limit(), 300);
    }

    #[test]
    fn huge_records_still_ask_for_one() {
        let mut c = CallSize::new(10_000, MIB);
        c.observe(2, 2 * 10 * MIB);
        assert_eq!(c.limit(), 1);
    }

    #[test]
    fn rises_at_once_and_falls_by_half() {
        let mut c = CallSize::new(10_000, MIB);
        observe(&mut c, 10, 1_024);
        assert_eq!(c.limit(), 1_024);
        observe(&mut c, 10, 8_192);
        assert_eq!(c.limit(), 128, "bigger records: at once");
        observe(&mut c, 10, 1_024);
        assert_eq!(c.limit(), 256, "smaller records: by half a call");
        observe(&mut c, 10, 1_024);
        assert_eq!(c.limit(), 512);
        observe(&mut c, 10, 1_024);
        assert_eq!(c.limit(), 1_024);
    }

    proptest! {
        /// After any history, the limit is in 1..=max_records, and records of the last
        /// response's counted size fit the byte budget (unless one alone exceeds it).
        #[test]
        fn limit_is_bounded(
            max_records in 1u32..=10_000,
            max_bytes in 1u64..=16 * MIB,
            history in proptest::collection::vec((0usize..10_000, 0u64..=10 * MIB), 0..20),
        ) {
            let mut c = CallSize::new(max_records, max_bytes);
            prop_assert!(c.limit() == 1 || u64::from(c.limit()) * LARGEST_RECORD <= max_bytes);
            for (records, per_record) in history {
                c.observe(records, records as u64 * per_record);
                let limit = c.limit();
                prop_assert!((1..=max_records).contains(&limit));
                if records > 0 {
                    prop_assert!(limit == 1 || u64::from(limit) * (per_record + RECORD_OVERHEAD) <= max_bytes);
                }
            }
        }
    }
}
