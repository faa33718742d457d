//! Lease table on SQLite.
//!
//! One row per lease; the lease is stored as JSON beside its key, owner and counter.
//! Every mutation runs in a `BEGIN IMMEDIATE` transaction (it takes the database write
//! lock before reading), so two processes cannot both pass the same condition. WAL
//! mode lets readers proceed during writes; a busy timeout absorbs lock contention.
//! `synchronous=FULL`: a commit is on disk before it returns, so an OS crash or power
//! loss cannot roll back a lease write the worker acted on (with WAL, `NORMAL` syncs
//! only at checkpoints, and a lost intent or checkpoint would lose or duplicate
//! archived records).
//!
//! Group commit: a sync per write made renewals cost one sync per held lease every
//! renewal interval, and a replay of 2,000 archived objects (2,000 leases, one worker)
//! lost its own leases on a busy machine because a renewal round outlasted the
//! failover time. Mutations now queue; whoever holds the connection next judges
//! every queued one in order inside one transaction (each under its own savepoint, so
//! one refused condition or failed batch leaves the others' writes in place) and
//! syncs once. No caller is answered before that commit is on disk.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};
use tokio::sync::oneshot;
use weir_core::ports::{LeaseTable, NamespaceMeta, WorkerHeartbeat, WorkerLoad};
use weir_core::{Lease, LeaseError, LeaseMutation, NewLease, ShardId, WorkerId};

/// Lease table stored in a SQLite database file, scoped to a namespace.
#[derive(Clone)]
pub struct SqliteLeaseTable {
    conn: Arc<Mutex<Connection>>,
    /// Mutations waiting for the next group commit (see the module documentation).
    queued: Arc<Mutex<Vec<Queued>>>,
    /// Group commits made (tests).
    commits: Arc<AtomicU64>,
    namespace: Arc<str>,
    path: PathBuf,
}

/// One caller's `mutate_all`, waiting for a group commit.
struct Queued {
    batch: Vec<LeaseMutation>,
    reply: oneshot::Sender<Result<Vec<Lease>, LeaseError>>,
}

impl std::fmt::Debug for SqliteLeaseTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteLeaseTable").field("path", &self.path).field("namespace", &self.namespace).finish()
    }
}

fn store_err(what: &str, e: impl std::error::Error + Send + Sync + 'static) -> LeaseError {
    LeaseError::store(format!("sqlite {what}"), true, e)
}

/// Creates the tables, or brings those of an earlier weir up to date (worker instances,
/// worker loads), in one immediate transaction: processes opening one database at once
/// (a worker and `weir replay --status`) take turns, and the second finds the columns
/// the first added.
fn create_and_migrate(conn: &Connection) -> Result<(), LeaseError> {
    conn.execute_batch("BEGIN IMMEDIATE").map_err(|e| store_err("begin schema transaction", e))?;
    let done = (|| {
        conn.execute_batch(
            "CREATE TABLE IF NOT EXISTS leases (
                namespace TEXT NOT NULL,
                lease_key TEXT NOT NULL,
                owner TEXT,
                counter INTEGER NOT NULL,
                body TEXT NOT NULL,
                PRIMARY KEY (namespace, lease_key));
             CREATE TABLE IF NOT EXISTS workers (
                namespace TEXT NOT NULL,
                worker TEXT NOT NULL,
                counter INTEGER NOT NULL,
                instance TEXT NOT NULL DEFAULT '',
                held INTEGER NOT NULL DEFAULT 0,
                active INTEGER NOT NULL DEFAULT 0,
                PRIMARY KEY (namespace, worker));
             CREATE TABLE IF NOT EXISTS namespaces (
                namespace TEXT NOT NULL PRIMARY KEY,
                stream TEXT NOT NULL,
                format INTEGER NOT NULL);",
        )
        .map_err(|e| store_err("create tables", e))?;
        let has = |column: &str| {
            conn.prepare("SELECT 1 FROM pragma_table_info('workers') WHERE name = ?1")
                .and_then(|mut s| s.exists([column]))
                .map_err(|e| store_err("read the workers table", e))
        };
        // Databases of a weir without worker instances.
        if !has("instance")? {
            conn.execute_batch("ALTER TABLE workers ADD COLUMN instance TEXT NOT NULL DEFAULT ''")
                .map_err(|e| store_err("add workers.instance", e))?;
        }
        // Databases of a weir whose heartbeats reported no load.
        if !has("held")? {
            conn.execute_batch(
                "ALTER TABLE workers ADD COLUMN held INTEGER NOT NULL DEFAULT 0;
                 ALTER TABLE workers ADD COLUMN active INTEGER NOT NULL DEFAULT 0;",
            )
            .map_err(|e| store_err("add workers.held and workers.active", e))?;
        }
        Ok(())
    })();
    let end = if done.is_ok() { "COMMIT" } else { "ROLLBACK" };
    conn.execute_batch(end).map_err(|e| store_err("end schema transaction", e))?;
    done
}

