//! The alerting consumer: records → events → windows → alerts → sink queues.
//!
//! A record is acknowledged as soon as it has been evaluated (added to its windows,
//! counted as late, or counted as malformed); alert delivery is at least once per
//! sink, from bounded queues that never block the stream. State is per worker: exact
//! per-tenant rules need the tenant as the stream's partition key, so that one tenant's
//! events live in one shard and so on one worker.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;
use weir_core::{Acks, Clock, CloseReason, Consumer, ConsumerError, RecordBatch, ShardId, Timestamp};

use crate::engine::{Alert, Engine, EngineStats};
use crate::event::read;
use crate::rule::{Rule, RuleConfig, RuleError};
use weir_core::ports::Publisher;

use crate::sink::{AlertSink, LogSink, Outlet, SnsSink, StdoutSink, WebhookSink};

/// Metric: records that are not events (label `reason`).
pub const MALFORMED: &str = "weir_alerting_malformed_total";
/// Metric: records older than an evaluated window (label `consumer`).
pub const LATE: &str = "weir_alerting_late_total";
/// Metric: alerts raised (labels `rule`, `state`).
pub const ALERTS: &str = "weir_alerts_total";

/// A sink as configured.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase", deny_unknown_fields)]
pub enum SinkConfig {
    /// A structured log line.
    Log,
    /// JSON lines on stdout.
    Stdout,
    /// HTTP POST of the alert JSON.
    Webhook {
        /// The URL.
        url: String,
        /// Per-request timeout.
        #[serde(default = "five_seconds", with = "humantime_serde")]
        timeout: Duration,
    },
    /// An SNS topic.
    Sns {
        /// Topic ARN.
        topic_arn: String,
    },
}

fn five_seconds() -> Duration {
    Duration::from_secs(5)
}
fn ts() -> String {
    "ts".into()
}
fn lateness() -> Duration {
    Duration::from_secs(5)
}
fn capacity() -> usize {
    1000
}
fn attempts() -> u32 {
    8
}
fn log_sink() -> Vec<SinkConfig> {
    vec![SinkConfig::Log]
}

/// `type = "alerting"` in the weir config.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AlertingConfig {
    /// Consumer name. In weir's config it comes from the `[[consumers]]` entry's
    /// `name` and is not repeated here.
    #[serde(default)]
    pub name: String,
    /// Event-time field (epoch milliseconds or RFC 3339); the arrival time when absent.
    #[serde(default = "ts")]
    pub time_field: String,
    /// How long to wait for late events before a window is evaluated.
    #[serde(default = "lateness", with = "humantime_serde")]
    pub allowed_lateness: Duration,
    /// Where alerts go (default: the log).
    #[serde(default = "log_sink")]
    pub sinks: Vec<SinkConfig>,
    /// Alerts queued per sink before new ones are dropped (and counted).
    #[serde(default = "capacity")]
    pub queue_capacity: usize,
    /// Delivery attempts per alert and sink.
    #[serde(default = "attempts")]
    pub max_attempts: u32,
    /// The rules.
    pub rules: Vec<RuleConfig>,
}

/// Why the consumer cannot start.
#[derive(Debug, thiserror::Error)]
pub enum AlertingError {
    /// A rule is invalid.
    #[error(transparent)]
    Rule(#[from] RuleError),
    /// Anything else, with the field.
    #[error("{0}")]
    Config(String),
}

impl AlertingConfig {
    /// Validates every rule (and names the first problem).
    pub fn rules(&self) -> Result<Vec<Rule>, AlertingError> {
        if self.rules.is_empty() {
            return Err(AlertingError::Config("rules: at least one rule is needed".into()));
        }
        let mut names = std::collections::HashSet::new();
        for r in &self.rules {
            if !names.insert(&r.name) {
                return Err(AlertingError::Config(format!("rules: the name {:?} is used twice", r.name)));
            }
        }
        Ok(self.rules.iter().map(Rule::compile).collect::<Result<_, _>>()?)
    }
}

/// The alerting consumer.
pub struct Alerting {
    name: String,
    engine: Engine,
    time_field: String,
    outlets: Vec<Outlet>,
    clock: Arc<dyn Clock>,
    stop: CancellationToken,
    reported: EngineStats,
}

impl Alerting {
    /// Builds the consumer; `publisher` is needed for SNS sinks.
    pub fn new(
        config: &AlertingConfig,
        clock: Arc<dyn Clock>,
        publisher: Option<Arc<dyn Publisher>>,
    ) -> Result<Self, AlertingError> {
        let rules = config.rules()?;
        let mut sinks: Vec<Arc<dyn AlertSink>> = Vec::new();
        for (i, s) in config.sinks.iter().enumerate() {
            sinks.push(match s {
                SinkConfig::Log => Arc::new(LogSink),
                SinkConfig::Stdout => Arc::new(StdoutSink),
                SinkConfig::Webhook { url, timeout } => {
                    if !(url.starts_with("http://") || url.starts_with("https://")) {
                        return Err(AlertingError::Config(format!("sinks[{i}].url: {url:?} is not an http(s) URL")));
                    }
                    Arc::new(
                        WebhookSink::new(url, *timeout)
                            .map_err(|e| AlertingError::Config(format!("sinks[{i}]: {e}")))?,
                    )
                }
                SinkConfig::Sns { topic_arn } => {
                    let p = publisher
                        .clone()
                        .ok_or_else(|| AlertingError::Config(format!("sinks[{i}]: SNS needs AWS access")))?;
                    Arc::new(SnsSink::new(topic_arn, p))
                }
            });
        }
        Ok(Self::with_sinks(config, rules, sinks, clock))
    }

