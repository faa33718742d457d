//! Firehose `Prefix` and `ErrorOutputPrefix` expressions.
//!
//! Grammar: literal text and `!{namespace:value}` expressions, with namespaces
//! `timestamp` (a Java `DateTimeFormatter` pattern), `firehose` (`random-string`,
//! `error-output-type`), `partitionKeyFromQuery` and `partitionKeyFromLambda`.
//!
//! Rules, as Firehose documents them (s3-prefixes "Semantic rules"):
//! - `!{` may only start an expression;
//! - a `Prefix` without a `timestamp` expression gets `!{timestamp:yyyy/MM/dd/HH/}`
//!   appended (appended as is: `myPrefix` becomes `myPrefix2018/08/27/10/`);
//! - `ErrorOutputPrefix` may be absent only if `Prefix` has no expressions; it then
//!   evaluates to `<Prefix><error-output-type>/yyyy/MM/dd/HH/` (Firehose's text shows
//!   no slash after the error type but its own example has one; weir writes one);
//! - an `ErrorOutputPrefix` with expressions must contain `!{firehose:error-output-type}`,
//!   which `Prefix` must not contain;
//! - neither may exceed 512 characters once evaluated;
//! - every `timestamp` in one prefix evaluates to the same instant (the approximate
//!   arrival of the oldest record in the object); each `random-string` is new (11
//!   characters).
//!
//! weir adds: with dynamic partitioning the `Prefix` must use a partition key, without
//! it must not; partition keys cannot appear in the error prefix; a partition value
//! that could escape its place in the key (`/`, `..`, control characters, too long) is
//! refused when the prefix is evaluated, so the record goes to the error output.

use std::collections::BTreeMap;

use chrono_tz::Tz;
use rand::Rng;
use weir_core::Timestamp;

use crate::java_time::{JavaPattern, PatternError, local_time};

/// Longest evaluated prefix Firehose accepts.
pub const MAX_PREFIX_CHARS: usize = 512;
/// Longest partition value weir accepts.
pub const MAX_PARTITION_VALUE_CHARS: usize = 256;
/// The default time prefix appended to a `Prefix` without a timestamp expression.
pub const DEFAULT_TIME_PATTERN: &str = "yyyy/MM/dd/HH/";

/// Which field a prefix comes from (errors name it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Field {
    /// `Prefix`.
    Prefix,
    /// `ErrorOutputPrefix`.
    ErrorOutputPrefix,
}

impl std::fmt::Display for Field {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Field::Prefix => "Prefix",
            Field::ErrorOutputPrefix => "ErrorOutputPrefix",
        })
    }
}

/// A prefix that is invalid, or that cannot be evaluated for a record.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PrefixError {
    /// Invalid configuration.
    #[error("{field}: {reason} (at character {position})")]
    Invalid {
        /// The field.
        field: Field,
        /// What is wrong.
        reason: String,
        /// Where.
        position: usize,
    },
    /// A rule across both fields.
    #[error("{0}")]
    Rule(String),
    /// The record has no value for a partition key the prefix uses.
    #[error("partition key {0:?} has no value")]
    MissingKey(String),
    /// A partition value that could escape its place in the object key.
    #[error("partition key {key:?} has an invalid value: {reason}")]
    InvalidValue {
        /// The key.
        key: String,
        /// Why.
        reason: &'static str,
    },
    /// Longer than 512 characters once evaluated.
    #[error("{field} evaluates to {chars} characters, more than {MAX_PREFIX_CHARS}")]
    TooLong {
        /// The field.
        field: Field,
        /// Its length.
        chars: usize,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Segment {
    Literal(String),
    Timestamp(JavaPattern),
    RandomString,
    ErrorOutputType,
    KeyFromQuery(String),
    KeyFromLambda(String),
}

/// A parsed prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    field: Field,
    segments: Vec<Segment>,
}

