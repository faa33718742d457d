//! Bad input, read back by DuckDB from the local filesystem: more than 40 kinds of
//! malformed or hostile records go through the design note's pipeline (mcp-normalize,
//! jq `{tenantId: .tenant_id, toolName: .tool_name}`, hive-style prefix, GZIP) next to
//! valid ones. Each lands where Firehose would put it, or where the partition-value
//! sanitiser sends it, with the right error code; nothing panics, nothing is lost, and
//! no object escapes its prefix. The same corpus runs in every `CompressionFormat`:
//! objects of ZIP, Snappy, Hadoop Snappy and UNCOMPRESSED are turned into GZIP copies
//! for DuckDB (their own readers are in `archive_formats`), and in Parquet
//! (`DataFormatConversionConfiguration`), read by DuckDB's `read_parquet`.
#![allow(clippy::unwrap_used, clippy::print_stdout)] // a test: a failed expectation is a failed test

use std::collections::BTreeMap;
use std::sync::Arc;

use base64::Engine;
use bytes::Bytes;
use weir_archiver::Transformer;
use weir_archiver::{Archiver, ArchiverOptions};
use weir_core::kpl::{aggregate, deaggregate};
use weir_core::{
    CloseReason, Consumer, ExtendedSequenceNumber, Record, RecordBatch, SequenceNumber, ShardId, Timestamp,
};
use weir_e2e::duckdb;
use weir_firehose::{from_json, validate};
use weir_local::FsObjectSink;
use weir_testkit::{CrashSwitch, ManualClock, SimAcks, SimLeases};

const T0: i64 = 1_764_400_000_000;

/// Not a `CompressionFormat`: UNCOMPRESSED with a `DataFormatConversionConfiguration`
/// writing Parquet with the table of mcp-normalize's lines.
const PARQUET: &str = "PARQUET";

/// Where a case must land.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    /// A data row with this tenant partition.
    Data(&'static str),
    /// An error record of this type and code.
    Error(&'static str, &'static str),
}

use Expect::*;
const PF: &str = "processing-failed";
const PT: &str = "partitioning-failed";
const NORM: &str = "Transform.McpNormalize";
const DP: &str = "DynamicPartitioning.MetadataExtractionFailed";

