//! `DataFormatConversionConfiguration`: JSON records converted to Parquet, read as
//! Firehose reads its own configuration.
//!
//! Firehose takes the columns from a Glue table (`SchemaConfiguration`). weir takes them
//! from the archiver's `columns` list, or reads the table the configuration names from
//! Glue when the worker starts; this module only keeps where the table is.

use std::collections::BTreeMap;

use serde::Deserialize;

use weir_parquet::timestamp::TimestampFormat;
use weir_parquet::{Column, Deserializer, ParquetCompression, ParquetOptions};

use crate::Problem;

/// `DataFormatConversionConfiguration`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DataFormatConversion {
    /// `Enabled` (default true when the section is present, as Firehose's API).
    #[serde(rename = "Enabled")]
    pub enabled: Option<bool>,
    /// `SchemaConfiguration`: the Glue table.
    #[serde(rename = "SchemaConfiguration", default)]
    pub schema: SchemaConfiguration,
    /// `InputFormatConfiguration`.
    #[serde(rename = "InputFormatConfiguration", default)]
    pub input: InputFormat,
    /// `OutputFormatConfiguration`.
    #[serde(rename = "OutputFormatConfiguration", default)]
    pub output: OutputFormat,
}

/// `SchemaConfiguration`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct SchemaConfiguration {
    /// `CatalogId` (the account; default the caller's).
    #[serde(rename = "CatalogId")]
    pub catalog_id: Option<String>,
    /// `DatabaseName`.
    #[serde(rename = "DatabaseName")]
    pub database_name: Option<String>,
    /// `TableName`.
    #[serde(rename = "TableName")]
    pub table_name: Option<String>,
    /// `Region` (default the worker's).
    #[serde(rename = "Region")]
    pub region: Option<String>,
    /// `RoleARN` (weir uses its own credentials).
    #[serde(rename = "RoleARN")]
    pub role_arn: Option<String>,
    /// `VersionId` (`LATEST`, the default, or a version number).
    #[serde(rename = "VersionId")]
    pub version_id: Option<String>,
}

/// `InputFormatConfiguration`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InputFormat {
    /// `Deserializer`.
    #[serde(rename = "Deserializer", default)]
    pub deserializer: DeserializerConfig,
}

/// `Deserializer`: one of the two.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeserializerConfig {
    /// `OpenXJsonSerDe`.
    #[serde(rename = "OpenXJsonSerDe")]
    pub openx: Option<OpenXJsonSerDe>,
    /// `HiveJsonSerDe`.
    #[serde(rename = "HiveJsonSerDe")]
    pub hive: Option<HiveJsonSerDe>,
}

/// `OpenXJsonSerDe`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OpenXJsonSerDe {
    /// `CaseInsensitive` (default true).
    #[serde(rename = "CaseInsensitive")]
    pub case_insensitive: Option<bool>,
    /// `ColumnToJsonKeyMappings`.
    #[serde(rename = "ColumnToJsonKeyMappings", default)]
    pub column_to_json_key_mappings: BTreeMap<String, String>,
    /// `ConvertDotsInJsonKeysToUnderscores` (default false).
    #[serde(rename = "ConvertDotsInJsonKeysToUnderscores")]
    pub convert_dots: Option<bool>,
}

/// `HiveJsonSerDe`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HiveJsonSerDe {
    /// `TimestampFormats`.
    #[serde(rename = "TimestampFormats", default)]
    pub timestamp_formats: Vec<String>,
}

/// `OutputFormatConfiguration`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutputFormat {
    /// `Serializer`.
    #[serde(rename = "Serializer", default)]
    pub serializer: SerializerConfig,
}

/// `Serializer`: one of the two.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SerializerConfig {
    /// `ParquetSerDe`.
    #[serde(rename = "ParquetSerDe")]
    pub parquet: Option<ParquetSerDe>,
    /// `OrcSerDe` (refused: weir writes Parquet only).
    #[serde(rename = "OrcSerDe")]
    pub orc: Option<serde_json::Value>,
}

/// `ParquetSerDe`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ParquetSerDe {
    /// `BlockSizeBytes`.
    #[serde(rename = "BlockSizeBytes")]
    pub block_size_bytes: Option<i64>,
    /// `Compression`.
    #[serde(rename = "Compression")]
    pub compression: Option<String>,
    /// `EnableDictionaryCompression`.
    #[serde(rename = "EnableDictionaryCompression")]
    pub enable_dictionary_compression: Option<bool>,
    /// `MaxPaddingBytes` (accepted; the arrow-rs writer does not pad).
    #[serde(rename = "MaxPaddingBytes")]
    pub max_padding_bytes: Option<i64>,
    /// `PageSizeBytes`.
    #[serde(rename = "PageSizeBytes")]
    pub page_size_bytes: Option<i64>,
    /// `WriterVersion`.
    #[serde(rename = "WriterVersion")]
    pub writer_version: Option<String>,
}