impl Template {
    /// Parses `text` as the value of `field`.
    pub fn parse(text: &str, field: Field) -> Result<Self, PrefixError> {
        let invalid = |reason: String, position: usize| PrefixError::Invalid { field, reason, position };
        let chars: Vec<char> = text.chars().collect();
        let mut segments = Vec::new();
        let mut literal = String::new();
        let mut i = 0;
        while i < chars.len() {
            if chars[i] == '!' && chars.get(i + 1) == Some(&'{') {
                let start = i;
                // The value ends at the first '}' outside single quotes.
                let mut j = i + 2;
                let mut quoted = false;
                while j < chars.len() && (quoted || chars[j] != '}') {
                    if chars[j] == '\'' {
                        quoted = !quoted;
                    }
                    j += 1;
                }
                if j >= chars.len() {
                    return Err(invalid("'!{' without a closing '}'".into(), start));
                }
                let body: String = chars[i + 2..j].iter().collect();
                let Some((namespace, value)) = body.split_once(':') else {
                    return Err(invalid(format!("expression !{{{body}}} has no namespace"), start));
                };
                if !literal.is_empty() {
                    segments.push(Segment::Literal(std::mem::take(&mut literal)));
                }
                segments.push(match (namespace, value) {
                    ("timestamp", pattern) => Segment::Timestamp(
                        JavaPattern::compile(pattern)
                            .map_err(|e: PatternError| invalid(format!("timestamp pattern {pattern:?}: {e}"), start))?,
                    ),
                    ("firehose", "random-string") => Segment::RandomString,
                    ("firehose", "error-output-type") => Segment::ErrorOutputType,
                    ("firehose", other) => {
                        return Err(invalid(
                            format!("unknown firehose value {other:?} (random-string, error-output-type)"),
                            start,
                        ));
                    }
                    ("partitionKeyFromQuery", key) | ("partitionKeyFromLambda", key) if key.is_empty() => {
                        return Err(invalid(format!("{namespace} needs a key name"), start));
                    }
                    ("partitionKeyFromQuery", key) => Segment::KeyFromQuery(key.to_owned()),
                    ("partitionKeyFromLambda", key) => Segment::KeyFromLambda(key.to_owned()),
                    (other, _) => {
                        return Err(invalid(
                            format!("unknown namespace {other:?} (timestamp, firehose, partitionKeyFromQuery, partitionKeyFromLambda)"),
                            start,
                        ));
                    }
                });
                i = j + 1;
                continue;
            }
            literal.push(chars[i]);
            i += 1;
        }
        if !literal.is_empty() {
            segments.push(Segment::Literal(literal));
        }
        Ok(Self { field, segments })
    }

    fn has(&self, f: impl Fn(&Segment) -> bool) -> bool {
        self.segments.iter().any(f)
    }

    /// Whether the prefix has any `!{…}` expression.
    pub fn has_expressions(&self) -> bool {
        self.has(|s| !matches!(s, Segment::Literal(_)))
    }

    /// Partition keys used, from the query and from a Lambda.
    pub fn partition_keys(&self) -> Vec<&str> {
        self.segments
            .iter()
            .filter_map(|s| match s {
                Segment::KeyFromQuery(k) | Segment::KeyFromLambda(k) => Some(k.as_str()),
                _ => None,
            })
            .collect()
    }
}

/// What a prefix is evaluated with.
#[derive(Debug, Clone)]
pub struct Evaluation<'a> {
    /// Approximate arrival of the oldest record in the object.
    pub oldest_arrival: Timestamp,
    /// `CustomTimeZone` (UTC by default).
    pub time_zone: Tz,
    /// The object's partition values (from the query or a Lambda).
    pub partition_keys: &'a BTreeMap<String, String>,
    /// For the error prefix: `processing-failed`, `partitioning-failed`, ….
    pub error_output_type: &'a str,
}

/// Checks a partition value: it must stay inside its place in the object key.
pub fn check_partition_value(value: &str) -> Result<(), &'static str> {
    // One pass for the common case (this runs for every key of every record): printable
    // ASCII without a character any rule below looks at is fine at any length up to
    // the limit, and is not "." or "..". Anything else gets the full checks.
    let bytes = value.as_bytes();
    if (1..=MAX_PARTITION_VALUE_CHARS).contains(&bytes.len())
        && bytes != b"."
        && bytes != b".."
        && bytes.iter().all(|&c| (0x20..0x7f).contains(&c) && !matches!(c, b'/' | b'\\' | b'%' | b'!'))
    {
        return Ok(());
    }
    full_partition_value_checks(value)
}