impl SqliteLeaseTable {
    /// Opens (creating if needed) the database at `path` and the lease namespace.
    pub fn open(path: impl AsRef<Path>, namespace: &str) -> Result<Self, LeaseError> {
        let path = path.as_ref().to_path_buf();
        let conn = Connection::open(&path).map_err(|e| store_err("open", e))?;
        conn.busy_timeout(Duration::from_secs(10)).map_err(|e| store_err("busy timeout", e))?;
        // Switching to WAL takes the database exclusively and answers "locked" at once
        // (without the busy handler) while another process opens it: retried here.
        let mut patience = 0;
        while let Err(e) = conn.pragma_update(None, "journal_mode", "WAL") {
            let busy =
                matches!(&e, rusqlite::Error::SqliteFailure(f, _) if f.code == rusqlite::ErrorCode::DatabaseBusy);
            if !busy || patience >= 1_000 {
                return Err(store_err("wal", e));
            }
            patience += 1;
            std::thread::sleep(Duration::from_millis(10));
        }
        conn.pragma_update(None, "synchronous", "FULL").map_err(|e| store_err("synchronous", e))?;
        create_and_migrate(&conn)?;
        Ok(Self {
            conn: Arc::new(Mutex::new(conn)),
            queued: Arc::default(),
            commits: Arc::default(),
            namespace: namespace.into(),
            path,
        })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    async fn with<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Connection, &str) -> Result<T, LeaseError> + Send + 'static,
    ) -> Result<T, LeaseError> {
        let conn = self.conn.clone();
        let ns = self.namespace.clone();
        tokio::task::spawn_blocking(move || {
            let mut guard = conn.lock().unwrap_or_else(|p| p.into_inner());
            f(&mut guard, &ns)
        })
        .await
        .map_err(|e| store_err("worker thread", e))?
    }
}

fn decode(body: &str) -> Result<Lease, LeaseError> {
    serde_json::from_str(body).map_err(|e| LeaseError::store("sqlite lease decode", false, e))
}

fn encode(lease: &Lease) -> Result<String, LeaseError> {
    serde_json::to_string(lease).map_err(|e| LeaseError::store("sqlite lease encode", false, e))
}

