//! The KCL MultiLang protocol's messages, as the Java MultiLangDaemon writes and reads
//! them (module `amazon-kinesis-client-multilang`, package `messages`) and as
//! `amazon_kclpy` (`kcl.py`, `messages.py`) and `aws-kcl` speak them: one JSON object
//! per line, `action` naming the message.
//!
//! To the child: `initialize`, `processRecords`, `leaseLost`, `shardEnded`,
//! `shutdownRequested`, and `checkpoint` answers. From the child: `checkpoint` requests
//! and `status` replies (`responseFor` the action just handled). Every nested object
//! carries an `action` too (`amazon_kclpy` decodes with an object hook), so records are
//! `{"action":"record", ...}`.

use base64::Engine as _;
use serde::{Deserialize, Serialize};
use weir_core::{Checkpoint, Record};

/// A record as the daemon sends it (`JsonFriendlyRecord`).
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct JsonRecord {
    /// Always `"record"`.
    pub action: &'static str,
    /// The payload, base64 (as Jackson writes `byte[]`).
    pub data: String,
    /// The producer's partition key.
    pub partition_key: String,
    /// The Kinesis sequence number.
    pub sequence_number: String,
    /// The KPL sub-sequence number (0 for plain records).
    pub sub_sequence_number: u64,
    /// Arrival time, epoch milliseconds.
    pub approximate_arrival_timestamp: i64,
}

impl JsonRecord {
    /// The wire form of `record`.
    pub fn of(record: &Record) -> Self {
        Self {
            action: "record",
            data: base64::engine::general_purpose::STANDARD.encode(&record.data),
            partition_key: record.partition_key.clone(),
            sequence_number: record.position.sequence.to_string(),
            sub_sequence_number: record.position.sub_sequence,
            approximate_arrival_timestamp: record.approximate_arrival.as_millis(),
        }
    }
}

/// A message to the child.
#[derive(Debug, Serialize)]
#[serde(tag = "action", rename_all = "camelCase")]
pub enum ToChild {
    /// The shard's processor starts, after `sequenceNumber` (null: nothing checkpointed).
    #[serde(rename_all = "camelCase")]
    Initialize { shard_id: String, sequence_number: Option<String>, sub_sequence_number: Option<u64> },
    /// A batch of the shard's records.
    #[serde(rename_all = "camelCase")]
    ProcessRecords { records: Vec<JsonRecord>, millis_behind_latest: Option<u64> },
    /// Another worker has the lease; checkpoints are refused from here on.
    LeaseLost {},
    /// The shard ended: checkpoint (with no sequence number) to finish it.
    ShardEnded {},
    /// The worker stops or hands the shard over: checkpoint what is done.
    ShutdownRequested {},
    /// The answer to a checkpoint request: `error` names the exception as KCL does
    /// (`IllegalArgumentException`, `ShutdownException`, `InvalidStateException`).
    #[serde(rename_all = "camelCase")]
    Checkpoint { sequence_number: Option<String>, sub_sequence_number: Option<u64>, error: Option<String> },
}

impl ToChild {
    /// The `action` name (what `status.responseFor` must say).
    pub fn action(&self) -> &'static str {
        match self {
            ToChild::Initialize { .. } => "initialize",
            ToChild::ProcessRecords { .. } => "processRecords",
            ToChild::LeaseLost {} => "leaseLost",
            ToChild::ShardEnded {} => "shardEnded",
            ToChild::ShutdownRequested {} => "shutdownRequested",
            ToChild::Checkpoint { .. } => "checkpoint",
        }
    }

    /// `initialize` for a shard at `checkpoint`.
    pub fn initialize(shard: &str, checkpoint: &Checkpoint) -> Self {
        let (sequence_number, sub_sequence_number) = match checkpoint {
            Checkpoint::At(p) => (Some(p.sequence.to_string()), Some(p.sub_sequence)),
            Checkpoint::TrimHorizon => (Some("TRIM_HORIZON".into()), Some(0)),
            Checkpoint::Latest => (Some("LATEST".into()), Some(0)),
            Checkpoint::AtTimestamp(_) => (Some("AT_TIMESTAMP".into()), Some(0)),
            Checkpoint::ShardEnd => (Some("SHARD_END".into()), Some(0)),
        };
        ToChild::Initialize { shard_id: shard.to_owned(), sequence_number, sub_sequence_number }
    }
}

/// A message from the child.
#[derive(Debug, Deserialize, PartialEq, Eq)]
#[serde(tag = "action", rename_all = "camelCase")]
pub enum FromChild {
    /// The child finished handling `responseFor`.
    #[serde(rename_all = "camelCase")]
    Status { response_for: Option<String> },
    /// Checkpoint at this position; no sequence number: at the last record delivered
    /// (or, in `shardEnded`, at the end of the shard).
    #[serde(rename_all = "camelCase")]
    Checkpoint {
        #[serde(default)]
        sequence_number: Option<String>,
        #[serde(default, deserialize_with = "lenient_u64")]
        sub_sequence_number: Option<u64>,
    },
}

