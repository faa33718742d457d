//! Where alerts go: a structured log line, stdout JSON, an HTTP webhook, or an SNS
//! topic through the `weir_core::ports::Publisher` port. Each sink has a bounded queue and its own
//! task that delivers with retries and backoff; a full queue drops the alert and
//! counts it. A failing sink never blocks the stream.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use weir_core::ports::Publisher;
use weir_core::redact;

use crate::engine::Alert;

/// A delivery failure.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct SendError {
    /// What went wrong.
    pub message: String,
    /// Whether another attempt may succeed.
    pub retryable: bool,
}

impl SendError {
    /// A failure that retrying will not fix (the alert cannot be encoded, the client
    /// cannot be built).
    pub fn permanent(e: impl std::fmt::Display) -> Self {
        Self { message: e.to_string(), retryable: false }
    }
}

/// Delivers one alert.
#[async_trait]
pub trait AlertSink: Send + Sync {
    /// Name for metrics and logs.
    fn name(&self) -> &str;
    /// Delivers the alert.
    async fn send(&self, alert: &Alert) -> Result<(), SendError>;
}

/// A structured log line per alert.
pub struct LogSink;

#[async_trait]
impl AlertSink for LogSink {
    fn name(&self) -> &str {
        "log"
    }
    async fn send(&self, a: &Alert) -> Result<(), SendError> {
        tracing::warn!(rule = %a.rule, state = a.state, group = ?a.group, value = a.value, condition = %a.condition,
            window_end = %a.window_end, events = a.events, "{}", a.text);
        Ok(())
    }
}

/// One JSON object per line on stdout.
pub struct StdoutSink;

#[async_trait]
impl AlertSink for StdoutSink {
    fn name(&self) -> &str {
        "stdout"
    }
    async fn send(&self, a: &Alert) -> Result<(), SendError> {
        use std::io::Write as _;
        let line = serde_json::to_string(a).map_err(SendError::permanent)?;
        // Standard output is this sink's destination (not a stray print).
        writeln!(std::io::stdout().lock(), "{line}").map_err(SendError::permanent)
    }
}

/// POSTs the alert as JSON (with a Slack-compatible `text` field).
pub struct WebhookSink {
    url: String,
    client: reqwest::Client,
}

impl WebhookSink {
    /// A webhook with a per-request timeout.
    pub fn new(url: &str, timeout: Duration) -> Result<Self, SendError> {
        let client = reqwest::Client::builder().timeout(timeout).build().map_err(SendError::permanent)?;
        Ok(Self { url: url.to_owned(), client })
    }
}

#[async_trait]
impl AlertSink for WebhookSink {
    fn name(&self) -> &str {
        "webhook"
    }
    async fn send(&self, a: &Alert) -> Result<(), SendError> {
        let body = serde_json::to_vec(a).map_err(SendError::permanent)?;
        let resp =
            self.client.post(&self.url).header("content-type", "application/json").body(body).send().await.map_err(
                |e| SendError {
                    // The URL (often holding a token) never goes into a message.
                    message: format!("webhook {}: {}", redact::url(&self.url), e.without_url()),
                    retryable: true,
                },
            )?;
        let status = resp.status();
        if status.is_success() {
            return Ok(());
        }
        let retryable = status.is_server_error() || status.as_u16() == 429 || status.as_u16() == 408;
        Err(SendError { message: format!("webhook {} answered {status}", redact::url(&self.url)), retryable })
    }
}

/// Publishes to an SNS topic through a [`Publisher`] (weir-aws implements it with
/// aws-sdk-sns).
pub struct SnsSink {
    topic: String,
    publisher: Arc<dyn Publisher>,
}

impl SnsSink {
    /// A sink for `topic`.
    pub fn new(topic: &str, publisher: Arc<dyn Publisher>) -> Self {
        Self { topic: topic.to_owned(), publisher }
    }
}

#[async_trait]
impl AlertSink for SnsSink {
    fn name(&self) -> &str {
        "sns"
    }
    async fn send(&self, a: &Alert) -> Result<(), SendError> {
        let body = serde_json::to_string(a).map_err(SendError::permanent)?;
        let subject: String = format!("[{}] {}", a.state, a.rule).chars().take(100).collect();
        self.publisher.publish(&self.topic, &subject, &body).await.map_err(|e| SendError {
            message: redact::scrub(&e.message, &self.topic, &redact::arn(&self.topic)),
            retryable: e.retryable,
        })
    }
}

/// A sink's queue and delivery task.
pub struct Outlet {
    name: String,
    tx: mpsc::Sender<Alert>,
    task: JoinHandle<()>,
}

/// Metric: alerts dropped because a sink's queue was full (label `sink`).
pub const ALERTS_DROPPED: &str = "weir_alerts_dropped_total";
/// Metric: alerts delivered (label `sink`).
pub const ALERTS_SENT: &str = "weir_alerts_sent_total";
/// Metric: failed delivery attempts (label `sink`).
pub const ALERT_SEND_FAILURES: &str = "weir_alert_send_failures_total";

impl Outlet {
    /// Starts the delivery task of `sink` with a queue of `capacity`; it stops when
    /// `stop` fires (after at most one more attempt) or the outlet is dropped.
    pub fn start(sink: Arc<dyn AlertSink>, capacity: usize, max_attempts: u32, stop: CancellationToken) -> Self {
        let (tx, mut rx) = mpsc::channel::<Alert>(capacity.max(1));
        let name = sink.name().to_owned();
        let label = name.clone();
        let task = tokio::spawn(async move {
            loop {
                let alert = tokio::select! {
                    _ = stop.cancelled() => return,
                    a = rx.recv() => match a { Some(a) => a, None => return },
                };
                let mut delay = Duration::from_millis(200);
                for attempt in 1..=max_attempts.max(1) {
                    match sink.send(&alert).await {
                        Ok(()) => {
                            metrics::counter!(ALERTS_SENT, "sink" => label.clone()).increment(1);
                            break;
                        }
                        Err(e) => {
                            metrics::counter!(ALERT_SEND_FAILURES, "sink" => label.clone()).increment(1);
                            tracing::warn!(sink = %label, attempt, error = %e, "alert delivery failed");
                            if !e.retryable || attempt == max_attempts {
                                break;
                            }
                            tokio::select! {
                                _ = stop.cancelled() => return,
                                _ = tokio::time::sleep(delay) => {}
                            }
                            delay = (delay * 2).min(Duration::from_secs(30));
                        }
                    }
                }
            }
        });
        Self { name, tx, task }
    }

    /// Queues an alert; a full queue drops it (counted). Never waits.
    pub fn offer(&self, alert: Alert) -> bool {
        match self.tx.try_send(alert) {
            Ok(()) => true,
            Err(_) => {
                metrics::counter!(ALERTS_DROPPED, "sink" => self.name.clone()).increment(1);
                false
            }
        }
    }
}

impl Drop for Outlet {
    fn drop(&mut self) {
        self.task.abort();
    }
}
