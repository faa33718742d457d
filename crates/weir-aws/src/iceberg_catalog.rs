//! Iceberg tables registered in the AWS Glue Data Catalog (Firehose's `CatalogARN`
//! `arn:aws:glue:<region>:<account>:catalog`), their files on S3 (OpenDAL's S3 service
//! through the `iceberg-storage-opendal` crate, signed with the AWS SDK's credentials).
//! Only the `iceberg` crate's `Catalog` trait leaves this module.
//!
//! Written here rather than taken from `iceberg-catalog-glue` 0.10, for two measured
//! reasons: that crate refuses to commit to any table with a `timestamptz` column
//! (its Glue column mapping has no arm for it; apache/iceberg-rust #2956), which is
//! the type of most event tables; and it builds its own SDK client, so weir's
//! endpoints, timeouts and request counters would not apply. This catalog loads and
//! commits to existing tables only, the way Iceberg's Java `GlueCatalog` does: the
//! table's `metadata_location` parameter names its metadata file; a commit checks the
//! commit's requirements against the current metadata, writes the next metadata file
//! and swaps the parameter with Glue's `UpdateTable`, conditional on the `VersionId`
//! it read (Glue answers `ConcurrentModificationException` when another writer
//! committed in between: a commit conflict). Namespaces and tables are created with
//! Glue, Athena or pyiceberg.

use std::collections::HashMap;
use std::str::FromStr;
use std::sync::Arc;

use aws_credential_types::provider::{ProvideCredentials, SharedCredentialsProvider};
use aws_sdk_glue::error::{DisplayErrorContext, ProvideErrorMetadata};
use aws_sdk_glue::types::{Column, StorageDescriptor, TableInput};
use iceberg::io::{FileIO, FileIOBuilder, S3_ENDPOINT, S3_PATH_STYLE_ACCESS, S3_REGION};
use iceberg::spec::{PrimitiveType, TableMetadata, Type};
use iceberg::table::Table;
use iceberg::{
    Error, ErrorKind, MetadataLocation, Namespace, NamespaceIdent, Result, Runtime, TableCommit, TableCreation,
    TableIdent,
};
use iceberg_storage_opendal::{AwsCredential, CustomAwsCredentialLoader, OpenDalStorageFactory, ProvideCredential};

/// The Glue parameter naming a table's current metadata file.
const METADATA_LOCATION: &str = "metadata_location";
/// The Glue parameter naming the metadata file before the last commit.
const PREVIOUS_METADATA_LOCATION: &str = "previous_metadata_location";

/// How the tables' files on S3 are reached.
#[derive(Debug, Clone, Default)]
pub struct S3FileSettings {
    /// Region (default: the standard chain's).
    pub region: Option<String>,
    /// Endpoint (an emulator; path-style addressing then).
    pub endpoint_url: Option<String>,
    /// The credentials of weir's AWS SDK configuration (its profile, roles, static
    /// keys); `None`: OpenDAL's own chain (environment, profile, web identity,
    /// container and instance roles).
    pub credentials: Option<SharedCredentialsProvider>,
}

/// The AWS SDK's credentials as OpenDAL's S3 signer asks for them, refreshed when
/// they expire.
#[derive(Debug)]
pub(crate) struct SdkCredentials(pub(crate) SharedCredentialsProvider);

impl ProvideCredential for SdkCredentials {
    type Credential = AwsCredential;

    async fn provide_credential(&self, _: &reqsign_core::Context) -> reqsign_core::Result<Option<AwsCredential>> {
        let c =
            self.0.provide_credentials().await.map_err(|e| {
                reqsign_core::Error::unexpected(format!("AWS credentials: {}", DisplayErrorContext(&e)))
            })?;
        let expires_in = match c.expiry().and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok()) {
            Some(d) => Some(reqsign_core::time::Timestamp::from_millisecond(d.as_millis() as i64)?),
            None => None,
        };
        Ok(Some(AwsCredential {
            access_key_id: c.access_key_id().to_owned(),
            secret_access_key: c.secret_access_key().to_owned(),
            session_token: c.session_token().map(str::to_owned),
            expires_in,
        }))
    }
}

