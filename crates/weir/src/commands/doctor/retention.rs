//! Checkpoints behind the stream's trim horizon: records after them were removed by
//! the stream's retention period before a consumer processed them.

use std::collections::BTreeMap;
use std::time::Duration;

use weir_core::ports::{ReadMode, ShardReader};
use weir_core::{Checkpoint, ConsumerName, ExtendedSequenceNumber, Lease, ShardId, StartingPosition, Timestamp};

use super::Finding;
use crate::commands::leases::checkpoint_text;

/// What a shard still retains: its oldest record, or an error reading it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Oldest {
    /// The oldest retained record's position and arrival time.
    Record(ExtendedSequenceNumber, Timestamp),
    /// The shard retains nothing (read to its tip or for the time allowed, no records).
    Empty,
    /// The read failed.
    Unknown(String),
}

/// Reads the first record at `TRIM_HORIZON` of every lease not ended (in polling mode,
/// at most `wait` per shard).
pub(crate) async fn oldest_retained(
    reader: &dyn ShardReader,
    leases: &[Lease],
    wait: Duration,
) -> BTreeMap<ShardId, Oldest> {
    let mut out = BTreeMap::new();
    for l in leases.iter().filter(|l| !l.ended) {
        let read = async {
            let mut sub = reader
                .open(&l.key, &StartingPosition::TrimHorizon, ReadMode::Polling)
                .await
                .map_err(|e| e.to_string())?;
            // Polling can answer empty before the first record (Kinesis skips ahead
            // through empty stretches), so read until a record, the tip or the end.
            loop {
                match sub.next().await.map_err(|e| e.to_string())? {
                    None => return Ok(Oldest::Empty),
                    Some(b) => match b.records.first() {
                        Some(r) => return Ok(Oldest::Record(r.position.clone(), r.approximate_arrival)),
                        None if b.child_shards.is_some() || b.millis_behind_latest == Some(0) => {
                            return Ok(Oldest::Empty);
                        }
                        None => {}
                    },
                }
            }
        };
        let oldest = match tokio::time::timeout(wait, read).await {
            Ok(Ok(o)) => o,
            Ok(Err(e)) => Oldest::Unknown(e),
            // A read that waits for records (as the in-process stream's does) found none.
            Err(_) => Oldest::Empty,
        };
        out.insert(l.key.clone(), oldest);
    }
    out
}

/// A finding per consumer whose checkpoint on a lease not ended is older than the
/// shard's oldest retained record.
pub(crate) fn diagnose(
    leases: &[Lease],
    oldest: &BTreeMap<ShardId, Oldest>,
    consumers: &[ConsumerName],
) -> Vec<Finding> {
    let mut out = Vec::new();
    for l in leases.iter().filter(|l| !l.ended) {
        match oldest.get(&l.key) {
            Some(Oldest::Record(first, arrived)) => {
                for c in consumers {
                    let Checkpoint::At(at) = l.checkpoint_for(c) else { continue };
                    if at.sequence < first.sequence {
                        out.push(Finding {
                            shard: l.key.to_string(),
                            stuck: true,
                            text: format!(
                                "{c}'s checkpoint {} is behind the shard's trim horizon (its oldest retained record is {}, which arrived at {}): records after the checkpoint were removed by the stream's retention period before {c} processed them; raise the retention (IncreaseStreamRetentionPeriod) or let {c} keep up",
                                checkpoint_text(l.checkpoint_for(c)),
                                first.sequence,
                                arrived.to_rfc3339(),
                            ),
                        });
                    }
                }
            }
            Some(Oldest::Unknown(e)) => out.push(Finding {
                shard: l.key.to_string(),
                stuck: false,
                text: format!("cannot read the shard's trim horizon: {e}"),
            }),
            Some(Oldest::Empty) | None => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use std::sync::Arc;
    use weir_local::{MemoryStream, StreamOptions};

    /// A consumer whose checkpoint the stream's retention overtook is named with the
    /// trim horizon; one still within retention, or not checkpointed at a sequence,
    /// is not.
    #[tokio::test(start_paused = true)]
    async fn a_checkpoint_behind_the_trim_horizon_is_named() {
        let clock = Arc::new(weir_testkit::ManualClock::new(Timestamp::from_millis(1_000_000)));
        let stream = MemoryStream::new(StreamOptions { shards: 1, ..StreamOptions::default() }, clock.clone());
        let shard = stream.open_shards()[0].clone();
        let mut written = Vec::new();
        for i in 0..10 {
            written.push(stream.put(&format!("k{i}"), Bytes::from_static(b"{}")).1);
            clock.advance(Duration::from_secs(60));
        }
        // Records of the first five minutes expire.
        stream.expire_before(Timestamp::from_millis(1_000_000 + 5 * 60_000));
        let (archive, alerts, fresh) =
            (ConsumerName::new("archive"), ConsumerName::new("alerts"), ConsumerName::new("fresh"));
        let mut lease = weir_testkit::fixtures::new_lease(shard.as_str(), &[]).into_lease();
        let at = |s: &weir_core::SequenceNumber| Checkpoint::At(ExtendedSequenceNumber::plain(s.clone()));
        lease.checkpoints.insert(archive.clone(), at(&written[2]));
        lease.checkpoints.insert(alerts.clone(), at(&written[7]));
        lease.checkpoints.insert(fresh.clone(), Checkpoint::TrimHorizon);
        let leases = vec![lease];
        let oldest = oldest_retained(&stream, &leases, Duration::from_secs(1)).await;
        assert!(matches!(&oldest[&shard], Oldest::Record(p, _) if p.sequence == written[5]), "{oldest:?}");
        let f = diagnose(&leases, &oldest, &[archive, alerts, fresh]);
        assert_eq!(f.len(), 1, "{f:?}");
        assert!(f[0].stuck, "{f:?}");
        assert!(f[0].text.starts_with("archive's checkpoint"), "{f:?}");
        assert!(f[0].text.contains(&format!("oldest retained record is {}", written[5])), "{f:?}");
        assert!(f[0].text.contains("retention period"), "{f:?}");
    }

    /// An empty shard has no trim horizon to be behind; a shard the stream does not
    /// know is a note, not a verdict.
    #[tokio::test(start_paused = true)]
    async fn empty_and_unknown_shards() {
        let clock = Arc::new(weir_testkit::ManualClock::new(Timestamp::from_millis(1_000_000)));
        let stream = MemoryStream::new(StreamOptions { shards: 1, ..StreamOptions::default() }, clock);
        let shard = stream.open_shards()[0].clone();
        let c = ConsumerName::new("archive");
        let mut known = weir_testkit::fixtures::new_lease(shard.as_str(), &[]).into_lease();
        known
            .checkpoints
            .insert(c.clone(), Checkpoint::At(ExtendedSequenceNumber::plain(weir_core::SequenceNumber::from_u128(5))));
        let gone = weir_testkit::fixtures::new_lease("shardId-000000000099", &[]).into_lease();
        let leases = vec![known, gone];
        let oldest = oldest_retained(&stream, &leases, Duration::from_secs(1)).await;
        assert_eq!(oldest[&shard], Oldest::Empty);
        let f = diagnose(&leases, &oldest, &[c]);
        assert_eq!(f.len(), 1, "{f:?}");
        assert!(!f[0].stuck && f[0].text.contains("cannot read the shard's trim horizon"), "{f:?}");
    }
}
