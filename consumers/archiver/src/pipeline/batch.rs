//! One batch through the pipeline: each record split into parts, each part routed by
//! the fast path when it is sure and by the reference steps otherwise, and every line
//! handed, in record order, to an [`Intake`] (the archiver's buffers).
//!
//! [`Router::route_batch`] is the only place that chooses between the two paths: the
//! rest of the archiver sees lines, never which path made them.

use weir_core::{ConsumerError, Record, RecordBatch, Timestamp};

use crate::fast::FastPath;
use crate::pipeline::outcome::{Failure, Outcome, Part};
use crate::pipeline::transform::Transformer;
use crate::pipeline::{Pipeline, Routed, split_failure};
use weir_firehose::ArchiverSettings;

/// One line made of a part, and where it comes from.
pub struct Line<'a> {
    /// Its route's key ([`crate::pipeline::route::Route::encode`]).
    pub key: &'a [u8],
    /// The bytes to write.
    pub bytes: &'a [u8],
    /// The part as it arrived (error records keep it).
    pub raw: &'a [u8],
    /// The stream record it belongs to.
    pub record: &'a Record,
    /// Its place among the record's parts.
    pub part: u32,
    /// Its number among every part of the shard handled (see
    /// [`crate::delivery::buffers::Origin`]).
    pub ordinal: u64,
    /// It failed a transform that may take it another time (a Lambda): its route may
    /// differ for another owner.
    pub fickle: bool,
}

/// Where a batch's lines go, in record order.
pub trait Intake {
    /// Takes one line: the generation of the buffer that took it (for the ledger), or
    /// `None` when it was skipped as already durable.
    fn line(&mut self, line: Line<'_>) -> Result<Option<u64>, ConsumerError>;
    /// The lines until [`Intake::finish_record`] are parts of one record: its parts of
    /// one route go into one object.
    fn start_record(&mut self);
    /// The record begun by [`Intake::start_record`] is complete.
    fn finish_record(&mut self) -> Result<(), ConsumerError>;
}

/// The routing of one archiver: its reference pipeline and, for the configurations
/// that have one, its fast path.
pub struct Router {
    pipeline: Pipeline,
    fast: Option<FastPath>,
}

impl Router {
    /// The router of a destination and its transform.
    pub fn new(settings: &ArchiverSettings, transformer: Transformer) -> Result<Self, super::keys::QueryError> {
        let fast = FastPath::new(&transformer, settings);
        Ok(Self { pipeline: Pipeline::new(settings, transformer)?, fast })
    }

    /// The reference pipeline (what `weir prefix eval` follows).
    pub fn pipeline(&self) -> &Pipeline {
        &self.pipeline
    }

    /// Routes the parts of `batch` and hands their lines to `intake` in record order;
    /// `first_ordinal` is the number of the shard's parts handled before the batch.
    /// Returns (record index, generation) of every line taken, and the number of parts.
    pub async fn route_batch(
        &self,
        batch: &RecordBatch,
        first_ordinal: u64,
        now: Timestamp,
        intake: &mut impl Intake,
    ) -> Result<(Vec<(usize, u64)>, u64), ConsumerError> {
        let shard = &batch.shard_id;
        let pipeline = &self.pipeline;
        // Parts in record order, with their record's index; a record that cannot be
        // split is one entry with its reason.
        let mut parts: Vec<(usize, Result<Part<'_>, super::split::SplitError>)> =
            Vec::with_capacity(batch.records.len());
        for (i, record) in batch.records.iter().enumerate() {
            match pipeline.split(record) {
                Ok(pieces) => parts.extend(pieces.into_iter().map(|p| (i, Ok(p)))),
                Err(reason) => parts.push((i, Err(reason))),
            }
        }
        // Without a fast path the transform runs once for the batch (a Lambda takes
        // many records per invocation); with one, the transform runs in place for the
        // parts the fast path is not sure of.
        let mut outcomes = match self.fast {
            Some(_) => None,
            None => {
                let whole: Vec<Part<'_>> = parts
                    .iter()
                    .filter_map(|(_, p)| p.as_ref().ok())
                    .map(|p| Part { record: p.record, piece: p.piece.clone() })
                    .collect();
                Some(pipeline.transform(shard, &whole).await.into_iter())
            }
        };
        let mut placed = Vec::with_capacity(batch.records.len());
        let (mut line, mut key) = (Vec::with_capacity(1024), Vec::with_capacity(128));
        let mut since_yield = 0;
        // The record of several parts being taken: its parts of one route go into one
        // object.
        let mut several: Option<usize> = None;
        // The part's place in its record.
        let mut place = 0u32;
        for (n, (i, part)) in parts.iter().enumerate() {
            place = if n > 0 && parts[n - 1].0 == *i { place + 1 } else { 0 };
            let ordinal = first_ordinal + n as u64;
            if several != Some(*i) {
                if several.take().is_some() {
                    intake.finish_record()?;
                }
                if parts.get(n + 1).is_some_and(|(next, _)| next == i) {
                    intake.start_record();
                    several = Some(*i);
                }
            }
            let record = &batch.records[*i];
            since_yield += record.data.len();
            if since_yield >= weir_core::YIELD_EVERY_BYTES {
                since_yield = 0;
                tokio::task::yield_now().await;
            }
            let taken = match part {
                Err(reason) => {
                    let routed = split_failure(record, now, reason);
                    take_routed(intake, routed, &record.data, record, (place, ordinal), false)?
                }
                Ok(part) => {
                    let raw = part.data();
                    line.clear();
                    if let Some(fast) = &self.fast
                        && fast.route(raw, record.approximate_arrival, &mut line, &mut key)
                    {
                        intake.line(Line {
                            key: &key,
                            bytes: &line,
                            raw,
                            record,
                            part: place,
                            ordinal,
                            fickle: false,
                        })?
                    } else {
                        let outcome = match &mut outcomes {
                            Some(outcomes) => outcomes.next(),
                            None => pipeline.transform(shard, std::slice::from_ref(part)).await.pop(),
                        };
                        let outcome = outcome.unwrap_or_else(|| {
                            Outcome::Failed(Failure::new(
                                "Transform.MissingOutcome",
                                "transform returned too few outcomes",
                            ))
                        });
                        let fickle = matches!(outcome, Outcome::Failed(_)) && pipeline.transform_can_change_its_mind();
                        let routed = pipeline.route(outcome, raw, record.approximate_arrival, now);
                        take_routed(intake, routed, raw, record, (place, ordinal), fickle)?
                    }
                }
            };
            if let Some(g) = taken {
                placed.push((*i, g));
            }
        }
        if several.is_some() {
            intake.finish_record()?;
        }
        Ok((placed, parts.len() as u64))
    }
}

/// Hands what the reference steps made of part `part` (`raw`, of `record`) to `intake`.
fn take_routed(
    intake: &mut impl Intake,
    routed: Routed,
    raw: &[u8],
    record: &Record,
    (part, ordinal): (u32, u64),
    fickle: bool,
) -> Result<Option<u64>, ConsumerError> {
    let Routed::Line { line, route } = routed else { return Ok(None) };
    let mut key = Vec::with_capacity(64);
    route.encode(&mut key);
    intake.line(Line { key: &key, bytes: &line, raw, record, part, ordinal, fickle })
}
