//! The embedded Iceberg catalog: a SQL catalog in a SQLite file, its warehouse a local
//! directory. The catalog's tables (`iceberg_tables`, `iceberg_namespace_properties`)
//! are the ones pyiceberg's `SqlCatalog` and the Java `JdbcCatalog` keep, so either
//! reads what weir writes when it is opened with the same catalog name.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use iceberg::io::LocalFsStorageFactory;
use iceberg::{Catalog, CatalogBuilder};
use iceberg_catalog_sql::{SqlBindStyle, SqlCatalogBuilder};

/// Why the embedded catalog did not open.
#[derive(Debug, thiserror::Error)]
#[error("iceberg catalog {database}: {source}")]
pub struct CatalogOpenError {
    /// The SQLite file.
    pub database: String,
    /// Why.
    #[source]
    pub source: iceberg::Error,
}

/// The SQL catalog `name` in the SQLite file `database` (created if missing), whose
/// tables live under `warehouse` (a local directory).
pub async fn sql_catalog(name: &str, database: &Path, warehouse: &Path) -> Result<Arc<dyn Catalog>, CatalogOpenError> {
    let uri = format!("sqlite:{}?mode=rwc", database.display());
    let catalog = SqlCatalogBuilder::default()
        .uri(uri)
        .warehouse_location(format!("file://{}", warehouse.display()))
        .sql_bind_style(SqlBindStyle::QMark)
        .with_storage_factory(Arc::new(LocalFsStorageFactory))
        .load(name, HashMap::new())
        .await
        .map_err(|source| CatalogOpenError { database: database.display().to_string(), source })?;
    Ok(Arc::new(catalog))
}
