//! Small flat Parquet files, written by weir itself.
//!
//! **Why by hand** (the style asks for a measured reason): with many partitions an
//! object holds few rows (100,000 events over 5,000 partitions: 20 each), and arrow-rs
//! spent ~42 µs on such a file of 8 columns whatever was in it (its column writers,
//! encoders, statistics and metadata builders per column; its lower-level
//! `SerializedFileWriter` still 41 µs), twice what GZIP takes for the whole object:
//! Parquet ran at 0.30 of GZIP's speed there against 0.5 or better everywhere else
//! (`cargo bench -p weir-archiver --bench parquet`, docs/benchmarks.md).
//!
//! **What it writes** is what [`ParquetFormat`](super::ParquetFormat) asks arrow-rs for
//! with Firehose's defaults, for a table of flat columns (`string`, `binary`, the
//! integers, `float`, `double`, `boolean`, `timestamp`, `date`): one row group,
//! version-1 data pages (a new one once a page's values pass `PageSizeBytes`), PLAIN values, definition levels in the RLE/bit-packed
//! hybrid, the codec asked for (SNAPPY, GZIP or none), chunk statistics (null count,
//! min and max; byte arrays past 64 bytes truncated as arrow-rs truncates them), the
//! same schema (names, physical, logical and converted types, every column optional)
//! and type-defined column orders. Anything else (nested or decimal columns, dictionary
//! pages, `WriterVersion` V2, ZSTD, more than [`MAX_ROWS`] rows) is left to arrow-rs: [`SmallFiles::new`] or
//! [`SmallFiles::write`] answers `None`.
//!
//! **How it is checked**: a proptest writes random tables of every flat type, with
//! every codec, through both writers and requires the same schema, rows, row counts and
//! statistics (decoded by arrow-rs's reader); DuckDB reads the same rows, filters
//! and statistics from its files as from arrow-rs's
//! (`tests/tests/archive_parquet.rs`, `small_flat_files_read_in_duckdb_as_arrow_rs_files_do`).

use std::io::Write as _;

use super::ParquetCompression;
use super::ParquetOptions;
use super::column_type::ColumnType;
use super::compact_thrift::{Elements, Struct, binary, put_i32};
use super::deserialize::{Cell, Column};
use super::rowcode::CellRef;

/// Files of more rows go to arrow-rs (one row group keeps this writer simple, and past
/// a few thousand rows arrow-rs's fixed cost no longer shows).
pub const MAX_ROWS: usize = 4096;

/// Statistics of byte arrays are truncated past this many bytes (arrow-rs's default).
const STATISTICS_TRUNCATE: usize = 64;

/// Thrift enums of the Parquet format.
mod format {
    pub const BOOLEAN: i32 = 0;
    pub const INT32: i32 = 1;
    pub const INT64: i32 = 2;
    pub const FLOAT: i32 = 4;
    pub const DOUBLE: i32 = 5;
    pub const BYTE_ARRAY: i32 = 6;
    pub const OPTIONAL: i32 = 1;
    pub const UTF8: i32 = 0;
    pub const DATE: i32 = 6;
    pub const TIMESTAMP_MICROS: i32 = 10;
    pub const INT_8: i32 = 15;
    pub const INT_16: i32 = 16;
    pub const PLAIN: i32 = 0;
    pub const RLE: i32 = 3;
    pub const DATA_PAGE: i32 = 0;
    pub const UNCOMPRESSED: i32 = 0;
    pub const SNAPPY: i32 = 1;
    pub const GZIP: i32 = 2;
}

/// How a column's cells become values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Utf8,
    Bytes,
    Bool,
    /// INT32 from an integer cell, with the column's range.
    Int32 {
        min: i64,
        max: i64,
    },
    Int64,
    Float,
    Double,
    Micros,
    Days,
}

