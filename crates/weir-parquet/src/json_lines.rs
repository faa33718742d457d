//! Parquet files back into JSON lines, what `weir replay --from-archive` reads from a
//! Parquet archive (weir's or Firehose's).
//!
//! Each row becomes one JSON object keyed by the file's column names, each value in
//! the form the archiver's deserialisers (and Hive's) read back, so replaying an
//! archive into the same table converts every row to the same values again (tested
//! on every Hive type below, and by the `parquet_row` fuzz target on any record):
//! - timestamps as `yyyy-MM-dd HH:mm:ss[.f]` in UTC, dates as `yyyy-MM-dd` (years
//!   outside 0–9999 signed, `+12345-01-01`, as chrono writes and reads them);
//! - decimals as exact JSON numbers at their scale, binary as base64 text;
//! - non-finite floats as the text `NaN`, `Infinity`, `-Infinity`;
//! - arrays, structs and maps as JSON arrays and objects (a map's keys as text).
//!
//! A null column or struct member is left out (a missing key reads as null); a null
//! inside an array or a map is written as `null`.
//!
//! Written by hand rather than with arrow-json's writer, which weir does not otherwise
//! depend on and which writes binary as hex: Hive's SerDes and the archiver read binary
//! from base64, so its output would not convert back to the same bytes.

use arrow_array::cast::AsArray;
use arrow_array::types::{
    Date32Type, Date64Type, Decimal128Type, Float16Type, Float32Type, Float64Type, Int8Type, Int16Type, Int32Type,
    Int64Type, TimestampMicrosecondType, TimestampMillisecondType, TimestampNanosecondType, TimestampSecondType,
    UInt8Type, UInt16Type, UInt32Type, UInt64Type,
};
use arrow_array::{Array, ArrayRef, MapArray, OffsetSizeTrait};
use arrow_schema::{DataType, TimeUnit};
use base64::Engine as _;
use bytes::Bytes;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

use super::ENCODE_ROWS;

/// Why a file cannot be read as JSON lines.
#[derive(Debug, thiserror::Error)]
pub enum JsonLinesError {
    /// Not a Parquet file, or a damaged one.
    #[error("not a readable Parquet file: {0}")]
    Parquet(String),
    /// A column of a type that has no JSON form here.
    #[error("column {column}: {ty} values have no JSON form")]
    Unsupported {
        /// The column.
        column: String,
        /// Its Arrow type.
        ty: String,
    },
    /// A date or time past the ±262,000 years that have a text form (a timestamp
    /// that far out is written as epoch milliseconds when it is a whole one).
    #[error("column {column}: {value} is not a date or time JSON can hold")]
    OutOfRange {
        /// The column.
        column: String,
        /// The stored value.
        value: i64,
    },
    /// The JSON would pass the caller's limit.
    #[error("more than {0} bytes as JSON lines")]
    TooLarge(u64),
}

/// The rows of a Parquet `file` as JSON lines (each ends in `\n`), in order; at most
/// `limit` bytes of them.
pub fn json_lines(file: &Bytes, limit: u64) -> Result<Vec<u8>, JsonLinesError> {
    let parquet = |e: parquet::errors::ParquetError| JsonLinesError::Parquet(e.to_string());
    let reader =
        ParquetRecordBatchReaderBuilder::try_new(file.clone()).map_err(parquet)?.with_batch_size(ENCODE_ROWS).build();
    let mut out = Vec::new();
    for batch in reader.map_err(parquet)? {
        let batch = batch.map_err(|e| JsonLinesError::Parquet(e.to_string()))?;
        let schema = batch.schema();
        for row in 0..batch.num_rows() {
            let members = schema.fields().iter().map(|f| f.name().as_str()).zip(batch.columns());
            object(&mut out, members, row)?;
            out.push(b'\n');
            if out.len() as u64 > limit {
                return Err(JsonLinesError::TooLarge(limit));
            }
        }
    }
    Ok(out)
}

/// `{"name":value,...}` of the members that are not null at `row`.
fn object<'a>(
    out: &mut Vec<u8>,
    members: impl Iterator<Item = (&'a str, &'a ArrayRef)>,
    row: usize,
) -> Result<(), JsonLinesError> {
    out.push(b'{');
    let mut first = true;
    for (name, array) in members {
        if array.is_null(row) {
            continue;
        }
        if !first {
            out.push(b',');
        }
        first = false;
        text(out, name);
        out.push(b':');
        value(out, array.as_ref(), row, name)?;
    }
    out.push(b'}');
    Ok(())
}