/// `subSequenceNumber` as a number or a numeric string (processors send either).
fn lenient_u64<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    use serde::de::Error;
    match Option::<serde_json::Value>::deserialize(d)? {
        None | Some(serde_json::Value::Null) => Ok(None),
        Some(serde_json::Value::Number(n)) => n.as_u64().map(Some).ok_or_else(|| D::Error::custom("negative")),
        Some(serde_json::Value::String(s)) => s.parse().map(Some).map_err(D::Error::custom),
        Some(other) => Err(D::Error::custom(format!("not a number: {other}"))),
    }
}

/// What a line of the child's stdout is.
#[derive(Debug, PartialEq, Eq)]
pub enum Line {
    /// A protocol message.
    Message(FromChild),
    /// Blank, or not JSON: the child's own output (`amazon_kclpy` surrounds its lines
    /// with blank lines because libraries print to stdout too). Logged, skipped.
    Other,
    /// A JSON object that is not a message this side understands: a protocol error.
    Invalid(String),
}

/// Classifies one stdout line.
pub fn parse_line(line: &str) -> Line {
    let line = line.trim();
    if line.is_empty() || !line.starts_with('{') {
        return Line::Other;
    }
    match serde_json::from_str::<serde_json::Value>(line) {
        Err(_) => Line::Other,
        Ok(value) => match serde_json::from_value::<FromChild>(value) {
            Ok(m) => Line::Message(m),
            Err(e) => Line::Invalid(format!("{e}: {}", truncate(line, 200))),
        },
    }
}

/// At most `n` bytes of `s`, on a character boundary.
pub fn truncate(s: &str, n: usize) -> &str {
    let mut end = n.min(s.len());
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_have_the_daemons_shape() {
        let m = ToChild::Initialize { shard_id: "shardId-1".into(), sequence_number: None, sub_sequence_number: None };
        assert_eq!(
            serde_json::to_string(&m).unwrap(),
            r#"{"action":"initialize","shardId":"shardId-1","sequenceNumber":null,"subSequenceNumber":null}"#
        );
        let r = Record {
            partition_key: "k".into(),
            position: weir_core::ExtendedSequenceNumber::new(weir_core::SequenceNumber::from_u128(42), 3),
            approximate_arrival: weir_core::Timestamp::from_millis(1_700_000_000_000),
            data: bytes::Bytes::from_static(b"hi"),
        };
        let m = ToChild::ProcessRecords { records: vec![JsonRecord::of(&r)], millis_behind_latest: Some(5) };
        assert_eq!(
            serde_json::to_string(&m).unwrap(),
            r#"{"action":"processRecords","records":[{"action":"record","data":"aGk=","partitionKey":"k","sequenceNumber":"42","subSequenceNumber":3,"approximateArrivalTimestamp":1700000000000}],"millisBehindLatest":5}"#
        );
        assert_eq!(serde_json::to_string(&ToChild::ShardEnded {}).unwrap(), r#"{"action":"shardEnded"}"#);
        let m = ToChild::Checkpoint { sequence_number: None, sub_sequence_number: None, error: Some("X".into()) };
        assert_eq!(
            serde_json::to_string(&m).unwrap(),
            r#"{"action":"checkpoint","sequenceNumber":null,"subSequenceNumber":null,"error":"X"}"#
        );
    }

    #[test]
    fn child_lines_are_classified() {
        assert_eq!(
            parse_line(r#"{"action": "status", "responseFor": "initialize"}"#),
            Line::Message(FromChild::Status { response_for: Some("initialize".into()) })
        );
        assert_eq!(
            parse_line(r#"{"action": "checkpoint", "sequenceNumber": "7", "subSequenceNumber": "0"}"#),
            Line::Message(FromChild::Checkpoint { sequence_number: Some("7".into()), sub_sequence_number: Some(0) })
        );
        assert_eq!(
            parse_line(r#"{"action": "checkpoint", "sequenceNumber": null, "subSequenceNumber": null}"#),
            Line::Message(FromChild::Checkpoint { sequence_number: None, sub_sequence_number: None })
        );
        assert_eq!(parse_line(""), Line::Other);
        assert_eq!(parse_line("Was throttled while checkpointing"), Line::Other);
        assert_eq!(parse_line("{not json"), Line::Other);
        assert!(matches!(parse_line(r#"{"action": "dance"}"#), Line::Invalid(_)));
        assert!(matches!(parse_line(r#"{"hello": 1}"#), Line::Invalid(_)));
        assert_eq!(truncate("héllo", 2), "h");
    }
}
