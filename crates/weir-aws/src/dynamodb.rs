//! Lease table on DynamoDB.
//!
//! One table can hold many namespaces (an application, replay jobs). The namespace
//! record has the namespace as its hash key `pk` (range key `sk` `meta`). Worker
//! records are spread over [`WORKER_PARTITIONS`] hash keys, `<namespace>#workers-<n>`
//! (range key `worker#<id>`; every lease cycle of every worker reads them all), and
//! leases over [`LEASE_PARTITIONS`] hash keys,
//! `<namespace>#leases-<n>` with `n` a stable hash of the shard id (range key
//! `lease#<shard>`): DynamoDB serves at most 1,000 write units a second per hash key
//! value, and a checkpoint a second per shard passes that at about 1,000 shards. The
//! namespace record names both counts (`buckets`, `worker_buckets`); a namespace
//! written by a weir that kept its leases or its worker records under the namespace
//! itself (a record without the count, or such items without a record) keeps that
//! layout, read and written as it was. A lease
//! item keeps `owner`, `counter` and `handoff_to` as top-level attributes (conditions
//! and operators read them) and the whole lease as JSON in `lease`.
//!
//! A mutation reads the item (strongly consistent), applies
//! [`LeaseMutation::apply`] - the one definition of the rules, shared with the other
//! tables - and writes the result with a condition that the item still has the owner,
//! counter and handoff request it was read with. If that condition fails because of a
//! concurrent change, the read-apply-write is retried: the mutation's own expectations
//! (the owner and counter its writer saw) decide, exactly as in the other tables.
//! `ConditionalCheckFailed` never counts as success.
//!
//! Reads are strongly consistent, but for [`LeaseTable::list_relaxed`] and
//! [`LeaseTable::list_workers_relaxed`] (eventually consistent, half the read units).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::config::http::HttpResponse;
use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodb::types::{
    AttributeDefinition, AttributeValue, BillingMode, KeySchemaElement, KeyType, Put, ScalarAttributeType, TableStatus,
    TransactWriteItem,
};
use futures::StreamExt;
use weir_core::ports::{
    LEASE_PARTITIONS, LeaseTable, NamespaceMeta, WORKER_PARTITIONS, WorkerHeartbeat, WorkerLoad, lease_partition,
    lease_partition_key, worker_partition, worker_partition_key,
};
use weir_core::{Lease, LeaseChange, LeaseError, LeaseMutation, NewLease, ShardId, WorkerId};

use crate::error::{ErrorClass, classify, describe};

type Item = HashMap<String, AttributeValue>;

/// How a read is made: strongly consistent, or eventually (half the read units).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Consistency {
    Strong,
    Eventual,
}

/// Queries of a listing in flight at once.
const LISTING_CONCURRENCY: usize = 8;

/// Read-apply-write rounds before giving up on a lease that keeps changing.
const CONTENTION_RETRIES: usize = 16;

/// A condition that the item still has the counter, owner and handoff request of
/// `stored`, with its placeholder values.
fn unchanged_since(stored: &Lease) -> (String, HashMap<String, AttributeValue>) {
    let mut cond = vec!["#counter = :seen_counter".to_owned()];
    let mut values = HashMap::from([(":seen_counter".to_owned(), AttributeValue::N(stored.counter.to_string()))]);
    for (attr, seen) in [("owner", &stored.owner), ("handoff_to", &stored.handoff_to)] {
        match seen {
            Some(v) => {
                cond.push(format!("#{attr} = :seen_{attr}"));
                values.insert(format!(":seen_{attr}"), s(v.as_str()));
            }
            None => cond.push(format!("attribute_not_exists(#{attr})")),
        }
    }
    (cond.join(" AND "), values)
}

fn condition_names() -> HashMap<String, String> {
    ["counter", "owner", "handoff_to"].into_iter().map(|a| (format!("#{a}"), a.to_owned())).collect()
}

fn contention(key: &ShardId) -> LeaseError {
    LeaseError::Store { message: format!("lease {key} under heavy contention"), retryable: true, source: None }
}

/// Leases in a DynamoDB table, scoped to a namespace.
#[derive(Debug)]
pub struct DynamoDbLeaseTable {
    client: Client,
    table: String,
    namespace: String,
    /// Hash keys the leases are spread over; 0: every lease under the namespace (the
    /// layout of a namespace written before leases were spread).
    partitions: AtomicU32,
    /// Hash keys the worker records are spread over; 0: under the namespace.
    worker_partitions: AtomicU32,
}

