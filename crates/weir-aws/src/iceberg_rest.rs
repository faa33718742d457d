//! Iceberg tables of an Iceberg REST catalog (Apache Polaris, Lakekeeper, Nessie,
//! Unity, Snowflake Open Catalog, Tabular-style servers), through the
//! `iceberg-catalog-rest` crate. The server checks each commit's requirements: a table
//! that moved since weir read it answers 409, a commit conflict.
//!
//! It lives with the AWS adapters because the tables' files are usually on S3: they
//! are read and written through OpenDAL (`s3://` signed with weir's AWS credentials,
//! `file://` for a local warehouse), whatever scheme the server's table locations use.
//!
//! Two things are added to the crate's client:
//! - **OAuth2 tokens are renewed.** The client exchanges `credential` for a token once
//!   and keeps it forever; a server's tokens expire (an hour is common), after which
//!   every request answers 401 and a long-running worker would never commit again. A
//!   read answered 401 gets a new token and is sent once more; a commit answered 401
//!   gets a new token and is reported as a commit conflict (the crate's commits
//!   cannot be copied to be sent again), which the writer answers by reading the
//!   table and committing again.
//! - Only the `iceberg` crate's `Catalog` trait leaves this module.

use std::collections::HashMap;
use std::sync::Arc;

use iceberg::io::{S3_ENDPOINT, S3_PATH_STYLE_ACCESS, S3_REGION};
use iceberg::table::Table;
use iceberg::{
    Catalog, CatalogBuilder, Error, ErrorKind, Namespace, NamespaceIdent, Result, TableCommit, TableCreation,
    TableIdent,
};
use iceberg_catalog_rest::{RestCatalog, RestCatalogBuilder};
use iceberg_storage_opendal::{CustomAwsCredentialLoader, OpenDalResolvingStorageFactory};

use crate::iceberg_catalog::{S3FileSettings, SdkCredentials};

/// How to reach an Iceberg REST catalog.
#[derive(Debug, Clone, Default)]
pub struct RestSettings {
    /// The catalog's base URI (`https://catalog.example.com/api/catalog`).
    pub uri: String,
    /// The warehouse the server is asked for (a name or a location; server-specific).
    pub warehouse: Option<String>,
    /// OAuth2 client credentials `client_id:client_secret`, exchanged for tokens at
    /// the server's `v1/oauth/tokens` (or `oauth2-server-uri`), renewed on 401.
    pub credential: Option<String>,
    /// A bearer token used as it is (not renewable).
    pub token: Option<String>,
    /// Further catalog properties, as Iceberg names them (`scope`,
    /// `oauth2-server-uri`, `header.<name>`, `s3.*`).
    pub properties: HashMap<String, String>,
}

/// The REST catalog `settings` describes; the tables' files through `s3` (for `s3://`
/// locations) or the local file system (`file://`).
pub async fn rest_catalog(settings: RestSettings, s3: &S3FileSettings) -> Result<Arc<dyn Catalog>> {
    let mut props = settings.properties;
    props.insert("uri".into(), settings.uri);
    if let Some(w) = settings.warehouse {
        props.insert("warehouse".into(), w);
    }
    let renewable = settings.credential.is_some() && settings.token.is_none();
    if let Some(c) = settings.credential {
        props.insert("credential".into(), c);
    }
    if let Some(t) = settings.token {
        props.insert("token".into(), t);
    }
    if let Some(region) = &s3.region {
        props.entry(S3_REGION.to_owned()).or_insert_with(|| region.clone());
    }
    if let Some(url) = &s3.endpoint_url {
        props.entry(S3_ENDPOINT.to_owned()).or_insert_with(|| url.clone());
        props.entry(S3_PATH_STYLE_ACCESS.to_owned()).or_insert_with(|| "true".to_owned());
    }
    let mut storage = OpenDalResolvingStorageFactory::new();
    if let Some(c) = s3.credentials.clone() {
        storage = storage.with_s3_credential_loader(CustomAwsCredentialLoader::new(SdkCredentials(c)));
    }
    let inner = RestCatalogBuilder::default().with_storage_factory(Arc::new(storage)).load("rest", props).await?;
    Ok(Arc::new(Renewing { inner, renewable }))
}

