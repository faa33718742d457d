//! What a DynamoDB table charges and enforces, per partition-key value.
//!
//! Every request is charged to the partition-key value of its items (a lease table's
//! namespace) in one-second windows of tokio time. DynamoDB serves at most 3,000 read
//! units and 1,000 write units a second for one partition-key value
//! (<https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/bp-partition-key-design.html>).
//! The model: a request is refused (throttled) when its partition has already consumed
//! its limit in the current second; an admitted request consumes its units even when
//! they take the window past the limit (DynamoDB charges capacity as it reads, and a
//! large page is not refused for its size). A refused request consumes nothing but is
//! counted, with the units it asked for, in the demand.
//!
//! With [`Enforcement::Observe`] nothing is refused: the demand is measured as if
//! DynamoDB had no per-partition limit, and the seconds it would have throttled are
//! counted. Not modelled: adaptive capacity splitting a hot item collection by sort key
//! ("split for heat", which takes minutes and is not guaranteed), and burst capacity.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use tokio::time::Instant;

/// The operations the DynamoDB lease table issues.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Op {
    /// `Query` (one page).
    Query,
    /// `GetItem`.
    GetItem,
    /// `PutItem`.
    PutItem,
    /// `UpdateItem`.
    UpdateItem,
    /// `DeleteItem`.
    DeleteItem,
    /// `TransactWriteItems`.
    TransactWriteItems,
}

/// Whether the per-partition limits refuse requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Enforcement {
    /// Requests over a partition's limit are throttled, as DynamoDB does.
    Enforce,
    /// Nothing is refused; over-limit seconds are only counted.
    Observe,
}

/// DynamoDB's per-partition-key throughput limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Read units a second (DynamoDB: 3,000).
    pub read_units: u64,
    /// Write units a second (DynamoDB: 1,000).
    pub write_units: u64,
    /// Whether they are enforced.
    pub enforcement: Enforcement,
}

impl Limits {
    /// DynamoDB's limits, enforced.
    pub const DYNAMODB: Limits = Limits { read_units: 3_000, write_units: 1_000, enforcement: Enforcement::Enforce };
}

/// A request refused for its partition's throughput.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Throttled;

/// What one request asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Charge {
    /// The operation.
    pub op: Op,
    /// Read units, in halves.
    pub read_halves: u64,
    /// Write units.
    pub write_units: u64,
}

/// Totals of one partition-key value over the measured time.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PartitionTotals {
    /// Read units consumed, in halves.
    pub read_halves: u64,
    /// Write units consumed.
    pub write_units: u64,
    /// Requests served, per operation.
    pub requests: BTreeMap<Op, u64>,
    /// Requests refused for throughput.
    pub throttled: u64,
    /// Read units asked for, served or not, in halves.
    pub demand_read_halves: u64,
    /// Write units asked for, served or not.
    pub demand_write_units: u64,
    /// The most read units asked for in one second, in halves.
    pub peak_read_halves: u64,
    /// The most write units asked for in one second.
    pub peak_write_units: u64,
    /// Seconds in which the units asked for passed a limit.
    pub seconds_over_limit: u64,
}

impl PartitionTotals {
    /// Requests served, all operations.
    pub fn served(&self) -> u64 {
        self.requests.values().sum()
    }
}

#[derive(Debug, Default)]
struct Window {
    second: u64,
    read_halves: u64,
    write_units: u64,
    demand_read_halves: u64,
    demand_write_units: u64,
}

#[derive(Debug, Default)]
struct Partition {
    window: Window,
    totals: PartitionTotals,
}

/// The meter of one table. See the module documentation.
#[derive(Debug)]
pub struct Meter {
    limits: Limits,
    start: Instant,
    partitions: Mutex<HashMap<String, Partition>>,
}

impl Meter {
    /// A meter whose seconds count from now (tokio time).
    pub fn new(limits: Limits) -> Self {
        Self { limits, start: Instant::now(), partitions: Mutex::default() }
    }

    /// The limits it enforces or observes.
    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// Charges one request to partition-key value `pk` at tokio time `now`, or refuses
    /// it (nothing consumed) when the partition used up a limit in this second.
    pub fn charge(&self, pk: &str, charge: Charge, now: Instant) -> Result<(), Throttled> {
        let second = now.saturating_duration_since(self.start).as_secs();
        let mut parts = self.partitions.lock().unwrap_or_else(|p| p.into_inner());
        let part = match parts.get_mut(pk) {
            Some(p) => p,
            None => parts.entry(pk.to_owned()).or_default(),
        };
        if part.window.second != second {
            self.close_window(part);
            part.window = Window { second, ..Window::default() };
        }
        let w = &mut part.window;
        w.demand_read_halves += charge.read_halves;
        w.demand_write_units += charge.write_units;
        part.totals.demand_read_halves += charge.read_halves;
        part.totals.demand_write_units += charge.write_units;
        let full = (charge.read_halves > 0 && w.read_halves >= 2 * self.limits.read_units)
            || (charge.write_units > 0 && w.write_units >= self.limits.write_units);
        if full && self.limits.enforcement == Enforcement::Enforce {
            part.totals.throttled += 1;
            return Err(Throttled);
        }
        w.read_halves += charge.read_halves;
        w.write_units += charge.write_units;
        part.totals.read_halves += charge.read_halves;
        part.totals.write_units += charge.write_units;
        *part.totals.requests.entry(charge.op).or_default() += 1;
        Ok(())
    }

