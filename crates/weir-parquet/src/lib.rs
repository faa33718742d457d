//! Record format conversion to Apache Parquet (Firehose's
//! `DataFormatConversionConfiguration` with `ParquetSerDe`).
//!
//! - **When a record is routed** to a data partition, [`ParquetFormat::convert`] reads
//!   it once, with the table's columns and deserialiser ([`deserialize`]), into rows
//!   (one per JSON document in it). A record that does not fit goes to the
//!   `format-conversion-failed` error output then, with the reason, so an object is
//!   never refused at seal time for one record.
//! - **While a partition fills** its buffer holds the converted rows as bytes
//!   ([`rowcode`]), counted against `max_buffer_memory` and spilled like any other
//!   buffer: an open partition costs its rows' bytes, no Arrow builders and no Parquet
//!   writer.
//! - **When the buffer is sealed** [`ParquetFormat::encode_rows`] reads the rows back,
//!   [`ENCODE_ROWS`] at a time, builds one Arrow batch of them ([`arrays`]) and hands it
//!   to the arrow-rs Parquet writer; an object of at most [`small_file::MAX_ROWS`] rows
//!   of a flat table goes to weir's own writer of small files instead
//!   ([`small_file`], which says why and how it is held to arrow-rs's files).
//!   [`ParquetFormat::encode`], from JSON straight to a file through arrow-rs, is the
//!   specification it is tested against: the same file byte for byte where arrow-rs
//!   writes both, the same schema, rows and statistics where weir's writer does. The
//!   writer starts a new row group when the open one reaches `BlockSizeBytes`.
//!   Encoding one object holds at most the object's records, one batch of rows, and
//!   the writer's open row group (at most `BlockSizeBytes`, and never more than the
//!   object). Objects are encoded one at a time per archiver.
//! - An object is one Parquet file (`.parquet`), footer included, so every object is
//!   readable on its own (DuckDB, Athena).

pub mod arrays;
pub mod column_type;
mod compact_thrift;
pub mod deserialize;
mod dictionary;
pub mod json_lines;
mod members;
pub mod rowcode;
pub mod small_file;
pub mod timestamp;

use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_schema::{Field, Schema, SchemaRef};
use bytes::Bytes;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::arrow::arrow_writer::ArrowWriterOptions;
use parquet::arrow::{ArrowSchemaConverter, ArrowWriter};
use parquet::basic::{Compression, GzipLevel, ZstdLevel};
use parquet::file::properties::{EnabledStatistics, WriterProperties, WriterVersion};
use parquet::schema::types::{ColumnPath, SchemaDescriptor};

pub use column_type::ColumnType;
pub use deserialize::{Column, Deserializer, Mismatch, RowReader};
pub use json_lines::{JsonLinesError, json_lines};

/// Rows read into one Arrow batch while an object is encoded.
pub const ENCODE_ROWS: usize = 8192;

/// `ParquetSerDe.Compression` (and weir's `ZSTD`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ParquetCompression {
    /// `SNAPPY` (Firehose's default).
    #[default]
    Snappy,
    /// `GZIP`.
    Gzip,
    /// `UNCOMPRESSED`.
    Uncompressed,
    /// `ZSTD` (weir's own; Firehose has no such value).
    Zstd,
}

/// `ParquetSerDe`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParquetOptions {
    /// `Compression`.
    pub compression: ParquetCompression,
    /// `BlockSizeBytes`: a row group is closed at this size (Firehose: at least 64 MiB,
    /// default 256 MiB).
    pub block_size: usize,
    /// `PageSizeBytes` (Firehose: at least 64 KiB, default 1 MiB).
    pub page_size: usize,
    /// `EnableDictionaryCompression` (default false).
    pub dictionary: bool,
    /// `WriterVersion` `V2` (default `V1`).
    pub writer_v2: bool,
}

impl Default for ParquetOptions {
    fn default() -> Self {
        Self {
            compression: ParquetCompression::Snappy,
            block_size: 256 << 20,
            page_size: 1 << 20,
            dictionary: false,
            writer_v2: false,
        }
    }
}

