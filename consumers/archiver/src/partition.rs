//! Partition keys from a `MetadataExtractionQuery`, with Firehose's JQ-1.6 semantics:
//! the query must produce one JSON object whose values are scalars. Strings are used
//! as they are, numbers as their JSON text, booleans as `true` / `false`. `null` (also
//! what a missing field yields), arrays and objects are failures: the record goes to
//! the error output as `partitioning-failed`, never into a wrong partition.
//!
//! Queries made only of plain field paths - `{tenantId: .tenant_id, tool: .meta.tool}` -
//! take a fast path that reads the fields without the jq interpreter; a property test
//! checks it gives jaq's results.

use std::borrow::Cow;
use std::collections::BTreeMap;

use jaq_json::Val;
use smallvec::SmallVec;
use weir_core::jq::Filter;

use crate::fields::FieldIndex;

/// A compiled key query.
pub struct KeyQuery {
    source: String,
    fast: Option<Vec<(String, Vec<String>)>>,
    flat: Option<Flat>,
    jq: Filter,
}

impl std::fmt::Debug for KeyQuery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyQuery").field("source", &self.source).field("fast_path", &self.fast.is_some()).finish()
    }
}

/// The query does not compile.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("MetadataExtractionQuery {query:?} does not compile: {message}")]
pub struct QueryError {
    /// The query.
    pub query: String,
    /// The parser's or compiler's message.
    pub message: String,
}

/// Why a record has no partition keys.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// The record is not JSON.
    #[error("record is not valid JSON")]
    NotJson,
    /// The query failed or produced no single object.
    #[error("query result is not one JSON object: {0}")]
    NotAnObject(String),
    /// A key's value is null (or the field is missing).
    #[error("partition key {0:?} is null or missing")]
    Null(String),
    /// A key's value is an array or object.
    #[error("partition key {0:?} is not a scalar")]
    NotScalar(String),
}

/// Parses `{name: .a.b, other: .c}` with plain identifiers; `None` for anything else.
fn plain_paths(query: &str) -> Option<Vec<(String, Vec<String>)>> {
    let body = query.trim().strip_prefix('{')?.strip_suffix('}')?;
    let ident = |s: &str| {
        let s = s.trim();
        let mut chars = s.chars();
        let first_ok = chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
        (first_ok && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')).then(|| s.to_owned())
    };
    let mut out = Vec::new();
    for pair in body.split(',') {
        let (name, path) = pair.split_once(':')?;
        let name = ident(name)?;
        let path = path.trim().strip_prefix('.')?;
        let segments: Option<Vec<String>> = path.split('.').map(ident).collect();
        let segments = segments?;
        if out.iter().any(|(n, _): &(String, Vec<String>)| *n == name) {
            return None; // jq keeps the last duplicate; leave that to jaq
        }
        out.push((name, segments));
    }
    (!out.is_empty()).then_some(out)
}

fn scalar(name: &str, v: &Val) -> Result<String, KeyError> {
    match v {
        Val::Null => Err(KeyError::Null(name.to_owned())),
        Val::Bool(b) => Ok(b.to_string()),
        Val::Num(n) => Ok(n.to_string()),
        Val::TStr(b) | Val::BStr(b) => Ok(String::from_utf8_lossy(b).into_owned()),
        Val::Arr(_) | Val::Obj(_) => Err(KeyError::NotScalar(name.to_owned())),
    }
}

fn key_name(k: &Val) -> String {
    match k {
        Val::TStr(b) | Val::BStr(b) => String::from_utf8_lossy(b).into_owned(),
        other => other.to_string(),
    }
}

fn field<'a>(v: &'a Val, name: &str) -> Option<&'a Val> {
    match v {
        Val::Obj(map) => {
            map.iter().find(|(k, _)| matches!(k, Val::TStr(b) if b.as_ref() == name.as_bytes())).map(|(_, v)| v)
        }
        _ => None,
    }
}

/// A key of a JSON object, borrowed when it has no escapes.
struct KeyName<'a>(std::borrow::Cow<'a, str>);

impl<'de> serde::Deserialize<'de> for KeyName<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = KeyName<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a key")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(KeyName(std::borrow::Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
                Ok(KeyName(std::borrow::Cow::Owned(v.to_owned())))
            }
        }
        d.deserialize_str(V)
    }
}

