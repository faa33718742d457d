use async_trait::async_trait;

use crate::ids::{ShardId, WorkerId};
use crate::lease::{Lease, LeaseChange, LeaseError, LeaseMutation, NewLease};

/// The newest lease format this weir writes. A namespace whose record names a newer one
/// was written by a newer weir, whose fields this one would drop when rewriting a lease.
///
/// - 1: the first.
/// - 2: a store may spread a namespace's leases over several places (the DynamoDB
///   table, over several hash keys) and say so in the namespace record; a weir that
///   writes format 1 would look for leases in one place only, so it must refuse.
///   Claiming a format-1 namespace rewrites its record as format 2 and keeps its layout.
/// - 3: a store may spread the worker records too (DynamoDB: over
///   [`WORKER_PARTITIONS`] hash keys); a weir of format 2 would read the records in
///   one place only, count the fleet's workers as gone and take their leases. Claiming
///   an older namespace keeps where its records are.
pub const LEASE_FORMAT: u32 = 3;

/// The largest lease item a lease table must store: DynamoDB's item limit (400 KB,
/// attribute names and values included). <https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/ServiceQuotas.html>
pub const MAX_LEASE_ITEM_BYTES: usize = 400 * 1024;

/// The most item bytes one [`LeaseTable::mutate_all`] may write: DynamoDB's limit on
/// the aggregate size of the items of a transaction (4 MB).
pub const MAX_TRANSACTION_BYTES: usize = 4 * 1024 * 1024;

/// The bytes `lease` takes as a stored item, as DynamoDB counts them: the lease's JSON
/// (the DynamoDB adapter stores the lease as one JSON attribute) plus what its key and
/// index attributes beside it can take (names, the namespace up to 256 bytes, the
/// sort key, counter, owner, handoff). An upper bound of the adapter's item size (its
/// tests check it), used against [`MAX_LEASE_ITEM_BYTES`].
pub fn lease_item_bytes(lease: &Lease) -> usize {
    let json = serde_json::to_vec(lease).map_or(usize::MAX / 2, |v| v.len());
    let owner = lease.owner.as_ref().map_or(0, |o| o.as_str().len());
    let handoff = lease.handoff_to.as_ref().map_or(0, |h| h.as_str().len());
    json + 2 * lease.key.as_str().len() + owner + handoff + 320
}

/// The hash keys a DynamoDB lease table spreads a new namespace's leases over: 64,000
/// write units a second at DynamoDB's limit per hash key value. 10,000 shards
/// checkpointing every second use a sixth; when all of them split at once (a reshard
/// ×2: each parent's end, and two children created) the busiest key asked 939 of its
/// 1,000 units in one second over 32 keys and 486 over 64 (`weir-fleetsim`). Stored
/// in the namespace record, so a namespace keeps the count it was created with (32
/// for those created before).
pub const LEASE_PARTITIONS: u32 = 64;

/// The partition (of `partitions`) a store that spreads leases puts lease `shard` in:
/// FNV-1a (64 bits) of the shard id, modulo `partitions` (part of the stored layout:
/// it must never change).
pub fn lease_partition(shard: &str, partitions: u32) -> u32 {
    let h = crate::stable_hash::fnv1a(shard.bytes());
    u32::try_from(h % u64::from(partitions.max(1))).unwrap_or(0)
}

/// The DynamoDB hash key of partition `partition` of `namespace`'s leases.
pub fn lease_partition_key(namespace: &str, partition: u32) -> String {
    format!("{namespace}#leases-{partition}")
}

/// The hash keys a DynamoDB lease table spreads a new namespace's worker records over.
/// Every lease cycle of every worker reads all the records: at 500 workers (records of
/// about 110 bytes, a cycle every 3.3 s) that is some 2,000 read units a second, two
/// thirds of one hash key's limit, and bursts in a deploy pass it. Spread over 8 keys
/// a census read costs a few units more (each key's share rounds up on its own) and no
/// key carries more than an eighth. Stored in the namespace record.
pub const WORKER_PARTITIONS: u32 = 8;

/// The partition (of `partitions`) of worker `worker`'s record, as
/// [`lease_partition`] computes a lease's (part of the stored layout: it must never
/// change).
pub fn worker_partition(worker: &str, partitions: u32) -> u32 {
    lease_partition(worker, partitions)
}

