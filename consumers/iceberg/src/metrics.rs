//! Every metric the Iceberg destination emits, named in one place. Each carries the
//! labels [`CONSUMER`] (the consumer's name) and [`TABLE`] (`namespace.table`).

/// The label naming the consumer.
pub const CONSUMER: &str = "consumer";
/// The label naming the table.
pub const TABLE: &str = "table";

/// Snapshots committed.
pub const COMMITS: &str = "weir_iceberg_commits_total";
/// Commits that lost to another writer and were tried again.
pub const COMMIT_CONFLICTS: &str = "weir_iceberg_commit_conflicts_total";
/// Commits that failed (the records stay buffered and are committed again).
pub const COMMIT_FAILURES: &str = "weir_iceberg_commit_failures_total";
/// Rows appended.
pub const ROWS: &str = "weir_iceberg_rows_total";
/// Data files appended.
pub const DATA_FILES: &str = "weir_iceberg_data_files_total";
/// Records another commit had already put in the table (skipped, not appended).
pub const ALREADY_COMMITTED: &str = "weir_iceberg_already_committed_total";
/// Records that did not fit the table, written to the error output.
pub const REJECTED: &str = "weir_iceberg_rejected_records_total";
/// Age in seconds of the oldest buffered record (0 when nothing is buffered): the
/// table's freshness, Firehose's `DeliveryToIceberg.DataFreshness`. Set at every tick.
pub const DATA_FRESHNESS: &str = "weir_iceberg_data_freshness_seconds";
/// Bytes of records buffered, set at every tick.
pub const BUFFERED_BYTES: &str = "weir_iceberg_buffered_bytes";