impl Clone for DynamoDbLeaseTable {
    fn clone(&self) -> Self {
        Self {
            client: self.client.clone(),
            table: self.table.clone(),
            namespace: self.namespace.clone(),
            partitions: AtomicU32::new(self.partitions()),
            worker_partitions: AtomicU32::new(self.worker_partitions()),
        }
    }
}

pub(crate) fn store_err<E>(
    what: &str,
    table: &str,
    e: aws_sdk_dynamodb::error::SdkError<E, aws_sdk_dynamodb::config::http::HttpResponse>,
) -> LeaseError
where
    E: aws_sdk_dynamodb::error::ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
{
    let message = format!("dynamodb {what} on table {table}: {}", describe(&e));
    let retryable = classify(&e) != ErrorClass::Permanent;
    LeaseError::Store { message, retryable, source: Some(Box::new(e)) }
}

fn s(v: &str) -> AttributeValue {
    AttributeValue::S(v.to_owned())
}

impl DynamoDbLeaseTable {
    /// Uses `table` for `namespace`. With `create_if_missing`, creates the table
    /// (on-demand capacity) when it does not exist and waits until it is active;
    /// otherwise a missing table is an error that names it.
    pub async fn open(
        client: Client,
        table: &str,
        namespace: &str,
        create_if_missing: bool,
    ) -> Result<Self, LeaseError> {
        let this = Self {
            client,
            table: table.to_owned(),
            namespace: namespace.to_owned(),
            partitions: AtomicU32::new(LEASE_PARTITIONS),
            worker_partitions: AtomicU32::new(WORKER_PARTITIONS),
        };
        this.ensure_table(create_if_missing).await?;
        this.learn_layout().await?;
        Ok(this)
    }

    /// How many hash keys the leases are spread over (0: the namespace's own).
    pub fn partitions(&self) -> u32 {
        self.partitions.load(Ordering::Relaxed)
    }

    /// How many hash keys the worker records are spread over (0: the namespace's own).
    pub fn worker_partitions(&self) -> u32 {
        self.worker_partitions.load(Ordering::Relaxed)
    }

    /// Learns the namespace's layout: from its record, or, without one, from whether
    /// leases or worker records exist under the namespace itself (written by a weir
    /// from before namespace records, which kept both there). A new namespace spreads
    /// both.
    async fn learn_layout(&self) -> Result<(), LeaseError> {
        if let Some(meta) = self.read_item("meta".into(), "get (namespace)").await? {
            self.store_layout(&meta);
            return Ok(());
        }
        let mut legacy = false;
        for prefix in ["lease#", "worker#"] {
            let page = self
                .query_items(&self.namespace, prefix, Consistency::Strong)
                .limit(1)
                .send()
                .await
                .map_err(|e| store_err("query (layout)", &self.table, e))?;
            legacy |= !page.items().is_empty();
        }
        let (leases, workers) = if legacy { (0, 0) } else { (LEASE_PARTITIONS, WORKER_PARTITIONS) };
        self.partitions.store(leases, Ordering::Relaxed);
        self.worker_partitions.store(workers, Ordering::Relaxed);
        Ok(())
    }

    /// Takes the layout a namespace record names (a count it lacks: the single-key
    /// layout).
    fn store_layout(&self, meta: &Item) {
        let count = |name: &str| meta.get(name).and_then(|v| v.as_n().ok()).and_then(|n| n.parse().ok()).unwrap_or(0);
        self.partitions.store(count("buckets"), Ordering::Relaxed);
        self.worker_partitions.store(count("worker_buckets"), Ordering::Relaxed);
    }

    /// The hash key of lease `shard`.
    fn lease_pk(&self, shard: &str) -> String {
        match self.partitions() {
            0 => self.namespace.clone(),
            n => self.partition_pk(lease_partition(shard, n)),
        }
    }

    fn partition_pk(&self, partition: u32) -> String {
        lease_partition_key(&self.namespace, partition)
    }

    /// The hash keys of the worker records.
    fn worker_pks(&self) -> Vec<String> {
        match self.worker_partitions() {
            0 => vec![self.namespace.clone()],
            n => (0..n).map(|p| worker_partition_key(&self.namespace, p)).collect(),
        }
    }

