//! weir-firehose: Amazon Data Firehose's configuration, as users already have it, for
//! every weir destination that reproduces one (the S3 archiver; the Iceberg destination
//! shares its processors and Lambda settings).
//!
//! Firehose's `ExtendedS3DestinationConfiguration` is read from the API / CLI JSON, a
//! CloudFormation `AWS::KinesisFirehose::DeliveryStream` resource in YAML (intrinsic
//! functions such as `!GetAtt` are kept as text), or the same shape in TOML. Field names
//! are Firehose's. Fields weir does not use (roles, logging options, backup mode, …) are
//! accepted and reported as ignored; misspelt fields are errors.
//!
//! [`validate`] applies Firehose's ranges and rules and returns every problem at once,
//! each with its field path. [`prefix`] evaluates `Prefix` / `ErrorOutputPrefix`
//! expressions, [`java_time`] their Java `DateTimeFormatter` patterns, and
//! [`conversion`] reads `DataFormatConversionConfiguration` into the Parquet options of
//! `weir-parquet`. Nothing here does I/O.
#![warn(missing_docs)]

use std::collections::BTreeMap;
use std::time::Duration;

use chrono_tz::Tz;
use serde::Deserialize;
use serde_json::Value;

pub mod conversion;
pub mod java_time;
pub mod prefix;
mod processing;

use prefix::Prefixes;
pub use processing::{LambdaSettings, Parameter, Processing, Processor};

/// `BufferingHints`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BufferingHints {
    /// 1–128 MiB (64–128 with dynamic partitioning), before compression. Default 5.
    #[serde(rename = "SizeInMBs")]
    pub size_in_mbs: Option<i64>,
    /// 0–900 s. Default 300.
    #[serde(rename = "IntervalInSeconds")]
    pub interval_in_seconds: Option<i64>,
}

/// `DynamicPartitioningConfiguration`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DynamicPartitioning {
    /// Whether records are partitioned by keys.
    #[serde(rename = "Enabled")]
    pub enabled: Option<bool>,
    /// How long to retry delivery before the error output.
    #[serde(rename = "RetryOptions")]
    pub retry_options: Option<RetryOptions>,
}

/// `RetryOptions`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetryOptions {
    /// 0–7200 s. Default 300.
    #[serde(rename = "DurationInSeconds")]
    pub duration_in_seconds: Option<i64>,
}

/// `ExtendedS3DestinationConfiguration`. Unknown top-level fields are collected in
/// `ignored` (serde cannot deny them next to `flatten`) and [`validate`] rejects every
/// one that is not in [`IGNORED_FIELDS`].
#[derive(Debug, Clone, Default, Deserialize)]
pub struct ExtendedS3Destination {
    /// `arn:aws:s3:::bucket` (or an intrinsic function in CloudFormation).
    #[serde(rename = "BucketARN")]
    pub bucket_arn: Option<Value>,
    /// `Prefix`.
    #[serde(rename = "Prefix")]
    pub prefix: Option<String>,
    /// `ErrorOutputPrefix`.
    #[serde(rename = "ErrorOutputPrefix")]
    pub error_output_prefix: Option<String>,
    /// `BufferingHints`.
    #[serde(rename = "BufferingHints", default)]
    pub buffering_hints: BufferingHints,
    /// `UNCOMPRESSED`, `GZIP`, `ZIP`, `Snappy`, `HADOOP_SNAPPY`.
    #[serde(rename = "CompressionFormat")]
    pub compression_format: Option<String>,
    /// `CustomTimeZone` (IANA name).
    #[serde(rename = "CustomTimeZone")]
    pub custom_time_zone: Option<String>,
    /// `FileExtension` (starts with '.').
    #[serde(rename = "FileExtension")]
    pub file_extension: Option<String>,
    /// `DynamicPartitioningConfiguration`.
    #[serde(rename = "DynamicPartitioningConfiguration", default)]
    pub dynamic_partitioning: DynamicPartitioning,
    /// `ProcessingConfiguration`.
    #[serde(rename = "ProcessingConfiguration", default)]
    pub processing: Processing,
    /// `S3BackupMode`: `Enabled` writes the source records to a second place too.
    #[serde(rename = "S3BackupMode")]
    pub s3_backup_mode: Option<String>,
    /// `S3BackupConfiguration`: where source records go, with their own buffering
    /// hints and compression.
    #[serde(rename = "S3BackupConfiguration")]
    pub s3_backup_configuration: Option<BackupConfiguration>,
    /// `DataFormatConversionConfiguration`: Parquet output.
    #[serde(rename = "DataFormatConversionConfiguration")]
    pub data_format_conversion: Option<conversion::DataFormatConversion>,
    /// Accepted and ignored (weir uses its own credentials, logging and encryption
    /// settings).
    #[serde(flatten)]
    pub ignored: BTreeMap<String, Value>,
}

