//! `type = "archiver"`: the archiver consumer from its config section: the Firehose
//! destination (a file or inline), weir's options, the sink and the transform.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context as _, Result, bail};
use weir_archiver::DeliveryMode;
use weir_archiver::Overflow;
use weir_archiver::parquet::{Column, ColumnType};
use weir_archiver::{Archiver, ArchiverOptions};
use weir_archiver::{LambdaTransform, Transformer};
use weir_core::Clock;
use weir_core::ports::FunctionInvoker;
use weir_core::ports::{ObjectSink, StoreLocation};
use weir_firehose::{
    ArchiverSettings, ExtendedS3Destination, from_cloudformation_yaml, from_json, from_toml, validate,
};

use serde::{Deserialize, Serialize};

use crate::plugin::{Context, Plugin};

/// `type = "archiver"`: where objects go, the Firehose destination settings (from an
/// existing delivery stream's file, or inline with Firehose's own field names), and
/// weir's additions.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ArchiverSection {
    /// Output directory (one of `directory` and `bucket`).
    #[serde(default)]
    pub directory: Option<PathBuf>,
    /// Output S3 bucket (one of `directory` and `bucket`).
    #[serde(default)]
    pub bucket: Option<String>,
    /// An existing delivery stream's destination: `.json` (API/CLI shape), `.yaml`
    /// (CloudFormation) or `.toml`. One of `firehose` and `destination`.
    #[serde(default)]
    pub firehose: Option<PathBuf>,
    /// Which `AWS::KinesisFirehose::DeliveryStream` resource of a template.
    #[serde(default)]
    pub resource: Option<String>,
    /// The destination inline, with Firehose's field names (`Prefix`, `BufferingHints`, ...).
    #[serde(default)]
    pub destination: Option<serde_json::Value>,
    /// `exactly-once` (default) or `firehose` (at least once).
    #[serde(default)]
    pub mode: ArchiveMode,
    /// `none` (default), `mcp-normalize`, or `lambda` (the destination's Lambda processor).
    #[serde(default)]
    pub transform: TransformKind,
    /// Bytes the open partition buffers may hold together (default 256 MiB): past it the
    /// largest stages are compressed early, then the largest buffers written out.
    #[serde(default = "default_buffer_memory")]
    pub max_buffer_memory: u64,
    /// A local directory where buffers pushed out of memory park their compressed bytes
    /// and keep growing until their size or interval hint (default: none, they are
    /// written out early as smaller objects). Nothing there is acknowledged before it
    /// is in the object store; leftovers of a crash are deleted at start.
    #[serde(default)]
    pub spill_directory: Option<PathBuf>,
    /// Optional cap on data partitions open at once (default: none; Firehose has 500).
    #[serde(default)]
    pub max_active_partitions: Option<usize>,
    /// Past `max_active_partitions`: `flush-oldest` (default) or `error` (Firehose: records of new partitions go to the error output).
    #[serde(default)]
    pub overflow: OverflowPolicy,
    /// Bytes waiting for the store before the archiver refuses new records.
    #[serde(default = "default_max_backlog")]
    pub max_backlog_bytes: u64,
    /// GZIP level 0-9.
    #[serde(default = "default_level")]
    pub compression_level: u32,
    /// The table of Parquet objects (`DataFormatConversionConfiguration` in the
    /// destination), in place of Firehose's Glue table: `[{ name = "tenant_id", type =
    /// "string" }, ...]` with Hive type names (`string`, `int`, `bigint`, `double`,
    /// `boolean`, `timestamp`, `date`, `decimal(p,s)`, `array<T>`, `struct<a:T,...>`,
    /// `map<string,T>`). Without it, the Glue table the destination's
    /// `SchemaConfiguration` names is read when the worker starts.
    #[serde(default)]
    pub columns: Option<Vec<ColumnSpec>>,
    /// The columns read from the Glue table when the worker started.
    #[serde(skip)]
    pub glue_columns: Option<Vec<Column>>,
    /// Put in front of `Prefix` and `ErrorOutputPrefix` (replays: `weir replay --archive-prefix`).
    #[serde(skip)]
    pub prefix_prepend: Option<String>,
}

