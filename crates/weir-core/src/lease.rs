//! The lease item and the conditional mutations every lease table applies.
//!
//! One lease per shard. The `counter` is a fencing token: every renew, take, transfer,
//! release and checkpoint increments it, and every such write is conditional on the
//! owner and counter the writer last saw. A handoff request is the one write that is
//! conditional on the owner only and leaves the counter alone, so the owner's renewals
//! keep working while it drains.
//!
//! [`LeaseMutation::apply`] is the single definition of these rules. In-memory and
//! SQLite tables apply it inside a critical section; the DynamoDB table expresses the
//! same conditions as condition expressions. The conformance suite checks them all.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::ids::{ConsumerName, ShardId, WorkerId};
use crate::position::Checkpoint;
use crate::record::HashKeyRange;
use crate::sequence::ExtendedSequenceNumber;

/// A consumer's write-ahead note, stored in a shard's lease *before* an external write
/// (the archiver's object PUT), so that the shard's next owner can tell whether the
/// write happened.
///
/// It says: "the records of this shard in `[first, last]` that belong to `scope` are
/// going into `target`". Which records belong to a scope is the consumer's business
/// (the archiver uses its partition); the runtime stores intents, hands the open ones
/// to the next owner in [`crate::ShardContext::intents`], and forgets an intent once
/// the consumer's checkpoint reaches `last` (its records are then never read again).
///
/// When `parts` is not empty, it says exactly which records (or parts of records) go
/// to `target`, whatever `scope` says: for outputs whose records are chosen by what can
/// differ between owners (a transform that failed this time, a partition cap), where
/// "the records in the range that belong to the scope" would name different records
/// for each owner. `except` names the parts of the range that do *not* go to `target`
/// whatever `scope` says: those the writer sent to such an output instead.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Intent {
    /// Where the records go (the archiver: the object key).
    pub target: String,
    /// Which of the shard's records in the range go there (the archiver: partition id).
    pub scope: String,
    /// First position of the range.
    pub first: ExtendedSequenceNumber,
    /// Last position of the range.
    pub last: ExtendedSequenceNumber,
    /// Exactly the parts that go there, when not empty (see above).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub parts: Vec<PartRun>,
    /// Parts of the range that do not go there (see above).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub except: Vec<PartRun>,
}

/// One part of a stream record: the record's position, and the part's place among the
/// parts a consumer splits the record into (0 for a record taken whole).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct PartPosition {
    /// The record's position.
    pub position: ExtendedSequenceNumber,
    /// The part's place in the record.
    pub part: u32,
}

/// Parts of a shard's records from `first` to `last` (both included, in stream order
/// and part order): every part the consumer handled in between.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartRun {
    /// The first part.
    pub first: PartPosition,
    /// The last part.
    pub last: PartPosition,
}

impl PartRun {
    /// Whether the run holds `part`.
    pub fn holds(&self, part: &PartPosition) -> bool {
        self.first <= *part && *part <= self.last
    }
}

impl Intent {
    /// Whether a checkpoint has passed every record of the intent.
    pub fn passed_by(&self, checkpoint: &Checkpoint) -> bool {
        match checkpoint {
            Checkpoint::At(p) => self.last <= *p,
            Checkpoint::ShardEnd => true,
            _ => false,
        }
    }
}

/// The worker id a handoff request names to ask the owner to *release* the lease
/// (`weir leases release`): it drains and checkpoints as for a handoff, then lets the
/// lease go free instead of transferring it, and any worker (itself included) takes it
/// and starts the shard afresh. No worker may use this id.
pub const RELEASE_REQUEST: &str = "(release)";

/// A shard lease as stored in the lease table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lease {
    /// Lease key: the shard id.
    pub key: ShardId,
    /// The worker holding the lease, if any.
    pub owner: Option<WorkerId>,
    /// Fencing token, incremented by every owner-changing or owner-made write.
    pub counter: u64,
    /// Where a consumer without its own checkpoint starts.
    pub initial: Checkpoint,
    /// Per-consumer durable positions.
    pub checkpoints: BTreeMap<ConsumerName, Checkpoint>,
    /// Parent shards; this shard is processed only after all of them ended.
    pub parents: Vec<ShardId>,
    /// Child shards, known once the shard ended.
    pub children: Vec<ShardId>,
    /// Hash key range of the shard.
    pub hash_range: Option<HashKeyRange>,
    /// Every consumer has checkpointed `ShardEnd`.
    pub ended: bool,
    /// A worker that asked the owner to hand the lease over (graceful steal).
    pub handoff_to: Option<WorkerId>,
    /// Open intents per consumer (see [`Intent`]); pruned as checkpoints pass them.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub intents: BTreeMap<ConsumerName, Vec<Intent>>,
}