/// Fields of Firehose's API that weir accepts but does not use.
pub const IGNORED_FIELDS: &[&str] = &["RoleARN", "EncryptionConfiguration", "CloudWatchLoggingOptions"];

/// Firehose's `S3DestinationConfiguration`: an S3 destination's `S3BackupConfiguration`
/// and the Iceberg destination's `S3Configuration` (where it writes what it cannot
/// deliver).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BackupConfiguration {
    /// `BucketARN`: another bucket (default: the archiver's own).
    #[serde(rename = "BucketARN")]
    pub bucket_arn: Option<Value>,
    /// `Prefix` (timestamps only: source records have no partition keys).
    #[serde(rename = "Prefix")]
    pub prefix: Option<String>,
    /// `ErrorOutputPrefix`.
    #[serde(rename = "ErrorOutputPrefix")]
    pub error_output_prefix: Option<String>,
    /// `BufferingHints` (default 5 MiB / 300 s).
    #[serde(rename = "BufferingHints")]
    pub buffering_hints: Option<BufferingHints>,
    /// `CompressionFormat`.
    #[serde(rename = "CompressionFormat")]
    pub compression_format: Option<String>,
    /// Accepted and ignored, as on the destination.
    #[serde(rename = "RoleARN")]
    pub role_arn: Option<Value>,
    /// Accepted and ignored.
    #[serde(rename = "EncryptionConfiguration")]
    pub encryption_configuration: Option<Value>,
    /// Accepted and ignored.
    #[serde(rename = "CloudWatchLoggingOptions")]
    pub cloud_watch_logging_options: Option<Value>,
}

impl BackupConfiguration {
    /// The backup as a destination of its own: source records as they came, no
    /// processing, no partitioning, the main destination's time zone.
    pub fn destination(&self, time_zone: Option<&str>) -> ExtendedS3Destination {
        ExtendedS3Destination {
            bucket_arn: self.bucket_arn.clone(),
            prefix: self.prefix.clone(),
            error_output_prefix: self.error_output_prefix.clone(),
            buffering_hints: self.buffering_hints.clone().unwrap_or_default(),
            compression_format: self.compression_format.clone(),
            custom_time_zone: time_zone.map(str::to_owned),
            ..ExtendedS3Destination::default()
        }
    }
}

/// A problem with a configuration, with the field it concerns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// Path such as `BufferingHints.SizeInMBs`.
    pub field: String,
    /// What is wrong.
    pub reason: String,
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field, self.reason)
    }
}

/// Why a file could not be read as a destination configuration.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// Not parseable in its syntax.
    #[error("cannot parse {syntax}: {message}")]
    Syntax {
        /// JSON, YAML or TOML.
        syntax: &'static str,
        /// The parser's message (with line and column).
        message: String,
    },
    /// Parsed, but not the expected shape.
    #[error("{0}")]
    Shape(String),
}

fn shape(e: impl std::fmt::Display) -> ReadError {
    ReadError::Shape(e.to_string())
}

/// Reads the API / CLI JSON: either the destination object itself, or an object with an
/// `ExtendedS3DestinationConfiguration` member (as in `create-delivery-stream` input).
pub fn from_json(text: &str) -> Result<ExtendedS3Destination, ReadError> {
    let v: Value =
        serde_json::from_str(text).map_err(|e| ReadError::Syntax { syntax: "JSON", message: e.to_string() })?;
    let v = match v.get("ExtendedS3DestinationConfiguration") {
        Some(inner) => inner.clone(),
        None => v,
    };
    serde_json::from_value(v).map_err(shape)
}

/// Reads the same shape from TOML (weir's native form).
pub fn from_toml(text: &str) -> Result<ExtendedS3Destination, ReadError> {
    let v: Value = toml::from_str(text).map_err(|e| ReadError::Syntax { syntax: "TOML", message: e.to_string() })?;
    serde_json::from_value(v).map_err(shape)
}

