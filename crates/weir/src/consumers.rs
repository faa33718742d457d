//! Builds consumers from configuration.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use weir_aws::{S3ObjectSink, S3Options};
use weir_core::Consumer;
use weir_core::ports::ObjectSink;
use weir_local::FsObjectSink;
use weir_runtime::consumers::{CountConsumer, Counts, FilesConsumer, FilesOptions, LogConsumer};

use crate::config::ConsumerSection;

/// Consumers built for one worker, and handles the summary reads.
pub struct Built {
    pub consumers: Vec<Box<dyn Consumer>>,
    pub counts: Vec<(String, Counts)>,
}

pub fn build(sections: &[ConsumerSection], s3: Option<&aws_sdk_s3::Client>) -> Result<Built> {
    let mut consumers: Vec<Box<dyn Consumer>> = Vec::new();
    let mut counts = Vec::new();
    for (i, section) in sections.iter().enumerate() {
        match section {
            ConsumerSection::Count { name } => {
                let (c, handle) = CountConsumer::new(name);
                counts.push((name.clone(), handle));
                consumers.push(Box::new(c));
            }
            ConsumerSection::Log { name } => consumers.push(Box::new(LogConsumer::new(name))),
            ConsumerSection::Files { name, directory, bucket, prefix, max_bytes, max_age } => {
                let sink: Arc<dyn ObjectSink> = match (directory, bucket) {
                    (Some(dir), _) => Arc::new(
                        FsObjectSink::new(dir)
                            .with_context(|| format!("consumers[{i}].directory {}", dir.display()))?,
                    ),
                    (None, Some(bucket)) => {
                        let client = s3.with_context(|| format!("consumers[{i}].bucket needs an S3 client"))?;
                        Arc::new(S3ObjectSink::new(client.clone(), bucket, S3Options::default()))
                    }
                    (None, None) => anyhow::bail!("consumers[{i}]: needs a directory or a bucket"),
                };
                let options = FilesOptions { prefix: prefix.clone(), max_bytes: *max_bytes, max_age: *max_age };
                consumers.push(Box::new(FilesConsumer::new(name, sink, options)));
            }
        }
    }
    Ok(Built { consumers, counts })
}

/// Consumers of the demo, writing files under `dir`.
pub fn demo_sections(dir: &std::path::Path) -> Vec<ConsumerSection> {
    vec![
        ConsumerSection::Count { name: "count".into() },
        ConsumerSection::Log { name: "log".into() },
        ConsumerSection::Files {
            name: "files".into(),
            directory: Some(dir.to_path_buf()),
            bucket: None,
            prefix: "raw/".into(),
            max_bytes: 1024 * 1024,
            max_age: Duration::from_secs(2),
        },
    ]
}
