use std::future::Future;
use std::sync::Arc;

use bytes::Bytes;
use weir_core::ports::{ObjectSink, PutOptions, PutOutcome, SinkError};

/// Known gaps of a store the suite runs against.
#[derive(Debug, Clone, Copy)]
pub struct SinkQuirks {
    /// Concurrent create-only puts of one key: exactly one wins and the object is that
    /// writer's whole body. (s3s-fs checks `If-None-Match` before writing, not
    /// atomically, so two may both succeed and the stored checksum can come from one
    /// writer and the bytes from another; for such a store the suite only checks that
    /// one put succeeded and an object of the right size exists. The archiver's
    /// exactly-once mode needs the atomic behaviour, which S3 has.)
    pub atomic_concurrent_creates: bool,
    /// `stat` of a key that is only a prefix of other keys answers "absent". (s3s-fs
    /// keeps objects as files, so such a key is a directory and HEAD on it fails with
    /// 500; the archiver never stats a prefix.)
    pub stat_of_a_prefix_is_absent: bool,
}

impl Default for SinkQuirks {
    fn default() -> Self {
        Self { atomic_concurrent_creates: true, stat_of_a_prefix_is_absent: true }
    }
}

/// Runs every object-sink rule against a fresh sink from `make`. Keys are made unique
/// per run so sinks that share a bucket can run the suite concurrently.
pub async fn object_sink_suite<F, Fut>(make: F)
where
    F: Fn() -> Fut,
    Fut: Future<Output = Arc<dyn ObjectSink>>,
{
    object_sink_suite_with(make, SinkQuirks::default()).await;
}

/// [`object_sink_suite`] for a store with known gaps.
pub async fn object_sink_suite_with<F, Fut>(make: F, quirks: SinkQuirks)
where
    F: Fn() -> Fut,
    Fut: Future<Output = Arc<dyn ObjectSink>>,
{
    let run = format!("suite-{:016x}", rand::random::<u64>());
    create_only(make().await, &run, quirks.stat_of_a_prefix_is_absent).await;
    rejects_escaping_keys(make().await, &run).await;
    lists_by_prefix(make().await, &run).await;
    concurrent_puts_one_wins(make().await, &run, quirks.atomic_concurrent_creates).await;
    large_objects_round_trip(make().await, &run).await;
    deletes(make().await, &run).await;
}

async fn deletes(s: Arc<dyn ObjectSink>, run: &str) {
    let key = format!("{run}/delete/a");
    let other = format!("{run}/delete/ab");
    s.put_if_absent(&key, Bytes::from_static(b"one"), &opts()).await.unwrap();
    s.put_if_absent(&other, Bytes::from_static(b"two"), &opts()).await.unwrap();
    s.delete(&key).await.unwrap();
    assert!(s.get(&key).await.unwrap().is_none(), "deleted");
    assert!(s.stat(&key).await.unwrap().is_none(), "deleted");
    assert_eq!(s.get(&other).await.unwrap().unwrap(), Bytes::from_static(b"two"), "only the key itself");
    s.delete(&key).await.unwrap();
    s.delete(&format!("{run}/delete/never")).await.unwrap();
    assert_eq!(
        s.put_if_absent(&key, Bytes::from_static(b"again"), &opts()).await.unwrap(),
        PutOutcome::Created,
        "a deleted key can be created again"
    );
    let r = s.delete(&format!("{run}/../escape")).await;
    assert!(matches!(r, Err(SinkError::InvalidKey { .. })), "escaping key accepted by delete: {r:?}");
}

fn opts() -> PutOptions {
    PutOptions {
        content_type: Some("application/x-ndjson".into()),
        content_encoding: Some("gzip".into()),
        metadata: vec![("weir-test".into(), "1".to_owned())],
    }
}