/// Judges and writes every queued batch in one immediate transaction (each batch all
/// or nothing under its own savepoint), commits once and answers each caller.
fn commit_queued(c: &mut Connection, ns: &str, queued: &Mutex<Vec<Queued>>, commits: &AtomicU64) {
    let batches = std::mem::take(&mut *queued.lock().unwrap_or_else(|p| p.into_inner()));
    if batches.is_empty() {
        return;
    }
    let mut tx = match c.transaction_with_behavior(TransactionBehavior::Immediate) {
        Ok(tx) => tx,
        Err(e) => return fail_all(batches.into_iter().map(|q| q.reply), "begin", e),
    };
    let mut answers = Vec::with_capacity(batches.len());
    for q in batches {
        let result = tx.savepoint().map_err(|e| store_err("savepoint", e)).and_then(|sp| {
            let written = apply_batch(&sp, ns, &q.batch)?;
            sp.commit().map_err(|e| store_err("release savepoint", e))?;
            Ok(written)
        });
        // A failed batch's savepoint rolled back when it was dropped.
        answers.push((q.reply, result));
    }
    match tx.commit() {
        Ok(()) => {
            commits.fetch_add(1, Ordering::Relaxed);
            answers.into_iter().for_each(|(reply, result)| drop(reply.send(result)));
        }
        Err(e) => fail_all(answers.into_iter().map(|(reply, _)| reply), "commit", e),
    }
}

/// Answers every caller of a group commit that failed at `what` with its error.
fn fail_all(
    replies: impl Iterator<Item = oneshot::Sender<Result<Vec<Lease>, LeaseError>>>,
    what: &str,
    e: rusqlite::Error,
) {
    let e = Arc::new(e);
    replies.for_each(|reply| drop(reply.send(Err(store_err(what, SharedError(e.clone()))))));
}

/// Judges and writes one batch on `tx` (a savepoint); an error leaves the caller to
/// roll it back.
fn apply_batch(tx: &Connection, ns: &str, batch: &[LeaseMutation]) -> Result<Vec<Lease>, LeaseError> {
    let mut out = Vec::with_capacity(batch.len());
    for m in batch {
        let body: Option<String> = tx
            .query_row(
                "SELECT body FROM leases WHERE namespace = ?1 AND lease_key = ?2",
                params![ns, m.key.as_str()],
                |r| r.get(0),
            )
            .optional()
            .map_err(|e| store_err("read for update", e))?;
        let stored = decode(&body.ok_or_else(|| LeaseError::NotFound(m.key.clone()))?)?;
        let next = m.apply(&stored)?;
        tx.execute(
            "UPDATE leases SET owner = ?3, counter = ?4, body = ?5
             WHERE namespace = ?1 AND lease_key = ?2",
            params![
                ns,
                next.key.as_str(),
                next.owner.as_ref().map(|o| o.to_string()),
                i64::try_from(next.counter).unwrap_or(i64::MAX),
                encode(&next)?
            ],
        )
        .map_err(|e| store_err("update", e))?;
        out.push(next);
    }
    Ok(out)
}

/// One SQLite error given to every caller of a failed group commit.
#[derive(Debug)]
struct SharedError(Arc<rusqlite::Error>);

impl std::fmt::Display for SharedError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for SharedError {}

#[async_trait]
impl LeaseTable for SqliteLeaseTable {
    async fn create_if_absent(&self, lease: NewLease) -> Result<bool, LeaseError> {
        let lease = lease.into_lease();
        let body = encode(&lease)?;
        self.with(move |c, ns| {
            let n = c
                .execute(
                    "INSERT OR IGNORE INTO leases (namespace, lease_key, owner, counter, body)
                     VALUES (?1, ?2, NULL, 0, ?3)",
                    params![ns, lease.key.as_str(), body],
                )
                .map_err(|e| store_err("insert", e))?;
            Ok(n == 1)
        })
        .await
    }

    async fn list(&self) -> Result<Vec<Lease>, LeaseError> {
        self.with(|c, ns| {
            let mut stmt = c
                .prepare("SELECT body FROM leases WHERE namespace = ?1 ORDER BY lease_key")
                .map_err(|e| store_err("prepare list", e))?;
            let rows = stmt.query_map(params![ns], |r| r.get::<_, String>(0)).map_err(|e| store_err("list", e))?;
            let mut out = Vec::new();
            for row in rows {
                out.push(decode(&row.map_err(|e| store_err("list row", e))?)?);
            }
            Ok(out)
        })
        .await
    }