/// Table files on S3, as `s3` says.
pub(crate) fn s3_file_io(s3: &S3FileSettings) -> FileIO {
    let mut props = HashMap::new();
    if let Some(region) = &s3.region {
        props.insert(S3_REGION.to_owned(), region.clone());
    }
    if let Some(url) = &s3.endpoint_url {
        props.insert(S3_ENDPOINT.to_owned(), url.clone());
        props.insert(S3_PATH_STYLE_ACCESS.to_owned(), "true".to_owned());
    }
    let customized_credential_load = s3.credentials.clone().map(|c| CustomAwsCredentialLoader::new(SdkCredentials(c)));
    let factory = Arc::new(OpenDalStorageFactory::S3 { customized_credential_load });
    FileIOBuilder::new(factory).with_props(props).build()
}

/// The table whose metadata file is `location`, read through `file_io`.
pub(crate) async fn table_at(file_io: &FileIO, ident: &TableIdent, location: String) -> Result<Table> {
    let metadata = TableMetadata::read_from(file_io, &location).await?;
    Table::builder()
        .file_io(file_io.clone())
        .metadata_location(location)
        .metadata(metadata)
        .identifier(ident.clone())
        .runtime(Runtime::try_current()?)
        .build()
}

/// Applies `commit` to `current` (its requirements checked against the current
/// metadata: a moved table is a conflict) and writes the next metadata file: the
/// staged table, whose location the catalog then swaps in.
pub(crate) async fn stage(commit: TableCommit, current: Table) -> Result<Table> {
    let staged = commit.apply(current)?;
    let next = MetadataLocation::from_str(staged.metadata_location_result()?)?;
    staged.metadata().write_to(staged.file_io(), &next).await?;
    Ok(staged)
}

/// Iceberg tables of one Glue Data Catalog.
#[derive(Debug)]
pub struct GlueCatalog {
    glue: aws_sdk_glue::Client,
    catalog_id: Option<String>,
    file_io: FileIO,
}

impl GlueCatalog {
    /// The catalog of account `catalog_id` (default: the caller's) through `glue`,
    /// table files through S3 as `s3` says.
    pub fn new(glue: aws_sdk_glue::Client, catalog_id: Option<String>, s3: &S3FileSettings) -> Self {
        Self { glue, catalog_id, file_io: s3_file_io(s3) }
    }

    /// The table and the Glue `VersionId` it was read at.
    async fn load(&self, ident: &TableIdent) -> Result<(Table, Option<String>, aws_sdk_glue::types::Table)> {
        let database = database(ident.namespace())?;
        let out = self
            .glue
            .get_table()
            .set_catalog_id(self.catalog_id.clone())
            .database_name(&database)
            .name(ident.name())
            .send()
            .await
            .map_err(|e| {
                let kind = match e.as_service_error().and_then(ProvideErrorMetadata::code) {
                    Some("EntityNotFoundException") => ErrorKind::TableNotFound,
                    _ => ErrorKind::Unexpected,
                };
                Error::new(kind, format!("Glue GetTable {ident}: {}", DisplayErrorContext(&e)))
            })?;
        let glue_table =
            out.table.ok_or_else(|| Error::new(ErrorKind::TableNotFound, format!("Glue has no table {ident}")))?;
        let location = glue_table.parameters().and_then(|p| p.get(METADATA_LOCATION)).cloned().ok_or_else(|| {
            Error::new(
                ErrorKind::DataInvalid,
                format!("Glue table {ident} has no {METADATA_LOCATION}: not an Iceberg table"),
            )
        })?;
        let table = table_at(&self.file_io, ident, location).await?;
        Ok((table, glue_table.version_id.clone(), glue_table))
    }
}

/// A Glue database is a one-level namespace.
fn database(ns: &NamespaceIdent) -> Result<String> {
    match ns.as_ref().as_slice() {
        [one] => Ok(one.clone()),
        _ => Err(Error::new(ErrorKind::DataInvalid, format!("Glue databases are one level: {ns:?}"))),
    }
}

/// What weir's catalogs leave to the service's own tools.
pub(crate) fn unsupported<T>(what: &str) -> Result<T> {
    Err(Error::new(
        ErrorKind::FeatureUnsupported,
        format!("weir's catalogs load and commit to existing tables; {what} is done with the service's own tools"),
    ))
}

