//! A replay job's state in its lease namespace: the shards' leases, and a marker item
//! that says the job was cancelled.
//!
//! The marker is a lease item with a key no stream or archive uses, stored already
//! ended so no worker takes it. Every worker running the job looks for it on each
//! progress tick and drains when it appears; `weir replay` refuses to start a job that
//! has it.

use std::collections::BTreeMap;

use anyhow::{Result, bail};
use weir_core::ports::LeaseTable;
use weir_core::{Checkpoint, Lease, LeaseChange, LeaseError, LeaseMutation, NewLease, ShardId, WorkerId};

/// The marker's key.
const CANCELLED: &str = "weir:job-cancelled";

/// The job's shard leases (the marker left out) and whether it was cancelled.
pub struct JobState {
    pub leases: Vec<Lease>,
    pub cancelled: bool,
}

impl JobState {
    pub fn done(&self) -> usize {
        self.leases.iter().filter(|l| l.ended).count()
    }
}

pub async fn read(table: &dyn LeaseTable) -> Result<JobState> {
    let all = table.list().await?;
    let cancelled = all.iter().any(|l| l.key.as_str() == CANCELLED);
    let leases = all.into_iter().filter(|l| l.key.as_str() != CANCELLED).collect();
    Ok(JobState { leases, cancelled })
}

/// Marks the job cancelled (idempotent).
pub async fn cancel(table: &dyn LeaseTable) -> Result<()> {
    let key = ShardId::new(CANCELLED);
    table
        .create_if_absent(NewLease {
            key: key.clone(),
            initial: Checkpoint::TrimHorizon,
            parents: vec![],
            hash_range: None,
        })
        .await?;
    // Take it and end it, so no worker takes it; a worker that took it in the
    // meantime only moves the counter, so read again and retry.
    let me = WorkerId::new("weir-replay-cancel");
    for _ in 0..20 {
        let Some(seen) = table.get(&key).await? else { bail!("the cancel marker vanished") };
        if seen.ended {
            return Ok(());
        }
        let held = match table.mutate(&LeaseMutation::on(&seen, LeaseChange::Take { owner: me.clone() })).await {
            Ok(l) => l,
            Err(LeaseError::Conflict { .. }) => continue,
            Err(e) => return Err(e.into()),
        };
        let end = LeaseChange::Checkpoint { checkpoints: BTreeMap::new(), ended_with_children: Some(Vec::new()) };
        match table.mutate(&LeaseMutation::on(&held, end)).await {
            Ok(_) => return Ok(()),
            Err(LeaseError::Conflict { .. }) => continue,
            Err(e) => return Err(e.into()),
        }
    }
    bail!("could not end the cancel marker after 20 attempts (workers keep writing it)")
}
