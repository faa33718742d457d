//! Partition keys from a `MetadataExtractionQuery`, with Firehose's JQ-1.6 semantics:
//! the query must produce one JSON object whose values are scalars. Strings are used
//! as they are, numbers as their JSON text, booleans as `true` / `false`. `null` (also
//! what a missing field yields), arrays and objects are failures: the record goes to
//! the error output as `partitioning-failed`, never into a wrong partition.
//!
//! Queries made only of plain field paths - `{tenantId: .tenant_id, tool: .meta.tool}` -
//! take a fast path that reads the fields without the jq interpreter; a property test
//! checks it gives jaq's results.

use std::collections::BTreeMap;

use jaq_json::Val;
use weir_core::jq::Filter;

/// A compiled key query.
pub struct KeyQuery {
    source: String,
    fast: Option<Vec<(String, Vec<String>)>>,
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

/// Reads the top-level fields of `paths` (single-segment paths) without building a
/// tree. `None` whenever the answer is not a plain success with string or boolean
/// values (not an object, invalid JSON, null, numbers, nested values): the full parse
/// then decides, so results and errors are exactly the reference's.
fn flat_keys(record: &[u8], paths: &[(String, Vec<String>)]) -> Option<BTreeMap<String, String>> {
    use serde::Deserializer as _;
    use serde::de::{IgnoredAny, MapAccess, Visitor};
    use serde_json::value::RawValue;

    struct Fields<'p> {
        paths: &'p [(String, Vec<String>)],
    }
    impl<'de> Visitor<'de> for Fields<'_> {
        type Value = Vec<Option<&'de RawValue>>;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("an object")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut found = vec![None; self.paths.len()];
            while let Some(KeyName(k)) = map.next_key::<KeyName<'de>>()? {
                match self.paths.iter().position(|(_, p)| p[0] == k) {
                    Some(i) => found[i] = Some(map.next_value::<&'de RawValue>()?),
                    None => {
                        map.next_value::<IgnoredAny>()?;
                    }
                }
            }
            Ok(found)
        }
    }
    let mut de = serde_json::Deserializer::from_slice(record);
    let found = de.deserialize_map(Fields { paths }).ok()?;
    de.end().ok()?;
    let mut out = BTreeMap::new();
    for ((name, _), raw) in paths.iter().zip(found) {
        let text = raw?.get();
        let value = match text {
            "true" | "false" => text.to_owned(),
            t if t.starts_with('"') => serde_json::from_str::<String>(t).ok()?,
            _ => return None,
        };
        out.insert(name.clone(), value);
    }
    Some(out)
}

impl KeyQuery {
    /// Compiles a query.
    pub fn compile(query: &str) -> Result<Self, QueryError> {
        let jq = Filter::compile(query).map_err(|e| QueryError { query: query.to_owned(), message: e.message })?;
        Ok(Self { source: query.to_owned(), fast: plain_paths(query), jq })
    }

    /// Whether the fast path is used.
    pub fn is_fast(&self) -> bool {
        self.fast.is_some()
    }

    /// Partition keys of a record.
    pub fn keys(&self, record: &[u8]) -> Result<BTreeMap<String, String>, KeyError> {
        if let Some(paths) = &self.fast
            && paths.iter().all(|(_, p)| p.len() == 1)
            && let Some(found) = flat_keys(record, paths)
        {
            return Ok(found);
        }
        self.keys_parsed(record)
    }

    /// Partition keys through a full parse (the reference for [`flat_keys`]).
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

    proptest! {
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
