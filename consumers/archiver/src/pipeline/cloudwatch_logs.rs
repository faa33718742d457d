//! CloudWatch Logs records (`Decompression` and `CloudWatchLogProcessing` processors):
//! a subscription filter writes each batch of log events to the stream as one
//! gzip-compressed JSON document,
//!
//! ```json
//! {"messageType":"DATA_MESSAGE","owner":"123456789012","logGroup":"/app",
//!  "logStream":"i-1","subscriptionFilters":["f"],
//!  "logEvents":[{"id":"…","timestamp":1764400000000,"message":"line one"}]}
//! ```
//!
//! or a `CONTROL_MESSAGE` when it checks that the destination is reachable. Unpacking
//! decompresses the record, drops control messages (they carry no log events), and
//! with `DataMessageExtraction` makes one part of each log event's `message`, the way
//! Firehose delivers them. A record that does not decompress goes to the
//! `decompression-failed` error output unchanged; with extraction on, a decompressed
//! record that is not a CloudWatch Logs message goes to `processing-failed`.

use bytes::Bytes;
use serde::Deserialize;
use weir_core::object_format::{ObjectFormat, decode};

/// The largest decompressed record unpacked (a CloudWatch Logs batch is at most about
/// 1 MiB of events; this leaves room and stops a record that inflates without end).
pub const MAX_DECOMPRESSED_BYTES: u64 = 64 << 20;

/// Why a record cannot be unpacked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UnpackError {
    /// Not gzip, corrupt, or larger than [`MAX_DECOMPRESSED_BYTES`] decompressed.
    #[error("record does not decompress as GZIP: {0}")]
    Decompression(String),
    /// Decompressed, but not a CloudWatch Logs message (extraction needs its events).
    #[error("decompressed record is not a CloudWatch Logs message: {0}")]
    NotLogsMessage(String),
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Message {
    message_type: String,
    #[serde(default)]
    log_events: Vec<LogEvent>,
}

#[derive(Deserialize)]
struct LogEvent {
    message: String,
}

/// The parts of one record: the decompressed document (none for a control message),
/// or with `extract` each log event's message.
pub fn unpack(data: &[u8], extract: bool) -> Result<Vec<Bytes>, UnpackError> {
    let plain =
        decode(ObjectFormat::Gzip, data, MAX_DECOMPRESSED_BYTES).map_err(|e| UnpackError::Decompression(e.reason))?;
    let parsed = serde_json::from_slice::<Message>(&plain);
    match parsed {
        Ok(m) if m.message_type == "CONTROL_MESSAGE" => Ok(Vec::new()),
        Ok(m) if extract => {
            if m.message_type != "DATA_MESSAGE" {
                return Err(UnpackError::NotLogsMessage(format!("messageType {:?}", m.message_type)));
            }
            Ok(m.log_events.into_iter().map(|e| Bytes::from(e.message)).collect())
        }
        Err(e) if extract => Err(UnpackError::NotLogsMessage(e.to_string())),
        _ => Ok(vec![Bytes::from(plain)]),
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use weir_core::object_format::encode;

    use super::*;

    fn gzip(text: &str) -> Vec<u8> {
        encode(ObjectFormat::Gzip, text.as_bytes()).unwrap()
    }

    const DATA: &str = r#"{"messageType":"DATA_MESSAGE","owner":"123456789012","logGroup":"/g","logStream":"s",
        "subscriptionFilters":["f"],"logEvents":[{"id":"1","timestamp":1,"message":"{\"tenantId\":\"t\"}"},
        {"id":"2","timestamp":2,"message":"plain line"}]}"#;
    const CONTROL: &str = r#"{"messageType":"CONTROL_MESSAGE","owner":"CloudwatchLogs","logGroup":"","logStream":"",
        "subscriptionFilters":[],"logEvents":[{"id":"","timestamp":1,"message":"CWL CONTROL MESSAGE: Checking health of destination Kinesis stream."}]}"#;

    #[test]
    fn extraction_gives_one_part_per_message() {
        let parts = unpack(&gzip(DATA), true).unwrap();
        assert_eq!(parts, vec![Bytes::from_static(br#"{"tenantId":"t"}"#), Bytes::from_static(b"plain line")]);
    }

    #[test]
    fn without_extraction_the_document_is_kept() {
        assert_eq!(unpack(&gzip(DATA), false).unwrap(), vec![Bytes::from(DATA)]);
        assert_eq!(unpack(&gzip("not json"), false).unwrap(), vec![Bytes::from_static(b"not json")]);
    }

    #[test]
    fn control_messages_are_dropped() {
        assert!(unpack(&gzip(CONTROL), true).unwrap().is_empty());
        assert!(unpack(&gzip(CONTROL), false).unwrap().is_empty());
    }

    #[test]
    fn corrupt_and_foreign_records_are_errors() {
        assert!(matches!(unpack(b"{\"not\":\"gzip\"}", true), Err(UnpackError::Decompression(_))));
        let mut cut = gzip(DATA);
        cut.truncate(cut.len() / 2);
        assert!(matches!(unpack(&cut, false), Err(UnpackError::Decompression(_))));
        assert!(matches!(unpack(&gzip("[1,2]"), true), Err(UnpackError::NotLogsMessage(_))));
    }

    #[test]
    fn a_bomb_is_refused() {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        let zeros = vec![0u8; 1 << 20];
        for _ in 0..65 {
            e.write_all(&zeros).unwrap();
        }
        let bomb = e.finish().unwrap();
        let err = unpack(&bomb, false).unwrap_err();
        assert!(err.to_string().contains("larger than"), "{err}");
    }
}