    /// Folds a finished second into the partition's peaks.
    fn close_window(&self, part: &mut Partition) {
        let w = &part.window;
        let t = &mut part.totals;
        t.peak_read_halves = t.peak_read_halves.max(w.demand_read_halves);
        t.peak_write_units = t.peak_write_units.max(w.demand_write_units);
        if w.demand_read_halves > 2 * self.limits.read_units || w.demand_write_units > self.limits.write_units {
            t.seconds_over_limit += 1;
        }
    }

    /// Totals per partition-key value since the last reset, the current second
    /// included.
    pub fn totals(&self) -> BTreeMap<String, PartitionTotals> {
        let parts = self.partitions.lock().unwrap_or_else(|p| p.into_inner());
        parts
            .iter()
            .map(|(pk, part)| {
                let mut t = part.totals.clone();
                let w = &part.window;
                t.peak_read_halves = t.peak_read_halves.max(w.demand_read_halves);
                t.peak_write_units = t.peak_write_units.max(w.demand_write_units);
                if w.demand_read_halves > 2 * self.limits.read_units || w.demand_write_units > self.limits.write_units {
                    t.seconds_over_limit += 1;
                }
                (pk.clone(), t)
            })
            .collect()
    }

    /// Forgets the totals (the current second's window stays, so limits still hold
    /// across the reset).
    pub fn reset_totals(&self) {
        let mut parts = self.partitions.lock().unwrap_or_else(|p| p.into_inner());
        for part in parts.values_mut() {
            part.totals = PartitionTotals::default();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn write(units: u64) -> Charge {
        Charge { op: Op::PutItem, read_halves: 0, write_units: units }
    }

    /// A partition past 1,000 write units in a second is throttled for the rest of that
    /// second; another partition and the next second are not.
    #[tokio::test(start_paused = true)]
    async fn a_partition_over_its_write_limit_is_throttled_until_the_next_second() {
        let m = Meter::new(Limits::DYNAMODB);
        let now = Instant::now();
        for _ in 0..1_000 {
            m.charge("a", write(1), now).unwrap();
        }
        assert_eq!(m.charge("a", write(1), now), Err(Throttled));
        m.charge("b", write(1), now).expect("another partition key has its own limit");
        let read = Charge { op: Op::GetItem, read_halves: 2, write_units: 0 };
        m.charge("a", read, now).expect("reads have their own limit");
        let later = now + Duration::from_secs(1);
        m.charge("a", write(1), later).expect("a new second");
        let t = &m.totals()["a"];
        assert_eq!(t.write_units, 1_001);
        assert_eq!(t.throttled, 1);
        assert_eq!(t.demand_write_units, 1_002);
        assert_eq!(t.peak_write_units, 1_001);
        assert_eq!(t.seconds_over_limit, 1);
        assert_eq!(t.requests[&Op::PutItem], 1_001);
    }

    /// Read units: 3,000 a second, counted in halves; a large page admitted while the
    /// window has room consumes all of its units.
    #[tokio::test(start_paused = true)]
    async fn reads_are_limited_at_3000_units_and_a_large_page_overshoots() {
        let m = Meter::new(Limits::DYNAMODB);
        let now = Instant::now();
        let page = Charge { op: Op::Query, read_halves: 2 * 256, write_units: 0 };
        for _ in 0..12 {
            m.charge("ns", page, now).unwrap();
        }
        // 3,072 units consumed: past the limit, so the next page waits.
        assert_eq!(m.charge("ns", page, now), Err(Throttled));
        assert_eq!(m.totals()["ns"].read_halves, 2 * 3_072);
    }

    #[tokio::test(start_paused = true)]
    async fn observed_limits_refuse_nothing_but_count_the_seconds_over() {
        let m = Meter::new(Limits { enforcement: Enforcement::Observe, ..Limits::DYNAMODB });
        let now = Instant::now();
        for _ in 0..1_500 {
            m.charge("a", write(1), now).unwrap();
        }
        let t = &m.totals()["a"];
        assert_eq!((t.throttled, t.write_units, t.seconds_over_limit), (0, 1_500, 1));
        m.reset_totals();
        assert_eq!(m.totals()["a"].write_units, 0);
    }
}
