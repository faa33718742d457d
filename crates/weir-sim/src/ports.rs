//! One process's view of the world: the ports a worker is built with, each call through
//! the process's [`Gate`].

use std::sync::Arc;

use async_trait::async_trait;
use base64::Engine;
use bytes::Bytes;
use rand::Rng;
use weir_core::ports::{FunctionInvoker, InvokeError};
use weir_core::ports::{
    LeaseTable, NamespaceMeta, ObjectMeta, ObjectSink, PutOptions, PutOutcome, ReadError, ReadMode, ShardInfo,
    ShardReader, ShardSubscription, SinkError, StreamCatalog, WorkerHeartbeat, WorkerLoad,
};
use weir_core::{Lease, LeaseError, LeaseMutation, NewLease, RecordBatch, ShardId, StartingPosition, WorkerId};

use crate::gate::{Fate, Gate, Op};

fn table_error(what: &str) -> LeaseError {
    LeaseError::Store { message: format!("simulated: {what}"), retryable: true, source: None }
}

fn store_error(what: &str) -> SinkError {
    SinkError::Store { message: format!("simulated: {what}"), retryable: true, source: None }
}

/// Passes a call through the gate: `Fail` skips it, `LoseReply` runs it and answers
/// `lost` instead.
async fn through<T, E>(
    gate: &Gate,
    op: Op,
    what: String,
    call: impl std::future::Future<Output = Result<T, E>>,
    failed: impl Fn(&str) -> E,
) -> Result<T, E> {
    let ticket = gate.enter(op, &what).await;
    let r = match ticket.fate {
        Fate::Fail => Err(failed("call failed")),
        Fate::Apply | Fate::LoseReply => call.await,
    };
    gate.leave(&ticket).await;
    if ticket.fate == Fate::LoseReply {
        return Err(failed("reply lost"));
    }
    r
}

/// The lease table as one process sees it.
#[derive(Debug, Clone)]
pub struct NodeTable(pub Arc<Gate>);

#[async_trait]
impl LeaseTable for NodeTable {
    async fn create_if_absent(&self, lease: NewLease) -> Result<bool, LeaseError> {
        let what = format!("create {}", lease.key);
        let w = self.0.world();
        through(&self.0, Op::LeaseWrite, what, w.table().create_if_absent(lease), table_error).await
    }

    async fn list(&self) -> Result<Vec<Lease>, LeaseError> {
        through(&self.0, Op::LeaseRead, "list".into(), self.0.world().table().list(), table_error).await
    }

    async fn get(&self, key: &ShardId) -> Result<Option<Lease>, LeaseError> {
        through(&self.0, Op::LeaseRead, format!("get {key}"), self.0.world().table().get(key), table_error).await
    }

    async fn mutate(&self, m: &LeaseMutation) -> Result<Lease, LeaseError> {
        let what = format!("{} {:?} at {}", m.key, short(&m.change), m.expected_counter);
        through(&self.0, Op::LeaseWrite, what, self.0.world().mutate(m), table_error).await
    }

    async fn mutate_all(&self, ms: &[LeaseMutation]) -> Result<Vec<Lease>, LeaseError> {
        let keys: Vec<String> = ms.iter().map(|m| format!("{}@{}", m.key, m.expected_counter)).collect();
        let what = format!("transaction {}", keys.join(","));
        through(&self.0, Op::LeaseBatch, what, self.0.world().mutate_all(ms), table_error).await
    }

    async fn delete(&self, key: &ShardId) -> Result<(), LeaseError> {
        through(&self.0, Op::LeaseWrite, format!("delete {key}"), self.0.world().table().delete(key), table_error).await
    }

    async fn delete_ended(&self, seen: &Lease) -> Result<bool, LeaseError> {
        let what = format!("delete ended {}", seen.key);
        through(&self.0, Op::LeaseWrite, what, self.0.world().table().delete_ended(seen), table_error).await
    }

