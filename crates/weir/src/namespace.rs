//! A lease namespace belongs to one stream and one lease format: checked before a
//! worker starts (see [`weir_core::ports::NamespaceMeta`]).

use anyhow::{Result, bail};
use weir_core::ports::{LEASE_FORMAT, LeaseTable, NamespaceMeta};

/// Claims the namespace of `table` for `stream` (its first worker writes the record),
/// or explains why this worker must not use it: it belongs to another stream, or a
/// newer weir wrote leases this one would damage. `namespace` names it in errors.
pub(crate) async fn claim(table: &dyn LeaseTable, stream: &str, namespace: &str) -> Result<()> {
    let ours = NamespaceMeta { stream: stream.to_owned(), format: LEASE_FORMAT };
    // A concurrent first start may write the record between the read and the write:
    // read again and judge what it wrote.
    for _ in 0..3 {
        let stored = table.namespace_meta().await?;
        match &stored {
            None => {}
            Some(m) if m.stream != stream => bail!(
                "lease namespace {namespace:?} belongs to stream {:?}, not {stream:?}: two applications would take each other's leases; give this one its own `leases.namespace`",
                m.stream
            ),
            Some(m) if m.format > LEASE_FORMAT => bail!(
                "lease namespace {namespace:?} was written by a newer weir (lease format {}; this weir writes {LEASE_FORMAT}) whose fields this one would drop: run the newer weir",
                m.format
            ),
            Some(m) if m.format == LEASE_FORMAT => return Ok(()),
            Some(_) => {}
        }
        if table.put_namespace_meta(&ours, stored.as_ref()).await? {
            return Ok(());
        }
    }
    bail!("lease namespace {namespace:?}: its record keeps changing; another process is writing it")
}

/// Claims the namespace for a fleet reading several `streams` (names) and returns the
/// stream whose leases keep bare shard ids: the one the namespace was first used with
/// (which a fleet that grew from one stream to several keeps reading on its existing
/// leases), or `streams[0]` for a new namespace. Refused when the namespace belongs to
/// a stream that is not configured and holds no lease of a configured one (another
/// application's), or when a newer weir wrote it.
pub(crate) async fn claim_streams(table: &dyn LeaseTable, streams: &[String], namespace: &str) -> Result<String> {
    let Some(first) = streams.first() else { bail!("no stream to claim lease namespace {namespace:?} for") };
    for _ in 0..3 {
        let stored = table.namespace_meta().await?;
        let ours = match &stored {
            None => NamespaceMeta { stream: first.clone(), format: LEASE_FORMAT },
            Some(m) if m.format > LEASE_FORMAT => bail!(
                "lease namespace {namespace:?} was written by a newer weir (lease format {}; this weir writes {LEASE_FORMAT}) whose fields this one would drop: run the newer weir",
                m.format
            ),
            Some(m) => {
                if !streams.contains(&m.stream) {
                    let leases = table.list().await?;
                    let ours = leases
                        .iter()
                        .any(|l| l.key.as_str().split_once(':').is_some_and(|(s, _)| streams.iter().any(|n| n == s)));
                    if !ours {
                        bail!(
                            "lease namespace {namespace:?} belongs to stream {:?}, which is not among [[streams]] ({}), and holds no lease of theirs: two applications would take each other's leases; give this one its own `leases.namespace`",
                            m.stream,
                            streams.join(", ")
                        );
                    }
                }
                if m.format == LEASE_FORMAT {
                    return Ok(m.stream.clone());
                }
                NamespaceMeta { stream: m.stream.clone(), format: LEASE_FORMAT }
            }
        };
        if table.put_namespace_meta(&ours, stored.as_ref()).await? {
            return Ok(ours.stream);
        }
    }
    bail!("lease namespace {namespace:?}: its record keeps changing; another process is writing it")
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_testkit::MemoryLeaseTable;

    #[tokio::test]
    async fn the_first_worker_claims_and_others_of_another_stream_or_a_newer_weir_are_refused() {
        let t = MemoryLeaseTable::new();
        claim(&t, "mcp-events", "app").await.unwrap();
        claim(&t, "mcp-events", "app").await.unwrap();
        let e = claim(&t, "orders", "app").await.unwrap_err().to_string();
        assert!(e.contains("belongs to stream \"mcp-events\", not \"orders\""), "{e}");
        let stored = t.namespace_meta().await.unwrap();
        let newer = NamespaceMeta { stream: "mcp-events".into(), format: LEASE_FORMAT + 1 };
        assert!(t.put_namespace_meta(&newer, stored.as_ref()).await.unwrap());
        let e = claim(&t, "mcp-events", "app").await.unwrap_err().to_string();
        assert!(e.contains("written by a newer weir"), "{e}");
        assert_eq!(t.namespace_meta().await.unwrap(), Some(newer), "nothing rewritten");
    }

    #[tokio::test]
    async fn an_older_format_is_upgraded() {
        let t = MemoryLeaseTable::new();
        let older = NamespaceMeta { stream: "s".into(), format: 0 };
        t.put_namespace_meta(&older, None).await.unwrap();
        claim(&t, "s", "app").await.unwrap();
        assert_eq!(t.namespace_meta().await.unwrap().unwrap().format, LEASE_FORMAT);
    }

    /// A new namespace's first stream keeps bare keys; a namespace grown from one
    /// stream keeps its first stream's, wherever it is listed; a namespace of a stream
    /// not listed is refused unless it holds leases of a listed one.
    #[tokio::test]
    async fn several_streams_keep_the_first_streams_bare_keys() {
        let names = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let t = MemoryLeaseTable::new();
        assert_eq!(claim_streams(&t, &names(&["a", "b"]), "app").await.unwrap(), "a");
        let t = MemoryLeaseTable::new();
        claim(&t, "b", "app").await.unwrap();
        assert_eq!(claim_streams(&t, &names(&["a", "b"]), "app").await.unwrap(), "b");
        let e = claim_streams(&t, &names(&["c", "d"]), "app").await.unwrap_err().to_string();
        assert!(e.contains("belongs to stream \"b\", which is not among [[streams]] (c, d)"), "{e}");
        t.create_if_absent(weir_testkit::fixtures::new_lease("c:shardId-000000000000", &[])).await.unwrap();
        assert_eq!(claim_streams(&t, &names(&["c", "d"]), "app").await.unwrap(), "b", "b was removed from the list");
    }
}
