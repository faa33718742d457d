//! Firehose's JSON deserialisers: how a record's JSON becomes a row of the table's
//! columns, or why it cannot.
//!
//! Both read one JSON object per record. A column takes the value of the key with its
//! name; a missing key or `null` is a null. Keys that are not columns are ignored.
//!
//! - **OpenX JSON SerDe**: names match case-insensitively unless `CaseInsensitive` is
//!   false; `ColumnToJsonKeyMappings` names the JSON key of a column;
//!   `ConvertDotsInJsonKeysToUnderscores` reads the key `a.b` as `a_b`.
//! - **Hive JSON SerDe**: names match case-insensitively; `TimestampFormats` says how
//!   timestamps read (see [`super::timestamp`]).
//!
//! Values convert as Hive's SerDes convert them: numbers from numbers or numeric text
//! (in range, integers without a fraction), booleans from `true`/`false` or that text,
//! strings from any scalar's text, and from an object or array its JSON text (so a
//! nested `arguments` object fits a `string` column). Anything else is a mismatch,
//! which names the column (and the path inside it) and the value.

use std::collections::BTreeMap;

use base64::Engine as _;
use serde_json::{Map, Value};

use super::column_type::ColumnType;
use super::timestamp::{EpochIntegers, TimestampFormat, date_days, hive_timestamp_micros, openx_text_micros_with};

/// A column of the table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Column {
    /// Its name (the Parquet field name).
    pub name: String,
    /// Its type.
    pub ty: ColumnType,
}

/// Which deserialiser, with its options.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Deserializer {
    /// `OpenXJsonSerDe` (Firehose's default).
    OpenX {
        /// `CaseInsensitive` (default true).
        case_insensitive: bool,
        /// `ColumnToJsonKeyMappings`: column name → JSON key.
        key_mappings: BTreeMap<String, String>,
        /// `ConvertDotsInJsonKeysToUnderscores` (default false).
        dots_to_underscores: bool,
    },
    /// `HiveJsonSerDe`.
    Hive {
        /// `TimestampFormats` (empty: the default).
        timestamp_formats: Vec<TimestampFormat>,
    },
}

impl Default for Deserializer {
    fn default() -> Self {
        Deserializer::OpenX { case_insensitive: true, key_mappings: BTreeMap::new(), dots_to_underscores: false }
    }
}

/// One value, typed for its column.
#[derive(Debug, Clone, PartialEq)]
pub enum Cell {
    /// No value.
    Null,
    /// `string`.
    Str(String),
    /// Any integer type (range-checked for its column).
    Int(i64),
    /// `float`, `double`.
    Float(f64),
    /// `boolean`.
    Bool(bool),
    /// `timestamp`: microseconds since the epoch.
    Micros(i64),
    /// `date`: days since the epoch.
    Days(i32),
    /// `decimal(p,s)`: the unscaled value.
    Decimal(i128),
    /// `binary`.
    Bytes(Vec<u8>),
    /// `array<T>`.
    List(Vec<Cell>),
    /// `struct<...>`: one cell per field.
    Struct(Vec<Cell>),
    /// `map<string,T>`.
    Map(Vec<(String, Cell)>),
}

/// Why a record does not fit the table.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Mismatch {
    /// Not one JSON value.
    #[error("record is not valid JSON: {0}")]
    NotJson(String),
    /// More than one JSON value where one was expected ([`RowReader::row`]).
    #[error("record holds more than one JSON value")]
    Several,
    /// Document `index` (from 1) of a record holding several does not fit.
    #[error("document {index} of the record: {reason}")]
    InDocument {
        /// Which document, from 1.
        index: usize,
        /// Why it does not fit.
        reason: Box<Mismatch>,
    },
    /// JSON, but not an object.
    #[error("record is a JSON {0}, not an object")]
    NotObject(&'static str),
    /// A value that does not convert to its column's type.
    #[error("column {path}: expected {expected}, found {found}")]
    Value {
        /// `column` or `column.field[2]`.
        path: String,
        /// The column type.
        expected: String,
        /// The value (shortened).
        found: String,
    },
}