    /// The key of worker `worker`'s record.
    fn worker_key(&self, worker: &WorkerId) -> Item {
        let pk = match self.worker_partitions() {
            0 => self.namespace.clone(),
            n => worker_partition_key(&self.namespace, worker_partition(worker.as_str(), n)),
        };
        HashMap::from([("pk".to_owned(), s(&pk)), ("sk".to_owned(), AttributeValue::S(format!("worker#{worker}")))])
    }

    /// The key of lease `shard`.
    fn lease_key(&self, shard: &str) -> Item {
        HashMap::from([
            ("pk".to_owned(), s(&self.lease_pk(shard))),
            ("sk".to_owned(), AttributeValue::S(format!("lease#{shard}"))),
        ])
    }

    async fn ensure_table(&self, create: bool) -> Result<(), LeaseError> {
        let missing = match self.client.describe_table().table_name(&self.table).send().await {
            Ok(out) => {
                if out.table().and_then(|t| t.table_status()) == Some(&TableStatus::Active) {
                    return Ok(());
                }
                false
            }
            Err(e) if e.as_service_error().is_some_and(|s| s.is_resource_not_found_exception()) => true,
            Err(e) => {
                let message = format!(
                    "cannot describe lease table {}: {} (needs dynamodb:DescribeTable)",
                    self.table,
                    describe(&e)
                );
                return Err(LeaseError::Store { message, retryable: false, source: Some(Box::new(e)) });
            }
        };
        if missing && !create {
            return Err(LeaseError::Store {
                message: format!(
                    "lease table {} does not exist: create it (hash key pk, range key sk, both strings) or enable leases.create_table",
                    self.table
                ),
                retryable: false,
                source: None,
            });
        }
        if missing {
            let key = |name: &str, kind| KeySchemaElement::builder().attribute_name(name).key_type(kind).build();
            let attr = |name: &str| {
                AttributeDefinition::builder().attribute_name(name).attribute_type(ScalarAttributeType::S).build()
            };
            let built = (key("pk", KeyType::Hash), key("sk", KeyType::Range), attr("pk"), attr("sk"));
            let (Ok(k1), Ok(k2), Ok(a1), Ok(a2)) = built else {
                return Err(LeaseError::Store {
                    message: "cannot build table schema".into(),
                    retryable: false,
                    source: None,
                });
            };
            let created = self
                .client
                .create_table()
                .table_name(&self.table)
                .billing_mode(BillingMode::PayPerRequest)
                .key_schema(k1)
                .key_schema(k2)
                .attribute_definitions(a1)
                .attribute_definitions(a2)
                .send()
                .await;
            if let Err(e) = created
                && !e.as_service_error().is_some_and(|s| s.is_resource_in_use_exception())
            {
                let message =
                    format!("cannot create lease table {}: {} (needs dynamodb:CreateTable)", self.table, describe(&e));
                return Err(LeaseError::Store { message, retryable: false, source: Some(Box::new(e)) });
            }
        }
        for _ in 0..120 {
            let out = self.client.describe_table().table_name(&self.table).send().await;
            if let Ok(out) = out
                && out.table().and_then(|t| t.table_status()) == Some(&TableStatus::Active)
            {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        Err(LeaseError::Store {
            message: format!("lease table {} did not become active", self.table),
            retryable: true,
            source: None,
        })
    }

    fn key(&self, sk: String) -> Item {
        HashMap::from([("pk".to_owned(), s(&self.namespace)), ("sk".to_owned(), AttributeValue::S(sk))])
    }

    /// The item `sk` of the namespace, read strongly consistent.
    async fn read_item(&self, sk: String, what: &str) -> Result<Option<Item>, LeaseError> {
        self.read_key(self.key(sk), what).await
    }

    /// The item at `key`, read strongly consistent.
    async fn read_key(&self, key: Item, what: &str) -> Result<Option<Item>, LeaseError> {
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .set_key(Some(key))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| store_err(what, &self.table, e))?;
        Ok(out.item)
    }

    /// Whether a conditional write was made: `false` when its condition failed (never
    /// counted as success); any other error is a store error.
    fn applied<T, E>(&self, what: &str, r: Result<T, SdkError<E, HttpResponse>>) -> Result<bool, LeaseError>
    where
        E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    {
        match r {
            Ok(_) => Ok(true),
            Err(e) if e.as_service_error().and_then(|s| s.code()) == Some("ConditionalCheckFailedException") => {
                Ok(false)
            }
            Err(e) => Err(store_err(what, &self.table, e)),
        }
    }

    /// One `PutItem` of `mutation` applied to `seen`, on the condition that the stored
    /// lease still has `seen`'s counter, owner and handoff request: the lease written,
    /// or `None` when the condition failed (the lease changed since `seen`).
    async fn put_if_unchanged(
        &self,
        seen: &Lease,
        mutation: &LeaseMutation,
        what: &str,
    ) -> Result<Option<Lease>, LeaseError> {
        let next = mutation.apply(seen)?;
        let (condition, values) = unchanged_since(seen);
        let r = self
            .client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(self.lease_item(&next)?))
            .condition_expression(condition)
            .set_expression_attribute_names(Some(condition_names()))
            .set_expression_attribute_values(Some(values))
            .send()
            .await;
        Ok(self.applied(what, r)?.then_some(next))
    }

