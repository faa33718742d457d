use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use weir_core::ports::{OutRecord, StreamWriter};

/// A [`StreamWriter`] under test, and a way to read back what its destination holds.
#[async_trait]
pub trait WriterHarness: Send + Sync {
    /// The writer (always the same destination, which starts empty).
    fn writer(&self) -> Arc<dyn StreamWriter>;
    /// The data of every record the destination holds, each once as accepted, in an
    /// order that keeps the order of each partition key (Kinesis: shard after shard).
    async fn accepted(&self) -> Vec<Bytes>;
}

/// A record of the suite: its key and number are in its data (one JSON line), so the
/// order of each key can be checked on destinations that keep no keys.
fn record(key: &str, n: usize, pad: usize) -> OutRecord {
    let data = format!(r#"{{"key":"{key}","n":{n},"pad":"{}"}}"#, "x".repeat(pad));
    OutRecord { partition_key: key.to_owned(), data: Bytes::from(data) }
}

fn key_and_number(data: &Bytes) -> (String, usize) {
    let v: serde_json::Value = serde_json::from_slice(data.strip_suffix(b"\n").unwrap_or(data)).unwrap();
    (v["key"].as_str().unwrap().to_owned(), v["n"].as_u64().unwrap() as usize)
}

/// Per key, the numbers in the order the destination holds them.
fn by_key(data: &[Bytes]) -> BTreeMap<String, Vec<usize>> {
    let mut out: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for d in data {
        let (k, n) = key_and_number(d);
        out.entry(k).or_default().push(n);
    }
    out
}

/// The rules of [`StreamWriter`]: a write that returns `Ok` had every record accepted,
/// each once; records of one key keep their order within a write and across writes;
/// an empty write is a no-op; batches past a service's per-call limits (500 records,
/// 5 MiB) are whole.
pub async fn stream_writer_suite(h: &dyn WriterHarness) {
    let w = h.writer();
    assert!(!w.location().is_empty(), "location names the destination");
    w.write(Vec::new()).await.expect("an empty write succeeds");
    assert!(h.accepted().await.is_empty(), "an empty write writes nothing");

    // 1,200 records over seven keys, interleaved, in one write.
    let keys = ["a", "b", "c", "d", "e", "f", "g"];
    let mut expected: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    let mut batch = Vec::new();
    for n in 0..1_200 {
        let key = keys[(n * 7 + n / 5) % keys.len()];
        batch.push(record(key, n, 40));
        expected.entry(key.to_owned()).or_default().push(n);
    }
    w.write(batch).await.expect("a write of 1,200 records succeeds");
    assert_eq!(by_key(&h.accepted().await), expected, "every record once, each key in order");

    // The same keys again, in two more writes: order holds across calls.
    for round in 0..2 {
        let batch: Vec<OutRecord> = (0..30).map(|i| record(keys[i % 3], 1_200 + round * 30 + i, 10)).collect();
        for r in &batch {
            expected.entry(r.partition_key.clone()).or_default().push(key_and_number(&r.data).1);
        }
        w.write(batch).await.expect("a later write succeeds");
    }
    assert_eq!(by_key(&h.accepted().await), expected, "order kept across writes");

    // About 6 MiB in one write: more than one PutRecords call can carry.
    let big: Vec<OutRecord> = (0..20).map(|i| record("big", i, 300 << 10)).collect();
    w.write(big).await.expect("a write of 6 MiB succeeds");
    expected.insert("big".into(), (0..20).collect());
    let all = h.accepted().await;
    assert_eq!(by_key(&all), expected, "large records whole, once, in order");
    assert!(all.iter().all(|d| !d[..d.len() - 1].contains(&b'\n')), "data is kept as written");
}
