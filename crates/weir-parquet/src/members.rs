//! A record's rows read without building each document whole: its top-level members
//! are borrowed as raw JSON text, and only the values of the table's columns are
//! parsed. [`RowReader::rows_of_values`] (each document a `serde_json::Value`) is the
//! specification; a record it would refuse is handed to it, so errors are its own.
//!
//! Why: building every document's map (a `String` and a tree node per key) was a
//! third of converting an MCP event, whose keys are mostly columns anyway; the
//! `parquet` bench measures the difference.

use std::borrow::Cow;

use serde::de::{Deserialize, MapAccess, Visitor};
use serde_json::Value;
use serde_json::value::RawValue;

use super::column_type::ColumnType;
use super::deserialize::{Cell, Mismatch, RowReader};
use super::rowcode::{self, CellRef};

/// The entry points of reading records into rows: this module's path, which hands
/// what it cannot read to the specification ([`RowReader::rows_of_values`]).
impl RowReader {
    /// The row of one record (exactly one JSON value, whitespace around it allowed).
    pub fn row(&self, record: &[u8]) -> Result<Vec<Cell>, Mismatch> {
        let mut rows = self.rows(record)?;
        match rows.len() {
            1 => Ok(rows.remove(0)),
            _ => Err(Mismatch::Several),
        }
    }

    /// The rows of one record: one per JSON document in it, in order. Firehose's
    /// conversion takes several documents back to back (`{"a":1}{"a":2}`, or one per
    /// line) as correct input, one row each; whitespace between and around them is
    /// allowed. A record fits only if every document does (the error names the one
    /// that does not when there are several).
    pub fn rows(&self, record: &[u8]) -> Result<Vec<Vec<Cell>>, Mismatch> {
        let mut rows = Vec::with_capacity(1);
        for members in serde_json::Deserializer::from_slice(record).into_iter::<Members<'_>>() {
            match members {
                // A number past f64's range is valid JSON the specification's parser refuses.
                Ok(m) if m.reads_as_values() => {
                    let mut cells = Vec::with_capacity(self.columns().len());
                    rows.push(
                        row(self, &m.0, &mut cells).map(|()| cells.into_iter().map(CellRef::into_owned).collect()),
                    );
                }
                // Not JSON, or a document that is not an object: the specification says how.
                _ => return self.rows_of_values(record),
            }
        }
        if rows.is_empty() {
            return self.rows_of_values(record);
        }
        let several = rows.len() > 1;
        rows.into_iter()
            .enumerate()
            .map(|(i, r)| r.map_err(|e| if several { e.in_document(i + 1) } else { e }))
            .collect()
    }

    /// Appends the rows of `record` to `out` as [`rowcode::put_row`] appends the rows
    /// [`RowReader::rows`] reads, without copying strings that need no unescaping; how
    /// many. On an error `out` is as it was, and the error is `rows`'s. Why: a string
    /// cell copied into a `String` and then into `out`, and a vector per row and per
    /// record, were a tenth of converting a flat event (`parquet` bench).
    pub fn put_rows(&self, record: &[u8], out: &mut Vec<u8>) -> Result<usize, Mismatch> {
        let start = out.len();
        let mut n = 0;
        let mut cells = Vec::with_capacity(self.columns().len());
        for members in serde_json::Deserializer::from_slice(record).into_iter::<Members<'_>>() {
            if !members.is_ok_and(|m| m.reads_as_values() && row(self, &m.0, &mut cells).is_ok()) {
                n = 0;
                break;
            }
            rowcode::put_row_refs(&cells, out);
            n += 1;
        }
        if n > 0 {
            return Ok(n);
        }
        // Not read here (or no document): the rows and error of `rows`.
        out.truncate(start);
        let rows = self.rows(record)?;
        rows.iter().for_each(|r| rowcode::put_row(r, out));
        Ok(rows.len())
    }
}

