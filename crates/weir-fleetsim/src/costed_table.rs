//! A lease table that charges every call as the DynamoDB adapter's requests would be
//! charged, and throttles them as DynamoDB would.
//!
//! The state and the rules live in weir-testkit's [`MemoryLeaseTable`] (with
//! DynamoDB's size limits); this wrapper issues, per call, the requests of
//! `weir-aws/src/dynamodb.rs`, each charged to its partition-key value in the shared
//! [`Meter`]: the namespace for the namespace record; for a worker record its
//! partition of [`WORKER_PARTITIONS`] (`<namespace>#workers-<n>`), and for a lease its
//! partition of [`LEASE_PARTITIONS`] (`<namespace>#leases-<n>`), as the adapter
//! spreads a new namespace's; or the namespace itself with
//! [`CostedLeaseTable::with_partitions`]`(0)` and
//! [`CostedLeaseTable::with_worker_partitions`]`(0)` (the layouts before they were
//! spread):
//!
//! | call | requests |
//! |---|---|
//! | `list` | per partition, `Query` `lease#*`, strongly consistent, one per 1 MB page |
//! | `list_relaxed` | the same, eventually consistent |
//! | `list_part_relaxed` | the `Query` of one partition, eventually consistent |
//! | `list_workers` | per partition, `Query` `worker#*`, strongly consistent, paged |
//! | `list_workers_relaxed` | the same, eventually consistent |
//! | `get`, `namespace_meta` | `GetItem`, strongly consistent |
//! | `mutate` | `GetItem` (strong) + conditional `PutItem`; again while the condition fails (at most 16 rounds) |
//! | `mutate_all` | one `GetItem` (strong) per lease + `TransactWriteItems` (double units, charged to each item's partition key) |
//! | `create_if_absent`, `create_taken`, `put_namespace_meta` | conditional `PutItem` |
//! | `heartbeat` | conditional `UpdateItem` (+ `GetItem` when the record is another process's) |
//! | `claim_worker` | conditional `UpdateItem` |
//! | `delete`, `delete_ended`, `remove_worker` | `DeleteItem` |
//!
//! A write whose condition fails still consumes its units. A throttled request is
//! retried as the SDK retries it ([`SdkRetry`], delays in tokio time); when the last
//! attempt is throttled too, the call fails with the error the adapter returns for it:
//! a retryable [`LeaseError::Store`] naming `ProvisionedThroughputExceededException`.
//! Earlier requests of the call (the pages already read, the read before a write)
//! stay charged. Item sizes: see [`crate::items`].
//!
//! It also counts the leases that moved: writes that gave a lease an owner other than
//! its last one (a take of a free lease that nobody held before does not count).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use tokio::time::Instant;
use weir_core::ports::{
    LEASE_PARTITIONS, LeaseTable, MAX_LEASE_ITEM_BYTES, MAX_TRANSACTION_BYTES, NamespaceMeta, WORKER_PARTITIONS,
    WorkerHeartbeat, WorkerLoad, lease_item_bytes, lease_partition, lease_partition_key, worker_partition,
    worker_partition_key,
};
use weir_core::{Lease, LeaseChange, LeaseError, LeaseMutation, NewLease, ShardId, WorkerId};
use weir_testkit::MemoryLeaseTable;

use crate::items::{meta_item_bytes, worker_item_bytes};
use crate::meter::{Charge, Meter, Op};
use crate::sdk_retry::SdkRetry;
use crate::units::{Consistency, query_pages, read_half_units, write_units};

/// Read-apply-write rounds of one mutation, as in the adapter.
const CONTENTION_RETRIES: usize = 16;

#[derive(Debug, Default)]
struct Sizes {
    /// Item bytes per lease, in sort-key order (`lease#<shard>` sorts as the shard id).
    leases: BTreeMap<ShardId, usize>,
    workers: BTreeMap<WorkerId, usize>,
    meta: Option<usize>,
    /// The last owner each lease had, for counting moves.
    last_owner: HashMap<ShardId, WorkerId>,
    moves: u64,
}

/// One namespace of a DynamoDB lease table, costed. See the module documentation.
pub struct CostedLeaseTable {
    namespace: String,
    /// Partition keys of the leases (0: the namespace's own).
    partitions: u32,
    /// Partition keys of the worker records (0: the namespace's own).
    worker_partitions: u32,
    table: String,
    inner: MemoryLeaseTable,
    meter: Arc<Meter>,
    retry: SdkRetry,
    sizes: Mutex<Sizes>,
}

impl std::fmt::Debug for CostedLeaseTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CostedLeaseTable").field("namespace", &self.namespace).finish()
    }
}

