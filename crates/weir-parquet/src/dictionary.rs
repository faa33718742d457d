//! Which columns keep dictionary pages under `EnableDictionaryCompression`.
//!
//! Firehose writes Parquet with parquet-mr, which starts every column dictionary-encoded
//! and, when its first page is written, keeps the dictionary only if the page's
//! dictionary ids and the dictionary together are smaller than the page's values
//! written plain; otherwise the column falls back to plain values (and always when
//! the dictionary outgrows its page). Booleans are never dictionary-encoded. arrow-rs
//! keeps a dictionary until it outgrows its page, so without this rule a column of
//! distinct values (session ids, timestamps, JSON text) paid a dictionary of every
//! value and an id per row: turning the setting on made objects larger than without
//! it (2.10× GZIP's size at 500 partitions against 1.83×), where parquet-mr keeps a
//! dictionary only for the columns it shrinks before compression
//! (`tests/tests/archive_parquet_mr.rs` finds dictionaries in the same columns of
//! weir's objects as of parquet-mr's).
//!
//! The rule here is parquet-mr's, applied to the first rows weir encodes together (a
//! batch of up to [`ENCODE_ROWS`](super::ENCODE_ROWS)); parquet-mr's first page holds
//! up to 20,000 values (its page row limit), so the choices differ only for a column
//! whose values change character past that batch. The ids' size is that of
//! bit-packing them at the dictionary's width (the RLE/bit-packed hybrid writes no
//! more, less for runs). Columns of nested types keep arrow-rs's choice (a dictionary
//! per leaf, as before).

use std::collections::HashSet;

use arrow_array::cast::AsArray;
use arrow_array::types::{
    Date32Type, Decimal128Type, Float32Type, Float64Type, Int8Type, Int16Type, Int32Type, Int64Type,
    TimestampMicrosecondType,
};
use arrow_array::{Array, ArrowPrimitiveType, RecordBatch};
use arrow_schema::{DataType, TimeUnit};

/// The names of `first`'s columns whose dictionary parquet-mr would drop at the end
/// of its first page, given the dictionary page's limit in bytes.
pub fn without_dictionary(first: &RecordBatch, dictionary_page_limit: usize) -> Vec<String> {
    let schema = first.schema();
    schema
        .fields()
        .iter()
        .zip(first.columns())
        .filter(|(_, column)| {
            let Some(sizes) = plain_sizes(column.as_ref()) else { return false };
            !keeps_dictionary(sizes, dictionary_page_limit)
        })
        .map(|(field, _)| field.name().clone())
        .collect()
}

/// A column's first page as parquet-mr's rule weighs it: its values' bytes written
/// plain, how many values, how many distinct, and their bytes written plain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Sizes {
    raw: usize,
    values: usize,
    distinct: usize,
    dictionary: usize,
}

/// parquet-mr's `isCompressionSatisfying` (ids plus dictionary smaller than the plain
/// values) and its fallback once the dictionary passes its page.
fn keeps_dictionary(s: Sizes, dictionary_page_limit: usize) -> bool {
    if s.dictionary > dictionary_page_limit {
        return false;
    }
    let width = usize::BITS - s.distinct.saturating_sub(1).leading_zeros();
    // One byte for the width, then the ids bit-packed.
    let ids = 1 + (s.values * width as usize).div_ceil(8);
    ids + s.dictionary < s.raw
}

/// The sizes of a flat column (`None`: a boolean, which is never dictionary-encoded,
/// or a nested column, left to arrow-rs).
fn plain_sizes(column: &dyn Array) -> Option<Sizes> {
    match column.data_type() {
        DataType::Utf8 => Some(bytes_sizes(column.as_string::<i32>().iter().map(|v| v.map(str::as_bytes)))),
        DataType::Binary => Some(bytes_sizes(column.as_binary::<i32>().iter())),
        DataType::Int8 => Some(fixed_sizes::<Int8Type>(column, 4)),
        DataType::Int16 => Some(fixed_sizes::<Int16Type>(column, 4)),
        DataType::Int32 => Some(fixed_sizes::<Int32Type>(column, 4)),
        DataType::Date32 => Some(fixed_sizes::<Date32Type>(column, 4)),
        DataType::Int64 => Some(fixed_sizes::<Int64Type>(column, 8)),
        DataType::Timestamp(TimeUnit::Microsecond, _) => Some(fixed_sizes::<TimestampMicrosecondType>(column, 8)),
        DataType::Float32 => Some(fixed_sizes::<Float32Type>(column, 4)),
        DataType::Float64 => Some(fixed_sizes::<Float64Type>(column, 8)),
        // As arrow-rs stores decimals: INT32 to precision 9, INT64 to 18, then the
        // fewest bytes that hold the precision and a sign (16 at precision 38).
        DataType::Decimal128(precision, _) => {
            let width = match *precision {
                0..=9 => 4,
                10..=18 => 8,
                p => ((f64::from(p) * 10f64.log2() + 1.0) / 8.0).ceil() as usize,
            };
            Some(fixed_sizes::<Decimal128Type>(column, width))
        }
        _ => None,
    }
}