fn text(out: &mut Vec<u8>, s: &str) {
    // Writing a string into a Vec cannot fail.
    let _ = serde_json::to_writer(&mut *out, s);
}

fn float(out: &mut Vec<u8>, f: f64, as_f32: bool) {
    if f.is_nan() {
        out.extend_from_slice(b"\"NaN\"");
    } else if f.is_infinite() {
        out.extend_from_slice(if f > 0.0 { b"\"Infinity\"" } else { b"\"-Infinity\"" });
    } else if as_f32 {
        let _ = serde_json::to_writer(&mut *out, &(f as f32));
    } else {
        let _ = serde_json::to_writer(&mut *out, &f);
    }
}

/// The value at `i` of `array` (of the column `column`, for errors).
fn value(out: &mut Vec<u8>, array: &dyn Array, i: usize, column: &str) -> Result<(), JsonLinesError> {
    if array.is_null(i) {
        out.extend_from_slice(b"null");
        return Ok(());
    }
    macro_rules! number {
        ($t:ty) => {{
            let _ = serde_json::to_writer(&mut *out, &array.as_primitive::<$t>().value(i));
        }};
    }
    let range = |value: i64| JsonLinesError::OutOfRange { column: column.to_owned(), value };
    match array.data_type() {
        DataType::Null => out.extend_from_slice(b"null"),
        DataType::Boolean => out.extend_from_slice(if array.as_boolean().value(i) { b"true" } else { b"false" }),
        DataType::Int8 => number!(Int8Type),
        DataType::Int16 => number!(Int16Type),
        DataType::Int32 => number!(Int32Type),
        DataType::Int64 => number!(Int64Type),
        DataType::UInt8 => number!(UInt8Type),
        DataType::UInt16 => number!(UInt16Type),
        DataType::UInt32 => number!(UInt32Type),
        DataType::UInt64 => number!(UInt64Type),
        DataType::Float16 => float(out, f64::from(array.as_primitive::<Float16Type>().value(i).to_f32()), true),
        DataType::Float32 => float(out, f64::from(array.as_primitive::<Float32Type>().value(i)), true),
        DataType::Float64 => float(out, array.as_primitive::<Float64Type>().value(i), false),
        DataType::Utf8 => text(out, array.as_string::<i32>().value(i)),
        DataType::LargeUtf8 => text(out, array.as_string::<i64>().value(i)),
        DataType::Utf8View => text(out, array.as_string_view().value(i)),
        DataType::Binary => base64(out, array.as_binary::<i32>().value(i)),
        DataType::LargeBinary => base64(out, array.as_binary::<i64>().value(i)),
        DataType::BinaryView => base64(out, array.as_binary_view().value(i)),
        DataType::FixedSizeBinary(_) => base64(out, array.as_fixed_size_binary().value(i)),
        DataType::Timestamp(unit, _) => {
            let v = match unit {
                TimeUnit::Second => array.as_primitive::<TimestampSecondType>().value(i),
                TimeUnit::Millisecond => array.as_primitive::<TimestampMillisecondType>().value(i),
                TimeUnit::Microsecond => array.as_primitive::<TimestampMicrosecondType>().value(i),
                TimeUnit::Nanosecond => array.as_primitive::<TimestampNanosecondType>().value(i),
            };
            let per_second: i64 = match unit {
                TimeUnit::Second => 1,
                TimeUnit::Millisecond => 1_000,
                TimeUnit::Microsecond => 1_000_000,
                TimeUnit::Nanosecond => 1_000_000_000,
            };
            let nanos = (v.rem_euclid(per_second) * (1_000_000_000 / per_second)) as u32;
            match chrono::DateTime::from_timestamp(v.div_euclid(per_second), nanos) {
                Some(t) => text(out, &t.format("%Y-%m-%d %H:%M:%S%.f").to_string()),
                // Past the ±262,000 years of the text form, epoch milliseconds still read.
                None if per_second <= 1_000 || v % (per_second / 1_000) == 0 => {
                    let millis = i128::from(v) * 1_000 / i128::from(per_second);
                    out.extend_from_slice(millis.to_string().as_bytes());
                }
                None => return Err(range(v)),
            }
        }
        DataType::Date32 | DataType::Date64 => {
            let days = match array.data_type() {
                DataType::Date32 => i64::from(array.as_primitive::<Date32Type>().value(i)),
                _ => array.as_primitive::<Date64Type>().value(i).div_euclid(86_400_000),
            };
            let d = chrono::NaiveDate::from_ymd_opt(1970, 1, 1)
                .and_then(|epoch| epoch.checked_add_signed(chrono::TimeDelta::try_days(days)?))
                .ok_or_else(|| range(days))?;
            text(out, &d.format("%Y-%m-%d").to_string());
        }
        DataType::Decimal128(_, scale) => {
            out.extend_from_slice(decimal(array.as_primitive::<Decimal128Type>().value(i), *scale).as_bytes());
        }
        DataType::List(_) => list(out, array.as_list::<i32>(), i, column)?,
        DataType::LargeList(_) => list(out, array.as_list::<i64>(), i, column)?,
        DataType::FixedSizeList(_, n) => {
            let list = array.as_fixed_size_list();
            let start = i * *n as usize;
            items(out, list.values(), start..start + *n as usize, column)?;
        }
        DataType::Struct(fields) => {
            let s = array.as_struct();
            object(out, fields.iter().map(|f| f.name().as_str()).zip(s.columns()), i)?;
        }
        DataType::Map(_, _) => map(out, array.as_map(), i, column)?,
        other => return Err(JsonLinesError::Unsupported { column: column.to_owned(), ty: other.to_string() }),
    }
    Ok(())
}