    async fn heartbeat(&self, worker: &WorkerId, instance: &str, load: WorkerLoad) -> Result<(), LeaseError> {
        let what = format!("heartbeat {worker}");
        let call = self.0.world().table().heartbeat(worker, instance, load);
        through(&self.0, Op::LeaseWrite, what, call, table_error).await
    }

    async fn claim_worker(&self, seen: &WorkerHeartbeat, instance: &str) -> Result<bool, LeaseError> {
        let what = format!("claim worker {}", seen.worker);
        through(&self.0, Op::LeaseWrite, what, self.0.world().table().claim_worker(seen, instance), table_error).await
    }

    async fn namespace_meta(&self) -> Result<Option<NamespaceMeta>, LeaseError> {
        through(&self.0, Op::LeaseRead, "namespace".into(), self.0.world().table().namespace_meta(), table_error).await
    }

    async fn put_namespace_meta(
        &self,
        meta: &NamespaceMeta,
        expected: Option<&NamespaceMeta>,
    ) -> Result<bool, LeaseError> {
        let call = self.0.world().table().put_namespace_meta(meta, expected);
        through(&self.0, Op::LeaseWrite, "namespace write".into(), call, table_error).await
    }

    async fn list_workers(&self) -> Result<Vec<WorkerHeartbeat>, LeaseError> {
        through(&self.0, Op::LeaseRead, "workers".into(), self.0.world().table().list_workers(), table_error).await
    }

    async fn remove_worker(&self, worker: &WorkerId, instance: &str) -> Result<(), LeaseError> {
        let what = format!("remove worker {worker}");
        let call = self.0.world().table().remove_worker(worker, instance);
        through(&self.0, Op::LeaseWrite, what, call, table_error).await
    }
}

/// A lease change, short, for the trace.
fn short(change: &weir_core::LeaseChange) -> String {
    use weir_core::LeaseChange as C;
    match change {
        C::Take { owner } => format!("take by {owner}"),
        C::Renew => "renew".into(),
        C::RequestHandoff { to } => format!("handoff to {to}"),
        C::Transfer { to } => format!("transfer to {to}"),
        C::Release => "release".into(),
        C::RecordIntents { consumer, intents, replacing } => {
            format!("{} intents of {consumer} replacing {}", intents.len(), replacing.len())
        }
        C::Checkpoint { checkpoints, ended_with_children } => {
            let cps: Vec<String> = checkpoints.iter().map(|(c, p)| format!("{c}={p:?}")).collect();
            format!("checkpoint {}{}", cps.join(","), if ended_with_children.is_some() { " end" } else { "" })
        }
        other => format!("{other:?}"),
    }
}

/// The object store as one process sees it.
#[derive(Debug, Clone)]
pub struct NodeStore(pub Arc<Gate>);

#[async_trait]
impl ObjectSink for NodeStore {
    async fn put_if_absent(&self, key: &str, body: Bytes, options: &PutOptions) -> Result<PutOutcome, SinkError> {
        let what = format!("put {key} ({} bytes)", body.len());
        through(&self.0, Op::Put, what, self.0.world().put(key, body, options), store_error).await
    }

    async fn get(&self, key: &str) -> Result<Option<Bytes>, SinkError> {
        through(&self.0, Op::ObjectRead, format!("get {key}"), self.0.world().store().get(key), store_error).await
    }

    async fn stat(&self, key: &str) -> Result<Option<ObjectMeta>, SinkError> {
        through(&self.0, Op::ObjectRead, format!("stat {key}"), self.0.world().store().stat(key), store_error).await
    }

    async fn list(&self, prefix: &str) -> Result<Vec<ObjectMeta>, SinkError> {
        let call = self.0.world().store().list(prefix);
        through(&self.0, Op::ObjectRead, format!("list {prefix}"), call, store_error).await
    }

