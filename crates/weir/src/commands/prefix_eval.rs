//! `weir prefix eval --config F --record '{...}'`: the key a record would get.

use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use bytes::Bytes;
use weir_archiver::Preview;
use weir_core::{ExtendedSequenceNumber, Record, SequenceNumber, ShardId, SystemClock, Timestamp};

use crate::builtin::archiver::{ArchiverSection, TransformKind};
use crate::config::load;
use crate::plugin::Registry;

pub async fn run(
    config: &Path,
    registry: &Registry,
    consumer: Option<&str>,
    record: &str,
    arrival: Option<&str>,
) -> Result<()> {
    let c = load(config, registry)?;
    let mut sections = Vec::new();
    for (i, entry) in c.consumers.iter().enumerate() {
        if entry.kind == "archiver" && consumer.is_none_or(|n| n == entry.name) {
            let section: ArchiverSection = crate::plugin::parse(&entry.settings, &format!("consumers[{i}]"))?;
            sections.push((entry.name.clone(), section));
        }
    }
    let (name, section) = match sections.as_slice() {
        [one] => one,
        [] => bail!(
            "{}: no archiver consumer{}",
            config.display(),
            consumer.map(|n| format!(" named {n:?}")).unwrap_or_default()
        ),
        _ => bail!("{}: several archivers; choose one with --consumer", config.display()),
    };
    let arrival = match arrival {
        Some(t) => Timestamp::from_millis(
            chrono::DateTime::parse_from_rfc3339(t)
                .with_context(|| format!("--arrival {t:?} is not RFC 3339"))?
                .timestamp_millis(),
        ),
        None => weir_core::Clock::now(&SystemClock),
    };
    if section.transform == TransformKind::Lambda {
        bail!("prefix eval does not invoke Lambda functions; evaluate the Lambda's output with transform = \"none\"");
    }
    let archiver =
        crate::builtin::archiver::build(name, section, Arc::new(NullSink), Arc::new(SystemClock), None, "", "")?;
    let rec = Record {
        partition_key: "prefix-eval".into(),
        position: ExtendedSequenceNumber::plain(SequenceNumber::from_u128(1)),
        approximate_arrival: arrival,
        data: Bytes::copy_from_slice(record.as_bytes()),
    };
    for p in archiver.preview(&ShardId::new("shardId-000000000000"), &rec).await {
        match p {
            Preview::Data { key, line } => {
                println!("data   {key}");
                println!("line   {}", line.trim_end_matches('\n'));
            }
            Preview::Error { key, record } => {
                println!("error  {key}");
                // A format conversion failure names them `lastErrorCode`, `lastErrorMessage`.
                let field = |name: &str, last: &str| {
                    record[name].as_str().or_else(|| record[last].as_str()).unwrap_or("").to_owned()
                };
                println!(
                    "reason {} {}",
                    field("errorCode", "lastErrorCode"),
                    field("errorMessage", "lastErrorMessage")
                );
            }
            Preview::Dropped => println!("dropped by the transform"),
        }
    }
    Ok(())
}

/// Evaluation writes nothing.
struct NullSink;

#[async_trait::async_trait]
impl weir_core::ports::ObjectSink for NullSink {
    async fn put_if_absent(
        &self,
        _key: &str,
        _body: Bytes,
        _options: &weir_core::ports::PutOptions,
    ) -> Result<weir_core::ports::PutOutcome, weir_core::ports::SinkError> {
        Ok(weir_core::ports::PutOutcome::Created)
    }
    async fn get(&self, _key: &str) -> Result<Option<Bytes>, weir_core::ports::SinkError> {
        Ok(None)
    }
    async fn stat(&self, _key: &str) -> Result<Option<weir_core::ports::ObjectMeta>, weir_core::ports::SinkError> {
        Ok(None)
    }
    async fn list(&self, _prefix: &str) -> Result<Vec<weir_core::ports::ObjectMeta>, weir_core::ports::SinkError> {
        Ok(Vec::new())
    }
    async fn delete(&self, _key: &str) -> Result<(), weir_core::ports::SinkError> {
        Ok(())
    }
    fn location(&self) -> String {
        "(nowhere)".into()
    }
}