/// One column of a Parquet table.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ColumnSpec {
    /// Column name (Parquet field name).
    pub name: String,
    /// Hive type name.
    #[serde(rename = "type")]
    pub ty: String,
}

/// The columns of a table from name and Hive type pairs; `field` names where they
/// came from in errors (every problem is listed).
pub fn parse_columns<'a>(specs: impl IntoIterator<Item = (&'a str, &'a str)>, field: &str) -> Result<Vec<Column>> {
    let (mut columns, mut problems, mut names) = (Vec::<Column>::new(), Vec::new(), Vec::<&str>::new());
    for (i, (name, ty)) in specs.into_iter().enumerate() {
        if name.is_empty() {
            problems.push(format!("{field}[{i}].name: empty"));
        } else if names.iter().any(|n| n.eq_ignore_ascii_case(name)) {
            problems.push(format!("{field}[{i}].name: {name:?} appears twice (names match case-insensitively)"));
        }
        names.push(name);
        match ColumnType::parse(ty) {
            Ok(t) => columns.push(Column { name: name.to_owned(), ty: t }),
            Err(e) => problems.push(format!("{field}[{i}].type: {e}")),
        }
    }
    if columns.is_empty() && problems.is_empty() {
        problems.push(format!("{field}: no columns"));
    }
    if problems.is_empty() { Ok(columns) } else { bail!("{}", problems.join("; ")) }
}

/// Delivery guarantee.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ArchiveMode {
    /// Each record in exactly one object.
    #[default]
    ExactlyOnce,
    /// Firehose's at-least-once.
    Firehose,
}

/// The transform stage.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TransformKind {
    /// Records pass unchanged.
    #[default]
    None,
    /// The built-in MCP normaliser.
    McpNormalize,
    /// The destination's `Lambda` processor.
    Lambda,
}

/// Past `max_active_partitions`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OverflowPolicy {
    /// Seal the oldest buffer.
    #[default]
    FlushOldest,
    /// Error output, as Firehose does.
    Error,
}

impl ArchiverSection {
    /// Where objects go: exactly one of `directory` and `bucket`.
    pub fn store(&self) -> Result<StoreLocation> {
        Ok(StoreLocation::from_fields(self.directory.as_deref(), self.bucket.as_deref())?)
    }
}

fn default_buffer_memory() -> u64 {
    weir_archiver::DEFAULT_BUFFER_MEMORY as u64
}
fn default_max_backlog() -> u64 {
    256 << 20
}
fn default_level() -> u32 {
    6
}

/// Reads a destination file by its extension.
pub fn read_destination(file: &Path, resource: Option<&str>) -> Result<ExtendedS3Destination> {
    let text = std::fs::read_to_string(file).with_context(|| format!("cannot read {}", file.display()))?;
    let ext = file.extension().and_then(|e| e.to_str()).unwrap_or_default();
    match ext {
        "json" => from_json(&text),
        "yaml" | "yml" => from_cloudformation_yaml(&text, resource),
        "toml" => from_toml(&text),
        other => bail!("{}: unknown extension {other:?}: use .json, .yaml, .yml or .toml", file.display()),
    }
    .with_context(|| format!("{} is not a Firehose S3 destination", file.display()))
}

