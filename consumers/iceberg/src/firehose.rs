//! Firehose's `IcebergDestinationConfiguration`, field for field, read from the JSON an
//! existing delivery stream has (`describe-delivery-stream`, `create-delivery-stream`
//! input, a CloudFormation resource's `Properties`, or the same shape in TOML), and
//! what of it weir serves: [`import`] names every field it cannot, at once.

use serde::Deserialize;
use serde_json::Value;
use weir_firehose::{BackupConfiguration, LambdaSettings, Processing};
pub use weir_firehose::{BufferingHints, Problem};

/// `IcebergDestinationConfiguration`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(missing_docs)] // Firehose's field names, documented by Firehose.
pub struct IcebergDestination {
    #[serde(rename = "DestinationTableConfigurationList", default)]
    pub tables: Vec<TableConfiguration>,
    #[serde(rename = "CatalogConfiguration")]
    pub catalog: Option<CatalogConfiguration>,
    #[serde(rename = "BufferingHints")]
    pub buffering_hints: Option<BufferingHints>,
    #[serde(rename = "ProcessingConfiguration")]
    pub processing: Option<Processing>,
    #[serde(rename = "S3BackupMode")]
    pub s3_backup_mode: Option<String>,
    #[serde(rename = "S3Configuration")]
    pub s3: Option<BackupConfiguration>,
    #[serde(rename = "SchemaEvolutionConfiguration")]
    pub schema_evolution: Option<Enabled>,
    #[serde(rename = "TableCreationConfiguration")]
    pub table_creation: Option<Enabled>,
    #[serde(rename = "AppendOnly")]
    pub append_only: Option<bool>,
    #[serde(rename = "RetryOptions")]
    pub retry_options: Option<Value>,
    #[serde(rename = "RoleARN")]
    pub role_arn: Option<Value>,
    #[serde(rename = "CloudWatchLoggingOptions")]
    pub cloud_watch_logging_options: Option<Value>,
}

/// One `DestinationTableConfiguration`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(missing_docs)]
pub struct TableConfiguration {
    #[serde(rename = "DestinationDatabaseName")]
    pub database: String,
    #[serde(rename = "DestinationTableName")]
    pub table: String,
    #[serde(rename = "UniqueKeys", default)]
    pub unique_keys: Vec<String>,
    #[serde(rename = "PartitionSpec")]
    pub partition_spec: Option<Value>,
    #[serde(rename = "S3ErrorOutputPrefix")]
    pub s3_error_output_prefix: Option<String>,
}

/// `CatalogConfiguration`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(missing_docs)]
pub struct CatalogConfiguration {
    #[serde(rename = "CatalogARN")]
    pub catalog_arn: Option<Value>,
    #[serde(rename = "WarehouseLocation")]
    pub warehouse_location: Option<String>,
}

/// `Enabled` flags.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(missing_docs)]
pub struct Enabled {
    #[serde(rename = "Enabled")]
    pub enabled: Option<bool>,
}

/// Where the destination's catalog is, as Firehose names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CatalogArn {
    /// `arn:aws:glue:<region>:<account>:catalog`.
    Glue {
        /// The region.
        region: String,
        /// The account (the catalog id).
        account: String,
    },
    /// `arn:aws:glue:<region>:<account>:catalog/s3tablescatalog/<table bucket>`.
    S3Tables {
        /// The region.
        region: String,
        /// The account.
        account: String,
        /// The table bucket's name.
        bucket: String,
    },
}

impl std::fmt::Display for CatalogArn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Glue { region, account } => write!(f, "arn:aws:glue:{region}:{account}:catalog"),
            Self::S3Tables { region, account, bucket } => {
                write!(f, "arn:aws:glue:{region}:{account}:catalog/s3tablescatalog/{bucket}")
            }
        }
    }
}

impl CatalogArn {
    /// The catalog weir reaches it through: Glue's own, or the table bucket's.
    pub fn catalog(&self) -> crate::CatalogConfig {
        match self {
            Self::Glue { .. } => crate::CatalogConfig::Glue { catalog_arn: Some(self.to_string()) },
            Self::S3Tables { region, account, bucket } => crate::CatalogConfig::S3tables {
                table_bucket_arn: format!("arn:aws:s3tables:{region}:{account}:bucket/{bucket}"),
            },
        }
    }