/// The crate's REST catalog, with a request answered 401 sent again on a new token.
#[derive(Debug)]
struct Renewing {
    inner: RestCatalog,
    /// Whether a new token can be had (client credentials, no fixed token).
    renewable: bool,
}

/// Whether the server refused `e`'s request for its token (HTTP 401). The crate keeps
/// the status only in the error's context, which its `Display` shows.
fn unauthorized(e: &Error) -> bool {
    let text = e.to_string();
    text.contains("401 Unauthorized") || text.contains("status: 401")
}

impl Renewing {
    /// `call` on the inner catalog, again on a new token when the server answered 401.
    async fn renewing<T, F: Future<Output = Result<T>>>(&self, call: impl Fn() -> F) -> Result<T> {
        match call().await {
            Err(e) if self.renewable && unauthorized(&e) => {
                self.renew(&e).await?;
                call().await
            }
            other => other,
        }
    }

    async fn renew(&self, e: &Error) -> Result<()> {
        tracing::info!(error = %e, "the REST catalog refused weir's token: asking for a new one");
        self.inner.regenerate_token().await
    }
}

/// weir reads and commits (both renew their token); the rest is the crate's as it is.
#[async_trait::async_trait]
impl Catalog for Renewing {
    async fn list_namespaces(&self, parent: Option<&NamespaceIdent>) -> Result<Vec<NamespaceIdent>> {
        self.inner.list_namespaces(parent).await
    }

    async fn create_namespace(&self, n: &NamespaceIdent, p: HashMap<String, String>) -> Result<Namespace> {
        self.inner.create_namespace(n, p).await
    }

    async fn get_namespace(&self, n: &NamespaceIdent) -> Result<Namespace> {
        self.inner.get_namespace(n).await
    }

    async fn namespace_exists(&self, n: &NamespaceIdent) -> Result<bool> {
        self.inner.namespace_exists(n).await
    }

    async fn update_namespace(&self, n: &NamespaceIdent, p: HashMap<String, String>) -> Result<()> {
        self.inner.update_namespace(n, p).await
    }

    async fn drop_namespace(&self, n: &NamespaceIdent) -> Result<()> {
        self.inner.drop_namespace(n).await
    }

    async fn list_tables(&self, n: &NamespaceIdent) -> Result<Vec<TableIdent>> {
        self.inner.list_tables(n).await
    }

    async fn create_table(&self, n: &NamespaceIdent, c: TableCreation) -> Result<Table> {
        self.inner.create_table(n, c).await
    }

    async fn load_table(&self, t: &TableIdent) -> Result<Table> {
        self.renewing(|| self.inner.load_table(t)).await
    }

    async fn drop_table(&self, t: &TableIdent) -> Result<()> {
        self.inner.drop_table(t).await
    }

    async fn purge_table(&self, t: &TableIdent) -> Result<()> {
        self.inner.purge_table(t).await
    }

    async fn table_exists(&self, t: &TableIdent) -> Result<bool> {
        self.renewing(|| self.inner.table_exists(t)).await
    }

    async fn rename_table(&self, s: &TableIdent, d: &TableIdent) -> Result<()> {
        self.inner.rename_table(s, d).await
    }

    async fn register_table(&self, t: &TableIdent, m: String) -> Result<Table> {
        self.inner.register_table(t, m).await
    }

    async fn update_table(&self, commit: TableCommit) -> Result<Table> {
        match self.inner.update_table(commit).await {
            // The commit was consumed by the request (the crate's commits cannot be
            // copied); the server refused it before reading it. The writer's answer
            // to a conflict is the right one: read the table again, commit again.
            Err(e) if self.renewable && unauthorized(&e) => {
                self.renew(&e).await?;
                Err(Error::new(ErrorKind::CatalogCommitConflicts, "the REST catalog refused an expired token")
                    .with_retryable(true))
            }
            other => other,
        }
    }
}
