//! Partition keys from a `MetadataExtractionQuery`, with Firehose's JQ-1.6 semantics
//! (jaq): the query must produce one JSON object whose values are scalars. Strings are
//! used as they are, numbers as their JSON text, booleans as `true` / `false`. `null`
//! (also what a missing field yields), arrays and objects are failures: the record goes
//! to the error output as `partitioning-failed`, never into a wrong partition.

use std::collections::BTreeMap;

use jaq_json::Val;
use weir_core::jq::{Filter, JsonError};

/// A compiled key query.
pub struct KeyQuery {
    jq: Filter,
}

impl std::fmt::Debug for KeyQuery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyQuery").field("source", &self.jq.source()).finish()
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
    /// The record nests arrays and objects deeper than jq 1.6's parser allows.
    #[error("record nests arrays and objects deeper than {} levels", weir_core::jq::MAX_JSON_DEPTH)]
    TooDeep,
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

impl KeyQuery {
    /// Compiles a query.
    pub fn compile(query: &str) -> Result<Self, QueryError> {
        let jq = Filter::compile(query).map_err(|e| QueryError { query: query.to_owned(), message: e.message })?;
        Ok(Self { jq })
    }

    /// Partition keys of a record: parsed by jaq, the query run by jaq's interpreter.
    pub fn keys(&self, record: &[u8]) -> Result<BTreeMap<String, String>, KeyError> {
        let input = weir_core::jq::parse(record).map_err(|e| match e {
            JsonError::NotJson => KeyError::NotJson,
            JsonError::TooDeep => KeyError::TooDeep,
        })?;
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

    fn q(s: &str) -> KeyQuery {
        KeyQuery::compile(s).unwrap()
    }

    #[test]
    fn the_design_notes_query() {
        let query = q("{tenantId: .tenant_id, toolName: .tool_name}");
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
        let deep = format!("{{\"a\":{}1{}}}", "[".repeat(1 << 20), "]".repeat(1 << 20));
        assert_eq!(query.keys(deep.as_bytes()), Err(KeyError::TooDeep));
        assert!(matches!(query.keys(b"[1,2]"), Err(KeyError::NotAnObject(_))));
    }

    #[test]
    fn full_jq_when_needed() {
        let query = q(r#"{tenant: (.tenant_id | ascii_downcase), hour: (.ts / 3600000 | floor)}"#);
        let keys = query.keys(br#"{"tenant_id":"T-7","ts":7200000}"#).unwrap();
        assert_eq!(keys["tenant"], "t-7");
        assert_eq!(keys["hour"], "2");
        assert_eq!(q("{t: .meta.tool}").keys(br#"{"meta":{"tool":"x"}}"#).unwrap()["t"], "x");
        assert!(matches!(q("{t: .meta.tool}").keys(br#"{"meta":5}"#), Err(KeyError::NotAnObject(_))));
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
}
