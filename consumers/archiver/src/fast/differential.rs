//! The fast path and the reference pipeline side by side on one part, for the
//! whole-path property test and the differential fuzz target (`fuzz/`).
#![allow(clippy::unwrap_used)] // test support: a fixture that does not load is a failed test

use bytes::Bytes;
use weir_core::{ExtendedSequenceNumber, Record, SequenceNumber, ShardId, Timestamp};

use super::FastPath;
use crate::pipeline::outcome::Part;
use crate::pipeline::transform::Transformer;
use crate::pipeline::{Pipeline, Routed};
use weir_firehose::{ArchiverSettings, from_json, validate};

const ARRIVAL: Timestamp = Timestamp::from_millis(1_764_400_000_000);

/// The configurations with a fast path: (name, transform, query, append delimiter).
pub fn configs() -> Vec<(&'static str, Transformer, Option<&'static str>, bool)> {
    vec![
        ("design note", Transformer::McpNormalize, Some("{tenantId: .tenant_id, toolName: .tool_name}"), false),
        ("raw", Transformer::None, Some("{tenantId: .tenantId, toolName: .toolName}"), true),
        (
            "raw, keys of one field and booleans",
            Transformer::None,
            Some("{toolName: .success, tenantId: .tenantId}"),
            false,
        ),
        (
            "mcp, timestamp key",
            Transformer::McpNormalize,
            Some("{tenantId: .timestamp_utc, toolName: .schema_version}"),
            true,
        ),
        ("raw, no partitioning", Transformer::None, None, false),
        ("mcp, no partitioning", Transformer::McpNormalize, None, false),
    ]
}

pub fn settings(query: Option<&str>, delimiter: bool) -> ArchiverSettings {
    let text = include_str!("../../../../crates/weir-firehose/tests/fixtures/mcp-destination.json");
    let mut d = from_json(text).unwrap();
    match query {
        Some(q) => {
            d.processing.processors[0].parameters[0].value = serde_json::Value::String(q.to_owned());
        }
        None => {
            d.dynamic_partitioning = Default::default();
            d.processing = Default::default();
            d.prefix = Some("events/".into());
            d.error_output_prefix = Some("errors/!{firehose:error-output-type}/".into());
        }
    }
    let mut s = validate(&d).unwrap();
    s.append_delimiter = delimiter;
    s
}

pub struct Paths {
    fast: FastPath,
    reference: Pipeline,
}

pub fn paths(transformer: Transformer, query: Option<&str>, delimiter: bool) -> Paths {
    let s = settings(query, delimiter);
    Paths {
        fast: FastPath::new(&transformer, &s).expect("a configuration with a fast path"),
        reference: Pipeline::new(&s, transformer).unwrap(),
    }
}

impl Paths {
    /// What the reference makes of one part.
    pub fn reference(&self, data: &[u8]) -> Routed {
        let record = Record {
            partition_key: "pk".into(),
            position: ExtendedSequenceNumber::plain(SequenceNumber::from_u128(1)),
            approximate_arrival: ARRIVAL,
            data: Bytes::copy_from_slice(data),
        };
        let shard = ShardId::new("shardId-000000000000");
        let outcome = futures::executor::block_on(self.reference.transform(&shard, &[Part::whole(&record)])).remove(0);
        self.reference.route(outcome, data, ARRIVAL, ARRIVAL)
    }

    /// Both paths on one part: `Ok(true)` when the fast path answered (and agreed),
    /// `Ok(false)` when it was not sure (and left the line as it was), `Err` with the
    /// difference otherwise.
    pub fn agree(&mut self, data: &[u8]) -> Result<bool, String> {
        let text = || String::from_utf8_lossy(data).into_owned();
        let mut line = b"earlier lines".to_vec();
        let mut key = Vec::new();
        let answered = self.fast.route(data, ARRIVAL, &mut line, &mut key);
        if !answered {
            if line != b"earlier lines" {
                return Err(format!("not sure, yet the line changed for {:?}", text()));
            }
            return Ok(false);
        }
        let Routed::Line { line: want, route } = self.reference(data) else {
            return Err(format!("fast path answered, reference dropped {:?}", text()));
        };
        if !matches!(route, crate::pipeline::route::Route::Data(_)) {
            return Err(format!("reference errs: {want:?} for {:?}", text()));
        }
        let mut want_key = Vec::new();
        route.encode(&mut want_key);
        if line[13..] != want[..] {
            return Err(format!(
                "line of {:?}: fast {:?}, reference {:?}",
                text(),
                String::from_utf8_lossy(&line[13..]),
                String::from_utf8_lossy(&want)
            ));
        }
        if key != want_key {
            return Err(format!("route of {:?}: fast {key:?}, reference {want_key:?}", text()));
        }
        Ok(true)
    }
}