impl Mismatch {
    pub(super) fn in_document(self, index: usize) -> Mismatch {
        Mismatch::InDocument { index, reason: Box::new(self) }
    }
}

/// Columns and the deserialiser: turns records into rows. Its entry points
/// (`rows`, `row`, `put_rows`) are in `members.rs`, the path that reads only the
/// columns' values; the rules here are the specification it is tested against.
#[derive(Debug, Clone)]
pub struct RowReader {
    columns: Vec<Column>,
    deserializer: Deserializer,
    /// How the OpenX SerDe reads an integer in a `timestamp` column.
    integers: EpochIntegers,
    /// Each column's JSON key, folded ([`RowReader::fold`]).
    keys: Vec<String>,
}

impl RowReader {
    /// A reader of `columns` with `deserializer`.
    pub fn new(columns: Vec<Column>, deserializer: Deserializer) -> Self {
        let mut r = Self { columns, deserializer, integers: EpochIntegers::OpenX, keys: Vec::new() };
        r.keys = r
            .columns
            .iter()
            .map(|c| {
                let key = match &r.deserializer {
                    Deserializer::OpenX { key_mappings, .. } => key_mappings.get(&c.name).unwrap_or(&c.name),
                    Deserializer::Hive { .. } => &c.name,
                };
                r.fold(key)
            })
            .collect();
        r
    }

    /// With the OpenX SerDe, integers in `timestamp` columns read as `integers` says
    /// (default: the SerDe's own rule).
    pub fn with_epoch_integers(mut self, integers: EpochIntegers) -> Self {
        self.integers = integers;
        self
    }

    /// How integers in `timestamp` columns are read: `None` with the Hive SerDe.
    pub(super) fn epoch_integers(&self) -> Option<EpochIntegers> {
        self.is_openx().then_some(self.integers)
    }

    /// The columns.
    pub fn columns(&self) -> &[Column] {
        &self.columns
    }

    /// [`RowReader::rows`] as the specification: each document parsed whole.
    pub fn rows_of_values(&self, record: &[u8]) -> Result<Vec<Vec<Cell>>, Mismatch> {
        let values = serde_json::Deserializer::from_slice(record)
            .into_iter::<Value>()
            .collect::<Result<Vec<Value>, _>>()
            .map_err(|e| Mismatch::NotJson(e.to_string()))?;
        if values.is_empty() {
            return Err(Mismatch::NotJson("no value".into()));
        }
        let several = values.len() > 1;
        values
            .iter()
            .enumerate()
            .map(|(i, v)| self.row_of(v).map_err(|e| if several { e.in_document(i + 1) } else { e }))
            .collect()
    }

    /// The row of a parsed record.
    pub fn row_of(&self, value: &Value) -> Result<Vec<Cell>, Mismatch> {
        let Value::Object(object) = value else { return Err(Mismatch::NotObject(kind(value))) };
        let mut path = String::new();
        self.columns
            .iter()
            .zip(&self.keys)
            .map(|(c, key)| match self.find(object, key) {
                None => Ok(Cell::Null),
                Some(v) => {
                    path.clear();
                    path.push_str(&c.name);
                    self.cell(&c.ty, v, &mut path)
                }
            })
            .collect()
    }

    /// Whether the deserialiser is the OpenX SerDe.
    pub(super) fn is_openx(&self) -> bool {
        matches!(self.deserializer, Deserializer::OpenX { .. })
    }

    fn case_insensitive(&self) -> bool {
        match &self.deserializer {
            Deserializer::OpenX { case_insensitive, .. } => *case_insensitive,
            Deserializer::Hive { .. } => true,
        }
    }

    /// A key as it is matched: dots converted, lower-cased when names are
    /// case-insensitive.
    fn fold(&self, key: &str) -> String {
        let key = match &self.deserializer {
            Deserializer::OpenX { dots_to_underscores: true, .. } => key.replace('.', "_"),
            _ => key.to_owned(),
        };
        if self.case_insensitive() { key.to_lowercase() } else { key }
    }