impl Kind {
    fn of(ty: &ColumnType) -> Option<Self> {
        Some(match ty {
            ColumnType::String => Kind::Utf8,
            ColumnType::Binary => Kind::Bytes,
            ColumnType::Boolean => Kind::Bool,
            ColumnType::TinyInt => Kind::Int32 { min: i8::MIN.into(), max: i8::MAX.into() },
            ColumnType::SmallInt => Kind::Int32 { min: i16::MIN.into(), max: i16::MAX.into() },
            ColumnType::Int => Kind::Int32 { min: i32::MIN.into(), max: i32::MAX.into() },
            ColumnType::BigInt => Kind::Int64,
            ColumnType::Float => Kind::Float,
            ColumnType::Double => Kind::Double,
            ColumnType::Timestamp => Kind::Micros,
            ColumnType::Date => Kind::Days,
            ColumnType::Decimal { .. } | ColumnType::Array(_) | ColumnType::Struct(_) | ColumnType::Map(_) => {
                return None;
            }
        })
    }

    fn physical(self) -> i32 {
        match self {
            Kind::Utf8 | Kind::Bytes => format::BYTE_ARRAY,
            Kind::Bool => format::BOOLEAN,
            Kind::Int32 { .. } | Kind::Days => format::INT32,
            Kind::Int64 | Kind::Micros => format::INT64,
            Kind::Float => format::FLOAT,
            Kind::Double => format::DOUBLE,
        }
    }

    /// Whether min and max are also written to the deprecated fields (signed orders,
    /// as arrow-rs does for older readers).
    fn legacy_min_max(self) -> bool {
        matches!(self, Kind::Int32 { .. } | Kind::Int64 | Kind::Micros | Kind::Days)
    }
}

/// One column of the table.
#[derive(Debug, Clone)]
struct Plan {
    name: String,
    ty: ColumnType,
    kind: Kind,
}

/// The writer of one table's small files, made once per table.
#[derive(Debug, Clone)]
pub struct SmallFiles {
    columns: Vec<Plan>,
    codec: i32,
    compression: ParquetCompression,
    page_size: usize,
    created_by: String,
}

impl SmallFiles {
    /// The writer for `columns` with `options`, or `None` when a column or a setting is
    /// one this writer leaves to arrow-rs.
    pub fn new(columns: &[Column], options: &ParquetOptions, created_by: &str) -> Option<Self> {
        if options.dictionary || options.writer_v2 || columns.is_empty() {
            return None;
        }
        let codec = match options.compression {
            ParquetCompression::Snappy => format::SNAPPY,
            ParquetCompression::Gzip => format::GZIP,
            ParquetCompression::Uncompressed => format::UNCOMPRESSED,
            ParquetCompression::Zstd => return None,
        };
        let columns = columns
            .iter()
            .map(|c| Some(Plan { name: c.name.clone(), ty: c.ty.clone(), kind: Kind::of(&c.ty)? }))
            .collect::<Option<Vec<_>>>()?;
        Some(Self {
            columns,
            codec,
            compression: options.compression,
            page_size: options.page_size,
            created_by: created_by.to_owned(),
        })
    }