/// Every rule of [`check_partition_value`], one by one (the reference for its fast path).
fn full_partition_value_checks(value: &str) -> Result<(), &'static str> {
    if value.is_empty() {
        return Err("empty");
    }
    if value.chars().count() > MAX_PARTITION_VALUE_CHARS {
        return Err("longer than 256 characters");
    }
    if value.contains('/') || value.contains('\\') {
        return Err("contains a path separator");
    }
    if value == "." || value == ".." {
        return Err("is a relative path segment");
    }
    if value.chars().any(char::is_control) {
        return Err("contains a control character");
    }
    if value.contains("!{") {
        return Err("contains an expression opener");
    }
    if value.contains('%') {
        // Hive-style readers URL-decode partition values: DuckDB reads `a%2Fb` as `a/b`.
        return Err("contains '%' (readers decode %XX in partition values)");
    }
    Ok(())
}

/// An 11-character random string, like Firehose's (`046b6c7f-0b`).
fn random_string() -> String {
    let v: u64 = rand::rng().random();
    let hex = format!("{v:016x}");
    format!("{}-{}", &hex[..8], &hex[8..10])
}

impl Template {
    /// Evaluates the prefix for one object.
    pub fn evaluate(&self, e: &Evaluation<'_>) -> Result<String, PrefixError> {
        let local = local_time(e.oldest_arrival, e.time_zone);
        self.evaluate_by(e, &local, |k| e.partition_keys.get(k).map(String::as_str))
    }

    /// [`Template::evaluate`] with the partition values from `value` (the
    /// `partition_keys` of `e` are not used), so they need not be built as a map, and
    /// the oldest arrival already in its zone (`local`).
    pub(crate) fn evaluate_by<'v>(
        &self,
        e: &Evaluation<'_>,
        local: &chrono::DateTime<Tz>,
        value: impl Fn(&str) -> Option<&'v str>,
    ) -> Result<String, PrefixError> {
        // Room for the object name the caller appends.
        let mut out = String::with_capacity(256);
        self.evaluate_into(e, local, value, &mut out)?;
        Ok(out)
    }

    /// [`Template::evaluate`] with the partition values from `value` (the
    /// `partition_keys` of `e` are not used) and the oldest arrival already in its zone
    /// (`local`), appended to `out` (on an error `out` holds part of it).
    pub fn evaluate_into<'v>(
        &self,
        e: &Evaluation<'_>,
        local: &chrono::DateTime<Tz>,
        value: impl Fn(&str) -> Option<&'v str>,
        out: &mut String,
    ) -> Result<(), PrefixError> {
        let start = out.len();
        for s in &self.segments {
            match s {
                Segment::Literal(text) => out.push_str(text),
                Segment::Timestamp(p) => p.format_local(out, local),
                Segment::RandomString => out.push_str(&random_string()),
                Segment::ErrorOutputType => out.push_str(e.error_output_type),
                Segment::KeyFromQuery(k) | Segment::KeyFromLambda(k) => {
                    let value = value(k).ok_or_else(|| PrefixError::MissingKey(k.clone()))?;
                    check_partition_value(value)
                        .map_err(|reason| PrefixError::InvalidValue { key: k.clone(), reason })?;
                    out.push_str(value);
                }
            }
        }
        let chars = out[start..].chars().count();
        if chars > MAX_PREFIX_CHARS {
            return Err(PrefixError::TooLong { field: self.field, chars });
        }
        Ok(())
    }
}

/// A delivery stream's pair of prefixes, validated together.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prefixes {
    /// For delivered records.
    pub data: Template,
    /// For failed records.
    pub error: Template,
}

