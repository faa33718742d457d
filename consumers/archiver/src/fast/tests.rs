//! The fast path against the reference pipeline, as wholes: for any part, what the fast
//! path answers is what the reference answers (the same line bytes, the same route),
//! and the common shapes are answered.

use proptest::prelude::*;

use super::differential::{configs, paths, settings};
use super::*;

const ARRIVAL: Timestamp = Timestamp::from_millis(1_764_400_000_000);

/// JSON values an event's fields may hold, hostile ones included.
fn field_value() -> impl Strategy<Value = String> {
    let leaf = prop_oneof![
        4 => "[a-z0-9_-]{1,12}".prop_map(|s| format!("\"{s}\"")),
        1 => Just("\"\"".to_owned()),
        1 => "[a-z/.\\\\%!{}é東\u{7f}\u{2028} -]{0,6}".prop_map(|s| serde_json::to_string(&s).unwrap()),
        1 => "(\\\\[\"\\\\/bfnrt]|\\\\u00[0-7][0-9a-f]|\\\\u[1-9a-c][0-9a-f]{3}|\\\\ud83d|[a-z])*".prop_map(|s| format!("\"{s}\"")),
        1 => Just(format!("\"{}\"", "x".repeat(300))),
        1 => Just("\".\"".to_owned()),
        1 => Just("\"..\"".to_owned()),
        2 => any::<u64>().prop_map(|n| n.to_string()),
        1 => any::<i64>().prop_map(|n| n.to_string()),
        1 => "-?[0-9]{1,21}(\\.[0-9]{1,3})?([eE][+-]?[0-9]{1,3})?",
        1 => Just("1764400000000".to_owned()),
        1 => Just("\"2026-11-29T10:00:00.123+05:30\"".to_owned()),
        1 => Just("\"2016-12-31T23:59:60Z\"".to_owned()),
        1 => Just("-0".to_owned()),
        1 => Just("1e400".to_owned()),
        2 => Just("true".to_owned()),
        2 => Just("false".to_owned()),
        2 => Just("null".to_owned()),
    ];
    leaf.prop_recursive(2, 8, 3, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..3).prop_map(|v| format!("[{}]", v.join(","))),
            proptest::collection::vec(("[a-z]{1,3}", inner), 0..3).prop_map(|v| format!(
                "{{{}}}",
                v.iter().map(|(k, v)| format!("\"{k}\":{v}")).collect::<Vec<_>>().join(",")
            )),
        ]
    })
}

/// Events: the fields both shapes read, under both spellings, with anything in them,
/// nested arguments, repeats and escaped keys; then sometimes a byte changed or the
/// text cut. The partition-key fields are often present and plain, so that every
/// configuration's fast path answers often.
fn event() -> impl Strategy<Value = Vec<u8>> {
    let name = prop_oneof![
        Just("tenantId"),
        Just("toolName"),
        Just("sessionId"),
        Just("ts"),
        Just("durationMs"),
        Just("success"),
        Just("errorCode"),
        Just("tenant_id"),
        Just("tool_name"),
        Just("arguments"),
        Just("tenant\\u0049d"),
        Just(""),
    ];
    let ws = prop_oneof![4 => Just(String::new()), 1 => "[ \t\r\n]{1,2}".prop_map(|s| s)];
    let member = (name, ws.clone(), field_value()).prop_map(|(n, w, v)| format!("\"{n}\"{w}:{w}{v}"));
    let likely = |name: &'static str| {
        prop_oneof![
            6 => "[a-z0-9_-]{1,8}".prop_map(move |v| Some(format!("\"{name}\":\"{v}\""))),
            1 => field_value().prop_map(move |v| Some(format!("\"{name}\":{v}"))),
            1 => Just(None),
        ]
    };
    let mutation = prop_oneof![
        8 => Just(None),
        1 => (any::<prop::sample::Index>(), any::<u8>()).prop_map(Some),
    ];
    let keys = (likely("tenantId"), likely("toolName"), likely("success"));
    let members = (keys, proptest::collection::vec(member, 0..5), any::<prop::sample::Index>()).prop_map(
        |((a, b, c), mut rest, at)| {
            let at = at.index(rest.len() + 1);
            for m in [a, b, c].into_iter().flatten() {
                rest.insert(at.min(rest.len()), m);
            }
            rest
        },
    );
    (ws, members, mutation, any::<Option<prop::sample::Index>>()).prop_map(|(w, members, mutation, cut)| {
        let mut bytes = format!("{w}{{{}}}{w}", members.join(",")).into_bytes();
        if let Some((at, byte)) = mutation {
            let at = at.index(bytes.len());
            bytes[at] = byte;
        }
        if let Some(at) = cut.filter(|_| mutation.is_some()) {
            bytes.truncate(at.index(bytes.len() + 1));
        }
        bytes
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1500))]
    /// For any part, in every configuration with a fast path: when the fast path
    /// answers, the reference gives the same line and the same data route.
    #[test]
    fn the_fast_path_gives_the_references_answer(data in event()) {
        for (_, transformer, query, delimiter) in configs() {
            paths(transformer, query, delimiter).agree(&data).map_err(TestCaseError::fail)?;
        }
    }

    /// Events of the common shape are answered by the fast path (so the test above
    /// is not passed by a path that is never sure).
    #[test]
    fn common_events_take_the_fast_path(
        tenant in "t-[0-9]{1,4}", tool in "[a-z_]{1,12}", ts in 1_600_000_000_000u64..1_900_000_000_000,
        duration in 0u32..100_000, ok in any::<bool>(), query in "[a-zé \"\\\\]{0,20}",
    ) {
        let args = serde_json::to_string(&query).unwrap();
        let raw = format!(
            r#"{{"tenantId":"{tenant}","toolName":"{tool}","sessionId":"s-1","ts":{ts},"durationMs":{duration},"success":{ok},"errorCode":null,"arguments":{{"q":{args},"limit":[1,2.5]}}}}"#
        );
        let normalized = weir_mcp::normalize_line(raw.as_bytes(), ARRIVAL).unwrap();
        for (name, transformer, query, delimiter) in configs() {
            let mut p = paths(transformer, query, delimiter);
            prop_assert!(p.agree(raw.as_bytes()).map_err(TestCaseError::fail)?, "{} not answered: {}", name, raw);
            if name == "raw" {
                prop_assert!(p.agree(&normalized).map_err(TestCaseError::fail)? || query.is_some(), "{}", name);
            }
        }
    }
}

