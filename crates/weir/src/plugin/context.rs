//! What a plugin's factory gets: its name, the clock, the worker, and weir's own ports
//! on whatever the config names (object stores, a Kinesis writer, a Lambda, an SNS
//! publisher), created on first use from the config's `[aws]` section, and a `/readyz`
//! line. Raw AWS SDK clients are an opt-in extension (feature `aws-sdk`), outside the
//! API's semver promise.

use std::path::Path;
use std::sync::{Arc, Mutex};

use anyhow::{Context as _, Result};
use weir_aws::clients::Clients;
use weir_core::Clock;
use weir_core::ports::{FunctionInvoker, ObjectSink, Publisher, StoreLocation, StreamWriter};

/// A line of `/readyz`'s body, computed when the endpoint is asked.
pub type StatusLine = Arc<dyn Fn() -> String + Send + Sync>;

/// The factory's view of the worker it builds a consumer for.
pub struct Context {
    pub(crate) name: String,
    pub(crate) at: String,
    pub(crate) worker_id: String,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) aws: Arc<Clients>,
    pub(crate) stream_name: String,
    pub(crate) archive_prefix: Option<String>,
    pub(crate) replay_job: Option<String>,
    pub(crate) status: Mutex<Vec<StatusLine>>,
}

impl Context {
    /// The consumer's `name` (it keys the consumer's checkpoints).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The section's path in the config (`consumers[2]`), for error messages.
    pub fn at(&self) -> &str {
        &self.at
    }

    /// The worker's id.
    pub fn worker_id(&self) -> &str {
        &self.worker_id
    }

    /// The clock (paused in tests; use it rather than the system time).
    pub fn clock(&self) -> Arc<dyn Clock> {
        self.clock.clone()
    }

    /// The stream's name (`stream.name`).
    pub fn stream_name(&self) -> &str {
        &self.stream_name
    }

    /// The stream's ARN as far as the config knows it (region from `[aws]`).
    pub async fn stream_arn(&self) -> String {
        format!("arn:aws:kinesis:{}::stream/{}", self.aws.region().await, self.stream_name)
    }

    /// The AWS region: `[aws] region`, else the environment's or profile's (empty if
    /// none).
    pub async fn region(&self) -> String {
        self.aws.region().await
    }

    /// Invokes Lambda functions (by name or ARN) with `[aws]`'s settings and
    /// `lambda_endpoint_url`.
    pub async fn function_invoker(&self) -> Arc<dyn FunctionInvoker> {
        Arc::new(weir_aws::LambdaInvoker::new(self.aws.lambda().await))
    }

    /// Publishes to SNS topics with `[aws]`'s settings and `sns_endpoint_url`.
    pub async fn publisher(&self) -> Arc<dyn Publisher> {
        Arc::new(weir_aws::SnsPublisher::new(self.aws.sns().await))
    }

    /// The AWS SDK clients of the config's `[aws]` section, each created on first use.
    /// An opt-in extension (the `aws-sdk` feature of the `weir` crate), outside the
    /// plugin API's semver promise: its types are the `aws-sdk-*` crates', which weir
    /// upgrades as it needs. Prefer the ports above.
    #[cfg(feature = "aws-sdk")]
    pub fn aws(&self) -> &Clients {
        &self.aws
    }

    /// The clients, for the built-in kinds.
    pub(crate) fn aws_clients(&self) -> &Clients {
        &self.aws
    }

    /// In `weir replay --archive-prefix P`: `P`, to put in front of the keys a consumer
    /// writes, so a backfill lands beside the live output rather than on it.
    pub fn archive_prefix(&self) -> Option<&str> {
        self.archive_prefix.as_deref()
    }

    /// In `weir replay --job J`: `J`. A consumer that keeps its own record of where
    /// each shard stands outside the lease table (the Iceberg destination's positions
    /// in the table) keys it by the job, since a replay reads the live shards' ids
    /// again from an earlier position.
    pub fn replay_job(&self) -> Option<&str> {
        self.replay_job.as_deref()
    }

    /// The object store at `location`; `field` names the section for errors
    /// (`consumers[2]`, `consumers[2].lookup`).
    pub async fn object_sink(&self, field: &str, location: &StoreLocation) -> Result<Arc<dyn ObjectSink>> {
        Ok(match location {
            StoreLocation::Directory(dir) => Arc::new(
                weir_local::FsObjectSink::new(dir).with_context(|| format!("{field}.directory {}", dir.display()))?,
            ),
            StoreLocation::Bucket(bucket) => {
                Arc::new(weir_aws::S3ObjectSink::new(self.aws.s3().await, bucket, weir_aws::S3Options::default()))
            }
        })
    }

    /// The location a section's `directory` and `bucket` fields name (exactly one);
    /// the error names `field`.
    pub fn store_location(field: &str, directory: Option<&Path>, bucket: Option<&str>) -> Result<StoreLocation> {
        StoreLocation::from_fields(directory, bucket).map_err(|e| anyhow::anyhow!("field `{field}`: {e}"))
    }

    /// A writer of records into the Kinesis stream `stream` (PutRecords, batched).
    pub async fn kinesis_writer(&self, stream: &str) -> Arc<dyn StreamWriter> {
        let client = self.aws.kinesis().await;
        Arc::new(weir_aws::kinesis::writer::KinesisWriter::new(
            weir_aws::kinesis::producer::Producer::new(client, stream),
            stream,
        ))
    }

    /// Adds a line to the body of `/readyz` (e.g. a backlog), computed on each request.
    pub fn status_line(&self, line: impl Fn() -> String + Send + Sync + 'static) {
        self.status.lock().unwrap_or_else(|p| p.into_inner()).push(Arc::new(line));
    }
}
