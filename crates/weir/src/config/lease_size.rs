//! The lease-size bound (docs/archiver.md): every exactly-once archiver keeps up to
//! [`weir_archiver::lease_bytes_bound`] bytes of intents in the lease item of each shard
//! it reads, beside the lease's own fields, and DynamoDB refuses an item over 400 KB,
//! which would halt the shard for good (its intent writes fail). A config whose
//! exactly-once archivers could fill a lease item past that is refused at load, naming
//! them.
//!
//! The bound takes the longest values Kinesis's API allows (shard ids of 128
//! characters, sequence numbers of 129 digits), the stream's name in the lease key,
//! a checkpoint for every consumer, two parents and two children.

use std::collections::BTreeMap;

use weir_core::ports::{MAX_LEASE_ITEM_BYTES, lease_item_bytes};
use weir_core::{Checkpoint, ConsumerName, HashKeyRange, Lease, ShardId, WorkerId};

use super::Config;

/// The longest shard id Kinesis's API allows.
const SHARD_ID_MAX: usize = 128;

/// The longest default worker id: a hostname (64 bytes), a process id (7 digits) and
/// four hex digits, joined by dashes.
const DEFAULT_WORKER_ID_MAX: usize = 64 + 1 + 7 + 1 + 4;

/// The largest lease item the exactly-once archivers reading one stream can make.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct LeaseSize {
    /// The stream (`None`: the one `[stream]`).
    pub(super) stream: Option<String>,
    /// The exactly-once archivers reading it, with the bytes of intents each may keep.
    pub(super) archivers: Vec<(String, usize)>,
    /// The lease's own fields, as DynamoDB counts them.
    pub(super) lease: usize,
}

impl LeaseSize {
    /// The largest item, in bytes.
    pub(super) fn total(&self) -> usize {
        self.lease + self.archivers.iter().map(|(_, b)| b).sum::<usize>()
    }
}

/// The largest lease item of each stream of `config`.
pub(super) fn lease_sizes(config: &Config) -> Vec<LeaseSize> {
    let streams: Vec<Option<&str>> = if config.streams.is_empty() {
        vec![None]
    } else {
        config.streams.iter().map(|s| Some(s.name.as_str())).collect()
    };
    let worker = config.worker.id.as_ref().map_or(DEFAULT_WORKER_ID_MAX, String::len);
    streams
        .into_iter()
        .map(|stream| {
            let shard = "s".repeat(SHARD_ID_MAX);
            let key = ShardId::new(stream.map_or(shard.clone(), |name| format!("{name}:{shard}")));
            let archivers = config
                .consumers
                .iter()
                .filter(|c| stream.is_none_or(|name| c.streams.as_ref().is_none_or(|s| s.iter().any(|n| n == name))))
                .filter(|c| crate::builtin::archiver::is_exactly_once(c))
                .map(|c| (c.name.clone(), weir_archiver::lease_bytes_bound(&Default::default(), &c.name, &key)))
                .collect();
            let consumers = config.consumers.iter().map(|c| ConsumerName::new(c.name.as_str()));
            LeaseSize { stream: stream.map(str::to_owned), archivers, lease: largest_lease(key, worker, consumers) }
        })
        .collect()
}

/// The bytes of the largest lease keyed `key` without intents: every field at its
/// longest, a checkpoint for each of `consumers`.
fn largest_lease(key: ShardId, worker: usize, consumers: impl Iterator<Item = ConsumerName>) -> usize {
    let at = Checkpoint::At(weir_archiver::longest_position());
    let worker = WorkerId::new("w".repeat(worker));
    let lease = Lease {
        key: key.clone(),
        owner: Some(worker.clone()),
        counter: u64::MAX,
        initial: at.clone(),
        checkpoints: consumers.map(|c| (c, at.clone())).collect::<BTreeMap<_, _>>(),
        parents: vec![key.clone(), key.clone()],
        children: vec![key.clone(), key],
        hash_range: Some(HashKeyRange { start: u128::MAX, end: u128::MAX }),
        ended: false,
        handoff_to: Some(worker),
        intents: BTreeMap::new(),
    };
    lease_item_bytes(&lease)
}

/// A problem for each stream whose largest lease item passes DynamoDB's 400 KB.
pub(super) fn problems(config: &Config) -> Vec<String> {
    let mut out = Vec::new();
    for size in lease_sizes(config) {
        let total = size.total();
        if total <= MAX_LEASE_ITEM_BYTES {
            continue;
        }
        let names: Vec<String> = size.archivers.iter().map(|(n, _)| format!("{n:?}")).collect();
        let each = size.archivers.iter().map(|(_, b)| *b).max().unwrap_or(1).max(1);
        let fit = MAX_LEASE_ITEM_BYTES.saturating_sub(size.lease) / each;
        let on = size.stream.as_ref().map_or(String::new(), |s| format!(" of stream {s:?}"));
        out.push(format!(
            "field `consumers`: the {} exactly-once archivers {} may keep up to {each} bytes of intents each in \
             every lease item{on}, {total} bytes with the lease's own fields ({} bytes), past DynamoDB's item \
             limit of {MAX_LEASE_ITEM_BYTES} bytes (a full lease item halts its shard); at most {fit} fit: set \
             `mode = \"firehose\"` on the others or run them in an application of their own",
            names.len(),
            names.join(", "),
            size.lease,
        ));
    }
    out
}
