//! Format conversion on any record: a table with every Hive type converts the bytes
//! into rows (one per JSON document) or says why not, never a panic; converted rows
//! always encode, into a Parquet file of those rows that is the file the JSON
//! specification writes (what the archiver relies on when it seals a buffer of rows
//! it converted when they were routed). That file read back as JSON (what
//! `replay --from-archive` reads) converts to the same file again.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use weir_archiver::parquet::{Column, ColumnType, Deserializer, ParquetFormat, ParquetOptions, JsonLinesError, json_lines};
use weir_archiver::parquet::timestamp::TimestampFormat;

fn format(hive: bool) -> ParquetFormat {
    let types = [
        ("s", "string"),
        ("i", "int"),
        ("t", "tinyint"),
        ("b", "bigint"),
        ("d", "double"),
        ("f", "float"),
        ("ok", "boolean"),
        ("ts", "timestamp"),
        ("day", "date"),
        ("money", "decimal(9,3)"),
        ("blob", "binary"),
        ("tags", "array<string>"),
        ("calls", "array<struct<name:string,ms:bigint,args:map<string,string>>>"),
        ("m", "map<string,array<int>>"),
    ];
    let columns = types.iter().map(|(n, t)| Column { name: (*n).into(), ty: ColumnType::parse(t).unwrap() }).collect();
    let deserializer = if hive {
        Deserializer::Hive {
            timestamp_formats: vec![TimestampFormat::Millis, TimestampFormat::parse("yyyy-MM-dd'T'HH:mm:ssZ").unwrap()],
        }
    } else {
        Deserializer::default()
    };
    ParquetFormat::new(columns, deserializer, ParquetOptions::default())
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, record)) = data.split_first() else { return };
    let f = format(mode & 1 == 1);
    let mut converted = Vec::new();
    if let Ok(n) = f.convert(record, &mut converted) {
        let (file, _) = f.encode_rows(&converted, &[]).expect("converted rows encode");
        let file = Bytes::from(file);
        assert_eq!(ParquetFormat::rows(&file).unwrap(), n as u64, "a row per document");
        let from_json = f.encode(record).expect("a record that converts encodes from its JSON");
        assert_eq!(Bytes::from(from_json), file, "the archiver's path writes the specification's file");
        let lines = match json_lines(&file, 1 << 30) {
            Ok(lines) => lines,
            // A Hive `date` from epoch milliseconds can pass chrono's ±262,000 years.
            Err(JsonLinesError::OutOfRange { .. }) if mode & 1 == 1 => return,
            Err(e) => panic!("a file the archiver wrote reads back: {e}"),
        };
        let again = format(false).encode(&lines).expect("its JSON fits the table");
        assert_eq!(Bytes::from(again), file, "{}", String::from_utf8_lossy(&lines));
    }
});