async fn create_only(s: Arc<dyn ObjectSink>, run: &str, stat_of_a_prefix_is_absent: bool) {
    let key = format!("{run}/create/a.gz");
    let first = s.put_if_absent(&key, Bytes::from_static(b"one"), &opts()).await.unwrap();
    assert_eq!(first, PutOutcome::Created);
    let second = s.put_if_absent(&key, Bytes::from_static(b"two"), &opts()).await.unwrap();
    assert_eq!(second, PutOutcome::AlreadyExists);
    assert_eq!(s.get(&key).await.unwrap().unwrap(), Bytes::from_static(b"one"));
    assert!(s.get(&format!("{run}/create/missing")).await.unwrap().is_none());
    assert_eq!(s.stat(&key).await.unwrap().map(|m| m.size), Some(3), "stat gives the size");
    assert!(s.stat(&format!("{run}/create/missing")).await.unwrap().is_none());
    let prefix = s.stat(&format!("{run}/create")).await;
    if stat_of_a_prefix_is_absent {
        assert!(prefix.unwrap().is_none(), "a prefix is not an object");
    } else {
        assert!(!matches!(prefix, Ok(Some(_))), "a prefix is not an object: {prefix:?}");
    }
    let empty = format!("{run}/create/empty");
    assert_eq!(s.put_if_absent(&empty, Bytes::new(), &opts()).await.unwrap(), PutOutcome::Created);
    assert_eq!(s.get(&empty).await.unwrap().unwrap().len(), 0);
}

async fn rejects_escaping_keys(s: Arc<dyn ObjectSink>, run: &str) {
    for key in [format!("{run}/../escape"), format!("/{run}/abs"), format!("{run}/a//b"), format!("{run}/nl\nx")] {
        let r = s.put_if_absent(&key, Bytes::from_static(b"x"), &opts()).await;
        assert!(matches!(r, Err(SinkError::InvalidKey { .. })), "{key:?} accepted: {r:?}");
    }
}

async fn lists_by_prefix(s: Arc<dyn ObjectSink>, run: &str) {
    for k in ["b/2", "a/1", "a/3", "ab/4"] {
        let key = format!("{run}/list/{k}");
        s.put_if_absent(&key, Bytes::from(k.as_bytes().to_vec()), &opts()).await.unwrap();
    }
    let listed = s.list(&format!("{run}/list/a/")).await.unwrap();
    let keys: Vec<&str> = listed.iter().map(|m| m.key.as_str()).collect();
    assert_eq!(keys, vec![format!("{run}/list/a/1"), format!("{run}/list/a/3")]);
    assert_eq!(listed[0].size, 3);
    let all = s.list(&format!("{run}/list/")).await.unwrap();
    assert_eq!(all.len(), 4);
    assert!(all.windows(2).all(|w| w[0].key < w[1].key), "list must be sorted");
    assert!(s.list(&format!("{run}/nothing/")).await.unwrap().is_empty());
}

async fn concurrent_puts_one_wins(s: Arc<dyn ObjectSink>, run: &str, atomic: bool) {
    let key = format!("{run}/race/obj");
    let mut tasks = Vec::new();
    for i in 0..8u8 {
        let (s, key) = (s.clone(), key.clone());
        tasks.push(tokio::spawn(async move { s.put_if_absent(&key, Bytes::from(vec![i; 1024]), &opts()).await }));
    }
    let mut created = 0;
    for t in tasks {
        if t.await.unwrap().unwrap() == PutOutcome::Created {
            created += 1;
        }
    }
    if !atomic {
        assert!(created >= 1, "at least one concurrent put must succeed");
        assert_eq!(s.stat(&key).await.unwrap().map(|m| m.size), Some(1024));
        return;
    }
    assert_eq!(created, 1, "exactly one concurrent create-only put may win");
    let body = s.get(&key).await.unwrap().unwrap();
    assert_eq!(body.len(), 1024);
    assert!(body.iter().all(|b| *b == body[0]), "object mixes two writers");
}

async fn large_objects_round_trip(s: Arc<dyn ObjectSink>, run: &str) {
    let key = format!("{run}/large/obj");
    let body: Vec<u8> = (0..(6 * 1024 * 1024 + 17)).map(|i: u32| (i % 251) as u8).collect();
    let body = Bytes::from(body);
    assert_eq!(s.put_if_absent(&key, body.clone(), &opts()).await.unwrap(), PutOutcome::Created);
    assert_eq!(s.get(&key).await.unwrap().unwrap(), body);
}