impl Prefixes {
    /// Applies Firehose's rules and defaults to the configured fields.
    pub fn new(
        prefix: Option<&str>,
        error_output_prefix: Option<&str>,
        dynamic_partitioning: bool,
    ) -> Result<Self, PrefixError> {
        let given = prefix.unwrap_or("");
        let mut data = Template::parse(given, Field::Prefix)?;
        if data.has(|s| matches!(s, Segment::ErrorOutputType)) {
            return Err(PrefixError::Rule("Prefix can't contain !{firehose:error-output-type}".into()));
        }
        let uses_keys = !data.partition_keys().is_empty();
        if dynamic_partitioning && !uses_keys {
            return Err(PrefixError::Rule(
                "with dynamic partitioning enabled, Prefix must use !{partitionKeyFromQuery:…} or !{partitionKeyFromLambda:…}".into(),
            ));
        }
        if !dynamic_partitioning && uses_keys {
            return Err(PrefixError::Rule("Prefix uses partition keys but dynamic partitioning is not enabled".into()));
        }
        let error = match error_output_prefix {
            Some(text) => {
                let error = Template::parse(text, Field::ErrorOutputPrefix)?;
                if error.has_expressions() && !error.has(|s| matches!(s, Segment::ErrorOutputType)) {
                    return Err(PrefixError::Rule(
                        "ErrorOutputPrefix with expressions must contain !{firehose:error-output-type}".into(),
                    ));
                }
                if !error.partition_keys().is_empty() {
                    return Err(PrefixError::Rule("ErrorOutputPrefix can't use partition keys".into()));
                }
                error
            }
            None if data.has_expressions() => {
                return Err(PrefixError::Rule(
                    "ErrorOutputPrefix can't be null when Prefix contains expressions".into(),
                ));
            }
            None => Template::parse(
                &format!("{given}!{{firehose:error-output-type}}/!{{timestamp:{DEFAULT_TIME_PATTERN}}}"),
                Field::ErrorOutputPrefix,
            )?,
        };
        if !data.has(|s| matches!(s, Segment::Timestamp(_))) {
            let pattern = JavaPattern::compile(DEFAULT_TIME_PATTERN).map_err(|e| PrefixError::Rule(e.to_string()))?;
            data.segments.push(Segment::Timestamp(pattern));
        }
        data.check_keys()?;
        error.check_keys()?;
        Ok(Self { data, error })
    }
}

