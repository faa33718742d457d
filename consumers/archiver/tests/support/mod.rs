//! Shared by the archiver's integration tests: settings from the fixtures, MCP
//! records, and reading objects back.
#![allow(clippy::unwrap_used, clippy::print_stdout)] // a test: a failed expectation is a failed test
#![allow(dead_code)]

use std::collections::BTreeMap;

use base64::Engine;
use bytes::Bytes;
use serde_json::Value;
use weir_core::{ExtendedSequenceNumber, Record, RecordBatch, SequenceNumber, ShardId, Timestamp};
use weir_firehose::{ArchiverSettings, from_json, validate};

pub const T0: i64 = 1_764_400_000_000;

/// The design note's delivery stream, with buffers made tiny so tests make many objects.
pub fn settings(buffer_bytes: u64) -> ArchiverSettings {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../crates/weir-firehose/tests/fixtures/mcp-destination.json"
    ))
    .unwrap();
    let mut s = validate(&from_json(&text).unwrap()).unwrap();
    s.buffer_bytes = buffer_bytes;
    // mcp-normalize ends each record with a newline already.
    s.append_delimiter = false;
    s
}

pub fn pos(n: u128) -> ExtendedSequenceNumber {
    ExtendedSequenceNumber::plain(SequenceNumber::from_u128(n))
}

/// The table of mcp-normalize's lines, for Parquet output.
pub fn mcp_table() -> weir_firehose::conversion::Conversion {
    use weir_archiver::parquet::{Deserializer, ParquetOptions};
    let columns = weir_archiver::mcp_normalize_columns();
    weir_firehose::conversion::Conversion {
        deserializer: Deserializer::default(),
        parquet: ParquetOptions::default(),
        table: Default::default(),
        columns: Some(columns),
    }
}

/// An MCP event with a unique id; every `bad_every`-th record is not JSON.
pub fn record(shard: usize, n: u128, bad_every: u128) -> Record {
    let id = format!("s{shard}-{n}");
    let data = if bad_every > 0 && n.is_multiple_of(bad_every) {
        format!("not json {id}")
    } else {
        format!(
            r#"{{"tenantId":"t{}","toolName":"tool{}","sessionId":"{id}","ts":{},"durationMs":{},"success":{},"errorCode":null}}"#,
            n % 4,
            n % 3,
            T0 + n as i64 * 1000,
            n * 7 % 500,
            !n.is_multiple_of(5)
        )
    };
    Record {
        partition_key: format!("pk{n}"),
        position: pos(n),
        approximate_arrival: Timestamp::from_millis(T0 + n as i64 * 1000),
        data: Bytes::from(data),
    }
}

/// An MCP event of tenant `n % tenants` (one partition per tenant in the design
/// note's prefix), with a unique id.
pub fn record_of_tenant(shard: usize, n: u128, tenants: u128) -> Record {
    let id = format!("s{shard}-{n}");
    let data = format!(
        r#"{{"tenantId":"t{}","toolName":"search","sessionId":"{id}","ts":{},"durationMs":3,"success":true,"errorCode":null}}"#,
        n % tenants,
        T0 + n as i64,
    );
    Record {
        partition_key: format!("pk{n}"),
        position: pos(n),
        approximate_arrival: Timestamp::from_millis(T0 + n as i64),
        data: Bytes::from(data),
    }
}

pub fn batch(shard: &ShardId, records: Vec<Record>) -> RecordBatch {
    RecordBatch { shard_id: shard.clone(), records, millis_behind_latest: Some(0), child_shards: None }
}

/// The text of an object in any format the archiver writes (found from its bytes).
pub fn object_text(b: &[u8]) -> String {
    use weir_core::object_format::{ObjectFormat, decode};
    if b.starts_with(b"PAR1") {
        return parquet_lines(b);
    }
    String::from_utf8(decode(ObjectFormat::sniff(b), b, u64::MAX).unwrap()).unwrap()
}

/// A Parquet object's rows as JSON lines (the parquet crate's row reader).
pub fn parquet_lines(b: &[u8]) -> String {
    use parquet::file::reader::{FileReader, SerializedFileReader};
    let reader = SerializedFileReader::new(Bytes::copy_from_slice(b)).expect("a Parquet file");
    let mut out = String::new();
    for row in reader.get_row_iter(None).unwrap() {
        let row = row.unwrap();
        let object: serde_json::Map<String, Value> = row
            .get_column_iter()
            .map(|(name, field)| {
                let value = match field {
                    parquet::record::Field::Str(s) => Value::String(s.clone()),
                    parquet::record::Field::Null => Value::Null,
                    other => Value::String(other.to_string()),
                };
                (name.clone(), value)
            })
            .collect();
        out.push_str(&Value::Object(object).to_string());
        out.push('\n');
    }
    out
}

/// Every archived record's session id (or raw data for error records), with the
/// number of objects lines it appears in; keys of claim objects are counted apart.
pub struct Archive {
    pub count: BTreeMap<String, usize>,
    pub data_lines: Vec<(String, Value)>,
    pub error_lines: Vec<(String, Value)>,
    pub claims: usize,
}

pub fn read_archive(objects: &BTreeMap<String, Bytes>) -> Archive {
    let mut a = Archive { count: BTreeMap::new(), data_lines: vec![], error_lines: vec![], claims: 0 };
    for (key, body) in objects {
        if key.starts_with("_weir/") {
            continue; // intent manifests, not archive objects
        }
        let text = object_text(body);
        if text.is_empty() {
            a.claims += 1;
            continue;
        }
        for line in text.lines() {
            let v: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{key}: {line:?}: {e}"));
            let id = if let Some(raw) = v.get("rawData").and_then(Value::as_str) {
                let raw = base64::engine::general_purpose::STANDARD.decode(raw).unwrap();
                let raw = String::from_utf8_lossy(&raw).to_string();
                a.error_lines.push((key.clone(), v.clone()));
                raw.rsplit(' ').next().unwrap_or_default().to_owned()
            } else {
                a.data_lines.push((key.clone(), v.clone()));
                v["session_id"].as_str().unwrap_or_default().to_owned()
            };
            *a.count.entry(id).or_default() += 1;
        }
    }
    a
}
