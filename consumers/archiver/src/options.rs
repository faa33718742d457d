//! What an archiver is configured with beyond Firehose's own settings.

use crate::delivery::budget::InlineLimits;
use crate::delivery::buffers::Overflow;
use crate::delivery::deliver::DeliveryMode;
use crate::pipeline::keys::QueryError;
use crate::pipeline::transform::Transformer;
use weir_firehose::ArchiverSettings;

/// Everything the archiver is configured with beyond Firehose's own settings.
#[derive(Clone)]
pub struct ArchiverOptions {
    /// Consumer name (keys its checkpoints and intents); also the object-name prefix
    /// in place of Firehose's delivery stream name.
    pub name: String,
    /// Firehose-compatible settings.
    pub settings: ArchiverSettings,
    /// Exactly-once (default) or Firehose's at-least-once.
    pub mode: DeliveryMode,
    /// Bytes the open buffers may hold together: past it stages are compressed early,
    /// then buffers spilled (with a `spill_directory`) or sealed, the largest first.
    pub max_buffer_memory: usize,
    /// Most data partitions open at once (`None`, the default: no count limit; Firehose
    /// has 500).
    pub max_active_partitions: Option<usize>,
    /// What happens past `max_active_partitions`.
    pub overflow: Overflow,
    /// Refuse new batches while this many compressed bytes wait for the store (the
    /// stream keeps the records; the runtime offers them again later).
    pub max_backlog_bytes: u64,
    /// GZIP level.
    pub compression_level: u32,
    /// Object puts in flight at once.
    pub put_concurrency: usize,
    /// The transform stage.
    pub transformer: Transformer,
    /// Exactly-once: when a round's intents go inline into the leases rather than into
    /// a manifest object (the defaults keep a lease item far below DynamoDB's 400 KB;
    /// tests lower them to exercise manifests).
    pub inline_intents: InlineLimits,
    /// Where buffers pushed out of memory spill their bytes instead of being sealed
    /// early (`None`: they are sealed).
    pub spill_directory: Option<std::path::PathBuf>,
}

impl ArchiverOptions {
    /// Options with weir's defaults for `settings`.
    pub fn new(name: &str, settings: ArchiverSettings) -> Self {
        Self {
            name: name.to_owned(),
            settings,
            mode: DeliveryMode::ExactlyOnce,
            max_buffer_memory: DEFAULT_BUFFER_MEMORY,
            max_active_partitions: None,
            overflow: Overflow::FlushOldest,
            max_backlog_bytes: 256 << 20,
            compression_level: 6,
            put_concurrency: 8,
            transformer: Transformer::None,
            inline_intents: InlineLimits::default(),
            spill_directory: None,
        }
    }
}

/// Default of [`ArchiverOptions::max_buffer_memory`]: 256 MiB.
pub const DEFAULT_BUFFER_MEMORY: usize = 256 << 20;

/// Why the archiver could not be built.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// The metadata extraction query does not compile.
    #[error(transparent)]
    Query(#[from] QueryError),
    /// A format conversion is configured but no columns were given.
    #[error(
        "DataFormatConversionConfiguration: the table's columns are not known (set `columns` in the archiver section, or name a Glue table in SchemaConfiguration)"
    )]
    NoColumns,
    /// The spill directory cannot be used.
    #[error("spill_directory: {0}")]
    Spill(#[from] crate::delivery::spill::SpillError),
}