#[test]
fn hostile_records_are_left_to_the_reference() {
    let deep = format!("{{\"tenantId\":\"t\",\"toolName\":\"x\",\"a\":{}1{}}}", "[".repeat(200), "]".repeat(200));
    let one_mib = format!(r#"{{"tenantId":"big","toolName":"x","blob":"{}"}}"#, "a".repeat(1 << 20));
    let cases: Vec<(&str, Vec<u8>, bool)> = vec![
        ("empty", Vec::new(), false),
        ("whitespace", b"  \n".to_vec(), false),
        ("not json", b"{\"tenantId\":".to_vec(), false),
        ("invalid utf-8", vec![0xff, 0xfe, b'{', b'}'], false),
        ("utf-8 in a string cut", b"{\"tenantId\":\"\xc3\"}".to_vec(), false),
        ("bom", [&[0xef, 0xbb, 0xbf][..], b"{}"].concat(), false),
        ("duplicate tenant", br#"{"tenantId":"a","tenantId":"b","toolName":"x"}"#.to_vec(), false),
        ("number out of range elsewhere", br#"{"tenantId":"a","toolName":"x","d":1e400}"#.to_vec(), false),
        ("lone surrogate elsewhere", br#"{"tenantId":"a","toolName":"x","d":"\ud800"}"#.to_vec(), false),
        ("tenant with a slash", br#"{"tenantId":"a/tool=evil","toolName":"x"}"#.to_vec(), false),
        ("tenant ..", br#"{"tenantId":"..","toolName":"x"}"#.to_vec(), false),
        ("tenant with a NUL", br#"{"tenantId":"a\u0000b","toolName":"x"}"#.to_vec(), false),
        ("tenant an object", br#"{"tenantId":{"a":1},"toolName":"x"}"#.to_vec(), false),
        ("tenant a number", br#"{"tenantId":42,"toolName":"x"}"#.to_vec(), false),
        ("deep nesting", deep.into_bytes(), false),
        ("json null", b"null".to_vec(), false),
        ("an array", b"[1,2]".to_vec(), false),
        ("1 MiB record", one_mib.into_bytes(), true),
        ("escaped tenant", br#"{"tenantId":"caf\u00e9","toolName":"x"}"#.to_vec(), true),
    ];
    for (name, transformer, query, delimiter) in configs() {
        let mut p = paths(transformer, query, delimiter);
        for (case, data, answered) in &cases {
            let got = p.agree(data).unwrap_or_else(|e| panic!("{name}, {case}: {e}"));
            if name == "raw" {
                assert_eq!(got, *answered, "{name}, {case}");
            }
        }
    }
}

#[test]
fn configurations_without_a_fast_path() {
    let s = settings(Some("{tenantId: .tenant_id, toolName: .tool_name}"), false);
    assert!(FastPath::new(&Transformer::InProcess(std::sync::Arc::new(crate::McpNormalize)), &s).is_none());
    for query in [
        "{tenantId: .meta.tenant, toolName: .tool_name}",
        "{tenantId: (.tenant_id | ascii_downcase), toolName: .tool_name}",
        "{tenantId: .tenant_id}",
        "{tenantId: .tenant_id, toolName: .tool_name, x: .y}",
    ] {
        let s = settings(Some(query), false);
        assert!(FastPath::new(&Transformer::None, &s).is_none(), "{query}");
    }
    let s = settings(Some("{tenantId: .tenantId, toolName: .nosuchfield}"), false);
    assert!(FastPath::new(&Transformer::McpNormalize, &s).is_none(), "a field the normalised line lacks");
}

#[test]
fn query_paths() {
    assert_eq!(field_paths("{ a: .x , b_2: ._y }"), Some(vec![("a".into(), "x".into()), ("b_2".into(), "_y".into())]));
    for q in ["{}", "{a: .x, a: .y}", "{a: .x.y}", "{a: x}", "{\"a\": .x}", "{a: .x} | .a", ".x", "{a: .[0]}"] {
        assert_eq!(field_paths(q), None, "{q}");
    }
}
