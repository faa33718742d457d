use async_trait::async_trait;
use bytes::Bytes;

/// A record to write to a stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutRecord {
    /// Partition key (ordering is kept per key).
    pub partition_key: String,
    /// Payload.
    pub data: Bytes,
}

/// A write that did not complete.
#[derive(Debug, thiserror::Error)]
#[error("stream write failed: {message}")]
pub struct WriteError {
    /// What failed.
    pub message: String,
    /// Whether trying again may help.
    pub retryable: bool,
}

/// Writes records to a stream: a Kinesis stream (weir-aws) or an NDJSON file
/// (weir-local); weir-testkit has an in-memory one and the conformance suite.
///
/// Contract: `write` returns `Ok` only when every record was accepted; records of one
/// partition key are accepted in the order given (a record is sent only after the
/// previous record with its key was accepted); a record accepted is never sent again
/// within one call. On `Err` some records may have been accepted.
#[async_trait]
pub trait StreamWriter: Send + Sync {
    /// Writes the records.
    async fn write(&self, records: Vec<OutRecord>) -> Result<(), WriteError>;

    /// Where records go, for humans.
    fn location(&self) -> String;
}

/// Splits records into waves in which each partition key appears at most once, in the
/// original per-key order: wave `i` holds the `i`-th record of every key. Writing wave
/// after wave, each completely, keeps per-key order even when single records of a
/// batch are throttled and retried.
pub fn waves(records: Vec<OutRecord>) -> Vec<Vec<OutRecord>> {
    let mut seen: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    let mut out: Vec<Vec<OutRecord>> = Vec::new();
    for r in records {
        let i = seen.entry(r.partition_key.clone()).or_insert(0);
        if out.len() <= *i {
            out.push(Vec::new());
        }
        out[*i].push(r);
        *i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waves_keep_per_key_order() {
        let r =
            |k: &str, d: &'static str| OutRecord { partition_key: k.into(), data: Bytes::from_static(d.as_bytes()) };
        let w = waves(vec![r("a", "a1"), r("b", "b1"), r("a", "a2"), r("a", "a3"), r("c", "c1")]);
        let text: Vec<Vec<&[u8]>> = w.iter().map(|w| w.iter().map(|r| r.data.as_ref()).collect()).collect();
        assert_eq!(text, vec![vec![&b"a1"[..], b"b1", b"c1"], vec![b"a2"], vec![b"a3"]]);
    }
}
