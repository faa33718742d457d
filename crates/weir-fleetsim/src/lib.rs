//! weir-fleetsim: many real weir workers over one lease table that charges and
//! throttles every request as DynamoDB would, to measure what the lease layout costs at
//! a fleet's scale (issue 36).
//!
//! Map of the crate:
//! - [`units`]: DynamoDB's capacity arithmetic (4 KB / 1 KB rounding, Query pages).
//! - [`meter`]: units and requests per partition-key value per second, the limits,
//!   throttling.
//! - [`costed_table`]: a `LeaseTable` issuing the DynamoDB adapter's requests per call.
//! - `items.rs`: item sizes; `sdk_retry.rs`: the SDK's retries of throttled requests.
#![warn(missing_docs)]

pub mod costed_table;
mod items;
pub mod meter;
mod sdk_retry;
pub mod units;

pub use costed_table::CostedLeaseTable;
pub use meter::{Enforcement, Limits, Meter};
pub use sdk_retry::SdkRetry;
