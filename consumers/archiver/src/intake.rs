//! The intake: where the pipeline's lines enter the buffers. Before a line is buffered
//! it passes three checks, in this order:
//!
//! 1. **Parquet**: with a format conversion, a data line is converted to the table's
//!    rows; one that does not fit goes to the `format-conversion-failed` error output
//!    (for every owner alike), before anything else looks at it.
//! 2. **Skip list**: a line an earlier owner's written objects already hold (see
//!    [`crate::delivery::resolve`]) is skipped; one whose transform failed now but that
//!    may be archived already is refused for a while ([`UNCERTAIN_PATIENCE`]).
//! 3. **Partition cap**: past `max_active_partitions` with the `error` policy, a data
//!    line goes to the `ActivePartitionsLimitExceeded` error output.
//!
//! Lines sent to an error output for a reason that can differ between owners (a failed
//! Lambda, the cap) are remembered per shard until acknowledged: the data objects whose
//! range holds them name them as exceptions ([`name_exceptions`]).

use std::sync::Arc;
use std::time::Duration;

use weir_core::{ConsumerError, PartPosition, PartRun, ShardId, Timestamp};

use crate::delivery::buffers::{Appended, BufferError, Buffers, Origin};
use crate::delivery::resolve::SkipList;
use crate::delivery::sealed::Sealed;
use crate::metrics as m;
use crate::parquet::ParquetFormat;
use crate::pipeline::batch::{Intake, Line};
use crate::pipeline::error_records::{ConversionFailure, ErrorOutputType, ErrorRecord};
use crate::pipeline::route::Route;

/// How long a part whose transform fails now, but that an earlier owner may have
/// archived, is tried again before it goes to the error output anyway (where it may
/// then be twice: counted in `weir_archiver_uncertain_given_up_total`). Only intents
/// without listed parts leave that doubt: those of data objects written before the
/// Lambda was configured, since an archiver with a Lambda lists every object's parts
/// ([`crate::delivery::buffers::Limits::exact_data`]).
pub const UNCERTAIN_PATIENCE: Duration = Duration::from_secs(300);

/// What the intake keeps of one shard.
#[derive(Debug, Default)]
pub struct ShardIntake {
    /// Records already durable in an earlier owner's objects.
    pub skip: SkipList,
    /// Since when batches of the shard have been tried again for an uncertain part.
    uncertain_since: Option<Timestamp>,
    /// Parts sent to an error output for a reason that can differ between owners (a
    /// failed Lambda, the partition cap), with their ordinals, not yet acknowledged:
    /// the data objects whose range holds them name them as exceptions, so that an
    /// owner for which they go to a data partition does not take them as archived.
    elsewhere: Vec<(u64, PartPosition)>,
}

/// What a batch may change in a [`ShardIntake`], kept to take the batch back.
pub struct Before {
    skip: Option<SkipList>,
    elsewhere: usize,
}

impl ShardIntake {
    /// Kept before a batch ([`ShardIntake::take_back`] restores it).
    pub fn before_batch(&self) -> Before {
        Before { skip: (!self.skip.is_empty()).then(|| self.skip.clone()), elsewhere: self.elsewhere.len() }
    }

    /// A batch failed half way: the skip list and the parts sent elsewhere are as
    /// before it.
    pub fn take_back(&mut self, before: Before) {
        self.elsewhere.truncate(before.elsewhere);
        if let Some(skip) = before.skip {
            self.skip = skip;
        }
    }

    /// A batch was taken whole: no part of it waits as uncertain any more.
    pub fn batch_taken(&mut self) {
        self.uncertain_since = None;
    }

    /// Parts sent elsewhere and acknowledged (up to `acked`) are behind every object
    /// still to come.
    pub fn acknowledged(&mut self, acked: &weir_core::ExtendedSequenceNumber) {
        self.elsewhere.retain(|(_, p)| p.position > *acked);
    }

    /// Whether parts of the shard wait to be named as exceptions.
    pub fn sends_elsewhere(&self) -> bool {
        !self.elsewhere.is_empty()
    }
}

/// The format conversion's table, with a `DataFormatConversionConfiguration`.
pub struct Conversion {
    /// The table: data lines are converted to its rows when routed, and buffered as
    /// those.
    pub parquet: Arc<ParquetFormat>,
    /// `dataCatalogTable` of format conversion error records.
    pub catalog_table: Option<serde_json::Value>,
    /// Scratch for a line's converted rows.
    pub converted: Vec<u8>,
}

