//! `--from-archive`: where the archive is (an S3 prefix or a directory) and the objects
//! it holds for the window.

use std::sync::Arc;

use anyhow::{Context, Result, bail};
use weir_aws::{S3ObjectSink, S3Options};
use weir_core::Timestamp;
use weir_core::ports::ObjectSink;
use weir_local::FsObjectSink;
use weir_runtime::archive::ArchiveSource;

use crate::config::Config;

pub async fn open(
    config: &Config,
    location: &str,
    zone: &str,
    from: Timestamp,
    to: Timestamp,
) -> Result<ArchiveSource> {
    let zone: chrono_tz::Tz =
        zone.parse().map_err(|_| anyhow::anyhow!("--archive-time-zone {zone:?} is not an IANA time zone"))?;
    let (store, prefix): (Arc<dyn ObjectSink>, String) = match location.strip_prefix("s3://") {
        Some(rest) => {
            let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
            if bucket.is_empty() {
                bail!("--from-archive {location:?}: no bucket (s3://bucket/prefix)");
            }
            let client = weir_aws::clients::s3(&config.aws.endpoints()).await;
            (Arc::new(S3ObjectSink::new(client, bucket, S3Options::default())), prefix.to_owned())
        }
        None => {
            let dir = std::path::Path::new(location);
            if !dir.is_dir() {
                bail!("--from-archive {location:?}: no such directory");
            }
            let sink = FsObjectSink::new(dir).with_context(|| format!("--from-archive {location}"))?;
            (Arc::new(sink), String::new())
        }
    };
    let source = ArchiveSource::open(store, &prefix, from, to, zone)
        .await
        .map_err(|e| anyhow::anyhow!("--from-archive: {e}"))?;
    // Parquet objects (weir's or Firehose's) replay as one JSON line per row.
    Ok(source.with_tables(Arc::new(|body, limit| {
        weir_archiver::parquet::json_lines(body, limit).map_err(|e| e.to_string())
    })))
}
