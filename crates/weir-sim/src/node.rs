//! A simulated worker process: the real runtime `Worker` running the real archivers,
//! every port through the process's gate.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use weir_archiver::parquet::{Column, ColumnType};
use weir_archiver::{Archiver, ArchiverOptions, InlineLimits, LambdaTransform, Transformer};
use weir_core::{Consumer, WorkerId};
use weir_firehose::conversion::Conversion;
use weir_firehose::{Compression, from_json, validate};
use weir_runtime::{RuntimeConfig, TokioClock, Worker};

use crate::gate::Gate;
use crate::ports::{NodeLambda, NodeStore, NodeStream, NodeTable};
use crate::records::RecordShape;
use crate::scenario::Shape;
use crate::traced::Traced;
use crate::world::World;

/// The Lambda's ARN in the simulated archivers.
const LAMBDA_ARN: &str = "arn:aws:lambda:us-east-1:123456789012:function:sim-transform";

/// The destination of an archiver of `shape` reading records of `records`.
fn destination(shape: &Shape, records: RecordShape) -> String {
    let mut processors = Vec::new();
    if records == RecordShape::CloudWatchLogs {
        processors.push(r#"{"Type": "Decompression", "Parameters": [{"ParameterName": "CompressionFormat", "ParameterValue": "GZIP"}]}"#.to_owned());
        processors.push(r#"{"Type": "CloudWatchLogProcessing", "Parameters": [{"ParameterName": "DataMessageExtraction", "ParameterValue": "true"}]}"#.to_owned());
    }
    if records == RecordShape::Concatenated {
        processors.push(r#"{"Type": "RecordDeAggregation", "Parameters": [{"ParameterName": "SubRecordType", "ParameterValue": "JSON"}]}"#.to_owned());
    }
    if shape.lambda {
        processors.push(format!(
            r#"{{"Type": "Lambda", "Parameters": [{{"ParameterName": "LambdaArn", "ParameterValue": "{LAMBDA_ARN}"}}, {{"ParameterName": "NumberOfRetries", "ParameterValue": "2"}}]}}"#
        ));
    }
    processors.push(r#"{"Type": "MetadataExtraction", "Parameters": [{"ParameterName": "MetadataExtractionQuery", "ParameterValue": "{tenantId: .tenantId}"}, {"ParameterName": "JsonParsingEngine", "ParameterValue": "JQ-1.6"}]}"#.to_owned());
    processors.push(r#"{"Type": "AppendDelimiterToRecord", "Parameters": []}"#.to_owned());
    let name = &shape.name;
    format!(
        r#"{{"ExtendedS3DestinationConfiguration": {{
            "RoleARN": "arn:aws:iam::123456789012:role/firehose",
            "BucketARN": "arn:aws:s3:::sim",
            "Prefix": "{name}/data/tenant=!{{partitionKeyFromQuery:tenantId}}/!{{timestamp:yyyy/MM/dd/HH}}/",
            "ErrorOutputPrefix": "{name}/errors/!{{firehose:error-output-type}}/!{{timestamp:yyyy/MM/dd}}/",
            "BufferingHints": {{"SizeInMBs": 64, "IntervalInSeconds": {}}},
            "CompressionFormat": "GZIP",
            "DynamicPartitioningConfiguration": {{"Enabled": true, "RetryOptions": {{"DurationInSeconds": 300}}}},
            "ProcessingConfiguration": {{"Enabled": true, "Processors": [{}]}}
        }}}}"#,
        shape.interval_secs,
        processors.join(",")
    )
}

/// The table of Parquet archivers.
fn columns() -> Vec<Column> {
    [("id", "string"), ("tenantid", "string"), ("toolname", "string"), ("n", "bigint"), ("ok", "boolean")]
        .into_iter()
        .filter_map(|(name, ty)| Some(Column { name: name.into(), ty: ColumnType::parse(ty).ok()? }))
        .collect()
}

/// An archiver of `shape` whose every call goes through `gate`.
pub fn archiver(
    shape: &Shape,
    records: RecordShape,
    gate: &Arc<Gate>,
    clock: &TokioClock,
    spill_root: &Path,
) -> anyhow::Result<Archiver> {
    let text = destination(shape, records);
    let d = from_json(&text).map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut s = validate(&d).map_err(|p| anyhow::anyhow!("{p:?}"))?;
    s.buffer_bytes = shape.size_bytes;
    s.compression = shape.format;
    s.error_compression = shape.format;
    s.file_extension = shape.format.extension().into();
    if shape.format == Compression::Parquet {
        s.error_compression = Compression::Uncompressed;
        s.conversion = Some(Conversion {
            deserializer: Default::default(),
            parquet: Default::default(),
            table: Default::default(),
            columns: Some(columns()),
        });
    }
    let lambda = s.lambda.clone();
    let mut o = ArchiverOptions::new(&shape.name, s);
    o.max_buffer_memory = shape.memory;
    o.inline_intents = InlineLimits {
        per_round: shape.inline.0,
        per_lease: shape.inline.1,
        manifests: shape.inline.1.clamp(2, 32),
        ..InlineLimits::default()
    };
    if let Some((n, overflow)) = shape.max_active {
        o.max_active_partitions = Some(n);
        o.overflow = overflow;
    }
    if shape.spill {
        let dir = spill_root.join(gate.name().replace('#', "-")).join(&shape.name);
        std::fs::create_dir_all(&dir).context("spill directory")?;
        o.spill_directory = Some(dir);
    }
    if shape.lambda {
        o.transformer = Transformer::Lambda(LambdaTransform {
            invoker: Arc::new(NodeLambda(gate.clone())),
            settings: lambda.context("a Lambda processor")?,
            delivery_arn: "arn:aws:firehose:us-east-1:123456789012:deliverystream/sim".into(),
            source_arn: "arn:aws:kinesis:us-east-1:123456789012:stream/sim".into(),
            region: "us-east-1".into(),
        });
    }
    Ok(Archiver::new(o, Arc::new(NodeStore(gate.clone())), Arc::new(clock.clone()))?)
}

/// A running (or dead) incarnation of a worker.
pub struct Node {
    /// Its worker id (kept across restarts).
    pub worker: WorkerId,
    /// How many times it started.
    pub incarnation: u32,
    /// Its gate.
    pub gate: Arc<Gate>,
    /// Cancelled to stop it gracefully.
    pub stop: CancellationToken,
    /// Its main task.
    pub task: Option<JoinHandle<()>>,
    /// Stopped on request (not crashed).
    pub stopped: bool,
}

/// The runtime settings of simulated workers: weir's defaults (KCL's timings), shards
/// listed every ten seconds.
pub fn runtime_config(worker: &WorkerId) -> RuntimeConfig {
    let mut c = RuntimeConfig::new(worker.clone());
    c.shard_sync_interval = Duration::from_secs(10);
    c
}

/// Starts incarnation `incarnation` of worker `worker`.
pub fn start(
    world: &Arc<World>,
    worker: WorkerId,
    incarnation: u32,
    archivers: &[Shape],
    records: RecordShape,
    clock: &TokioClock,
    spill_root: &Path,
) -> anyhow::Result<Node> {
    let gate = Gate::new(format!("{worker}#{incarnation}"), world.clone());
    let mut consumers: Vec<Box<dyn Consumer>> = Vec::new();
    for shape in archivers {
        let inner = archiver(shape, records, &gate, clock, spill_root)?;
        consumers.push(Box::new(Traced { inner, node: gate.name().to_owned(), world: world.clone() }));
    }
    let stream = Arc::new(NodeStream(gate.clone()));
    let w = Worker::new(
        runtime_config(&worker),
        Arc::new(NodeTable(gate.clone())),
        stream.clone(),
        stream,
        consumers,
        Arc::new(clock.clone()),
    )?;
    let stop = CancellationToken::new();
    let (token, name, world, exited) = (stop.clone(), gate.name().to_owned(), world.clone(), gate.clone());
    world.note(format_args!("{name} starts"));
    let task = tokio::spawn(async move {
        match w.run(token).await {
            Ok(()) => world.note(format_args!("{name} stopped")),
            Err(e) => {
                // The process exits; its orchestrator starts it again (a `Restart`, or
                // when the faults stop), as after a crash.
                world.note(format_args!("{name} exits: {e}"));
                exited.crash();
            }
        }
    });
    gate.set_task(task.abort_handle());
    Ok(Node { worker, incarnation, gate, stop, task: Some(task), stopped: false })
}
