//! What a run is: the scenario (what happens in the measured time) and the spec (the
//! size of the fleet, the time, the seed, DynamoDB's limits).

use std::time::Duration;

use crate::meter::Limits;

/// What happens in the measured time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scenario {
    /// Nothing: the balanced fleet runs.
    Steady,
    /// Every worker is stopped gracefully and started again, a tenth of the fleet at a
    /// time; the next tenth [`Spec::deploy_settle`] after the last one is running again.
    RollingDeploy,
    /// Starts with half the workers; the other half joins at once, and leaves again
    /// (gracefully) halfway through.
    ScaleOutIn,
    /// A fifth of the workers, chosen by the seed, crash at once and stay down.
    Crash,
    /// Every shard splits in two at once.
    Reshard,
    /// Three applications share the table (three namespaces), each with a third of the
    /// shards and of the workers.
    ThreeApps,
}

impl Scenario {
    /// Every scenario, in report order.
    pub const ALL: [Scenario; 6] = [
        Scenario::Steady,
        Scenario::RollingDeploy,
        Scenario::ScaleOutIn,
        Scenario::Crash,
        Scenario::Reshard,
        Scenario::ThreeApps,
    ];

    /// Its name on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Scenario::Steady => "steady",
            Scenario::RollingDeploy => "deploy",
            Scenario::ScaleOutIn => "scale",
            Scenario::Crash => "crash",
            Scenario::Reshard => "reshard",
            Scenario::ThreeApps => "three-apps",
        }
    }

    /// The scenario named `name`.
    pub fn parse(name: &str) -> Option<Scenario> {
        Self::ALL.into_iter().find(|s| s.name() == name)
    }
}

/// The size of a run.
#[derive(Debug, Clone)]
pub struct Spec {
    /// Shards at the start (all applications together).
    pub shards: usize,
    /// Workers at full size (all applications together).
    pub workers: usize,
    /// The measured time.
    pub measured: Duration,
    /// Longest warm-up: the measured time starts when the fleet is balanced or then.
    pub warmup_limit: Duration,
    /// Decides the simulator's choices.
    pub seed: u64,
    /// DynamoDB's per-partition limits, enforced or observed.
    pub limits: Limits,
    /// How long a restarted wave of a rolling deploy runs before the next one stops.
    pub deploy_settle: Duration,
    /// Partition keys each namespace's leases are spread over (see
    /// [`CostedLeaseTable::with_partitions`](crate::CostedLeaseTable::with_partitions)).
    pub lease_partitions: u32,
    /// Partition keys each namespace's worker records are spread over (see
    /// [`CostedLeaseTable::with_worker_partitions`](crate::CostedLeaseTable::with_worker_partitions)).
    pub worker_partitions: u32,
}