    fn lease_item(&self, lease: &Lease) -> Result<Item, LeaseError> {
        let json = serde_json::to_string(lease).map_err(|e| LeaseError::store("encode lease", false, e))?;
        let mut item = self.lease_key(lease.key.as_str());
        item.insert("counter".into(), AttributeValue::N(lease.counter.to_string()));
        item.insert("lease".into(), AttributeValue::S(json));
        item.insert("ended".into(), AttributeValue::Bool(lease.ended));
        if let Some(o) = &lease.owner {
            item.insert("owner".into(), s(o.as_str()));
        }
        if let Some(h) = &lease.handoff_to {
            item.insert("handoff_to".into(), s(h.as_str()));
        }
        Ok(item)
    }

    fn decode(item: &Item) -> Result<Lease, LeaseError> {
        let json = item.get("lease").and_then(|v| v.as_s().ok()).ok_or_else(|| LeaseError::Store {
            message: "lease item without lease attribute".into(),
            retryable: false,
            source: None,
        })?;
        serde_json::from_str(json).map_err(|e| LeaseError::store("decode lease", false, e))
    }

    /// A `Query` of the items under hash key `pk` whose sort key starts with `prefix`.
    fn query_items(
        &self,
        pk: &str,
        prefix: &str,
        consistency: Consistency,
    ) -> aws_sdk_dynamodb::operation::query::builders::QueryFluentBuilder {
        self.client
            .query()
            .table_name(&self.table)
            .consistent_read(consistency == Consistency::Strong)
            .key_condition_expression("pk = :pk AND begins_with(sk, :prefix)")
            .expression_attribute_values(":pk", s(pk))
            .expression_attribute_values(":prefix", s(prefix))
    }

    /// Every item [`Self::query_items`] finds, page by page.
    async fn query(&self, pk: &str, prefix: &str, consistency: Consistency) -> Result<Vec<Item>, LeaseError> {
        let mut out = Vec::new();
        let mut start: Option<Item> = None;
        loop {
            let page = self
                .query_items(pk, prefix, consistency)
                .set_exclusive_start_key(start.take())
                .send()
                .await
                .map_err(|e| store_err("query", &self.table, e))?;
            out.extend(page.items().iter().cloned());
            match page.last_evaluated_key() {
                Some(k) if !k.is_empty() => start = Some(k.clone()),
                _ => return Ok(out),
            }
        }
    }

    /// Every item under the hash keys `pks` whose sort key starts with `prefix`, a few
    /// keys at a time.
    async fn query_all(
        &self,
        pks: Vec<String>,
        prefix: &str,
        consistency: Consistency,
    ) -> Result<Vec<Item>, LeaseError> {
        let pages: Vec<Result<Vec<Item>, LeaseError>> = futures::stream::iter(pks)
            .map(|pk| async move { self.query(&pk, prefix, consistency).await })
            .buffer_unordered(LISTING_CONCURRENCY)
            .collect()
            .await;
        let mut items = Vec::new();
        for page in pages {
            items.extend(page?);
        }
        Ok(items)
    }

    /// The hash keys of the leases, in part order (see [`LeaseTable::lease_parts`]).
    fn lease_pks(&self) -> Vec<String> {
        match self.partitions() {
            0 => vec![self.namespace.clone()],
            n => (0..n).map(|p| self.partition_pk(p)).collect(),
        }
    }