/// Converts YAML to JSON, keeping CloudFormation intrinsic functions as text
/// (`!GetAtt EventsBucket.Arn` → `"!GetAtt EventsBucket.Arn"`).
fn yaml_to_json(v: serde_norway::Value) -> Value {
    use serde_norway::Value as Y;
    match v {
        Y::Null => Value::Null,
        Y::Bool(b) => Value::Bool(b),
        Y::Number(n) => serde_json::to_value(&n).unwrap_or(Value::Null),
        Y::String(s) => Value::String(s),
        Y::Sequence(seq) => Value::Array(seq.into_iter().map(yaml_to_json).collect()),
        Y::Mapping(map) => Value::Object(
            map.into_iter()
                .map(|(k, v)| {
                    let key = match k {
                        Y::String(s) => s,
                        other => serde_norway::to_string(&other).unwrap_or_default().trim().to_owned(),
                    };
                    (key, yaml_to_json(v))
                })
                .collect(),
        ),
        Y::Tagged(t) => {
            let inner = match yaml_to_json(t.value) {
                Value::String(s) => s,
                other => other.to_string(),
            };
            Value::String(format!("{} {inner}", t.tag))
        }
    }
}

/// Reads a CloudFormation template (or a single resource) in YAML: the `Properties` of
/// the first `AWS::KinesisFirehose::DeliveryStream` resource, or of `name` when given
/// (intrinsic functions kept as text).
pub fn cloudformation_properties(text: &str, name: Option<&str>) -> Result<Value, ReadError> {
    let y: serde_norway::Value =
        serde_norway::from_str(text).map_err(|e| ReadError::Syntax { syntax: "YAML", message: e.to_string() })?;
    let v = yaml_to_json(y);
    let resources = v.get("Resources").and_then(Value::as_object);
    let resource = match resources {
        Some(res) => res
            .iter()
            .filter(|(n, r)| {
                r.get("Type").and_then(Value::as_str) == Some("AWS::KinesisFirehose::DeliveryStream")
                    && name.is_none_or(|want| want == n.as_str())
            })
            .map(|(_, r)| r.clone())
            .next()
            .ok_or_else(|| {
                ReadError::Shape(match name {
                    Some(n) => format!("no AWS::KinesisFirehose::DeliveryStream resource named {n}"),
                    None => "no AWS::KinesisFirehose::DeliveryStream resource in Resources".into(),
                })
            })?,
        None => v,
    };
    resource.get("Properties").cloned().ok_or_else(|| ReadError::Shape("the delivery stream has no Properties".into()))
}

/// Reads a CloudFormation template (or a single resource) in YAML: the first
/// `AWS::KinesisFirehose::DeliveryStream` resource's `ExtendedS3DestinationConfiguration`,
/// or `name` when given.
pub fn from_cloudformation_yaml(text: &str, name: Option<&str>) -> Result<ExtendedS3Destination, ReadError> {
    let destination =
        cloudformation_properties(text, name)?.get("ExtendedS3DestinationConfiguration").cloned().ok_or_else(|| {
            ReadError::Shape("the delivery stream has no Properties.ExtendedS3DestinationConfiguration".into())
        })?;
    serde_json::from_value(destination).map_err(shape)
}

/// Compression of delivered objects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    /// No compression.
    Uncompressed,
    /// GZIP (`.gz`), compressed as buffers fill.
    Gzip,
    /// ZIP (`.zip`): one entry, compressed when the object is sealed.
    Zip,
    /// Snappy, framed (`.snappy`), compressed when the object is sealed.
    Snappy,
    /// Hadoop-compatible Snappy (`.hsnappy`), compressed when the object is sealed.
    HadoopSnappy,
    /// Apache Parquet (`.parquet`, `DataFormatConversionConfiguration`): the records
    /// converted when the object is sealed (`weir-parquet`).
    Parquet,
}

impl Compression {
    /// The format a sealed object is compressed into whole, for the formats that are
    /// not written as buffers fill.
    pub fn whole(self) -> Option<weir_core::object_format::ObjectFormat> {
        use weir_core::object_format::ObjectFormat;
        match self {
            Compression::Uncompressed | Compression::Gzip | Compression::Parquet => None,
            Compression::Zip => Some(ObjectFormat::Zip),
            Compression::Snappy => Some(ObjectFormat::Snappy),
            Compression::HadoopSnappy => Some(ObjectFormat::HadoopSnappy),
        }
    }

