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

use super::deserialize::{Cell, Mismatch, RowReader};

/// The rows of `record`, as [`RowReader::rows_of_values`] reads them.
pub(super) fn rows(reader: &RowReader, record: &[u8]) -> Result<Vec<Vec<Cell>>, Mismatch> {
    let mut rows = Vec::with_capacity(1);
    for members in serde_json::Deserializer::from_slice(record).into_iter::<Members<'_>>() {
        match members {
            // A number past f64's range is valid JSON the specification's parser refuses.
            Ok(m) if m.0.iter().all(|(_, v)| numbers_in_range(v.get())) => rows.push(row(reader, &m.0)),
            // Not JSON, or a document that is not an object: the specification says how.
            _ => return reader.rows_of_values(record),
        }
    }
    if rows.is_empty() {
        return reader.rows_of_values(record);
    }
    let several = rows.len() > 1;
    rows.into_iter().enumerate().map(|(i, r)| r.map_err(|e| if several { e.in_document(i + 1) } else { e })).collect()
}

fn row(reader: &RowReader, members: &[(Cow<'_, str>, &RawValue)]) -> Result<Vec<Cell>, Mismatch> {
    let mut path = String::new();
    reader
        .columns()
        .iter()
        .zip(reader.keys())
        .map(|(c, key)| {
            let Some(raw) = find(reader, members, key) else { return Ok(Cell::Null) };
            let value: Value = serde_json::from_str(raw.get()).map_err(|e| Mismatch::NotJson(e.to_string()))?;
            path.clear();
            path.push_str(&c.name);
            reader.cell(&c.ty, &value, &mut path)
        })
        .collect()
}

/// The value the specification's object holds for `folded`: that object is a map
/// sorted by key in which a repeated key keeps its last value, searched from the
/// greatest key down; so of the keys that fold to `folded` the greatest, and of its
/// repeats the last.
fn find<'a>(reader: &RowReader, members: &'a [(Cow<'_, str>, &'a RawValue)], folded: &str) -> Option<&'a RawValue> {
    let mut best: Option<(&str, &RawValue)> = None;
    for (k, v) in members {
        if reader.folds_to(k, folded) && best.is_none_or(|(b, _)| k.as_ref() >= b) {
            best = Some((k.as_ref(), *v));
        }
    }
    best.map(|(_, v)| v)
}

/// Whether every number in `json` (valid JSON text) is one `serde_json` reads into a
/// `Value`: none whose magnitude passes `f64::MAX` (`1e400`, or an integer of 400
/// digits), which it refuses as "number out of range". Strings are skipped unread.
fn numbers_in_range(json: &str) -> bool {
    let bytes = json.as_bytes();
    if bytes.first() == Some(&b'"') {
        return true;
    }
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'"' => {
                i += 1;
                while i < bytes.len() && bytes[i] != b'"' {
                    i += if bytes[i] == b'\\' { 2 } else { 1 };
                }
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
    use crate::parquet::{Column, ColumnType, Deserializer};

    fn reader(case_insensitive: bool, dots: bool) -> RowReader {
        let col = |n: &str, t: &str| Column { name: n.into(), ty: ColumnType::parse(t).unwrap() };
        RowReader::new(
            vec![col("tenant_id", "string"), col("n", "int"), col("a_b", "double"), col("m", "map<string,int>")],
            Deserializer::OpenX {
                case_insensitive,
                dots_to_underscores: dots,
                key_mappings: [("tenant_id".to_owned(), "tenantId".to_owned())].into_iter().collect(),
            },
        )
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
            prop_assert_eq!(rows(&r, record.as_bytes()), r.rows_of_values(record.as_bytes()), "{}", record);
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
            assert_eq!(rows(&r, record.as_bytes()), r.rows_of_values(record.as_bytes()), "{record}");
            assert!(rows(&r, record.as_bytes()).is_err(), "{record}");
        }
    }
}