    /// The value of the key of `object` that folds to `folded` (the last of keys that
    /// fold alike, in the object's order). Compared without allocating for ASCII keys:
    /// this runs for every column of every record.
    fn find<'v>(&self, object: &'v Map<String, Value>, folded: &str) -> Option<&'v Value> {
        object.iter().rev().find(|(k, _)| self.folds_to(k, folded)).map(|(_, v)| v)
    }

    /// Whether `key` folds to `folded` ([`RowReader::fold`]).
    pub(super) fn folds_to(&self, key: &str, folded: &str) -> bool {
        if key.is_ascii() && folded.is_ascii() {
            let dots = matches!(self.deserializer, Deserializer::OpenX { dots_to_underscores: true, .. });
            let insensitive = self.case_insensitive();
            key.len() == folded.len()
                && key.bytes().zip(folded.bytes()).all(|(a, b)| {
                    let a = if dots && a == b'.' { b'_' } else { a };
                    (if insensitive { a.to_ascii_lowercase() } else { a }) == b
                })
        } else {
            self.fold(key) == folded
        }
    }

    /// Each column's folded key.
    pub(super) fn keys(&self) -> &[String] {
        &self.keys
    }

    fn timestamp_formats(&self) -> &[TimestampFormat] {
        match &self.deserializer {
            Deserializer::Hive { timestamp_formats } => timestamp_formats,
            Deserializer::OpenX { .. } => &[],
        }
    }

    /// The cell of `value` in a column (or member) of type `ty` at `path`.
    pub(super) fn cell(&self, ty: &ColumnType, value: &Value, path: &mut String) -> Result<Cell, Mismatch> {
        if value.is_null() {
            return Ok(Cell::Null);
        }
        let mismatch =
            |path: &str| Mismatch::Value { path: path.to_owned(), expected: name(ty), found: shorten(value) };
        let cell = match ty {
            ColumnType::String => Cell::Str(match value {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            }),
            ColumnType::TinyInt | ColumnType::SmallInt | ColumnType::Int | ColumnType::BigInt => {
                let (min, max) = match ty {
                    ColumnType::TinyInt => (i8::MIN as i64, i8::MAX as i64),
                    ColumnType::SmallInt => (i16::MIN as i64, i16::MAX as i64),
                    ColumnType::Int => (i32::MIN as i64, i32::MAX as i64),
                    _ => (i64::MIN, i64::MAX),
                };
                let n = match value {
                    Value::Number(n) => {
                        n.as_i64().or_else(|| n.as_f64().filter(|f| f.fract() == 0.0).and_then(exact_i64))
                    }
                    Value::String(s) => s.trim().parse::<i64>().ok(),
                    _ => None,
                };
                Cell::Int(n.filter(|n| (min..=max).contains(n)).ok_or_else(|| mismatch(path))?)
            }
            ColumnType::Float | ColumnType::Double => {
                let f = match value {
                    Value::Number(n) => n.as_f64(),
                    Value::String(s) => s.trim().parse::<f64>().ok(),
                    _ => None,
                };
                let f = f.filter(|f| *ty == ColumnType::Double || f.is_infinite() || (*f as f32).is_finite());
                Cell::Float(f.ok_or_else(|| mismatch(path))?)
            }
            ColumnType::Boolean => Cell::Bool(match value {
                Value::Bool(b) => *b,
                Value::String(s) if s.eq_ignore_ascii_case("true") => true,
                Value::String(s) if s.eq_ignore_ascii_case("false") => false,
                _ => return Err(mismatch(path)),
            }),
            ColumnType::Timestamp => {
                let micros = match &self.deserializer {
                    Deserializer::OpenX { .. } => match value {
                        Value::Number(n) => openx_text_micros_with(&n.to_string(), self.integers),
                        Value::String(s) => openx_text_micros_with(s, self.integers),
                        _ => None,
                    },
                    Deserializer::Hive { timestamp_formats } => hive_timestamp_micros(value, timestamp_formats),
                };
                Cell::Micros(micros.ok_or_else(|| mismatch(path))?)
            }
            ColumnType::Date => Cell::Days(date_days(value, self.timestamp_formats()).ok_or_else(|| mismatch(path))?),
            ColumnType::Decimal { precision, scale } => {
                let text = match value {
                    Value::Number(n) => n.to_string(),
                    Value::String(s) => s.trim().to_owned(),
                    _ => return Err(mismatch(path)),
                };
                Cell::Decimal(decimal(&text, *precision, *scale).ok_or_else(|| mismatch(path))?)
            }
            ColumnType::Binary => match value {
                Value::String(s) => {
                    Cell::Bytes(base64::engine::general_purpose::STANDARD.decode(s.trim()).map_err(|_| mismatch(path))?)
                }
                _ => return Err(mismatch(path)),
            },
            ColumnType::Array(item) => {
                let Value::Array(items) = value else { return Err(mismatch(path)) };
                let mut cells = Vec::with_capacity(items.len());
                for (i, v) in items.iter().enumerate() {
                    let len = path.len();
                    path.push_str(&format!("[{i}]"));
                    cells.push(self.cell(item, v, path)?);
                    path.truncate(len);
                }
                Cell::List(cells)
            }
            ColumnType::Struct(fields) => {
                let Value::Object(object) = value else { return Err(mismatch(path)) };
                let mut cells = Vec::with_capacity(fields.len());
                for (field, t) in fields {
                    let len = path.len();
                    path.push('.');
                    path.push_str(field);
                    cells.push(match self.find(object, &self.fold(field)) {
                        None => Cell::Null,
                        Some(v) => self.cell(t, v, path)?,
                    });
                    path.truncate(len);
                }
                Cell::Struct(cells)
            }
            ColumnType::Map(value_type) => {
                let Value::Object(object) = value else { return Err(mismatch(path)) };
                let mut entries = Vec::with_capacity(object.len());
                for (k, v) in object {
                    let len = path.len();
                    path.push_str(&format!("[{k:?}]"));
                    entries.push((k.clone(), self.cell(value_type, v, path)?));
                    path.truncate(len);
                }
                Cell::Map(entries)
            }
        };
        Ok(cell)
    }
}