/// The raw JSON text of the top-level `fields` of `record`, read without building a
/// tree (`None` per field it lacks). `None` when `record` is not a UTF-8 JSON object:
/// the full parse then decides.
fn flat_raw<'d>(record: &'d [u8], fields: &[String]) -> Option<SmallVec<[Option<&'d str>; 4]>> {
    use serde::Deserializer as _;
    use serde::de::{IgnoredAny, MapAccess, Visitor};
    use serde_json::value::RawValue;

    struct Fields<'p> {
        fields: &'p [String],
    }
    impl<'de> Visitor<'de> for Fields<'_> {
        type Value = SmallVec<[Option<&'de str>; 4]>;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("an object")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut found: Self::Value = smallvec::smallvec![None; self.fields.len()];
            while let Some(KeyName(k)) = map.next_key::<KeyName<'de>>()? {
                match self.fields.iter().position(|f| *f == k) {
                    // A repeated field: the last one counts, as in jq.
                    Some(i) => found[i] = Some(map.next_value::<&'de RawValue>()?.get()),
                    None => {
                        map.next_value::<IgnoredAny>()?;
                    }
                }
            }
            Ok(found)
        }
    }
    // UTF-8 is checked once for the whole record, not string by string.
    let text = std::str::from_utf8(record).ok()?;
    let mut de = serde_json::Deserializer::from_str(text);
    let found = de.deserialize_map(Fields { fields }).ok()?;
    de.end().ok()?;
    Some(found)
}

/// A partition-key value from a field's raw JSON text: strings (borrowed unless they
/// hold escapes) and booleans; `None` for anything else (the full path decides).
fn key_text(raw: &str) -> Option<Cow<'_, str>> {
    match raw {
        "true" | "false" => Some(Cow::Borrowed(raw)),
        _ => {
            let inner = raw.strip_prefix('"')?.strip_suffix('"')?;
            // Partition values are short: a plain loop beats a memchr call.
            if inner.bytes().any(|b| b == b'\\') {
                serde_json::from_str::<String>(raw).ok().map(Cow::Owned)
            } else {
                Some(Cow::Borrowed(inner))
            }
        }
    }
}

/// The values of a flat query's keys, in the order of [`KeyQuery::flat_names`],
/// borrowed from the record where they need no unescaping.
pub type FlatValues<'d> = SmallVec<[Cow<'d, str>; 4]>;

/// The raw JSON texts of a flat query's fields, in the order of
/// [`KeyQuery::flat_names`].
pub type FlatTexts<'d> = SmallVec<[&'d [u8]; 4]>;

/// A query made only of top-level field paths, by key name.
struct Flat {
    /// Key names, sorted.
    names: Vec<String>,
    /// The field each key reads.
    fields: Vec<String>,
    /// Where `fields` are in the first field index seen (its names' address and the
    /// places), so records indexed the same way need no name lookups.
    places: std::sync::OnceLock<(usize, Vec<Option<usize>>)>,
}

impl Flat {
    fn of(paths: &[(String, Vec<String>)]) -> Option<Self> {
        let mut pairs: Vec<(String, String)> = paths
            .iter()
            .map(|(name, path)| match path.as_slice() {
                [field] => Some((name.clone(), field.clone())),
                _ => None,
            })
            .collect::<Option<_>>()?;
        pairs.sort();
        let (names, fields) = pairs.into_iter().unzip();
        Some(Self { names, fields, places: std::sync::OnceLock::new() })
    }
}

impl KeyQuery {
    /// Compiles a query.
    pub fn compile(query: &str) -> Result<Self, QueryError> {
        let jq = Filter::compile(query).map_err(|e| QueryError { query: query.to_owned(), message: e.message })?;
        let fast = plain_paths(query);
        let flat = fast.as_deref().and_then(Flat::of);
        Ok(Self { source: query.to_owned(), fast, flat, jq })
    }

    /// The key names, sorted, of a query made only of top-level field paths
    /// (`{tenantId: .tenant_id}`); `None` for any other query.
    pub fn flat_names(&self) -> Option<&[String]> {
        self.flat.as_ref().map(|f| f.names.as_slice())
    }

