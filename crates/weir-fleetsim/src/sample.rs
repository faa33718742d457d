//! What the fleet's ownership looked like, second by second: shard-seconds without an
//! owner, the longest one shard waited, and how long after each event every shard was
//! owned and the fleet balanced.

use std::collections::{HashMap, HashSet};

use weir_core::ShardId;

use crate::fleet::App;

/// How long after an event the fleet took to recover.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventTiming {
    /// What happened.
    pub label: String,
    /// Second (of the measured time) it happened.
    pub at: u64,
    /// Seconds after it until every shard was owned (`None`: not within the run).
    pub owned_after: Option<u64>,
    /// Seconds after it until every shard was owned and the fleet balanced.
    pub balanced_after: Option<u64>,
}

/// Ownership samples of a run. See the module documentation.
#[derive(Debug, Default)]
pub struct Sampler {
    /// Sum over samples of the shards nobody held.
    pub unowned_shard_seconds: u64,
    /// The longest run of samples one shard went without an owner.
    pub longest_unowned: u64,
    /// Sum over samples of the workers running.
    pub worker_seconds: u64,
    /// Samples taken.
    pub samples: u64,
    /// Events and the recovery after each.
    pub events: Vec<EventTiming>,
    /// Since when each shard now without an owner has been without one.
    since: HashMap<ShardId, u64>,
}

impl Sampler {
    /// Notes an event at second `at`.
    pub fn event(&mut self, label: &str, at: u64) {
        self.events.push(EventTiming { label: label.to_owned(), at, owned_after: None, balanced_after: None });
    }

    /// Samples the apps at second `now`. Returns whether every app is balanced.
    pub async fn sample(&mut self, now: u64, apps: &[App]) -> bool {
        let (mut all_owned, mut all_balanced) = (true, true);
        let mut unowned_now = HashSet::new();
        for app in apps {
            let o = app.ownership().await;
            all_owned &= o.unowned.is_empty();
            all_balanced &= o.balanced();
            self.worker_seconds += app.running() as u64;
            unowned_now.extend(o.unowned);
        }
        self.samples += 1;
        self.unowned_shard_seconds += unowned_now.len() as u64;
        let mut longest = self.longest_unowned;
        self.since.retain(|k, start| {
            let still = unowned_now.contains(k);
            if !still {
                longest = longest.max(now - *start);
            }
            still
        });
        for k in unowned_now {
            self.since.entry(k).or_insert(now);
        }
        self.longest_unowned = longest;
        for e in self.events.iter_mut().filter(|e| e.at < now) {
            if all_owned && e.owned_after.is_none() {
                e.owned_after = Some(now - e.at);
            }
            if all_balanced && e.balanced_after.is_none() {
                e.balanced_after = Some(now - e.at);
            }
        }
        all_balanced
    }

    /// The longest wait, shards still waiting at second `now` included.
    pub fn longest_unowned_at(&self, now: u64) -> u64 {
        self.since.values().map(|start| now - start).fold(self.longest_unowned, u64::max)
    }
}
