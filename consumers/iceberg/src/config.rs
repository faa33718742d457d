//! `type = "iceberg"`: the section of weir's config for an Iceberg destination.
//!
//! ```toml
//! [[consumers]]
//! name = "events-table"
//! type = "iceberg"
//! table = "mcp.events"                 # DestinationDatabaseName.DestinationTableName
//! # or each record to the table a jq query names (Firehose's routing by JSONQuery):
//! # route_query = '{destinationDatabaseName: "mcp", destinationTableName: .toolName}'
//! catalog = { type = "sql", database = "weir-data/catalog.db", warehouse = "weir-data/warehouse" }
//! buffer_interval_seconds = 60         # BufferingHints.IntervalInSeconds (per table)
//! buffer_size_mib = 1                  # BufferingHints.SizeInMBs (per table)
//! error_output = { directory = "weir-data/errors", prefix = "iceberg-failed/" }
//! ```
//!
//! Every problem is reported at once, each naming its field.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::consumer::BufferHints;
use crate::firehose::{self, Imported};
pub use crate::lambda_config::LambdaConfig;
use crate::writer::Delivery;

/// The section.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IcebergConfig {
    /// Consumer name; in weir's config it comes from the `[[consumers]]` entry.
    #[serde(default)]
    pub name: String,
    /// `namespace.table` (Firehose: `DestinationDatabaseName` and
    /// `DestinationTableName`). The table must exist. With `route_query`, the names
    /// the query leaves out (or gives as null) are taken from it.
    #[serde(default)]
    pub table: String,
    /// A jq query (JQ-1.6, as Firehose's `MetadataExtractionQuery` for Iceberg
    /// routing) whose output object names each record's table:
    /// `destinationDatabaseName`, `destinationTableName` and optionally `operation`
    /// (`insert`; `update` and `delete` go to the error output). A record whose table
    /// does not exist goes to the error output.
    #[serde(default)]
    pub route_query: Option<String>,
    /// A Lambda in front of the tables (Firehose's `Lambda` processor): it gets
    /// Firehose's transformation event and answers each record `Ok` (new data, and
    /// optionally `metadata.otfMetadata` naming its table and operation), `Dropped` or
    /// `ProcessingFailed` (the error output). The Lambda must route a record to the
    /// same table each time it sees it.
    #[serde(default)]
    pub lambda: Option<LambdaConfig>,
    /// Where the tables are registered (overrides the destination's
    /// `CatalogConfiguration`).
    #[serde(default)]
    pub catalog: Option<CatalogConfig>,
    /// Commit a table once its oldest buffered record waited this long (1–900;
    /// default 60).
    #[serde(default)]
    pub buffer_interval_seconds: Option<u64>,
    /// Commit a table once it has this many MiB buffered (1–128; default 1); every
    /// table commits once they hold 32 times this together (at most 256 MiB).
    #[serde(default)]
    pub buffer_size_mib: Option<u64>,
    /// Where records that fit no table go (overrides the destination's
    /// `S3Configuration` and `S3ErrorOutputPrefix`).
    #[serde(default)]
    pub error_output: Option<ErrorOutput>,
    /// Firehose's `UniqueKeys` (row-level updates and deletes): refused.
    #[serde(default)]
    pub unique_keys: Vec<String>,
    /// `exactly-once` (default: shard positions kept in the table, each record once)
    /// or `at-least-once` (no positions: a record committed by a worker that crashed
    /// before its checkpoint is appended again; for comparison).
    #[serde(default)]
    pub mode: Delivery,
    /// How an integer in a timestamp column is read: `by-digits` (default: up to 12
    /// digits epoch seconds, 13–15 milliseconds, 16–18 microseconds — what Firehose's
    /// Iceberg destination asks for — 19 nanoseconds; exact for every instant from
    /// September 2001 to 2286), `seconds`, `milliseconds`, `microseconds`, or `openx`
    /// (the S3 archiver's Parquet rule: 13 characters or more milliseconds, fewer
    /// seconds). Text and fractions are read as the OpenX SerDe reads them.
    #[serde(default)]
    pub timestamp_integers: TimestampIntegers,
    /// An existing delivery stream's `IcebergDestinationConfiguration`, with
    /// Firehose's field names (`DestinationTableConfigurationList`,
    /// `CatalogConfiguration`, `BufferingHints`, `ProcessingConfiguration` with a
    /// `MetadataExtraction` routing query, `S3Configuration`, …): every field weir
    /// cannot serve is named by `weir config check`. A setting given both here and
    /// in weir's own fields is a problem, except `catalog` and `error_output`, which
    /// override it (a worker may reach the tables through another catalog).
    #[serde(default)]
    pub destination: Option<serde_json::Value>,
}