    /// The keys of a flat query (see [`KeyQuery::flat_names`]) when every one is a
    /// string or boolean, without the interpreter and without copying values that need
    /// no unescaping. `index`, from the transform that wrote `record`, saves reading
    /// the record at all. `None` whenever the answer is not such a plain success (not
    /// an object, invalid JSON, null or missing keys, numbers, nested values):
    /// [`KeyQuery::keys`] then decides, with the reference's results and errors.
    pub fn flat_values<'d>(&self, record: &'d [u8], index: Option<&FieldIndex>) -> Option<FlatValues<'d>> {
        Self::flat_values_of(&self.flat_texts(record, index)?)
    }

    /// The raw JSON texts of a flat query's fields in `record`, in the order of
    /// [`KeyQuery::flat_names`] (the first step of [`KeyQuery::flat_values`]; the keys
    /// are a function of these texts alone). `None` as for `flat_values`, except that
    /// the values are not judged yet.
    pub fn flat_texts<'d>(&self, record: &'d [u8], index: Option<&FieldIndex>) -> Option<FlatTexts<'d>> {
        let flat = self.flat.as_ref()?;
        let mut texts = FlatTexts::new();
        if let Some(index) = index {
            let names = index.names().as_ptr() as usize;
            let (cached, places) = flat.places.get_or_init(|| {
                (names, flat.fields.iter().map(|f| index.names().iter().position(|n| n == f)).collect())
            });
            for (field, place) in flat.fields.iter().zip(places) {
                let raw = if *cached == names {
                    place.map(|i| index.raw_bytes_at(record, i).map(Some)).unwrap_or(Some(None))
                } else {
                    index.raw_bytes(record, field)
                };
                match raw {
                    Some(Some(raw)) => texts.push(raw),
                    // Missing: null, which the full path reports.
                    Some(None) => return None,
                    // The index cannot tell: read the record.
                    None => break,
                }
            }
            if texts.len() == flat.fields.len() {
                return Some(texts);
            }
            texts.clear();
        }
        for raw in flat_raw(record, &flat.fields)? {
            texts.push(raw?.as_bytes());
        }
        Some(texts)
    }

    /// The key values of texts from [`KeyQuery::flat_texts`]; `None` unless every one
    /// is a string or a boolean.
    pub fn flat_values_of<'d>(texts: &[&'d [u8]]) -> Option<FlatValues<'d>> {
        texts.iter().map(|raw| key_text(std::str::from_utf8(raw).ok()?)).collect()
    }

    /// Whether the fast path is used.
    pub fn is_fast(&self) -> bool {
        self.fast.is_some()
    }

    /// Partition keys of a record.
    pub fn keys(&self, record: &[u8]) -> Result<BTreeMap<String, String>, KeyError> {
        if let Some(flat) = &self.flat
            && let Some(values) = self.flat_values(record, None)
        {
            return Ok(flat.names.iter().cloned().zip(values.into_iter().map(Cow::into_owned)).collect());
        }
        self.keys_parsed(record)
    }

    /// Partition keys through a full parse (the reference for [`KeyQuery::flat_values`]).
    pub fn keys_parsed(&self, record: &[u8]) -> Result<BTreeMap<String, String>, KeyError> {
        let input = jaq_json::read::parse_single(record).map_err(|_| KeyError::NotJson)?;
        match &self.fast {
            Some(paths) => self.keys_fast(&input, paths),
            None => self.keys_jq(input),
        }
    }

    fn keys_fast(&self, input: &Val, paths: &[(String, Vec<String>)]) -> Result<BTreeMap<String, String>, KeyError> {
        // Like jq: build the whole object first (an indexing error anywhere fails it),
        // then judge the values.
        let mut values = Vec::with_capacity(paths.len());
        for (name, path) in paths {
            let mut v = input;
            for seg in path {
                v = match v {
                    Val::Obj(_) => field(v, seg).unwrap_or(&Val::Null),
                    Val::Null => &Val::Null,
                    // jq: indexing a non-object is an error.
                    _ => return Err(KeyError::NotAnObject(format!("cannot index a non-object with {seg:?}"))),
                };
            }
            values.push((name, v));
        }
        values.into_iter().map(|(name, v)| Ok((name.clone(), scalar(name, v)?))).collect()
    }

    /// Runs the interpreter (also the reference the fast path is tested against).
    pub fn keys_jq(&self, input: Val) -> Result<BTreeMap<String, String>, KeyError> {
        let first = self.jq.single(input).map_err(KeyError::NotAnObject)?;
        let Val::Obj(map) = &first else { return Err(KeyError::NotAnObject(first.to_string())) };
        let mut out = BTreeMap::new();
        for (k, v) in map.iter() {
            let name = key_name(k);
            out.insert(name.clone(), scalar(&name, v)?);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn q(s: &str) -> KeyQuery {
        KeyQuery::compile(s).unwrap()
    }

    #[test]
    fn the_design_notes_query() {
        let query = q("{tenantId: .tenant_id, toolName: .tool_name}");
        assert!(query.is_fast());
        let keys = query.keys(br#"{"tenant_id":"t-007","tool_name":"search_docs","x":1}"#).unwrap();
        assert_eq!(
            keys,
            BTreeMap::from([("tenantId".into(), "t-007".into()), ("toolName".into(), "search_docs".into())])
        );
    }

    #[test]
    fn scalars_only() {
        let query = q("{a: .a}");
        assert_eq!(query.keys(br#"{"a": 12.5}"#).unwrap()["a"], "12.5");
        assert_eq!(query.keys(br#"{"a": true}"#).unwrap()["a"], "true");
        assert_eq!(query.keys(br#"{"a": null}"#), Err(KeyError::Null("a".into())));
        assert_eq!(query.keys(br#"{"b": 1}"#), Err(KeyError::Null("a".into())), "missing is null");
        assert_eq!(query.keys(br#"{"a": [1]}"#), Err(KeyError::NotScalar("a".into())));
        assert_eq!(query.keys(br#"{"a": {"b": 1}}"#), Err(KeyError::NotScalar("a".into())));
        assert_eq!(query.keys(b"not json"), Err(KeyError::NotJson));
        assert!(matches!(query.keys(b"[1,2]"), Err(KeyError::NotAnObject(_))));
    }

    #[test]
    fn full_jq_when_needed() {
        let query = q(r#"{tenant: (.tenant_id | ascii_downcase), hour: (.ts / 3600000 | floor)}"#);
        assert!(!query.is_fast());
        let keys = query.keys(br#"{"tenant_id":"T-7","ts":7200000}"#).unwrap();
        assert_eq!(keys["tenant"], "t-7");
        assert_eq!(keys["hour"], "2");
        assert!(matches!(q(".a").keys(br#"{"a":"x"}"#), Err(KeyError::NotAnObject(_))), "must produce an object");
        assert!(matches!(q(".[]").keys(br#"[{"a":1},{"a":2}]"#), Err(KeyError::NotAnObject(_))), "one output only");
        let err = KeyQuery::compile("{a: .b").unwrap_err();
        assert!(err.to_string().contains("does not compile"), "{err}");
    }

    #[test]
    fn queries_are_send() {
        fn send<T: Send>() {}
        send::<KeyQuery>();
    }

    fn value() -> impl Strategy<Value = json_gen::V> {
        json_gen::strategy()
    }

    /// Random JSON documents as text.
    mod json_gen {
        use proptest::prelude::*;
        #[derive(Debug, Clone)]
        pub enum V {
            Null,
            Bool(bool),
            Int(i64),
            Str(String),
            Arr(Vec<V>),
            Obj(Vec<(String, V)>),
        }
        impl V {
            pub fn text(&self) -> String {
                match self {
                    V::Null => "null".into(),
                    V::Bool(b) => b.to_string(),
                    V::Int(i) => i.to_string(),
                    V::Str(s) => serde_json::to_string(s).unwrap(),
                    V::Arr(a) => format!("[{}]", a.iter().map(V::text).collect::<Vec<_>>().join(",")),
                    V::Obj(o) => format!(
                        "{{{}}}",
                        o.iter().map(|(k, v)| format!("{k:?}:{}", v.text())).collect::<Vec<_>>().join(",")
                    ),
                }
            }
        }
        pub fn strategy() -> impl Strategy<Value = V> {
            let leaf = prop_oneof![
                Just(V::Null),
                any::<bool>().prop_map(V::Bool),
                any::<i64>().prop_map(V::Int),
                "[a-z0-9 _\\-\"\\\\é\\u{1}]{0,8}".prop_map(V::Str),
            ];
            leaf.prop_recursive(3, 16, 4, |inner| {
                prop_oneof![
                    proptest::collection::vec(inner.clone(), 0..3).prop_map(V::Arr),
                    proptest::collection::vec(("[a-c]", inner), 0..4).prop_map(V::Obj),
                ]
            })
        }
    }

    #[test]
    fn flat_values_borrow_plain_strings_and_unescape_others() {
        let query = q("{tool: .tool_name, tenant: .tenant_id}");
        assert_eq!(query.flat_names().unwrap(), ["tenant", "tool"], "sorted by key name");
        let record = br#"{"tenant_id":"t-1","tool_name":"a\u00e9"}"#;
        let values = query.flat_values(record, None).unwrap();
        assert!(matches!(values[0], Cow::Borrowed("t-1")));
        assert_eq!(values[1], "a\u{e9}");
        assert!(query.flat_values(br#"{"tenant_id":1,"tool_name":"x"}"#, None).is_none(), "numbers: full path");
        assert!(query.flat_values(&[b'{', 0xff, b'}'], None).is_none());
        assert!(q("{a: .a.b}").flat_names().is_none());
    }

    #[test]
    fn field_indexes_with_other_names_are_read_by_name() {
        let query = q("{t: .tenant_id}");
        let first = br#"{"tenant_id":"a","x":1}"#;
        let mut one = FieldIndex::new(&["tenant_id", "x"]).unwrap();
        one.set(0, 13..16);
        one.set(1, 21..22);
        assert_eq!(query.flat_values(first, Some(&one)).unwrap()[0], "a");
        // Another transform's index, fields in another order: found by name.
        let second = br#"{"x":1,"tenant_id":"b"}"#;
        let mut two = FieldIndex::new(&["x", "tenant_id"]).unwrap();
        two.set(0, 5..6);
        two.set(1, 19..22);
        assert_eq!(query.flat_values(second, Some(&two)).unwrap()[0], "b");
        let mut missing = FieldIndex::new(&["x"]).unwrap();
        missing.set(0, 5..6);
        assert!(query.flat_values(br#"{"x":1}"#, Some(&missing)).is_none(), "no such field: the full path decides");
    }

    proptest! {
        /// Keys read through the normaliser's field index are the keys a parse of the
        /// normalised line gives, and jaq's.
        #[test]
        fn field_index_gives_the_parsed_keys(
            tenant in prop_oneof![Just("null".to_owned()), Just("7".to_owned()), Just("true".to_owned()), "[a-z0-9 /\\.\"é\u{1}-]{0,6}".prop_map(|s| serde_json::to_string(&s).unwrap())],
            tool in prop_oneof![Just("false".to_owned()), Just("1.5".to_owned()), "[a-z_é]{0,6}".prop_map(|s| serde_json::to_string(&s).unwrap())],
        ) {
            use crate::transform::{TransformOutput, mcp_normalize_indexed};
            let record = format!(r#"{{"tenantId":{tenant},"toolName":{tool},"ts":1764400000000}}"#);
            let (TransformOutput::Ok(line), Some(index)) =
                mcp_normalize_indexed(record.as_bytes(), weir_core::Timestamp::from_millis(0))
            else {
                return Err(TestCaseError::fail(format!("{record} not normalised by the fast path")));
            };
            let query = q("{tenantId: .tenant_id, toolName: .tool_name}");
            let indexed = query.flat_values(&line, Some(&index));
            prop_assert_eq!(&indexed, &query.flat_values(&line, None));
            let reference = query.keys_jq(jaq_json::read::parse_single(&line).unwrap());
            match (indexed, reference) {
                (Some(values), Ok(keys)) => {
                    prop_assert_eq!(values.iter().map(|v| v.as_ref()).collect::<Vec<_>>(), keys.values().map(String::as_str).collect::<Vec<_>>());
                }
                (None, _) => {}
                (Some(values), Err(e)) => prop_assert!(false, "{:?} but jaq says {}", values, e),
            }
        }

        #[test]
        fn fast_path_matches_jaq(record in value(), paths in proptest::collection::vec(proptest::collection::vec("[a-c]", 1..3), 1..3)) {
            let query: String = format!(
                "{{{}}}",
                paths.iter().enumerate().map(|(i, p)| format!("k{i}: .{}", p.join("."))).collect::<Vec<_>>().join(", ")
            );
            let compiled = KeyQuery::compile(&query).unwrap();
            prop_assert!(compiled.is_fast());
            let text = record.text();
            let input = jaq_json::read::parse_single(text.as_bytes()).unwrap();
            let fast = compiled.keys(text.as_bytes());
            let slow = compiled.keys_jq(input);
            // Identical keys, or a failure in both (the record goes to partitioning-failed;
            // which key is named first may differ).
            match (&fast, &slow) {
                (Ok(a), Ok(b)) => prop_assert_eq!(a, b),
                (Err(_), Err(_)) => {}
                _ => prop_assert!(false, "fast {:?} vs jaq {:?} for {} on {}", fast, slow, query, text),
            }
        }
    }
}
