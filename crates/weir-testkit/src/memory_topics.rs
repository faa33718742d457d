//! An in-memory [`Publisher`]: topics created by name keep every message published.

use std::collections::BTreeMap;
use std::sync::Mutex;

use async_trait::async_trait;
use weir_core::ports::{PublishError, Publisher};

/// Topics in memory.
#[derive(Debug, Default)]
pub struct MemoryTopics {
    topics: Mutex<BTreeMap<String, Vec<(String, String)>>>,
}

impl MemoryTopics {
    /// No topics.
    pub fn new() -> Self {
        Self::default()
    }

    /// Creates `topic` (nothing if it exists).
    pub fn create(&self, topic: &str) {
        self.topics.lock().unwrap_or_else(|p| p.into_inner()).entry(topic.to_owned()).or_default();
    }

    /// Every `(subject, message)` `topic` received, in order (empty if no such topic).
    pub fn received(&self, topic: &str) -> Vec<(String, String)> {
        self.topics.lock().unwrap_or_else(|p| p.into_inner()).get(topic).cloned().unwrap_or_default()
    }
}

#[async_trait]
impl Publisher for MemoryTopics {
    async fn publish(&self, topic: &str, subject: &str, message: &str) -> Result<(), PublishError> {
        match self.topics.lock().unwrap_or_else(|p| p.into_inner()).get_mut(topic) {
            Some(received) => {
                received.push((subject.to_owned(), message.to_owned()));
                Ok(())
            }
            None => Err(PublishError { message: format!("topic does not exist: {topic}"), retryable: false }),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use async_trait::async_trait;

    use super::*;
    use crate::conformance::{TopicHarness, publisher_suite};

    struct Harness(Arc<MemoryTopics>);

    #[async_trait]
    impl TopicHarness for Harness {
        fn publisher(&self) -> Arc<dyn Publisher> {
            self.0.clone()
        }
        fn topic(&self) -> String {
            "alerts".into()
        }
        fn missing(&self) -> String {
            "nowhere".into()
        }
        async fn received(&self) -> Vec<(String, String)> {
            self.0.received("alerts")
        }
    }

    #[tokio::test]
    async fn passes_publisher_conformance() {
        let t = Arc::new(MemoryTopics::new());
        t.create("alerts");
        publisher_suite(&Harness(t.clone())).await;
        assert!(t.received("nowhere").is_empty());
    }
}
