//! The demo's closing tables.

use std::collections::BTreeMap;

use comfy_table::{Table, presets::UTF8_FULL_CONDENSED};
use weir_core::{Checkpoint, ConsumerName, Lease, ShardId};
use weir_runtime::LaneStats;

/// Short form of a checkpoint: sequence numbers abbreviated to their last digits.
fn short(cp: &Checkpoint) -> String {
    match cp {
        Checkpoint::At(p) => {
            let s = p.sequence.as_str();
            format!("…{}", &s[s.len().saturating_sub(6)..])
        }
        Checkpoint::ShardEnd => "SHARD_END".into(),
        Checkpoint::TrimHorizon => "TRIM_HORIZON".into(),
        Checkpoint::Latest => "LATEST".into(),
        Checkpoint::AtTimestamp(t) => format!("AT_TIMESTAMP {t}"),
    }
}

/// One row per shard: lineage, state, records in the stream, records each consumer
/// processed, and each consumer's checkpoint.
pub fn shards_table(
    leases: &[Lease],
    stream_counts: &BTreeMap<ShardId, usize>,
    lanes: &BTreeMap<(ShardId, ConsumerName), LaneStats>,
    consumers: &[String],
) -> Table {
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED);
    let mut header = vec!["shard".to_owned(), "parents".into(), "lease".into(), "records".into()];
    for c in consumers {
        header.push(format!("{c} got"));
    }
    for c in consumers {
        header.push(format!("{c} checkpoint"));
    }
    t.set_header(header);
    for l in leases {
        let state = if l.ended {
            "ended".to_owned()
        } else {
            l.owner.as_ref().map_or("free".into(), |o| format!("held by {o}"))
        };
        let parents = if l.parents.is_empty() {
            "-".to_owned()
        } else {
            l.parents.iter().map(|p| tail(p.as_str())).collect::<Vec<_>>().join("+")
        };
        let mut row =
            vec![tail(l.key.as_str()), parents, state, stream_counts.get(&l.key).copied().unwrap_or(0).to_string()];
        for c in consumers {
            let n = lanes.get(&(l.key.clone(), ConsumerName::new(c.as_str()))).map_or(0, |s| s.records);
            row.push(n.to_string());
        }
        for c in consumers {
            row.push(short(l.checkpoint_for(&ConsumerName::new(c.as_str()))));
        }
        t.add_row(row);
    }
    t
}

/// `shardId-000000000004` → `shard-4`.
fn tail(shard: &str) -> String {
    let n = shard.trim_start_matches("shardId-").trim_start_matches('0');
    format!("shard-{}", if n.is_empty() { "0" } else { n })
}
