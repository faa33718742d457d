//! Where a record would go, without writing anything (`weir prefix eval`): the reference
//! pipeline's answer, with a key its object could get.

use bytes::Bytes;
use weir_core::{Record, ShardId, Timestamp};

use crate::archiver::Archiver;
use crate::pipeline::route::Route;
use crate::pipeline::{Routed, split_failure};

/// Where one part of a record would go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Preview {
    /// Into a data object under this key.
    Data {
        /// A key the object could get (names are random; the prefix is what matters).
        key: String,
        /// The line as written.
        line: String,
    },
    /// Into an error object.
    Error {
        /// A key the error object could get.
        key: String,
        /// The error record.
        record: serde_json::Value,
    },
    /// Dropped by the transform.
    Dropped,
}

impl Archiver {
    /// Where `record` would go, part by part, without writing anything.
    pub async fn preview(&self, shard: &ShardId, record: &Record) -> Vec<Preview> {
        let now = self.clock.now();
        let parts = match self.router.pipeline().split(record) {
            Ok(parts) => parts,
            Err(reason) => {
                return vec![self.preview_of(split_failure(record, now, &reason), record.approximate_arrival)];
            }
        };
        let outcomes = self.router.pipeline().transform(shard, &parts).await;
        parts
            .iter()
            .zip(outcomes)
            .map(|(p, o)| {
                let routed = self.router.pipeline().route(o, p.data(), record.approximate_arrival, now);
                self.preview_of(routed, record.approximate_arrival)
            })
            .collect()
    }

    fn preview_of(&self, routed: Routed, arrival: Timestamp) -> Preview {
        let Routed::Line { line, route } = routed else { return Preview::Dropped };
        let key = self.delivery.key_at(&crate::pipeline::route::RouteKey::of(&route), arrival);
        match route {
            Route::Data(_) => Preview::Data { key, line: text(&line) },
            Route::Error(_) => Preview::Error { key, record: serde_json::from_slice(&line).unwrap_or_default() },
        }
    }
}

fn text(line: &Bytes) -> String {
    String::from_utf8_lossy(line).into_owned()
}
