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
//! buffer_interval_seconds = 60         # BufferingHints.IntervalInSeconds
//! buffer_size_mib = 1                  # BufferingHints.SizeInMBs
//! error_output = { directory = "weir-data/errors", prefix = "iceberg-failed/" }
//! ```
//!
//! Every problem is reported at once, each naming its field.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::consumer::BufferHints;
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
    /// Where the table is registered.
    pub catalog: CatalogConfig,
    /// Commit once the oldest buffered record waited this long (1–900; default 60).
    #[serde(default = "sixty")]
    pub buffer_interval_seconds: u64,
    /// Commit once this many MiB are buffered (1–128; default 1).
    #[serde(default = "one")]
    pub buffer_size_mib: u64,
    /// Where records that do not fit the table go.
    pub error_output: ErrorOutput,
    /// Firehose's `UniqueKeys` (row-level updates and deletes): refused.
    #[serde(default)]
    pub unique_keys: Vec<String>,
    /// `exactly-once` (default: shard positions kept in the table, each record once)
    /// or `at-least-once` (no positions: a record committed by a worker that crashed
    /// before its checkpoint is appended again; for comparison).
    #[serde(default)]
    pub mode: Delivery,
}

fn sixty() -> u64 {
    60
}

fn one() -> u64 {
    1
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
    /// AWS Glue (Firehose's `CatalogARN`); not built yet.
    Glue {
        /// The catalog ARN.
        #[serde(default)]
        catalog_arn: String,
    },
    /// An Iceberg REST catalog; not built yet.
    Rest {
        /// Its URI.
        #[serde(default)]
        uri: String,
    },
    /// Amazon S3 Tables; not built yet.
    S3tables {
        /// The table bucket ARN.
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
        let mut out = Vec::new();
        if self.table.is_empty() && self.route_query.is_none() {
            out.push(format!("field `{at}.table`: give `table`, `route_query`, or both"));
        } else if !self.table.is_empty()
            && self.table.split_once('.').is_none_or(|(ns, t)| ns.is_empty() || t.is_empty())
        {
            out.push(format!("field `{at}.table`: {:?} is not `namespace.table`", self.table));
        }
        if let Some(q) = &self.route_query
            && let Err(e) = crate::tables::RouteQuery::compile(q)
        {
            out.push(format!("field `{at}.route_query`: {e}"));
        }
        match &self.catalog {
            CatalogConfig::Sql { catalog_name, .. } if catalog_name.is_empty() => {
                out.push(format!("field `{at}.catalog.catalog_name`: empty"));
            }
            CatalogConfig::Sql { .. } => {}
            other => out.push(format!(
                "field `{at}.catalog.type`: {:?} catalogs are not built yet (the embedded `sql` catalog is)",
                match other {
                    CatalogConfig::Glue { .. } => "glue",
                    CatalogConfig::Rest { .. } => "rest",
                    _ => "s3tables",
                }
            )),
        }
        if !(1..=900).contains(&self.buffer_interval_seconds) {
            out.push(format!("field `{at}.buffer_interval_seconds`: must be 1–900"));
        }
        if !(1..=128).contains(&self.buffer_size_mib) {
            out.push(format!("field `{at}.buffer_size_mib`: must be 1–128"));
        }
        if !self.unique_keys.is_empty() {
            out.push(format!(
                "field `{at}.unique_keys`: row-level updates and deletes need delete files, which the iceberg \
                 crate weir uses (0.10) cannot commit; weir appends only"
            ));
        }
        if self.error_output.directory.is_some() == self.error_output.bucket.is_some() {
            out.push(format!("field `{at}.error_output`: give one of `directory` and `bucket`"));
        }
        out
    }

    /// The buffering hints.
    pub fn hints(&self) -> BufferHints {
        BufferHints {
            interval_millis: (self.buffer_interval_seconds * 1000) as i64,
            size_bytes: (self.buffer_size_mib << 20) as usize,
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
            catalog = { type = "glue", catalog_arn = "arn:aws:glue:us-east-1:1:catalog" }
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
            "catalog.type",
            "buffer_interval_seconds",
            "buffer_size_mib",
            "unique_keys",
            "error_output",
        ] {
            assert!(p.iter().any(|m| m.starts_with(&format!("field `consumers[0].{field}`"))), "{field}: {p:?}");
        }
        assert_eq!(p.len(), 7, "{p:?}");
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
        assert_eq!(c.hints(), BufferHints { interval_millis: 60_000, size_bytes: 1 << 20 });
    }
}