/// A validated conversion: what the archiver needs, except the columns until they
/// are known.
#[derive(Debug, Clone)]
pub struct Conversion {
    /// The deserialiser.
    pub deserializer: Deserializer,
    /// The writer settings.
    pub parquet: ParquetOptions,
    /// The Glue table `SchemaConfiguration` names (empty names: none).
    pub table: SchemaConfiguration,
    /// The columns: from the archiver's `columns` list or the Glue table (`None` until
    /// one of them gave them).
    pub columns: Option<Vec<Column>>,
}

impl Conversion {
    /// The Glue table as `database.table`, if the configuration names one.
    pub fn glue_table(&self) -> Option<(&str, &str)> {
        Some((self.table.database_name.as_deref()?, self.table.table_name.as_deref()?))
    }
}

const FIELD: &str = "DataFormatConversionConfiguration";

/// Validates the section; `None` when it is absent or disabled.
pub fn validate(
    c: Option<&DataFormatConversion>,
    problems: &mut Vec<Problem>,
    warnings: &mut Vec<String>,
) -> Option<Conversion> {
    let c = c.filter(|c| c.enabled.unwrap_or(true))?;
    let mut problem =
        |field: &str, reason: String| problems.push(Problem { field: format!("{FIELD}.{field}"), reason });
    let d = &c.input.deserializer;
    let deserializer = match (&d.openx, &d.hive) {
        (Some(_), Some(_)) => {
            problem(
                "InputFormatConfiguration.Deserializer",
                "set one of OpenXJsonSerDe and HiveJsonSerDe, not both".into(),
            );
            Deserializer::default()
        }
        (Some(o), None) => Deserializer::OpenX {
            case_insensitive: o.case_insensitive.unwrap_or(true),
            key_mappings: o.column_to_json_key_mappings.clone(),
            dots_to_underscores: o.convert_dots.unwrap_or(false),
        },
        (None, Some(h)) => {
            let mut formats = Vec::new();
            for (i, f) in h.timestamp_formats.iter().enumerate() {
                match TimestampFormat::parse(f) {
                    Ok(t) => formats.push(t),
                    Err(e) => problem(
                        &format!("InputFormatConfiguration.Deserializer.HiveJsonSerDe.TimestampFormats[{i}]"),
                        format!("{f:?}: {e}"),
                    ),
                }
            }
            Deserializer::Hive { timestamp_formats: formats }
        }
        (None, None) => Deserializer::default(),
    };
    let s = &c.output.serializer;
    if s.orc.is_some() {
        problem(
            "OutputFormatConfiguration.Serializer.OrcSerDe",
            "weir writes Parquet, not ORC: use ParquetSerDe (Athena and DuckDB read both)".into(),
        );
    }
    let p = s.parquet.clone().unwrap_or_default();
    let field = |name: &str| format!("OutputFormatConfiguration.Serializer.ParquetSerDe.{name}");
    let compression = match p.compression.as_deref().unwrap_or("SNAPPY") {
        "SNAPPY" => ParquetCompression::Snappy,
        "GZIP" => ParquetCompression::Gzip,
        "UNCOMPRESSED" => ParquetCompression::Uncompressed,
        "ZSTD" => ParquetCompression::Zstd,
        other => {
            problem(
                &field("Compression"),
                format!("{other:?} is not one of SNAPPY, GZIP, UNCOMPRESSED, ZSTD (weir's own)"),
            );
            ParquetCompression::Snappy
        }
    };
    let mut parquet = ParquetOptions { compression, ..ParquetOptions::default() };
    if let Some(b) = p.block_size_bytes {
        if b < 64 << 20 {
            problem(&field("BlockSizeBytes"), format!("{b} is below 67108864 (64 MiB, Firehose's minimum)"));
        }
        parquet.block_size = usize::try_from(b).unwrap_or(usize::MAX);
    }
    if let Some(b) = p.page_size_bytes {
        if b < 64 << 10 {
            problem(&field("PageSizeBytes"), format!("{b} is below 65536 (64 KiB, Firehose's minimum)"));
        }
        parquet.page_size = usize::try_from(b).unwrap_or(usize::MAX);
    }
    parquet.dictionary = p.enable_dictionary_compression.unwrap_or(false);
    parquet.writer_v2 = match p.writer_version.as_deref().unwrap_or("V1") {
        "V1" => false,
        "V2" => true,
        other => {
            problem(&field("WriterVersion"), format!("{other:?} is not one of V1, V2"));
            false
        }
    };
    if p.max_padding_bytes.is_some_and(|b| b > 0) {
        warnings.push(format!(
            "{FIELD}: MaxPaddingBytes is accepted and ignored (the arrow-rs Parquet writer does not pad row groups)"
        ));
    }
    if c.schema.role_arn.is_some() {
        warnings.push(format!(
            "{FIELD}.SchemaConfiguration.RoleARN is accepted and ignored: weir reads Glue with its own credentials"
        ));
    }
    if c.schema.database_name.is_some() != c.schema.table_name.is_some() {
        problem("SchemaConfiguration", "DatabaseName and TableName go together".into());
    }
    Some(Conversion { deserializer, parquet, table: c.schema.clone(), columns: None })
}
