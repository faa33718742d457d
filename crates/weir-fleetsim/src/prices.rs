//! DynamoDB on-demand list prices, us-east-1, and what a rate costs a month.
//!
//! Source: <https://aws.amazon.com/dynamodb/pricing/on-demand/>, after the price cut of
//! 1 November 2024 (on-demand throughput halved): $0.625 per million write request
//! units and $0.125 per million read request units. Not verified against the live page
//! from this machine (no network): an assumption to re-check before quoting.
//! On-demand request units are charged as capacity units are counted (a strongly
//! consistent read of up to 4 KB is one read request unit, an eventually consistent one
//! half; a write of up to 1 KB one write request unit; transactions twice that).
//! Storage (the lease items: megabytes) is left out.

/// Dollars per million write request units.
pub const WRITE_PER_MILLION: f64 = 0.625;

/// Dollars per million read request units.
pub const READ_PER_MILLION: f64 = 0.125;

/// Seconds in AWS's billing month (730 hours).
pub const SECONDS_PER_MONTH: f64 = 730.0 * 3600.0;

/// Dollars a month for steady rates of read and write units per second.
pub fn monthly_cost(read_units_per_sec: f64, write_units_per_sec: f64) -> f64 {
    SECONDS_PER_MONTH * (read_units_per_sec * READ_PER_MILLION + write_units_per_sec * WRITE_PER_MILLION) / 1e6
}

/// Dollars per shard-hour for those rates over `shards` shards.
pub fn per_shard_hour(read_units_per_sec: f64, write_units_per_sec: f64, shards: usize) -> f64 {
    let hourly = 3600.0 * (read_units_per_sec * READ_PER_MILLION + write_units_per_sec * WRITE_PER_MILLION) / 1e6;
    hourly / shards.max(1) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_a_second_costs_about_1_64_a_month() {
        // 2,628,000 writes × $0.625 / 1e6.
        assert!((monthly_cost(0.0, 1.0) - 1.6425).abs() < 1e-9);
        assert!((monthly_cost(1.0, 0.0) - 0.3285).abs() < 1e-9);
        assert!((per_shard_hour(0.0, 1.0, 1) - 0.00225).abs() < 1e-12);
    }
}
