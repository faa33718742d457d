//! The columns of a Glue Data Catalog table: what Firehose's format conversion reads
//! from `SchemaConfiguration`, read once when an archiver starts.

use aws_sdk_glue::error::{DisplayErrorContext, ProvideErrorMetadata};
use aws_sdk_glue::types::StorageDescriptor;

/// Where the table is (`SchemaConfiguration`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GlueTable {
    /// `CatalogId` (default: the caller's account).
    pub catalog_id: Option<String>,
    /// `DatabaseName`.
    pub database: String,
    /// `TableName`.
    pub table: String,
    /// `VersionId`: `None` or `LATEST` for the current version.
    pub version_id: Option<String>,
}

/// Why the columns could not be read.
#[derive(Debug, thiserror::Error)]
pub enum GlueError {
    /// Glue answered with an error (no such table, access denied, ...).
    #[error("Glue table {database}.{table}: {code}: {message}")]
    Service {
        /// Database.
        database: String,
        /// Table.
        table: String,
        /// Error code (`EntityNotFoundException`, `AccessDeniedException`).
        code: String,
        /// Its message, or the SDK's description.
        message: String,
    },
    /// The table has no storage descriptor or no columns.
    #[error("Glue table {0}.{1} has no columns")]
    NoColumns(String, String),
}

/// The (name, Hive type) of each column of `t`, in order; partition keys are not
/// included (they are in the object key, not in the file).
pub async fn table_columns(client: &aws_sdk_glue::Client, t: &GlueTable) -> Result<Vec<(String, String)>, GlueError> {
    let service = |e: &dyn ProvideErrorMetadata, text: String| GlueError::Service {
        database: t.database.clone(),
        table: t.table.clone(),
        code: e.code().unwrap_or("error").to_owned(),
        message: e.message().map(str::to_owned).unwrap_or(text),
    };
    let descriptor: Option<StorageDescriptor> = match t.version_id.as_deref() {
        None | Some("LATEST") => {
            let mut get = client.get_table().database_name(&t.database).name(&t.table);
            if let Some(c) = &t.catalog_id {
                get = get.catalog_id(c);
            }
            let out = get.send().await.map_err(|e| service(&e, DisplayErrorContext(&e).to_string()))?;
            out.table.and_then(|t| t.storage_descriptor)
        }
        Some(version) => {
            let mut get =
                client.get_table_version().database_name(&t.database).table_name(&t.table).version_id(version);
            if let Some(c) = &t.catalog_id {
                get = get.catalog_id(c);
            }
            let out = get.send().await.map_err(|e| service(&e, DisplayErrorContext(&e).to_string()))?;
            out.table_version.and_then(|v| v.table).and_then(|t| t.storage_descriptor)
        }
    };
    let columns: Vec<(String, String)> = descriptor
        .map(|d| d.columns.unwrap_or_default())
        .unwrap_or_default()
        .into_iter()
        .map(|c| (c.name, c.r#type.unwrap_or_default()))
        .collect();
    if columns.is_empty() {
        return Err(GlueError::NoColumns(t.database.clone(), t.table.clone()));
    }
    Ok(columns)
}