fn base64(out: &mut Vec<u8>, bytes: &[u8]) {
    text(out, &base64::engine::general_purpose::STANDARD.encode(bytes));
}

fn list<O: OffsetSizeTrait>(
    out: &mut Vec<u8>,
    list: &arrow_array::GenericListArray<O>,
    i: usize,
    column: &str,
) -> Result<(), JsonLinesError> {
    let offsets = list.value_offsets();
    items(out, list.values(), offsets[i].as_usize()..offsets[i + 1].as_usize(), column)
}

fn items(
    out: &mut Vec<u8>,
    values: &ArrayRef,
    range: std::ops::Range<usize>,
    column: &str,
) -> Result<(), JsonLinesError> {
    out.push(b'[');
    for (n, j) in range.enumerate() {
        if n > 0 {
            out.push(b',');
        }
        value(out, values.as_ref(), j, column)?;
    }
    out.push(b']');
    Ok(())
}

fn map(out: &mut Vec<u8>, map: &MapArray, i: usize, column: &str) -> Result<(), JsonLinesError> {
    let offsets = map.value_offsets();
    let (keys, values) = (map.keys(), map.values());
    out.push(b'{');
    for (n, j) in (offsets[i] as usize..offsets[i + 1] as usize).enumerate() {
        if n > 0 {
            out.push(b',');
        }
        match keys.data_type() {
            DataType::Utf8 => text(out, keys.as_string::<i32>().value(j)),
            DataType::LargeUtf8 => text(out, keys.as_string::<i64>().value(j)),
            _ => {
                // A key of another type is written as its JSON text, quoted.
                let mut key = Vec::new();
                value(&mut key, keys.as_ref(), j, column)?;
                text(out, &String::from_utf8_lossy(&key));
            }
        }
        out.push(b':');
        value(out, values.as_ref(), j, column)?;
    }
    out.push(b'}');
    Ok(())
}

