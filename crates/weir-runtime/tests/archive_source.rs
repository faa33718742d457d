//! An archive read as a stream: window selection by key time, line positions that
//! resume exactly, blank lines skipped, and clear errors before any work.
#![allow(clippy::unwrap_used, clippy::print_stdout)] // a test: a failed expectation is a failed test

use std::io::Write;
use std::sync::Arc;

use bytes::Bytes;
use chrono_tz::Tz;
use flate2::Compression;
use flate2::write::GzEncoder;
use weir_core::ports::{ObjectSink, PutOptions, ReadMode, ShardReader, StreamCatalog};
use weir_core::{SequenceNumber, ShardId, StartingPosition, Timestamp};
use weir_runtime::archive::{ArchiveError, ArchiveSource, TableLines};
use weir_testkit::MemoryObjectSink;

fn gz(text: &str) -> Bytes {
    let mut e = GzEncoder::new(Vec::new(), Compression::default());
    e.write_all(text.as_bytes()).unwrap();
    Bytes::from(e.finish().unwrap())
}

fn at(text: &str) -> Timestamp {
    Timestamp::from_millis(chrono::DateTime::parse_from_rfc3339(text).unwrap().timestamp_millis())
}

async fn archive() -> Arc<dyn ObjectSink> {
    let sink: Arc<dyn ObjectSink> = Arc::new(MemoryObjectSink::new());
    let objects = [
        ("a/year=2026/month=11/day=29/hour=09/s-1-2026-11-29-09-59-59-aaaa.gz", gz("{\"n\":0}\n")),
        (
            "a/year=2026/month=11/day=29/hour=10/s-1-2026-11-29-10-00-00-bbbb.gz",
            gz("{\"n\":1}\n{\"n\":2}\n\n{\"n\":3}\n"),
        ),
        ("a/year=2026/month=11/day=29/hour=10/s-1-2026-11-29-10-30-00-cccc.gz", gz("{\"n\":4}")),
        ("a/year=2026/month=11/day=29/hour=11/s-1-2026-11-29-11-00-00-dddd.gz", gz("{\"n\":5}\n")),
        ("a/plain/2026/11/29/10/raw.ndjson", Bytes::from_static(b"{\"n\":6}\n{\"n\":7}\n")),
    ];
    for (key, body) in objects {
        sink.put_if_absent(key, body, &PutOptions::default()).await.unwrap();
    }
    sink
}

async fn read_all(source: &ArchiveSource, key: &str, from: StartingPosition) -> Vec<(String, String)> {
    let mut sub = source.open(&ShardId::new(key), &from, ReadMode::Polling).await.unwrap();
    let mut out = Vec::new();
    let mut ended = false;
    while let Some(batch) = sub.next().await.unwrap() {
        for r in &batch.records {
            out.push((r.position.sequence.as_str().to_owned(), String::from_utf8(r.data.to_vec()).unwrap()));
        }
        ended |= batch.child_shards == Some(vec![]);
    }
    assert!(ended, "the last batch ends the object with no children");
    out
}