fn ev(tenant: &str, extra: &str) -> Vec<u8> {
    format!(r#"{{"tenantId":{tenant},"toolName":"search","sessionId":"s","durationMs":5,"success":true{extra}}}"#)
        .into_bytes()
}

fn corpus() -> Vec<(&'static str, Vec<u8>, Expect)> {
    let long = "x".repeat(300);
    let mut one_mib = ev("\"big\"", &format!(r#","blob":"{}""#, "a".repeat(1 << 20)));
    one_mib.truncate(one_mib.len());
    let deep = ev("\"deep\"", &format!(r#","arguments":{}1{}"#, "[".repeat(200), "]".repeat(200)));
    let members: String = (0..100_000).map(|i| format!(r#","k{i}":{i}"#)).collect();
    let wide = ev("\"wide\"", &format!(r#","arguments":{{"first":0{members}}}"#));
    let huge_tenant = ev(&format!("\"{}\"", "t".repeat(1 << 20)), "");
    vec![
        ("valid", ev("\"t-1\"", ""), Data("t-1")),
        ("arguments nested 200 deep", deep, Error(PF, NORM)),
        ("arguments with 100,000 members", wide, Data("wide")),
        ("invalid utf-8 in a key", [&b"{\"tenantId\":\"t-1\",\"k\xff\":1"[..], b"}"].concat(), Error(PF, NORM)),
        ("raw NUL bytes in a string", b"{\"tenantId\":\"t\x00-1\",\"toolName\":\"x\"}".to_vec(), Error(PF, NORM)),
        ("a 1 MiB tenant (partition value)", huge_tenant, Error(PT, DP)),
        ("invalid json", b"{\"tenantId\":".to_vec(), Error(PF, NORM)),
        ("invalid utf-8", vec![0xff, 0xfe, 0x7b, 0x7d], Error(PF, NORM)),
        ("empty record", Vec::new(), Error(PF, NORM)),
        ("whitespace only", b"   \n".to_vec(), Error(PF, NORM)),
        ("1 MiB record", one_mib, Data("big")),
        ("utf-8 BOM", [&[0xef, 0xbb, 0xbf][..], &ev("\"t-1\"", "")].concat(), Error(PF, NORM)),
        (
            "duplicate keys (last wins, as in jq)",
            br#"{"tenantId":"first","tenantId":"dup-last","toolName":"x"}"#.to_vec(),
            Data("dup-last"),
        ),
        ("number out of range", ev("\"t-1\"", r#","durationMs":1e400"#), Error(PF, NORM)),
        ("huge integer", ev("\"huge\"", r#","n":123456789012345678901234567890"#), Data("huge")),
        ("tenant is an object", ev(r#"{"a":1}"#, ""), Error(PT, DP)),
        ("tenant is an array", ev(r#"["a"]"#, ""), Error(PT, DP)),
        ("tenant null -> unknown", ev("null", ""), Data("unknown")),
        ("tenant missing -> unknown", br#"{"toolName":"x"}"#.to_vec(), Data("unknown")),
        ("tenant is a number", ev("42", ""), Data("42")),
        ("tenant is a boolean", ev("true", ""), Data("true")),
        ("tenant with a slash", ev("\"a/tool=evil\"", ""), Error(PT, DP)),
        ("tenant ..", ev("\"..\"", ""), Error(PT, DP)),
        ("tenant ../../x", ev("\"../../x\"", ""), Error(PT, DP)),
        ("tenant .", ev("\".\"", ""), Error(PT, DP)),
        ("tenant with a newline", ev("\"a\\nb\"", ""), Error(PT, DP)),
        ("tenant with a backslash", ev("\"a\\\\b\"", ""), Error(PT, DP)),
        ("tenant with a NUL", ev("\"a\\u0000b\"", ""), Error(PT, DP)),
        ("tenant with an expression opener", ev("\"!{timestamp:yyyy}\"", ""), Error(PT, DP)),
        ("empty tenant", ev("\"\"", ""), Error(PT, DP)),
        ("300-character tenant", ev(&format!("\"{long}\""), ""), Error(PT, DP)),
        ("unicode tenant", ev("\"テナント\"", ""), Data("テナント")),
        ("tenant with a space", ev("\"acme corp\"", ""), Data("acme corp")),
        ("tenant percent-encoded slash (readers would decode it)", ev("\"a%2Fb\"", ""), Error(PT, DP)),
        ("JSON null record", b"null".to_vec(), Error(PF, NORM)),
        ("JSON array record -> defaults", b"[1,2]".to_vec(), Data("unknown")),
        ("JSON string record -> defaults", b"\"hello\"".to_vec(), Data("unknown")),
        ("ts not a time", ev("\"t-2\"", r#","ts":"yesterday""#), Error(PF, NORM)),
        ("ts RFC 3339", ev("\"t-2\"", r#","ts":"2026-11-29T10:00:00+01:00""#), Data("t-2")),
        ("trailing garbage", [&ev("\"t-1\"", "")[..], b" x"].concat(), Error(PF, NORM)),
        ("two objects in one record", [&ev("\"t-1\"", "")[..], &ev("\"t-2\"", "")[..]].concat(), Error(PF, NORM)),
        ("tool with a slash", br#"{"tenantId":"t-3","toolName":"a/b"}"#.to_vec(), Error(PT, DP)),
        (
            "corrupt KPL aggregate (passed through)",
            [&[0xf3, 0x89, 0x9a, 0xc2][..], &[7u8; 40][..]].concat(),
            Error(PF, NORM),
        ),
    ]
}

#[tokio::test(flavor = "current_thread")]
async fn every_bad_record_lands_where_firehose_would_put_it() {
    for format in ["GZIP", "UNCOMPRESSED", "ZIP", "Snappy", "HADOOP_SNAPPY", PARQUET] {
        corpus_in(format).await;
    }
}

/// Copies every object under `from` into `to` as GZIP (`.gz` appended unless present).
fn gzip_copies(from: &std::path::Path, to: &std::path::Path) {
    use weir_core::object_format::{ObjectFormat, decode, encode};
    for file in walk(from) {
        let rel = file.strip_prefix(from).unwrap().to_string_lossy().into_owned();
        if rel.starts_with(".weir") {
            continue;
        }
        let body = std::fs::read(&file).unwrap();
        let plain = decode(ObjectFormat::sniff(&body), &body, u64::MAX).unwrap();
        let name = if rel.ends_with(".gz") { rel } else { format!("{rel}.gz") };
        let target = to.join(name);
        std::fs::create_dir_all(target.parent().unwrap()).unwrap();
        std::fs::write(target, encode(ObjectFormat::Gzip, &plain).unwrap()).unwrap();
    }
}

async fn corpus_in(format: &str) {
    println!("corpus in {format}");
    let dir = tempfile::tempdir().unwrap();
    let text = include_str!("../../crates/weir-firehose/tests/fixtures/mcp-destination.json");
    let mut destination = from_json(text).unwrap();
    destination.compression_format = Some(format.to_owned());
    if format == PARQUET {
        destination.compression_format = Some("UNCOMPRESSED".into());
        destination.data_format_conversion = Some(Default::default());
    }
    let mut settings = validate(&destination).unwrap();
    if let Some(conversion) = settings.conversion.as_mut() {
        conversion.columns = Some(weir_archiver::mcp_normalize_columns());
    }
    let extension = settings.file_extension.clone();
    settings.append_delimiter = false;
    let mut options = ArchiverOptions::new("mcp-archive", settings);
    options.transformer = Transformer::McpNormalize;
    let clock = ManualClock::new(Timestamp::from_millis(T0));
    let sink = Arc::new(FsObjectSink::new(dir.path()).unwrap());
    let mut archiver = Archiver::new(options, sink, Arc::new(clock)).unwrap();
    let leases = SimLeases::new();
    let acks = SimAcks::new(leases.clone(), 1, CrashSwitch::after(None));
    let shard = ShardId::new("shardId-000000000000");
    archiver.on_shard_open(&leases.take(&shard, 1)).await.unwrap();

    let cases = corpus();
    assert!(cases.len() > 30, "{} kinds", cases.len());
    let mut records = Vec::new();
    for (i, (_, data, _)) in cases.iter().enumerate() {
        records.push(Record {
            partition_key: format!("case-{i}"),
            position: ExtendedSequenceNumber::plain(SequenceNumber::from_u128(i as u128 + 1)),
            approximate_arrival: Timestamp::from_millis(T0 + i as i64),
            data: Bytes::from(data.clone()),
        });
    }
    // A KPL aggregate of three valid events, de-aggregated as the stream readers do.
    let kpl = Record {
        partition_key: "kpl".into(),
        position: ExtendedSequenceNumber::plain(SequenceNumber::from_u128(1000)),
        approximate_arrival: Timestamp::from_millis(T0),
        data: aggregate(&(0..3).map(|i| (format!("k{i}"), Bytes::from(ev("\"kpl\"", "")))).collect::<Vec<_>>()),
    };
    let (parts, _) = deaggregate(kpl);
    assert_eq!(parts.len(), 3);
    records.extend(parts);
    let total = records.len();
    for chunk in records.chunks(7) {
        let batch = RecordBatch {
            shard_id: shard.clone(),
            records: chunk.to_vec(),
            millis_behind_latest: None,
            child_shards: None,
        };
        archiver.on_batch(&batch, &acks).await.unwrap();
    }
    archiver.on_shard_close(&shard, CloseReason::Shutdown, &acks).await.unwrap();
    assert_eq!(leases.checkpoint(&shard).map(|p| p.sequence.to_string()), Some("1000".into()), "all acknowledged");

    // Every data object is under its partition; DuckDB reads them all (as GZIP).
    let copies = tempfile::tempdir().unwrap();
    gzip_copies(dir.path(), copies.path());
    let root = copies.path().display();
    let rows = if format == PARQUET {
        duckdb(&format!(
            "select tenant, tenant_id, count(*) from read_parquet('{}/tool-events/*/*/*/*/*/*/*.parquet', \
             hive_partitioning = true) group by all order by all",
            dir.path().display()
        ))
    } else {
        duckdb(&format!(
            "select tenant, tenant_id, count(*) from read_json_auto('{root}/tool-events/*/*/*/*/*/*/*.gz', \
             hive_partitioning = true, format = 'newline_delimited', maximum_object_size = 4000000) group by all order by all"
        ))
    };
    let mut got: BTreeMap<String, u64> = BTreeMap::new();
    for r in &rows {
        assert_eq!(plain(&r[0]), plain(&r[1]), "partition column equals tenant_id: {r:?}");
        *got.entry(plain(&r[0])).or_default() += r[2].as_u64().unwrap();
    }
    let mut want: BTreeMap<String, u64> = BTreeMap::new();
    for (_, _, e) in &cases {
        if let Data(t) = e {
            *want.entry((*t).to_owned()).or_default() += 1;
        }
    }
    *want.entry("kpl".into()).or_default() += 3;
    assert_eq!(got, want, "data rows per tenant");

    // Error objects: each failed case once, with its reason and raw bytes.
    let errors = duckdb(&format!(
        "select split_part(filename, '/', -5), errorCode, rawData, errorMessage from read_json_auto('{root}/tool-events-errors/*/*/*/*/*.gz', \
         format = 'newline_delimited', filename = true, maximum_object_size = 4000000)"
    ));
    let mut by_raw: BTreeMap<Vec<u8>, (String, String)> = BTreeMap::new();
    for r in &errors {
        let raw = base64::engine::general_purpose::STANDARD.decode(r[2].as_str().unwrap()).unwrap();
        let prev = by_raw.insert(raw, (r[0].as_str().unwrap().to_owned(), r[1].as_str().unwrap().to_owned()));
        assert!(prev.is_none(), "an error record twice: {r:?}");
        assert!(!r[3].as_str().unwrap().is_empty(), "a reason is given: {r:?}");
    }
    for (name, data, e) in &cases {
        if let Error(kind, code) = e {
            let got = by_raw.get(data).unwrap_or_else(|| panic!("{name}: no error record"));
            assert_eq!((got.0.as_str(), got.1.as_str()), (*kind, *code), "{name}");
        }
    }
    let data_rows: u64 = got.values().sum();
    assert_eq!(data_rows as usize + errors.len(), total, "every record in exactly one object");
    // No key outside the two prefixes.
    for e in walk(dir.path()) {
        let rel = e.strip_prefix(dir.path()).unwrap().to_string_lossy().into_owned();
        assert!(
            rel.starts_with("tool-events/tenant=")
                || rel.starts_with("tool-events-errors/")
                || rel.starts_with(".weir"),
            "{rel}"
        );
        let error = rel.starts_with("tool-events-errors/");
        assert!(rel.starts_with(".weir") || error || rel.ends_with(&extension), "{format}: {rel}");
        if format == PARQUET && error {
            assert!(!rel.ends_with(".parquet"), "error objects are JSON lines beside Parquet: {rel}");
        }
    }
}

/// A value as text, whether DuckDB typed the column as text, number, boolean or JSON.
fn plain(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::String(s) if s.starts_with('"') => {
            serde_json::from_str::<String>(s).unwrap_or_else(|_| s.clone())
        }
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() { out.extend(walk(&p)) } else { out.push(p) }
    }
    out
}
