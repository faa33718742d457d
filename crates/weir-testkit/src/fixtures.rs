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

/// The benches' first event time (epoch milliseconds).
pub const BENCH_T0: i64 = 1_764_400_000_000;

/// The table of [`mcp_bench_event`]s as Hive types (name, type): `arguments` holds the
/// nested object as JSON text.
pub const MCP_BENCH_COLUMNS: [(&str, &str); 8] = [
    ("tenantid", "string"),
    ("toolname", "string"),
    ("sessionid", "string"),
    ("ts", "timestamp"),
    ("durationms", "bigint"),
    ("success", "boolean"),
    ("errorcode", "string"),
    ("arguments", "string"),
];

/// The benches' MCP tool-call event `i`, spread over `partitions` tenant × tool pairs
/// (6 tools at most, `partitions / tools` tenants `t-0000`…): flat (~200 bytes), or
/// with nested `arguments` (~1 KB).
pub fn mcp_bench_event(i: u64, partitions: u64, nested: bool) -> bytes::Bytes {
    let tools = 6.min(partitions);
    let tenant = i % (partitions / tools);
    let args = if nested {
        format!(
            r#","arguments":{{"query":"select * from events where tenant = 't-{tenant:04}' and day > '2026-11-{:02}'","limit":{},"filters":[{{"field":"tool","op":"eq","value":"tool-{}"}},{{"field":"durationMs","op":"gt","value":{}}}],"options":{{"explain":false,"timeoutMs":30000,"tags":["a","b","c"],"trace":"{:064x}"}},"context":{{"user":"u-{}","locale":"en-GB","client":"mcp-inspector/0.9","notes":"{}"}}}}"#,
            i % 28 + 1,
            i % 1000,
            i % tools,
            i % 500,
            u128::from(i) * 0x9e37_79b9_7f4a_7c15,
            i % 977,
            "lorem ipsum dolor sit amet ".repeat(12)
        )
    } else {
        String::new()
    };
    bytes::Bytes::from(format!(
        r#"{{"tenantId":"t-{tenant:04}","toolName":"tool-{}","sessionId":"sess-{:08x}","ts":{},"durationMs":{},"success":{},"errorCode":{}{args}}}"#,
        i % tools,
        i / 13,
        BENCH_T0 + (i as i64) * 3,
        (i * 37) % 2000,
        !i.is_multiple_of(17),
        if i.is_multiple_of(17) { "\"E_TIMEOUT\"" } else { "null" }
    ))
}