/// The decimal text of `unscaled` × 10^-`scale`, exact (`-12.50`, `1200` for scale −2).
pub fn decimal(unscaled: i128, scale: i8) -> String {
    let digits = unscaled.unsigned_abs().to_string();
    let sign = if unscaled < 0 { "-" } else { "" };
    if scale <= 0 {
        let zeros = if unscaled == 0 { 0 } else { scale.unsigned_abs() as usize };
        return format!("{sign}{digits}{}", "0".repeat(zeros));
    }
    let scale = scale as usize;
    let padded = format!("{digits:0>width$}", width = scale + 1);
    let (int, frac) = padded.split_at(padded.len() - scale);
    format!("{sign}{int}.{frac}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Column, ColumnType, Deserializer, ParquetFormat, ParquetOptions};

    #[test]
    fn decimals_are_exact_text() {
        assert_eq!(decimal(1250, 2), "12.50");
        assert_eq!(decimal(-5, 3), "-0.005");
        assert_eq!(decimal(0, 2), "0.00");
        assert_eq!(decimal(12, -2), "1200");
        assert_eq!(decimal(0, -2), "0");
        assert_eq!(decimal(i128::MIN, 0), i128::MIN.to_string());
    }

    fn every_type() -> ParquetFormat {
        let types = [
            ("s", "string"),
            ("i", "int"),
            ("t", "tinyint"),
            ("sm", "smallint"),
            ("b", "bigint"),
            ("d", "double"),
            ("f", "float"),
            ("ok", "boolean"),
            ("ts", "timestamp"),
            ("day", "date"),
            ("money", "decimal(9,3)"),
            ("blob", "binary"),
            ("tags", "array<string>"),
            ("calls", "array<struct<name:string,ms:bigint,args:map<string,string>>>"),
            ("m", "map<string,array<int>>"),
        ];
        let columns =
            types.iter().map(|(n, t)| Column { name: (*n).into(), ty: ColumnType::parse(t).unwrap() }).collect();
        ParquetFormat::new(columns, Deserializer::default(), ParquetOptions::default())
    }

    /// Every Hive type reads back as JSON that the same table converts to the same file.
    #[test]
    fn every_type_converts_back_to_the_same_file() {
        let f = every_type();
        let records = concat!(
            r#"{"s":"a\"b\n","i":-7,"t":127,"sm":-300,"b":9007199254740993,"d":0.1,"f":0.1,"ok":true,"#,
            r#""ts":1764400000123,"day":"2026-11-29","money":"-12.5","blob":"AAEC/w==","tags":["x",null],"#,
            r#""calls":[{"name":"q","ms":3,"args":{"k":"v"}},null,{"name":null}],"m":{"a":[1,null],"b":null}}"#,
            "\n",
            r#"{"S":{"nested":[1,2]},"d":1e300,"f":-3.4e38,"ts":"0001-01-01 00:00:00","day":"9999-12-31"}"#,
            "\n{}\n",
            r#"{"ts":"9999-12-31T23:59:59.999999Z","money":0,"d":-0.0,"m":{}}"#,
            "\n",
            r#"{"ts":1000000000000000}"#,
            "\n",
            r#"{"ts":-100000000000000}"#,
            "\n",
            r#"{"ts":9223372036854775}"#,
            "\n",
            r#"{"d":11e28,"f":11e28}"#,
            "\n",
        );
        let file = Bytes::from(f.encode(records.as_bytes()).unwrap());
        let lines = json_lines(&file, 1 << 20).unwrap();
        let text = String::from_utf8(lines.clone()).unwrap();
        assert_eq!(text.lines().count(), 8, "{text}");
        assert!(text.contains(r#"{"ts":9223372036854775}"#), "past chrono's years, millis: {text}");
        assert!(text.contains(r#"{"ts":"+33658-09-27 01:46:40"}"#), "years past 9999 signed: {text}");
        assert!(text.contains(r#""ts":"2025-11-29 07:06:40.123""#), "{text}");
        assert!(text.contains(r#""money":-12.500"#) && text.contains(r#""blob":"AAEC/w==""#), "{text}");
        assert!(text.contains(r#""s":"{\"nested\":[1,2]}""#), "{text}");
        assert!(text.lines().nth(2) == Some("{}"), "a row of nulls is an empty object: {text}");
        let again = Bytes::from(f.encode(&lines).unwrap());
        assert_eq!(again, file, "the JSON converts to the same file");
    }

    #[test]
    fn limits_hold() {
        let f = every_type();
        let file = Bytes::from(f.encode(b"{\"s\":\"0123456789\"}\n".repeat(100).as_slice()).unwrap());
        assert!(matches!(json_lines(&file, 500), Err(JsonLinesError::TooLarge(500))));
        assert_eq!(json_lines(&file, 10_000).unwrap(), b"{\"s\":\"0123456789\"}\n".repeat(100));
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        for body in [&b""[..], b"PAR1", b"PAR1\x15\x04PAR1", b"{\"a\":1}\n"] {
            assert!(matches!(json_lines(&Bytes::copy_from_slice(body), 1 << 20), Err(JsonLinesError::Parquet(_))));
        }
    }
}