fn unchanged(a: &Lease, b: &Lease) -> bool {
    a.counter == b.counter && a.owner == b.owner && a.handoff_to == b.handoff_to
}

fn too_large(message: String) -> LeaseError {
    LeaseError::Store { message, retryable: false, source: None }
}

impl CostedLeaseTable {
    /// The namespace `namespace` of table `table`, charged to `meter`.
    pub fn new(table: &str, namespace: &str, meter: Arc<Meter>, retry: SdkRetry) -> Self {
        Self {
            namespace: namespace.to_owned(),
            partitions: LEASE_PARTITIONS,
            worker_partitions: WORKER_PARTITIONS,
            table: table.to_owned(),
            inner: MemoryLeaseTable::with_dynamodb_limits(),
            meter,
            retry,
            sizes: Mutex::default(),
        }
    }

    /// The same, with the leases spread over `partitions` partition keys (0: all
    /// under the namespace, the layout before leases were spread).
    #[must_use]
    pub fn with_partitions(mut self, partitions: u32) -> Self {
        self.partitions = partitions;
        self
    }

    /// The same, with the worker records spread over `partitions` partition keys (0:
    /// all under the namespace, the layout before they were spread).
    #[must_use]
    pub fn with_worker_partitions(mut self, partitions: u32) -> Self {
        self.worker_partitions = partitions;
        self
    }

    /// The partition-key value of the namespace's record.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The partition-key value of worker `worker`'s record, as the adapter computes it.
    fn worker_pk(&self, worker: &WorkerId) -> String {
        match self.worker_partitions {
            0 => self.namespace.clone(),
            n => worker_partition_key(&self.namespace, worker_partition(worker.as_str(), n)),
        }
    }

    /// The partition-key value of lease `key`, as the adapter computes it.
    fn lease_pk(&self, key: &ShardId) -> String {
        match self.partitions {
            0 => self.namespace.clone(),
            n => lease_partition_key(&self.namespace, lease_partition(key.as_str(), n)),
        }
    }

    /// Leases that got an owner other than their last one, since the last reset.
    pub fn moves(&self) -> u64 {
        self.sizes().moves
    }

    /// Starts counting moves from zero.
    pub fn reset_moves(&self) {
        self.sizes().moves = 0;
    }

    /// Keys of the leases not ended, read without a charge (the simulator's view).
    pub async fn active_keys(&self) -> Vec<ShardId> {
        let all = self.inner.list().await.unwrap_or_default();
        all.into_iter().filter(|l| !l.ended).map(|l| l.key).collect()
    }

    fn sizes(&self) -> std::sync::MutexGuard<'_, Sizes> {
        self.sizes.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn lease_size(&self, key: &ShardId) -> Option<usize> {
        self.sizes().leases.get(key).copied()
    }

    /// Issues one request: charged, or retried as the SDK retries a throttled request,
    /// and failed as the adapter fails when every attempt was throttled.
    async fn request(&self, pk: &str, what: &str, charge: Charge) -> Result<(), LeaseError> {
        let mut attempt = 1;
        loop {
            if self.meter.charge(pk, charge, Instant::now()).is_ok() {
                return Ok(());
            }
            if attempt >= self.retry.max_attempts {
                return Err(LeaseError::Store {
                    message: format!(
                        "dynamodb {what} on table {}: ProvisionedThroughputExceededException: throughput exceeds the current throughput limit of partition key {pk}",
                        self.table
                    ),
                    retryable: true,
                    source: None,
                });
            }
            tokio::time::sleep(self.retry.delay(attempt)).await;
            attempt += 1;
        }
    }

    async fn read(&self, pk: &str, op: Op, what: &str, bytes: usize) -> Result<(), LeaseError> {
        self.read_as(pk, op, what, bytes, Consistency::Strong).await
    }

    async fn read_as(&self, pk: &str, op: Op, what: &str, bytes: usize, c: Consistency) -> Result<(), LeaseError> {
        let charge = Charge { op, read_halves: read_half_units(bytes, c), write_units: 0 };
        self.request(pk, what, charge).await
    }

    async fn write(&self, pk: &str, op: Op, what: &str, bytes: usize, transactional: bool) -> Result<(), LeaseError> {
        let charge = Charge { op, read_halves: 0, write_units: write_units(bytes, transactional) };
        self.request(pk, what, charge).await
    }

    /// A Query of partition key `pk` over items of `sizes`, page by page.
    async fn query(&self, pk: &str, sizes: Vec<usize>, c: Consistency) -> Result<(), LeaseError> {
        for page in query_pages(sizes) {
            self.read_as(pk, Op::Query, "query", page.bytes, c).await?;
        }
        Ok(())
    }