    /// The file of `rows` rows whose cells are `cells`, row after row (as
    /// [`super::rowcode::Rows::next_row_borrowed`] reads them), or `None` when it is
    /// one for arrow-rs (no rows, more than [`MAX_ROWS`]).
    /// `Err` when a cell does not fit its column (a bug: cells were read for it).
    pub fn write(&self, cells: &[CellRef<'_>], rows: usize) -> Result<Option<Vec<u8>>, CellMismatch> {
        let width = self.columns.len();
        if rows == 0 || rows > MAX_ROWS || cells.len() != rows * width {
            return Ok(None);
        }
        let mut out = Vec::with_capacity(64 + cells.len() * 16);
        out.extend_from_slice(b"PAR1");
        let mut chunks = Vec::with_capacity(width);
        let mut page = PageBuffers::default();
        for (i, plan) in self.columns.iter().enumerate() {
            let column = cells.iter().skip(i).step_by(width);
            let stats = page.fill(plan, column, rows, self.page_size)?;
            let Some(chunk) = self.put_pages(&mut out, &mut page, stats) else { return Ok(None) };
            chunks.push(chunk);
        }
        let footer_at = out.len();
        self.put_footer(&mut out, &chunks, rows);
        let footer_len = u32::try_from(out.len() - footer_at).unwrap_or(u32::MAX);
        out.extend_from_slice(&footer_len.to_le_bytes());
        out.extend_from_slice(b"PAR1");
        Ok(Some(out))
    }

    /// Writes one column's pages (each a header and a body, cut where [`PageBuffers::fill`]
    /// cut them) and says where they went; `None` if the codec refused one (SNAPPY past
    /// 4 GiB, which the page size rules out).
    fn put_pages(&self, out: &mut Vec<u8>, page: &mut PageBuffers, stats: Stats) -> Option<Chunk> {
        let mut chunk = Chunk { offset: out.len() as i64, compressed: 0, uncompressed: 0, pages: 0, stats };
        let (mut row, mut at) = (0, 0);
        for &(row_end, values_end) in &page.cuts {
            // The body: definition levels with their length, then the values.
            put_levels(&mut page.levels, &page.valid[row..row_end]);
            let levels_len = u32::try_from(page.levels.len()).unwrap_or(u32::MAX);
            page.body.clear();
            page.body.extend_from_slice(&levels_len.to_le_bytes());
            page.body.extend_from_slice(&page.levels);
            page.body.extend_from_slice(&page.values[at..values_end]);
            let uncompressed = page.body.len();
            page.compressed.clear();
            let body: &[u8] = match self.compression {
                ParquetCompression::Snappy => {
                    page.compressed.resize(snap::raw::max_compress_len(uncompressed), 0);
                    let n = snap::raw::Encoder::new().compress(&page.body, &mut page.compressed).ok()?;
                    page.compressed.truncate(n);
                    &page.compressed
                }
                ParquetCompression::Gzip => {
                    let mut gz = flate2::write::GzEncoder::new(&mut page.compressed, flate2::Compression::new(6));
                    // Writes into a Vec do not fail.
                    let _ = gz.write_all(&page.body);
                    let _ = gz.finish();
                    &page.compressed
                }
                ParquetCompression::Uncompressed | ParquetCompression::Zstd => &page.body,
            };
            let offset = out.len();
            {
                let mut header = Struct::new(out);
                header.i32(1, format::DATA_PAGE).i32(2, len_i32(uncompressed)).i32(3, len_i32(body.len()));
                header.struct_field(5, |h| {
                    h.i32(1, len_i32(row_end - row)).i32(2, format::PLAIN).i32(3, format::RLE).i32(4, format::RLE);
                });
                header.end();
            }
            let header_len = out.len() - offset;
            out.extend_from_slice(body);
            chunk.compressed += (header_len + body.len()) as i64;
            chunk.uncompressed += (header_len + uncompressed) as i64;
            chunk.pages += 1;
            (row, at) = (row_end, values_end);
        }
        Some(chunk)
    }

    fn put_footer(&self, out: &mut Vec<u8>, chunks: &[Chunk], rows: usize) {
        let mut meta = Struct::new(out);
        meta.i32(1, 1);
        meta.list(2, Elements::Struct, self.columns.len() + 1, |o| {
            let mut root = Struct::new(o);
            root.binary(4, b"arrow_schema").i32(5, len_i32(self.columns.len()));
            root.end();
            for plan in &self.columns {
                put_schema_element(o, plan);
            }
        });
        meta.i64(3, rows as i64);
        meta.list(4, Elements::Struct, 1, |o| {
            let mut group = Struct::new(o);
            group.list(1, Elements::Struct, chunks.len(), |o| {
                for (plan, chunk) in self.columns.iter().zip(chunks) {
                    let mut cc = Struct::new(o);
                    cc.i64(2, 0);
                    cc.struct_field(3, |m| self.put_column_meta(m, plan, chunk, rows));
                    cc.end();
                }
            });
            group.i64(2, chunks.iter().map(|c| c.uncompressed).sum());
            group.i64(3, rows as i64);
            group.i64(5, chunks.first().map_or(4, |c| c.offset));
            group.i64(6, chunks.iter().map(|c| c.compressed).sum());
            group.i16(7, 0);
            group.end();
        });
        meta.binary(6, self.created_by.as_bytes());
        // ColumnOrder, a union: TYPE_ORDER 1 for every column, as arrow-rs 58 writes.
        meta.list(7, Elements::Struct, self.columns.len(), |o| {
            for _ in &self.columns {
                let mut order = Struct::new(o);
                order.struct_field(1, |_| {});
                order.end();
            }
        });
        meta.end();
    }

    fn put_column_meta(&self, m: &mut Struct<'_>, plan: &Plan, chunk: &Chunk, rows: usize) {
        m.i32(1, plan.kind.physical());
        m.list(2, Elements::I32, 2, |o| {
            put_i32(o, format::PLAIN);
            put_i32(o, format::RLE);
        });
        m.list(3, Elements::Binary, 1, |o| binary(o, plan.name.as_bytes()));
        m.i32(4, self.codec).i64(5, rows as i64).i64(6, chunk.uncompressed).i64(7, chunk.compressed);
        m.i64(9, chunk.offset);
        m.struct_field(12, |s| {
            let st = &chunk.stats;
            if let (Some((min, _)), Some((max, _))) = (&st.min, &st.max)
                && plan.kind.legacy_min_max()
            {
                s.binary(1, max).binary(2, min);
            }
            s.i64(3, st.nulls as i64);
            if let (Some((min, min_exact)), Some((max, max_exact))) = (&st.min, &st.max) {
                s.binary(5, max).binary(6, min).bool(7, *max_exact).bool(8, *min_exact);
            }
        });
        m.list(13, Elements::Struct, 1, |o| {
            let mut e = Struct::new(o);
            e.i32(1, format::DATA_PAGE).i32(2, format::PLAIN).i32(3, chunk.pages);
            e.end();
        });
    }
}

/// A leaf of the schema: the type, optional, the name, and the converted and logical
/// types arrow-rs gives the column's Arrow type.
fn put_schema_element(o: &mut Vec<u8>, plan: &Plan) {
    let mut e = Struct::new(o);
    e.i32(1, plan.kind.physical()).i32(3, format::OPTIONAL).binary(4, plan.name.as_bytes());
    let converted = match plan.ty {
        ColumnType::String => Some(format::UTF8),
        ColumnType::TinyInt => Some(format::INT_8),
        ColumnType::SmallInt => Some(format::INT_16),
        ColumnType::Timestamp => Some(format::TIMESTAMP_MICROS),
        ColumnType::Date => Some(format::DATE),
        _ => None,
    };
    if let Some(c) = converted {
        e.i32(6, c);
    }
    // LogicalType, a union: STRING 1, DATE 6, TIMESTAMP 8, INTEGER 10.
    match plan.ty {
        ColumnType::String => {
            e.struct_field(10, |l| {
                l.struct_field(1, |_| {});
            });
        }
        ColumnType::Date => {
            e.struct_field(10, |l| {
                l.struct_field(6, |_| {});
            });
        }
        ColumnType::Timestamp => {
            e.struct_field(10, |l| {
                l.struct_field(8, |t| {
                    // isAdjustedToUTC false; unit MICROS (2).
                    t.bool(1, false).struct_field(2, |u| {
                        u.struct_field(2, |_| {});
                    });
                });
            });
        }
        ColumnType::TinyInt | ColumnType::SmallInt => {
            let bits = if plan.ty == ColumnType::TinyInt { 8 } else { 16 };
            e.struct_field(10, |l| {
                l.struct_field(10, |i| {
                    i.i8(1, bits).bool(2, true);
                });
            });
        }
        _ => {}
    }
    e.end();
}

/// A cell that does not fit its column.
#[derive(Debug, thiserror::Error)]
#[error("a cell does not fit column {column} ({ty:?})")]
pub struct CellMismatch {
    column: String,
    ty: ColumnType,
}

/// Where a column's page went and its statistics.
struct Chunk {
    offset: i64,
    compressed: i64,
    uncompressed: i64,
    pages: i32,
    stats: Stats,
}

/// A column chunk's statistics: nulls, and min and max as Parquet stores them (plain
/// encoded) with whether each is exact.
#[derive(Default)]
struct Stats {
    nulls: u64,
    min: Option<(Vec<u8>, bool)>,
    max: Option<(Vec<u8>, bool)>,
}

/// A column's pages, reused from column to column.
#[derive(Default)]
struct PageBuffers {
    /// Every row's definition: not null.
    valid: Vec<bool>,
    /// Every value, PLAIN.
    values: Vec<u8>,
    /// Where pages end: (rows, value bytes) before the end, the last at the column's.
    cuts: Vec<(usize, usize)>,
    levels: Vec<u8>,
    body: Vec<u8>,
    compressed: Vec<u8>,
}

impl PageBuffers {
    /// Encodes one column's cells into definitions and values, cut into pages once
    /// their values pass `page_size` (booleans, at most [`MAX_ROWS`] bits, never are);
    /// its statistics.
    fn fill<'c, 'a: 'c>(
        &mut self,
        plan: &Plan,
        cells: impl Iterator<Item = &'c CellRef<'a>>,
        rows: usize,
        page_size: usize,
    ) -> Result<Stats, CellMismatch> {
        let wrong = || CellMismatch { column: plan.name.clone(), ty: plan.ty.clone() };
        self.values.clear();
        self.valid.clear();
        self.cuts.clear();
        let mut stats = Stats::default();
        // Bounds of the values so far (byte arrays and integers; floats below).
        let mut bytes: Option<(&[u8], &[u8])> = None;
        let mut ints: Option<(i64, i64)> = None;
        let (mut f_min, mut f_max): (Option<f64>, Option<f64>) = (None, None);
        let mut bits = BitWriter::default();
        for cell in cells {
            let (page_row, page_at) = self.cuts.last().copied().unwrap_or((0, 0));
            if self.values.len() - page_at >= page_size && self.valid.len() > page_row && plan.kind != Kind::Bool {
                self.cuts.push((self.valid.len(), self.values.len()));
            }
            let is_null = matches!(cell, CellRef::Other(Cell::Null));
            self.valid.push(!is_null);
            if is_null {
                stats.nulls += 1;
                continue;
            }
            match (plan.kind, cell) {
                (Kind::Utf8, CellRef::Str(s)) => put_byte_array(&mut self.values, s.as_bytes(), &mut bytes),
                (Kind::Bytes, CellRef::Other(Cell::Bytes(b))) => put_byte_array(&mut self.values, b, &mut bytes),
                (Kind::Bool, CellRef::Other(Cell::Bool(b))) => {
                    bits.push(&mut self.values, *b);
                    widen(&mut ints, i64::from(*b));
                }
                (Kind::Int32 { min, max }, CellRef::Other(Cell::Int(v))) if (min..=max).contains(v) => {
                    self.values.extend_from_slice(&(*v as i32).to_le_bytes());
                    widen(&mut ints, *v);
                }
                (Kind::Days, CellRef::Other(Cell::Days(v))) => {
                    self.values.extend_from_slice(&v.to_le_bytes());
                    widen(&mut ints, i64::from(*v));
                }
                (Kind::Int64, CellRef::Other(Cell::Int(v))) | (Kind::Micros, CellRef::Other(Cell::Micros(v))) => {
                    self.values.extend_from_slice(&v.to_le_bytes());
                    widen(&mut ints, *v);
                }
                (Kind::Float, CellRef::Other(Cell::Float(v))) => {
                    let v = *v as f32;
                    self.values.extend_from_slice(&v.to_le_bytes());
                    float_bounds(f64::from(v), &mut f_min, &mut f_max);
                }
                (Kind::Double, CellRef::Other(Cell::Float(v))) => {
                    self.values.extend_from_slice(&v.to_le_bytes());
                    float_bounds(*v, &mut f_min, &mut f_max);
                }
                _ => return Err(wrong()),
            }
        }
        if self.valid.len() != rows {
            return Err(wrong());
        }
        bits.finish(&mut self.values);
        self.cuts.push((rows, self.values.len()));
        let exact = |v: Vec<u8>| Some((v, true));
        match plan.kind {
            Kind::Utf8 | Kind::Bytes => {
                let utf8 = plan.kind == Kind::Utf8;
                stats.min = bytes.map(|(min, _)| truncate_min(min, utf8));
                stats.max = bytes.map(|(_, max)| truncate_max(max, utf8));
            }
            Kind::Bool => {
                stats.min = ints.and_then(|(min, _)| exact(vec![min as u8]));
                stats.max = ints.and_then(|(_, max)| exact(vec![max as u8]));
            }
            Kind::Int32 { .. } | Kind::Days => {
                stats.min = ints.and_then(|(min, _)| exact((min as i32).to_le_bytes().to_vec()));
                stats.max = ints.and_then(|(_, max)| exact((max as i32).to_le_bytes().to_vec()));
            }
            Kind::Int64 | Kind::Micros => {
                stats.min = ints.and_then(|(min, _)| exact(min.to_le_bytes().to_vec()));
                stats.max = ints.and_then(|(_, max)| exact(max.to_le_bytes().to_vec()));
            }
            Kind::Float => {
                stats.min = f_min.and_then(|v| exact((zero_signed(v, -0.0) as f32).to_le_bytes().to_vec()));
                stats.max = f_max.and_then(|v| exact((zero_signed(v, 0.0) as f32).to_le_bytes().to_vec()));
            }
            Kind::Double => {
                stats.min = f_min.and_then(|v| exact(zero_signed(v, -0.0).to_le_bytes().to_vec()));
                stats.max = f_max.and_then(|v| exact(zero_signed(v, 0.0).to_le_bytes().to_vec()));
            }
        }
        Ok(stats)
    }
}