    /// The region.
    pub fn region(&self) -> &str {
        match self {
            Self::Glue { region, .. } | Self::S3Tables { region, .. } => region,
        }
    }

    /// The account (the Data Catalog's id).
    pub fn account(&self) -> &str {
        match self {
            Self::Glue { account, .. } | Self::S3Tables { account, .. } => account,
        }
    }
}

/// What weir takes from a destination.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Imported {
    /// `namespace.table` when the list has one table (the default table otherwise).
    pub table: Option<String>,
    /// The routing query (`MetadataExtraction` processor).
    pub route_query: Option<String>,
    /// The `Lambda` processor.
    pub lambda: Option<crate::lambda_config::LambdaConfig>,
    /// `BufferingHints.IntervalInSeconds`.
    pub buffer_interval_seconds: Option<u64>,
    /// `BufferingHints.SizeInMBs`.
    pub buffer_size_mib: Option<u64>,
    /// The error output's bucket (`S3Configuration.BucketARN`).
    pub error_bucket: Option<String>,
    /// The error output's prefix (the table's `S3ErrorOutputPrefix`, else
    /// `S3Configuration.ErrorOutputPrefix`).
    pub error_prefix: Option<String>,
    /// `CatalogConfiguration.CatalogARN`, read.
    pub catalog: Option<CatalogArn>,
    /// `CatalogConfiguration.WarehouseLocation`.
    pub warehouse: Option<String>,
    /// Fields accepted and not used, each with the reason.
    pub warnings: Vec<String>,
}

/// Reads `v`: the destination itself, or an object holding it under
/// `IcebergDestinationConfiguration` (a delivery stream's description, its
/// `create-delivery-stream` input, a CloudFormation resource's `Properties`).
pub fn destination(v: &Value) -> Result<IcebergDestination, Problem> {
    let inner = v.get("IcebergDestinationConfiguration").unwrap_or(v);
    serde_json::from_value(inner.clone())
        .map_err(|e| Problem { field: "IcebergDestinationConfiguration".into(), reason: e.to_string() })
}

/// Whether `v` holds an Iceberg destination (see [`destination`]).
pub fn is_iceberg(v: &Value) -> bool {
    v.get("IcebergDestinationConfiguration").is_some()
        || v.get("DestinationTableConfigurationList").is_some()
        || v.get("CatalogConfiguration").is_some()
}

