//! [`Publisher`] (the alerting consumer's `sns` sink) on aws-sdk-sns.

use async_trait::async_trait;
use weir_core::ports::{PublishError, Publisher};

/// Publishes to SNS topics.
pub struct SnsPublisher {
    client: aws_sdk_sns::Client,
}

impl SnsPublisher {
    /// A publisher using `client` (see [`crate::clients::sns`]).
    pub fn new(client: aws_sdk_sns::Client) -> Self {
        Self { client }
    }
}

#[async_trait]
impl Publisher for SnsPublisher {
    async fn publish(&self, topic: &str, subject: &str, message: &str) -> Result<(), PublishError> {
        self.client.publish().topic_arn(topic).subject(subject).message(message).send().await.map(|_| ()).map_err(|e| {
            let retryable =
                !matches!(&e, aws_sdk_sns::error::SdkError::ServiceError(s) if s.raw().status().is_client_error());
            PublishError { message: aws_sdk_sns::error::DisplayErrorContext(&e).to_string(), retryable }
        })
    }
}