    /// The Queries of every lease partition.
    async fn query_leases(&self, c: Consistency) -> Result<(), LeaseError> {
        let pks = match self.partitions {
            0 => vec![self.namespace.clone()],
            n => (0..n).map(|p| lease_partition_key(&self.namespace, p)).collect(),
        };
        let items: Vec<(String, usize)> = self.sizes().leases.iter().map(|(k, b)| (self.lease_pk(k), *b)).collect();
        self.query_each(pks, items, c).await
    }

    /// The Queries of every worker-record partition.
    async fn query_workers(&self, c: Consistency) -> Result<(), LeaseError> {
        let pks = match self.worker_partitions {
            0 => vec![self.namespace.clone()],
            n => (0..n).map(|p| worker_partition_key(&self.namespace, p)).collect(),
        };
        let items: Vec<(String, usize)> = self.sizes().workers.iter().map(|(w, b)| (self.worker_pk(w), *b)).collect();
        self.query_each(pks, items, c).await
    }

    /// A Query of each of `pks` (every one, empty or not: the adapter does not know
    /// which are empty) over the `items` (partition key, bytes) under it.
    async fn query_each(
        &self,
        pks: Vec<String>,
        items: Vec<(String, usize)>,
        c: Consistency,
    ) -> Result<(), LeaseError> {
        let mut by_pk: BTreeMap<String, Vec<usize>> = pks.into_iter().map(|pk| (pk, Vec::new())).collect();
        for (pk, bytes) in items {
            by_pk.entry(pk).or_default().push(bytes);
        }
        for (pk, sizes) in by_pk {
            self.query(&pk, sizes, c).await?;
        }
        Ok(())
    }

    /// Refuses an item DynamoDB would refuse for its size (`ValidationException`, no
    /// capacity consumed).
    fn check_item(lease: &Lease) -> Result<usize, LeaseError> {
        let bytes = lease_item_bytes(lease);
        if bytes > MAX_LEASE_ITEM_BYTES {
            return Err(too_large(format!(
                "ValidationException: Item size has exceeded the maximum allowed size (lease {}: {bytes} bytes)",
                lease.key
            )));
        }
        Ok(bytes)
    }

    /// As the DynamoDB adapter's conditional put of `mutation` applied to `seen`:
    /// charged whether or not its condition holds; the lease written, or `None` when
    /// the stored lease no longer has `seen`'s counter, owner and handoff request
    /// (the SDK's retries may have slept since `seen` was read).
    async fn put_if_unchanged(
        &self,
        seen: &Lease,
        mutation: &LeaseMutation,
        what: &str,
    ) -> Result<Option<Lease>, LeaseError> {
        let next = mutation.apply(seen)?;
        let bytes = Self::check_item(&next)?;
        let before = self.lease_size(&seen.key).unwrap_or(0);
        self.write(&self.lease_pk(&seen.key), Op::PutItem, what, bytes.max(before), false).await?;
        let current = self.inner.get(&seen.key).await?;
        if !current.as_ref().is_some_and(|c| unchanged(c, seen)) {
            return Ok(None);
        }
        let written = self.inner.mutate(mutation).await?;
        self.stored(&written, bytes);
        Ok(Some(written))
    }

    /// Notes a stored lease: its size, and whether it moved to another owner.
    fn stored(&self, lease: &Lease, bytes: usize) {
        let mut s = self.sizes();
        s.leases.insert(lease.key.clone(), bytes);
        if let Some(owner) = &lease.owner {
            match s.last_owner.insert(lease.key.clone(), owner.clone()) {
                Some(previous) if previous != *owner => s.moves += 1,
                _ => {}
            }
        }
    }
}

#[async_trait]
impl LeaseTable for CostedLeaseTable {
    async fn create_if_absent(&self, lease: NewLease) -> Result<bool, LeaseError> {
        let new = lease.clone().into_lease();
        let bytes = Self::check_item(&new)?;
        let existing = self.lease_size(&new.key).unwrap_or(0);
        self.write(&self.lease_pk(&new.key), Op::PutItem, "put (create lease)", bytes.max(existing), false).await?;
        let created = self.inner.create_if_absent(lease).await?;
        if created {
            self.sizes().leases.insert(new.key, bytes);
        }
        Ok(created)
    }