    async fn get(&self, key: &ShardId) -> Result<Option<Lease>, LeaseError> {
        let key = key.clone();
        self.with(move |c, ns| {
            let body: Option<String> = c
                .query_row(
                    "SELECT body FROM leases WHERE namespace = ?1 AND lease_key = ?2",
                    params![ns, key.as_str()],
                    |r| r.get(0),
                )
                .optional()
                .map_err(|e| store_err("get", e))?;
            body.as_deref().map(decode).transpose()
        })
        .await
    }

    async fn mutate(&self, mutation: &LeaseMutation) -> Result<Lease, LeaseError> {
        let mut out = self.mutate_all(std::slice::from_ref(mutation)).await?;
        out.pop().ok_or_else(|| LeaseError::Invalid("empty result".into()))
    }

    async fn mutate_all(&self, mutations: &[LeaseMutation]) -> Result<Vec<Lease>, LeaseError> {
        weir_core::lease::check_batch(mutations)?;
        let (reply, answer) = oneshot::channel();
        self.queued.lock().unwrap_or_else(|p| p.into_inner()).push(Queued { batch: mutations.to_vec(), reply });
        let (queued, commits) = (self.queued.clone(), self.commits.clone());
        // Under the connection: this caller's mutations, and every other queued one,
        // unless an earlier holder already committed them.
        self.with(move |c, ns| {
            commit_queued(c, ns, &queued, &commits);
            Ok(())
        })
        .await?;
        answer.await.map_err(|e| store_err("group commit", e))?
    }

    async fn delete(&self, key: &ShardId) -> Result<(), LeaseError> {
        let key = key.clone();
        self.with(move |c, ns| {
            c.execute("DELETE FROM leases WHERE namespace = ?1 AND lease_key = ?2", params![ns, key.as_str()])
                .map_err(|e| store_err("delete", e))?;
            Ok(())
        })
        .await
    }

    async fn delete_ended(&self, seen: &Lease) -> Result<bool, LeaseError> {
        let (key, counter) = (seen.key.clone(), i64::try_from(seen.counter).unwrap_or(i64::MAX));
        self.with(move |c, ns| {
            let tx = c.transaction_with_behavior(TransactionBehavior::Immediate).map_err(|e| store_err("begin", e))?;
            let body: Option<String> = tx
                .query_row(
                    "SELECT body FROM leases WHERE namespace = ?1 AND lease_key = ?2 AND counter = ?3 AND owner IS NULL",
                    params![ns, key.as_str(), counter],
                    |r| r.get(0),
                )
                .optional()
                .map_err(|e| store_err("read for delete", e))?;
            let Some(body) = body else { return Ok(false) };
            if !decode(&body)?.ended {
                return Ok(false);
            }
            tx.execute("DELETE FROM leases WHERE namespace = ?1 AND lease_key = ?2", params![ns, key.as_str()])
                .map_err(|e| store_err("delete", e))?;
            tx.commit().map_err(|e| store_err("commit", e))?;
            Ok(true)
        })
        .await
    }

    async fn heartbeat(&self, worker: &WorkerId, instance: &str, load: WorkerLoad) -> Result<(), LeaseError> {
        let (worker, instance) = (worker.clone(), instance.to_owned());
        self.with(move |c, ns| {
            let changed = c
                .execute(
                    "INSERT INTO workers (namespace, worker, counter, instance, held, active) VALUES (?1, ?2, 1, ?3, ?4, ?5)
                     ON CONFLICT (namespace, worker) DO UPDATE SET counter = counter + 1, instance = excluded.instance,
                       held = excluded.held, active = excluded.active
                     WHERE workers.instance = '' OR workers.instance = excluded.instance",
                    params![ns, worker.as_str(), instance, load.held, load.active],
                )
                .map_err(|e| store_err("heartbeat", e))?;
            if changed == 0 {
                let holder: String = c
                    .query_row(
                        "SELECT instance FROM workers WHERE namespace = ?1 AND worker = ?2",
                        params![ns, worker.as_str()],
                        |r| r.get(0),
                    )
                    .map_err(|e| store_err("read worker", e))?;
                return Err(LeaseError::WorkerIdInUse { worker, instance: holder });
            }
            Ok(())
        })
        .await
    }