    /// Firehose's file extension for the format.
    pub fn extension(self) -> &'static str {
        match self {
            Compression::Uncompressed => "",
            Compression::Gzip => ".gz",
            Compression::Zip => ".zip",
            Compression::Snappy => ".snappy",
            Compression::HadoopSnappy => ".hsnappy",
            Compression::Parquet => ".parquet",
        }
    }
}

/// How an aggregated JSON or delimited record is split (`RecordDeAggregation`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SubRecords {
    /// Concatenated JSON objects.
    Json,
    /// Records separated by a delimiter.
    Delimited(Vec<u8>),
}

/// CloudWatch Logs records (`Decompression` with `CompressionFormat` GZIP, and
/// optionally `CloudWatchLogProcessing`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decompression {
    /// `DataMessageExtraction`: one record per log event's `message`.
    pub message_extraction: bool,
}

/// A validated destination.
#[derive(Debug, Clone)]
pub struct ArchiverSettings {
    /// Data and error prefixes.
    pub prefixes: Prefixes,
    /// Flush a partition's buffer at this many bytes (before compression).
    pub buffer_bytes: u64,
    /// Flush a partition's buffer this long after its first record.
    pub buffer_interval: Duration,
    /// Data object format (`Parquet` with a format conversion).
    pub compression: Compression,
    /// Error object format: the data format, or `UNCOMPRESSED` JSON beside Parquet.
    pub error_compression: Compression,
    /// `DataFormatConversionConfiguration`, when enabled.
    pub conversion: Option<conversion::Conversion>,
    /// `S3BackupMode = Enabled`: the source records' destination (validated).
    pub backup: Option<ExtendedS3Destination>,
    /// Object name extension (default from the compression).
    pub file_extension: String,
    /// `CustomTimeZone`.
    pub time_zone: Tz,
    /// Dynamic partitioning retry window, when enabled.
    pub dynamic_partitioning_retry: Option<Duration>,
    /// `MetadataExtractionQuery` (jq).
    pub metadata_query: Option<String>,
    /// `AppendDelimiterToRecord`.
    pub append_delimiter: bool,
    /// `RecordDeAggregation`.
    pub deaggregation: Option<SubRecords>,
    /// `Decompression` (and `CloudWatchLogProcessing`): CloudWatch Logs records.
    pub decompression: Option<Decompression>,
    /// `Lambda` processor.
    pub lambda: Option<LambdaSettings>,
    /// Not errors, but worth saying (ignored fields, the missing-newline trap).
    pub warnings: Vec<String>,
}

/// A value outside Firehose's range for `field`; `rule` says whose rule the range is.
fn in_range(problems: &mut Vec<Problem>, field: &str, value: i64, (min, max): (i64, i64), rule: &str) {
    if !(min..=max).contains(&value) {
        problems.push(Problem { field: field.into(), reason: format!("{value} is outside {min}–{max} ({rule})") });
    }
}