#[tokio::test]
async fn objects_in_the_window_read_as_closed_shards() {
    let sink = archive().await;
    let source = ArchiveSource::open(sink, "a/", at("2026-11-29T10:00:00Z"), at("2026-11-29T11:00:00Z"), Tz::UTC)
        .await
        .unwrap()
        .with_runs(u64::MAX, 1);
    let shards: Vec<String> = source.list_shards().await.unwrap().iter().map(|s| s.id.as_str().to_owned()).collect();
    assert_eq!(
        shards,
        vec![
            "a/plain/2026/11/29/10/raw.ndjson",
            "a/year=2026/month=11/day=29/hour=10/s-1-2026-11-29-10-00-00-bbbb.gz",
            "a/year=2026/month=11/day=29/hour=10/s-1-2026-11-29-10-30-00-cccc.gz",
        ],
        "09:59:59 is before the window, 11:00:00 is its end (exclusive)"
    );
    let key = &shards[1];
    let all = read_all(&source, key, StartingPosition::TrimHorizon).await;
    let expect = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
        pairs.iter().map(|(a, b)| ((*a).to_owned(), (*b).to_owned())).collect()
    };
    assert_eq!(all, expect(&[("1", "{\"n\":1}"), ("2", "{\"n\":2}"), ("4", "{\"n\":3}")]), "blank line 3 skipped");
    let rest = read_all(&source, key, StartingPosition::AfterSequenceNumber(SequenceNumber::from_u128(2))).await;
    assert_eq!(rest, expect(&[("4", "{\"n\":3}")]), "resumes after the checkpointed line");
    let last = read_all(&source, &shards[2], StartingPosition::TrimHorizon).await;
    assert_eq!(last, expect(&[("1", "{\"n\":4}")]), "a last line without newline is a record");
    let plain = read_all(&source, &shards[0], StartingPosition::TrimHorizon).await;
    assert_eq!(plain.len(), 2, "uncompressed objects read as they are");
    let arrival = source.objects()[1].written;
    assert_eq!(arrival, at("2026-11-29T10:00:00Z"), "records arrive at the object's time");
}

#[tokio::test]
async fn bad_archives_are_refused_before_any_work() {
    let sink = archive().await;
    let (from, to) = (at("2026-11-29T10:00:00Z"), at("2026-11-29T11:00:00Z"));
    let err = ArchiveSource::open(sink.clone(), "missing/", from, to, Tz::UTC).await.err().unwrap();
    assert!(matches!(err, ArchiveError::Empty(_)), "{err}");
    assert!(err.to_string().contains("nothing is archived under memory://missing/"), "{err}");
    let err = ArchiveSource::open(sink.clone(), "a/", at("2027-01-01T00:00:00Z"), at("2027-01-02T00:00:00Z"), Tz::UTC)
        .await
        .err()
        .unwrap();
    assert!(matches!(err, ArchiveError::NoneInWindow { .. }), "{err}");
    sink.put_if_absent("a/notes.txt", Bytes::from_static(b"hi"), &PutOptions::default()).await.unwrap();
    let err = ArchiveSource::open(sink.clone(), "a/", from, to, Tz::UTC).await.err().unwrap();
    assert!(err.to_string().contains("cannot tell when a/notes.txt was written"), "{err}");
}

#[tokio::test]
async fn a_corrupt_object_is_a_clear_read_error() {
    let sink: Arc<dyn ObjectSink> = Arc::new(MemoryObjectSink::new());
    let mut body = gz(&"{\"n\":1}\n".repeat(10_000)).to_vec();
    let cut = body.len() / 2;
    body.truncate(cut);
    let key = "a/2026/11/29/10/s-1-2026-11-29-10-00-00-x.gz";
    sink.put_if_absent(key, Bytes::from(body), &PutOptions::default()).await.unwrap();
    let source = ArchiveSource::open(sink, "a/", at("2026-11-29T10:00:00Z"), at("2026-11-29T11:00:00Z"), Tz::UTC)
        .await
        .unwrap()
        .with_runs(u64::MAX, 1);
    let mut sub = source.open(&ShardId::new(key), &StartingPosition::TrimHorizon, ReadMode::Polling).await.unwrap();
    let err = loop {
        match sub.next().await {
            Ok(Some(_)) => continue,
            Ok(None) => panic!("a truncated gzip read to its end"),
            Err(e) => break e,
        }
    };
    assert!(!err.is_retryable(), "{err}");
    assert!(err.to_string().contains("cannot decompress after line"), "{err}");
}