/// What weir takes from `d`, and every field it cannot serve (what it takes is still
/// given then, so a caller reports the rest of its own checks without echoes).
pub fn import(d: &IcebergDestination) -> (Imported, Vec<Problem>) {
    let mut problems = Vec::new();
    let mut problem = |field: &str, reason: String| problems.push(Problem { field: field.to_owned(), reason });
    let mut out = Imported::default();

    let query = d.processing.as_ref().filter(|p| p.enabled != Some(false)).map(processors).transpose();
    match query {
        Ok(q) => (out.route_query, out.lambda) = q.unwrap_or_default(),
        Err(ps) => {
            for (field, reason) in ps {
                problem(&field, reason);
            }
        }
    }
    for (i, t) in d.tables.iter().enumerate() {
        let at = format!("DestinationTableConfigurationList[{i}]");
        if t.database.is_empty() || t.table.is_empty() {
            problem(&at, "DestinationDatabaseName and DestinationTableName are required".into());
        }
        if !t.unique_keys.is_empty() {
            problem(
                &format!("{at}.UniqueKeys"),
                "row-level updates and deletes need delete files, which the iceberg crate weir uses (0.10) \
                 cannot commit; weir appends only"
                    .into(),
            );
        }
        if t.partition_spec.is_some() {
            out.warnings.push(format!(
                "{at}.PartitionSpec is used by Firehose only to create tables; weir writes the table's own spec"
            ));
        }
    }
    match d.tables.as_slice() {
        [] if out.route_query.is_none() && out.lambda.is_none() => problem(
            "DestinationTableConfigurationList",
            "name a table, or route with a MetadataExtractionQuery or a Lambda's otfMetadata".into(),
        ),
        [] => {}
        [one] => {
            out.table = Some(format!("{}.{}", one.database, one.table));
            out.error_prefix = one.s3_error_output_prefix.clone();
        }
        many => {
            if out.route_query.is_none() && out.lambda.is_none() {
                problem(
                    "DestinationTableConfigurationList",
                    format!(
                        "{} tables and no MetadataExtractionQuery or Lambda: nothing says which record goes where",
                        many.len()
                    ),
                );
            }
            let prefixes: std::collections::BTreeSet<_> = many.iter().map(|t| &t.s3_error_output_prefix).collect();
            if prefixes.len() > 1 {
                problem(
                    "DestinationTableConfigurationList[].S3ErrorOutputPrefix",
                    "weir writes one error output per consumer: give every table the same prefix".into(),
                );
            } else {
                out.error_prefix = many[0].s3_error_output_prefix.clone();
            }
        }
    }
    if let Some(h) = &d.buffering_hints {
        match h.size_in_mbs {
            Some(n) if !(1..=128).contains(&n) => problem("BufferingHints.SizeInMBs", format!("{n} is not 1–128")),
            n => out.buffer_size_mib = n.map(|n| n as u64),
        }
        match h.interval_in_seconds {
            // Firehose allows 0; weir commits at least once a second.
            Some(0) => out.buffer_interval_seconds = Some(1),
            Some(n) if !(0..=900).contains(&n) => {
                problem("BufferingHints.IntervalInSeconds", format!("{n} is not 0–900"))
            }
            n => out.buffer_interval_seconds = n.map(|n| n as u64),
        }
    }
    if let Some(c) = &d.catalog {
        match c.catalog_arn.as_ref() {
            None => problem("CatalogConfiguration.CatalogARN", "required".into()),
            Some(v) if intrinsic(v) => out.warnings.push(format!(
                "CatalogConfiguration.CatalogARN is a CloudFormation function ({v}): weir cannot tell which catalog; \
                 give the consumer a `catalog`"
            )),
            Some(v) => match catalog_arn(v.as_str().unwrap_or_default()) {
                Ok(arn) => out.catalog = Some(arn),
                Err(why) => problem("CatalogConfiguration.CatalogARN", why),
            },
        }
        out.warehouse = c.warehouse_location.clone();
    }
    if let Some(s3) = &d.s3 {
        match s3.bucket_arn.as_ref() {
            Some(v) if intrinsic(v) => out.warnings.push(format!(
                "S3Configuration.BucketARN is a CloudFormation function ({v}): give the consumer an `error_output`"
            )),
            Some(v) => {
                let arn = v.as_str().unwrap_or_default();
                match arn.strip_prefix("arn:aws:s3:::").filter(|b| !b.is_empty() && !b.contains('/')) {
                    Some(bucket) => out.error_bucket = Some(bucket.to_owned()),
                    None => problem("S3Configuration.BucketARN", format!("{v} is not arn:aws:s3:::<bucket>")),
                }
            }
            None => {}
        }
        if out.error_prefix.is_none() {
            out.error_prefix = s3.error_output_prefix.clone();
        }
        for (field, set) in [
            ("Prefix", s3.prefix.is_some()),
            ("BufferingHints", s3.buffering_hints.is_some()),
            ("CompressionFormat", s3.compression_format.is_some()),
        ] {
            if set {
                out.warnings
                    .push(format!("S3Configuration.{field} is accepted and ignored (weir's error objects are NDJSON)"));
            }
        }
    }
    match d.s3_backup_mode.as_deref() {
        None | Some("FailedDataOnly") => {}
        Some("AllData") => problem(
            "S3BackupMode",
            "AllData (a copy of every source record in S3) is not built for Iceberg yet: add an archiver beside it"
                .into(),
        ),
        Some(other) => problem("S3BackupMode", format!("{other:?} is not FailedDataOnly or AllData")),
    }
    if d.schema_evolution.as_ref().and_then(|e| e.enabled) == Some(true) {
        problem(
            "SchemaEvolutionConfiguration.Enabled",
            "not built: Firehose documents schema evolution for database sources, whose schema it reads; weir \
             writes a stream's JSON with the table's current schema (a field the table lacks is left out): add \
             columns with Athena, Spark or pyiceberg"
                .into(),
        );
    }
    if d.table_creation.as_ref().and_then(|e| e.enabled) == Some(true) {
        problem(
            "TableCreationConfiguration.Enabled",
            "not built: Firehose documents table creation for database sources, whose schema it reads; a stream's \
             JSON has no schema to make a table from: create the table first"
                .into(),
        );
    }
    if d.append_only == Some(false) {
        out.warnings.push("AppendOnly false: weir appends only (updates and deletes go to the error output)".into());
    }
    for (field, set) in [
        ("RoleARN", d.role_arn.is_some()),
        ("CloudWatchLoggingOptions", d.cloud_watch_logging_options.is_some()),
        ("RetryOptions", d.retry_options.is_some()),
    ] {
        if set {
            out.warnings.push(format!(
                "{field} is accepted and ignored (weir uses its own credentials and logs, and retries until it commits)"
            ));
        }
    }
    (out, problems)
}