/// How an integer in a timestamp column is read (see
/// [`IcebergConfig::timestamp_integers`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TimestampIntegers {
    /// By the number of digits.
    #[default]
    ByDigits,
    /// The OpenX SerDe's rule.
    Openx,
    /// Epoch seconds.
    Seconds,
    /// Epoch milliseconds.
    Milliseconds,
    /// Epoch microseconds.
    Microseconds,
}

impl From<TimestampIntegers> for weir_parquet::timestamp::EpochIntegers {
    fn from(t: TimestampIntegers) -> Self {
        match t {
            TimestampIntegers::ByDigits => Self::ByDigits,
            TimestampIntegers::Openx => Self::OpenX,
            TimestampIntegers::Seconds => Self::Seconds,
            TimestampIntegers::Milliseconds => Self::Milliseconds,
            TimestampIntegers::Microseconds => Self::Microseconds,
        }
    }
}

/// The section resolved: weir's own fields and the Firehose destination merged.
#[derive(Debug, Clone)]
pub struct Resolved {
    /// The one table, or the routed consumer's default table.
    pub table: Option<String>,
    /// The routing query.
    pub route_query: Option<String>,
    /// The Lambda in front of the tables.
    pub lambda: Option<LambdaConfig>,
    /// The catalog.
    pub catalog: CatalogConfig,
    /// The buffering hints.
    pub hints: BufferHints,
    /// The error output.
    pub error_output: ErrorOutput,
    /// Fields of the destination accepted and not used.
    pub warnings: Vec<String>,
}

/// The catalog.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase", deny_unknown_fields)]
pub enum CatalogConfig {
    /// Iceberg's SQL catalog in a SQLite file, the warehouse a local directory
    /// (pyiceberg's `SqlCatalog` reads it with catalog name `catalog_name`).
    Sql {
        /// The SQLite file (created if missing).
        database: PathBuf,
        /// The warehouse directory (created if missing).
        warehouse: PathBuf,
        /// The catalog's name in the file (default `weir`).
        #[serde(default = "weir")]
        catalog_name: String,
    },
    /// The AWS Glue Data Catalog (Firehose's `CatalogARN`
    /// `arn:aws:glue:<region>:<account>:catalog`), the tables' files on S3. Endpoints,
    /// profile and credentials come from `[aws]` (`glue_endpoint_url`,
    /// `s3_endpoint_url`). weir loads and commits to existing tables.
    Glue {
        /// The catalog's ARN; its region and account are used (default: the
        /// caller's account in `[aws]`'s region).
        #[serde(default)]
        catalog_arn: Option<String>,
    },
    /// An Iceberg REST catalog (Apache Polaris, Lakekeeper, Nessie, Unity, a
    /// Tabular-style server). Tables' files on `s3://` through `[aws]`'s credentials
    /// and `s3_endpoint_url`, or `file://`. Secrets come from the environment, never
    /// the file.
    Rest {
        /// The catalog's base URI (`https://host/api/catalog`: weir calls
        /// `<uri>/v1/...`).
        #[serde(default)]
        uri: String,
        /// The warehouse asked for (a name or a location, as the server wants it).
        #[serde(default)]
        warehouse: Option<String>,
        /// The environment variable holding OAuth2 client credentials
        /// `client_id:client_secret` (Iceberg's `credential`); tokens are asked for at
        /// `<uri>/v1/oauth/tokens` (or property `oauth2-server-uri`) and renewed when
        /// the server refuses one.
        #[serde(default)]
        credential_env: Option<String>,
        /// The environment variable holding a bearer token used as it is (Iceberg's
        /// `token`; not renewed).
        #[serde(default)]
        token_env: Option<String>,
        /// Further catalog properties, as Iceberg names them: `scope`,
        /// `oauth2-server-uri`, `header.<name>` (sent with every request), `s3.*`.
        #[serde(default)]
        properties: std::collections::BTreeMap<String, String>,
    },
    /// An Amazon S3 table bucket (Firehose's `CatalogARN`
    /// `arn:aws:glue:<region>:<account>:catalog/s3tablescatalog/<bucket>`), through the
    /// S3 Tables API; endpoints and credentials from `[aws]` (`s3tables_endpoint_url`,
    /// `s3_endpoint_url`). weir loads and commits to existing tables.
    S3tables {
        /// `arn:aws:s3tables:<region>:<account>:bucket/<name>`.
        #[serde(default)]
        table_bucket_arn: String,
    },
}

