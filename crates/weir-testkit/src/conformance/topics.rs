use std::sync::Arc;

use async_trait::async_trait;
use weir_core::ports::Publisher;

/// A [`Publisher`] under test, and a way to read what a topic received.
#[async_trait]
pub trait TopicHarness: Send + Sync {
    /// The publisher.
    fn publisher(&self) -> Arc<dyn Publisher>;
    /// A topic that exists and has received nothing yet.
    fn topic(&self) -> String;
    /// A topic that does not exist.
    fn missing(&self) -> String;
    /// Every `(subject, message)` [`TopicHarness::topic`] received, in the order received.
    async fn received(&self) -> Vec<(String, String)>;
}

/// The rules of [`Publisher`]: a publish that returns `Ok` was received once, with its
/// subject and message unchanged (any UTF-8, up to 200 KiB: SNS takes 256 KB);
/// concurrent publishes are each received once; publishing to a topic that does not
/// exist fails, not retryable, and is received nowhere.
pub async fn publisher_suite(h: &dyn TopicHarness) {
    let publisher = h.publisher();
    let topic = h.topic();
    assert!(h.received().await.is_empty(), "the topic starts empty");
    let mut expected = Vec::new();
    for (subject, message) in [
        ("weir alert: errors", r#"{"rule":"errors","count":3}"#.to_owned()),
        ("é€😀", "line one\nline two \" \\ é€😀".to_owned()),
        ("big", "m".repeat(200 << 10)),
    ] {
        publisher.publish(&topic, subject, &message).await.expect("a publish to a topic succeeds");
        expected.push((subject.to_owned(), message));
    }
    assert_eq!(h.received().await, expected, "each publish received once, unchanged, in order");

    // 20 publishes at once.
    let calls = (0..20).map(|i| {
        let (publisher, topic) = (publisher.clone(), topic.clone());
        async move { publisher.publish(&topic, "concurrent", &format!("message {i}")).await }
    });
    for result in futures::future::join_all(calls).await {
        result.expect("a concurrent publish succeeds");
    }
    let mut concurrent: Vec<String> = h.received().await.into_iter().skip(expected.len()).map(|(_, m)| m).collect();
    concurrent.sort();
    let mut want: Vec<String> = (0..20).map(|i| format!("message {i}")).collect();
    want.sort();
    assert_eq!(concurrent, want, "every concurrent publish received once");

    let e = publisher.publish(&h.missing(), "lost", "nowhere").await.expect_err("a publish to no topic fails");
    assert!(!e.retryable, "no topic is not a passing failure: {e}");
    assert!(!e.message.is_empty(), "the error says what went wrong");
    assert_eq!(h.received().await.len(), expected.len() + 20, "nothing else was received");
}
