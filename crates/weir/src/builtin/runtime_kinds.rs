//! The runtime's simple consumers as kinds: `count`, `log` and `files`.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Result, bail};
use serde::{Deserialize, Serialize};
use weir_runtime::consumers::{CountConsumer, FilesConsumer, FilesOptions, LogConsumer};

use crate::plugin::{Context, Plugin};

/// `type = "count"` and `type = "log"`: no fields besides `type` and `name`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NoFields {}

impl Plugin for CountConsumer {
    type Config = NoFields;
    const ABOUT: &'static str = "counts records and bytes per shard (acknowledges at once)";

    async fn build(_: NoFields, ctx: &Context) -> Result<Self> {
        Ok(CountConsumer::new(ctx.name()).0)
    }
}

impl Plugin for LogConsumer {
    type Config = NoFields;
    const ABOUT: &'static str = "logs one line per batch";

    async fn build(_: NoFields, ctx: &Context) -> Result<Self> {
        Ok(LogConsumer::new(ctx.name()))
    }
}

/// `type = "files"`: gzip NDJSON objects per shard in a local directory or an S3 bucket.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FilesSection {
    /// Output directory (one of `directory` and `bucket`).
    #[serde(default)]
    pub directory: Option<PathBuf>,
    /// Output S3 bucket (one of `directory` and `bucket`).
    #[serde(default)]
    pub bucket: Option<String>,
    /// Key prefix inside the directory.
    #[serde(default = "default_prefix")]
    pub prefix: String,
    /// Flush a shard's buffer at this many bytes (before compression).
    #[serde(default = "default_max_bytes")]
    pub max_bytes: usize,
    /// Flush a shard's buffer this long after its first record.
    #[serde(default = "default_max_age", with = "humantime_serde")]
    pub max_age: Duration,
}

fn default_prefix() -> String {
    FilesOptions::default().prefix
}
fn default_max_bytes() -> usize {
    FilesOptions::default().max_bytes
}
fn default_max_age() -> Duration {
    FilesOptions::default().max_age
}

impl Plugin for FilesConsumer {
    type Config = FilesSection;
    const ABOUT: &'static str = "gzip NDJSON objects per shard in a directory or S3 bucket";

    fn check(c: &FilesSection, at: &str) -> Result<Vec<String>> {
        let mut problems = Vec::new();
        if let Err(e) = Context::store_location(at, c.directory.as_deref(), c.bucket.as_deref()) {
            problems.push(format!("{e:#}"));
        }
        if c.max_bytes == 0 {
            problems.push(format!("field `{at}.max_bytes`: must be positive"));
        }
        if c.prefix.starts_with('/') || c.prefix.split('/').any(|s| s == "..") {
            problems.push(format!("field `{at}.prefix`: must be relative and without '..'"));
        }
        if !problems.is_empty() {
            bail!("{}", problems.join("\n"));
        }
        Ok(Vec::new())
    }

    async fn build(c: FilesSection, ctx: &Context) -> Result<Self> {
        let location = Context::store_location(ctx.at(), c.directory.as_deref(), c.bucket.as_deref())?;
        let sink = ctx.object_sink(ctx.at(), &location).await?;
        let options = FilesOptions { prefix: c.prefix, max_bytes: c.max_bytes, max_age: c.max_age };
        Ok(FilesConsumer::new(ctx.name(), sink, options))
    }
}