/// The DynamoDB hash key of partition `partition` of `namespace`'s worker records.
pub fn worker_partition_key(namespace: &str, partition: u32) -> String {
    format!("{namespace}#workers-{partition}")
}

/// What a namespace belongs to: written by the first worker of an application, checked
/// by every later one, so that two applications given the same namespace (a copied
/// config, a shared table) fail at start instead of taking each other's leases.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamespaceMeta {
    /// The stream whose shards the namespace's leases are.
    pub stream: String,
    /// The newest lease format written into the namespace ([`LEASE_FORMAT`]).
    pub format: u32,
}

/// A worker's liveness record. Liveness is judged by the observer's own clock: a worker
/// whose `counter` has not changed for the failover time is gone.
///
/// A record belongs to one *instance*: a random token each process draws at start. Two
/// processes configured with the same worker id would otherwise renew, adopt and
/// release each other's leases as their own; with instances the second one sees the
/// record of a live process and refuses to start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerHeartbeat {
    /// The worker.
    pub worker: WorkerId,
    /// Incremented by every heartbeat.
    pub counter: u64,
    /// The process that owns the record (empty: written by a weir without instances,
    /// claimable by any).
    pub instance: String,
    /// What the worker reported with its last heartbeat (zero in records written by a
    /// weir that reported nothing).
    pub load: WorkerLoad,
}

/// What a worker reports of the fleet's state with each heartbeat, so that the others
/// can tell whether a cycle needs to read every lease (see
/// [`crate::policy::census`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WorkerLoad {
    /// Leases the worker holds.
    pub held: u32,
    /// Leases not ended in the namespace, as the worker last listed them (zero: it
    /// has not listed yet).
    pub active: u32,
}

/// Durable, strongly consistent store of shard leases and worker heartbeats, scoped to
/// one namespace (an application, or a replay job).
///
/// Contract (checked by weir-testkit's conformance suite):
/// - reads are strongly consistent: a read after a successful write sees it;
/// - [`LeaseTable::mutate`] applies [`LeaseMutation::apply`] atomically: two concurrent
///   writers conditioned on the same owner and counter cannot both succeed;
/// - `create_if_absent` never overwrites;
/// - `mutate_all` is all-or-nothing.
#[async_trait]
pub trait LeaseTable: Send + Sync {
    /// Creates the lease unless one exists with the key. Returns whether it was created.
    async fn create_if_absent(&self, lease: NewLease) -> Result<bool, LeaseError>;

    /// Creates the lease already taken by `owner` (as `mutate_seen` of a take on the
    /// lease as created would leave it: counter 1) unless one exists with the key:
    /// the lease written, or `None` when one existed. One write where a store can
    /// (a worker taking the children of the shard it ended, in a reshard of
    /// thousands of shards at once).
    async fn create_taken(&self, lease: NewLease, owner: &WorkerId) -> Result<Option<Lease>, LeaseError> {
        let created = lease.clone().into_lease();
        if !self.create_if_absent(lease).await? {
            return Ok(None);
        }
        self.mutate_seen(&created, LeaseChange::Take { owner: owner.clone() }).await.map(Some)
    }

    /// Every lease of the namespace.
    async fn list(&self) -> Result<Vec<Lease>, LeaseError>;

    /// Every lease of the namespace, as [`LeaseTable::list`], but possibly missing the
    /// writes of about the last second (DynamoDB's eventually consistent reads, at half
    /// the read units). For readers whose every decision ends in a conditional write
    /// (which fails on a lease that moved since) or only waits longer: the lease
    /// coordinator's cycles and shard syncs. A stale reading can make an observer see a
    /// change late, never early.
    async fn list_relaxed(&self) -> Result<Vec<Lease>, LeaseError> {
        self.list().await
    }

    /// How many parts [`LeaseTable::list_part_relaxed`] reads the leases in (1: the
    /// store reads them all at once). Every lease is in exactly one part, chosen by a
    /// stable hash of its key, so each part holds a fair sample of the leases.
    fn lease_parts(&self) -> u32 {
        1
    }