/// Byte arrays are written plain as a 4-byte length and the bytes.
fn bytes_sizes<'a>(values: impl Iterator<Item = Option<&'a [u8]>>) -> Sizes {
    let mut seen = HashSet::new();
    let mut s = Sizes { raw: 0, values: 0, distinct: 0, dictionary: 0 };
    for v in values.flatten() {
        s.raw += 4 + v.len();
        s.values += 1;
        if seen.insert(v) {
            s.dictionary += 4 + v.len();
        }
    }
    s.distinct = seen.len();
    s
}

/// Values of a fixed `width` in bytes, told apart by their bits.
fn fixed_sizes<T: ArrowPrimitiveType>(column: &dyn Array, width: usize) -> Sizes
where
    T::Native: ToBits,
{
    let mut seen = HashSet::new();
    let mut values = 0;
    for v in column.as_primitive::<T>().iter().flatten() {
        values += 1;
        seen.insert(v.to_bits());
    }
    Sizes { raw: values * width, values, distinct: seen.len(), dictionary: seen.len() * width }
}

/// A value's bits, for telling values apart (floats by their bits, as a dictionary
/// of their plain encodings does).
trait ToBits {
    fn to_bits(self) -> i128;
}

macro_rules! to_bits_int {
    ($($t:ty),*) => {$(impl ToBits for $t { fn to_bits(self) -> i128 { i128::from(self) } })*};
}
to_bits_int!(i8, i16, i32, i64, i128);

impl ToBits for f32 {
    fn to_bits(self) -> i128 {
        i128::from(f32::to_bits(self))
    }
}

impl ToBits for f64 {
    fn to_bits(self) -> i128 {
        i128::from(f64::to_bits(self))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::{ArrayRef, BooleanArray, Int64Array, ListArray, StringArray};
    use arrow_schema::{Field, Schema};

    use super::*;

    fn batch(columns: Vec<(&str, ArrayRef)>) -> RecordBatch {
        let fields: Vec<Field> = columns.iter().map(|(n, a)| Field::new(*n, a.data_type().clone(), true)).collect();
        RecordBatch::try_new(Arc::new(Schema::new(fields)), columns.into_iter().map(|(_, a)| a).collect()).unwrap()
    }

    #[test]
    fn distinct_values_fall_back_and_repeated_ones_keep_the_dictionary() {
        let rows = 200;
        let b = batch(vec![
            ("tenant", Arc::new(StringArray::from(vec!["t-0001"; rows])) as ArrayRef),
            ("session", Arc::new(StringArray::from_iter_values((0..rows).map(|i| format!("sess-{i:08x}"))))),
            ("ts", Arc::new(Int64Array::from_iter_values((0..rows as i64).map(|i| 1_764_400_000_000 + i * 3))) as _),
            ("duration", Arc::new(Int64Array::from_iter_values((0..rows as i64).map(|i| i % 4))) as _),
            ("ok", Arc::new(BooleanArray::from(vec![true; rows])) as _),
            ("error", Arc::new(StringArray::from(vec![None::<&str>; rows])) as _),
            (
                "tags",
                Arc::new(ListArray::from_iter_primitive::<Int32Type, _, _>((0..rows).map(|_| Some(vec![Some(1)]))))
                    as _,
            ),
        ]);
        // Distinct strings and timestamps fall back, and a column of nulls (nothing
        // to save); a constant string and a few integers keep it; booleans and nested
        // columns are not weighed.
        assert_eq!(without_dictionary(&b, 1 << 20), ["session", "ts", "error"]);
    }

    #[test]
    fn the_rule_is_parquet_mrs_strict_comparison() {
        // 4 distinct values of 8 bytes in 16: ids 1 + 16*2/8 = 5, dictionary 32; raw 128.
        let s = Sizes { raw: 128, values: 16, distinct: 4, dictionary: 32 };
        assert!(keeps_dictionary(s, 1 << 20));
        // Exactly as large: parquet-mr falls back (encoded + dictionary < raw).
        assert!(!keeps_dictionary(Sizes { raw: 37, ..s }, 1 << 20));
        assert!(keeps_dictionary(Sizes { raw: 38, ..s }, 1 << 20));
        // A dictionary past its page falls back whatever it saves.
        assert!(!keeps_dictionary(s, 31));
        // One value: width 0, one byte of ids.
        assert!(keeps_dictionary(Sizes { raw: 80, values: 10, distinct: 1, dictionary: 8 }, 1 << 20));
    }

    #[test]
    fn decimals_weigh_what_arrow_rs_writes() {
        use arrow_array::Decimal128Array;
        let sizes = |precision: u8| {
            let a = Decimal128Array::from(vec![1i128, 2, 2]).with_precision_and_scale(precision, 2).unwrap();
            plain_sizes(&a).unwrap()
        };
        // INT32, INT64, then FIXED_LEN_BYTE_ARRAY of 9 and 16 bytes.
        for (precision, width) in [(9, 4), (18, 8), (20, 9), (38, 16)] {
            assert_eq!(sizes(precision), Sizes { raw: 3 * width, values: 3, distinct: 2, dictionary: 2 * width });
        }
    }
}