    /// As the adapter: one conditional put of the lease as taken.
    async fn create_taken(&self, lease: NewLease, owner: &WorkerId) -> Result<Option<Lease>, LeaseError> {
        let created = lease.clone().into_lease();
        let taken = LeaseMutation::on(&created, LeaseChange::Take { owner: owner.clone() }).apply(&created)?;
        let bytes = Self::check_item(&taken)?;
        let existing = self.lease_size(&taken.key).unwrap_or(0);
        self.write(&self.lease_pk(&taken.key), Op::PutItem, "put (create taken lease)", bytes.max(existing), false)
            .await?;
        if !self.inner.create_if_absent(lease).await? {
            return Ok(None);
        }
        let written =
            self.inner.mutate(&LeaseMutation::on(&created, LeaseChange::Take { owner: owner.clone() })).await?;
        self.stored(&written, bytes);
        Ok(Some(written))
    }

    async fn list(&self) -> Result<Vec<Lease>, LeaseError> {
        self.query_leases(Consistency::Strong).await?;
        self.inner.list().await
    }

    /// Charged as eventually consistent; the simulator's reading is never stale (the
    /// cost is what the simulator measures, not the staleness).
    async fn list_relaxed(&self) -> Result<Vec<Lease>, LeaseError> {
        self.query_leases(Consistency::Eventual).await?;
        self.inner.list().await
    }

    fn lease_parts(&self) -> u32 {
        self.partitions.max(1)
    }

    async fn list_part_relaxed(&self, part: u32) -> Result<Vec<Lease>, LeaseError> {
        if part >= self.lease_parts() {
            return Ok(Vec::new());
        }
        let (pk, in_part): (String, Box<dyn Fn(&ShardId) -> bool + Send>) = match self.partitions {
            0 => (self.namespace.clone(), Box::new(|_| true)),
            n => {
                (lease_partition_key(&self.namespace, part), Box::new(move |k| lease_partition(k.as_str(), n) == part))
            }
        };
        let (keys, sizes): (Vec<ShardId>, Vec<usize>) =
            self.sizes().leases.iter().filter(|(k, _)| in_part(k)).map(|(k, b)| (k.clone(), *b)).unzip();
        self.query(&pk, sizes, Consistency::Eventual).await?;
        // Lease by lease: the simulator's time goes to cloning leases, and a part is a
        // thirty-second of them.
        let mut leases = Vec::with_capacity(keys.len());
        for k in &keys {
            leases.extend(self.inner.get(k).await?);
        }
        Ok(leases)
    }

    async fn get(&self, key: &ShardId) -> Result<Option<Lease>, LeaseError> {
        self.read(&self.lease_pk(key), Op::GetItem, "get", self.lease_size(key).unwrap_or(0)).await?;
        self.inner.get(key).await
    }

    async fn mutate(&self, mutation: &LeaseMutation) -> Result<Lease, LeaseError> {
        for _ in 0..CONTENTION_RETRIES {
            let stored = self.get(&mutation.key).await?.ok_or_else(|| LeaseError::NotFound(mutation.key.clone()))?;
            if let Some(written) = self.put_if_unchanged(&stored, mutation, "put (mutate lease)").await? {
                return Ok(written);
            }
        }
        Err(LeaseError::Store {
            message: format!("lease {} under heavy contention", mutation.key),
            retryable: true,
            source: None,
        })
    }

    /// As the DynamoDB adapter: one conditional put of `change` applied to `seen`,
    /// charged whether or not its condition holds; when it does not, `mutate`.
    async fn mutate_seen(&self, seen: &Lease, change: LeaseChange) -> Result<Lease, LeaseError> {
        let mutation = LeaseMutation::on(seen, change);
        if let Some(written) = self.put_if_unchanged(seen, &mutation, "put (mutate seen lease)").await? {
            return Ok(written);
        }
        self.mutate(&mutation).await
    }

    async fn mutate_all(&self, mutations: &[LeaseMutation]) -> Result<Vec<Lease>, LeaseError> {
        weir_core::lease::check_batch(mutations)?;
        for _ in 0..CONTENTION_RETRIES {
            let mut seen = Vec::with_capacity(mutations.len());
            let mut units: BTreeMap<String, u64> = BTreeMap::new();
            let mut total = 0;
            for m in mutations {
                let stored = self.get(&m.key).await?.ok_or_else(|| LeaseError::NotFound(m.key.clone()))?;
                let next = m.apply(&stored)?;
                let bytes = Self::check_item(&next)?;
                total += bytes;
                *units.entry(self.lease_pk(&m.key)).or_default() +=
                    write_units(bytes.max(self.lease_size(&m.key).unwrap_or(0)), true);
                seen.push((stored, bytes));
            }
            if total > MAX_TRANSACTION_BYTES {
                return Err(too_large(format!(
                    "ValidationException: Transaction request cannot be larger than 4 MB ({total} bytes)"
                )));
            }
            for (pk, units) in units {
                let charge = Charge { op: Op::TransactWriteItems, read_halves: 0, write_units: units };
                self.request(&pk, "transact write (mutate leases)", charge).await?;
            }
            let mut all_unchanged = true;
            for (stored, _) in &seen {
                let current = self.inner.get(&stored.key).await?;
                all_unchanged &= current.as_ref().is_some_and(|c| unchanged(c, stored));
            }
            if !all_unchanged {
                // TransactionCanceledException: read again and re-judge all.
                continue;
            }
            let written = self.inner.mutate_all(mutations).await?;
            for (lease, (_, bytes)) in written.iter().zip(&seen) {
                self.stored(lease, *bytes);
            }
            return Ok(written);
        }
        Err(LeaseError::Store {
            message: format!("lease {} under heavy contention", mutations[0].key),
            retryable: true,
            source: None,
        })
    }