/// Why an object could not be encoded or rebuilt.
#[derive(Debug, thiserror::Error)]
pub enum ParquetError {
    /// A buffered record no longer reads (it was checked when routed: a bug).
    #[error("a buffered record does not fit the table: {0}")]
    Mismatch(#[from] Mismatch),
    /// Buffered rows do not read back (a bug, or a damaged spill file).
    #[error("{0}")]
    Damaged(#[from] rowcode::Damaged),
    /// Arrow refused the arrays.
    #[error("arrow: {0}")]
    Arrow(#[from] arrow_schema::ArrowError),
    /// The Parquet writer or reader failed.
    #[error("parquet: {0}")]
    Parquet(#[from] parquet::errors::ParquetError),
    /// A buffered cell does not fit its column (a bug: it was read for the column).
    #[error("{0}")]
    Cell(#[from] small_file::CellMismatch),
}

/// The table, its deserialiser and the writer settings: what the archiver's Parquet
/// objects are made with.
#[derive(Debug, Clone)]
pub struct ParquetFormat {
    reader: RowReader,
    schema: SchemaRef,
    options: ParquetOptions,
    /// The writer settings and the Parquet schema, made once: per small object they
    /// were a tenth of its encoding (`parquet` bench at 5,000 partitions).
    properties: WriterProperties,
    parquet_schema: Option<SchemaDescriptor>,
    /// Weir's own writer of small files of flat tables (see [`small_file`]), when the
    /// table and settings are ones it writes.
    small: Option<small_file::SmallFiles>,
}

impl ParquetFormat {
    /// The format of a table.
    pub fn new(columns: Vec<Column>, deserializer: Deserializer, options: ParquetOptions) -> Self {
        let fields: Vec<Field> = columns.iter().map(|c| Field::new(&c.name, c.ty.arrow(), true)).collect();
        let schema = Arc::new(Schema::new(fields));
        let properties = Self::properties(&options);
        let small = small_file::SmallFiles::new(&columns, &options, &Self::created_by());
        // What ArrowWriter would convert for every file; should it ever fail, each
        // writer converts again and reports why.
        let parquet_schema =
            ArrowSchemaConverter::new().with_coerce_types(properties.coerce_types()).convert(&schema).ok();
        Self { reader: RowReader::new(columns, deserializer), schema, options, properties, parquet_schema, small }
    }

    /// The columns.
    pub fn columns(&self) -> &[Column] {
        self.reader.columns()
    }

    /// The Arrow schema of every object.
    pub fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    /// Converts `record` into rows appended to `out` (see [`rowcode`]); how many (one
    /// per JSON document in it), if every document fits the table.
    pub fn convert(&self, record: &[u8], out: &mut Vec<u8>) -> Result<usize, Mismatch> {
        self.reader.put_rows(record, out)
    }

    fn properties(o: &ParquetOptions) -> WriterProperties {
        WriterProperties::builder()
            .set_compression(match o.compression {
                ParquetCompression::Snappy => Compression::SNAPPY,
                ParquetCompression::Gzip => Compression::GZIP(GzipLevel::default()),
                ParquetCompression::Uncompressed => Compression::UNCOMPRESSED,
                ParquetCompression::Zstd => Compression::ZSTD(ZstdLevel::default()),
            })
            .set_data_page_size_limit(o.page_size)
            .set_dictionary_enabled(o.dictionary)
            .set_writer_version(if o.writer_v2 { WriterVersion::PARQUET_2_0 } else { WriterVersion::PARQUET_1_0 })
            .set_created_by(Self::created_by())
            // Statistics per column chunk, no page index: what Firehose's parquet-mr
            // writer gives readers, and per small object a third less footer to build.
            .set_statistics_enabled(EnabledStatistics::Chunk)
            .set_offset_index_disabled(true)
            .build()
    }

    /// The writer named in every file.
    fn created_by() -> String {
        format!("weir {}", env!("CARGO_PKG_VERSION"))
    }

    /// A writer of one file whose first batch is `first`. Without arrow-rs's
    /// `ARROW:schema` metadata: the Parquet schema is the table (Firehose's files carry
    /// none either), and encoding it took a fifth of the time and a kilobyte of each
    /// small object. With `EnableDictionaryCompression`, the columns parquet-mr would
    /// write plain are written plain ([`dictionary`]).
    fn writer(&self, first: &RecordBatch) -> Result<ArrowWriter<Vec<u8>>, ParquetError> {
        let mut properties = self.properties.clone();
        // A file of no rows has no pages to choose encodings for.
        if self.options.dictionary && first.num_rows() > 0 {
            let plain = dictionary::without_dictionary(first, properties.dictionary_page_size_limit());
            if !plain.is_empty() {
                let mut builder = properties.into_builder();
                for name in plain {
                    builder = builder.set_column_dictionary_enabled(ColumnPath::from(name), false);
                }
                properties = builder.build();
            }
        }
        let mut options = ArrowWriterOptions::new().with_properties(properties).with_skip_arrow_metadata(true);
        if let Some(schema) = &self.parquet_schema {
            options = options.with_parquet_schema(schema.clone());
        }
        Ok(ArrowWriter::try_new_with_options(Vec::new(), self.schema.clone(), options)?)
    }

    /// Writes `batch`, closing the row group once it reaches `BlockSizeBytes`.
    fn write(&self, writer: &mut ArrowWriter<Vec<u8>>, batch: &RecordBatch) -> Result<(), ParquetError> {
        writer.write(batch)?;
        if writer.in_progress_size() >= self.options.block_size {
            writer.flush()?;
        }
        Ok(())
    }

    /// Writes `batch` to the file begun in `writer`, beginning it (its settings chosen
    /// for this first batch, see [`ParquetFormat::writer`]) when none is.
    fn append(&self, writer: &mut Option<ArrowWriter<Vec<u8>>>, batch: &RecordBatch) -> Result<(), ParquetError> {
        let w = match writer {
            Some(w) => w,
            None => writer.insert(self.writer(batch)?),
        };
        self.write(w, batch)
    }

    /// The file `writer` holds, or a file of no rows when nothing was written.
    fn finish(&self, writer: Option<ArrowWriter<Vec<u8>>>) -> Result<Vec<u8>, ParquetError> {
        match writer {
            Some(w) => Ok(w.into_inner()?),
            None => self.empty(),
        }
    }

    /// One Parquet file of `records`: JSON values one after another, in order, one row
    /// per value (the specification of [`ParquetFormat::encode_rows`]).
    pub fn encode(&self, records: &[u8]) -> Result<Vec<u8>, ParquetError> {
        let mut writer = None;
        let mut values = serde_json::Deserializer::from_slice(records).into_iter::<serde_json::Value>();
        loop {
            let mut rows = Vec::with_capacity(ENCODE_ROWS.min(records.len() / 64 + 1));
            for value in values.by_ref().take(ENCODE_ROWS) {
                let value = value.map_err(|e| Mismatch::NotJson(e.to_string()))?;
                rows.push(self.reader.row_of(&value)?);
            }
            if rows.is_empty() {
                break;
            }
            self.append(&mut writer, &self.batch(&rows)?)?;
        }
        self.finish(writer)
    }

    /// One Parquet file of `converted`: the records [`ParquetFormat::convert`] wrote,
    /// one after another, whose lengths are `lens` (in order, covering `converted`, or
    /// empty). Also, when `lens` is given and a record is other than one row, how
    /// many rows each record is (otherwise empty: one each).
    pub fn encode_rows(&self, converted: &[u8], lens: &[u32]) -> Result<(Vec<u8>, Vec<u32>), ParquetError> {
        let mut writer = None;
        let mut small = None;
        let mut reader = rowcode::Rows::new(converted, self.columns().len());
        // Where the current record ends, and the rows each record is.
        let (mut record, mut end) = (0usize, lens.first().map_or(0, |l| *l as usize));
        let mut counts = vec![0u32; lens.len()];
        let width = self.columns().len().max(1);
        loop {
            // The batch's cells, row after row, strings borrowed from `converted`.
            let mut cells = Vec::with_capacity(ENCODE_ROWS.min(converted.len() / 16 + 1) * width);
            let mut rows = 0;
            while rows < ENCODE_ROWS {
                let Some(row) = reader.next_row_borrowed(&mut cells) else { break };
                row?;
                rows += 1;
                if !counts.is_empty() {
                    while reader.offset() > end && record + 1 < lens.len() {
                        record += 1;
                        end += lens[record] as usize;
                    }
                    counts[record] += 1;
                }
            }
            if rows == 0 {
                break;
            }
            // The whole object in one batch: weir's own writer, if the table is one
            // it writes (the same file as arrow-rs's, proptested in `small_file`).
            if writer.is_none()
                && reader.offset() >= converted.len()
                && let Some(s) = &self.small
            {
                small = s.write(&cells, rows)?;
                if small.is_some() {
                    break;
                }
            }
            self.append(&mut writer, &self.batch_of_cells(&cells)?)?;
        }
        if counts.iter().all(|c| *c == 1) {
            counts.clear();
        }
        let file = match (small, writer) {
            (Some(file), _) => file,
            (None, writer) => self.finish(writer)?,
        };
        Ok((file, counts))
    }

    /// The Arrow batch of rows.
    fn batch(&self, rows: &[Vec<deserialize::Cell>]) -> Result<RecordBatch, ParquetError> {
        let columns = self
            .columns()
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let cells: Vec<&deserialize::Cell> = rows.iter().map(|r| &r[i]).collect();
                arrays::build(&c.ty, &cells)
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(RecordBatch::try_new(self.schema.clone(), columns)?)
    }

    /// [`ParquetFormat::batch`] of rows read back from their bytes, one after another
    /// in `cells`: a `string` column is built from the borrowed strings (as
    /// [`arrays::build`] builds it from owned ones), every other by [`arrays::build`].
    /// Why: copying each string out of the buffer and into the array was a tenth of
    /// encoding an object (`parquet` bench).
    fn batch_of_cells(&self, cells: &[rowcode::CellRef<'_>]) -> Result<RecordBatch, ParquetError> {
        use rowcode::CellRef;
        let width = self.columns().len();
        let wrong =
            |c: &Column| arrow_schema::ArrowError::InvalidArgumentError(format!("a cell does not fit {:?}", c.ty));
        let columns = self
            .columns()
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let column = cells.iter().skip(i).step_by(width.max(1));
                if c.ty == ColumnType::String {
                    let mut b = arrow_array::builder::StringBuilder::new();
                    for cell in column {
                        match cell {
                            CellRef::Str(s) => b.append_value(s),
                            CellRef::Other(deserialize::Cell::Null) => b.append_null(),
                            CellRef::Other(_) => return Err(wrong(c)),
                        }
                    }
                    return Ok(Arc::new(b.finish()) as arrow_array::ArrayRef);
                }
                let refs = column
                    .map(|cell| match cell {
                        CellRef::Other(cell) => Ok(cell),
                        CellRef::Str(_) => Err(wrong(c)),
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                arrays::build(&c.ty, &refs)
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(RecordBatch::try_new(self.schema.clone(), columns)?)
    }

    /// A valid file of no rows (what claims a key in exactly-once mode).
    pub fn empty(&self) -> Result<Vec<u8>, ParquetError> {
        Ok(self.writer(&RecordBatch::new_empty(self.schema.clone()))?.into_inner()?)
    }

    /// The same file with only the rows of the records whose `keep` is true (one per
    /// record, in order); `rows` is how many rows each record became, or empty when
    /// one each (see [`ParquetFormat::encode_rows`]).
    pub fn keep_rows(&self, file: &Bytes, keep: &[bool], rows: &[u32]) -> Result<Vec<u8>, ParquetError> {
        let keep: Vec<bool> = if rows.is_empty() {
            keep.to_vec()
        } else {
            keep.iter().zip(rows).flat_map(|(k, n)| std::iter::repeat_n(*k, *n as usize)).collect()
        };
        let reader = ParquetRecordBatchReaderBuilder::try_new(file.clone())?.with_batch_size(ENCODE_ROWS).build()?;
        let mut writer = None;
        let mut at = 0usize;
        for batch in reader {
            let batch = batch?;
            let mask: arrow_array::BooleanArray =
                (at..at + batch.num_rows()).map(|i| Some(keep.get(i).copied().unwrap_or(false))).collect();
            at += batch.num_rows();
            let kept = arrow_select::filter::filter_record_batch(&batch, &mask)?;
            if kept.num_rows() > 0 {
                self.append(&mut writer, &kept)?;
            }
        }
        self.finish(writer)
    }

    /// Rows in a file (its footer's count).
    pub fn rows(file: &Bytes) -> Result<u64, ParquetError> {
        let builder = ParquetRecordBatchReaderBuilder::try_new(file.clone())?;
        Ok(builder.metadata().file_metadata().num_rows() as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn format() -> ParquetFormat {
        let col = |n: &str, t: &str| Column { name: n.into(), ty: ColumnType::parse(t).unwrap() };
        ParquetFormat::new(
            vec![col("tenant_id", "string"), col("n", "bigint"), col("tags", "array<string>")],
            Deserializer::default(),
            ParquetOptions::default(),
        )
    }

    #[test]
    fn encodes_filters_and_claims() {
        let f = format();
        let records =
            b"{\"tenant_id\":\"a\",\"n\":1,\"tags\":[\"x\"]}\n{\"tenant_id\":\"b\",\"n\":2}\n{\"n\":3,\"tags\":[]}\n";
        let file = Bytes::from(f.encode(records).unwrap());
        assert_eq!(&file[..4], b"PAR1");
        assert_eq!(ParquetFormat::rows(&file).unwrap(), 3);
        let kept = Bytes::from(f.keep_rows(&file, &[true, false, true], &[]).unwrap());
        assert_eq!(ParquetFormat::rows(&kept).unwrap(), 2);
        let reader = ParquetRecordBatchReaderBuilder::try_new(kept).unwrap().build().unwrap();
        let batch = reader.into_iter().next().unwrap().unwrap();
        let n = batch.column(1).as_any().downcast_ref::<arrow_array::Int64Array>().unwrap();
        assert_eq!(n.values().to_vec(), vec![1, 3]);
        let empty = Bytes::from(f.empty().unwrap());
        assert_eq!(ParquetFormat::rows(&empty).unwrap(), 0);
        assert_eq!(f.empty().unwrap(), f.empty().unwrap(), "a claim is the same bytes every time");
    }

    /// The schema and settings made once give the file arrow-rs makes when it converts
    /// the schema for each writer, for every column type.
    #[test]
    fn a_schema_made_once_writes_the_same_file() {
        let col = |n: &str, t: &str| Column { name: n.into(), ty: ColumnType::parse(t).unwrap() };
        let f = ParquetFormat::new(
            vec![
                col("s", "string"),
                col("t", "tinyint"),
                col("d", "decimal(12,3)"),
                col("ts", "timestamp"),
                col("day", "date"),
                col("b", "binary"),
                col("l", "array<struct<ms:int,tags:array<string>>>"),
                col("m", "map<string,double>"),
            ],
            Deserializer::default(),
            ParquetOptions::default(),
        );
        assert!(f.parquet_schema.is_some());
        let record = br#"{"s":"x","t":-3,"d":"12.5","ts":"2026-12-05 10:00:00","day":"2026-12-05","b":"AAE=","l":[{"ms":1,"tags":["a"]}],"m":{"k":1.5}}"#;
        let rows = f.reader.rows(record).unwrap();
        let batch = f.batch(&rows).unwrap();
        let mut ours = f.writer(&batch).unwrap();
        ours.write(&batch).unwrap();
        let options = ArrowWriterOptions::new().with_properties(f.properties.clone()).with_skip_arrow_metadata(true);
        let mut theirs = ArrowWriter::try_new_with_options(Vec::new(), f.schema.clone(), options).unwrap();
        theirs.write(&batch).unwrap();
        assert_eq!(ours.into_inner().unwrap(), theirs.into_inner().unwrap());
    }

    /// Every `ParquetSerDe` setting reaches the file: its codec, dictionary pages, the
    /// writer version, and row groups closed at `BlockSizeBytes`.
    #[test]
    fn serde_settings_reach_the_file() {
        use parquet::basic::{Compression as Codec, Encoding};
        let col = |n: &str, t: &str| Column { name: n.into(), ty: ColumnType::parse(t).unwrap() };
        let mut records = Vec::new();
        for i in 0..20_000u64 {
            // `n` scattered: its V2 encoding (delta) must not shrink it under a row group.
            let n = (i * 2_654_435_761) % (1 << 32);
            records.extend_from_slice(format!("{{\"tenant_id\":\"t{}\",\"n\":{n}}}\n", i % 3).as_bytes());
        }
        let cases = [
            (ParquetCompression::Snappy, "SNAPPY"),
            (ParquetCompression::Gzip, "GZIP"),
            (ParquetCompression::Uncompressed, "UNCOMPRESSED"),
            (ParquetCompression::Zstd, "ZSTD"),
        ];
        for (compression, name) in cases {
            for (dictionary, writer_v2) in [(false, false), (true, true)] {
                let options = ParquetOptions {
                    compression,
                    dictionary,
                    writer_v2,
                    block_size: 64 * 1024,
                    ..ParquetOptions::default()
                };
                let f = ParquetFormat::new(
                    vec![col("tenant_id", "string"), col("n", "bigint")],
                    Deserializer::default(),
                    options,
                );
                let file = Bytes::from(f.encode(&records).unwrap());
                let meta = ParquetRecordBatchReaderBuilder::try_new(file).unwrap().metadata().clone();
                assert_eq!(meta.file_metadata().num_rows(), 20_000);
                assert_eq!(meta.file_metadata().version(), if writer_v2 { 2 } else { 1 }, "{name}");
                assert!(meta.num_row_groups() > 1, "{name}: row groups closed at BlockSizeBytes");
                let chunk = meta.row_group(0).column(0);
                let codec = chunk.compression();
                let want = match compression {
                    ParquetCompression::Snappy => matches!(codec, Codec::SNAPPY),
                    ParquetCompression::Gzip => matches!(codec, Codec::GZIP(_)),
                    ParquetCompression::Uncompressed => matches!(codec, Codec::UNCOMPRESSED),
                    ParquetCompression::Zstd => matches!(codec, Codec::ZSTD(_)),
                };
                assert!(want, "{name}: {codec:?}");
                let dict =
                    chunk.encodings().any(|e| matches!(e, Encoding::RLE_DICTIONARY | Encoding::PLAIN_DICTIONARY));
                assert_eq!(dict, dictionary, "{name}: dictionary pages");
            }
        }
    }

    /// A record of several JSON documents is a row each; the rows of each record are
    /// counted, so an object rebuilt without some records drops exactly their rows.
    #[test]
    fn several_documents_in_a_record_are_a_row_each() {
        let f = format();
        let check = |record: &[u8]| f.convert(record, &mut Vec::new());
        assert_eq!(check(br#"{"tenant_id":"a","n":1}{"tenant_id":"a","n":2}"#), Ok(2));
        assert_eq!(check(b"{\"n\":1}\n{\"n\":2}\n {\"n\":3} \n"), Ok(3));
        assert_eq!(check(b"{\"n\":1}\n"), Ok(1));
        let bad = check(br#"{"n":1}{"n":"x"}"#).unwrap_err().to_string();
        assert_eq!(bad, "document 2 of the record: column n: expected bigint, found \"x\"");
        assert!(check(b"  ").is_err() && check(b"[1][2]").is_err());

        let records: [&[u8]; 4] =
            [b"{\"n\":1}\n", b"{\"n\":2}{\"n\":3}\n", b"{\"n\":4}\n{\"n\":5}\n{\"n\":6}\n", b"{\"n\":7}\n"];
        let (mut converted, mut lens) = (Vec::new(), Vec::new());
        for r in records {
            let before = converted.len();
            f.convert(r, &mut converted).unwrap();
            lens.push((converted.len() - before) as u32);
        }
        let (file, rows) = f.encode_rows(&converted, &lens).unwrap();
        assert_eq!(rows, vec![1, 2, 3, 1]);
        assert_eq!(file, f.encode(&records.concat()).unwrap(), "the same file as from the JSON");
        let file = Bytes::from(file);
        assert_eq!(ParquetFormat::rows(&file).unwrap(), 7);
        let kept = Bytes::from(f.keep_rows(&file, &[false, true, false, true], &rows).unwrap());
        let reader = ParquetRecordBatchReaderBuilder::try_new(kept).unwrap().build().unwrap();
        let batch = reader.into_iter().next().unwrap().unwrap();
        let n = batch.column(1).as_any().downcast_ref::<arrow_array::Int64Array>().unwrap();
        assert_eq!(n.values().to_vec(), vec![2, 3, 7], "the rows of records 2 and 4");
        // One row each: nothing to count.
        let mut converted = Vec::new();
        f.convert(b"{\"n\":1}", &mut converted).unwrap();
        let one = converted.len() as u32;
        f.convert(b"{\"n\":2}", &mut converted).unwrap();
        let (_, rows) = f.encode_rows(&converted, &[one, one]).unwrap();
        assert!(rows.is_empty());
    }

    /// The physical types docs/archiver.md lists beside Firehose's (Hive's
    /// `ParquetHiveSerDe` writes timestamps as INT96 and decimals as FIXED_LEN_BYTE_ARRAY).
    #[test]
    fn physical_types_are_the_documented_ones() {
        let col = |n: &str, t: &str| Column { name: n.into(), ty: ColumnType::parse(t).unwrap() };
        let f = ParquetFormat::new(
            vec![
                col("ts", "timestamp"),
                col("d9", "decimal(9,2)"),
                col("d18", "decimal(18,2)"),
                col("d38", "decimal(38,2)"),
                col("day", "date"),
                col("small", "smallint"),
                col("s", "string"),
            ],
            Deserializer::default(),
            ParquetOptions::default(),
        );
        let file = Bytes::from(
            f.encode(b"{\"ts\":1518033528123,\"d9\":1.5,\"d18\":2,\"d38\":3,\"day\":\"2024-01-02\"}").unwrap(),
        );
        let meta = ParquetRecordBatchReaderBuilder::try_new(file).unwrap().metadata().clone();
        let schema = meta.file_metadata().schema_descr();
        let got: Vec<String> = (0..schema.num_columns())
            .map(|i| {
                let c = schema.column(i);
                format!("{} {:?} {:?}", c.name(), c.physical_type(), c.logical_type_ref())
            })
            .collect();
        let want = [
            ("ts INT64", "is_adjusted_to_u_t_c: false, unit: MICROS"),
            ("d9 INT32", "scale: 2, precision: 9 }"),
            ("d18 INT64", "scale: 2, precision: 18 }"),
            ("d38 FIXED_LEN_BYTE_ARRAY", "scale: 2, precision: 38 }"),
            ("day INT32", "Date"),
            ("small INT32", "bit_width: 16, is_signed: true"),
            ("s BYTE_ARRAY", "String"),
        ];
        assert_eq!(got.len(), want.len());
        for (got, (physical, logical)) in got.iter().zip(want) {
            assert!(got.starts_with(physical) && got.contains(logical), "{got}");
        }
    }

    proptest::proptest! {
        /// What the archiver writes (records converted when routed, encoded from their
        /// rows when sealed) is the file the JSON specification writes, byte for byte,
        /// with each record's rows counted.
        #[test]
        fn converted_rows_encode_to_the_file_the_json_does(
            records in proptest::collection::vec(proptest::collection::vec(document(), 1..4), 0..40),
        ) {
            let col = |n: &str, t: &str| Column { name: n.into(), ty: ColumnType::parse(t).unwrap() };
            let f = ParquetFormat::new(
                vec![
                    col("s", "string"), col("n", "bigint"), col("d", "decimal(12,3)"), col("ts", "timestamp"),
                    col("tags", "array<string>"), col("m", "map<string,double>"),
                    col("st", "struct<a:int,b:array<boolean>>"), col("blob", "binary"), col("day", "date"),
                ],
                Deserializer::default(),
                ParquetOptions::default(),
            );
            let (mut json, mut converted, mut lens, mut want) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
            for docs in &records {
                let text: String = docs.iter().map(|d| format!("{d}\n")).collect();
                json.extend_from_slice(text.as_bytes());
                let before = converted.len();
                proptest::prop_assert_eq!(f.convert(text.as_bytes(), &mut converted), Ok(docs.len()));
                lens.push((converted.len() - before) as u32);
                want.push(docs.len() as u32);
            }
            let (file, rows) = f.encode_rows(&converted, &lens).unwrap();
            proptest::prop_assert_eq!(file, f.encode(&json).unwrap());
            if want.iter().any(|n| *n != 1) {
                proptest::prop_assert_eq!(rows, want);
            } else {
                proptest::prop_assert!(rows.is_empty());
            }
        }
    }

    /// A flat table's columns: one of each flat type, in an order and a subset the
    /// test draws.
    const FLAT: [(&str, &str); 11] = [
        ("s", "string"),
        ("blob", "binary"),
        ("b", "boolean"),
        ("t", "tinyint"),
        ("sm", "smallint"),
        ("i", "int"),
        ("n", "bigint"),
        ("f", "float"),
        ("d", "double"),
        ("ts", "timestamp"),
        ("day", "date"),
    ];

    /// A value for a flat column of type `ty`, in any form the OpenX SerDe reads for it;
    /// strings and byte arrays past the 64 bytes at which statistics are truncated.
    fn flat_value(ty: &'static str) -> proptest::strategy::BoxedStrategy<serde_json::Value> {
        use proptest::prelude::*;
        use serde_json::json;
        match ty {
            "string" => prop_oneof![
                any::<String>().prop_map(|s| json!(s)),
                "[a-c]{60,70}".prop_map(|s| json!(s)),
                "[\\u{7f}-\\u{800}\\u{ffff}\\u{10ffff}]{20,40}".prop_map(|s| json!(s)),
                any::<i64>().prop_map(|n| json!(n)),
            ]
            .boxed(),
            "binary" => prop_oneof![
                proptest::collection::vec(any::<u8>(), 0..80),
                proptest::collection::vec(Just(0xFFu8), 60..70),
            ]
            .prop_map(|b| json!(base64::Engine::encode(&base64::engine::general_purpose::STANDARD, b)))
            .boxed(),
            "boolean" => any::<bool>().prop_map(|b| json!(b)).boxed(),
            "tinyint" => any::<i8>().prop_map(|n| json!(n)).boxed(),
            "smallint" => any::<i16>().prop_map(|n| json!(n)).boxed(),
            "int" => any::<i32>().prop_map(|n| json!(n)).boxed(),
            "bigint" => any::<i64>().prop_map(|n| json!(n)).boxed(),
            "float" => {
                prop_oneof![(-1e30f64..1e30).prop_map(|v| json!(v)), Just(json!(0.0)), Just(json!(-0.0))].boxed()
            }
            "double" => prop_oneof![
                any::<f64>().prop_filter("finite", |v| v.is_finite()).prop_map(|v| json!(v)),
                Just(json!(-0.0))
            ]
            .boxed(),
            "timestamp" => {
                prop_oneof![(0i64..4_000_000_000_000).prop_map(|v| json!(v)), Just(json!("2024-02-29 23:59:59.5")),]
                    .boxed()
            }
            _ => (0i64..3_000_000)
                .prop_map(|d| json!(format!("{:04}-{:02}-{:02}", 1 + d % 9999, 1 + d % 12, 1 + d % 28)))
                .boxed(),
        }
    }

    /// A flat table (columns of [`FLAT`]), a codec, and documents for it (each column
    /// absent, null or a value).
    fn flat_case()
    -> impl proptest::strategy::Strategy<Value = (Vec<usize>, ParquetCompression, usize, Vec<serde_json::Value>)> {
        use proptest::prelude::*;
        let columns = proptest::sample::subsequence((0..FLAT.len()).collect::<Vec<_>>(), 1..=FLAT.len()).prop_shuffle();
        let codec = prop_oneof![
            Just(ParquetCompression::Snappy),
            Just(ParquetCompression::Gzip),
            Just(ParquetCompression::Uncompressed),
        ];
        // Firehose's page size, and pages of a few values (several pages per column).
        let page_size = prop_oneof![Just(1usize << 20), 0usize..300];
        (columns, codec, page_size).prop_flat_map(|(columns, codec, page_size)| {
            let cells: Vec<_> = columns
                .iter()
                .map(|i| prop_oneof![1 => Just(None), 1 => Just(Some(serde_json::Value::Null)), 4 => flat_value(FLAT[*i].1).prop_map(Some)])
                .collect();
            let names: Vec<&'static str> = columns.iter().map(|i| FLAT[*i].0).collect();
            let doc = cells.prop_map(move |cells| {
                let mut o = serde_json::Map::new();
                for (name, v) in names.iter().zip(cells) {
                    if let Some(v) = v {
                        o.insert((*name).into(), v);
                    }
                }
                serde_json::Value::Object(o)
            });
            (Just(columns), Just(codec), Just(page_size), proptest::collection::vec(doc, 0..60))
        })
    }

    proptest::proptest! {
        /// A flat table's objects come from weir's own small-file writer, and read as
        /// the ones arrow-rs writes from the JSON: the same schema (physical, logical
        /// and converted types, repetition), rows, codec and statistics.
        #[test]
        fn small_flat_files_read_as_arrow_rs_writes_them((columns, codec, page_size, docs) in flat_case()) {
            let col = |(n, t): (&str, &str)| Column { name: n.into(), ty: ColumnType::parse(t).unwrap() };
            let f = ParquetFormat::new(
                columns.iter().map(|i| col(FLAT[*i])).collect(),
                Deserializer::default(),
                ParquetOptions { compression: codec, page_size, ..ParquetOptions::default() },
            );
            let small = f.small.as_ref().expect("a flat table with Firehose's settings");
            let (mut json, mut converted) = (Vec::new(), Vec::new());
            for d in &docs {
                let text = format!("{d}\n");
                json.extend_from_slice(text.as_bytes());
                proptest::prop_assert_eq!(f.convert(text.as_bytes(), &mut converted), Ok(1));
            }
            let (ours, _) = f.encode_rows(&converted, &[]).unwrap();
            if !docs.is_empty() {
                let mut cells = Vec::new();
                let mut rows = rowcode::Rows::new(&converted, columns.len());
                while let Some(row) = rows.next_row_borrowed(&mut cells) {
                    row.unwrap();
                }
                let direct = small.write(&cells, docs.len()).unwrap();
                proptest::prop_assert_eq!(direct.as_ref(), Some(&ours), "encode_rows took the small-file writer");
            }
            let theirs = f.encode(&json).unwrap();
            let read = |file: Vec<u8>| {
                let b = ParquetRecordBatchReaderBuilder::try_new(Bytes::from(file)).unwrap();
                let meta = b.metadata().clone();
                let batches: Vec<RecordBatch> = b.build().unwrap().map(|b| b.unwrap()).collect();
                (meta, batches)
            };
            let ((m1, b1), (m2, b2)) = (read(ours), read(theirs));
            proptest::prop_assert_eq!(b1, b2);
            proptest::prop_assert_eq!(m1.file_metadata().num_rows(), m2.file_metadata().num_rows());
            proptest::prop_assert_eq!(m1.file_metadata().version(), m2.file_metadata().version());
            proptest::prop_assert_eq!(m1.file_metadata().created_by(), m2.file_metadata().created_by());
            proptest::prop_assert_eq!(m1.file_metadata().column_orders(), m2.file_metadata().column_orders());
            let (s1, s2) = (m1.file_metadata().schema_descr(), m2.file_metadata().schema_descr());
            proptest::prop_assert_eq!(s1.root_schema(), s2.root_schema());
            proptest::prop_assert_eq!(m1.num_row_groups(), m2.num_row_groups());
            for g in 0..m1.num_row_groups() {
                let (g1, g2) = (m1.row_group(g), m2.row_group(g));
                proptest::prop_assert_eq!(g1.num_rows(), g2.num_rows());
                for c in 0..g1.num_columns() {
                    let (c1, c2) = (g1.column(c), g2.column(c));
                    proptest::prop_assert_eq!(c1.compression(), c2.compression());
                    proptest::prop_assert_eq!(c1.num_values(), c2.num_values());
                    proptest::prop_assert_eq!(c1.statistics(), c2.statistics(), "column {}", c1.column_path());
                }
            }
        }
    }

    /// One JSON document for the table above, every column optional and of any form
    /// its type takes.
    fn document() -> impl proptest::strategy::Strategy<Value = serde_json::Value> {
        use proptest::prelude::*;
        use serde_json::json;
        let s = prop_oneof![
            any::<String>().prop_map(|s| json!(s)),
            any::<i64>().prop_map(|n| json!(n)),
            Just(json!({"nested": [1, "two", null]})),
        ];
        let n = prop_oneof![any::<i64>().prop_map(|n| json!(n)), any::<i32>().prop_map(|n| json!(n.to_string()))];
        let d = (-999_999_999i64..999_999_999, 0u32..4)
            .prop_map(|(v, p)| json!(format!("{}", v as f64 / 10f64.powi(p as i32))));
        let ts = prop_oneof![
            (0i64..4_000_000_000_000).prop_map(|v| json!(v)),
            Just(json!("2024-02-29 23:59:59.5")),
            Just(json!("2024-02-29T23:59:59+0200")),
        ];
        let tags = proptest::collection::vec(proptest::option::of("[a-z]{0,5}"), 0..4).prop_map(|v| json!(v));
        let m = proptest::collection::btree_map("[a-zA-Z]{1,3}", proptest::option::of(-1e6f64..1e6), 0..3)
            .prop_map(|v| json!(v));
        let st =
            (any::<i32>(), proptest::collection::vec(any::<bool>(), 0..3)).prop_map(|(a, b)| json!({"a": a, "B": b}));
        let blob = proptest::collection::vec(any::<u8>(), 0..8)
            .prop_map(|b| json!(base64::Engine::encode(&base64::engine::general_purpose::STANDARD, b)));
        let day =
            (0i64..3_000_000).prop_map(|d| json!(format!("{:04}-{:02}-{:02}", 1 + d % 9999, 1 + d % 12, 1 + d % 28)));
        (
            proptest::option::of(s),
            proptest::option::of(n),
            proptest::option::of(d),
            proptest::option::of(ts),
            proptest::option::of(tags),
            proptest::option::of(m),
            proptest::option::of(st),
            proptest::option::of(blob),
            proptest::option::of(day),
        )
            .prop_map(|(s, n, d, ts, tags, m, st, blob, day)| {
                let mut o = serde_json::Map::new();
                for (k, v) in [
                    ("s", s),
                    ("n", n),
                    ("d", d),
                    ("ts", ts),
                    ("tags", tags),
                    ("m", m),
                    ("st", st),
                    ("blob", blob),
                    ("day", day),
                ] {
                    if let Some(v) = v {
                        o.insert(k.into(), v);
                    }
                }
                serde_json::Value::Object(o)
            })
    }

    #[test]
    fn many_rows_make_many_batches() {
        let f = format();
        let mut records = Vec::new();
        for i in 0..(ENCODE_ROWS * 2 + 5) {
            records.extend_from_slice(format!("{{\"tenant_id\":\"t{}\",\"n\":{i}}}\n", i % 7).as_bytes());
        }
        let file = Bytes::from(f.encode(&records).unwrap());
        assert_eq!(ParquetFormat::rows(&file).unwrap(), (ENCODE_ROWS * 2 + 5) as u64);
    }
}
