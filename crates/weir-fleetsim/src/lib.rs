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
//! - [`stream`]: a stream of one record a second per shard, made up as read; reshards.
//! - `consumer.rs`: the consumer every worker runs (acknowledges at once).
//! - [`fleet`]: one application's workers (the real `weir_runtime::Worker`).
//! - [`spec`]: the scenarios and the size of a run; [`scenario`]: one run; `sample.rs`:
//!   ownership second by second.
//! - [`report`]: a run's numbers and the markdown table; [`kcl`]: the KCL 3.x model;
//!   [`prices`]: on-demand prices.
#![warn(missing_docs)]

pub mod consumer;
pub mod costed_table;
pub mod fleet;
mod items;
pub mod kcl;
pub mod meter;
pub mod prices;
pub mod report;
mod sample;
pub mod scenario;
mod sdk_retry;
pub mod spec;
pub mod stream;
pub mod units;

pub use costed_table::CostedLeaseTable;
pub use meter::{Enforcement, Limits, Meter};
pub use report::{Report, markdown};
pub use sample::EventTiming;
pub use scenario::run;
pub use sdk_retry::SdkRetry;
pub use spec::{Scenario, Spec};