    async fn delete(&self, key: &str) -> Result<(), SinkError> {
        through(&self.0, Op::Delete, format!("delete {key}"), self.0.world().delete(key), store_error).await
    }

    fn location(&self) -> String {
        "sim://".into()
    }
}

/// The stream as one process reads it.
#[derive(Debug, Clone)]
pub struct NodeStream(pub Arc<Gate>);

fn read_error(what: &str) -> ReadError {
    ReadError::Transient(format!("simulated: {what}"))
}

#[async_trait]
impl ShardReader for NodeStream {
    async fn open(
        &self,
        shard: &ShardId,
        from: &StartingPosition,
        mode: ReadMode,
    ) -> Result<Box<dyn ShardSubscription>, ReadError> {
        let what = format!("open {shard} {from:?}");
        let stream = self.0.world().stream.clone();
        let inner = through(&self.0, Op::StreamRead, what, stream.open(shard, from, mode), read_error).await?;
        Ok(Box::new(NodeSubscription { gate: self.0.clone(), inner, shard: shard.clone() }))
    }
}

#[async_trait]
impl StreamCatalog for NodeStream {
    async fn list_shards(&self) -> Result<Vec<ShardInfo>, ReadError> {
        let stream = self.0.world().stream.clone();
        through(&self.0, Op::StreamRead, "list shards".into(), async move { stream.list_shards().await }, read_error)
            .await
    }
}

struct NodeSubscription {
    gate: Arc<Gate>,
    inner: Box<dyn ShardSubscription>,
    shard: ShardId,
}

#[async_trait]
impl ShardSubscription for NodeSubscription {
    async fn next(&mut self) -> Result<Option<RecordBatch>, ReadError> {
        let ticket = self.gate.enter(Op::StreamRead, &format!("next {}", self.shard)).await;
        // A read has no effect: a lost reply is a failure.
        if ticket.fate != Fate::Apply {
            self.gate.leave(&ticket).await;
            return Err(read_error("read failed"));
        }
        let r = self.inner.next().await;
        self.gate.leave(&ticket).await;
        r
    }
}

/// The transformation Lambda as one process calls it: records come back as they went,
/// but a record fails (`ProcessingFailed`) with the world's current chance, and a whole
/// invocation fails with the port's fault rates.
#[derive(Debug, Clone)]
pub struct NodeLambda(pub Arc<Gate>);

#[async_trait]
impl FunctionInvoker for NodeLambda {
    async fn invoke(&self, _function: &str, payload: Bytes) -> Result<Bytes, InvokeError> {
        let failed = |what: &str| InvokeError {
            code: "Lambda.ServiceException",
            message: format!("simulated: {what}"),
            retryable: true,
        };
        let world = self.0.world().clone();
        let call = async move {
            let event: serde_json::Value = serde_json::from_slice(&payload).map_err(|e| failed(&e.to_string()))?;
            let p = world.failing_records();
            let empty = Vec::new();
            let records: Vec<serde_json::Value> = event["records"]
                .as_array()
                .unwrap_or(&empty)
                .iter()
                .map(|r| {
                    let (id, data) = (&r["recordId"], &r["data"]);
                    if p > 0.0 && world.rng().random_bool(p) {
                        let raw = base64::engine::general_purpose::STANDARD
                            .decode(data.as_str().unwrap_or_default())
                            .unwrap_or_default();
                        let ids: Vec<String> = crate::records::ids_in(&String::from_utf8_lossy(&raw))
                            .iter()
                            .map(ToString::to_string)
                            .collect();
                        world.note(format_args!("lambda fails {}", ids.join(",")));
                        serde_json::json!({"recordId": id, "result": "ProcessingFailed"})
                    } else {
                        serde_json::json!({"recordId": id, "result": "Ok", "data": data})
                    }
                })
                .collect();
            Ok(Bytes::from(serde_json::json!({ "records": records }).to_string()))
        };
        through(&self.0, Op::Invoke, "invoke".into(), call, failed).await
    }
}