    async fn claim_worker(&self, seen: &WorkerHeartbeat, instance: &str) -> Result<bool, LeaseError> {
        let (seen, instance) = (seen.clone(), instance.to_owned());
        self.with(move |c, ns| {
            let changed = c
                .execute(
                    "UPDATE workers SET counter = counter + 1, instance = ?3
                     WHERE namespace = ?1 AND worker = ?2 AND counter = ?4 AND instance = ?5",
                    params![ns, seen.worker.as_str(), instance, seen.counter as i64, seen.instance],
                )
                .map_err(|e| store_err("claim worker", e))?;
            Ok(changed == 1)
        })
        .await
    }

    async fn namespace_meta(&self) -> Result<Option<NamespaceMeta>, LeaseError> {
        self.with(|c, ns| {
            c.query_row("SELECT stream, format FROM namespaces WHERE namespace = ?1", params![ns], |r| {
                Ok(NamespaceMeta { stream: r.get(0)?, format: u32::try_from(r.get::<_, i64>(1)?).unwrap_or(u32::MAX) })
            })
            .optional()
            .map_err(|e| store_err("read namespace", e))
        })
        .await
    }

    async fn put_namespace_meta(
        &self,
        meta: &NamespaceMeta,
        expected: Option<&NamespaceMeta>,
    ) -> Result<bool, LeaseError> {
        let (meta, expected) = (meta.clone(), expected.cloned());
        self.with(move |c, ns| {
            let changed = match &expected {
                None => c.execute(
                    "INSERT INTO namespaces (namespace, stream, format) VALUES (?1, ?2, ?3) ON CONFLICT DO NOTHING",
                    params![ns, meta.stream, meta.format],
                ),
                Some(old) => c.execute(
                    "UPDATE namespaces SET stream = ?2, format = ?3 WHERE namespace = ?1 AND stream = ?4 AND format = ?5",
                    params![ns, meta.stream, meta.format, old.stream, old.format],
                ),
            }
            .map_err(|e| store_err("write namespace", e))?;
            Ok(changed == 1)
        })
        .await
    }

    async fn list_workers(&self) -> Result<Vec<WorkerHeartbeat>, LeaseError> {
        self.with(|c, ns| {
            let mut stmt = c
                .prepare(
                    "SELECT worker, counter, instance, held, active FROM workers WHERE namespace = ?1 ORDER BY worker",
                )
                .map_err(|e| store_err("prepare workers", e))?;
            let rows = stmt
                .query_map(params![ns], |r| {
                    Ok(WorkerHeartbeat {
                        worker: WorkerId::new(r.get::<_, String>(0)?),
                        counter: u64::try_from(r.get::<_, i64>(1)?).unwrap_or(0),
                        instance: r.get(2)?,
                        load: WorkerLoad {
                            held: u32::try_from(r.get::<_, i64>(3)?).unwrap_or(0),
                            active: u32::try_from(r.get::<_, i64>(4)?).unwrap_or(0),
                        },
                    })
                })
                .map_err(|e| store_err("workers", e))?;
            rows.collect::<Result<Vec<_>, _>>().map_err(|e| store_err("worker row", e))
        })
        .await
    }

