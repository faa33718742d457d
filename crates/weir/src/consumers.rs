//! Builds consumers from configuration.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use weir_core::Consumer;
use weir_local::FsObjectSink;
use weir_runtime::consumers::{CountConsumer, Counts, FilesConsumer, FilesOptions, LogConsumer};

use crate::config::ConsumerSection;

/// Consumers built for one worker, and handles the summary reads.
pub struct Built {
    pub consumers: Vec<Box<dyn Consumer>>,
    pub counts: Vec<(String, Counts)>,
}

pub fn build(sections: &[ConsumerSection]) -> Result<Built> {
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
            ConsumerSection::Files {
                name,
                directory,
                prefix,
                max_bytes,
                max_age,
            } => {
                let sink = FsObjectSink::new(directory)
                    .with_context(|| format!("consumers[{i}].directory {}", directory.display()))?;
                let options = FilesOptions {
                    prefix: prefix.clone(),
                    max_bytes: *max_bytes,
                    max_age: *max_age,
                };
                consumers.push(Box::new(FilesConsumer::new(name, Arc::new(sink), options)));
            }
        }
    }
    Ok(Built { consumers, counts })
}

/// Consumers of the demo, writing files under `dir`.
pub fn demo_sections(dir: &std::path::Path) -> Vec<ConsumerSection> {
    vec![
        ConsumerSection::Count {
            name: "count".into(),
        },
        ConsumerSection::Log { name: "log".into() },
        ConsumerSection::Files {
            name: "files".into(),
            directory: dir.to_path_buf(),
            prefix: "raw/".into(),
            max_bytes: 1024 * 1024,
            max_age: Duration::from_secs(2),
        },
    ]
}
