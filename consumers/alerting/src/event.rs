//! Reading an MCP tool-call event out of a record, with the reason when it cannot be.

use jaq_json::Val;
use weir_core::Timestamp;

/// Why a record is not a usable event (metric label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Malformed {
    /// Not JSON (or not UTF-8).
    NotJson,
    /// Arrays and objects nested deeper than jq 1.6's parser allows.
    TooDeep,
    /// JSON, but not an object.
    NotObject,
}

impl Malformed {
    /// Metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Malformed::NotJson => "not_json",
            Malformed::TooDeep => "too_deep",
            Malformed::NotObject => "not_object",
        }
    }
}

/// The fields the engine reads.
#[derive(Debug)]
pub struct Fields {
    /// The parsed record.
    pub value: Val,
    /// Event time, or the arrival time when the field is missing or unreadable.
    pub time: Timestamp,
    /// The time field was present but neither epoch milliseconds nor RFC 3339.
    pub bad_time: bool,
    /// `success`.
    pub success: Option<bool>,
    /// `errorCode`.
    pub error_code: Option<String>,
    /// `durationMs`.
    pub duration_ms: Option<f64>,
}

impl Fields {
    /// The event the engine ingests, from these fields; `id` names the record
    /// (`shard/sequence`) in alert samples.
    pub fn event<'a>(&'a self, id: &'a str) -> crate::engine::Event<'a> {
        crate::engine::Event {
            value: &self.value,
            time: self.time,
            success: self.success,
            error_code: self.error_code.as_deref(),
            duration_ms: self.duration_ms,
            id,
        }
    }
}

fn field<'a>(v: &'a Val, name: &str) -> Option<&'a Val> {
    match v {
        Val::Obj(map) => map
            .iter()
            .rev()
            .find(|(k, _)| matches!(k, Val::TStr(b) | Val::BStr(b) if b.as_ref() == name.as_bytes()))
            .map(|(_, v)| v),
        _ => None,
    }
}

fn number(v: &Val) -> Option<f64> {
    match v {
        Val::Num(n) => n.to_string().parse().ok(),
        _ => None,
    }
}

fn text(v: &Val) -> Option<String> {
    match v {
        Val::TStr(b) | Val::BStr(b) => Some(String::from_utf8_lossy(b).into_owned()),
        _ => None,
    }
}

/// Reads an event; `time_field` names the event-time field.
pub fn read(data: &[u8], arrival: Timestamp, time_field: &str) -> Result<Fields, Malformed> {
    let value = weir_core::jq::parse(data).map_err(|e| match e {
        weir_core::jq::JsonError::NotJson => Malformed::NotJson,
        weir_core::jq::JsonError::TooDeep => Malformed::TooDeep,
    })?;
    if !matches!(value, Val::Obj(_)) {
        return Err(Malformed::NotObject);
    }
    let (time, bad_time) = match field(&value, time_field) {
        None | Some(Val::Null) => (arrival, false),
        Some(v) => {
            let parsed = match v {
                Val::Num(_) => number(v).map(|ms| Timestamp::from_millis(ms as i64)),
                _ => text(v)
                    .and_then(|s| chrono::DateTime::parse_from_rfc3339(&s).ok())
                    .map(|t| Timestamp::from_millis(t.timestamp_millis())),
            };
            match parsed {
                Some(t) => (t, false),
                None => (arrival, true),
            }
        }
    };
    let success = match field(&value, "success") {
        Some(Val::Bool(b)) => Some(*b),
        _ => None,
    };
    let error_code = field(&value, "errorCode").and_then(text);
    let duration_ms = field(&value, "durationMs").and_then(number);
    Ok(Fields { value, time, bad_time, success, error_code, duration_ms })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_and_fallbacks() {
        let arrival = Timestamp::from_millis(5_000);
        let f = read(br#"{"ts":1000,"success":false,"errorCode":"E","durationMs":12.5}"#, arrival, "ts").unwrap();
        assert_eq!(
            (f.time, f.success, f.error_code.as_deref(), f.duration_ms),
            (Timestamp::from_millis(1000), Some(false), Some("E"), Some(12.5))
        );
        let f = read(br#"{"ts":"1970-01-01T00:00:02Z"}"#, arrival, "ts").unwrap();
        assert_eq!(f.time, Timestamp::from_millis(2000));
        let f = read(br#"{"ts":"yesterday"}"#, arrival, "ts").unwrap();
        assert!(f.bad_time);
        assert_eq!(f.time, arrival);
        assert_eq!(read(br#"{}"#, arrival, "ts").unwrap().time, arrival);
        assert_eq!(read(b"nope", arrival, "ts").unwrap_err(), Malformed::NotJson);
        let deep = format!("{{\"a\":{}1{}}}", "[".repeat(1 << 20), "]".repeat(1 << 20));
        assert_eq!(read(deep.as_bytes(), arrival, "ts").unwrap_err(), Malformed::TooDeep);
        assert_eq!(read(b"[1]", arrival, "ts").unwrap_err(), Malformed::NotObject);
    }
}
