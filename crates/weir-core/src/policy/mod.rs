//! Pure decisions of the lease coordinator, testable without I/O.

mod create;
mod take;

pub use create::leases_to_create;
pub use take::{Observations, TakePlan, plan_takes};