/// `f` as an i64 when it is one exactly.
fn exact_i64(f: f64) -> Option<i64> {
    (-9.223_372_036_854_776e18..9.223_372_036_854_776e18).contains(&f).then_some(f as i64)
}

/// The unscaled value of decimal text at `scale` (rounded half away from zero), if
/// it has at most `precision` digits. Exponents (`1.5e3`) are taken.
pub fn decimal(text: &str, precision: u8, scale: i8) -> Option<i128> {
    let (negative, text) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text.strip_prefix('+').unwrap_or(text)),
    };
    let (mantissa, exponent) = match text.find(['e', 'E']) {
        Some(i) => (&text[..i], text[i + 1..].parse::<i32>().ok()?),
        None => (text, 0),
    };
    let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    if int.is_empty() && frac.is_empty() || !(int.chars().chain(frac.chars()).all(|c| c.is_ascii_digit())) {
        return None;
    }
    // digits × 10^(exponent − frac digits), brought to `scale`.
    let digits: String = int.chars().chain(frac.chars()).collect();
    let digits = digits.trim_start_matches('0');
    let shift = i64::from(exponent) - frac.len() as i64 + i64::from(scale);
    let mut value: i128 = 0;
    let kept = if shift >= 0 { digits.len() } else { digits.len().saturating_sub(shift.unsigned_abs() as usize) };
    for c in digits[..kept].chars() {
        value = value.checked_mul(10)?.checked_add(i128::from(c as u8 - b'0'))?;
    }
    if shift > 0 {
        for _ in 0..shift.min(39) {
            value = value.checked_mul(10)?;
        }
    } else if kept < digits.len() && digits.as_bytes()[kept] >= b'5' {
        value = value.checked_add(1)?;
    }
    if value >= 10i128.pow(u32::from(precision)) {
        return None;
    }
    Some(if negative { -value } else { value })
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn shorten(v: &Value) -> String {
    let text = v.to_string();
    match text.char_indices().nth(80) {
        Some((i, _)) => format!("{}…", &text[..i]),
        None => text,
    }
}

