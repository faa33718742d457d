//! A consumer plugin as a user would write one: per-minute tool-call counts per tenant
//! and tool (calls, errors, total and slowest `durationMs`) in a SQLite table, exactly
//! once.
//!
//! Exactly once without a distributed transaction: each batch is applied in one SQLite
//! transaction that also stores the shard's last applied position, and records at or
//! before that position are skipped. Only after the commit is the batch acknowledged
//! (`Acks::durable`), so weir's checkpoint never passes a record that is not in the
//! table, and a record delivered again (after a crash, a lease move or a replay into
//! the same file) is not counted twice.
//!
//! ```toml
//! [[consumers]]
//! type = "tool-minutes"
//! name = "minutes"
//! path = "tool-minutes.db"
//! ```

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use anyhow::{Context as _, Result};
use async_trait::async_trait;
use rusqlite::{Connection, OptionalExtension, params};
use serde::Deserialize;
use weir::weir_core::{ExtendedSequenceNumber, SequenceNumber, ShardId};
use weir::{Acks, CloseReason, Consumer, ConsumerError, Context, Plugin, RecordBatch};

/// `type = "tool-minutes"`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolMinutesConfig {
    /// The SQLite file (created if missing).
    pub path: PathBuf,
}

/// The consumer.
pub struct ToolMinutes {
    name: String,
    db: Arc<Mutex<Connection>>,
}

/// What one event adds to its minute.
#[derive(Debug, PartialEq)]
struct Call {
    tenant: String,
    tool: String,
    minute: i64,
    failed: bool,
    duration_ms: i64,
}

/// Reads one event; `None` for records that are not tool-call events (they are counted
/// under `rejected` with the reason instead).
fn call(data: &[u8], arrival_ms: i64) -> Result<Call, String> {
    let v: serde_json::Value = serde_json::from_slice(data).map_err(|e| format!("not JSON: {e}"))?;
    let text = |a: &str, b: &str| v.get(a).or_else(|| v.get(b)).and_then(|x| x.as_str()).map(str::to_owned);
    let tenant = text("tenantId", "tenant_id").ok_or("no tenantId")?;
    let tool = text("toolName", "tool_name").ok_or("no toolName")?;
    let ts = v.get("ts").and_then(|t| t.as_i64()).unwrap_or(arrival_ms);
    let failed = v.get("success").and_then(|s| s.as_bool()) == Some(false);
    let duration_ms = v.get("durationMs").or_else(|| v.get("duration_ms")).and_then(|d| d.as_i64()).unwrap_or(0);
    Ok(Call { tenant, tool, minute: ts.div_euclid(60_000) * 60, failed, duration_ms })
}

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS tool_minutes (
  tenant TEXT NOT NULL, tool TEXT NOT NULL, minute INTEGER NOT NULL,
  calls INTEGER NOT NULL, errors INTEGER NOT NULL, duration_ms_sum INTEGER NOT NULL, duration_ms_max INTEGER NOT NULL,
  PRIMARY KEY (tenant, tool, minute));
CREATE TABLE IF NOT EXISTS rejected (consumer TEXT NOT NULL, shard TEXT NOT NULL, sequence TEXT NOT NULL, reason TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS applied (consumer TEXT NOT NULL, shard TEXT NOT NULL, sequence TEXT NOT NULL, sub INTEGER NOT NULL,
  PRIMARY KEY (consumer, shard));
";

/// Applies a batch in one transaction; returns the last position it covers.
fn apply(db: &mut Connection, consumer: &str, batch: &RecordBatch) -> rusqlite::Result<()> {
    let tx = db.transaction()?;
    let shard = batch.shard_id.as_str();
    let done: Option<ExtendedSequenceNumber> = tx
        .query_row(
            "SELECT sequence, sub FROM applied WHERE consumer = ?1 AND shard = ?2",
            params![consumer, shard],
            |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)),
        )
        .optional()?
        .and_then(|(s, sub)| Some(ExtendedSequenceNumber::new(SequenceNumber::parse(&s).ok()?, sub as u64)));
    for record in &batch.records {
        if done.as_ref().is_some_and(|d| &record.position <= d) {
            continue; // applied before: a redelivery
        }
        match call(&record.data, record.approximate_arrival.as_millis()) {
            Ok(c) => {
                tx.execute(
                    "INSERT INTO tool_minutes VALUES (?1, ?2, ?3, 1, ?4, ?5, ?5)
                     ON CONFLICT (tenant, tool, minute) DO UPDATE SET calls = calls + 1, errors = errors + ?4,
                       duration_ms_sum = duration_ms_sum + ?5, duration_ms_max = max(duration_ms_max, ?5)",
                    params![c.tenant, c.tool, c.minute, i64::from(c.failed), c.duration_ms],
                )?;
            }
            Err(reason) => {
                tx.execute(
                    "INSERT INTO rejected VALUES (?1, ?2, ?3, ?4)",
                    params![consumer, shard, record.position.to_string(), reason],
                )?;
            }
        }
    }
    // The stored position only moves forward: a batch delivered again (a replay into
    // the same file) must not take it back, or the records after it would count twice.
    if let Some(last) = batch.last_position().filter(|last| done.as_ref().is_none_or(|d| *last > d)) {
        tx.execute(
            "INSERT INTO applied VALUES (?1, ?2, ?3, ?4) ON CONFLICT (consumer, shard) DO UPDATE SET sequence = ?3, sub = ?4",
            params![consumer, shard, last.sequence.to_string(), last.sub_sequence as i64],
        )?;
    }
    tx.commit()
}

