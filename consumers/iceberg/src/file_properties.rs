//! The Parquet settings a table asks its writers for, in its `write.*` properties, with
//! Iceberg's documented defaults for the ones it leaves out.
//!
//! The `iceberg` crate (0.10) reads none of them (its `from_table_properties` leaves
//! a TODO): its data files come out uncompressed, 16× the bytes of GZIP NDJSON for the
//! nested MCP event in this crate's bench, and roll over at 512 MB whatever the table
//! says. weir reads them here.

use std::collections::HashMap;

use parquet::basic::{Compression, GzipLevel, ZstdLevel};
use parquet::file::properties::WriterProperties;

/// `write.parquet.compression-codec` (Iceberg's default since 1.4: `zstd`).
pub const CODEC: &str = "write.parquet.compression-codec";
/// `write.parquet.compression-level` (the codec's default when absent).
pub const LEVEL: &str = "write.parquet.compression-level";
/// `write.parquet.page-size-bytes` (default 1 MiB).
pub const PAGE_SIZE: &str = "write.parquet.page-size-bytes";
/// `write.parquet.page-row-limit` (default 20,000).
pub const PAGE_ROWS: &str = "write.parquet.page-row-limit";
/// `write.parquet.dict-size-bytes` (default 2 MiB).
pub const DICT_SIZE: &str = "write.parquet.dict-size-bytes";
/// `write.target-file-size-bytes` (default 512 MiB).
pub const TARGET_FILE_SIZE: &str = "write.target-file-size-bytes";

/// A `write.*` property weir cannot follow.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("table property {property} = {value:?}: {reason}")]
pub struct UnsupportedProperty {
    /// The property.
    pub property: String,
    /// Its value.
    pub value: String,
    /// Why.
    pub reason: String,
}

/// What the table's data files are written with.
#[derive(Debug, Clone)]
pub struct FileProperties {
    /// Parquet writer settings.
    pub parquet: WriterProperties,
    /// A data file is closed and another begun past this many bytes.
    pub target_file_size: usize,
}

/// The settings `properties` (a table's) ask for.
pub fn file_properties(properties: &HashMap<String, String>) -> Result<FileProperties, UnsupportedProperty> {
    let bad = |property: &str, value: &str, reason: &str| UnsupportedProperty {
        property: property.into(),
        value: value.into(),
        reason: reason.into(),
    };
    let number = |property: &str, default: usize| -> Result<usize, UnsupportedProperty> {
        match properties.get(property) {
            None => Ok(default),
            Some(v) => v.trim().parse().map_err(|_| bad(property, v, "not a whole number")),
        }
    };
    let level: Option<i64> = match properties.get(LEVEL) {
        None => None,
        Some(v) => Some(v.trim().parse().map_err(|_| bad(LEVEL, v, "not a whole number"))?),
    };
    let codec = properties.get(CODEC).map_or("zstd", String::as_str);
    let compression = match codec.to_ascii_lowercase().as_str() {
        "zstd" => Compression::ZSTD(
            ZstdLevel::try_new(level.unwrap_or(3) as i32)
                .map_err(|e| bad(LEVEL, &format!("{level:?}"), &e.to_string()))?,
        ),
        "gzip" => Compression::GZIP(
            GzipLevel::try_new(level.unwrap_or(6) as u32)
                .map_err(|e| bad(LEVEL, &format!("{level:?}"), &e.to_string()))?,
        ),
        "snappy" => Compression::SNAPPY,
        "uncompressed" | "none" => Compression::UNCOMPRESSED,
        _ => return Err(bad(CODEC, codec, "weir writes zstd, gzip, snappy or uncompressed Parquet")),
    };
    let parquet = WriterProperties::builder()
        .set_compression(compression)
        .set_data_page_size_limit(number(PAGE_SIZE, 1 << 20)?)
        .set_data_page_row_count_limit(number(PAGE_ROWS, 20_000)?)
        .set_dictionary_page_size_limit(number(DICT_SIZE, 2 << 20)?)
        .build();
    Ok(FileProperties { parquet, target_file_size: number(TARGET_FILE_SIZE, 512 << 20)? })
}

#[cfg(test)]
mod tests {
    use parquet::basic::Compression;
    use parquet::schema::types::ColumnPath;

    use super::*;

    fn props(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    #[test]
    fn icebergs_defaults_when_the_table_says_nothing() {
        let p = file_properties(&HashMap::new()).unwrap();
        assert_eq!(p.parquet.compression(&ColumnPath::from("x")), Compression::ZSTD(ZstdLevel::try_new(3).unwrap()));
        assert_eq!(p.parquet.data_page_size_limit(), 1 << 20);
        assert_eq!(p.target_file_size, 512 << 20);
    }

    #[test]
    fn the_tables_properties_are_followed() {
        let p = file_properties(&props(&[
            (CODEC, "GZIP"),
            (LEVEL, "9"),
            (TARGET_FILE_SIZE, "134217728"),
            (PAGE_ROWS, "5000"),
        ]))
        .unwrap();
        assert_eq!(p.parquet.compression(&ColumnPath::from("x")), Compression::GZIP(GzipLevel::try_new(9).unwrap()));
        assert_eq!(p.parquet.data_page_row_count_limit(), 5000);
        assert_eq!(p.target_file_size, 128 << 20);
        let snappy = file_properties(&props(&[(CODEC, "snappy")])).unwrap();
        assert_eq!(snappy.parquet.compression(&ColumnPath::from("x")), Compression::SNAPPY);
    }

    #[test]
    fn what_weir_cannot_follow_is_named() {
        let e = file_properties(&props(&[(CODEC, "lzo")])).unwrap_err();
        assert_eq!(e.property, CODEC);
        let e = file_properties(&props(&[(LEVEL, "99")])).unwrap_err();
        assert_eq!(e.property, LEVEL);
        let e = file_properties(&props(&[(TARGET_FILE_SIZE, "big")])).unwrap_err();
        assert_eq!(e.property, TARGET_FILE_SIZE);
    }
}
