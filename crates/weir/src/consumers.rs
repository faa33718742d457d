//! Builds consumers from configuration.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use weir_aws::{S3ObjectSink, S3Options};
use weir_core::ports::ObjectSink;
use weir_core::{Clock, Consumer};
use weir_local::FsObjectSink;
use weir_runtime::consumers::{CountConsumer, Counts, FilesConsumer, FilesOptions, LogConsumer};

use crate::config::{ArchiveMode, ArchiverSection, ConsumerSection, OverflowPolicy, TransformKind};

/// Consumers built for one worker, and handles the summary reads.
pub struct Built {
    pub consumers: Vec<Box<dyn Consumer>>,
    pub counts: Vec<(String, Counts)>,
    /// Archivers' backlogs, for `/readyz`.
    pub backlogs: Vec<(String, weir_archiver::delivery::Backlog)>,
}

/// AWS clients consumers may need (none on embedded defaults).
#[derive(Default, Clone)]
pub struct Clients {
    pub s3: Option<aws_sdk_s3::Client>,
    pub lambda: Option<aws_sdk_lambda::Client>,
    pub sns: Option<aws_sdk_sns::Client>,
    pub kinesis: Option<aws_sdk_kinesis::Client>,
    pub region: String,
    pub stream_arn: String,
}

/// The object store a section names: a local `directory` or an S3 `bucket`; `field`
/// prefixes error messages (`consumers[2]`, `consumers[2].lookup`).
fn object_sink(
    field: &str,
    directory: Option<&std::path::Path>,
    bucket: Option<&str>,
    s3: Option<&aws_sdk_s3::Client>,
) -> Result<Arc<dyn ObjectSink>> {
    match (directory, bucket) {
        (Some(dir), _) => {
            Ok(Arc::new(FsObjectSink::new(dir).with_context(|| format!("{field}.directory {}", dir.display()))?))
        }
        (None, Some(bucket)) => {
            let client = s3.with_context(|| format!("{field}.bucket needs an S3 client"))?;
            Ok(Arc::new(S3ObjectSink::new(client.clone(), bucket, S3Options::default())))
        }
        (None, None) => anyhow::bail!("{field}: needs a directory or a bucket"),
    }
}