#[tokio::test]
async fn only_so_many_objects_are_read_at_once() {
    use futures::FutureExt;
    let sink = archive().await;
    let source = ArchiveSource::open(sink, "a/", at("2026-11-29T10:00:00Z"), at("2026-11-29T11:00:00Z"), Tz::UTC)
        .await
        .unwrap()
        .with_runs(u64::MAX, 1)
        .with_max_open(1);
    let keys: Vec<ShardId> = source.list_shards().await.unwrap().into_iter().map(|s| s.id).collect();
    let first = source.open(&keys[0], &StartingPosition::TrimHorizon, ReadMode::Polling).await.unwrap();
    assert!(
        source.open(&keys[1], &StartingPosition::TrimHorizon, ReadMode::Polling).now_or_never().is_none(),
        "a second read waits while the first holds the only slot"
    );
    drop(first);
    let second = source.open(&keys[1], &StartingPosition::TrimHorizon, ReadMode::Polling).now_or_never();
    assert!(matches!(second, Some(Ok(_))), "the slot is free once the first read is dropped");
}

/// Replay reads every format the archiver writes (and Firehose writes): ZIP, Snappy
/// and Hadoop Snappy beside GZIP and plain, found from the bytes, not the name; a
/// corrupt object is a clear error naming it.
#[tokio::test]
async fn every_compression_format_is_read() {
    use weir_core::object_format::{ObjectFormat, encode};
    let sink: Arc<dyn ObjectSink> = Arc::new(MemoryObjectSink::new());
    let text = "{\"n\":1}\n{\"n\":2}\n\n{\"n\":3}\n";
    let formats = [
        ("gz", ObjectFormat::Gzip),
        ("zip", ObjectFormat::Zip),
        ("snappy", ObjectFormat::Snappy),
        ("hsnappy", ObjectFormat::HadoopSnappy),
        ("custom", ObjectFormat::Uncompressed),
    ];
    for (ext, f) in formats {
        let key = format!("b/2026/11/29/10/s-1-2026-11-29-10-00-00-{ext}.{ext}");
        sink.put_if_absent(&key, Bytes::from(encode(f, text.as_bytes()).unwrap()), &PutOptions::default())
            .await
            .unwrap();
    }
    let mut broken = encode(ObjectFormat::Zip, text.as_bytes()).unwrap();
    broken.truncate(20);
    let bad = "b/2026/11/29/10/s-1-2026-11-29-10-00-00-bad.zip";
    sink.put_if_absent(bad, Bytes::from(broken), &PutOptions::default()).await.unwrap();
    let source = ArchiveSource::open(sink, "b/", at("2026-11-29T10:00:00Z"), at("2026-11-29T11:00:00Z"), Tz::UTC)
        .await
        .unwrap()
        .with_runs(u64::MAX, 1);
    for (ext, _) in formats {
        let key = format!("b/2026/11/29/10/s-1-2026-11-29-10-00-00-{ext}.{ext}");
        let lines: Vec<String> =
            read_all(&source, &key, StartingPosition::TrimHorizon).await.into_iter().map(|(_, l)| l).collect();
        assert_eq!(lines, ["{\"n\":1}", "{\"n\":2}", "{\"n\":3}"], "{ext}");
    }
    let err = source.open(&ShardId::new(bad), &StartingPosition::TrimHorizon, ReadMode::Polling).await.err().unwrap();
    assert!(err.to_string().contains(bad), "{err}");
}