    /// The leases of part `part` (of [`LeaseTable::lease_parts`]), read as
    /// [`LeaseTable::list_relaxed`] reads them: for a worker that needs a few leases
    /// and can find them in a sample (on DynamoDB one hash key of the spread layout, a
    /// thirty-second of the reading). A part past the last is empty.
    async fn list_part_relaxed(&self, part: u32) -> Result<Vec<Lease>, LeaseError> {
        if part == 0 { self.list_relaxed().await } else { Ok(Vec::new()) }
    }

    /// One lease.
    async fn get(&self, key: &ShardId) -> Result<Option<Lease>, LeaseError>;

    /// Applies a conditional mutation and returns the stored result.
    async fn mutate(&self, mutation: &LeaseMutation) -> Result<Lease, LeaseError>;

    /// Applies `change` conditioned on `seen`, the whole lease as the caller last
    /// wrote or read it: the same outcome as `mutate(&LeaseMutation::on(seen, change))`.
    /// Every write but a handoff request moves the counter, so a store whose lease
    /// still has `seen`'s counter, owner and handoff request holds `seen` itself: it
    /// may write `change` applied to `seen` conditioned on those three, without
    /// reading first (the lease holder's renewals and checkpoints: one request instead
    /// of two), and must fall back to [`LeaseTable::mutate`] when that condition fails.
    async fn mutate_seen(&self, seen: &Lease, change: LeaseChange) -> Result<Lease, LeaseError> {
        self.mutate(&LeaseMutation::on(seen, change)).await
    }

    /// Applies several conditional mutations (on distinct leases) atomically: all of
    /// them or none. For writes that must agree across shards, such as the archiver's
    /// intents over the leases of every shard an object holds. At most 25 mutations.
    async fn mutate_all(&self, mutations: &[LeaseMutation]) -> Result<Vec<Lease>, LeaseError>;

    /// Deletes a lease unconditionally (tests, cleanup of a namespace).
    async fn delete(&self, key: &ShardId) -> Result<(), LeaseError>;

    /// Deletes the lease `seen` if the stored one is still it (same counter), ended
    /// and held by no worker (`weir leases delete-ended`). Returns whether it did.
    async fn delete_ended(&self, seen: &Lease) -> Result<bool, LeaseError>;

    /// Records a heartbeat of `worker` by `instance` reporting `load`: creates the
    /// record when there is none, else increments its counter and stores `load`,
    /// conditionally on the record belonging to `instance` (or to no instance). A record
    /// of another instance is left alone and the answer is
    /// [`LeaseError::WorkerIdInUse`].
    async fn heartbeat(&self, worker: &WorkerId, instance: &str, load: WorkerLoad) -> Result<(), LeaseError>;

    /// Gives the record `seen` to `instance` (counter incremented, load kept), conditionally on the
    /// stored record still being `seen` (same instance, same counter): how a process
    /// takes over the id of a process that stopped without removing its record.
    /// Returns whether it did.
    async fn claim_worker(&self, seen: &WorkerHeartbeat, instance: &str) -> Result<bool, LeaseError>;

    /// The namespace's record, if one was written.
    async fn namespace_meta(&self) -> Result<Option<NamespaceMeta>, LeaseError>;

    /// Writes the namespace's record, conditionally on the stored one being `expected`
    /// (`None`: no record). Returns whether it did.
    async fn put_namespace_meta(
        &self,
        meta: &NamespaceMeta,
        expected: Option<&NamespaceMeta>,
    ) -> Result<bool, LeaseError>;

    /// Every worker record.
    async fn list_workers(&self) -> Result<Vec<WorkerHeartbeat>, LeaseError>;

    /// Every worker record, possibly missing the writes of about the last second (see
    /// [`LeaseTable::list_relaxed`]): for the census of a lease cycle. An observer that
    /// reads a heartbeat late judges its worker gone later, never sooner.
    async fn list_workers_relaxed(&self) -> Result<Vec<WorkerHeartbeat>, LeaseError> {
        self.list_workers().await
    }

    /// Removes the record of `worker` if it belongs to `instance` (graceful shutdown;
    /// a record another process took over stays).
    async fn remove_worker(&self, worker: &WorkerId, instance: &str) -> Result<(), LeaseError>;
}