/// The intake of one batch of one shard.
pub struct BatchIntake<'a> {
    /// The archiver's name (a metric label).
    pub name: &'a str,
    /// The batch's shard.
    pub shard: &'a ShardId,
    /// When the batch is processed (error records are stamped with it).
    pub now: Timestamp,
    /// The archiver's buffers.
    pub buffers: &'a mut Buffers,
    /// What the intake keeps of the shard.
    pub state: &'a mut ShardIntake,
    /// The format conversion, if any.
    pub conversion: Option<&'a mut Conversion>,
    /// Buffers sealed meanwhile (to deliver).
    pub sealed: &'a mut Vec<Sealed>,
}

impl Intake for BatchIntake<'_> {
    fn line(&mut self, line: Line<'_>) -> Result<Option<u64>, ConsumerError> {
        // The route it takes first: a data line that does not fit the Parquet table goes
        // to the error output (for every owner alike); only then is it looked up. One
        // that fits is buffered as its converted rows.
        if Route::error_type(line.key).is_none()
            && let Some(conversion) = self.conversion.as_deref_mut()
        {
            let mut rows = std::mem::take(&mut conversion.converted);
            rows.clear();
            let r = match conversion.parquet.convert(line.bytes, &mut rows) {
                Err(reason) => self.format_conversion_failed(line, &reason.to_string()),
                Ok(_) => self.buffer(Line { bytes: &rows, ..line }),
            };
            if let Some(conversion) = self.conversion.as_deref_mut() {
                conversion.converted = rows;
            }
            return r;
        }
        self.buffer(line)
    }

    fn start_record(&mut self) {
        self.buffers.start_record();
    }

    fn finish_record(&mut self) -> Result<(), ConsumerError> {
        let sealed = self.buffers.finish_record().map_err(|e| ConsumerError::with_source("cannot seal buffers", e))?;
        self.sealed.extend(sealed);
        Ok(())
    }
}

impl BatchIntake<'_> {
    /// Buffers one line as it is (see [`Intake::line`]).
    fn buffer(&mut self, line: Line<'_>) -> Result<Option<u64>, ConsumerError> {
        let Line { key, bytes, raw, record, part, ordinal, fickle } = line;
        let (shard, now) = (self.shard, self.now);
        let state = &mut *self.state;
        if !state.skip.is_empty() {
            match seen(&mut state.skip, key, &PartPosition { position: record.position.clone(), part }, fickle) {
                Seen::Durable => {
                    metrics::counter!(m::DUPLICATES_SKIPPED).increment(1);
                    return Ok(None);
                }
                Seen::New => {}
                Seen::Uncertain => {
                    let since = *state.uncertain_since.get_or_insert(now);
                    if now.saturating_since(since) < UNCERTAIN_PATIENCE {
                        metrics::counter!(m::UNCERTAIN_RETRIES).increment(1);
                        return Err(ConsumerError::msg(format!(
                            "a part of record {} of {shard} failed its transform now, and the shard's earlier owner may have archived it: it is tried again, not sent to the error output",
                            record.position
                        )));
                    }
                    metrics::counter!(m::UNCERTAIN_GIVEN_UP).increment(1);
                    tracing::warn!(%shard, position = %record.position, part, "a part's transform kept failing after a takeover; it goes to the error output, and may also be in a data object of the shard's earlier owner");
                }
            }
        }
        match Route::error_type(key) {
            Some(t) => {
                metrics::counter!(m::ERRORS, "type" => t.as_str(), m::ARCHIVER => self.name.to_owned()).increment(1)
            }
            // `AppendDelimiterToRecord` off and no newline: the record runs into the next.
            None if bytes.last() != Some(&b'\n') && self.conversion.is_none() => {
                metrics::counter!(m::RECORDS_WITHOUT_DELIMITER).increment(1)
            }
            None => {}
        }
        let arrival = record.approximate_arrival;
        let origin = Origin { shard, position: &record.position, part, ordinal };
        let mut elsewhere = fickle;
        let appended = match self.buffers.append_key(key, bytes, origin, arrival, now) {
            Ok(a) => a,
            Err(BufferError::TooManyPartitions(n)) => {
                elsewhere = true;
                let code = "DynamicPartitioning.ActivePartitionsLimitExceeded";
                let rec = ErrorRecord::new(raw, arrival, now, code, format!("more than {n} active partitions"));
                let (mut error_key, line) = (Vec::new(), rec.to_line());
                Route::Error(ErrorOutputType::ActivePartitionsExceeded).encode(&mut error_key);
                metrics::counter!(m::ERRORS, "type" => "active-partitions-exceeded", m::ARCHIVER => self.name.to_owned())
                    .increment(1);
                self.buffers
                    .append_key(&error_key, &line, origin, arrival, now)
                    .map_err(|e| ConsumerError::with_source("cannot buffer an error record", e))?
            }
            Err(e) => return Err(ConsumerError::with_source("cannot buffer a record", e)),
        };
        let Appended { generation, sealed } = appended;
        self.sealed.extend(sealed);
        if elsewhere {
            self.state.elsewhere.push((ordinal, PartPosition { position: record.position.clone(), part }));
        }
        Ok(Some(generation))
    }

    /// Buffers the error record of a data line that does not fit the Parquet table:
    /// `rawData` is the line as it would have been converted (after the transform).
    fn format_conversion_failed(&mut self, line: Line<'_>, reason: &str) -> Result<Option<u64>, ConsumerError> {
        let arrival = line.record.approximate_arrival;
        let mut rec = ErrorRecord::new(line.bytes, arrival, self.now, "DataFormatConversion.Failed", reason);
        rec.data_catalog_table = self.conversion.as_ref().and_then(|c| c.catalog_table.clone());
        let position = &line.record.position;
        rec.conversion = Some(ConversionFailure {
            sequence_number: position.sequence.to_string(),
            sub_sequence_number: position.sub_sequence,
        });
        let (mut key, text) = (Vec::new(), rec.to_line());
        Route::Error(ErrorOutputType::FormatConversionFailed).encode(&mut key);
        self.buffer(Line { key: &key, bytes: &text, ..line })
    }
}