/// Bounds as arrow-rs 58 computes them: NaN skipped (no bounds when every value is
/// NaN), the first of equal values kept (`-0.0 == 0.0`). [`zero_signed`] then writes a
/// zero min as -0.0 and a zero max as +0.0, as the Parquet specification asks.
fn float_bounds(v: f64, min: &mut Option<f64>, max: &mut Option<f64>) {
    if v.is_nan() {
        return;
    }
    if min.is_none_or(|m| m > v) {
        *min = Some(v);
    }
    if max.is_none_or(|m| v > m) {
        *max = Some(v);
    }
}

/// A zero bound with the sign the specification gives it: `sign` (-0.0 for a min,
/// +0.0 for a max); any other value as it is.
fn zero_signed(v: f64, sign: f64) -> f64 {
    if v == 0.0 { sign } else { v }
}

/// A PLAIN byte array (its length, 4 bytes little-endian, and bytes), and the column's
/// bounds in unsigned byte order widened to it.
fn put_byte_array<'b>(out: &mut Vec<u8>, b: &'b [u8], bounds: &mut Option<(&'b [u8], &'b [u8])>) {
    out.extend_from_slice(&u32::try_from(b.len()).unwrap_or(u32::MAX).to_le_bytes());
    out.extend_from_slice(b);
    *bounds = Some(bounds.map_or((b, b), |(min, max)| (min.min(b), max.max(b))));
}