impl Lease {
    /// The checkpoint of `consumer`, or the lease's initial position when it has none.
    pub fn checkpoint_for(&self, consumer: &ConsumerName) -> &Checkpoint {
        self.checkpoints.get(consumer).unwrap_or(&self.initial)
    }

    /// Whether `worker` owns the lease.
    pub fn is_owned_by(&self, worker: &WorkerId) -> bool {
        self.owner.as_ref() == Some(worker)
    }
}

/// What is needed to create a lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewLease {
    /// The shard.
    pub key: ShardId,
    /// Where consumers start.
    pub initial: Checkpoint,
    /// Parent shards.
    pub parents: Vec<ShardId>,
    /// Hash key range.
    pub hash_range: Option<HashKeyRange>,
}

impl NewLease {
    /// The lease as first stored: unowned, counter 0, no checkpoints.
    pub fn into_lease(self) -> Lease {
        Lease {
            key: self.key,
            owner: None,
            counter: 0,
            initial: self.initial,
            checkpoints: BTreeMap::new(),
            parents: self.parents,
            children: Vec::new(),
            hash_range: self.hash_range,
            ended: false,
            handoff_to: None,
            intents: BTreeMap::new(),
        }
    }
}

/// A change to one lease, applied only if the stored lease still has the owner (and
/// counter) the writer saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseChange {
    /// Become the owner (take an expired or free lease, or force a steal).
    Take {
        /// The new owner.
        owner: WorkerId,
    },
    /// Extend ownership.
    Renew,
    /// Ask the owner to hand over; conditional on the owner only, counter unchanged.
    RequestHandoff {
        /// The worker that wants the lease.
        to: WorkerId,
    },
    /// Give the lease directly to another worker (completes a graceful handoff).
    Transfer {
        /// The new owner.
        to: WorkerId,
    },
    /// Give the lease up (graceful shutdown).
    Release,
    /// Store a consumer's intents (appended to its open ones), dropping the open ones
    /// whose targets are in `replacing` (their place taken by one of the new intents:
    /// a manifest that lists theirs).
    RecordIntents {
        /// The consumer.
        consumer: ConsumerName,
        /// The new intents.
        intents: Vec<Intent>,
        /// Targets of open intents of the consumer that the new ones replace.
        replacing: Vec<String>,
    },
    /// An operator moves one consumer's checkpoint anywhere (backwards included:
    /// `weir leases seek`). Refused on an ended shard, while the consumer has open
    /// intents (their objects would be orphaned or written twice), and while a worker
    /// holds the lease unless `force`, which also takes the lease from that worker (its
    /// next write fails on the counter; the next owner starts at the new position).
    Seek {
        /// The consumer.
        consumer: ConsumerName,
        /// The new position.
        to: Checkpoint,
        /// Seek a held lease, taking it from its owner.
        force: bool,
    },
    /// An operator drops one consumer's open intents (`weir leases clear-intents`), for
    /// intents that can never resolve (their bucket was deleted). The records they
    /// cover are archived again from the checkpoint; an object one of them named that
    /// was written stays, so its records are then archived twice. Refused when the
    /// consumer has none, and while a worker holds the lease unless `force`, which also
    /// takes the lease from that worker (as for `Seek`).
    ClearIntents {
        /// The consumer.
        consumer: ConsumerName,
        /// Clear on a held lease, taking it from its owner.
        force: bool,
    },
    /// Record consumers' durable positions; optionally mark the shard ended. Intents
    /// the new positions pass are dropped.
    ///
    /// Marking the shard ended also lets the lease go (owner and handoff request
    /// cleared, as [`LeaseChange::Release`]): nobody processes an ended shard, and
    /// ending it this way is one write where an end and a release were two (at
    /// 10,000 shards a reshard's burst of writes on the lease table's keys).
    Checkpoint {
        /// New positions per consumer; each must not move backwards.
        checkpoints: BTreeMap<ConsumerName, Checkpoint>,
        /// `Some(children)` marks the shard ended with these children and releases it.
        ended_with_children: Option<Vec<ShardId>>,
    },
}

