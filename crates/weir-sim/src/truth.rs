//! What the simulation knows to be true, and the invariants checked against it.
//!
//! - **At every checkpoint write** (when the write takes effect, reply lost or not): no
//!   consumer's checkpoint passes a record a part of which is in no object yet.
//! - **At every lease write**: no item over DynamoDB's 400 KB, no transaction over 4 MB
//!   (the world's table refuses them as DynamoDB would, and the refusal is a violation).
//! - **At every object put**: no part of a record already in another object of the same
//!   archiver (twice in the data, or in both the data and the error output).
//! - **At the end**: every part of every record is in exactly one object of each
//!   archiver, data or error output, never both and never neither.
//!
//! Objects are read when they are put (create-only, never overwritten, never deleted
//! but for intent manifests), so "in an object" means durable.

use std::collections::{BTreeMap, HashMap};

use base64::Engine;
use weir_core::{Checkpoint, ExtendedSequenceNumber, ShardId};

use crate::records::{PartId, ids_in};

/// Where a part was found.
#[derive(Debug, Clone)]
struct Place {
    key: String,
    error: bool,
}

/// Counts for the report.
#[derive(Debug, Clone, Default)]
pub struct Counts {
    /// Records written to the stream.
    pub records: u64,
    /// Parts expected in each archive.
    pub parts: u64,
    /// Archive objects put (data and error), claims apart.
    pub objects: u64,
    /// Claims (empty objects) put.
    pub claims: u64,
    /// Intent manifests put.
    pub manifests: u64,
    /// Checkpoint writes checked.
    pub checkpoints: u64,
    /// The largest lease item written, in bytes.
    pub largest_item: usize,
    /// The largest transaction written, in bytes.
    pub largest_transaction: usize,
}

/// The truth of one simulation.
#[derive(Debug, Default)]
pub struct Truth {
    /// The archivers (consumer names; each writes under `<name>/`).
    consumers: Vec<String>,
    /// Per shard, its records in stream order.
    records: BTreeMap<ShardId, Vec<(ExtendedSequenceNumber, u64)>>,
    /// Each record's parts.
    parts: HashMap<u64, Vec<PartId>>,
    /// Per archiver, where each part was found.
    found: BTreeMap<String, HashMap<PartId, Vec<Place>>>,
    /// Per (archiver, shard): how many of the shard's first records are known durable.
    durable: BTreeMap<(String, ShardId), usize>,
    violations: Vec<String>,
    /// For the report.
    pub counts: Counts,
}

/// Most violations kept (the first ones say the most).
const KEPT: usize = 40;

impl Truth {
    /// The truth of a simulation whose archivers are `consumers`.
    pub fn new(consumers: Vec<String>) -> Self {
        let found = consumers.iter().map(|c| (c.clone(), HashMap::new())).collect();
        Self { consumers, found, ..Self::default() }
    }

    /// A violation, stamped with the simulated time (ms).
    pub fn violate(&mut self, at_ms: u64, what: String) {
        if self.violations.len() < KEPT {
            self.violations.push(format!("[{at_ms} ms] {what}"));
        }
    }

    /// The violations so far.
    pub fn violations(&self) -> &[String] {
        &self.violations
    }

    /// A record was written to the stream.
    pub fn written(&mut self, shard: ShardId, position: ExtendedSequenceNumber, record: u64, parts: Vec<PartId>) {
        self.counts.records += 1;
        self.counts.parts += parts.len() as u64;
        self.records.entry(shard).or_default().push((position, record));
        self.parts.insert(record, parts);
    }

    /// The last record of each shard.
    pub fn ends(&self) -> BTreeMap<ShardId, ExtendedSequenceNumber> {
        self.records.iter().filter_map(|(s, r)| Some((s.clone(), r.last()?.0.clone()))).collect()
    }

