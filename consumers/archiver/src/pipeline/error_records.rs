//! Error output records, in the shape Firehose writes under `ErrorOutputPrefix`: one
//! JSON object per failed record and line, with the original bytes in base64 so nothing
//! is lost and the line is valid JSON whatever the record held.

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use serde::Serialize;
use weir_core::Timestamp;

/// Why a record went to the error output; also the `!{firehose:error-output-type}` value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ErrorOutputType {
    /// The transform failed or returned an invalid response.
    ProcessingFailed,
    /// No valid partition keys (missing, not scalar, or a value that could escape).
    PartitioningFailed,
    /// More partitions were active than allowed (policy `Reject`).
    ActivePartitionsExceeded,
    /// A record the `Decompression` processor could not decompress (kept as it came).
    DecompressionFailed,
    /// A record that does not fit the Parquet table (`DataFormatConversionConfiguration`).
    FormatConversionFailed,
}

impl ErrorOutputType {
    /// The text used in prefixes and records.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorOutputType::ProcessingFailed => "processing-failed",
            ErrorOutputType::PartitioningFailed => "partitioning-failed",
            ErrorOutputType::ActivePartitionsExceeded => "active-partitions-exceeded",
            ErrorOutputType::DecompressionFailed => "decompression-failed",
            ErrorOutputType::FormatConversionFailed => "format-conversion-failed",
        }
    }
}

/// One line of an error object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ErrorRecord {
    /// Delivery attempts made (1 for records that failed before delivery).
    pub attempts_made: u32,
    /// Arrival of the record, epoch milliseconds.
    pub arrival_timestamp: i64,
    /// Machine-readable reason, e.g. `Lambda.FunctionError`, `DynamicPartitioning.MetadataExtractionFailed`.
    pub error_code: String,
    /// Human-readable reason.
    pub error_message: String,
    /// When the last attempt ended, epoch milliseconds.
    pub attempt_ending_timestamp: i64,
    /// The record as it arrived, base64.
    pub raw_data: String,
    /// The transform's ARN, when a Lambda was involved.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lambda_arn: Option<String>,
    /// The Glue table of a format conversion failure (`databaseName`, `tableName`, ...).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data_catalog_table: Option<serde_json::Value>,
}

impl ErrorRecord {
    /// An error record for `raw` that arrived at `arrival` and failed at `now`.
    pub fn new(raw: &[u8], arrival: Timestamp, now: Timestamp, code: &str, message: impl Into<String>) -> Self {
        Self {
            attempts_made: 1,
            arrival_timestamp: arrival.as_millis(),
            error_code: code.to_owned(),
            error_message: message.into(),
            attempt_ending_timestamp: now.as_millis(),
            raw_data: B64.encode(raw),
            lambda_arn: None,
            data_catalog_table: None,
        }
    }

    /// The record as one NDJSON line (with its newline).
    pub fn to_line(&self) -> Vec<u8> {
        let mut line = serde_json::to_vec(self).unwrap_or_else(|_| b"{}".to_vec());
        line.push(b'\n');
        line
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_json_with_the_raw_record_in_base64() {
        let raw = [0xff, 0xfe, b'\n', b'{'];
        let mut r = ErrorRecord::new(
            &raw,
            Timestamp::from_millis(1_000),
            Timestamp::from_millis(2_000),
            "DynamicPartitioning.MetadataExtractionFailed",
            "partition key tenantId is an object",
        );
        let line = r.to_line();
        assert_eq!(line.iter().filter(|b| **b == b'\n').count(), 1, "one line, whatever the record held");
        let v: serde_json::Value = serde_json::from_slice(&line).unwrap();
        assert_eq!(v["attemptsMade"], 1);
        assert_eq!(v["arrivalTimestamp"], 1_000);
        assert_eq!(v["attemptEndingTimestamp"], 2_000);
        assert_eq!(v["errorCode"], "DynamicPartitioning.MetadataExtractionFailed");
        assert_eq!(B64.decode(v["rawData"].as_str().unwrap()).unwrap(), raw);
        assert!(v.get("lambdaArn").is_none());
        r.lambda_arn = Some("arn:aws:lambda:us-east-1:1:function:f".into());
        let v: serde_json::Value = serde_json::from_slice(&r.to_line()).unwrap();
        assert_eq!(v["lambdaArn"], "arn:aws:lambda:us-east-1:1:function:f");
        assert_eq!(ErrorOutputType::PartitioningFailed.as_str(), "partitioning-failed");
    }
}