impl LeaseChange {
    /// Whether the change marks the shard ended (and so lets the lease go).
    pub fn ends_shard(&self) -> bool {
        matches!(self, LeaseChange::Checkpoint { ended_with_children: Some(_), .. })
    }
}

/// A conditional write: what the writer saw, and the change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseMutation {
    /// The lease key.
    pub key: ShardId,
    /// The owner the writer saw.
    pub expected_owner: Option<WorkerId>,
    /// The counter the writer saw (ignored for `RequestHandoff`).
    pub expected_counter: u64,
    /// The change.
    pub change: LeaseChange,
}

impl LeaseMutation {
    /// A mutation conditioned on `seen`'s owner and counter.
    pub fn on(seen: &Lease, change: LeaseChange) -> Self {
        Self { key: seen.key.clone(), expected_owner: seen.owner.clone(), expected_counter: seen.counter, change }
    }

    /// Applies the mutation to the stored lease, returning the lease to store.
    ///
    /// Errors: [`LeaseError::Conflict`] when the owner or counter differ from what the
    /// writer saw (for the owner this means the lease is lost);
    /// [`LeaseError::CheckpointBackwards`] when a checkpoint would move backwards.
    pub fn apply(&self, stored: &Lease) -> Result<Lease, LeaseError> {
        let owner_matches = stored.owner == self.expected_owner;
        let counter_matches = stored.counter == self.expected_counter;
        let conflict = || LeaseError::Conflict {
            key: self.key.clone(),
            expected_owner: self.expected_owner.clone(),
            expected_counter: self.expected_counter,
            actual_owner: stored.owner.clone(),
            actual_counter: stored.counter,
        };
        let mut next = stored.clone();
        match &self.change {
            LeaseChange::RequestHandoff { to } => {
                if !owner_matches || stored.owner.is_none() || stored.handoff_to.is_some() {
                    return Err(conflict());
                }
                next.handoff_to = Some(to.clone());
                return Ok(next);
            }
            _ if !(owner_matches && counter_matches) => return Err(conflict()),
            LeaseChange::Take { owner } => {
                next.owner = Some(owner.clone());
                next.handoff_to = None;
            }
            LeaseChange::Renew => {
                if stored.owner.is_none() {
                    return Err(conflict());
                }
            }
            LeaseChange::Transfer { to } => {
                if stored.owner.is_none() {
                    return Err(conflict());
                }
                next.owner = Some(to.clone());
                next.handoff_to = None;
            }
            LeaseChange::Release => {
                next.owner = None;
                next.handoff_to = None;
            }
            LeaseChange::RecordIntents { consumer, intents, replacing } => {
                if stored.owner.is_none() {
                    return Err(conflict());
                }
                let open = next.intents.entry(consumer.clone()).or_default();
                if !replacing.is_empty() {
                    open.retain(|i| !replacing.contains(&i.target));
                }
                open.extend(intents.iter().cloned());
            }
            LeaseChange::Seek { consumer, to, force } => {
                let refuse =
                    |why: String| Err(LeaseError::Invalid(format!("cannot seek {consumer} on {}: {why}", self.key)));
                if stored.ended {
                    return refuse("the shard has ended for every consumer".into());
                }
                if let Some(owner) = stored.owner.as_ref().filter(|_| !force) {
                    return refuse(format!(
                        "{owner} holds the lease (stop it first, or --force to take the lease from it)"
                    ));
                }
                if let Some(open) = stored.intents.get(consumer).filter(|o| !o.is_empty()) {
                    return refuse(format!(
                        "{} open intents (objects in flight when its last owner stopped); run the consumer until its checkpoint passes them",
                        open.len()
                    ));
                }
                next.checkpoints.insert(consumer.clone(), to.clone());
                next.owner = None;
                next.handoff_to = None;
            }
            LeaseChange::ClearIntents { consumer, force } => {
                let refuse = |why: String| {
                    Err(LeaseError::Invalid(format!("cannot clear {consumer}'s intents on {}: {why}", self.key)))
                };
                if let Some(owner) = stored.owner.as_ref().filter(|_| !force) {
                    return refuse(format!(
                        "{owner} holds the lease (stop it first, or --force to take the lease from it)"
                    ));
                }
                if stored.intents.get(consumer).is_none_or(Vec::is_empty) {
                    return refuse("it has no open intents".into());
                }
                next.intents.remove(consumer);
                next.owner = None;
                next.handoff_to = None;
            }
            LeaseChange::Checkpoint { checkpoints, ended_with_children } => {
                if stored.owner.is_none() {
                    return Err(conflict());
                }
                for (consumer, cp) in checkpoints {
                    let current = stored.checkpoint_for(consumer);
                    if !current.can_advance_to(cp) {
                        return Err(LeaseError::CheckpointBackwards {
                            key: self.key.clone(),
                            consumer: consumer.clone(),
                            current: current.clone(),
                            proposed: cp.clone(),
                        });
                    }
                    next.checkpoints.insert(consumer.clone(), cp.clone());
                    if let Some(open) = next.intents.get_mut(consumer) {
                        open.retain(|i| !i.passed_by(cp));
                        if open.is_empty() {
                            next.intents.remove(consumer);
                        }
                    }
                }
                if let Some(children) = ended_with_children {
                    next.ended = true;
                    next.children = children.clone();
                    next.owner = None;
                    next.handoff_to = None;
                }
            }
        }
        next.counter = stored.counter + 1;
        Ok(next)
    }
}