    /// Lease items decoded, in key order.
    fn decode_sorted(items: &[Item]) -> Result<Vec<Lease>, LeaseError> {
        let mut leases = items.iter().map(Self::decode).collect::<Result<Vec<_>, _>>()?;
        leases.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(leases)
    }

    async fn list_leases(&self, consistency: Consistency) -> Result<Vec<Lease>, LeaseError> {
        Self::decode_sorted(&self.query_all(self.lease_pks(), "lease#", consistency).await?)
    }

    async fn workers(&self, consistency: Consistency) -> Result<Vec<WorkerHeartbeat>, LeaseError> {
        let mut workers: Vec<WorkerHeartbeat> = self
            .query_all(self.worker_pks(), "worker#", consistency)
            .await?
            .iter()
            .filter_map(|item| {
                let id = item.get("sk")?.as_s().ok()?.strip_prefix("worker#")?.to_owned();
                let counter = item.get("counter")?.as_n().ok()?.parse().ok()?;
                let instance = item.get("instance").and_then(|v| v.as_s().ok()).cloned().unwrap_or_default();
                let number = |name: &str| item.get(name).and_then(|v| v.as_n().ok()).and_then(|n| n.parse().ok());
                let load = WorkerLoad { held: number("held").unwrap_or(0), active: number("active").unwrap_or(0) };
                Some(WorkerHeartbeat { worker: WorkerId::new(id), counter, instance, load })
            })
            .collect();
        workers.sort_by(|a, b| a.worker.cmp(&b.worker));
        Ok(workers)
    }
}