/// A Parquet object is refused with the reason when the replay has no table reader,
/// and read one line per row through the one it is given.
#[tokio::test]
async fn parquet_objects_are_read_with_the_table_reader_given() {
    let sink: Arc<dyn ObjectSink> = Arc::new(MemoryObjectSink::new());
    let key = "p/2026/11/29/10/s-1-2026-11-29-10-00-00-x.parquet";
    sink.put_if_absent(key, Bytes::from_static(b"PAR1\x15\x04PAR1"), &PutOptions::default()).await.unwrap();
    let open =
        || ArchiveSource::open(sink.clone(), "p/", at("2026-11-29T10:00:00Z"), at("2026-11-29T11:00:00Z"), Tz::UTC);
    let refusing = open().await.unwrap().with_runs(u64::MAX, 1);
    let err = refusing.open(&ShardId::new(key), &StartingPosition::TrimHorizon, ReadMode::Polling).await.err().unwrap();
    assert!(!err.is_retryable(), "{err}");
    assert!(err.to_string().contains(key) && err.to_string().contains("reads no Parquet"), "{err}");

    let tables: TableLines = Arc::new(|body: &Bytes, limit: u64| {
        assert_eq!(&body[..], b"PAR1\x15\x04PAR1", "the stored bytes");
        assert!(limit >= 128 << 20, "room for a Firehose object");
        Ok(b"{\"row\":1}\n{\"row\":2}\n".to_vec())
    });
    let reading = open().await.unwrap().with_runs(u64::MAX, 1).with_tables(tables);
    let lines = read_all(&reading, key, StartingPosition::TrimHorizon).await;
    assert_eq!(lines.iter().map(|(_, l)| l.as_str()).collect::<Vec<_>>(), ["{\"row\":1}", "{\"row\":2}"]);
    let after_first = StartingPosition::AfterSequenceNumber(SequenceNumber::from_u128(lines[0].0.parse().unwrap()));
    let rest = read_all(&reading, key, after_first).await;
    assert_eq!(rest.iter().map(|(_, l)| l.as_str()).collect::<Vec<_>>(), ["{\"row\":2}"], "rows resume by number");

    let failing: TableLines = Arc::new(|_: &Bytes, _: u64| Err("column x: Time64 values have no JSON form".into()));
    let failing = open().await.unwrap().with_runs(u64::MAX, 1).with_tables(failing);
    let err = failing.open(&ShardId::new(key), &StartingPosition::TrimHorizon, ReadMode::Polling).await.err().unwrap();
    assert!(err.to_string().contains(key) && err.to_string().contains("Time64"), "{err}");
}

#[tokio::test]
async fn a_full_batch_that_takes_the_last_line_ends_the_object() {
    let sink: Arc<dyn ObjectSink> = Arc::new(MemoryObjectSink::new());
    let lines: String = (0..1_000).map(|i| format!("{{\"n\":{i}}}\n")).collect();
    let key = "a/s-1-2026-11-29-10-00-00-aaaa.gz";
    sink.put_if_absent(key, gz(&lines), &PutOptions::default()).await.unwrap();
    let source = ArchiveSource::open(sink, "a/", at("2026-11-29T10:00:00Z"), at("2026-11-29T11:00:00Z"), Tz::UTC)
        .await
        .unwrap()
        .with_runs(u64::MAX, 1);
    let mut sub = source.open(&ShardId::new(key), &StartingPosition::TrimHorizon, ReadMode::Polling).await.unwrap();
    let batch = sub.next().await.unwrap().unwrap();
    assert_eq!(batch.records.len(), 1_000);
    assert_eq!(batch.child_shards, Some(vec![]), "the end comes with the last records, not in an empty batch");
    assert!(sub.next().await.unwrap().is_none());
}