    async fn remove_worker(&self, worker: &WorkerId, instance: &str) -> Result<(), LeaseError> {
        let (worker, instance) = (worker.clone(), instance.to_owned());
        self.with(move |c, ns| {
            c.execute(
                "DELETE FROM workers WHERE namespace = ?1 AND worker = ?2 AND (instance = '' OR instance = ?3)",
                params![ns, worker.as_str(), instance],
            )
            .map_err(|e| store_err("remove worker", e))?;
            Ok(())
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_core::{Checkpoint, LeaseChange};

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn passes_lease_table_conformance() {
        let dir = tempfile::tempdir().unwrap();
        let n = std::sync::atomic::AtomicU32::new(0);
        let path = dir.path().join("leases.db");
        weir_testkit::conformance::lease_table_suite(|| {
            // Every check gets its own namespace in one shared file.
            let ns = format!("ns{}", n.fetch_add(1, std::sync::atomic::Ordering::SeqCst));
            let t = SqliteLeaseTable::open(&path, &ns).unwrap();
            async move { Arc::new(t) as Arc<dyn LeaseTable> }
        })
        .await;
    }

    /// Writes that arrive while another holds the database are judged one by one in a
    /// single commit: renewals of many leases cost one sync, a refused condition or a
    /// failed batch among them leaves the others written, and no caller is answered
    /// before the commit.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn queued_writes_share_one_commit_and_keep_their_own_outcome() {
        use weir_testkit::fixtures::taken_lease;
        let dir = tempfile::tempdir().unwrap();
        let t = SqliteLeaseTable::open(dir.path().join("leases.db"), "app").unwrap();
        let mut held = Vec::new();
        for i in 0..100 {
            held.push(taken_lease(&t, &format!("s{i:03}"), "a").await);
        }
        // Stale: written against a counter that has moved on.
        let stale = LeaseMutation::on(&held[0], LeaseChange::Renew);
        t.mutate(&stale).await.unwrap();
        let before = t.commits.load(Ordering::Relaxed);

        // Someone holds the database while every write queues.
        let (release, released) = std::sync::mpsc::channel::<()>();
        let (locked, is_locked) = std::sync::mpsc::channel::<()>();
        let conn = t.conn.clone();
        let holder = std::thread::spawn(move || {
            let _guard = conn.lock().unwrap();
            locked.send(()).unwrap();
            released.recv().unwrap();
        });
        is_locked.recv().unwrap();
        let mut writes = Vec::new();
        for l in &held[1..] {
            let (t, m) = (t.clone(), LeaseMutation::on(l, LeaseChange::Renew));
            writes.push(tokio::spawn(async move { t.mutate_all(&[m]).await }));
        }
        let (t2, m) = (t.clone(), stale.clone());
        let refused = tokio::spawn(async move { t2.mutate(&m).await });
        // A batch whose second write is refused: its first must not land either.
        let batch =
            vec![LeaseMutation::on(&held[1], LeaseChange::Release), LeaseMutation::on(&held[0], LeaseChange::Release)];
        let (t3, b) = (t.clone(), batch);
        let failed_batch = tokio::spawn(async move { t3.mutate_all(&b).await });
        while t.queued.lock().unwrap().len() < held.len() + 1 {
            tokio::task::yield_now().await;
        }
        assert!(writes.iter().all(|w| !w.is_finished()), "nobody is answered before the commit");
        release.send(()).unwrap();
        holder.join().unwrap();

        for w in writes {
            let renewed = w.await.unwrap().unwrap();
            assert_eq!(renewed[0].owner, Some(WorkerId::new("a")));
        }
        assert!(matches!(refused.await.unwrap(), Err(LeaseError::Conflict { .. })));
        assert!(matches!(failed_batch.await.unwrap(), Err(LeaseError::Conflict { .. })));
        assert_eq!(t.commits.load(Ordering::Relaxed) - before, 1, "one commit for every queued write");
        let s001 = t.get(&ShardId::new("s001")).await.unwrap().unwrap();
        assert_eq!(s001.owner, Some(WorkerId::new("a")), "the failed batch's first write was rolled back");
        assert_eq!(s001.counter, held[1].counter + 1, "and the renewal queued before it stayed");
    }

    /// Every commit is synced before it returns (an OS crash cannot roll back an
    /// intent or a checkpoint the worker acted on).
    #[tokio::test]
    async fn commits_are_synced_before_they_return() {
        let dir = tempfile::tempdir().unwrap();
        let t = SqliteLeaseTable::open(dir.path().join("leases.db"), "app").unwrap();
        let conn = t.conn.lock().unwrap();
        let synchronous: i64 = conn.pragma_query_value(None, "synchronous", |r| r.get(0)).unwrap();
        assert_eq!(synchronous, 2, "FULL");
        let journal: String = conn.pragma_query_value(None, "journal_mode", |r| r.get(0)).unwrap();
        assert_eq!(journal, "wal");
    }

    /// Processes opening an earlier weir's database at once (a worker and `weir replay
    /// --status` polling it) all open it: its columns are added once.
    #[tokio::test]
    async fn concurrent_openers_of_an_older_database_all_open_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("leases.db");
        for round in 0..20 {
            let db = path.with_extension(format!("{round}.db"));
            let old = Connection::open(&db).unwrap();
            old.execute_batch(
                "CREATE TABLE workers (namespace TEXT NOT NULL, worker TEXT NOT NULL, counter INTEGER NOT NULL,
                    PRIMARY KEY (namespace, worker));",
            )
            .unwrap();
            drop(old);
            let openers: Vec<_> = (0..4)
                .map(|_| {
                    let db = db.clone();
                    std::thread::spawn(move || SqliteLeaseTable::open(&db, "app").map(|_| ()))
                })
                .collect();
            for o in openers {
                o.join().unwrap().expect("every opener opens it");
            }
        }
    }

