//! Iceberg tables of an Amazon S3 table bucket (Firehose's `CatalogARN`
//! `arn:aws:glue:<region>:<account>:catalog/s3tablescatalog/<bucket>`), through the S3
//! Tables API: `GetTableMetadataLocation` names a table's metadata file and its version
//! token; a commit writes the next metadata file under the table's warehouse location
//! and swaps it in with `UpdateTableMetadataLocation`, conditional on the token read
//! (S3 Tables answers `ConflictException` when another writer committed in between: a
//! commit conflict). Tables are created with S3 Tables' own tools (or Athena, Spark);
//! only the `iceberg` crate's `Catalog` trait leaves this module.

use std::collections::HashMap;

use aws_sdk_s3tables::error::{DisplayErrorContext, ProvideErrorMetadata};
use iceberg::io::FileIO;
use iceberg::table::Table;
use iceberg::{Error, ErrorKind, Namespace, NamespaceIdent, Result, TableCommit, TableCreation, TableIdent};

use crate::iceberg_catalog::{S3FileSettings, catalog_of_existing_tables, s3_file_io, stage, table_at, unsupported};

/// Iceberg tables of one S3 table bucket.
#[derive(Debug)]
pub struct S3TablesCatalog {
    client: aws_sdk_s3tables::Client,
    bucket_arn: String,
    file_io: FileIO,
}

impl S3TablesCatalog {
    /// The tables of the table bucket `bucket_arn`
    /// (`arn:aws:s3tables:<region>:<account>:bucket/<name>`) through `client`, their
    /// files through S3 as `s3` says.
    pub fn new(client: aws_sdk_s3tables::Client, bucket_arn: impl Into<String>, s3: &S3FileSettings) -> Self {
        Self { client, bucket_arn: bucket_arn.into(), file_io: s3_file_io(s3) }
    }

    /// The table and the version token it was read at.
    async fn load(&self, ident: &TableIdent) -> Result<(Table, String)> {
        let namespace = namespace(ident.namespace())?;
        let out = self
            .client
            .get_table_metadata_location()
            .table_bucket_arn(&self.bucket_arn)
            .namespace(namespace)
            .name(ident.name())
            .send()
            .await
            .map_err(|e| {
                let kind = match e.as_service_error().and_then(ProvideErrorMetadata::code) {
                    Some("NotFoundException") => ErrorKind::TableNotFound,
                    _ => ErrorKind::Unexpected,
                };
                Error::new(kind, format!("S3 Tables GetTableMetadataLocation {ident}: {}", DisplayErrorContext(&e)))
            })?;
        let location = out.metadata_location().map(str::to_owned).ok_or_else(|| {
            Error::new(
                ErrorKind::DataInvalid,
                format!("S3 table {ident} has no metadata yet: create it with its schema"),
            )
        })?;
        Ok((table_at(&self.file_io, ident, location).await?, out.version_token().to_owned()))
    }
}

/// An S3 Tables namespace is one level.
fn namespace(ns: &NamespaceIdent) -> Result<String> {
    match ns.as_ref().as_slice() {
        [one] => Ok(one.clone()),
        _ => Err(Error::new(ErrorKind::DataInvalid, format!("S3 Tables namespaces are one level: {ns:?}"))),
    }
}

catalog_of_existing_tables!(S3TablesCatalog {
    async fn update_table(&self, commit: TableCommit) -> Result<Table> {
        let ident = commit.identifier().clone();
        let (current, token) = self.load(&ident).await?;
        let staged = stage(commit, current).await?;
        self.client
            .update_table_metadata_location()
            .table_bucket_arn(&self.bucket_arn)
            .namespace(namespace(ident.namespace())?)
            .name(ident.name())
            .version_token(token)
            .metadata_location(staged.metadata_location_result()?)
            .send()
            .await
            .map_err(|e| {
                let code = e.as_service_error().and_then(ProvideErrorMetadata::code).map(str::to_owned);
                let message = format!("S3 Tables UpdateTableMetadataLocation {ident}: {}", DisplayErrorContext(&e));
                match code.as_deref() {
                    Some("ConflictException") => Error::new(ErrorKind::CatalogCommitConflicts, message).with_retryable(true),
                    Some("NotFoundException") => Error::new(ErrorKind::TableNotFound, message),
                    _ => Error::new(ErrorKind::Unexpected, message),
                }
            })?;
        Ok(staged)
    }
});
