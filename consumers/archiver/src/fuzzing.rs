//! Entry points for the fuzz targets under `fuzz/` (feature `fuzzing`; not API). Each
//! runs the code production runs on the input and panics only where a contract is
//! broken, so a crash is a finding.

use bytes::Bytes;

use crate::fast::differential::{Paths, configs, paths};
use crate::pipeline::keys::KeyQuery;
use crate::pipeline::lambda::{KinesisRecordMetadata, decode_response, event};

/// The fast path and the reference pipeline, in every configuration with a fast path.
pub struct Differential(Vec<(&'static str, Paths)>);

impl Default for Differential {
    fn default() -> Self {
        Self(configs().into_iter().map(|(name, t, q, d)| (name, paths(t, q, d))).collect())
    }
}

impl Differential {
    /// Panics when the fast path answers `data` differently from the reference.
    pub fn check(&mut self, data: &[u8]) {
        for (name, p) in &mut self.0 {
            if let Err(e) = p.agree(data) {
                panic!("{name}: {e}");
            }
        }
    }
}

/// The partition keys `query` (when it compiles) takes from `record`; errors are
/// answers, never panics.
pub fn keys(query: &str, record: &[u8]) {
    if let Ok(q) = KeyQuery::compile(query) {
        let _ = q.keys(record);
    }
}

/// Decodes `body` as the answer of a transform function to `inputs` records; panics
/// unless there is exactly one outcome per input record.
pub fn lambda_response(inputs: usize, body: &[u8]) {
    let meta = |i: usize| KinesisRecordMetadata {
        shard_id: "shardId-000000000000".into(),
        partition_key: "pk".into(),
        approximate_arrival_timestamp: 1,
        sequence_number: i.to_string(),
        subsequence_number: 0,
    };
    let records = (0..inputs).map(|i| (format!("r{i}"), meta(i), Bytes::from_static(b"{}"))).collect();
    let input = event("inv", "arn:weir", "arn:stream", "us-east-1", records);
    let out = decode_response(&input, body);
    assert_eq!(out.len(), inputs, "one outcome per input record");
}
