//! A transform in front of the tables: Firehose's Lambda processor for its Iceberg
//! destination. For each record it gives new data and, optionally, the record's table
//! (`otfMetadata`), drops the record, or fails it with a reason (the error output).
//!
//! The transform sees each record of a batch in order and gives one answer per record.
//! It may be called again for records it already saw (a batch read again after a
//! crash or a failed commit): its answers must route a record to the same table each
//! time, or a record committed to one table by a crashed worker can be committed to
//! another by the next owner (each table knows only its own positions). The data may
//! differ between calls; the table keeps the first committed.

use async_trait::async_trait;
use bytes::Bytes;
use weir_core::{Record, ShardId};

use crate::tables::Route;

/// What a transform made of one record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transformed {
    /// Write `data`; to the table `route` names, or the consumer's routing without it.
    Ok {
        /// The new data.
        data: Bytes,
        /// The record's table (`otfMetadata`).
        route: Option<Route>,
    },
    /// Not written anywhere.
    Dropped,
    /// To the error output with the original data.
    Failed {
        /// The error record's `errorCode` (`Lambda.ProcessingFailedStatus`, …).
        code: &'static str,
        /// Its `errorMessage`.
        reason: String,
    },
}

/// Records of one shard's batch, transformed.
#[async_trait]
pub trait RecordTransform: Send + Sync + std::fmt::Debug {
    /// One answer per record of `records`, in order.
    async fn transform(&self, shard: &ShardId, records: &[Record]) -> Vec<Transformed>;
}