/// `bounds` widened to `v`.
fn widen(bounds: &mut Option<(i64, i64)>, v: i64) {
    *bounds = Some(bounds.map_or((v, v), |(min, max)| (min.min(v), max.max(v))));
}

/// Definition levels (bit width 1) in the RLE/bit-packed hybrid: one RLE run when every
/// row is alike, bit-packed groups of 8 otherwise.
fn put_levels(out: &mut Vec<u8>, valid: &[bool]) {
    out.clear();
    let n = valid.len() as u64;
    if let Some(first) = valid.first()
        && valid.iter().all(|v| v == first)
    {
        super::compact_thrift::varint(out, n << 1);
        out.push(u8::from(*first));
        return;
    }
    let groups = valid.len().div_ceil(8);
    super::compact_thrift::varint(out, ((groups as u64) << 1) | 1);
    for group in valid.chunks(8) {
        out.push(group.iter().enumerate().fold(0u8, |b, (i, v)| b | (u8::from(*v) << i)));
    }
}

/// PLAIN booleans: bit-packed, least significant bit first.
#[derive(Default)]
struct BitWriter {
    byte: u8,
    used: u8,
}

impl BitWriter {
    fn push(&mut self, out: &mut Vec<u8>, b: bool) {
        self.byte |= u8::from(b) << self.used;
        self.used += 1;
        if self.used == 8 {
            out.push(self.byte);
            (self.byte, self.used) = (0, 0);
        }
    }