/// An Iceberg type as a Glue (Hive) column type, as Iceberg's Java `GlueCatalog`
/// writes it: time zones are dropped (Glue has no zoned timestamp).
pub fn glue_type(t: &Type) -> String {
    match t {
        Type::Primitive(p) => match p {
            PrimitiveType::Boolean => "boolean".into(),
            PrimitiveType::Int => "int".into(),
            PrimitiveType::Long => "bigint".into(),
            PrimitiveType::Float => "float".into(),
            PrimitiveType::Double => "double".into(),
            PrimitiveType::Decimal { precision, scale } => format!("decimal({precision},{scale})"),
            PrimitiveType::Date => "date".into(),
            PrimitiveType::Timestamp
            | PrimitiveType::Timestamptz
            | PrimitiveType::TimestampNs
            | PrimitiveType::TimestamptzNs => "timestamp".into(),
            PrimitiveType::Time | PrimitiveType::String | PrimitiveType::Uuid => "string".into(),
            PrimitiveType::Binary | PrimitiveType::Fixed(_) => "binary".into(),
        },
        Type::Struct(s) => format!(
            "struct<{}>",
            s.fields().iter().map(|f| format!("{}:{}", f.name, glue_type(&f.field_type))).collect::<Vec<_>>().join(",")
        ),
        Type::List(l) => format!("array<{}>", glue_type(&l.element_field.field_type)),
        Type::Map(m) => format!("map<{},{}>", glue_type(&m.key_field.field_type), glue_type(&m.value_field.field_type)),
    }
}

/// The Glue table input after a commit: the table as it was, its columns those of the
/// new current schema, its parameters naming the new metadata file.
fn table_input(
    name: &str,
    was: &aws_sdk_glue::types::Table,
    metadata: &TableMetadata,
    previous: &str,
    next: &str,
) -> Result<TableInput> {
    let columns = metadata
        .current_schema()
        .as_struct()
        .fields()
        .iter()
        .map(|f| {
            Column::builder()
                .name(&f.name)
                .r#type(glue_type(&f.field_type))
                .set_comment(f.doc.clone())
                .parameters("iceberg.field.id", f.id.to_string())
                .parameters("iceberg.field.optional", (!f.required).to_string())
                .parameters("iceberg.field.current", "true")
                .build()
                .map_err(|e| Error::new(ErrorKind::Unexpected, format!("Glue column {}: {e}", f.name)))
        })
        .collect::<Result<Vec<_>>>()?;
    let mut parameters = was.parameters().cloned().unwrap_or_default();
    parameters.insert("table_type".into(), "ICEBERG".into());
    parameters.insert(METADATA_LOCATION.into(), next.into());
    parameters.insert(PREVIOUS_METADATA_LOCATION.into(), previous.into());
    let sd = StorageDescriptor::builder().location(metadata.location()).set_columns(Some(columns)).build();
    TableInput::builder()
        .name(name)
        .set_description(was.description().map(str::to_owned))
        .set_owner(was.owner().map(str::to_owned))
        .table_type(was.table_type().unwrap_or("EXTERNAL_TABLE"))
        .set_parameters(Some(parameters))
        .storage_descriptor(sd)
        .build()
        .map_err(|e| Error::new(ErrorKind::Unexpected, format!("Glue table input {name}: {e}")))
}

