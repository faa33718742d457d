//! weir-alerting: real-time rules over MCP tool-call events.
//!
//! A rule ([`rule`]) has an optional jq filter, jq group-by paths, a tumbling or sliding
//! window, an aggregate (count, error rate, count of an `errorCode`, p50/p95/p99 of
//! `durationMs` from a DDSketch), a condition, a minimum number of events and a cooldown.
//! The [`engine`] buckets events by event time and evaluates each window once the
//! watermark passes its end: an alert fires once when the condition starts to hold,
//! repeats after the cooldown while it holds, and is resolved when it stops. Alerts go
//! to [`sink`]s (log, stdout, webhook, SNS) through bounded queues with retries; a
//! failing sink never blocks the stream. [`consumer::Alerting`] is the consumer.
#![warn(missing_docs)]

pub mod consumer;
pub mod engine;
pub mod event;
pub mod rule;
pub mod sink;

pub use consumer::{Alerting, AlertingConfig, SinkConfig};
pub use engine::Alert;