/// Validated settings of a section, every problem named.
pub fn settings(a: &ArchiverSection) -> Result<ArchiverSettings> {
    a.store()?;
    let mut destination = match (&a.firehose, &a.destination) {
        (Some(file), None) => read_destination(file, a.resource.as_deref()).context("field `firehose`")?,
        (None, Some(inline)) => {
            serde_json::from_value(inline.clone()).map_err(|e| anyhow::anyhow!("field `destination`: {e}"))?
        }
        _ => bail!("needs exactly one of `firehose` (a destination file) and `destination` (inline)"),
    };
    if let Some(p) = &a.prefix_prepend {
        destination.prefix = Some(format!("{p}{}", destination.prefix.clone().unwrap_or_default()));
        destination.error_output_prefix = destination.error_output_prefix.clone().map(|e| format!("{p}{e}"));
    }
    let settings = validate(&destination).map_err(|problems| {
        let list: Vec<String> = problems.iter().map(|p| p.to_string()).collect();
        anyhow::anyhow!("destination: {}", list.join("; "))
    })?;
    let mut settings = settings;
    match (&a.columns, settings.conversion.as_mut()) {
        (Some(_), None) => {
            bail!(
                "field `columns`: only used with DataFormatConversionConfiguration (Parquet output) in the destination"
            )
        }
        (Some(specs), Some(conversion)) => {
            let pairs = specs.iter().map(|c| (c.name.as_str(), c.ty.as_str()));
            conversion.columns = Some(parse_columns(pairs, "columns")?);
        }
        (None, Some(conversion)) if a.glue_columns.is_some() => conversion.columns = a.glue_columns.clone(),
        (None, Some(conversion)) if conversion.glue_table().is_none() => bail!(
            "DataFormatConversionConfiguration: set `columns` in the archiver section, or name a Glue table (SchemaConfiguration.DatabaseName and TableName)"
        ),
        _ => {}
    }
    if a.transform == TransformKind::Lambda && settings.lambda.is_none() {
        bail!("field `transform`: \"lambda\" needs a Lambda processor in the destination's ProcessingConfiguration");
    }
    if a.transform != TransformKind::Lambda && settings.lambda.is_some() {
        bail!("field `transform`: the destination has a Lambda processor; set transform = \"lambda\" to use it");
    }
    if a.compression_level > 9 {
        bail!("field `compression_level`: {} is outside 0-9", a.compression_level);
    }
    if a.max_active_partitions == Some(0) {
        bail!("field `max_active_partitions`: must be positive");
    }
    if a.max_buffer_memory < 1 << 20 {
        bail!("field `max_buffer_memory`: at least 1 MiB (1048576); it bounds every open partition buffer together");
    }
    Ok(settings)
}

/// Warnings `weir config check` prints for a section.
pub fn warnings(a: &ArchiverSection) -> Result<Vec<String>> {
    let s = settings(a)?;
    let mut out = s.warnings.clone();
    if a.transform != TransformKind::None {
        // The transform is weir's, outside the destination: the validator could not see
        // that it ends records with a newline.
        out.retain(|w| !w.contains("records_without_delimiter_total"));
    }
    if a.transform == TransformKind::McpNormalize && s.append_delimiter {
        out.push(
            "mcp-normalize already ends every record with a newline; AppendDelimiterToRecord adds a second one (blank lines)"
                .into(),
        );
    }
    Ok(out)
}

/// Whether `entry` is an archiver in `exactly-once` mode (its intents take room in the
/// leases; see `config::lease_size`). `false` for sections that do not parse (the check
/// reports those).
pub fn is_exactly_once(entry: &crate::config::ConsumerEntry) -> bool {
    entry.kind == "archiver"
        && crate::plugin::parse::<ArchiverSection>(&entry.settings, "")
            .is_ok_and(|a| a.mode == ArchiveMode::ExactlyOnce)
}