/// The routing query and the Lambda of `p`'s processors, or the processors weir
/// cannot run.
type Processors = (Option<String>, Option<crate::lambda_config::LambdaConfig>);
fn processors(p: &Processing) -> Result<Processors, Vec<(String, String)>> {
    let mut query = None;
    let mut lambda = None;
    let mut problems = Vec::new();
    for (i, proc) in p.processors.iter().enumerate() {
        let at = format!("ProcessingConfiguration.Processors[{i}]");
        let ps = proc.parameters();
        match proc.kind.as_str() {
            "MetadataExtraction" => {
                match ps.get("JsonParsingEngine").map(String::as_str) {
                    None | Some("JQ-1.6") => {}
                    Some(other) => {
                        problems.push((format!("{at}.JsonParsingEngine"), format!("{other:?} is not JQ-1.6")))
                    }
                }
                match ps.get("MetadataExtractionQuery").cloned() {
                    Some(q) => match crate::tables::RouteQuery::compile(&q) {
                        Ok(_) => query = Some(q),
                        Err(e) => problems.push((format!("{at}.MetadataExtractionQuery"), e.to_string())),
                    },
                    None => problems.push((at, "MetadataExtraction needs a MetadataExtractionQuery".into())),
                }
            }
            "Lambda" => {
                let (settings, found) = LambdaSettings::read(proc, &at);
                let arn_named = found.iter().any(|p| p.field.ends_with(".LambdaArn"));
                problems.extend(found.into_iter().map(|p| (p.field, p.reason)));
                let l = crate::lambda_config::LambdaConfig {
                    arn: settings.arn,
                    retries: settings.retries,
                    // Exact: a power of two divides the bytes.
                    buffer_size_mib: settings.buffer_bytes as f64 / (1024.0 * 1024.0),
                };
                // Retries and size are in range now (read replaced any bad value with its
                // default); weir's own check adds the ARN's shape to Firehose's "present".
                if !arn_named {
                    problems.extend(
                        l.problems()
                            .into_iter()
                            .filter(|(f, _)| *f == "arn")
                            .map(|(_, why)| (format!("{at}.LambdaArn"), why)),
                    );
                }
                lambda = Some(l);
            }
            other => problems.push((at, format!("processor {other:?} is not used by Firehose's Iceberg destination"))),
        }
    }
    if problems.is_empty() { Ok((query, lambda)) } else { Err(problems) }
}

/// Reads a table bucket's ARN (`arn:aws:s3tables:<region>:<account>:bucket/<name>`):
/// its region and name.
pub fn table_bucket(arn: &str) -> Result<(String, String), String> {
    let bad = || format!("{arn:?} is not arn:aws:s3tables:<region>:<account>:bucket/<name>");
    let parts: Vec<&str> = arn.splitn(6, ':').collect();
    let ["arn", _partition, "s3tables", region, account, resource] = parts[..] else { return Err(bad()) };
    match resource.split_once('/') {
        Some(("bucket", name))
            if !region.is_empty() && !account.is_empty() && !name.is_empty() && !name.contains('/') =>
        {
            Ok((region.to_owned(), name.to_owned()))
        }
        _ => Err(bad()),
    }
}

/// Whether `v` is a CloudFormation function (`{"Fn::Sub": …}`, or YAML's `!Sub …` as
/// the template reader keeps it): resolved only when the stack is deployed.
fn intrinsic(v: &Value) -> bool {
    v.is_object() || v.as_str().is_some_and(|s| s.starts_with('!'))
}

