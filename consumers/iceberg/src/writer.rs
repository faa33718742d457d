//! Appending records to one table, exactly once per shard position.
//!
//! [`TableWriter::commit`] takes, for each shard, the records read since the shard's
//! checkpoint and where the read ended. It loads the table, reads where each shard
//! stands in it ([`crate::positions`]), drops every record the table already has,
//! converts the rest with the table's schema (a record that does not fit is
//! returned, with the reason, for the error output), writes Parquet data files under
//! the table's data location, and appends them in one snapshot whose summary carries
//! each shard's new position. The append is conditional on the snapshot whose
//! positions were read (`pinned`): if another writer committed in between,
//! the positions are read again and the records the other commit had are dropped.
//!
//! The caller checkpoints a shard only to the position the report gives, after the
//! commit returned: a checkpoint never passes a record the table does not have.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::ArrowError;
use bytes::Bytes;
use iceberg::arrow::{RecordBatchPartitionSplitter, schema_to_arrow_schema};
use iceberg::spec::{DataFile, DataFileFormat};
use iceberg::table::Table;
use iceberg::transaction::{ApplyTransactionAction, Transaction};
use iceberg::writer::base_writer::data_file_writer::DataFileWriterBuilder;
use iceberg::writer::file_writer::ParquetWriterBuilder;
use iceberg::writer::file_writer::location_generator::{DefaultFileNameGenerator, DefaultLocationGenerator};
use iceberg::writer::file_writer::rolling_writer::RollingFileWriterBuilder;
use iceberg::writer::{IcebergWriter, IcebergWriterBuilder};
use iceberg::{Catalog, TableIdent};
use weir_core::{ExtendedSequenceNumber, ShardId};
use weir_parquet::deserialize::Cell;
use weir_parquet::rowcode::Rows;
use weir_parquet::timestamp::EpochIntegers;
use weir_parquet::{Deserializer, RowReader, arrays};

use crate::file_properties::{UnsupportedProperty, file_properties};
use crate::pinned::{Pinned, is_conflict};
use crate::positions::{self, UnreadablePosition};
use crate::retag::retag;
use crate::schema::{self, TableColumn, UnsupportedType};

/// One shard's part of a commit.
#[derive(Debug, Clone)]
pub struct ShardRecords {
    /// The shard.
    pub shard: ShardId,
    /// Where the read ended: every record of the shard up to here is in `records` or
    /// was committed before (not below the last record's position).
    pub end: ExtendedSequenceNumber,
    /// The records, in position order: each one's position and its JSON data (one
    /// row per JSON document in it).
    pub records: Vec<(ExtendedSequenceNumber, Bytes)>,
}

/// A record that does not fit the table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejected {
    /// Its shard.
    pub shard: ShardId,
    /// Its position.
    pub position: ExtendedSequenceNumber,
    /// Its data, as it was given.
    pub data: Bytes,
    /// Why.
    pub reason: String,
}

/// What a commit did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CommitReport {
    /// The snapshot it made; `None` when there was nothing to append.
    pub snapshot: Option<i64>,
    /// Rows appended.
    pub rows: u64,
    /// Data files appended.
    pub data_files: usize,
    /// Records dropped because a commit before this one (another writer's, or this
    /// writer's own that returned an error after it was stored) had them.
    pub already_committed: u64,
    /// Commits that lost to another writer and were tried again.
    pub conflicts: u32,
    /// Records that did not fit the table, for the error output. Not in the table.
    pub rejected: Vec<Rejected>,
    /// Where each shard of the commit now stands: the position to checkpoint.
    pub positions: BTreeMap<ShardId, ExtendedSequenceNumber>,
}

