//! Claims: how a new owner learns whether an earlier owner's object was written. A
//! claim is an empty object put create-only at the key an open intent names; once it
//! lands, the earlier owner's create-only put can never land after it. Delivery checks
//! for claims too: a put refused because the key exists finds its own object there or
//! a claim.

use std::collections::HashSet;
use std::sync::Arc;

use bytes::Bytes;
use weir_core::ports::{ObjectSink, PutOptions, PutOutcome, SinkError};

/// What a key turned out to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyState {
    /// A real object: its records are durable.
    Written,
    /// Claimed (now or earlier): nothing of it is durable.
    Claimed,
}

/// Claims `key` unless a real object is there. A key the store refuses as invalid
/// (an intent left by a configuration whose prefix could make such keys) can hold
/// nothing and never will: it counts as claimed, so its records are archived again
/// under the current configuration instead of the shard waiting forever.
pub async fn claim_or_check(sink: &dyn ObjectSink, key: &str, claim: &Bytes) -> Result<KeyState, SinkError> {
    match sink.put_if_absent(key, claim.clone(), &PutOptions::default()).await {
        Ok(PutOutcome::Created) => Ok(KeyState::Claimed),
        Ok(PutOutcome::AlreadyExists) => {
            is_claim(sink, key, claim).await.map(|c| if c { KeyState::Claimed } else { KeyState::Written })
        }
        Err(SinkError::InvalidKey { key, reason }) => {
            tracing::warn!(%key, reason, "an open intent names a key no object can have; its records are archived again");
            Ok(KeyState::Claimed)
        }
        Err(e) => Err(e),
    }
}

/// The empty objects that claim keys: a data key's is an empty object of the data
/// format (a Parquet file of no rows), an error key's one of the error output's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claims {
    /// For data keys.
    pub data: Bytes,
    /// For error output keys.
    pub error: Bytes,
}

impl Claims {
    /// One claim for every key.
    #[cfg(test)]
    pub fn same(claim: Bytes) -> Self {
        Self { data: claim.clone(), error: claim }
    }

    /// The claim of a key of a route.
    pub fn of_route(&self, route: &crate::pipeline::route::RouteKey) -> &Bytes {
        if route.is_data() { &self.data } else { &self.error }
    }

    /// The claim of a key whose records have `scope` ([`crate::pipeline::route::Route::scope`]).
    pub fn of_scope(&self, scope: &str) -> &Bytes {
        if scope.starts_with("error:") { &self.error } else { &self.data }
    }
}

/// Largest object read to tell whether it is a claim. An empty object of any format is
/// far smaller (an empty Parquet file of a wide table is a few KiB); only objects this
/// small are read, so a takeover reads no large object.
const MAX_CLAIM: u64 = 64 * 1024;

/// Whether the object at `key` is a claim: `claim`, or another valid object of no
/// records. The second matters when the claim was made under another configuration or
/// version: a Parquet claim holds the table's schema and the writer's name, and a
/// format change (GZIP to ZIP, to Parquet) leaves claims of the old format behind. Taken
/// as written, such a claim would make a new owner skip records no object holds. An
/// object the archiver writes always holds at least one record, so an empty one can only
/// be a claim.
pub async fn is_claim(sink: &dyn ObjectSink, key: &str, claim: &Bytes) -> Result<bool, SinkError> {
    match sink.stat(key).await? {
        Some(meta) if meta.size == claim.len() as u64 || meta.size <= MAX_CLAIM => {
            Ok(sink.get(key).await?.is_some_and(|b| b == *claim || holds_no_record(&b)))
        }
        _ => Ok(false),
    }
}

/// Whether `body` is a valid object of no records, in any format the archiver writes.
fn holds_no_record(body: &Bytes) -> bool {
    use weir_core::object_format::{ObjectFormat, decode};
    if body.starts_with(b"PAR1") {
        return crate::parquet::ParquetFormat::rows(body).is_ok_and(|rows| rows == 0);
    }
    decode(ObjectFormat::sniff(body), body, 1).is_ok_and(|plain| plain.is_empty())
}

/// Keys claimed or checked at once when a shard opens: a new owner taking over a shard
/// with a thousand open intents and 100 ms per store call waits about 2 s, not minutes.
pub const RESOLVE_CONCURRENCY: usize = 128;

/// A set of written keys (foldhash: two lookups per object put).
pub type WrittenKeys = HashSet<Arc<str>, crate::hashing::FastHash>;

#[cfg(test)]
mod tests {
    use super::*;
    use weir_testkit::MemoryObjectSink;

    /// A Parquet claim made under another table (a changed Glue schema, another weir
    /// version), or a claim of another format, is still a claim; an object with a record
    /// never is.
    #[tokio::test]
    async fn claims_of_another_table_or_format_are_claims() {
        use crate::parquet::{Column, ColumnType, Deserializer, ParquetFormat, ParquetOptions};
        use weir_firehose::Compression;
        let table = |cols: &[(&str, &str)]| {
            let columns = cols.iter().map(|(n, t)| Column { name: (*n).into(), ty: ColumnType::parse(t).unwrap() });
            ParquetFormat::new(columns.collect(), Deserializer::default(), ParquetOptions::default())
        };
        let now = table(&[("tenant_id", "string"), ("n", "bigint")]);
        let before = table(&[("tenant_id", "string")]);
        let claim = Bytes::from(now.empty().unwrap());
        let sink = MemoryObjectSink::new();
        let put = |k: &'static str, b: Vec<u8>| {
            let sink = &sink;
            async move { sink.put_if_absent(k, Bytes::from(b), &PutOptions::default()).await.unwrap() }
        };
        put("old-claim.parquet", before.empty().unwrap()).await;
        put("written.parquet", now.encode(b"{\"tenant_id\":\"a\",\"n\":1}").unwrap()).await;
        put("garbage.parquet", b"PAR1 not a footer".to_vec()).await;
        assert!(is_claim(&sink, "old-claim.parquet", &claim).await.unwrap());
        assert!(!is_claim(&sink, "written.parquet", &claim).await.unwrap());
        assert!(!is_claim(&sink, "garbage.parquet", &claim).await.unwrap());
        assert!(!is_claim(&sink, "missing.parquet", &claim).await.unwrap());
        // Claims of the other formats (a format change between owners).
        for format in [Compression::Gzip, Compression::Zip, Compression::Snappy, Compression::HadoopSnappy] {
            let key = format!("old-format-claim-{format:?}");
            sink.put_if_absent(&key, crate::delivery::body::claim_body(format, None), &PutOptions::default())
                .await
                .unwrap();
            assert!(is_claim(&sink, &key, &claim).await.unwrap(), "{format:?}");
        }
        let one = weir_core::object_format::encode(weir_core::object_format::ObjectFormat::Gzip, b"{}\n").unwrap();
        sink.put_if_absent("one-record.gz", Bytes::from(one), &PutOptions::default()).await.unwrap();
        assert!(!is_claim(&sink, "one-record.gz", &claim).await.unwrap());
        // A claim by this configuration, as before.
        assert_eq!(claim_or_check(&sink, "new.parquet", &claim).await.unwrap(), KeyState::Claimed);
        assert_eq!(claim_or_check(&sink, "old-claim.parquet", &claim).await.unwrap(), KeyState::Claimed);
        assert_eq!(claim_or_check(&sink, "written.parquet", &claim).await.unwrap(), KeyState::Written);
    }
}
