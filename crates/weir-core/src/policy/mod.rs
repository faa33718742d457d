//! Pure decisions of the lease coordinator, testable without I/O.

mod census;
mod cleanup;
mod create;
mod take;

pub use census::{Census, census};
pub use cleanup::{Cleanup, ended_lease_cleanup};
pub use create::{leases_from_child_shards, leases_to_create};
pub use take::{Observations, TakePlan, plan_from_sample, plan_takes};
