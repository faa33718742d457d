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

/// One line of an error object: the shape of Firehose's processing-failed records
/// (`errorCode`, `errorMessage`, `lambdaArn`); a format conversion failure is written
/// in that error type's own documented shape by [`ErrorRecord::to_line`] (see
/// [`ConversionFailure`]).
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
    /// A format conversion failure: the record's position, and the shape to write.
    #[serde(skip)]
    pub conversion: Option<ConversionFailure>,
}

/// What a format conversion failure record carries beyond the common fields: Firehose
/// writes it as `attemptsMade`, `arrivalTimestamp`, `lastErrorCode`,
/// `lastErrorMessage`, `attemptEndingTimestamp`, `rawData`, `sequenceNumber`,
/// `subSequenceNumber` and `dataCatalogTable` (`catalogId`, `databaseName`,
/// `tableName`, `region`, `versionId`, `catalogArn`; nulls where the table is given
/// inline and not named).
/// <https://docs.aws.amazon.com/firehose/latest/dev/record-format-conversion-error-handling.html>
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConversionFailure {
    /// The record's sequence number.
    pub sequence_number: String,
    /// Its sub-sequence number (a KPL aggregate's part; 0 otherwise).
    pub sub_sequence_number: u64,
}

/// The documented field order of a format conversion failure record.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ConversionLine<'a> {
    attempts_made: u32,
    arrival_timestamp: i64,
    last_error_code: &'a str,
    last_error_message: &'a str,
    attempt_ending_timestamp: i64,
    raw_data: &'a str,
    sequence_number: &'a str,
    sub_sequence_number: u64,
    data_catalog_table: CatalogTable,
}

/// `dataCatalogTable`, its keys in the documented order.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct CatalogTable {
    catalog_id: serde_json::Value,
    database_name: serde_json::Value,
    table_name: serde_json::Value,
    region: serde_json::Value,
    version_id: serde_json::Value,
    catalog_arn: serde_json::Value,
}

/// `dataCatalogTable` with every documented key, nulls for what is not known.
fn catalog_table(known: Option<&serde_json::Value>) -> CatalogTable {
    let get = |k: &str| known.and_then(|t| t.get(k)).cloned().unwrap_or(serde_json::Value::Null);
    let (catalog, region) = (get("catalogId"), get("region"));
    let arn = match (catalog.as_str(), region.as_str()) {
        (Some(c), Some(r)) => serde_json::Value::String(format!("arn:aws:glue:{r}:{c}:catalog")),
        _ => get("catalogArn"),
    };
    CatalogTable {
        catalog_id: catalog,
        database_name: get("databaseName"),
        table_name: get("tableName"),
        region,
        version_id: get("versionId"),
        catalog_arn: arn,
    }
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
            conversion: None,
        }
    }

    /// The record as one NDJSON line (with its newline), in its error type's shape.
    pub fn to_line(&self) -> Vec<u8> {
        let mut line = match &self.conversion {
            None => serde_json::to_vec(self),
            Some(c) => serde_json::to_vec(&ConversionLine {
                attempts_made: self.attempts_made,
                arrival_timestamp: self.arrival_timestamp,
                last_error_code: &self.error_code,
                last_error_message: &self.error_message,
                attempt_ending_timestamp: self.attempt_ending_timestamp,
                raw_data: &self.raw_data,
                sequence_number: &c.sequence_number,
                sub_sequence_number: c.sub_sequence_number,
                data_catalog_table: catalog_table(self.data_catalog_table.as_ref()),
            }),
        }
        .unwrap_or_else(|_| b"{}".to_vec());
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

    /// A processing failure, field for field and in order as Firehose documents it
    /// (data-transformation-failure-handling: `attemptsMade`, `arrivalTimestamp`,
    /// `errorCode`, `errorMessage`, `attemptEndingTimestamp`, `rawData`, `lambdaArn`);
    /// the partitioning failures share the shape, without a Lambda's ARN.
    #[test]
    fn a_processing_failure_has_firehoses_documented_shape() {
        let mut r = ErrorRecord::new(
            b"{\"a\":1}",
            Timestamp::from_millis(1_000),
            Timestamp::from_millis(2_000),
            "Lambda.FunctionError",
            "the function returned an error",
        );
        r.lambda_arn = Some("arn:aws:lambda:us-east-1:123456789012:function:normalise".into());
        assert_eq!(
            String::from_utf8(r.to_line()).unwrap(),
            concat!(
                r#"{"attemptsMade":1,"arrivalTimestamp":1000,"errorCode":"Lambda.FunctionError","#,
                r#""errorMessage":"the function returned an error","attemptEndingTimestamp":2000,"rawData":"eyJhIjoxfQ==","#,
                r#""lambdaArn":"arn:aws:lambda:us-east-1:123456789012:function:normalise"}"#,
                "\n"
            )
        );
    }

    /// A format conversion failure, field for field and in order as Firehose documents
    /// it (a golden line).
    #[test]
    fn a_format_conversion_failure_has_firehoses_documented_shape() {
        let mut r = ErrorRecord::new(
            b"{\"ts\":\"yesterday\"}",
            Timestamp::from_millis(1_000),
            Timestamp::from_millis(2_000),
            "DataFormatConversion.Failed",
            "column ts: expected timestamp, found \"yesterday\"",
        );
        r.data_catalog_table = Some(serde_json::json!({
            "catalogId": "123456789012", "databaseName": "mcp", "tableName": "tool_events",
            "region": "us-east-1", "versionId": "LATEST"
        }));
        r.conversion = Some(ConversionFailure { sequence_number: "4954".into(), sub_sequence_number: 2 });
        let line = String::from_utf8(r.to_line()).unwrap();
        assert_eq!(
            line,
            concat!(
                r#"{"attemptsMade":1,"arrivalTimestamp":1000,"lastErrorCode":"DataFormatConversion.Failed","#,
                r#""lastErrorMessage":"column ts: expected timestamp, found \"yesterday\"","attemptEndingTimestamp":2000,"#,
                r#""rawData":"eyJ0cyI6Inllc3RlcmRheSJ9","sequenceNumber":"4954","subSequenceNumber":2,"#,
                r#""dataCatalogTable":{"catalogId":"123456789012","databaseName":"mcp","tableName":"tool_events","#,
                r#""region":"us-east-1","versionId":"LATEST","catalogArn":"arn:aws:glue:us-east-1:123456789012:catalog"}}"#,
                "\n"
            )
        );
        // Columns given inline: every key of dataCatalogTable is there, null.
        r.data_catalog_table = None;
        let v: serde_json::Value = serde_json::from_slice(&r.to_line()).unwrap();
        let table = v["dataCatalogTable"].as_object().unwrap();
        assert_eq!(table.len(), 6);
        assert!(table.values().all(serde_json::Value::is_null), "{table:?}");
    }
}