    fn finish(self, out: &mut Vec<u8>) {
        if self.used > 0 {
            out.push(self.byte);
        }
    }
}

/// The byte-array minimum as arrow-rs stores it: past [`STATISTICS_TRUNCATE`] bytes, a
/// prefix (at a character boundary for UTF-8), not exact.
fn truncate_min(m: &[u8], utf8: bool) -> (Vec<u8>, bool) {
    if m.len() <= STATISTICS_TRUNCATE {
        return (m.to_vec(), true);
    }
    let cut = if utf8 { char_boundary(m, STATISTICS_TRUNCATE) } else { STATISTICS_TRUNCATE };
    (m[..cut].to_vec(), false)
}

/// The byte-array maximum as arrow-rs stores it: past [`STATISTICS_TRUNCATE`] bytes, a
/// prefix with its last byte (character, for UTF-8) incremented, not exact; the whole
/// value when no such prefix exists.
fn truncate_max(m: &[u8], utf8: bool) -> (Vec<u8>, bool) {
    if m.len() <= STATISTICS_TRUNCATE {
        return (m.to_vec(), true);
    }
    let bumped = if utf8 {
        std::str::from_utf8(&m[..char_boundary(m, STATISTICS_TRUNCATE)]).ok().and_then(increment_utf8)
    } else {
        increment_bytes(&m[..STATISTICS_TRUNCATE])
    };
    bumped.map_or_else(|| (m.to_vec(), true), |b| (b, false))
}

