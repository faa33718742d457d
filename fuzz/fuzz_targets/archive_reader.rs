//! The archive reader of `weir replay --from-archive` on any object body (gzip, zip,
//! snappy, hadoop snappy or plain, truncated, corrupt): records or a read error, never
//! a panic, and never more records than lines.
#![no_main]

use std::sync::Arc;

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use weir_core::ports::{ObjectSink, PutOptions, ReadMode, ShardReader, StreamCatalog};
use weir_core::{StartingPosition, Timestamp};
use weir_core::object_format::{ObjectFormat, decode};
use weir_runtime::archive::ArchiveSource;
use weir_testkit::MemoryObjectSink;

fuzz_target!(|data: &[u8]| {
    let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    rt.block_on(async {
        let sink = Arc::new(MemoryObjectSink::new());
        let key = if data.first() == Some(&0x1f) { "raw/2026/03/07/05/a.gz" } else { "raw/2026/03/07/05/a.json" };
        sink.put_if_absent(key, Bytes::copy_from_slice(data), &PutOptions::default()).await.unwrap();
        let from = Timestamp::from_millis(1_772_850_000_000);
        let to = Timestamp::from_millis(1_772_870_000_000);
        let Ok(source) = ArchiveSource::open(sink, "raw/", from, to, chrono_tz::Tz::UTC).await else { return };
        let shards = source.list_shards().await.unwrap();
        // Lines of the content: of the body itself when it is plain; a compressed body
        // (ZIP, Snappy, Hadoop Snappy) is decoded here as replay decodes it.
        let format = ObjectFormat::sniff(data);
        let content = match format {
            ObjectFormat::Gzip | ObjectFormat::Uncompressed => None,
            f => decode(f, data, 1 << 30).ok(),
        };
        let lines = content.as_deref().unwrap_or(data).iter().filter(|&&b| b == b'\n').count() + 1;
        for s in shards {
            let Ok(mut sub) = source.open(&s.id, &StartingPosition::TrimHorizon, ReadMode::Polling).await else {
                continue;
            };
            let mut records = 0;
            while let Ok(Some(batch)) = sub.next().await {
                records += batch.records.len();
                if format != ObjectFormat::Gzip {
                    assert!(records <= lines, "{records} records from {lines} lines");
                }
            }
        }
    });
});
