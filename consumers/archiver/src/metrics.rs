//! Every metric the archiver emits, named in one place.
//!
//! The gauges (freshness, backlog, buffered, partitions, spilled) and the record,
//! object and error counters carry the label [`ARCHIVER`], the archiver's name: two
//! archivers in one worker (a backup archiver is one) are two series, not one that
//! each overwrites.

/// The label naming the archiver (its consumer name).
pub const ARCHIVER: &str = "archiver";

/// Records written into objects (label `route`: data | error).
pub const RECORDS_ARCHIVED: &str = "weir_archiver_records_total";
/// Objects written (label `route`).
pub const OBJECTS: &str = "weir_archiver_objects_total";
/// Bytes written (after compression).
pub const OBJECT_BYTES: &str = "weir_archiver_object_bytes_total";
/// Records dropped by the transform (`Dropped`).
pub const DROPPED: &str = "weir_archiver_dropped_total";
/// CloudWatch Logs records without log events (`CONTROL_MESSAGE`s), dropped.
pub const CONTROL_MESSAGES: &str = "weir_archiver_cloudwatch_control_messages_total";
/// Records routed to the error output (label `type`).
pub const ERRORS: &str = "weir_archiver_error_records_total";
/// Records without a trailing newline while `AppendDelimiterToRecord` is off: they run
/// into the next record in the object (Firehose's silent trap, made loud). Called
/// `records_without_delimiter` in earlier versions.
pub const RECORDS_WITHOUT_DELIMITER: &str = "weir_archiver_records_without_delimiter_total";
/// Records skipped because an earlier owner's object already holds them.
pub const DUPLICATES_SKIPPED: &str = "weir_archiver_duplicates_skipped_total";
/// Puts that met a key claimed by a shard's new owner.
pub const CLAIMS_MET: &str = "weir_archiver_claims_met_total";
/// Keys claimed while resolving an earlier owner's intents.
pub const CLAIMS_MADE: &str = "weir_archiver_claims_made_total";
/// Failed object puts (retried).
pub const PUT_FAILURES: &str = "weir_archiver_put_failures_total";
/// Objects waiting to be written.
pub const BACKLOG_OBJECTS: &str = "weir_archiver_backlog_objects";
/// Bytes waiting to be written.
pub const BACKLOG_BYTES: &str = "weir_archiver_backlog_bytes";
/// Bytes held in open buffers (set at every tick and whenever buffers are sealed:
/// summing every buffer per batch cost about 2% of the archiver's time).
pub const BUFFERED_BYTES: &str = "weir_archiver_buffered_bytes";
/// Age in seconds of the oldest record not yet durable in the store (buffered or
/// waiting to be written); 0 when nothing is held. Set with [`BUFFERED_BYTES`]. The
/// equivalent of Firehose's `DeliveryToS3.DataFreshness`.
pub const DATA_FRESHNESS: &str = "weir_archiver_data_freshness_seconds";
/// Open partitions (set with [`BUFFERED_BYTES`]).
pub const ACTIVE_PARTITIONS: &str = "weir_archiver_active_partitions";
/// Intent manifests written (exactly-once rounds with many objects of a shard).
pub const MANIFESTS: &str = "weir_archiver_intent_manifests_total";
/// Intent manifests deleted after a checkpoint passed them.
pub const MANIFESTS_DELETED: &str = "weir_archiver_intent_manifests_deleted_total";
/// Open intents whose manifest could not be read: their records are archived again.
pub const MANIFESTS_UNREADABLE: &str = "weir_archiver_intent_manifests_unreadable_total";
/// Leftover intent manifests (no open intent named them) deleted when a shard opened.
pub const MANIFESTS_SWEPT: &str = "weir_archiver_intent_manifests_swept_total";
/// Bytes of open buffers spilled to local disk (`spill_directory`).
pub const SPILLED_BYTES: &str = "weir_archiver_spilled_bytes";
/// Buffers whose compressed bytes went to local disk to relieve memory.
pub const SPILLS: &str = "weir_archiver_spills_total";
/// Spills that failed (buffers were sealed early instead).
pub const SPILL_FAILURES: &str = "weir_archiver_spill_failures_total";
/// Times the archiver stopped after an internal error (a seal or a batch that could
/// not be taken back); it then refuses every call until the worker restarts.
pub const INTERNAL_FAILURES: &str = "weir_archiver_internal_failures_total";
/// Parts whose transform failed after a takeover while the shard's earlier owner may
/// have archived them: their batch is tried again rather than the part sent to the
/// error output.
pub const UNCERTAIN_RETRIES: &str = "weir_archiver_uncertain_retries_total";
/// Parts whose transform kept failing after a takeover past the archiver's patience
/// (5 minutes), sent to the error output though the shard's earlier owner may have
/// archived them as data: the one way a record can end up in both.
pub const UNCERTAIN_GIVEN_UP: &str = "weir_archiver_uncertain_given_up_total";
