//! A catalog seen through one loaded table: what makes a commit conditional on the
//! positions weir checked.
//!
//! `iceberg`'s `Transaction::commit` reloads the table before it commits and, when
//! another writer committed in between, applies the append again on top of the new
//! snapshot. For an append that is right; for weir it is how a zombie duplicates
//! records: the other writer may have committed the same shard's records, and the
//! positions weir checked are no longer the table's. Through [`Pinned`] the reload
//! returns the table weir checked, so the append's requirement names the snapshot weir
//! checked, and a catalog that moved on refuses the commit; the conflict comes back
//! as not retryable, and weir checks the positions again on the new table.

use std::collections::HashMap;

use async_trait::async_trait;
use iceberg::table::Table;
use iceberg::{Catalog, Error, ErrorKind, Namespace, NamespaceIdent, Result, TableCommit, TableCreation, TableIdent};

/// `inner`, except that loading `table`'s identifier returns `table` as it was loaded,
/// and a commit conflict is final.
#[derive(Debug)]
pub(crate) struct Pinned<'a> {
    pub(crate) inner: &'a dyn Catalog,
    pub(crate) table: Table,
}

/// Whether an error is a commit that lost to another writer.
pub(crate) fn is_conflict(e: &Error) -> bool {
    e.kind() == ErrorKind::CatalogCommitConflicts
}

#[async_trait]
impl Catalog for Pinned<'_> {
    async fn list_namespaces(&self, parent: Option<&NamespaceIdent>) -> Result<Vec<NamespaceIdent>> {
        self.inner.list_namespaces(parent).await
    }

    async fn create_namespace(
        &self,
        namespace: &NamespaceIdent,
        properties: HashMap<String, String>,
    ) -> Result<Namespace> {
        self.inner.create_namespace(namespace, properties).await
    }

    async fn get_namespace(&self, namespace: &NamespaceIdent) -> Result<Namespace> {
        self.inner.get_namespace(namespace).await
    }

    async fn namespace_exists(&self, namespace: &NamespaceIdent) -> Result<bool> {
        self.inner.namespace_exists(namespace).await
    }

    async fn update_namespace(&self, namespace: &NamespaceIdent, properties: HashMap<String, String>) -> Result<()> {
        self.inner.update_namespace(namespace, properties).await
    }

    async fn drop_namespace(&self, namespace: &NamespaceIdent) -> Result<()> {
        self.inner.drop_namespace(namespace).await
    }

    async fn list_tables(&self, namespace: &NamespaceIdent) -> Result<Vec<TableIdent>> {
        self.inner.list_tables(namespace).await
    }

    async fn create_table(&self, namespace: &NamespaceIdent, creation: TableCreation) -> Result<Table> {
        self.inner.create_table(namespace, creation).await
    }

    async fn load_table(&self, table: &TableIdent) -> Result<Table> {
        if table == self.table.identifier() {
            return Ok(self.table.clone());
        }
        self.inner.load_table(table).await
    }

    async fn drop_table(&self, table: &TableIdent) -> Result<()> {
        self.inner.drop_table(table).await
    }

    async fn purge_table(&self, table: &TableIdent) -> Result<()> {
        self.inner.purge_table(table).await
    }

    async fn table_exists(&self, table: &TableIdent) -> Result<bool> {
        self.inner.table_exists(table).await
    }

    async fn rename_table(&self, src: &TableIdent, dest: &TableIdent) -> Result<()> {
        self.inner.rename_table(src, dest).await
    }

    async fn register_table(&self, table: &TableIdent, metadata_location: String) -> Result<Table> {
        self.inner.register_table(table, metadata_location).await
    }

    async fn update_table(&self, commit: TableCommit) -> Result<Table> {
        self.inner.update_table(commit).await.map_err(|e| {
            if is_conflict(&e) || e.retryable() {
                Error::new(ErrorKind::CatalogCommitConflicts, "the table moved on since weir checked its positions")
                    .with_source(e)
            } else {
                e
            }
        })
    }
}
