//! What the transform stage says of each record: delivered (with its data, partition
//! keys and, for the Iceberg destination, its table), dropped, or failed with
//! Firehose's error code; and the part of a record a transform is given. Every
//! transform (none, `mcp-normalize`, a plugin's, a Lambda's) speaks it.

use std::collections::BTreeMap;

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use weir_core::Record;

/// What happens to one input record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Deliver `data`.
    Ok {
        /// The transformed payload.
        data: Bytes,
        /// Partition keys from the transform (`partitionKeyFromLambda`).
        partition_keys: BTreeMap<String, String>,
        /// The table the transform names for the record (Firehose's Iceberg
        /// destination; the S3 archiver ignores it).
        otf: Option<OtfMetadata>,
    },
    /// Dropped by the transform.
    Dropped,
    /// To the error output (`processing-failed`), with the reason.
    Failed(Failure),
}

impl Outcome {
    /// `data` delivered, without partition keys.
    pub fn ok(data: Bytes) -> Self {
        Outcome::Ok { data, partition_keys: BTreeMap::new(), otf: None }
    }
}

/// Why a transform failed a record: Firehose's error code and a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// Error code written to the error output (e.g. `Lambda.MissingRecordId`).
    pub code: &'static str,
    /// What went wrong.
    pub message: String,
}

impl Failure {
    /// A failure with a code and message.
    pub fn new(code: &'static str, message: impl Into<String>) -> Self {
        Self { code, message: message.into() }
    }
}

impl std::ops::Deref for Failure {
    type Target = str;
    fn deref(&self) -> &str {
        &self.message
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

/// One record to transform: the stream record or one of its de-aggregated parts.
pub struct Part<'a> {
    /// The stream record.
    pub record: &'a Record,
    /// The part's data when it is a de-aggregated piece; `None` for the whole record.
    pub piece: Option<Bytes>,
}

impl<'a> Part<'a> {
    /// The whole record as one part.
    pub fn whole(record: &'a Record) -> Self {
        Self { record, piece: None }
    }

    /// The part's data.
    pub fn data(&self) -> &Bytes {
        self.piece.as_ref().unwrap_or(&self.record.data)
    }
}

/// Where a transform sends a record in Firehose's Iceberg destination
/// (`metadata.otfMetadata`); a name left out is the destination's own.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OtfMetadata {
    /// The database (the table's namespace).
    #[serde(default)]
    pub destination_database_name: Option<String>,
    /// The table.
    #[serde(default)]
    pub destination_table_name: Option<String>,
    /// `insert`, `update` or `delete`.
    #[serde(default)]
    pub operation: Option<String>,
}