/// Names, in each data object's intents, the parts of its range sent elsewhere (see
/// [`ShardIntake`]); `intake_of` gives a shard's intake state.
pub fn name_exceptions<'s>(sealed: &mut [Sealed], intake_of: impl Fn(&ShardId) -> Option<&'s ShardIntake>) {
    for s in sealed.iter_mut().filter(|s| s.key.is_data() && s.except.is_empty()) {
        let mut except = Vec::new();
        for (shard, span) in s.spans() {
            let Some(state) = intake_of(shard).filter(|st| st.sends_elsewhere()) else { continue };
            let mut runs: Vec<PartRun> = Vec::new();
            let mut last_ordinal: Option<u64> = None;
            for (ordinal, part) in &state.elsewhere {
                if part.position < span.first || part.position > span.last {
                    continue;
                }
                match runs.last_mut() {
                    Some(run) if last_ordinal.is_some_and(|o| o + 1 == *ordinal) => run.last = part.clone(),
                    _ => runs.push(PartRun { first: part.clone(), last: part.clone() }),
                }
                last_ordinal = Some(*ordinal);
            }
            if !runs.is_empty() {
                except.push((shard.clone(), runs));
            }
        }
        s.except = except;
    }
}

/// What an earlier owner's intents say of a part read again.
enum Seen {
    /// It is in an object already.
    Durable,
    /// It is in no object.
    New,
    /// It failed its transform now, and the earlier owner may have put it in a data
    /// object (one of its written data objects' ranges holds it, and it did not send it
    /// to an output that was never written): tried again later, never sent to the error
    /// output while it may already be archived.
    Uncertain,
}

/// What the earlier owner's intents (`skip`) say of `part`, bound for route `key`.
fn seen(skip: &mut SkipList, key: &[u8], part: &PartPosition, fickle: bool) -> Seen {
    if skip.exactly(part) {
        return Seen::Durable;
    }
    match Route::error_type(key) {
        // A data object of this partition whose range holds it holds it, unless its
        // writer named the part an exception (sent elsewhere: a partition cap, a failed
        // transform). Claimed error objects say nothing: intents of several owners stay
        // open until a checkpoint passes them, and a part one owner sent to an error
        // output that never came may be in a later owner's data object.
        None => match Route::decode(key) {
            Some(route) if skip.covers(&route.scope(), part) => Seen::Durable,
            _ => Seen::New,
        },
        Some(t) => {
            // An intent of an earlier weir (no parts listed) names the records of its
            // range routed to its output.
            if skip.covers(&Route::Error(t).scope(), part) {
                return Seen::Durable;
            }
            // A failed transform can succeed for another owner (a Lambda failing at
            // times): the part may be in any partition's object of the range.
            if fickle && skip.any_range_holds(part) {
                return Seen::Uncertain;
            }
            Seen::New
        }
    }
}
