//! The records a simulation writes to its stream, and how their parts are found again
//! in archived objects.
//!
//! Every part (a record, or one document of a multi-part record) carries its own id,
//! `r<record>.<part>`: as the `id` field of its JSON, or as `id=r<record>.<part>` in a
//! part that is not JSON. Data lines keep the field; error records keep the part (or the
//! whole record) in `rawData`, where the ids are found again.

use std::io::Write;

use bytes::Bytes;
use rand::Rng;
use rand::rngs::StdRng;

/// A part's identity: record number and part number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PartId {
    /// The record (its number in the order written).
    pub record: u64,
    /// The part within the record.
    pub part: u32,
}

impl std::fmt::Display for PartId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "r{}.{}", self.record, self.part)
    }
}

/// How records are shaped, matching the archiver's processors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordShape {
    /// One JSON document per record.
    Plain,
    /// One to four JSON documents per record, concatenated (`RecordDeAggregation`).
    Concatenated,
    /// CloudWatch Logs subscription payloads (gzip'd JSON) of one to four log events
    /// (`Decompression` with `CloudWatchLogProcessing`); some are control messages.
    CloudWatchLogs,
}

/// What makes records odd, per part.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Oddities {
    /// A part that is not JSON (to the error output).
    pub malformed: f64,
    /// A part whose `n` is text (a Parquet table refuses it).
    pub misfit: f64,
}

/// One record to write: its data, partition key and the parts the archive must hold.
#[derive(Debug, Clone)]
pub struct Made {
    /// The record's data.
    pub data: Bytes,
    /// Its partition key.
    pub partition_key: String,
    /// Its parts, each to be archived once (none for a control message).
    pub parts: Vec<PartId>,
}

fn part_json(id: PartId, tenant: u32, misfit: bool) -> String {
    let n = if misfit { "\"many\"".to_owned() } else { id.record.to_string() };
    format!(
        r#"{{"id":"{id}","tenantId":"t{tenant}","toolName":"tool{}","n":{n},"ok":{}}}"#,
        id.record % 3,
        !id.record.is_multiple_of(5)
    )
}

fn part_text(rng: &mut StdRng, id: PartId, tenants: u32, odd: Oddities) -> String {
    if odd.malformed > 0.0 && rng.random_bool(odd.malformed) {
        return format!("bad part id={id}");
    }
    let misfit = odd.misfit > 0.0 && rng.random_bool(odd.misfit);
    part_json(id, rng.random_range(0..tenants.max(1)), misfit)
}

/// Record number `n`.
pub fn make(rng: &mut StdRng, n: u64, shape: RecordShape, tenants: u32, odd: Oddities) -> Made {
    let partition_key = format!("pk-{}", rng.random::<u32>());
    let count = match shape {
        RecordShape::Plain => 1,
        _ => rng.random_range(1..=4u32),
    };
    let ids: Vec<PartId> = (0..count).map(|part| PartId { record: n, part }).collect();
    let texts: Vec<String> = ids.iter().map(|id| part_text(rng, *id, tenants, odd)).collect();
    let data = match shape {
        RecordShape::Plain | RecordShape::Concatenated => texts.concat().into_bytes(),
        RecordShape::CloudWatchLogs => {
            if rng.random_bool(0.05) {
                return Made { data: cloudwatch(&control_message()), partition_key, parts: Vec::new() };
            }
            if odd.malformed > 0.0 && rng.random_bool(odd.malformed / 4.0) {
                // Not gzip at all: decompression fails, the record goes whole.
                let ids: Vec<String> = ids.iter().map(|id| format!("id={id}")).collect();
                return Made {
                    data: Bytes::from(format!("not gzip {}", ids.join(" "))),
                    partition_key,
                    parts: ids_of(n, count),
                };
            }
            cloudwatch(&data_message(n, &texts)).to_vec()
        }
    };
    Made { data: Bytes::from(data), partition_key, parts: ids }
}

fn ids_of(n: u64, count: u32) -> Vec<PartId> {
    (0..count).map(|part| PartId { record: n, part }).collect()
}

fn data_message(n: u64, messages: &[String]) -> serde_json::Value {
    serde_json::json!({
        "messageType": "DATA_MESSAGE",
        "owner": "123456789012",
        "logGroup": "/mcp/tool-calls",
        "logStream": format!("server-{}", n % 3),
        "subscriptionFilters": ["to-kinesis"],
        "logEvents": messages.iter().enumerate().map(|(i, m)| serde_json::json!({
            "id": format!("{n}{i:06}"),
            "timestamp": 1_764_400_000_000i64 + n as i64,
            "message": m,
        })).collect::<Vec<_>>(),
    })
}

fn control_message() -> serde_json::Value {
    serde_json::json!({
        "messageType": "CONTROL_MESSAGE",
        "owner": "CloudwatchLogs",
        "logGroup": "",
        "logStream": "",
        "subscriptionFilters": [],
        "logEvents": [{"id": "", "timestamp": 1_764_400_000_000i64, "message": "CWL CONTROL MESSAGE: Checking health of destination Kinesis stream."}],
    })
}

/// What a subscription filter writes: the document, gzip-compressed.
fn cloudwatch(document: &serde_json::Value) -> Bytes {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    // Writing to a Vec cannot fail.
    let _ = e.write_all(document.to_string().as_bytes());
    Bytes::from(e.finish().unwrap_or_default())
}

/// The ids in `text`: every `id":"r<n>.<k>` and `id=r<n>.<k>`.
pub fn ids_in(text: &str) -> Vec<PartId> {
    let mut out = Vec::new();
    for marker in ["id\":\"r", "id=r"] {
        for (at, _) in text.match_indices(marker) {
            if let Some(id) = parse_id(&text[at + marker.len()..]) {
                out.push(id);
            }
        }
    }
    out.sort();
    out
}

/// `<n>.<k>` at the start of `s`.
fn parse_id(s: &str) -> Option<PartId> {
    let digits = |s: &str| s.bytes().take_while(u8::is_ascii_digit).count();
    let n = digits(s);
    let rest = s.get(n..)?.strip_prefix('.')?;
    let k = digits(rest);
    Some(PartId { record: s[..n].parse().ok()?, part: rest[..k].parse().ok()? })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn ids_are_found_in_json_and_in_text() {
        let a = PartId { record: 12, part: 3 };
        assert_eq!(ids_in(&part_json(a, 1, false)), vec![a]);
        assert_eq!(
            ids_in("bad part id=r7.0 and id=r7.1"),
            vec![PartId { record: 7, part: 0 }, PartId { record: 7, part: 1 }]
        );
        assert!(ids_in("nothing here r1.2").is_empty());
        let mut rng = StdRng::seed_from_u64(1);
        let odd = Oddities { malformed: 0.0, misfit: 0.0 };
        let m = make(&mut rng, 5, RecordShape::Concatenated, 3, odd);
        assert_eq!(ids_in(std::str::from_utf8(&m.data).unwrap_or_default()), m.parts);
    }
}