/// Fills `cells` with the row of one document's `members`.
fn row<'a>(
    reader: &RowReader,
    members: &[(Cow<'a, str>, &'a RawValue)],
    cells: &mut Vec<CellRef<'a>>,
) -> Result<(), Mismatch> {
    cells.clear();
    let mut path = String::new();
    let openx = reader.epoch_integers();
    for (c, key) in reader.columns().iter().zip(reader.keys()) {
        let Some(raw) = find(reader, members, key) else {
            cells.push(CellRef::Other(Cell::Null));
            continue;
        };
        if let Some(cell) = scalar(&c.ty, raw.get(), openx) {
            cells.push(cell);
            continue;
        }
        let value: Value = serde_json::from_str(raw.get()).map_err(|e| Mismatch::NotJson(e.to_string()))?;
        path.clear();
        path.push_str(&c.name);
        cells.push(CellRef::Other(reader.cell(&c.ty, &value, &mut path)?));
    }
    Ok(())
}

/// The cell of a few common scalars read straight from their JSON text, as
/// [`RowReader::cell`] reads them from a parsed value: `null` in any column, a JSON
/// string in a `string` column (borrowed from `raw` when it has no escapes),
/// `true`/`false` in a `boolean` column, a plain integer in an integer column, and with
/// the OpenX SerDe (`openx`: how it reads integers there) a plain integer in a
/// `timestamp` column. `None` for
/// anything else (the caller parses the value and asks the specification). Why:
/// parsing each column's value into a `Value` first cost a second allocation per
/// string cell, and for a nested value bound for a `string` column a tree of them (the
/// `parquet` bench's nested events went from 0.39 to about half of GZIP's speed with
/// this and [`compact_sorted`]).
fn scalar<'a>(ty: &ColumnType, raw: &'a str, openx: Option<super::timestamp::EpochIntegers>) -> Option<CellRef<'a>> {
    if raw == "null" {
        return Some(CellRef::Other(Cell::Null));
    }
    let other = |c| Some(CellRef::Other(c));
    match ty {
        // Valid JSON text (serde_json checked it): without a backslash, the string is
        // what lies between the quotes.
        ColumnType::String if raw.starts_with('"') && !raw.contains('\\') => {
            raw.get(1..raw.len() - 1).map(CellRef::Str)
        }
        ColumnType::String if raw.starts_with('"') => {
            serde_json::from_str::<String>(raw).ok().map(Cell::Str).and_then(other)
        }
        ColumnType::String if raw.starts_with(['{', '[']) => {
            let mut text = String::with_capacity(raw.len());
            compact_sorted(raw, &mut text).map(|()| CellRef::Other(Cell::Str(text)))
        }
        ColumnType::Boolean => match raw {
            "true" => other(Cell::Bool(true)),
            "false" => other(Cell::Bool(false)),
            _ => None,
        },
        ColumnType::TinyInt | ColumnType::SmallInt | ColumnType::Int | ColumnType::BigInt => {
            let n = plain_integer(raw)?;
            let fits = match ty {
                ColumnType::TinyInt => i8::try_from(n).is_ok(),
                ColumnType::SmallInt => i16::try_from(n).is_ok(),
                ColumnType::Int => i32::try_from(n).is_ok(),
                _ => true,
            };
            // Out of the column's range: the specification words the error.
            fits.then_some(CellRef::Other(Cell::Int(n)))
        }
        // The number's text is the one `openx_timestamp_micros` reads from the parsed
        // number (`-0` aside, which reads as 0 either way).
        ColumnType::Timestamp => {
            let integers = openx?;
            plain_integer(raw)?;
            super::timestamp::openx_text_micros_with(raw, integers).map(Cell::Micros).and_then(other)
        }
        _ => None,
    }
}

/// A JSON integer of at most 18 digits (so that it fits an `i64`), without fraction or
/// exponent.
fn plain_integer(raw: &str) -> Option<i64> {
    let digits = raw.strip_prefix('-').unwrap_or(raw);
    if digits.is_empty() || digits.len() > 18 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    raw.parse().ok()
}

/// Appends the text `serde_json` gives a nested value bound for a `string` column
/// (`Value::to_string`: compact, every object's keys sorted, a repeated key's last
/// value). The value is read in one pass into a [`Node`] that borrows its strings
/// where they have no escapes, and written from it. `None` if `raw` is not JSON (the
/// caller asks the specification, which says why).
fn compact_sorted(raw: &str, out: &mut String) -> Option<()> {
    let node: Node<'_> = serde_json::from_str(raw).ok()?;
    node.write(out)
}

