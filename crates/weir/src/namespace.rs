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
}
