//! Small builders shared by tests.

use weir_core::ports::LeaseTable;
use weir_core::{Checkpoint, Lease, LeaseChange, LeaseMutation, NewLease, ShardId, WorkerId};

/// A root lease starting at `TRIM_HORIZON`, with the given parents.
pub fn new_lease(key: &str, parents: &[&str]) -> NewLease {
    NewLease {
        key: ShardId::new(key),
        initial: Checkpoint::TrimHorizon,
        parents: parents.iter().map(|p| ShardId::new(*p)).collect(),
        hash_range: None,
    }
}

/// Creates the lease `key` (if missing) and takes it for `owner`; returns the stored lease.
pub async fn taken_lease(table: &dyn LeaseTable, key: &str, owner: &str) -> Lease {
    table.create_if_absent(new_lease(key, &[])).await.expect("create lease");
    let seen = table.get(&ShardId::new(key)).await.expect("read lease").expect("lease exists");
    take(table, &seen, owner).await
}

/// Takes `seen` for `owner` (conditional on what was seen).
pub async fn take(table: &dyn LeaseTable, seen: &Lease, owner: &str) -> Lease {
    let change = LeaseChange::Take { owner: WorkerId::new(owner) };
    table.mutate(&LeaseMutation::on(seen, change)).await.expect("take lease")
}