/// Reads a Glue catalog ARN: the account's default catalog, or S3 Tables' federated one.
pub fn catalog_arn(arn: &str) -> Result<CatalogArn, String> {
    let bad = || format!("{arn:?} is not arn:aws:glue:<region>:<account>:catalog[/s3tablescatalog/<bucket>]");
    let rest = arn.strip_prefix("arn:").ok_or_else(bad)?;
    let parts: Vec<&str> = rest.splitn(5, ':').collect();
    let [_partition, "glue", region, account, resource] = parts[..] else { return Err(bad()) };
    if region.is_empty() || account.is_empty() {
        return Err(bad());
    }
    let (region, account) = (region.to_owned(), account.to_owned());
    match resource.split('/').collect::<Vec<_>>()[..] {
        ["catalog"] => Ok(CatalogArn::Glue { region, account }),
        ["catalog", "s3tablescatalog", bucket] if !bucket.is_empty() => {
            Ok(CatalogArn::S3Tables { region, account, bucket: bucket.to_owned() })
        }
        _ => Err(bad()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(json: &str) -> IcebergDestination {
        destination(&serde_json::from_str(json).unwrap()).unwrap()
    }

    #[test]
    fn a_single_table_stream_imports_its_settings() {
        let d = read(
            r#"{"IcebergDestinationConfiguration": {
                "DestinationTableConfigurationList": [{"DestinationDatabaseName": "mcp", "DestinationTableName": "events",
                    "S3ErrorOutputPrefix": "errors/"}],
                "CatalogConfiguration": {"CatalogARN": "arn:aws:glue:us-east-1:123456789012:catalog",
                    "WarehouseLocation": "s3://lake/warehouse"},
                "BufferingHints": {"SizeInMBs": 64, "IntervalInSeconds": 0},
                "S3BackupMode": "FailedDataOnly", "AppendOnly": true,
                "S3Configuration": {"BucketARN": "arn:aws:s3:::firehose-errors", "RoleARN": "arn:aws:iam::1:role/r"},
                "RoleARN": "arn:aws:iam::1:role/r"}}"#,
        );
        let (i, problems) = import(&d);
        assert_eq!(problems, vec![]);
        assert_eq!(i.table.as_deref(), Some("mcp.events"));
        assert_eq!((i.buffer_size_mib, i.buffer_interval_seconds), (Some(64), Some(1)));
        assert_eq!(i.error_bucket.as_deref(), Some("firehose-errors"));
        assert_eq!(i.error_prefix.as_deref(), Some("errors/"));
        assert_eq!(i.catalog, Some(CatalogArn::Glue { region: "us-east-1".into(), account: "123456789012".into() }));
        assert_eq!(i.warehouse.as_deref(), Some("s3://lake/warehouse"));
        assert!(i.warnings.iter().any(|w| w.starts_with("RoleARN")), "{:?}", i.warnings);
    }

    #[test]
    fn a_routed_stream_takes_its_query_and_s3_tables_catalog() {
        let d = read(
            r#"{"DestinationTableConfigurationList": [
                    {"DestinationDatabaseName": "mcp", "DestinationTableName": "search"},
                    {"DestinationDatabaseName": "mcp", "DestinationTableName": "fetch"}],
                "CatalogConfiguration": {"CatalogARN": "arn:aws:glue:eu-west-1:1:catalog/s3tablescatalog/lake"},
                "ProcessingConfiguration": {"Enabled": true, "Processors": [{"Type": "MetadataExtraction",
                    "Parameters": [{"ParameterName": "MetadataExtractionQuery",
                                    "ParameterValue": "{destinationDatabaseName: \"mcp\", destinationTableName: .toolName}"},
                                   {"ParameterName": "JsonParsingEngine", "ParameterValue": "JQ-1.6"}]}]}}"#,
        );
        let (i, problems) = import(&d);
        assert_eq!(problems, vec![]);
        assert_eq!(i.table, None);
        assert!(i.route_query.unwrap().contains(".toolName"));
        assert_eq!(
            i.catalog,
            Some(CatalogArn::S3Tables { region: "eu-west-1".into(), account: "1".into(), bucket: "lake".into() })
        );
    }

    #[test]
    fn a_lambda_processor_routes_by_otf_metadata() {
        let d = read(
            r#"{"DestinationTableConfigurationList": [
                    {"DestinationDatabaseName": "mcp", "DestinationTableName": "search"},
                    {"DestinationDatabaseName": "mcp", "DestinationTableName": "fetch"}],
                "CatalogConfiguration": {"CatalogARN": "arn:aws:glue:eu-west-1:1:catalog"},
                "ProcessingConfiguration": {"Enabled": true, "Processors": [{"Type": "Lambda", "Parameters": [
                    {"ParameterName": "LambdaArn", "ParameterValue": "arn:aws:lambda:eu-west-1:1:function:route:$LATEST"},
                    {"ParameterName": "NumberOfRetries", "ParameterValue": "5"},
                    {"ParameterName": "BufferSizeInMBs", "ParameterValue": "0.5"}]}]}}"#,
        );
        let (i, problems) = import(&d);
        assert_eq!(problems, vec![], "two tables and a Lambda: the Lambda says which record goes where");
        let l = i.lambda.unwrap();
        assert_eq!(
            (l.arn.as_str(), l.retries, l.buffer_size_mib),
            ("arn:aws:lambda:eu-west-1:1:function:route:$LATEST", 5, 0.5)
        );
        let bad = read(
            r#"{"DestinationTableConfigurationList": [{"DestinationDatabaseName": "mcp", "DestinationTableName": "a"}],
                "ProcessingConfiguration": {"Processors": [{"Type": "Lambda", "Parameters": [
                    {"ParameterName": "LambdaArn", "ParameterValue": "arn:aws:lambda:eu-west-1:1:function:f"},
                    {"ParameterName": "NumberOfRetries", "ParameterValue": "many"},
                    {"ParameterName": "BufferSizeInMBs", "ParameterValue": "9"}]}]}}"#,
        );
        let fields: Vec<String> = import(&bad).1.into_iter().map(|p| p.field).collect();
        assert_eq!(
            fields,
            [
                "ProcessingConfiguration.Processors[0].NumberOfRetries",
                "ProcessingConfiguration.Processors[0].BufferSizeInMBs"
            ]
        );
        // Present (Firehose's rule) but not a function's ARN (weir's): named once.
        let not_arn = read(
            r#"{"DestinationTableConfigurationList": [{"DestinationDatabaseName": "mcp", "DestinationTableName": "a"}],
                "ProcessingConfiguration": {"Processors": [{"Type": "Lambda", "Parameters": [
                    {"ParameterName": "LambdaArn", "ParameterValue": "route"}]}]}}"#,
        );
        let problems: Vec<(String, String)> = import(&not_arn).1.into_iter().map(|p| (p.field, p.reason)).collect();
        assert_eq!(
            problems,
            [(
                "ProcessingConfiguration.Processors[0].LambdaArn".to_owned(),
                "\"route\" is not a Lambda function's ARN".to_owned()
            )]
        );
    }

    #[test]
    fn every_field_weir_cannot_serve_is_named() {
        let d = read(
            r#"{"DestinationTableConfigurationList": [
                    {"DestinationDatabaseName": "mcp", "DestinationTableName": "a", "UniqueKeys": ["id"], "S3ErrorOutputPrefix": "x/"},
                    {"DestinationDatabaseName": "mcp", "DestinationTableName": "b", "S3ErrorOutputPrefix": "y/"}],
                "CatalogConfiguration": {"CatalogARN": "arn:aws:s3:::nope"},
                "BufferingHints": {"SizeInMBs": 500},
                "ProcessingConfiguration": {"Processors": [{"Type": "Lambda", "Parameters": []}]},
                "S3BackupMode": "AllData",
                "SchemaEvolutionConfiguration": {"Enabled": true},
                "TableCreationConfiguration": {"Enabled": true}}"#,
        );
        let fields: Vec<String> = import(&d).1.into_iter().map(|p| p.field).collect();
        for want in [
            "ProcessingConfiguration.Processors[0].LambdaArn",
            "DestinationTableConfigurationList[0].UniqueKeys",
            "DestinationTableConfigurationList",
            "DestinationTableConfigurationList[].S3ErrorOutputPrefix",
            "BufferingHints.SizeInMBs",
            "CatalogConfiguration.CatalogARN",
            "S3BackupMode",
            "SchemaEvolutionConfiguration.Enabled",
            "TableCreationConfiguration.Enabled",
        ] {
            assert!(fields.iter().any(|f| f == want), "{want}: {fields:?}");
        }
        assert_eq!(fields.len(), 9, "{fields:?}");
        let e = destination(&serde_json::json!({"DestinationTableConfigurationList": [], "Bogus": 1})).unwrap_err();
        assert!(e.reason.contains("Bogus"), "{e}");
    }
}
