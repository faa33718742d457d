//! Messages published to a topic (SNS): the alerting consumer's port for its `sns`
//! sink. weir-aws implements it with aws-sdk-sns.

use async_trait::async_trait;

/// A failed publish.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct PublishError {
    /// What went wrong.
    pub message: String,
    /// Whether another attempt may succeed.
    pub retryable: bool,
}

/// Publishes a message to a topic.
#[async_trait]
pub trait Publisher: Send + Sync {
    /// Publishes `message` with `subject` to `topic`.
    async fn publish(&self, topic: &str, subject: &str, message: &str) -> Result<(), PublishError>;
}