#[async_trait]
impl Consumer for ToolMinutes {
    fn name(&self) -> &str {
        &self.name
    }

    async fn on_batch(&mut self, batch: &RecordBatch, acks: &dyn Acks) -> Result<(), ConsumerError> {
        let Some(last) = batch.last_position().cloned() else { return Ok(()) };
        let (db, name, batch_owned) = (self.db.clone(), self.name.clone(), batch.clone());
        // SQLite blocks: off the async threads.
        tokio::task::spawn_blocking(move || {
            let mut db = db.lock().unwrap_or_else(|p| p.into_inner());
            apply(&mut db, &name, &batch_owned)
        })
        .await
        .map_err(|e| ConsumerError::msg(format!("tool-minutes task: {e}")))?
        .map_err(|e| ConsumerError::with_source("tool-minutes: SQLite write failed", e))?;
        // Committed: only now may the checkpoint pass these records.
        acks.durable(&batch.shard_id, &last);
        Ok(())
    }

    async fn on_shard_close(&mut self, _: &ShardId, _: CloseReason, _: &dyn Acks) -> Result<(), ConsumerError> {
        Ok(()) // nothing buffered: every batch was committed and acknowledged
    }
}

impl Plugin for ToolMinutes {
    type Config = ToolMinutesConfig;
    const ABOUT: &'static str = "per-minute tool-call counts per tenant in SQLite (example plugin)";

    fn check(c: &ToolMinutesConfig, at: &str) -> Result<Vec<String>> {
        if c.path.as_os_str().is_empty() {
            anyhow::bail!("field `{at}.path`: name the SQLite file");
        }
        Ok(Vec::new())
    }

    async fn build(c: ToolMinutesConfig, ctx: &Context) -> Result<Self> {
        let db = Connection::open(&c.path).with_context(|| format!("{}.path {}", ctx.at(), c.path.display()))?;
        db.execute_batch(SCHEMA).context("creating the tables")?;
        db.pragma_update(None, "journal_mode", "WAL")?;
        Ok(Self { name: ctx.name().to_owned(), db: Arc::new(Mutex::new(db)) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_are_read_in_both_spellings_and_bad_ones_explained() {
        let c = call(br#"{"tenantId":"t1","toolName":"q","ts":120500,"durationMs":7,"success":false}"#, 0).unwrap();
        assert_eq!(c, Call { tenant: "t1".into(), tool: "q".into(), minute: 120, failed: true, duration_ms: 7 });
        let c = call(br#"{"tenant_id":"t2","tool_name":"r"}"#, 61_000).unwrap();
        assert_eq!((c.minute, c.failed, c.duration_ms), (60, false, 0));
        assert_eq!(call(br#"{"toolName":"q"}"#, 0).unwrap_err(), "no tenantId");
        assert!(call(b"\xff{", 0).unwrap_err().starts_with("not JSON"));
    }

    fn batch(range: std::ops::RangeInclusive<u128>) -> RecordBatch {
        let records = range
            .map(|n| weir::weir_core::Record {
                partition_key: format!("k{n}"),
                position: ExtendedSequenceNumber::plain(SequenceNumber::from_u128(n)),
                approximate_arrival: weir::weir_core::Timestamp::from_millis(0),
                data: format!(r#"{{"tenantId":"t","toolName":"q","ts":{n}}}"#).into_bytes().into(),
            })
            .collect();
        RecordBatch { shard_id: ShardId::new("s"), records, millis_behind_latest: None, child_shards: None }
    }

    /// Records delivered again in smaller batches (a replay into the same file) are
    /// skipped, and the stored position does not move back.
    #[test]
    fn redeliveries_in_other_batches_count_once() {
        let mut db = Connection::open_in_memory().unwrap();
        db.execute_batch(SCHEMA).unwrap();
        let calls =
            |db: &Connection| -> i64 { db.query_row("SELECT sum(calls) FROM tool_minutes", [], |r| r.get(0)).unwrap() };
        apply(&mut db, "c", &batch(1..=10)).unwrap();
        apply(&mut db, "c", &batch(1..=3)).unwrap();
        apply(&mut db, "c", &batch(4..=10)).unwrap();
        assert_eq!(calls(&db), 10);
        apply(&mut db, "c", &batch(8..=12)).unwrap();
        assert_eq!(calls(&db), 12);
    }
}