/// A JSON value as `serde_json::Value` reads it (the same visits: numbers as `Number`,
/// a non-finite float as null), but objects as their members in order and strings
/// borrowed from the text where they have no escapes.
enum Node<'a> {
    Null,
    Bool(bool),
    Number(serde_json::Number),
    Str(Cow<'a, str>),
    Array(Vec<Node<'a>>),
    Object(Vec<(Cow<'a, str>, Node<'a>)>),
}

impl Node<'_> {
    /// Writes the node as `Value::to_string` writes the value.
    fn write(&self, out: &mut String) -> Option<()> {
        match self {
            Node::Null => out.push_str("null"),
            Node::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
            Node::Number(n) => out.push_str(&n.to_string()),
            Node::Str(s) => write_str(s, matches!(s, Cow::Borrowed(_)), out)?,
            Node::Array(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    item.write(out)?;
                }
                out.push(']');
            }
            Node::Object(members) => {
                // Stable: of equal keys the last stays last, and is the one kept.
                let mut sorted: Vec<&(Cow<'_, str>, Node<'_>)> = members.iter().collect();
                sorted.sort_by(|a, b| a.0.cmp(&b.0));
                out.push('{');
                let mut first = true;
                for (i, (key, value)) in sorted.iter().map(|m| (&m.0, &m.1)).enumerate() {
                    if sorted.get(i + 1).is_some_and(|next| next.0 == *key) {
                        continue;
                    }
                    if !first {
                        out.push(',');
                    }
                    first = false;
                    write_str(key, matches!(key, Cow::Borrowed(_)), out)?;
                    out.push(':');
                    value.write(out)?;
                }
                out.push('}');
            }
        }
        Some(())
    }
}

/// A string as `serde_json` writes it: one `borrowed` from the text had no escapes
/// there (it holds no quote, backslash or control character), so it is copied as it is.
fn write_str(s: &str, borrowed: bool, out: &mut String) -> Option<()> {
    if borrowed {
        out.push('"');
        out.push_str(s);
        out.push('"');
    } else {
        out.push_str(&serde_json::to_string(s).ok()?);
    }
    Some(())
}

impl<'de> Deserialize<'de> for Node<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Node<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON value")
            }
            fn visit_unit<E>(self) -> Result<Node<'de>, E> {
                Ok(Node::Null)
            }
            fn visit_none<E>(self) -> Result<Node<'de>, E> {
                Ok(Node::Null)
            }
            fn visit_bool<E>(self, b: bool) -> Result<Node<'de>, E> {
                Ok(Node::Bool(b))
            }
            fn visit_i64<E>(self, n: i64) -> Result<Node<'de>, E> {
                Ok(Node::Number(n.into()))
            }
            fn visit_u64<E>(self, n: u64) -> Result<Node<'de>, E> {
                Ok(Node::Number(n.into()))
            }
            fn visit_f64<E>(self, f: f64) -> Result<Node<'de>, E> {
                Ok(serde_json::Number::from_f64(f).map_or(Node::Null, Node::Number))
            }
            fn visit_borrowed_str<E>(self, s: &'de str) -> Result<Node<'de>, E> {
                Ok(Node::Str(Cow::Borrowed(s)))
            }
            fn visit_str<E>(self, s: &str) -> Result<Node<'de>, E> {
                Ok(Node::Str(Cow::Owned(s.to_owned())))
            }
            fn visit_string<E>(self, s: String) -> Result<Node<'de>, E> {
                Ok(Node::Str(Cow::Owned(s)))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Node<'de>, A::Error> {
                let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0));
                while let Some(item) = seq.next_element()? {
                    items.push(item);
                }
                Ok(Node::Array(items))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Node<'de>, A::Error> {
                let mut members = Vec::with_capacity(map.size_hint().unwrap_or(0));
                while let Some(Key(k)) = map.next_key::<Key<'de>>()? {
                    members.push((k, map.next_value()?));
                }
                Ok(Node::Object(members))
            }
        }
        d.deserialize_any(V)
    }
}