    /// A database written by a weir without worker instances (or loads) gains the
    /// columns; its records are claimable by the first heartbeat.
    #[tokio::test]
    async fn an_older_database_gains_worker_instances() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("leases.db");
        let old = Connection::open(&path).unwrap();
        old.execute_batch(
            "CREATE TABLE workers (namespace TEXT NOT NULL, worker TEXT NOT NULL, counter INTEGER NOT NULL,
                PRIMARY KEY (namespace, worker));
             INSERT INTO workers VALUES ('app', 'w1', 7);",
        )
        .unwrap();
        drop(old);
        let t = SqliteLeaseTable::open(&path, "app").unwrap();
        let w = WorkerId::new("w1");
        let before = t.list_workers().await.unwrap().remove(0);
        assert_eq!((before.instance.as_str(), before.load), ("", WorkerLoad::default()));
        let load = WorkerLoad { held: 3, active: 9 };
        t.heartbeat(&w, "a", load).await.unwrap();
        let now = t.list_workers().await.unwrap().remove(0);
        assert_eq!((now.counter, now.instance.as_str(), now.load), (8, "a", load));
        assert!(matches!(t.heartbeat(&w, "b", load).await, Err(LeaseError::WorkerIdInUse { .. })));
    }

    /// Two connections (as two processes would have) race for one lease: one wins.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn separate_connections_exclude_each_other() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("leases.db");
        let a = SqliteLeaseTable::open(&path, "app").unwrap();
        let b = SqliteLeaseTable::open(&path, "app").unwrap();
        let mut wins = 0;
        for i in 0..50 {
            let key = ShardId::new(format!("s{i}"));
            a.create_if_absent(NewLease {
                key: key.clone(),
                initial: Checkpoint::TrimHorizon,
                parents: vec![],
                hash_range: None,
            })
            .await
            .unwrap();
            let seen = b.get(&key).await.unwrap().unwrap();
            let ta = LeaseMutation::on(&seen, LeaseChange::Take { owner: WorkerId::new("a") });
            let tb = LeaseMutation::on(&seen, LeaseChange::Take { owner: WorkerId::new("b") });
            let (ra, rb) = tokio::join!(a.mutate(&ta), b.mutate(&tb));
            assert!(ra.is_ok() != rb.is_ok(), "exactly one connection must win");
            wins += 1;
        }
        assert_eq!(wins, 50);
        assert_eq!(a.list().await.unwrap().len(), 50);
    }
}