/// A type's Hive name.
pub fn name(ty: &ColumnType) -> String {
    match ty {
        ColumnType::String => "string".into(),
        ColumnType::TinyInt => "tinyint".into(),
        ColumnType::SmallInt => "smallint".into(),
        ColumnType::Int => "int".into(),
        ColumnType::BigInt => "bigint".into(),
        ColumnType::Float => "float".into(),
        ColumnType::Double => "double".into(),
        ColumnType::Boolean => "boolean".into(),
        ColumnType::Timestamp => "timestamp".into(),
        ColumnType::Date => "date".into(),
        ColumnType::Decimal { precision, scale } => format!("decimal({precision},{scale})"),
        ColumnType::Binary => "binary".into(),
        ColumnType::Array(t) => format!("array<{}>", name(t)),
        ColumnType::Struct(fields) => {
            let inner: Vec<String> = fields.iter().map(|(n, t)| format!("{n}:{}", name(t))).collect();
            format!("struct<{}>", inner.join(","))
        }
        ColumnType::Map(t) => format!("map<string,{}>", name(t)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn col(name: &str, ty: &str) -> Column {
        Column { name: name.into(), ty: ColumnType::parse(ty).unwrap() }
    }

    fn mcp() -> Vec<Column> {
        vec![
            col("tenantid", "string"),
            col("durationms", "int"),
            col("success", "boolean"),
            col("ts", "timestamp"),
            col("arguments", "string"),
            col("cost", "decimal(8,2)"),
        ]
    }

    #[test]
    fn openx_matches_names_case_insensitively() {
        let r = RowReader::new(mcp(), Deserializer::default());
        let row = r
            .row(br#"{"tenantId":"t-1","durationMs":"42","success":true,"ts":1000,"arguments":{"q":[1,2]},"extra":1,"cost":1.005}"#)
            .unwrap();
        assert_eq!(
            row,
            vec![
                Cell::Str("t-1".into()),
                Cell::Int(42),
                Cell::Bool(true),
                Cell::Micros(1_000_000_000), // 4 digits: epoch seconds, as OpenX reads them
                Cell::Str(r#"{"q":[1,2]}"#.into()),
                Cell::Decimal(101),
            ]
        );
        let strict = RowReader::new(
            mcp(),
            Deserializer::OpenX { case_insensitive: false, key_mappings: BTreeMap::new(), dots_to_underscores: false },
        );
        assert_eq!(strict.row(br#"{"tenantId":"t-1"}"#).unwrap()[0], Cell::Null);
    }

    #[test]
    fn openx_mappings_and_dots() {
        let d = Deserializer::OpenX {
            case_insensitive: true,
            key_mappings: [("tenant".to_owned(), "tenantId".to_owned())].into(),
            dots_to_underscores: true,
        };
        let r = RowReader::new(vec![col("tenant", "string"), col("a_b", "int")], d);
        assert_eq!(r.row(br#"{"tenantId":"x","a.b":3}"#).unwrap(), vec![Cell::Str("x".into()), Cell::Int(3)]);
    }

    #[test]
    fn mismatches_name_the_column_and_path() {
        let r = RowReader::new(vec![col("calls", "array<struct<name:string,ms:int>>")], Deserializer::default());
        let e = r.row(br#"{"calls":[{"name":"a","ms":1},{"name":"b","ms":"slow"}]}"#).unwrap_err();
        assert_eq!(e.to_string(), r#"column calls[1].ms: expected int, found "slow""#);
        assert!(matches!(r.row(b"[1]"), Err(Mismatch::NotObject("array"))));
        assert!(matches!(r.row(b"{\"calls\":"), Err(Mismatch::NotJson(_))));
        assert_eq!(r.row(b"{}{}"), Err(Mismatch::Several), "one value per record");
        assert!(matches!(r.row(b"{} x"), Err(Mismatch::Several | Mismatch::NotJson(_))));
        let ints = RowReader::new(vec![col("n", "tinyint")], Deserializer::default());
        assert!(ints.row(br#"{"n":300}"#).is_err());
        assert!(ints.row(br#"{"n":1.5}"#).is_err());
        assert_eq!(ints.row(br#"{"n":2.0}"#).unwrap(), vec![Cell::Int(2)]);
    }

    proptest::proptest! {
        /// `find` (no allocation for ASCII) picks the value the plain definition picks:
        /// the last key, in the object's order, whose folded form equals the column's.
        #[test]
        fn find_matches_folding_every_key(
            keys in proptest::collection::vec("[aA.b_É]{0,3}", 0..6),
            column in "[aA.b_É]{0,3}",
            insensitive: bool,
            dots: bool,
        ) {
            let d = Deserializer::OpenX { case_insensitive: insensitive, key_mappings: BTreeMap::new(), dots_to_underscores: dots };
            let r = RowReader::new(vec![], d);
            let object: Map<String, Value> = keys.iter().enumerate().map(|(i, k)| (k.clone(), Value::from(i))).collect();
            let folded = r.fold(&column);
            let plain = object.iter().filter(|(k, _)| r.fold(k) == folded).map(|(_, v)| v).collect::<Vec<_>>().pop();
            proptest::prop_assert_eq!(r.find(&object, &folded), plain);
        }

        /// A timestamp read from its JSON text (`members`) is the one the
        /// specification reads from the parsed value, whatever the integers' rule.
        #[test]
        fn timestamps_read_alike_on_both_paths(
            n in proptest::prelude::any::<i64>(),
            digits in 1u32..20,
            negative: bool,
            quoted: bool,
            rule in 0usize..5,
        ) {
            let rules = [
                EpochIntegers::OpenX, EpochIntegers::ByDigits, EpochIntegers::Seconds,
                EpochIntegers::Milliseconds, EpochIntegers::Microseconds,
            ];
            let magnitude = (n.unsigned_abs() % 10u64.pow(digits.min(19))) as i64;
            let value = if negative { -magnitude } else { magnitude };
            let text = if quoted { format!("\"{value}\"") } else { value.to_string() };
            let record = format!(r#"{{"ts":{text}}}"#);
            let r = RowReader::new(vec![col("ts", "timestamp")], Deserializer::default()).with_epoch_integers(rules[rule]);
            proptest::prop_assert_eq!(r.rows(record.as_bytes()), r.rows_of_values(record.as_bytes()));
        }
    }

    #[test]
    fn decimals_are_exact() {
        assert_eq!(decimal("12.345", 10, 2), Some(1235));
        assert_eq!(decimal("-0.004", 10, 2), Some(0));
        assert_eq!(decimal("-0.005", 10, 2), Some(-1));
        assert_eq!(decimal("1.5e3", 10, 0), Some(1500));
        assert_eq!(decimal("12345678.9", 9, 2), None, "too many digits");
        assert_eq!(decimal("99999999999999999999999999999999999999", 38, 0), Some(10i128.pow(38) - 1));
        assert_eq!(decimal("1e999", 38, 0), None);
        assert_eq!(decimal("1e-999", 38, 2), Some(0));
        assert_eq!(decimal("abc", 10, 2), None);
        assert_eq!(decimal(".", 10, 2), None);
    }

    /// Doubles are the correctly rounded value of their JSON text (serde_json's
    /// `float_roundtrip`; its default parser can be one unit off, found by fuzzing).
    #[test]
    fn doubles_are_correctly_rounded() {
        let reader = RowReader::new(vec![col("d", "double")], Deserializer::default());
        for text in ["11e28", "1.1e29", "0.1", "2.2250738585072011e-308", "9007199254740993", "123456789.12345678"] {
            let row = reader.row(format!("{{\"d\":{text}}}").as_bytes()).unwrap();
            assert_eq!(row, vec![Cell::Float(text.parse::<f64>().unwrap())], "{text}");
        }
    }
}