/// The value the specification's object holds for `folded`: that object is a map
/// sorted by key in which a repeated key keeps its last value, searched from the
/// greatest key down; so of the keys that fold to `folded` the greatest, and of its
/// repeats the last.
fn find<'a>(reader: &RowReader, members: &[(Cow<'_, str>, &'a RawValue)], folded: &str) -> Option<&'a RawValue> {
    let mut best: Option<(&str, &'a RawValue)> = None;
    for (k, v) in members {
        if reader.folds_to(k, folded) && best.is_none_or(|(b, _)| k.as_ref() >= b) {
            best = Some((k.as_ref(), *v));
        }
    }
    best.map(|(_, v)| v)
}

/// Whether `json` (a member's valid JSON text) reads into a `Value` as it reads here:
/// every number one `serde_json` reads (none whose magnitude passes `f64::MAX`, `1e400`
/// or an integer of 400 digits, which it refuses as "number out of range"), no nesting
/// near its recursion limit (128 levels, the document's own included), and no `\u`
/// escape of a surrogate (a lone one it refuses; skipping a value, as a member is
/// read here, checks neither). `false` sends the record to the specification, which
/// decides: the rows and errors are then its own whatever this answers.
fn reads_as_a_value(json: &str) -> bool {
    /// Levels a member may nest before the record is left to the specification (below
    /// serde_json's 128 with room for the document's own).
    const DEEP: usize = 100;
    let bytes = json.as_bytes();
    if bytes.first() == Some(&b'"') && !bytes.contains(&b'\\') {
        return true;
    }
    let mut depth = 0usize;
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'"' => {
                i += 1;
                while i < bytes.len() && bytes[i] != b'"' {
                    if bytes[i] == b'\\' {
                        // `\uD800`-`\uDFFF`: a surrogate, paired or not.
                        let escape = bytes.get(i + 1..i + 4);
                        if escape.is_some_and(|e| {
                            e[0] == b'u'
                                && e[1].eq_ignore_ascii_case(&b'd')
                                && matches!(e[2].to_ascii_lowercase(), b'8'..=b'9' | b'a'..=b'f')
                        }) {
                            return false;
                        }
                        i += 2;
                    } else {
                        i += 1;
                    }
                }
                i += 1;
            }
            b'[' | b'{' => {
                depth += 1;
                if depth >= DEEP {
                    return false;
                }
                i += 1;
            }
            b']' | b'}' => {
                depth = depth.saturating_sub(1);
                i += 1;
            }
            b'-' | b'0'..=b'9' => {
                let start = i;
                while i < bytes.len() && matches!(bytes[i], b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E') {
                    i += 1;
                }
                let number = &json[start..i];
                // An integer of 20 digits or fewer is in range whatever it is; any other
                // is put to serde_json itself (as `fast::scan` does with a scalar).
                let could_overflow = number.len() > 20 || number.contains(['e', 'E']);
                if could_overflow && serde_json::from_str::<serde_json::Number>(number).is_err() {
                    return false;
                }
            }
            _ => i += 1,
        }
    }
    true
}

/// A JSON object's members, keys borrowed where they have no escapes.
struct Members<'a>(Vec<(Cow<'a, str>, &'a RawValue)>);

impl Members<'_> {
    /// Whether every member reads here as the specification reads it
    /// ([`reads_as_a_value`]).
    fn reads_as_values(&self) -> bool {
        self.0.iter().all(|(_, v)| reads_as_a_value(v.get()))
    }
}

impl<'de> Deserialize<'de> for Members<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Members<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut members = Vec::with_capacity(map.size_hint().unwrap_or(8));
                while let Some(Key(k)) = map.next_key::<Key<'de>>()? {
                    members.push((k, map.next_value::<&'de RawValue>()?));
                }
                Ok(Members(members))
            }
        }
        d.deserialize_map(V)
    }
}