/// By default the window's objects are read in runs: the three objects of the window
/// are one shard, positions carry the object's place in the run, and a read resumes
/// after any position, inside an object or at its last line; a run's name changes
/// with its listing.
#[tokio::test]
async fn consecutive_objects_read_as_one_shard_and_resume_anywhere() {
    let sink = archive().await;
    let (from, to) = (at("2026-11-29T10:00:00Z"), at("2026-11-29T11:00:00Z"));
    let source = ArchiveSource::open(sink.clone(), "a/", from, to, Tz::UTC).await.unwrap();
    let shards = source.list_shards().await.unwrap();
    assert_eq!(shards.len(), 1, "{shards:?}");
    let id = shards[0].id.as_str().to_owned();
    assert!(id.starts_with("a/plain/2026/11/29/10/raw.ndjson+3-"), "{id}");
    let all = read_all(&source, &id, StartingPosition::TrimHorizon).await;
    let o = |ordinal: u128, line: u128| ((ordinal << 64) | line).to_string();
    let want: Vec<(String, String)> = [
        (o(0, 1), "{\"n\":6}"),
        (o(0, 2), "{\"n\":7}"),
        (o(1, 1), "{\"n\":1}"),
        (o(1, 2), "{\"n\":2}"),
        (o(1, 4), "{\"n\":3}"),
        (o(2, 1), "{\"n\":4}"),
    ]
    .into_iter()
    .map(|(a, b)| (a, b.to_owned()))
    .collect();
    assert_eq!(all, want, "in key order, object by object, blank line 3 of the second skipped");
    for (i, (at_pos, _)) in want.iter().enumerate() {
        let after = SequenceNumber::parse(at_pos).unwrap();
        let rest = if i + 1 == want.len() {
            // After the last line, the run reads as ended at once.
            let mut sub = source
                .open(&ShardId::new(id.as_str()), &StartingPosition::AfterSequenceNumber(after), ReadMode::Polling)
                .await
                .unwrap();
            let batch = sub.next().await.unwrap().unwrap();
            assert!(batch.records.is_empty() && batch.child_shards == Some(vec![]));
            Vec::new()
        } else {
            read_all(&source, &id, StartingPosition::AfterSequenceNumber(after)).await
        };
        assert_eq!(rest, want[i + 1..].to_vec(), "resumed after {at_pos}");
        let from_here =
            read_all(&source, &id, StartingPosition::AtSequenceNumber(SequenceNumber::parse(at_pos).unwrap())).await;
        assert_eq!(from_here, want[i..].to_vec(), "resumed at {at_pos}");
    }
    let err = source
        .open(
            &ShardId::new(id.as_str()),
            &StartingPosition::AfterSequenceNumber(SequenceNumber::parse(&o(3, 1)).unwrap()),
            ReadMode::Polling,
        )
        .await
        .err()
        .unwrap();
    assert!(err.to_string().contains("names object 3 of a run of 3"), "{err}");

    // One more object in the window: another run, under another name.
    sink.put_if_absent("a/plain/2026/11/29/10/raw2.ndjson", Bytes::from_static(b"{\"n\":8}\n"), &PutOptions::default())
        .await
        .unwrap();
    let grown = ArchiveSource::open(sink, "a/", from, to, Tz::UTC).await.unwrap();
    let renamed = grown.list_shards().await.unwrap();
    assert_eq!(renamed.len(), 1);
    assert_ne!(renamed[0].id.as_str(), id, "a changed listing names its runs differently");
}

/// Runs end at the byte and object bounds; a larger object is a run of its own.
#[test]
fn runs_are_cut_at_their_bounds() {
    use weir_runtime::archive::{ArchivedObject, group_within};
    let objects: Vec<ArchivedObject> = [5u64, 5, 20, 1, 1, 1, 1]
        .iter()
        .enumerate()
        .map(|(i, size)| ArchivedObject { key: format!("k{i}"), size: *size, written: Timestamp::from_millis(0) })
        .collect();
    let runs: Vec<(String, std::ops::Range<usize>)> =
        group_within(&objects, 10, 3).into_iter().map(|g| (g.id.as_str().to_owned(), g.objects)).collect();
    let ranges: Vec<std::ops::Range<usize>> = runs.iter().map(|r| r.1.clone()).collect();
    assert_eq!(ranges, vec![0..2, 2..3, 3..6, 6..7]);
    assert_eq!(runs[1].0, "k2", "a run of one is named by its key");
    assert_eq!(runs[3].0, "k6");
    assert!(runs[0].0.starts_with("k0+2-") && runs[2].0.starts_with("k3+3-"), "{runs:?}");
    let again: Vec<String> = group_within(&objects, 10, 3).into_iter().map(|g| g.id.as_str().to_owned()).collect();
    assert_eq!(again, runs.iter().map(|r| r.0.clone()).collect::<Vec<_>>(), "the same listing, the same runs");
}