    /// Builds the consumer with sinks made by the caller (tests, custom sinks).
    pub fn with_sinks(
        config: &AlertingConfig,
        rules: Vec<Rule>,
        sinks: Vec<Arc<dyn AlertSink>>,
        clock: Arc<dyn Clock>,
    ) -> Self {
        let stop = CancellationToken::new();
        let outlets = sinks
            .into_iter()
            .map(|s| Outlet::start(s, config.queue_capacity, config.max_attempts, stop.clone()))
            .collect();
        Self {
            name: config.name.clone(),
            engine: Engine::new(rules, config.allowed_lateness),
            time_field: config.time_field.clone(),
            outlets,
            clock,
            stop,
            reported: EngineStats::default(),
        }
    }

    /// What the engine counted so far.
    pub fn stats(&self) -> &EngineStats {
        &self.engine.stats
    }

    fn publish(&mut self, alerts: Vec<Alert>) {
        for a in alerts {
            metrics::counter!(ALERTS, "rule" => a.rule.clone(), "state" => a.state).increment(1);
            for o in &self.outlets {
                o.offer(a.clone());
            }
        }
        let late = self.engine.stats.late - self.reported.late;
        if late > 0 {
            metrics::counter!(LATE, "consumer" => self.name.clone()).increment(late);
        }
        let errors = self.engine.stats.expression_errors - self.reported.expression_errors;
        if errors > 0 {
            metrics::counter!(MALFORMED, "reason" => "expression_error").increment(errors);
        }
        self.reported = self.engine.stats.clone();
    }

    /// Evaluates windows closed at `now` (the tick does this; tests may call it).
    pub fn evaluate(&mut self, now: Timestamp) {
        let alerts = self.engine.tick(now);
        self.publish(alerts);
    }
}

impl Drop for Alerting {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

#[async_trait]
impl Consumer for Alerting {
    fn name(&self) -> &str {
        &self.name
    }

    async fn on_batch(&mut self, batch: &RecordBatch, acks: &dyn Acks) -> Result<(), ConsumerError> {
        let now = self.clock.now();
        let shard = &batch.shard_id;
        let mut since_yield = 0;
        for r in &batch.records {
            since_yield += r.data.len();
            if since_yield >= weir_core::YIELD_EVERY_BYTES {
                since_yield = 0;
                tokio::task::yield_now().await;
            }
            match read(&r.data, r.approximate_arrival, &self.time_field) {
                Err(m) => metrics::counter!(MALFORMED, "reason" => m.as_str()).increment(1),
                Ok(f) => {
                    if f.bad_time {
                        metrics::counter!(MALFORMED, "reason" => "bad_time").increment(1);
                    }
                    let id = format!("{shard}/{}", r.position);
                    self.engine.ingest(&f.event(&id), now);
                }
            }
        }
        if let Some(last) = batch.last_position() {
            acks.durable(shard, last);
        }
        Ok(())
    }

    async fn on_tick(&mut self, now: Timestamp, _acks: &dyn Acks) -> Result<(), ConsumerError> {
        self.evaluate(now);
        Ok(())
    }

    async fn on_shard_close(
        &mut self,
        _shard: &ShardId,
        _reason: CloseReason,
        _acks: &dyn Acks,
    ) -> Result<(), ConsumerError> {
        // Every record was acknowledged when it was evaluated; windows stay with this
        // worker's engine (state is per worker).
        Ok(())
    }
}
