//! `weir config check --firehose FILE`: an existing Firehose destination, checked with
//! Firehose's ranges and weir's rules; every problem and warning is printed.

use std::path::Path;

use anyhow::{Context, Result, bail};
use serde_json::Value;
use weir_firehose::{cloudformation_properties, from_cloudformation_yaml, from_json, from_toml, validate};
use weir_iceberg::firehose::{self, CatalogArn};

pub fn run(file: &Path, resource: Option<&str>) -> Result<()> {
    let text = std::fs::read_to_string(file).with_context(|| format!("cannot read {}", file.display()))?;
    let ext = file.extension().and_then(|e| e.to_str()).unwrap_or_default();
    // An Iceberg destination (Firehose's other destination weir serves)?
    let whole: Option<Value> = match ext {
        "json" => serde_json::from_str(&text).ok(),
        "toml" => toml::from_str(&text).ok(),
        "yaml" | "yml" => cloudformation_properties(&text, resource).ok(),
        _ => None,
    };
    if let Some(v) = whole.filter(firehose::is_iceberg) {
        return iceberg(file, &v);
    }
    let destination = match ext {
        "json" => from_json(&text),
        "yaml" | "yml" => from_cloudformation_yaml(&text, resource),
        "toml" => from_toml(&text),
        other => bail!("{}: unknown extension {other:?}: use .json, .yaml, .yml or .toml", file.display()),
    }
    .with_context(|| format!("{} is not a Firehose S3 destination", file.display()))?;
    match validate(&destination) {
        Ok(settings) => {
            println!(
                "{}: ok (buffer {} MiB / {} s, {:?}, dynamic partitioning {}{}{}{})",
                file.display(),
                settings.buffer_bytes / (1024 * 1024),
                settings.buffer_interval.as_secs(),
                settings.compression,
                if settings.dynamic_partitioning_retry.is_some() { "on" } else { "off" },
                match settings.decompression {
                    None => "",
                    Some(d) if d.message_extraction => ", CloudWatch Logs records: messages extracted",
                    Some(_) => ", CloudWatch Logs records: decompressed",
                },
                match &settings.conversion {
                    None => String::new(),
                    Some(c) => format!(
                        ", {:?} Parquet with {}",
                        c.parquet.compression,
                        match c.glue_table() {
                            Some((db, table)) =>
                                format!("the columns of Glue table {db}.{table}, or the archiver's `columns`"),
                            None => "the archiver's `columns`".into(),
                        }
                    ),
                },
                match &settings.backup {
                    None => String::new(),
                    Some(b) => format!(
                        ", source records backed up under {:?} ({}) by consumer <name>-backup",
                        b.prefix.clone().unwrap_or_default(),
                        b.compression_format.as_deref().unwrap_or("UNCOMPRESSED")
                    ),
                }
            );
            for w in &settings.warnings {
                println!("warning: {w}");
            }
            Ok(())
        }
        Err(problems) => {
            for p in &problems {
                eprintln!("problem: {p}");
            }
            bail!("{}: {} problem(s)", file.display(), problems.len())
        }
    }
}

/// An `IcebergDestinationConfiguration`: what weir takes from it, each field it
/// cannot serve.
fn iceberg(file: &Path, v: &Value) -> Result<()> {
    let d = firehose::destination(v).map_err(|p| anyhow::anyhow!("{}: {p}", file.display()))?;
    let (i, problems) = firehose::import(&d);
    for p in &problems {
        eprintln!("problem: {p}");
    }
    if !problems.is_empty() {
        bail!("{}: {} problem(s)", file.display(), problems.len())
    }
    let default = |t: &Option<String>| t.as_ref().map(|t| format!(" (default {t})")).unwrap_or_default();
    let tables = match (&i.table, &i.route_query, &i.lambda) {
        (Some(t), None, None) => format!("table {t}"),
        (t, Some(q), None) => format!("tables named by {q}{}", default(t)),
        (t, Some(q), Some(_)) => format!("tables named by the Lambda's otfMetadata, else by {q}{}", default(t)),
        (t, None, Some(_)) => format!("tables named by the Lambda's otfMetadata{}", default(t)),
        (None, None, None) => "no table".into(),
    };
    println!(
        "{}: ok as an iceberg consumer's `destination` ({tables}, buffer {} MiB / {} s, error output {})",
        file.display(),
        i.buffer_size_mib.unwrap_or(1),
        i.buffer_interval_seconds.unwrap_or(60),
        match &i.error_bucket {
            Some(b) => format!("s3://{b}/{}", i.error_prefix.as_deref().unwrap_or("iceberg-failed/")),
            None => "not given: set the consumer's `error_output`".into(),
        }
    );
    if let Some(l) = &i.lambda {
        println!(
            "Lambda: {} transforms each batch read ({} retries, {} MiB per invocation; `[aws] lambda_endpoint_url` \
             and credentials apply)",
            weir_core::redact::arn(&l.arn),
            l.retries,
            l.buffer_size_mib
        );
    }
    match &i.catalog {
        Some(CatalogArn::Glue { region, account }) => println!(
            "catalog: the Glue Data Catalog of account {account} in {region} (endpoints and credentials from `[aws]`)"
        ),
        Some(CatalogArn::S3Tables { region, account, bucket }) => println!(
            "catalog: the S3 table bucket {bucket} of account {account} in {region} (through the S3 Tables API; \
             endpoints and credentials from `[aws]`)"
        ),
        None => println!("warning: no CatalogConfiguration: give the consumer a `catalog`"),
    }
    for w in &i.warnings {
        println!("warning: {w}");
    }
    Ok(())
}