    async fn delete(&self, key: &ShardId) -> Result<(), LeaseError> {
        self.write(&self.lease_pk(key), Op::DeleteItem, "delete", self.lease_size(key).unwrap_or(0), false).await?;
        self.inner.delete(key).await?;
        self.sizes().leases.remove(key);
        Ok(())
    }

    async fn delete_ended(&self, seen: &Lease) -> Result<bool, LeaseError> {
        let bytes = self.lease_size(&seen.key).unwrap_or(0);
        self.write(&self.lease_pk(&seen.key), Op::DeleteItem, "delete (ended lease)", bytes, false).await?;
        let deleted = self.inner.delete_ended(seen).await?;
        if deleted {
            self.sizes().leases.remove(&seen.key);
        }
        Ok(deleted)
    }

    async fn heartbeat(&self, worker: &WorkerId, instance: &str, load: WorkerLoad) -> Result<(), LeaseError> {
        let bytes = worker_item_bytes(&self.worker_pk(worker), worker);
        self.write(&self.worker_pk(worker), Op::UpdateItem, "update (heartbeat)", bytes, false).await?;
        match self.inner.heartbeat(worker, instance, load).await {
            Err(LeaseError::WorkerIdInUse { .. }) => {
                // The adapter reads the record to name the process that has it.
                self.read(&self.worker_pk(worker), Op::GetItem, "get (worker)", bytes).await?;
                self.inner.heartbeat(worker, instance, load).await
            }
            Ok(()) => {
                self.sizes().workers.insert(worker.clone(), bytes);
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    async fn claim_worker(&self, seen: &WorkerHeartbeat, instance: &str) -> Result<bool, LeaseError> {
        let bytes = worker_item_bytes(&self.worker_pk(&seen.worker), &seen.worker);
        self.write(&self.worker_pk(&seen.worker), Op::UpdateItem, "update (claim worker)", bytes, false).await?;
        self.inner.claim_worker(seen, instance).await
    }

    async fn namespace_meta(&self) -> Result<Option<NamespaceMeta>, LeaseError> {
        let bytes = self.sizes().meta.unwrap_or(0);
        self.read(&self.namespace, Op::GetItem, "get (namespace)", bytes).await?;
        self.inner.namespace_meta().await
    }

    async fn put_namespace_meta(
        &self,
        meta: &NamespaceMeta,
        expected: Option<&NamespaceMeta>,
    ) -> Result<bool, LeaseError> {
        let bytes = meta_item_bytes(&self.namespace, &meta.stream);
        self.write(&self.namespace, Op::PutItem, "put (namespace)", bytes, false).await?;
        let put = self.inner.put_namespace_meta(meta, expected).await?;
        if put {
            self.sizes().meta = Some(bytes);
        }
        Ok(put)
    }

    async fn list_workers(&self) -> Result<Vec<WorkerHeartbeat>, LeaseError> {
        self.query_workers(Consistency::Strong).await?;
        self.inner.list_workers().await
    }

    async fn list_workers_relaxed(&self) -> Result<Vec<WorkerHeartbeat>, LeaseError> {
        self.query_workers(Consistency::Eventual).await?;
        self.inner.list_workers().await
    }

    async fn remove_worker(&self, worker: &WorkerId, instance: &str) -> Result<(), LeaseError> {
        let bytes = worker_item_bytes(&self.worker_pk(worker), worker);
        self.write(&self.worker_pk(worker), Op::DeleteItem, "delete (worker)", bytes, false).await?;
        self.inner.remove_worker(worker, instance).await?;
        // Gone unless another process holds the id (its record stays, same size).
        let still = self.inner.list_workers().await?.iter().any(|w| w.worker == *worker);
        if !still {
            self.sizes().workers.remove(worker);
        }
        Ok(())
    }
}