fn weir() -> String {
    "weir".into()
}

/// The error output: a local directory or an S3 bucket, and a prefix.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ErrorOutput {
    /// A local directory.
    #[serde(default)]
    pub directory: Option<PathBuf>,
    /// An S3 bucket.
    #[serde(default)]
    pub bucket: Option<String>,
    /// Key prefix (Firehose's `S3ErrorOutputPrefix`; default `iceberg-failed/`).
    #[serde(default = "failed")]
    pub prefix: String,
}

fn failed() -> String {
    "iceberg-failed/".into()
}

impl IcebergConfig {
    /// Every problem serde cannot see, each naming its field under `at`.
    pub fn problems(&self, at: &str) -> Vec<String> {
        self.resolve(at).err().unwrap_or_default()
    }

    /// The settings, or every problem, each naming its field under `at`.
    pub fn resolve(&self, at: &str) -> Result<Resolved, Vec<String>> {
        let mut out = Vec::new();
        let imported = match &self.destination {
            None => Imported::default(),
            Some(v) => {
                let (imported, problems) = match firehose::destination(v) {
                    Ok(d) => firehose::import(&d),
                    Err(p) => (Imported::default(), vec![p]),
                };
                out.extend(problems.iter().map(|p| format!("field `{at}.destination.{}`: {}", p.field, p.reason)));
                imported
            }
        };
        let one = |out: &mut Vec<String>, field: &str, ours: bool, theirs: bool, firehose: &str| {
            if ours && theirs {
                out.push(format!("field `{at}.{field}`: also given by `{at}.destination.{firehose}`: give it once"));
            }
        };
        one(&mut out, "table", !self.table.is_empty(), imported.table.is_some(), "DestinationTableConfigurationList");
        one(
            &mut out,
            "route_query",
            self.route_query.is_some(),
            imported.route_query.is_some(),
            "ProcessingConfiguration",
        );
        one(
            &mut out,
            "buffer_interval_seconds",
            self.buffer_interval_seconds.is_some(),
            imported.buffer_interval_seconds.is_some(),
            "BufferingHints.IntervalInSeconds",
        );
        one(
            &mut out,
            "buffer_size_mib",
            self.buffer_size_mib.is_some(),
            imported.buffer_size_mib.is_some(),
            "BufferingHints.SizeInMBs",
        );
        one(&mut out, "lambda", self.lambda.is_some(), imported.lambda.is_some(), "ProcessingConfiguration");
        if let Some(l) = &self.lambda {
            out.extend(l.problems().into_iter().map(|(field, why)| format!("field `{at}.lambda.{field}`: {why}")));
        }
        let table = Some(self.table.clone()).filter(|t| !t.is_empty()).or(imported.table.clone());
        let route_query = self.route_query.clone().or(imported.route_query.clone());
        let lambda = self.lambda.clone().or(imported.lambda.clone());
        match &table {
            None if route_query.is_none() && lambda.is_none() => {
                out.push(format!("field `{at}.table`: give `table`, `route_query`, `lambda`, or several"))
            }
            Some(t) if t.split_once('.').is_none_or(|(ns, t)| ns.is_empty() || t.is_empty()) => {
                out.push(format!("field `{at}.table`: {t:?} is not `namespace.table`"))
            }
            _ => {}
        }
        if let Some(q) = &self.route_query
            && let Err(e) = crate::tables::RouteQuery::compile(q)
        {
            out.push(format!("field `{at}.route_query`: {e}"));
        }
        let catalog = match (&self.catalog, &imported.catalog) {
            (Some(CatalogConfig::Sql { catalog_name, .. }), _) if catalog_name.is_empty() => {
                out.push(format!("field `{at}.catalog.catalog_name`: empty"));
                None
            }
            (Some(c @ CatalogConfig::Sql { .. }), _) => Some(c.clone()),
            (Some(c @ CatalogConfig::Glue { catalog_arn }), _) => {
                match catalog_arn.as_deref().map(firehose::catalog_arn) {
                    None | Some(Ok(firehose::CatalogArn::Glue { .. })) => Some(c.clone()),
                    Some(Ok(arn @ firehose::CatalogArn::S3Tables { .. })) => Some(arn.catalog()),
                    Some(Err(why)) => {
                        out.push(format!("field `{at}.catalog.catalog_arn`: {why}"));
                        None
                    }
                }
            }
            (Some(c @ CatalogConfig::S3tables { table_bucket_arn }), _) => {
                match firehose::table_bucket(table_bucket_arn) {
                    Ok(_) => Some(c.clone()),
                    Err(why) => {
                        out.push(format!("field `{at}.catalog.table_bucket_arn`: {why}"));
                        None
                    }
                }
            }
            (Some(c @ CatalogConfig::Rest { uri, properties, credential_env, token_env, .. }), _) => {
                let before = out.len();
                if !(uri.starts_with("http://") || uri.starts_with("https://")) {
                    out.push(format!("field `{at}.catalog.uri`: {uri:?} is not an http:// or https:// URI"));
                }
                for (key, instead) in [
                    ("uri", "`uri`"),
                    ("warehouse", "`warehouse`"),
                    ("credential", "`credential_env` (a secret stays out of the config file)"),
                    ("token", "`token_env` (a secret stays out of the config file)"),
                ] {
                    if properties.contains_key(key) {
                        out.push(format!("field `{at}.catalog.properties.{key}`: give it as {instead}"));
                    }
                }
                for (field, var) in [("credential_env", credential_env), ("token_env", token_env)] {
                    if var.as_deref().is_some_and(|v| v.is_empty() || v.contains('=')) {
                        out.push(format!("field `{at}.catalog.{field}`: not an environment variable's name"));
                    }
                }
                (out.len() == before).then(|| c.clone())
            }
            (None, Some(arn)) => Some(arn.catalog()),
            (None, None) => {
                // A CatalogConfiguration that could not be read is named already.
                if !out.iter().any(|p| p.contains(".destination.CatalogConfiguration")) {
                    out.push(format!("field `{at}.catalog`: required (or the destination's CatalogConfiguration)"));
                }
                None
            }
        };
        let interval = self.buffer_interval_seconds.or(imported.buffer_interval_seconds).unwrap_or(60);
        if !(1..=900).contains(&interval) {
            out.push(format!("field `{at}.buffer_interval_seconds`: must be 1–900"));
        }
        let size = self.buffer_size_mib.or(imported.buffer_size_mib).unwrap_or(1);
        if !(1..=128).contains(&size) {
            out.push(format!("field `{at}.buffer_size_mib`: must be 1–128"));
        }
        if !self.unique_keys.is_empty() {
            out.push(format!(
                "field `{at}.unique_keys`: row-level updates and deletes need delete files, which the iceberg \
                 crate weir uses (0.10) cannot commit; weir appends only"
            ));
        }
        let error_output = match (&self.error_output, &imported.error_bucket) {
            (Some(e), _) => Some(e.clone()),
            (None, Some(bucket)) => Some(ErrorOutput {
                directory: None,
                bucket: Some(bucket.clone()),
                prefix: imported.error_prefix.clone().unwrap_or_else(failed),
            }),
            (None, None) => None,
        };
        match &error_output {
            Some(e) if e.directory.is_some() == e.bucket.is_some() => {
                out.push(format!("field `{at}.error_output`: give one of `directory` and `bucket`"))
            }
            None => out
                .push(format!("field `{at}.error_output`: required (or the destination's S3Configuration.BucketARN)")),
            Some(_) => {}
        }
        match (catalog, error_output) {
            (Some(catalog), Some(error_output)) if out.is_empty() => Ok(Resolved {
                table,
                route_query,
                lambda,
                catalog,
                hints: BufferHints { interval_millis: (interval * 1000) as i64, size_bytes: (size << 20) as usize },
                error_output,
                warnings: imported.warnings,
            }),
            _ => Err(out),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_problem_is_reported_naming_its_field() {
        let c: IcebergConfig = toml::from_str(
            r#"
            table = "events"
            catalog = { type = "rest", uri = "localhost:8181", properties = { token = "secret" } }
            buffer_interval_seconds = 0
            buffer_size_mib = 500
            unique_keys = ["sessionId"]
            route_query = "{destinationTableName: .a"
            error_output = { prefix = "x/" }
            "#,
        )
        .unwrap();
        let p = c.problems("consumers[0]");
        for field in [
            "table",
            "route_query",
            "catalog.uri",
            "catalog.properties.token",
            "buffer_interval_seconds",
            "buffer_size_mib",
            "unique_keys",
            "error_output",
        ] {
            assert!(p.iter().any(|m| m.starts_with(&format!("field `consumers[0].{field}`"))), "{field}: {p:?}");
        }
        assert_eq!(p.len(), 8, "{p:?}");
    }

    #[test]
    fn a_good_section_has_no_problems() {
        let c: IcebergConfig = toml::from_str(
            r#"
            table = "mcp.events"
            catalog = { type = "sql", database = "c.db", warehouse = "w" }
            error_output = { directory = "errors" }
            "#,
        )
        .unwrap();
        assert_eq!(c.problems("c"), Vec::<String>::new());
        let r = c.resolve("c").unwrap();
        assert_eq!(r.hints, BufferHints { interval_millis: 60_000, size_bytes: 1 << 20 });
        assert_eq!(r.error_output.prefix, "iceberg-failed/");
    }

    #[test]
    fn a_rest_catalog_takes_its_secrets_from_the_environment() {
        let c: IcebergConfig = toml::from_str(
            r#"
            table = "mcp.events"
            catalog = { type = "rest", uri = "https://polaris.example.com/api/catalog", warehouse = "lake", credential_env = "POLARIS_CREDENTIAL", properties = { scope = "PRINCIPAL_ROLE:ALL", "header.X-Iceberg-Access-Delegation" = "" } }
            error_output = { directory = "errors" }
            "#,
        )
        .unwrap();
        assert_eq!(c.problems("c"), Vec::<String>::new());
        let bad: IcebergConfig = toml::from_str(
            r#"
            table = "mcp.events"
            catalog = { type = "rest", uri = "https://x", credential_env = "A=B", properties = { credential = "id:secret", uri = "https://y" } }
            error_output = { directory = "errors" }
            "#,
        )
        .unwrap();
        let p = bad.problems("c");
        for field in ["credential_env", "properties.credential", "properties.uri"] {
            assert!(p.iter().any(|m| m.starts_with(&format!("field `c.catalog.{field}`"))), "{field}: {p:?}");
        }
        assert!(p.iter().any(|m| m.contains("secret stays out of the config file")), "{p:?}");
    }

    #[test]
    fn a_firehose_destination_gives_what_weirs_fields_do_not() {
        let c: IcebergConfig = toml::from_str(
            r#"
            catalog = { type = "sql", database = "c.db", warehouse = "w" }
            [destination]
            DestinationTableConfigurationList = [
              { DestinationDatabaseName = "mcp", DestinationTableName = "events", S3ErrorOutputPrefix = "failed/" },
            ]
            CatalogConfiguration = { CatalogARN = "arn:aws:glue:us-east-1:123456789012:catalog" }
            BufferingHints = { SizeInMBs = 8, IntervalInSeconds = 120 }
            S3Configuration = { BucketARN = "arn:aws:s3:::errors-bucket" }
            "#,
        )
        .unwrap();
        let r = c.resolve("consumers[0]").unwrap();
        assert_eq!(r.table.as_deref(), Some("mcp.events"));
        assert_eq!(r.hints, BufferHints { interval_millis: 120_000, size_bytes: 8 << 20 });
        assert_eq!(r.error_output.bucket.as_deref(), Some("errors-bucket"));
        assert_eq!(r.error_output.prefix, "failed/");
        assert!(matches!(r.catalog, CatalogConfig::Sql { .. }), "weir's catalog overrides the ARN");

        // Without weir's catalog the ARN's is used: Glue's.
        let c: IcebergConfig = toml::from_str(
            r#"
            [destination]
            DestinationTableConfigurationList = [{ DestinationDatabaseName = "mcp", DestinationTableName = "events" }]
            CatalogConfiguration = { CatalogARN = "arn:aws:glue:eu-west-1:123456789012:catalog" }
            S3Configuration = { BucketARN = "arn:aws:s3:::errors-bucket" }
            "#,
        )
        .unwrap();
        let r = c.resolve("consumers[0]").unwrap();
        assert!(
            matches!(&r.catalog, CatalogConfig::Glue { catalog_arn: Some(a) } if a == "arn:aws:glue:eu-west-1:123456789012:catalog"),
            "{:?}",
            r.catalog
        );

        // S3 Tables' federated catalog in Glue is the table bucket's.
        let c: IcebergConfig = toml::from_str(
            r#"
            [destination]
            DestinationTableConfigurationList = [{ DestinationDatabaseName = "mcp", DestinationTableName = "events" }]
            CatalogConfiguration = { CatalogARN = "arn:aws:glue:us-east-1:123456789012:catalog/s3tablescatalog/lake" }
            S3Configuration = { BucketARN = "arn:aws:s3:::errors-bucket" }
            "#,
        )
        .unwrap();
        let r = c.resolve("consumers[0]").unwrap();
        assert!(
            matches!(&r.catalog, CatalogConfig::S3tables { table_bucket_arn } if table_bucket_arn == "arn:aws:s3tables:us-east-1:123456789012:bucket/lake"),
            "{:?}",
            r.catalog
        );

        // A catalog ARN that is none of them, a setting given twice, a Firehose field
        // weir cannot serve: each named.
        let c: IcebergConfig = toml::from_str(
            r#"
            table = "mcp.other"
            buffer_size_mib = 4
            [destination]
            DestinationTableConfigurationList = [
              { DestinationDatabaseName = "mcp", DestinationTableName = "events", UniqueKeys = ["id"] },
            ]
            CatalogConfiguration = { CatalogARN = "arn:aws:s3tables:us-east-1:123456789012:bucket/lake" }
            BufferingHints = { SizeInMBs = 8 }
            S3Configuration = { BucketARN = "arn:aws:s3:::errors-bucket" }
            "#,
        )
        .unwrap();
        let p = c.problems("consumers[0]");
        for field in [
            "consumers[0].destination.DestinationTableConfigurationList[0].UniqueKeys",
            "consumers[0].destination.CatalogConfiguration.CatalogARN",
        ] {
            assert!(p.iter().any(|m| m.starts_with(&format!("field `{field}`"))), "{field}: {p:?}");
        }
        assert!(p.iter().any(|m| m.starts_with("field `consumers[0].table`: also given")), "{p:?}");
        assert_eq!(p.len(), 4, "{p:?}");
        let c: IcebergConfig = toml::from_str(
            r#"
            table = "mcp.other"
            buffer_size_mib = 4
            catalog = { type = "sql", database = "c.db", warehouse = "w" }
            [destination]
            DestinationTableConfigurationList = [{ DestinationDatabaseName = "mcp", DestinationTableName = "events" }]
            BufferingHints = { SizeInMBs = 8 }
            S3Configuration = { BucketARN = "arn:aws:s3:::errors-bucket" }
            "#,
        )
        .unwrap();
        let p = c.problems("consumers[0]");
        assert!(p.iter().any(|m| m.starts_with("field `consumers[0].table`: also given")), "{p:?}");
        assert!(p.iter().any(|m| m.starts_with("field `consumers[0].buffer_size_mib`: also given")), "{p:?}");
        assert_eq!(p.len(), 2, "{p:?}");
    }
}