#[async_trait]
impl LeaseTable for DynamoDbLeaseTable {
    async fn create_if_absent(&self, lease: NewLease) -> Result<bool, LeaseError> {
        let item = self.lease_item(&lease.into_lease())?;
        let r = self
            .client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(item))
            .condition_expression("attribute_not_exists(pk)")
            .send()
            .await;
        self.applied("put (create lease)", r)
    }

    /// One conditional `PutItem` of the lease as taken.
    async fn create_taken(&self, lease: NewLease, owner: &WorkerId) -> Result<Option<Lease>, LeaseError> {
        let created = lease.into_lease();
        let taken = LeaseMutation::on(&created, LeaseChange::Take { owner: owner.clone() }).apply(&created)?;
        let r = self
            .client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(self.lease_item(&taken)?))
            .condition_expression("attribute_not_exists(pk)")
            .send()
            .await;
        Ok(self.applied("put (create taken lease)", r)?.then_some(taken))
    }

    async fn list(&self) -> Result<Vec<Lease>, LeaseError> {
        self.list_leases(Consistency::Strong).await
    }

    async fn list_relaxed(&self) -> Result<Vec<Lease>, LeaseError> {
        self.list_leases(Consistency::Eventual).await
    }

    /// One part per hash key of the spread layout; one for the single-key layout.
    fn lease_parts(&self) -> u32 {
        self.partitions().max(1)
    }

    async fn list_part_relaxed(&self, part: u32) -> Result<Vec<Lease>, LeaseError> {
        let Some(pk) = self.lease_pks().into_iter().nth(part as usize) else { return Ok(Vec::new()) };
        Self::decode_sorted(&self.query(&pk, "lease#", Consistency::Eventual).await?)
    }

    async fn get(&self, key: &ShardId) -> Result<Option<Lease>, LeaseError> {
        self.read_key(self.lease_key(key.as_str()), "get").await?.as_ref().map(Self::decode).transpose()
    }

    async fn mutate(&self, mutation: &LeaseMutation) -> Result<Lease, LeaseError> {
        for _ in 0..CONTENTION_RETRIES {
            let stored = self.get(&mutation.key).await?.ok_or_else(|| LeaseError::NotFound(mutation.key.clone()))?;
            // Not made: changed between our read and write; read again and re-judge.
            if let Some(next) = self.put_if_unchanged(&stored, mutation, "put (mutate lease)").await? {
                return Ok(next);
            }
        }
        Err(contention(&mutation.key))
    }

    /// One conditional `PutItem` of `change` applied to `seen` (no `GetItem` first);
    /// when the lease moved since `seen` (the condition failed), [`Self::mutate`]
    /// reads it and judges again.
    async fn mutate_seen(&self, seen: &Lease, change: LeaseChange) -> Result<Lease, LeaseError> {
        let mutation = LeaseMutation::on(seen, change);
        if let Some(next) = self.put_if_unchanged(seen, &mutation, "put (mutate seen lease)").await? {
            return Ok(next);
        }
        self.mutate(&mutation).await
    }

    async fn mutate_all(&self, mutations: &[LeaseMutation]) -> Result<Vec<Lease>, LeaseError> {
        weir_core::lease::check_batch(mutations)?;
        for _ in 0..CONTENTION_RETRIES {
            let mut items = Vec::with_capacity(mutations.len());
            let mut next_all = Vec::with_capacity(mutations.len());
            for m in mutations {
                let stored = self.get(&m.key).await?.ok_or_else(|| LeaseError::NotFound(m.key.clone()))?;
                let next = m.apply(&stored)?;
                let (condition, values) = unchanged_since(&stored);
                let put = Put::builder()
                    .table_name(&self.table)
                    .set_item(Some(self.lease_item(&next)?))
                    .condition_expression(condition)
                    .set_expression_attribute_names(Some(condition_names()))
                    .set_expression_attribute_values(Some(values))
                    .build()
                    .map_err(|e| LeaseError::store("build transaction item", false, e))?;
                items.push(TransactWriteItem::builder().put(put).build());
                next_all.push(next);
            }
            let r = self.client.transact_write_items().set_transact_items(Some(items)).send().await;
            match r {
                Ok(_) => return Ok(next_all),
                // A condition failed (a lease changed since we read it) or the items
                // conflicted with another transaction: read again and re-judge all.
                Err(e) if e.as_service_error().is_some_and(|s| s.is_transaction_canceled_exception()) => continue,
                Err(e) => return Err(store_err("transact write (mutate leases)", &self.table, e)),
            }
        }
        Err(contention(&mutations[0].key))
    }

    async fn delete(&self, key: &ShardId) -> Result<(), LeaseError> {
        self.client
            .delete_item()
            .table_name(&self.table)
            .set_key(Some(self.lease_key(key.as_str())))
            .send()
            .await
            .map_err(|e| store_err("delete", &self.table, e))?;
        Ok(())
    }

    async fn delete_ended(&self, seen: &Lease) -> Result<bool, LeaseError> {
        let r = self
            .client
            .delete_item()
            .table_name(&self.table)
            .set_key(Some(self.lease_key(seen.key.as_str())))
            .condition_expression("#counter = :counter AND #ended = :ended AND attribute_not_exists(#owner)")
            .expression_attribute_names("#counter", "counter")
            .expression_attribute_names("#ended", "ended")
            .expression_attribute_names("#owner", "owner")
            .expression_attribute_values(":counter", AttributeValue::N(seen.counter.to_string()))
            .expression_attribute_values(":ended", AttributeValue::Bool(true))
            .send()
            .await;
        self.applied("delete (ended lease)", r)
    }

    async fn heartbeat(&self, worker: &WorkerId, instance: &str, load: WorkerLoad) -> Result<(), LeaseError> {
        let r = self
            .client
            .update_item()
            .table_name(&self.table)
            .set_key(Some(self.worker_key(worker)))
            .update_expression(
                "SET #counter = if_not_exists(#counter, :zero) + :one, #instance = :me, #held = :held, #active = :active",
            )
            .condition_expression("attribute_not_exists(#instance) OR #instance = :empty OR #instance = :me")
            .expression_attribute_names("#counter", "counter")
            .expression_attribute_names("#instance", "instance")
            .expression_attribute_names("#held", "held")
            .expression_attribute_names("#active", "active")
            .expression_attribute_values(":held", AttributeValue::N(load.held.to_string()))
            .expression_attribute_values(":active", AttributeValue::N(load.active.to_string()))
            .expression_attribute_values(":zero", AttributeValue::N("0".into()))
            .expression_attribute_values(":one", AttributeValue::N("1".into()))
            .expression_attribute_values(":me", AttributeValue::S(instance.to_owned()))
            .expression_attribute_values(":empty", AttributeValue::S(String::new()))
            .send()
            .await;
        if self.applied("update (heartbeat)", r)? {
            return Ok(());
        }
        let holder = self
            .read_key(self.worker_key(worker), "get (worker)")
            .await?
            .and_then(|i| i.get("instance").and_then(|v| v.as_s().ok()).cloned())
            .unwrap_or_default();
        Err(LeaseError::WorkerIdInUse { worker: worker.clone(), instance: holder })
    }

    async fn claim_worker(&self, seen: &WorkerHeartbeat, instance: &str) -> Result<bool, LeaseError> {
        let same_instance = if seen.instance.is_empty() {
            "(attribute_not_exists(#instance) OR #instance = :seen_instance)"
        } else {
            "#instance = :seen_instance"
        };
        let r = self
            .client
            .update_item()
            .table_name(&self.table)
            .set_key(Some(self.worker_key(&seen.worker)))
            .update_expression("SET #counter = #counter + :one, #instance = :me")
            .condition_expression(format!("#counter = :seen_counter AND {same_instance}"))
            .expression_attribute_names("#counter", "counter")
            .expression_attribute_names("#instance", "instance")
            .expression_attribute_values(":one", AttributeValue::N("1".into()))
            .expression_attribute_values(":me", AttributeValue::S(instance.to_owned()))
            .expression_attribute_values(":seen_counter", AttributeValue::N(seen.counter.to_string()))
            .expression_attribute_values(":seen_instance", AttributeValue::S(seen.instance.clone()))
            .send()
            .await;
        self.applied("update (claim worker)", r)
    }

    async fn namespace_meta(&self) -> Result<Option<NamespaceMeta>, LeaseError> {
        let item = self.read_item("meta".into(), "get (namespace)").await?;
        // A record written since this table was opened (a concurrent first start, or a
        // weir that keeps leases under the namespace) decides the layout: leases are
        // written only after the namespace is claimed, which reads the record first.
        if let Some(i) = &item {
            self.store_layout(i);
        }
        Ok(item.map(|i| NamespaceMeta {
            stream: i.get("stream").and_then(|v| v.as_s().ok()).cloned().unwrap_or_default(),
            format: i.get("format").and_then(|v| v.as_n().ok()).and_then(|n| n.parse().ok()).unwrap_or(u32::MAX),
        }))
    }

    async fn put_namespace_meta(
        &self,
        meta: &NamespaceMeta,
        expected: Option<&NamespaceMeta>,
    ) -> Result<bool, LeaseError> {
        let mut item = self.key("meta".into());
        item.insert("stream".into(), AttributeValue::S(meta.stream.clone()));
        item.insert("format".into(), AttributeValue::N(meta.format.to_string()));
        item.insert("buckets".into(), AttributeValue::N(self.partitions().to_string()));
        item.insert("worker_buckets".into(), AttributeValue::N(self.worker_partitions().to_string()));
        let put = self.client.put_item().table_name(&self.table).set_item(Some(item));
        let put = match expected {
            None => put.condition_expression("attribute_not_exists(pk)"),
            Some(old) => put
                .condition_expression("#stream = :stream AND #format = :format")
                .expression_attribute_names("#stream", "stream")
                .expression_attribute_names("#format", "format")
                .expression_attribute_values(":stream", AttributeValue::S(old.stream.clone()))
                .expression_attribute_values(":format", AttributeValue::N(old.format.to_string())),
        };
        self.applied("put (namespace)", put.send().await)
    }

    async fn list_workers(&self) -> Result<Vec<WorkerHeartbeat>, LeaseError> {
        self.workers(Consistency::Strong).await
    }

    async fn list_workers_relaxed(&self) -> Result<Vec<WorkerHeartbeat>, LeaseError> {
        self.workers(Consistency::Eventual).await
    }

    async fn remove_worker(&self, worker: &WorkerId, instance: &str) -> Result<(), LeaseError> {
        let r = self
            .client
            .delete_item()
            .table_name(&self.table)
            .set_key(Some(self.worker_key(worker)))
            .condition_expression("attribute_not_exists(#instance) OR #instance = :empty OR #instance = :me")
            .expression_attribute_names("#instance", "instance")
            .expression_attribute_values(":me", AttributeValue::S(instance.to_owned()))
            .expression_attribute_values(":empty", AttributeValue::S(String::new()))
            .send()
            .await;
        // Not made: another process took the id over, and its record stays.
        self.applied("delete (worker)", r).map(|_| ())
    }
}