    /// An object was created at `key`: the parts it holds are durable. A part already in
    /// another object of the same archiver (duplicated, or in both the data and the error
    /// output) is a violation at this step, so a failing seed's trace shows the put that
    /// made it; the end's check counts it again. Returns the violations found here.
    #[must_use = "the violations go into the trace too"]
    pub fn put(&mut self, at_ms: u64, key: &str, body: &[u8]) -> Vec<String> {
        if key.starts_with("_weir/") {
            self.counts.manifests += 1;
            return Vec::new();
        }
        let Some(consumer) = self.consumers.iter().find(|c| key.starts_with(&format!("{c}/"))).cloned() else {
            let what = format!("object {key} is outside every archiver's prefix");
            self.violate(at_ms, what.clone());
            return vec![what];
        };
        let error = key.starts_with(&format!("{consumer}/errors/"));
        let ids = match object_ids(body, error) {
            Ok(ids) => ids,
            Err(e) => {
                let what = format!("object {key} cannot be read: {e}");
                self.violate(at_ms, what.clone());
                return vec![what];
            }
        };
        if ids.is_empty() {
            self.counts.claims += 1;
            return Vec::new();
        }
        self.counts.objects += 1;
        let found = self.found.entry(consumer.clone()).or_default();
        let mut again = Vec::new();
        for id in ids {
            let places = found.entry(id).or_default();
            if let Some(other) = places.iter().find(|p| p.error != error).or(places.first()) {
                let how = if other.error == error { "twice" } else { "in both the data and the error output" };
                again.push(format!("{id} {how} (also in {})", other.key));
            }
            places.push(Place { key: key.to_owned(), error });
        }
        if again.is_empty() {
            return Vec::new();
        }
        let n = again.len();
        let shown: Vec<String> = again.into_iter().take(4).collect();
        let what = format!("{consumer}: object {key} puts {n} part(s) a second time: {}", shown.join("; "));
        self.violate(at_ms, what.clone());
        vec![what]
    }

    /// An object was deleted (only intent manifests may be).
    pub fn deleted(&mut self, at_ms: u64, key: &str) {
        if !key.starts_with("_weir/intents/") {
            self.violate(at_ms, format!("archive object {key} deleted"));
        }
    }

    /// A lease or a transaction of `bytes` was written (sizes for the report).
    pub fn wrote(&mut self, item: usize, transaction: usize) {
        self.counts.largest_item = self.counts.largest_item.max(item);
        self.counts.largest_transaction = self.counts.largest_transaction.max(transaction);
    }

    /// `consumer`'s checkpoint of `shard` was written as `cp`: every record it passes
    /// must be in objects already, every part of it.
    pub fn checkpointed(&mut self, at_ms: u64, shard: &ShardId, consumer: &str, cp: &Checkpoint) {
        if !self.found.contains_key(consumer) {
            return;
        }
        self.counts.checkpoints += 1;
        let records = self.records.get(shard).map(Vec::as_slice).unwrap_or_default();
        let upto = match cp {
            Checkpoint::ShardEnd => records.len(),
            Checkpoint::At(p) => records.partition_point(|(pos, _)| pos <= p),
            _ => 0,
        };
        let key = (consumer.to_owned(), shard.clone());
        let from = self.durable.get(&key).copied().unwrap_or(0);
        let mut missing = Vec::new();
        for (pos, record) in records.get(from..upto).unwrap_or_default() {
            for part in self.parts.get(record).map(Vec::as_slice).unwrap_or_default() {
                if !self.found[consumer].contains_key(part) {
                    missing.push(format!("{part} at {pos}"));
                }
            }
        }
        if !missing.is_empty() {
            let n = missing.len();
            missing.truncate(5);
            self.violate(
                at_ms,
                format!(
                    "checkpoint of {consumer} on {shard} at {cp:?} passes {n} part(s) in no object: {}",
                    missing.join(", ")
                ),
            );
        }
        self.durable.insert(key, from.max(upto));
    }

    /// The end: every part in exactly one object of each archiver.
    pub fn check_exactly_once(&mut self, at_ms: u64) {
        let mut problems = Vec::new();
        let mut whereabouts: HashMap<u64, String> = HashMap::new();
        for (shard, records) in &self.records {
            for (pos, record) in records {
                whereabouts.insert(
                    *record,
                    format!("{shard}@{}", pos.sequence.as_str().trim_start_matches(['4', '9']).trim_start_matches('0')),
                );
            }
        }
        for consumer in self.consumers.clone() {
            let found = &self.found[&consumer];
            let (mut lost, mut twice, mut both) = (Vec::new(), Vec::new(), Vec::new());
            let mut records: Vec<(&u64, &Vec<PartId>)> = self.parts.iter().collect();
            records.sort();
            for (_, parts) in records {
                for part in parts {
                    match found.get(part).map(Vec::as_slice).unwrap_or_default() {
                        [] => {
                            lost.push(format!("{part} ({})", whereabouts.get(&part.record).map_or("?", String::as_str)))
                        }
                        [_] => {}
                        places => {
                            let keys: Vec<&str> = places.iter().map(|p| p.key.as_str()).collect();
                            let error = places.iter().filter(|p| p.error).count();
                            let at = whereabouts.get(&part.record).map_or("?", String::as_str);
                            let entry = format!("{part} ({at}) in {}", keys.join(" and "));
                            if error > 0 && error < places.len() { both.push(entry) } else { twice.push(entry) }
                        }
                    }
                }
            }
            let unknown: Vec<String> = found
                .keys()
                .filter(|id| !self.parts.get(&id.record).is_some_and(|p| p.contains(id)))
                .map(ToString::to_string)
                .collect();
            for (what, list) in [
                ("lost (in no object)", lost),
                ("duplicated", twice),
                ("in both the data and the error output", both),
                ("never written to the stream", unknown),
            ] {
                if !list.is_empty() {
                    let n = list.len();
                    let shown: Vec<String> = list.into_iter().take(4).collect();
                    problems.push(format!("{consumer}: {n} part(s) {what}: {}", shown.join("; ")));
                }
            }
        }
        for p in problems {
            self.violate(at_ms, p);
        }
    }
}