struct Key<'a>(Cow<'a, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a key")
            }
            fn visit_borrowed_str<E>(self, s: &'de str) -> Result<Self::Value, E> {
                Ok(Key(Cow::Borrowed(s)))
            }
            fn visit_str<E>(self, s: &str) -> Result<Self::Value, E> {
                Ok(Key(Cow::Owned(s.to_owned())))
            }
            fn visit_string<E>(self, s: String) -> Result<Self::Value, E> {
                Ok(Key(Cow::Owned(s)))
            }
        }
        d.deserialize_str(V)
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::{Column, ColumnType, Deserializer};

    fn reader(case_insensitive: bool, dots: bool) -> RowReader {
        let col = |n: &str, t: &str| Column { name: n.into(), ty: ColumnType::parse(t).unwrap() };
        RowReader::new(
            vec![
                col("tenant_id", "string"),
                col("n", "int"),
                col("a_b", "double"),
                col("m", "map<string,int>"),
                col("ok", "boolean"),
                col("t", "tinyint"),
                col("big", "bigint"),
                col("ts", "timestamp"),
            ],
            Deserializer::OpenX {
                case_insensitive,
                dots_to_underscores: dots,
                key_mappings: [("tenant_id".to_owned(), "tenantId".to_owned())].into_iter().collect(),
            },
        )
    }

    /// A value nested past serde_json's recursion limit.
    fn deep_value() -> &'static str {
        static DEEP: std::sync::OnceLock<String> = std::sync::OnceLock::new();
        DEEP.get_or_init(|| format!("{}{}", "[".repeat(130), "]".repeat(130)))
    }

    fn member() -> impl Strategy<Value = String> {
        let key = prop_oneof![
            Just("tenantId"),
            Just("TENANTID"),
            Just("tenantid"),
            Just("n"),
            Just("N"),
            Just("a.b"),
            Just("a_b"),
            Just("A_B"),
            Just("m"),
            Just("other"),
            Just("t\\u0065nantId"),
            Just("ok"),
            Just("t"),
            Just("big"),
            Just("ts"),
        ];
        let value = prop_oneof![
            Just("1"),
            Just("\"2\""),
            Just("null"),
            Just("2.5"),
            Just("\"x\""),
            Just("{\"k\":1,\"K\":\"3\"}"),
            Just("[1,{\"deep\":[true]}]"),
            Just("99999999999"),
            Just("1e388"),
            Just("-2E+400"),
            Just("1e-400"),
            Just("[0.5e308,{\"x\":\"1e999\"}]"),
            Just("{\"e\\\"1e999\":[1.7976931348623157e308]}"),
            Just("true"),
            Just("false"),
            Just("\"TRUE\""),
            Just("-0"),
            Just("127"),
            Just("128"),
            Just("-129"),
            Just("2147483648"),
            Just("-9223372036854775808"),
            Just("9223372036854775808"),
            Just("123456789012345678901"),
            Just("3.0"),
            Just("1546760416"),
            Just("-1546760416"),
            Just("1518033528123"),
            Just("1518033528.123"),
            Just("999999999999999999"),
            Just("\"2024-01-02 03:04:05\""),
            Just("\"a\\u00e9\\n\\\"b\""),
            Just("\"\\u0041\\\\\\/\""),
            Just("\"\""),
            Just("\"\\ud800\""),
            Just("\"a\\uDBFF\\uDFFFb\""),
            Just("\"\\ud83d\\ude00\""),
            Just(deep_value()),
            Just("{ \"b\" : [1.50, -0, 1e3, \"\\u0041\\t\"], \"a\":{\"z\":null,\"y\":true},\"b\":2 }"),
            Just("[ {\"\\u0062\":1, \"a\":\"x\u{7f}\u{e9}\"} , [] , {} ]"),
        ];
        (key, value).prop_map(|(k, v)| format!("\"{k}\":{v}"))
    }

    proptest! {
        /// Rows and errors are the specification's, whatever the keys' case, dots,
        /// repeats and escapes, and however many documents a record holds.
        #[test]
        fn members_read_as_the_specification_does(
            docs in proptest::collection::vec(proptest::collection::vec(member(), 0..6), 1..3),
            tail in prop_oneof![Just(""), Just("\n"), Just(" [1]"), Just("{"), Just("7")],
            case_insensitive in any::<bool>(),
            dots in any::<bool>(),
        ) {
            let r = reader(case_insensitive, dots);
            let mut record: String = docs.iter().map(|d| format!("{{{}}}", d.join(","))).collect::<Vec<_>>().join("\n");
            record.push_str(tail);
            let want = r.rows_of_values(record.as_bytes());
            prop_assert_eq!(&r.rows(record.as_bytes()), &want, "{}", record);
            // Appended as rowcode bytes: the same rows, or the same error and nothing.
            let mut out = b"before".to_vec();
            let put = r.put_rows(record.as_bytes(), &mut out);
            let mut expected = b"before".to_vec();
            if let Ok(rows) = &want {
                rows.iter().for_each(|row| rowcode::put_row(row, &mut expected));
            }
            prop_assert_eq!(put, want.map(|rows| rows.len()), "{}", record);
            prop_assert_eq!(out, expected, "{}", record);
        }
    }

    /// JSON text with whitespace, repeated and escaped keys, every number form.
    fn json_text() -> impl Strategy<Value = String> {
        let leaf = prop_oneof![
            Just("null".to_owned()),
            Just("true".to_owned()),
            Just("false".to_owned()),
            any::<i64>().prop_map(|n| n.to_string()),
            any::<u64>().prop_map(|n| n.to_string()),
            any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(|f| format!("{f:e}")),
            prop_oneof![
                Just("-0"),
                Just("0.0"),
                Just("1.50"),
                Just("1E+2"),
                Just("-0.0e-0"),
                Just("123456789012345678901234")
            ]
            .prop_map(str::to_owned),
            "[a-c\\\\\"\u{7f}\u{e9}\u{1F600}]{0,4}".prop_map(|s| serde_json::to_string(&s).unwrap()),
            Just(r#""\u0062\/\ud83d\ude00""#.to_owned()),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            let ws = prop_oneof![Just(""), Just(" "), Just("\n\t ")];
            prop_oneof![
                (proptest::collection::vec(inner.clone(), 0..4), ws.clone())
                    .prop_map(|(items, w)| format!("[{w}{}{w}]", items.join(&format!("{w},{w}")))),
                (
                    proptest::collection::vec(
                        (prop_oneof![Just("a"), Just("b"), Just("B"), Just("\\u0061"), Just("")], inner),
                        0..4
                    ),
                    ws
                )
                    .prop_map(|(members, w)| {
                        let m: Vec<String> = members.iter().map(|(k, v)| format!("\"{k}\"{w}:{w}{v}")).collect();
                        format!("{{{w}{}{w}}}", m.join(","))
                    }),
            ]
        })
    }

    proptest! {
        /// A nested value's text is the one `Value::to_string` gives, or none at all.
        #[test]
        fn nested_values_are_written_as_serde_json_writes_them(text in json_text()) {
            let mut ours = String::new();
            let want = serde_json::from_str::<Value>(&text).map(|v| v.to_string());
            match compact_sorted(&text, &mut ours) {
                Some(()) => prop_assert_eq!(Ok(ours), want.map_err(|_| ()), "{}", text),
                None => prop_assert!(!text.trim_start().starts_with(['{', '[']) || want.is_err(), "{}", text),
            }
        }
    }

    /// Strings are borrowed only where they need no unescaping.
    #[test]
    fn escaped_strings_read_unescaped() {
        let r = reader(true, false);
        for record in [r#"{"tenantId":"a\u00e9\n\"b"}"#, r#"{"tenantId":"\\"}"#, r#"{"tenantId":"plain é"}"#] {
            let want = r.rows_of_values(record.as_bytes()).unwrap();
            assert_eq!(r.rows(record.as_bytes()).unwrap(), want, "{record}");
            let (mut out, mut expected) = (Vec::new(), Vec::new());
            assert_eq!(r.put_rows(record.as_bytes(), &mut out), Ok(1));
            rowcode::put_row(&want[0], &mut expected);
            assert_eq!(out, expected, "{record}");
        }
    }

    #[test]
    fn errors_are_the_specifications() {
        let r = reader(true, false);
        let huge = format!("{{\"other\":{}}}", "9".repeat(400));
        for record in [
            huge.as_str(),
            "{\"other\":1e388}",
            "{\"n\":1}{\"x\":[-1E309]}",
            "",
            "  ",
            "[1]",
            "{\"n\":\"x\"}",
            "{\"n\":1}{\"n\":[]}",
            "{\"n\":1} 2",
            "{\"n\":",
            "{\"n\":1}}",
        ] {
            assert_eq!(r.rows(record.as_bytes()), r.rows_of_values(record.as_bytes()), "{record}");
            let mut out = vec![7];
            assert_eq!(
                r.put_rows(record.as_bytes(), &mut out).map_err(|e| e.to_string()),
                r.rows_of_values(record.as_bytes()).map(|r| r.len()).map_err(|e| e.to_string())
            );
            assert_eq!(out, [7], "{record}: nothing appended");
            assert!(r.rows(record.as_bytes()).is_err(), "{record}");
        }
    }
}