/// Validates a destination with Firehose's ranges and rules. Returns every problem.
pub fn validate(d: &ExtendedS3Destination) -> Result<ArchiverSettings, Vec<Problem>> {
    let mut problems = Vec::new();
    let mut warnings = Vec::new();
    let problem = |problems: &mut Vec<Problem>, field: &str, reason: String| {
        problems.push(Problem { field: field.into(), reason })
    };
    for key in d.ignored.keys() {
        if IGNORED_FIELDS.contains(&key.as_str()) {
            warnings.push(format!("{key} is accepted and ignored: weir uses its own settings for it"));
        } else {
            problem(
                &mut problems,
                key,
                format!(
                    "unknown field (known: Prefix, ErrorOutputPrefix, BufferingHints, CompressionFormat, CustomTimeZone, FileExtension, DynamicPartitioningConfiguration, ProcessingConfiguration, DataFormatConversionConfiguration, S3BackupMode, S3BackupConfiguration, BucketARN, {})",
                    IGNORED_FIELDS.join(", ")
                ),
            );
        }
    }
    let dp = d.dynamic_partitioning.enabled.unwrap_or(false);
    let size = d.buffering_hints.size_in_mbs.unwrap_or(if dp { 128 } else { 5 });
    let size_rule = if dp {
        "Firehose's range with dynamic partitioning enabled; without it, 1–128"
    } else {
        "Firehose's range for S3 buffering"
    };
    in_range(&mut problems, "BufferingHints.SizeInMBs", size, (if dp { 64 } else { 1 }, 128), size_rule);
    let interval = d.buffering_hints.interval_in_seconds.unwrap_or(300);
    in_range(
        &mut problems,
        "BufferingHints.IntervalInSeconds",
        interval,
        (0, 900),
        "Firehose's range for S3 buffering",
    );
    let retry = d.dynamic_partitioning.retry_options.as_ref().and_then(|r| r.duration_in_seconds).unwrap_or(300);
    in_range(
        &mut problems,
        "DynamicPartitioningConfiguration.RetryOptions.DurationInSeconds",
        retry,
        (0, 7200),
        "Firehose's range for partitioning retries",
    );
    let compression = match d.compression_format.as_deref().unwrap_or("UNCOMPRESSED") {
        "UNCOMPRESSED" => Compression::Uncompressed,
        "GZIP" => Compression::Gzip,
        "ZIP" => Compression::Zip,
        "Snappy" => Compression::Snappy,
        "HADOOP_SNAPPY" => Compression::HadoopSnappy,
        other => {
            problem(
                &mut problems,
                "CompressionFormat",
                format!("{other:?} is not one of UNCOMPRESSED, GZIP, ZIP, Snappy, HADOOP_SNAPPY"),
            );
            Compression::Uncompressed
        }
    };
    let conversion = conversion::validate(d.data_format_conversion.as_ref(), &mut problems, &mut warnings);
    let backup = match (d.s3_backup_mode.as_deref().unwrap_or("Disabled"), &d.s3_backup_configuration) {
        ("Disabled", _) => None,
        ("Enabled", None) => {
            problem(&mut problems, "S3BackupConfiguration", "required with S3BackupMode Enabled".into());
            None
        }
        ("Enabled", Some(b)) => {
            let backup = b.destination(d.custom_time_zone.as_deref());
            match validate(&backup) {
                Ok(s) => {
                    warnings.extend(
                        s.warnings
                            .into_iter()
                            .filter(|w| !w.contains("AppendDelimiterToRecord"))
                            .map(|w| format!("S3BackupConfiguration: {w}")),
                    );
                    Some(backup)
                }
                Err(list) => {
                    for p in list {
                        problems
                            .push(Problem { field: format!("S3BackupConfiguration.{}", p.field), reason: p.reason });
                    }
                    None
                }
            }
        }
        (other, _) => {
            problem(&mut problems, "S3BackupMode", format!("{other:?} is not one of Disabled, Enabled"));
            None
        }
    };
    let error_compression = compression;
    let compression = match &conversion {
        None => compression,
        Some(_) => {
            if compression != Compression::Uncompressed {
                problem(
                    &mut problems,
                    "CompressionFormat",
                    "must be UNCOMPRESSED with DataFormatConversionConfiguration enabled (Parquet compresses inside the file: ParquetSerDe.Compression)".into(),
                );
            }
            Compression::Parquet
        }
    };
    let file_extension = match &d.file_extension {
        Some(ext) => {
            let ok = ext.starts_with('.')
                && ext.len() <= 128
                && ext[1..].chars().all(|c| c.is_ascii_alphanumeric() || "!-_.*'()".contains(c));
            if !ok {
                problem(
                    &mut problems,
                    "FileExtension",
                    format!(
                        "{ext:?} must start with '.' and use only letters, digits and !-_.*'() (at most 128 characters)"
                    ),
                );
            }
            ext.clone()
        }
        None => compression.extension().into(),
    };
    let time_zone = match &d.custom_time_zone {
        None => Tz::UTC,
        Some(name) => name.parse::<Tz>().unwrap_or_else(|_| {
            problem(&mut problems, "CustomTimeZone", format!("{name:?} is not a time zone name such as Asia/Tokyo"));
            Tz::UTC
        }),
    };

    let processing_on = d.processing.enabled.unwrap_or(!d.processing.processors.is_empty());
    let (mut metadata_query, mut append_delimiter, mut deaggregation, mut lambda) = (None, false, None, None);
    let (mut decompression, mut extraction) = (None, None);
    for (i, p) in d.processing.processors.iter().enumerate() {
        let field = format!("ProcessingConfiguration.Processors[{i}]");
        let ps = p.parameters();
        match p.kind.as_str() {
            "MetadataExtraction" => {
                match ps.get("MetadataExtractionQuery") {
                    Some(q) if !q.trim().is_empty() => metadata_query = Some(q.clone()),
                    _ => problem(&mut problems, &field, "MetadataExtraction needs a MetadataExtractionQuery".into()),
                }
                if let Some(engine) = ps.get("JsonParsingEngine").filter(|e| e.as_str() != "JQ-1.6") {
                    problem(
                        &mut problems,
                        &format!("{field}.JsonParsingEngine"),
                        format!("{engine:?}: only JQ-1.6 exists"),
                    );
                }
            }
            "AppendDelimiterToRecord" => append_delimiter = true,
            "Decompression" => match ps.get("CompressionFormat").map(String::as_str) {
                Some("GZIP") | None => decompression = Some(Decompression { message_extraction: false }),
                Some(other) => problem(
                    &mut problems,
                    &format!("{field}.CompressionFormat"),
                    format!("{other:?}: Firehose decompresses GZIP only"),
                ),
            },
            "CloudWatchLogProcessing" => match ps.get("DataMessageExtraction").map(String::as_str) {
                Some("true") => extraction = Some((field.clone(), true)),
                Some("false") | None => extraction = Some((field.clone(), false)),
                Some(other) => problem(
                    &mut problems,
                    &format!("{field}.DataMessageExtraction"),
                    format!("{other:?} is not true or false"),
                ),
            },
            "RecordDeAggregation" => {
                deaggregation = match ps.get("SubRecordType").map(String::as_str) {
                    Some("JSON") | None => Some(SubRecords::Json),
                    Some("DELIMITED") => {
                        use base64::Engine;
                        let delimiter =
                            ps.get("Delimiter").map(|d| base64::engine::general_purpose::STANDARD.decode(d));
                        match delimiter {
                            Some(Ok(d)) if !d.is_empty() => Some(SubRecords::Delimited(d)),
                            _ => {
                                problem(
                                    &mut problems,
                                    &format!("{field}.Delimiter"),
                                    "DELIMITED needs a base64 Delimiter".into(),
                                );
                                None
                            }
                        }
                    }
                    Some(other) => {
                        problem(
                            &mut problems,
                            &format!("{field}.SubRecordType"),
                            format!("{other:?} is not JSON or DELIMITED"),
                        );
                        None
                    }
                };
            }
            "Lambda" => {
                let (settings, found) = LambdaSettings::read(p, &field);
                problems.extend(found);
                lambda = Some(settings);
            }
            other => problem(
                &mut problems,
                &format!("{field}.Type"),
                format!(
                    "{other:?} is not a processor weir runs (MetadataExtraction, AppendDelimiterToRecord, RecordDeAggregation, Decompression, CloudWatchLogProcessing, Lambda)"
                ),
            ),
        }
    }
    match (extraction, &mut decompression) {
        (Some((_, extract)), Some(d)) => d.message_extraction = extract,
        (Some((field, _)), None) => problem(
            &mut problems,
            &field,
            "CloudWatchLogProcessing needs a Decompression processor (CompressionFormat GZIP)".into(),
        ),
        (None, _) => {}
    }
    if !processing_on {
        (metadata_query, append_delimiter, deaggregation, lambda, decompression) = (None, false, None, None, None);
    }
    if dp && metadata_query.is_none() && lambda.is_none() {
        problem(
            &mut problems,
            "DynamicPartitioningConfiguration",
            "enabled, but no MetadataExtraction or Lambda processor provides partition keys".into(),
        );
    }
    if !append_delimiter && lambda.is_none() {
        warnings.push("no AppendDelimiterToRecord processor and no transform: records without a trailing newline are concatenated in one line (counted in weir_archiver_records_without_delimiter_total)".into());
    }
    let prefixes = Prefixes::new(d.prefix.as_deref(), d.error_output_prefix.as_deref(), dp).map_err(|e| {
        problems.push(Problem { field: "Prefix / ErrorOutputPrefix".into(), reason: e.to_string() });
    });
    match prefixes {
        Ok(prefixes) if problems.is_empty() => Ok(ArchiverSettings {
            prefixes,
            buffer_bytes: size as u64 * 1024 * 1024,
            buffer_interval: Duration::from_secs(interval as u64),
            compression,
            error_compression,
            conversion,
            backup,
            file_extension,
            time_zone,
            dynamic_partitioning_retry: dp.then(|| Duration::from_secs(retry as u64)),
            metadata_query,
            append_delimiter,
            deaggregation,
            decompression,
            lambda,
            warnings,
        }),
        _ => Err(problems),
    }
}