/// The part ids an object holds (none for a claim).
fn object_ids(body: &[u8], error: bool) -> Result<Vec<PartId>, String> {
    if body.starts_with(b"PAR1") {
        return parquet_ids(body);
    }
    let format = weir_core::object_format::ObjectFormat::sniff(body);
    let text = weir_core::object_format::decode(format, body, u64::MAX).map_err(|e| e.to_string())?;
    let text = String::from_utf8(text).map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let v: serde_json::Value = serde_json::from_str(line).map_err(|e| format!("line {line:?}: {e}"))?;
        if error {
            let raw = v.get("rawData").and_then(serde_json::Value::as_str).ok_or("error record without rawData")?;
            let raw = base64::engine::general_purpose::STANDARD.decode(raw).map_err(|e| e.to_string())?;
            let ids = ids_in(&String::from_utf8_lossy(&raw));
            if ids.is_empty() {
                return Err(format!("error record without an id: {line}"));
            }
            out.extend(ids);
        } else {
            let ids = ids_in(line);
            if ids.len() != 1 {
                return Err(format!("data line without one id: {line}"));
            }
            out.extend(ids);
        }
    }
    Ok(out)
}

/// The `id` column of a Parquet object.
fn parquet_ids(body: &[u8]) -> Result<Vec<PartId>, String> {
    use parquet::file::reader::{FileReader, SerializedFileReader};
    let reader = SerializedFileReader::new(bytes::Bytes::copy_from_slice(body)).map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    for row in reader.get_row_iter(None).map_err(|e| e.to_string())? {
        let row = row.map_err(|e| e.to_string())?;
        let id = row
            .get_column_iter()
            .find(|(name, _)| name.as_str() == "id")
            .map(|(_, v)| v.to_string())
            .ok_or("a row without id")?;
        let id = ids_in(&format!("id\":\"{}", id.trim_matches('"'))).pop().ok_or(format!("row id {id}"))?;
        out.push(id);
    }
    Ok(out)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a test: a failed expectation is a failed test
mod tests {
    use base64::Engine;
    use weir_core::{ExtendedSequenceNumber, SequenceNumber, ShardId};

    use super::Truth;
    use crate::records::PartId;

    #[test]
    fn a_part_put_a_second_time_is_flagged_at_that_put() {
        let mut truth = Truth::new(vec!["a".to_owned()]);
        let id = PartId { record: 7, part: 0 };
        truth.written(
            ShardId::new("s"),
            ExtendedSequenceNumber::plain(SequenceNumber::parse("1").unwrap()),
            7,
            vec![id],
        );
        let line = format!("{{\"id\":\"{id}\"}}\n");
        assert!(truth.put(10, "a/data/one", line.as_bytes()).is_empty());

        let twice = truth.put(20, "a/data/two", line.as_bytes());
        assert_eq!(twice, ["a: object a/data/two puts 1 part(s) a second time: r7.0 twice (also in a/data/one)"]);
        let raw = base64::engine::general_purpose::STANDARD.encode(&line);
        let error = format!("{{\"rawData\":\"{raw}\"}}\n");
        let both = truth.put(30, "a/errors/three", error.as_bytes());
        assert_eq!(
            both,
            [
                "a: object a/errors/three puts 1 part(s) a second time: r7.0 in both the data and the error output (also in a/data/one)"
            ]
        );

        truth.check_exactly_once(40);
        let violations = truth.violations();
        assert_eq!(violations.len(), 3, "{violations:?}");
        assert!(violations[0].starts_with("[20 ms] a: object a/data/two"), "{violations:?}");
        assert!(violations[2].contains("in both the data and the error output: r7.0"), "{violations:?}");
    }
}
