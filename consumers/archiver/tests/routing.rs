//! Routing is a function of the record alone: after any other records, a record goes
//! exactly where a fresh archiver sends it, and values the sanitiser refuses go to the
//! error output every time, with the reason.
#![allow(clippy::unwrap_used, clippy::print_stdout)] // a test: a failed expectation is a failed test

mod support;

use std::sync::Arc;

use bytes::Bytes;
use proptest::prelude::*;
use support::*;
use weir_archiver::Transformer;
use weir_archiver::{Archiver, ArchiverOptions, Preview};
use weir_core::{Record, ShardId, Timestamp};
use weir_testkit::{ManualClock, MemoryObjectSink};

fn archiver() -> Archiver {
    let mut o = ArchiverOptions::new("a", settings(1 << 20));
    o.transformer = Transformer::McpNormalize;
    // Tiny, so that buffers are sealed and opened again during a run.
    o.max_active_partitions = Some(2);
    o.max_buffer_memory = 6 * 1536;
    Archiver::new(o, Arc::new(MemoryObjectSink::new()), Arc::new(ManualClock::new(Timestamp::from_millis(T0)))).unwrap()
}

fn event(n: u128, tenant: &str, tool: &str) -> Record {
    let data = serde_json::json!({"tenantId": tenant, "toolName": tool, "ts": T0 as u128 + n}).to_string();
    Record {
        partition_key: format!("pk{n}"),
        position: pos(n),
        approximate_arrival: Timestamp::from_millis(T0),
        data: Bytes::from(data),
    }
}

/// Where a preview sends the record: the object's prefix (names are random), or the
/// error record's code and message.
fn place(p: &[Preview]) -> Vec<String> {
    p.iter()
        .map(|p| match p {
            Preview::Data { key, line } => format!("data {} {line}", key.rsplit_once('/').map_or("", |(dir, _)| dir)),
            Preview::Error { record, .. } => format!("error {} {}", record["errorCode"], record["errorMessage"]),
            Preview::Dropped => "dropped".into(),
        })
        .collect()
}

fn value() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("t-1".to_owned()),
        Just("t-2".to_owned()),
        Just("a/b".to_owned()),
        Just("..".to_owned()),
        Just("50%".to_owned()),
        Just("é".to_owned()),
        Just("".to_owned()),
        Just("t\"q".to_owned()),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn a_record_routes_as_in_a_fresh_archiver(values in proptest::collection::vec((value(), value()), 1..40)) {
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let shard = ShardId::new("s");
        let warm = archiver();
        for (n, (tenant, tool)) in values.iter().enumerate() {
            let r = event(n as u128, tenant, tool);
            let got = place(&rt.block_on(warm.preview(&shard, &r)));
            let want = place(&rt.block_on(archiver().preview(&shard, &r)));
            prop_assert_eq!(&got, &want);
        }
    }
}

#[tokio::test]
async fn refused_values_are_refused_every_time() {
    let a = archiver();
    let shard = ShardId::new("s");
    for n in 0..3 {
        let p = place(&a.preview(&shard, &event(n, "a/tool=evil", "x")).await);
        assert_eq!(p.len(), 1);
        assert!(p[0].starts_with("error") && p[0].contains("path separator"), "{p:?}");
        let p = place(&a.preview(&shard, &event(n, "t-1", "x")).await);
        assert!(p[0].starts_with("data tool-events/tenant=t-1/tool=x/"), "{p:?}");
    }
}