/// A `Catalog` of existing tables for `$ty`, which has
/// `async fn load(&self, &TableIdent) -> Result<(Table, …)>` (the table first): loading
/// and existence come from it, `update_table` is given, and the methods weir's catalogs
/// do not serve refuse (namespaces and tables are made, renamed and dropped with the
/// service's own tools).
macro_rules! catalog_of_existing_tables {
    ($ty:ty { $($served:tt)* }) => {
    #[async_trait::async_trait]
    impl iceberg::Catalog for $ty {
        $($served)*

        async fn load_table(&self, table: &TableIdent) -> Result<Table> {
            Ok(self.load(table).await?.0)
        }

        async fn table_exists(&self, table: &TableIdent) -> Result<bool> {
            match self.load(table).await {
                Ok(_) => Ok(true),
                Err(e) if e.kind() == ErrorKind::TableNotFound => Ok(false),
                Err(e) => Err(e),
            }
        }

        async fn list_namespaces(&self, _parent: Option<&NamespaceIdent>) -> Result<Vec<NamespaceIdent>> {
            unsupported("listing namespaces")
        }

        async fn create_namespace(&self, _n: &NamespaceIdent, _p: HashMap<String, String>) -> Result<Namespace> {
            unsupported("creating a namespace")
        }

        async fn get_namespace(&self, _n: &NamespaceIdent) -> Result<Namespace> {
            unsupported("reading a namespace")
        }

        async fn namespace_exists(&self, _n: &NamespaceIdent) -> Result<bool> {
            unsupported("reading a namespace")
        }

        async fn update_namespace(&self, _n: &NamespaceIdent, _p: HashMap<String, String>) -> Result<()> {
            unsupported("changing a namespace")
        }

        async fn drop_namespace(&self, _n: &NamespaceIdent) -> Result<()> {
            unsupported("dropping a namespace")
        }

        async fn list_tables(&self, _n: &NamespaceIdent) -> Result<Vec<TableIdent>> {
            unsupported("listing tables")
        }

        async fn create_table(&self, _n: &NamespaceIdent, _c: TableCreation) -> Result<Table> {
            unsupported("creating a table")
        }

        async fn drop_table(&self, _t: &TableIdent) -> Result<()> {
            unsupported("dropping a table")
        }

        async fn purge_table(&self, _t: &TableIdent) -> Result<()> {
            unsupported("purging a table")
        }

        async fn rename_table(&self, _s: &TableIdent, _d: &TableIdent) -> Result<()> {
            unsupported("renaming a table")
        }

        async fn register_table(&self, _t: &TableIdent, _m: String) -> Result<Table> {
            unsupported("registering a table")
        }
    }
    };
}
pub(crate) use catalog_of_existing_tables;

catalog_of_existing_tables!(GlueCatalog {
    async fn update_table(&self, commit: TableCommit) -> Result<Table> {
        let ident = commit.identifier().clone();
        let database = database(ident.namespace())?;
        let (current, version, glue_table) = self.load(&ident).await?;
        let previous = current.metadata_location_result()?.to_owned();
        let staged = stage(commit, current).await?;
        let next = staged.metadata_location_result()?.to_owned();
        let input = table_input(ident.name(), &glue_table, staged.metadata(), &previous, &next)?;
        self.glue
            .update_table()
            .set_catalog_id(self.catalog_id.clone())
            .database_name(database)
            .table_input(input)
            .set_version_id(version)
            .skip_archive(true)
            .send()
            .await
            .map_err(|e| {
                let code = e.as_service_error().and_then(ProvideErrorMetadata::code).map(str::to_owned);
                let message = format!("Glue UpdateTable {ident}: {}", DisplayErrorContext(&e));
                match code.as_deref() {
                    Some("ConcurrentModificationException") => {
                        Error::new(ErrorKind::CatalogCommitConflicts, message).with_retryable(true)
                    }
                    Some("EntityNotFoundException") => Error::new(ErrorKind::TableNotFound, message),
                    _ => Error::new(ErrorKind::Unexpected, message),
                }
            })?;
        Ok(staged)
    }
});

#[cfg(test)]
mod tests {
    use iceberg::spec::{ListType, MapType, NestedField, StructType};

    use super::*;

    #[test]
    fn glue_types_are_javas_with_time_zones_dropped() {
        let p = |t| Type::Primitive(t);
        assert_eq!(glue_type(&p(PrimitiveType::Timestamptz)), "timestamp");
        assert_eq!(glue_type(&p(PrimitiveType::Decimal { precision: 12, scale: 3 })), "decimal(12,3)");
        let nested = Type::Struct(StructType::new(vec![
            NestedField::optional(1, "query", p(PrimitiveType::String)).into(),
            NestedField::optional(
                2,
                "filters",
                Type::List(ListType::new(NestedField::list_element(3, p(PrimitiveType::Long), false).into())),
            )
            .into(),
            NestedField::optional(
                4,
                "labels",
                Type::Map(MapType::new(
                    NestedField::map_key_element(5, p(PrimitiveType::String)).into(),
                    NestedField::map_value_element(6, p(PrimitiveType::Boolean), false).into(),
                )),
            )
            .into(),
        ]));
        assert_eq!(glue_type(&nested), "struct<query:string,filters:array<bigint>,labels:map<string,boolean>>");
    }
}
