//! weir-core: the domain of weir, with no I/O and no AWS types.
//!
//! Map of the crate:
//! - [`ids`]: typed identifiers (shards, workers, consumers).
//! - [`time`]: [`Timestamp`] and the [`Clock`] port; time is always a parameter.
//! - [`sequence`]: Kinesis sequence numbers with numeric ordering, and the
//!   extended (KPL sub-sequence) form used for checkpoints.
//! - [`position`]: where a read starts ([`StartingPosition`]) and where a consumer
//!   stands ([`Checkpoint`]), with the rule that checkpoints never move backwards.
//! - [`record`]: records and batches as a reader delivers them.
//! - [`jq`]: jq filters (jaq, JQ-1.6 semantics) with errors that point into the expression.
//! - [`kpl`]: KPL aggregated-record de-aggregation (and an encoder for producers/tests).
//! - [`lease`]: the lease item and the conditional mutations every lease table applies.
//! - [`consumer`]: the worker-scoped consumer API with per-shard acknowledgements.
//! - [`ports`]: the outside world as traits: lease table, shard reader, stream
//!   catalog, object sink.
//! - [`policy`]: pure decisions: which leases to take or steal, which to create.
#![warn(missing_docs)]

pub mod consumer;
pub mod ids;
pub mod jq;
pub mod kcl;
pub mod kpl;
pub mod lease;
pub mod object_format;
pub mod policy;
pub mod ports;
pub mod position;
pub mod record;
pub mod redact;
pub mod sequence;
mod stable_hash;
pub mod time;

pub use consumer::{
    Acks, CheckpointError, Checkpointer, CloseReason, Consumer, ConsumerError, DeferredBatch, IntentError, IntentLog,
    IntentWrite, ShardAcks, ShardContext, YIELD_EVERY_BYTES,
};
pub use ids::{ConsumerName, ShardId, WorkerId};
pub use lease::{Intent, Lease, LeaseChange, LeaseError, LeaseMutation, NewLease, PartPosition, PartRun};
pub use position::{Checkpoint, StartingPosition};
pub use record::{ChildShard, HashKeyRange, Record, RecordBatch};
pub use sequence::{ExtendedSequenceNumber, SequenceNumber, SequenceNumberError};
pub use time::{Clock, SystemClock, Timestamp};