impl Template {
    /// Refuses a prefix whose object keys could never be valid (a `.` or `..` segment,
    /// a leading `/`, an empty segment, a control character or backslash): evaluated
    /// with one-letter partition values and followed by an object name, it must make a
    /// valid key. Otherwise every object would be refused by the store and retried for
    /// ever; the mistake is reported at start instead, naming the field.
    fn check_keys(&self) -> Result<(), PrefixError> {
        let keys: BTreeMap<String, String> =
            self.partition_keys().into_iter().map(|k| (k.to_owned(), "v".to_owned())).collect();
        let sample = Evaluation {
            oldest_arrival: Timestamp::from_millis(1_535_365_800_000),
            time_zone: chrono_tz::UTC,
            partition_keys: &keys,
            error_output_type: "processing-failed",
        };
        let key = format!("{}object.gz", self.evaluate(&sample)?);
        weir_core::ports::validate_key(&key)
            .map_err(|e| PrefixError::Rule(format!("{}: no object key it makes can be written ({e})", self.field)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 10:30 AM UTC on Aug 27, 2018: the instant of Firehose's worked examples.
    const T: Timestamp = Timestamp::from_millis(1_535_365_800_000);

    fn eval(t: &Template, keys: &BTreeMap<String, String>, tz: Tz) -> Result<String, PrefixError> {
        t.evaluate(&Evaluation {
            oldest_arrival: T,
            time_zone: tz,
            partition_keys: keys,
            error_output_type: "processing-failed",
        })
    }

    fn both(prefix: Option<&str>, error: Option<&str>) -> (String, String) {
        let p = Prefixes::new(prefix, error, false).unwrap();
        let none = BTreeMap::new();
        (eval(&p.data, &none, Tz::UTC).unwrap(), eval(&p.error, &none, Tz::UTC).unwrap())
    }

    #[test]
    fn documented_examples() {
        assert_eq!(
            both(None, Some("myFirehoseFailures/!{firehose:error-output-type}/")),
            ("2018/08/27/10/".into(), "myFirehoseFailures/processing-failed/".into())
        );
        assert_eq!(
            Prefixes::new(Some("!{timestamp:yyyy/MM/dd}"), None, false),
            Err(PrefixError::Rule("ErrorOutputPrefix can't be null when Prefix contains expressions".into()))
        );
        let (data, error) = both(
            Some("myFirehose/DeliveredYear=!{timestamp:yyyy}/anyMonth/rand=!{firehose:random-string}"),
            Some("myFirehoseFailures/!{firehose:error-output-type}/!{timestamp:yyyy}/anyMonth/!{timestamp:dd}"),
        );
        let rand = data.strip_prefix("myFirehose/DeliveredYear=2018/anyMonth/rand=").unwrap();
        assert_eq!(rand.chars().count(), 11);
        assert_eq!(error, "myFirehoseFailures/processing-failed/2018/anyMonth/27");
        assert_eq!(
            both(
                Some("myPrefix/year=!{timestamp:yyyy}/month=!{timestamp:MM}/day=!{timestamp:dd}/hour=!{timestamp:HH}/"),
                Some(
                    "myErrorPrefix/!{timestamp:'year='yyyy'/month='MM'/day='dd'/hour='HH}/!{firehose:error-output-type}"
                ),
            ),
            (
                "myPrefix/year=2018/month=08/day=27/hour=10/".into(),
                "myErrorPrefix/year=2018/month=08/day=27/hour=10/processing-failed".into()
            )
        );
        assert_eq!(
            both(Some("myFirehosePrefix/"), None),
            ("myFirehosePrefix/2018/08/27/10/".into(), "myFirehosePrefix/processing-failed/2018/08/27/10/".into())
        );
        // Appended as is: no slash is invented.
        assert_eq!(both(Some("myFirehosePrefix"), None).0, "myFirehosePrefix2018/08/27/10/");
        let p = Template::parse(
            "myPrefix/result=!{firehose:error-output-type}/!{timestamp:yyyy/MM/dd}",
            Field::ErrorOutputPrefix,
        )
        .unwrap();
        assert_eq!(eval(&p, &BTreeMap::new(), Tz::UTC).unwrap(), "myPrefix/result=processing-failed/2018/08/27");
    }

    #[test]
    fn the_design_notes_delivery_stream() {
        let p = Prefixes::new(
            Some("tool-events/tenant=!{partitionKeyFromQuery:tenantId}/tool=!{partitionKeyFromQuery:toolName}/year=!{timestamp:yyyy}/month=!{timestamp:MM}/day=!{timestamp:dd}/hour=!{timestamp:HH}/"),
            Some("tool-events-errors/!{firehose:error-output-type}/year=!{timestamp:yyyy}/month=!{timestamp:MM}/day=!{timestamp:dd}/"),
            true,
        )
        .unwrap();
        let keys: BTreeMap<String, String> =
            [("tenantId".into(), "t-007".into()), ("toolName".into(), "search_docs".into())].into();
        assert_eq!(
            eval(&p.data, &keys, Tz::UTC).unwrap(),
            "tool-events/tenant=t-007/tool=search_docs/year=2018/month=08/day=27/hour=10/"
        );
        assert_eq!(
            eval(&p.data, &keys, Tz::Asia__Tokyo).unwrap(),
            "tool-events/tenant=t-007/tool=search_docs/year=2018/month=08/day=27/hour=19/"
        );
        let e = p.error.evaluate(&Evaluation {
            oldest_arrival: T,
            time_zone: Tz::UTC,
            partition_keys: &keys,
            error_output_type: "partitioning-failed",
        });
        assert_eq!(e.unwrap(), "tool-events-errors/partitioning-failed/year=2018/month=08/day=27/");
        assert_eq!(p.data.partition_keys(), vec!["tenantId", "toolName"]);
    }

    #[test]
    fn partition_values_cannot_escape() {
        let t = Template::parse("tenant=!{partitionKeyFromQuery:tenantId}/x/", Field::Prefix).unwrap();
        for (value, reason) in [
            ("a/tool=evil", "contains a path separator"),
            ("../../x", "contains a path separator"),
            ("..", "is a relative path segment"),
            ("a\nb", "contains a control character"),
            ("", "empty"),
            ("!{timestamp:yyyy}", "contains an expression opener"),
        ] {
            let keys: BTreeMap<String, String> = [("tenantId".into(), value.into())].into();
            assert_eq!(
                eval(&t, &keys, Tz::UTC),
                Err(PrefixError::InvalidValue { key: "tenantId".into(), reason }),
                "{value:?}"
            );
        }
        let long: BTreeMap<String, String> = [("tenantId".into(), "x".repeat(257))].into();
        assert!(eval(&t, &long, Tz::UTC).is_err());
        assert_eq!(eval(&t, &BTreeMap::new(), Tz::UTC), Err(PrefixError::MissingKey("tenantId".into())));
        let fine: BTreeMap<String, String> = [("tenantId".into(), "t-1 ünïcode".into())].into();
        assert_eq!(eval(&t, &fine, Tz::UTC).unwrap(), "tenant=t-1 ünïcode/x/");
    }

    #[test]
    fn validation_errors() {
        let rule = |p: Option<&str>, e: Option<&str>, dp: bool| Prefixes::new(p, e, dp).unwrap_err().to_string();
        assert!(
            rule(Some("a/!{firehose:error-output-type}/"), Some("e/!{firehose:error-output-type}/"), false)
                .contains("Prefix can't contain")
        );
        assert!(
            rule(Some("a/!{timestamp:yyyy}/"), Some("e/!{timestamp:yyyy}/"), false)
                .contains("must contain !{firehose:error-output-type}")
        );
        assert!(rule(Some("a/"), Some("e/!{firehose:error-output-type}/"), true).contains("dynamic partitioning"));
        assert!(
            rule(Some("a/!{partitionKeyFromQuery:k}/"), Some("e/!{firehose:error-output-type}"), false)
                .contains("not enabled")
        );
        assert!(
            rule(
                Some("a/!{partitionKeyFromQuery:k}/"),
                Some("e/!{firehose:error-output-type}/!{partitionKeyFromQuery:k}"),
                true
            )
            .contains("can't use partition keys")
        );
        let invalid = |text: &str| Template::parse(text, Field::Prefix).unwrap_err().to_string();
        assert!(invalid("a/!{timestamp:yyyy").contains("without a closing"), "{}", invalid("a/!{timestamp:yyyy"));
        assert!(invalid("a/!{nope:x}/").contains("unknown namespace"));
        assert!(invalid("a/!{firehose:uuid}/").contains("unknown firehose value"));
        assert!(invalid("a/!{timestamp:yyyy-ww}/").contains("pattern letter 'w'"));
        assert!(invalid("a/!{partitionKeyFromQuery:}/").contains("needs a key name"));
        assert!(invalid("a/!{justtext}/").contains("no namespace"));
        // 512 characters after evaluation: a prefix that is always longer fails at start.
        let long = Prefixes::new(Some(&format!("{}/", "p".repeat(498))), None, false).unwrap_err();
        assert_eq!(long, PrefixError::TooLong { field: Field::Prefix, chars: 513 });
        let keyed =
            Template::parse(&format!("{}/!{{partitionKeyFromQuery:k}}/", "p".repeat(500)), Field::Prefix).unwrap();
        let err = eval(&keyed, &[("k".to_owned(), "x".repeat(12))].into(), Tz::UTC).unwrap_err();
        assert_eq!(err, PrefixError::TooLong { field: Field::Prefix, chars: 514 });
        let ok = Prefixes::new(Some(&format!("{}/", "p".repeat(497))), Some("e/"), false).unwrap();
        assert_eq!(eval(&ok.data, &BTreeMap::new(), Tz::UTC).unwrap().chars().count(), 512);
    }

    #[test]
    fn random_strings_are_new_at_each_use_and_timestamps_agree() {
        let t = Template::parse(
            "!{firehose:random-string}/!{firehose:random-string}/!{timestamp:HH}-!{timestamp:HH}",
            Field::Prefix,
        )
        .unwrap();
        let v = eval(&t, &BTreeMap::new(), Tz::UTC).unwrap();
        let parts: Vec<&str> = v.split('/').collect();
        assert_ne!(parts[0], parts[1]);
        assert_eq!(parts[2], "10-10");
    }

    proptest::proptest! {
        #[test]
        fn parsing_never_panics(text in ".{0,80}") {
            let _ = Template::parse(&text, Field::Prefix);
            let _ = Prefixes::new(Some(&text), Some(&text), false);
        }

        /// The one-pass check agrees with the rules one by one, message included.
        #[test]
        fn fast_value_check_is_the_full_check(value in "([a-z./%!{}\\\\ \u{1}\u{7f}é]|\\.\\.){0,6}|[a-z]{250,260}") {
            proptest::prop_assert_eq!(check_partition_value(&value), full_partition_value_checks(&value));
        }

        #[test]
        fn valid_values_never_add_segments(value in "[^/\\\\\\p{Cc}]{1,40}") {
            proptest::prop_assume!(value != "." && value != ".." && !value.contains("!{") && !value.contains('%'));
            let t = Template::parse("a/k=!{partitionKeyFromQuery:k}/b/", Field::Prefix).unwrap();
            let keys: BTreeMap<String, String> = [("k".into(), value.clone())].into();
            let out = eval(&t, &keys, Tz::UTC).unwrap();
            proptest::prop_assert_eq!(out.split('/').count(), 4);
        }
    }
}