pub fn build(sections: &[ConsumerSection], clients: &Clients, clock: Arc<dyn Clock>) -> Result<Built> {
    let s3 = clients.s3.as_ref();
    let mut consumers: Vec<Box<dyn Consumer>> = Vec::new();
    let mut counts = Vec::new();
    let mut backlogs = Vec::new();
    for (i, section) in sections.iter().enumerate() {
        match section {
            ConsumerSection::Count { name } => {
                let (c, handle) = CountConsumer::new(name);
                counts.push((name.clone(), handle));
                consumers.push(Box::new(c));
            }
            ConsumerSection::Log { name } => consumers.push(Box::new(LogConsumer::new(name))),
            ConsumerSection::Files { name, directory, bucket, prefix, max_bytes, max_age } => {
                let sink = object_sink(&format!("consumers[{i}]"), directory.as_deref(), bucket.as_deref(), s3)?;
                let options = FilesOptions { prefix: prefix.clone(), max_bytes: *max_bytes, max_age: *max_age };
                consumers.push(Box::new(FilesConsumer::new(name, sink, options)));
            }
            ConsumerSection::Enrichment(e) => {
                use weir_enrichment::OutputConfig;
                let output: Arc<dyn weir_core::ports::StreamWriter> = match &e.output {
                    OutputConfig::File { path } => Arc::new(
                        weir_local::NdjsonFileWriter::open(path)
                            .with_context(|| format!("consumers[{i}].output.path {}", path.display()))?,
                    ),
                    OutputConfig::Kinesis { stream } => {
                        let client =
                            clients.kinesis.clone().with_context(|| format!("consumers[{i}].output needs Kinesis"))?;
                        Arc::new(weir_aws::kinesis::writer::KinesisWriter::new(
                            weir_aws::kinesis::producer::Producer::new(client, stream),
                            stream,
                        ))
                    }
                    OutputConfig::None => anyhow::bail!("consumers[{i}].output: not configured"),
                };
                let store: Option<Arc<dyn ObjectSink>> = match &e.lookup {
                    None => None,
                    Some(l) => Some(object_sink(
                        &format!("consumers[{i}].lookup"),
                        l.directory.as_deref(),
                        l.bucket.as_deref(),
                        s3,
                    )?),
                };
                let enricher = weir_enrichment::Enricher::new((**e).clone(), output, store, clock.clone())?;
                consumers.push(Box::new(enricher));
            }
            ConsumerSection::Alerting(a) => {
                let publisher = clients
                    .sns
                    .clone()
                    .map(|c| Arc::new(crate::sns::SnsPublisher::new(c)) as Arc<dyn weir_alerting::sink::Publisher>);
                let alerting = weir_alerting::Alerting::new(a, clock.clone(), publisher)
                    .with_context(|| format!("consumers[{i}] (alerting {:?})", a.name))?;
                consumers.push(Box::new(alerting));
            }
            ConsumerSection::Archiver(a) => {
                let sink = object_sink(&format!("consumers[{i}]"), a.directory.as_deref(), a.bucket.as_deref(), s3)?;
                let lambda = clients.lambda.clone().map(|c| {
                    Arc::new(crate::lambda::LambdaInvoker::new(c))
                        as Arc<dyn weir_archiver::transformer::FunctionInvoker>
                });
                let archiver =
                    crate::archiver::build(a, sink, clock.clone(), lambda, &clients.stream_arn, &clients.region)
                        .with_context(|| format!("consumers[{i}] (archiver {:?})", a.name))?;
                backlogs.push((a.name.clone(), archiver.backlog()));
                consumers.push(Box::new(archiver));
            }
        }
    }
    Ok(Built { consumers, counts, backlogs })
}

/// Consumers of the demo: a counter, a logger, and the archiver with the design
/// note's pipeline writing under `dir`.
pub fn demo_sections(dir: &std::path::Path) -> Vec<ConsumerSection> {
    vec![
        ConsumerSection::Count { name: "count".into() },
        ConsumerSection::Log { name: "log".into() },
        ConsumerSection::Archiver(Box::new(ArchiverSection {
            name: "mcp-archive".into(),
            directory: Some(dir.to_path_buf()),
            bucket: None,
            firehose: None,
            resource: None,
            destination: Some(serde_json::json!({
                "Prefix": "tool-events/tenant=!{partitionKeyFromQuery:tenantId}/tool=!{partitionKeyFromQuery:toolName}/year=!{timestamp:yyyy}/month=!{timestamp:MM}/day=!{timestamp:dd}/hour=!{timestamp:HH}/",
                "ErrorOutputPrefix": "tool-events-errors/!{firehose:error-output-type}/year=!{timestamp:yyyy}/month=!{timestamp:MM}/day=!{timestamp:dd}/",
                "BufferingHints": { "SizeInMBs": 64, "IntervalInSeconds": DEMO_INTERVAL.as_secs() },
                "CompressionFormat": "GZIP",
                "DynamicPartitioningConfiguration": { "Enabled": true },
                "ProcessingConfiguration": { "Enabled": true, "Processors": [
                    { "Type": "MetadataExtraction", "Parameters": [
                        { "ParameterName": "MetadataExtractionQuery", "ParameterValue": "{tenantId: .tenant_id, toolName: .tool_name}" },
                        { "ParameterName": "JsonParsingEngine", "ParameterValue": "JQ-1.6" } ] } ] }
            })),
            mode: ArchiveMode::ExactlyOnce,
            transform: TransformKind::McpNormalize,
            max_active_partitions: 500,
            overflow: OverflowPolicy::FlushOldest,
            max_backlog_bytes: 256 << 20,
            compression_level: 6,
            prefix_prepend: None,
        })),
    ]
}

/// The demo archiver's buffer interval.
pub const DEMO_INTERVAL: Duration = Duration::from_secs(2);