/// The consumer that writes an archiver's source records (`S3BackupMode = Enabled`): an
/// archiver named `<name>-backup` with no transform and no partitioning, into the
/// backup's `BucketARN` (or the archiver's own bucket or directory), with the
/// backup's prefixes, buffering hints and compression and the archiver's mode. Its own
/// name keys its own checkpoints and intents, so it is exactly once on its own.
/// `None` for an archiver without a backup, and for sections that do not parse (the
/// check reports those). Registered as the `archiver` kind's companions.
pub fn backup_entry(entry: &crate::config::ConsumerEntry) -> Option<crate::config::ConsumerEntry> {
    let a: ArchiverSection = crate::plugin::parse(&entry.settings, "").ok()?;
    let destination = settings(&a).ok()?.backup?;
    let mut fields = serde_json::Map::new();
    match (&a.bucket, destination.bucket_arn.as_ref().and_then(|v| v.as_str())) {
        (Some(_), Some(arn)) if arn.starts_with("arn:") => {
            let bucket = arn.rsplit(':').next().unwrap_or_default();
            fields.insert("bucket".into(), bucket.into());
        }
        (Some(bucket), _) => {
            fields.insert("bucket".into(), bucket.clone().into());
        }
        (None, _) => {
            fields.insert("directory".into(), serde_json::to_value(&a.directory).ok()?);
        }
    }
    fields.insert("mode".into(), serde_json::to_value(a.mode).ok()?);
    let mut d = serde_json::Map::new();
    d.insert("Prefix".into(), destination.prefix.unwrap_or_default().into());
    if let Some(e) = destination.error_output_prefix {
        d.insert("ErrorOutputPrefix".into(), e.into());
    }
    let hints = &destination.buffering_hints;
    d.insert(
        "BufferingHints".into(),
        serde_json::json!({"SizeInMBs": hints.size_in_mbs.unwrap_or(5), "IntervalInSeconds": hints.interval_in_seconds.unwrap_or(300)}),
    );
    d.insert(
        "CompressionFormat".into(),
        destination.compression_format.unwrap_or_else(|| "UNCOMPRESSED".into()).into(),
    );
    if let Some(tz) = destination.custom_time_zone {
        d.insert("CustomTimeZone".into(), tz.into());
    }
    fields.insert("destination".into(), serde_json::Value::Object(d));
    let mut backup = crate::config::ConsumerEntry::new("archiver", &format!("{}-backup", entry.name), fields.into());
    backup.streams = entry.streams.clone();
    Some(backup)
}

/// The columns of the Glue table the destination names, when Parquet output has no
/// `columns` list; read once at start, and a clear error if they cannot be read.
async fn glue_columns(a: &ArchiverSection, ctx: &Context) -> Result<Option<Vec<Column>>> {
    let s = settings(a)?;
    let Some(c) = s.conversion.as_ref().filter(|c| c.columns.is_none()) else { return Ok(None) };
    let Some((database, table)) = c.glue_table() else { return Ok(None) };
    let t = weir_aws::glue::GlueTable {
        catalog_id: c.table.catalog_id.clone(),
        database: database.to_owned(),
        table: table.to_owned(),
        version_id: c.table.version_id.clone(),
    };
    let client = ctx.aws_clients().glue(c.table.region.as_deref()).await;
    let pairs = weir_aws::glue::table_columns(&client, &t)
        .await
        .with_context(|| format!("field `{}`: the table of DataFormatConversionConfiguration", ctx.at()))?;
    let columns = parse_columns(
        pairs.iter().map(|(n, t)| (n.as_str(), t.as_str())),
        &format!("Glue table {database}.{table} columns"),
    )?;
    tracing::info!(consumer = ctx.name(), database, table, columns = columns.len(), "read the Parquet table from Glue");
    Ok(Some(columns))
}