/// The longest prefix of `m` of at most `len` bytes that ends at a character boundary.
fn char_boundary(m: &[u8], len: usize) -> usize {
    let mut cut = len.min(m.len());
    // A continuation byte (10xxxxxx) is not a boundary.
    while cut > 0 && cut < m.len() && (m[cut] & 0xC0) == 0x80 {
        cut -= 1;
    }
    cut
}

/// The smallest string above every string that starts with `s` and is no longer, as
/// arrow-rs makes it: the last character whose successor is a character of the same
/// UTF-8 length is replaced by it, and what follows it is dropped.
fn increment_utf8(s: &str) -> Option<Vec<u8>> {
    for (at, c) in s.char_indices().rev() {
        // U+D7FF has no successor here (U+D800 is a surrogate), as in arrow-rs.
        if let Some(n) = char::from_u32(u32::from(c) + 1).filter(|n| n.len_utf8() == c.len_utf8()) {
            let mut out = s.as_bytes()[..at].to_vec();
            out.extend_from_slice(n.encode_utf8(&mut [0u8; 4]).as_bytes());
            return Some(out);
        }
    }
    None
}

/// `b` plus one in its last byte, carrying into the ones before; `None` when every
/// byte is 0xFF.
fn increment_bytes(b: &[u8]) -> Option<Vec<u8>> {
    let mut out = b.to_vec();
    for byte in out.iter_mut().rev() {
        if *byte == 0xFF {
            *byte = 0;
        } else {
            *byte += 1;
            return Some(out);
        }
    }
    None
}

fn len_i32(n: usize) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}