/// Errors of lease-table operations.
#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    /// The stored owner or counter differ from what the writer saw: for an owner, the
    /// lease is lost.
    #[error(
        "lease {key} changed: expected owner {expected_owner:?} counter {expected_counter}, found owner {actual_owner:?} counter {actual_counter}"
    )]
    Conflict {
        /// Lease key.
        key: ShardId,
        /// Owner the writer saw.
        expected_owner: Option<WorkerId>,
        /// Counter the writer saw.
        expected_counter: u64,
        /// Owner found (may be unknown for stores that do not return it).
        actual_owner: Option<WorkerId>,
        /// Counter found.
        actual_counter: u64,
    },
    /// A checkpoint would move backwards.
    #[error("checkpoint of {consumer} on {key} would move backwards from {current:?} to {proposed:?}")]
    CheckpointBackwards {
        /// Lease key.
        key: ShardId,
        /// The consumer.
        consumer: ConsumerName,
        /// Stored checkpoint.
        current: Checkpoint,
        /// Rejected checkpoint.
        proposed: Checkpoint,
    },
    /// No lease with this key.
    #[error("lease {0} does not exist")]
    NotFound(ShardId),
    /// The worker's heartbeat record belongs to another process with the same id.
    #[error("worker id {worker} is in use by another process (instance {instance})")]
    WorkerIdInUse {
        /// The worker id.
        worker: WorkerId,
        /// The instance that holds the record.
        instance: String,
    },
    /// A request the store cannot take (too many mutations, the same lease twice).
    #[error("invalid lease request: {0}")]
    Invalid(String),
    /// The store failed; `retryable` tells whether trying again may help.
    #[error("lease store error: {message}")]
    Store {
        /// What failed.
        message: String,
        /// Whether a retry may succeed.
        retryable: bool,
        /// The underlying error.
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync>>,
    },
}

/// Most mutations in one [`crate::ports::LeaseTable::mutate_all`] (DynamoDB transactions
/// take 100 items; 25 leaves room for the archiver's own items).
pub const MAX_MUTATIONS_PER_TRANSACTION: usize = 25;

/// Checks a batch for [`crate::ports::LeaseTable::mutate_all`]: not empty, not too
/// large, each lease at most once.
pub fn check_batch(mutations: &[LeaseMutation]) -> Result<(), LeaseError> {
    if mutations.is_empty() || mutations.len() > MAX_MUTATIONS_PER_TRANSACTION {
        return Err(LeaseError::Invalid(format!(
            "{} mutations; a transaction takes 1 to {MAX_MUTATIONS_PER_TRANSACTION}",
            mutations.len()
        )));
    }
    let mut keys: Vec<&ShardId> = mutations.iter().map(|m| &m.key).collect();
    keys.sort();
    if keys.windows(2).any(|w| w[0] == w[1]) {
        return Err(LeaseError::Invalid("a transaction names one lease twice".into()));
    }
    Ok(())
}

impl LeaseError {
    /// Whether a retry of the same call may succeed. Conflicts are not retryable: the
    /// caller must re-read the lease.
    pub fn is_retryable(&self) -> bool {
        matches!(self, LeaseError::Store { retryable: true, .. })
    }

    /// A store error from any error type.
    pub fn store(
        message: impl Into<String>,
        retryable: bool,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        LeaseError::Store { message: message.into(), retryable, source: Some(Box::new(source)) }
    }
}