/// Builds the consumer named `name`.
pub fn build(
    name: &str,
    a: &ArchiverSection,
    sink: Arc<dyn ObjectSink>,
    clock: Arc<dyn Clock>,
    lambda: Option<Arc<dyn FunctionInvoker>>,
    stream_arn: &str,
    region: &str,
) -> Result<Archiver> {
    let settings = settings(a)?;
    let mut options = ArchiverOptions::new(name, settings.clone());
    options.mode = match a.mode {
        ArchiveMode::ExactlyOnce => DeliveryMode::ExactlyOnce,
        ArchiveMode::Firehose => DeliveryMode::Firehose,
    };
    options.overflow = match a.overflow {
        OverflowPolicy::FlushOldest => Overflow::FlushOldest,
        OverflowPolicy::Error => Overflow::Reject,
    };
    options.max_active_partitions = a.max_active_partitions;
    options.max_buffer_memory = usize::try_from(a.max_buffer_memory).unwrap_or(usize::MAX);
    options.spill_directory = a.spill_directory.clone();
    options.max_backlog_bytes = a.max_backlog_bytes;
    options.compression_level = a.compression_level;
    options.transformer = match a.transform {
        TransformKind::None => Transformer::None,
        TransformKind::McpNormalize => Transformer::McpNormalize,
        TransformKind::Lambda => {
            let invoker = lambda.context("transform = \"lambda\" needs AWS access")?;
            let lambda_settings = settings.lambda.clone().context("no Lambda processor")?;
            Transformer::Lambda(LambdaTransform {
                invoker,
                settings: lambda_settings,
                delivery_arn: format!("arn:weir:archiver:{name}"),
                source_arn: stream_arn.to_owned(),
                region: region.to_owned(),
            })
        }
    };
    Ok(Archiver::new(options, sink, clock)?)
}

impl Plugin for Archiver {
    type Config = ArchiverSection;
    const ABOUT: &'static str = "Firehose-compatible S3 or directory delivery, exactly once";

    fn check(a: &ArchiverSection, at: &str) -> Result<Vec<String>> {
        warnings(a).map_err(|e| anyhow::anyhow!("field `{at}`: {e:#}"))
    }

    async fn build(mut a: ArchiverSection, ctx: &Context) -> Result<Self> {
        a.prefix_prepend = ctx.archive_prefix().map(str::to_owned);
        a.glue_columns = glue_columns(&a, ctx).await?;
        let sink = ctx.object_sink(ctx.at(), &a.store()?).await?;
        let (lambda, region, arn) = if a.transform == TransformKind::Lambda {
            (Some(ctx.function_invoker().await), ctx.region().await, ctx.stream_arn().await)
        } else {
            (None, String::new(), String::new())
        };
        let archiver = build(ctx.name(), &a, sink, ctx.clock(), lambda, &arn, &region)?;
        let backlog = archiver.backlog();
        let name = ctx.name().to_owned();
        ctx.status_line(move || {
            let (objects, bytes) = backlog.get();
            format!("archiver {name}: {objects} objects ({bytes} bytes) waiting for the store")
        });
        Ok(archiver)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn section(extra: &str, conversion: bool) -> Result<ArchiverSettings> {
        let fixtures = concat!(env!("CARGO_MANIFEST_DIR"), "/../../crates/weir-firehose/tests/fixtures");
        let file = if conversion { "parquet-destination.json" } else { "mcp-destination.json" };
        let text = format!("directory = \"out\"\nfirehose = \"{fixtures}/{file}\"\n{extra}");
        let a: ArchiverSection = toml::from_str(&text).map_err(|e| anyhow::anyhow!("{e}"))?;
        settings(&a)
    }

    #[test]
    fn parquet_columns_are_read_and_every_problem_named() {
        let ok = section(
            r#"columns = [{ name = "tenant_id", type = "string" }, { name = "ts", type = "timestamp" }, { name = "args", type = "map<string,string>" }]"#,
            true,
        )
        .unwrap();
        let columns = ok.conversion.unwrap().columns.unwrap();
        assert_eq!(columns.len(), 3);
        assert_eq!(columns[2].ty, ColumnType::Map(Box::new(ColumnType::String)));

        let bad = section(
            r#"columns = [{ name = "a", type = "strng" }, { name = "A", type = "int" }, { name = "b", type = "decimal(50,1)" }]"#,
            true,
        )
        .unwrap_err()
        .to_string();
        assert!(bad.contains("columns[0].type: type \"strng\""), "{bad}");
        assert!(bad.contains("columns[1].name: \"A\" appears twice"), "{bad}");
        assert!(bad.contains("columns[2].type"), "{bad}");

        let unused = section(r#"columns = [{ name = "a", type = "string" }]"#, false).unwrap_err().to_string();
        assert!(unused.contains("field `columns`: only used with DataFormatConversionConfiguration"), "{unused}");
    }
}