/// Why a commit failed. Nothing of it is in the table then (or all of it is: a
/// commit that returned an error may have been stored; committing the same records
/// again finds them and appends nothing twice).
#[derive(Debug, thiserror::Error)]
pub enum IcebergError {
    /// The catalog or the table's storage failed.
    #[error("iceberg: {0}")]
    Iceberg(#[from] iceberg::Error),
    /// The table has a column weir does not write.
    #[error(transparent)]
    Schema(#[from] UnsupportedType),
    /// A `write.*` table property weir cannot follow.
    #[error(transparent)]
    Property(#[from] UnsupportedProperty),
    /// A snapshot summary holds something else under weir's key.
    #[error(transparent)]
    Position(#[from] UnreadablePosition),
    /// Building the rows' arrays failed.
    #[error("arrow: {0}")]
    Arrow(#[from] ArrowError),
    /// Every attempt lost to another writer.
    #[error("{attempts} commits to {table} in a row lost to other writers")]
    Conflicts {
        /// The table.
        table: String,
        /// Attempts made.
        attempts: u32,
    },
}

impl IcebergError {
    /// Whether the table (or its namespace) is not in the catalog.
    pub fn is_no_such_table(&self) -> bool {
        matches!(self, Self::Iceberg(e) if matches!(e.kind(), iceberg::ErrorKind::TableNotFound | iceberg::ErrorKind::NamespaceNotFound))
    }
}

/// Appends records to one table for one consumer.
#[derive(Debug, Clone)]
pub struct TableWriter {
    catalog: Arc<dyn Catalog>,
    table: TableIdent,
    consumer: String,
    deserializer: Deserializer,
    integers: EpochIntegers,
    attempts: u32,
    delivery: Delivery,
}

/// What a writer promises about records committed twice (by a worker that crashed
/// after its commit and before its checkpoint, or by a zombie).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Delivery {
    /// Each record once: positions kept in the table, commits conditional on them.
    #[default]
    ExactlyOnce,
    /// No positions: every commit appends what it is given, retried on conflicts as
    /// the `iceberg` crate's own transactions retry. A record whose commit was stored
    /// but not checkpointed is appended again by the shard's next owner (what
    /// at-least-once Iceberg sinks do). For comparison, and for tests that must see
    /// the difference.
    AtLeastOnce,
}

impl TableWriter {
    /// A writer of `table` in `catalog` for `consumer` (the name its positions are
    /// kept under: one per destination, the same on every worker).
    pub fn new(catalog: Arc<dyn Catalog>, table: TableIdent, consumer: impl Into<String>) -> Self {
        Self {
            catalog,
            table,
            consumer: consumer.into(),
            deserializer: Deserializer::default(),
            integers: EpochIntegers::ByDigits,
            attempts: 8,
            delivery: Delivery::ExactlyOnce,
        }
    }

    /// How an integer in a timestamp column is read (default
    /// [`EpochIntegers::ByDigits`]: seconds, milliseconds, microseconds — Firehose's
    /// Iceberg destination asks for these — or nanoseconds by the number of digits).
    pub fn with_epoch_integers(mut self, integers: EpochIntegers) -> Self {
        self.integers = integers;
        self
    }

    /// Keeps positions or not (default [`Delivery::ExactlyOnce`]).
    pub fn with_delivery(mut self, delivery: Delivery) -> Self {
        self.delivery = delivery;
        self
    }

    /// What the writer promises.
    pub fn delivery(&self) -> Delivery {
        self.delivery
    }

    /// The catalog.
    pub fn catalog(&self) -> Arc<dyn Catalog> {
        self.catalog.clone()
    }

    /// A writer of `table` in the same catalog with the same settings.
    pub fn for_table(&self, table: TableIdent) -> Self {
        Self { table, ..self.clone() }
    }

    /// The reader of records into `columns`.
    fn reader(&self, columns: &[TableColumn]) -> RowReader {
        RowReader::new(columns.iter().map(|c| c.column.clone()).collect(), self.deserializer.clone())
            .with_epoch_integers(self.integers)
    }

    /// Gives up after `attempts` commits in a row lost to other writers (default 8).
    pub fn with_attempts(mut self, attempts: u32) -> Self {
        self.attempts = attempts.max(1);
        self
    }

    /// The name the table's positions are kept under.
    pub fn consumer(&self) -> &str {
        &self.consumer
    }

    /// The table.
    pub fn table(&self) -> &TableIdent {
        &self.table
    }

    /// Where each of `shards` stands in the table now (a shard no commit names is
    /// absent). A shard's reader starts after the later of this and its checkpoint.
    pub async fn positions(
        &self,
        shards: &[ShardId],
    ) -> Result<BTreeMap<ShardId, ExtendedSequenceNumber>, IcebergError> {
        if self.delivery == Delivery::AtLeastOnce {
            return Ok(BTreeMap::new());
        }
        let table = self.catalog.load_table(&self.table).await?;
        Ok(positions::committed(table.metadata(), &self.consumer, shards)?)
    }

    /// Appends `batches`' records the table does not have yet, in one snapshot.
    pub async fn commit(&self, batches: &[ShardRecords]) -> Result<CommitReport, IcebergError> {
        let mut conflicts = 0;
        loop {
            let table = self.catalog.load_table(&self.table).await?;
            let committed = match self.delivery {
                Delivery::ExactlyOnce => {
                    positions::committed(table.metadata(), &self.consumer, batches.iter().map(|b| &b.shard))?
                }
                Delivery::AtLeastOnce => BTreeMap::new(),
            };
            let mut report = CommitReport { conflicts, positions: committed.clone(), ..CommitReport::default() };
            // What the table lacks: records after each shard's committed position.
            let mut fresh = Vec::new();
            let mut stale = Vec::new();
            let mut summary = HashMap::new();
            for b in batches {
                let after = committed.get(&b.shard);
                let (old, new): (Vec<_>, Vec<_>) = b.records.iter().partition(|(p, _)| after.is_some_and(|c| p <= c));
                report.already_committed += old.len() as u64;
                stale.push((&b.shard, old));
                if after.is_some_and(|c| *c >= b.end) {
                    continue;
                }
                fresh.push((&b.shard, new));
                if self.delivery == Delivery::ExactlyOnce {
                    summary.insert(positions::key(&self.consumer, &b.shard), positions::encode(&b.end));
                }
                report.positions.insert(b.shard.clone(), b.end.clone());
            }
            let columns = schema::columns(table.metadata().current_schema())?;
            let (batch, rejected) = convert(&columns, &self.reader(&columns), &table, &fresh, &stale)?;
            report.rejected = rejected;
            report.rows = batch.num_rows() as u64;
            if batch.num_rows() == 0 {
                // Nothing to append (an append needs a data file): the positions are
                // the caller's checkpoints to keep.
                return Ok(report);
            }
            let files = write(&table, batch).await?;
            report.data_files = files.len();
            let tx = Transaction::new(&table);
            let tx = tx.fast_append().add_data_files(files).set_snapshot_properties(summary).apply(tx)?;
            match tx.commit(&Pinned { inner: self.catalog.as_ref(), table: table.clone() }).await {
                Ok(after) => {
                    report.snapshot = after.metadata().current_snapshot().map(|s| s.snapshot_id());
                    return Ok(report);
                }
                Err(e) if is_conflict(&e) => {
                    conflicts += 1;
                    if conflicts >= self.attempts {
                        return Err(IcebergError::Conflicts { table: self.table.to_string(), attempts: conflicts });
                    }
                    // Writers that lost together spread out before they try again.
                    let ceiling = 20u64 << conflicts.min(6);
                    tokio::time::sleep(Duration::from_millis(rand::random_range(ceiling / 2..=ceiling))).await;
                }
                Err(e) => return Err(e.into()),
            }
        }
    }
}

/// Records of one shard.
type ShardSlice<'a> = (&'a ShardId, Vec<&'a (ExtendedSequenceNumber, Bytes)>);

/// The rows of `fresh` as one batch of the table's Arrow schema, and the records of
/// `fresh` and `stale` that do not fit. `stale` records are in the table already (an
/// earlier commit had them) and give no rows; the ones that do not fit are returned
/// again, because the commit that had them may have been stored by a worker that died
/// before it wrote them to the error output.
fn convert(
    columns: &[TableColumn],
    reader: &RowReader,
    table: &Table,
    fresh: &[ShardSlice<'_>],
    stale: &[ShardSlice<'_>],
) -> Result<(RecordBatch, Vec<Rejected>), IcebergError> {
    let mut cells: Vec<Vec<Cell>> = vec![Vec::new(); columns.len()];
    let mut rejected = Vec::new();
    let mut scratch = Vec::new();
    let all = fresh.iter().map(|f| (f, true)).chain(stale.iter().map(|s| (s, false)));
    for ((shard, records), keep) in all {
        for (position, data) in records {
            scratch.clear();
            let reject = |reason: String| Rejected {
                shard: (*shard).clone(),
                position: position.clone(),
                data: data.clone(),
                reason,
            };
            if let Err(e) = reader.put_rows(data, &mut scratch) {
                rejected.push(reject(e.to_string()));
                continue;
            }
            let mut rows = Vec::new();
            let mut read = Rows::new(&scratch, columns.len());
            while let Some(row) = read.next_row() {
                rows.push(row.map_err(|e| ArrowError::InvalidArgumentError(format!("converted rows damaged: {e:?}")))?);
            }
            if let Some(field) = rows.iter().find_map(|row| schema::missing(columns, row)) {
                rejected.push(reject(format!("required field {field:?} is missing or null")));
                continue;
            }
            if !keep {
                continue;
            }
            for row in rows {
                for (column, cell) in cells.iter_mut().zip(row) {
                    column.push(cell);
                }
            }
        }
    }
    let arrow = Arc::new(schema_to_arrow_schema(table.metadata().current_schema())?);
    let arrays = columns
        .iter()
        .zip(&cells)
        .zip(arrow.fields())
        .map(|((c, cells), field)| {
            let refs: Vec<&Cell> = cells.iter().collect();
            retag(&arrays::build(&c.column.ty, &refs)?, field.data_type())
        })
        .collect::<Result<Vec<ArrayRef>, ArrowError>>()?;
    let batch = if arrays.is_empty() { RecordBatch::new_empty(arrow) } else { RecordBatch::try_new(arrow, arrays)? };
    Ok((batch, rejected))
}

/// Data files of `batch` under the table's data location, one or more per partition.
/// Each name is new (`weir-<random>-<n>.parquet`): a file in the table is never
/// written again, and one left by a commit that failed is an orphan for the table's
/// orphan-file removal.
async fn write(table: &Table, batch: RecordBatch) -> Result<Vec<DataFile>, IcebergError> {
    let metadata = table.metadata();
    let schema = metadata.current_schema().clone();
    let spec = metadata.default_partition_spec().clone();
    let settings = file_properties(metadata.properties())?;
    let parquet = ParquetWriterBuilder::new(settings.parquet, schema.clone());
    let names =
        DefaultFileNameGenerator::new(format!("weir-{:032x}", rand::random::<u128>()), None, DataFileFormat::Parquet);
    let rolling = RollingFileWriterBuilder::new(
        parquet,
        settings.target_file_size,
        table.file_io().clone(),
        DefaultLocationGenerator::new(metadata)?,
        names,
    );
    let builder = DataFileWriterBuilder::new(rolling);
    let parts = if spec.is_unpartitioned() {
        vec![(None, batch)]
    } else {
        RecordBatchPartitionSplitter::try_new_with_computed_values(schema, spec)?
            .split(&batch)?
            .into_iter()
            .map(|(key, part)| (Some(key), part))
            .collect()
    };
    let mut files = Vec::new();
    for (key, part) in parts {
        let mut writer = builder.build(key).await?;
        writer.write(part).await?;
        files.extend(writer.close().await?);
    }
    Ok(files)
}
