//! What a plugin's factory gets: its name, the clock, the worker, object stores and AWS
//! clients (created on first use from the config's `[aws]` section), and a `/readyz`
//! line.

use std::path::Path;
use std::sync::{Arc, Mutex};

use anyhow::{Context as _, Result};
use tokio::sync::OnceCell;
use weir_core::Clock;
use weir_core::ports::{ObjectSink, StoreLocation, StreamWriter};

use crate::config::AwsSection;

/// A line of `/readyz`'s body, computed when the endpoint is asked.
pub type StatusLine = Arc<dyn Fn() -> String + Send + Sync>;

/// AWS clients from the config's `[aws]` section, each created the first time a
/// consumer asks for it (a config that names no AWS service never loads AWS settings).
#[derive(Default)]
pub struct Aws {
    endpoints: weir_aws::clients::Endpoints,
    s3: OnceCell<aws_sdk_s3::Client>,
    kinesis: OnceCell<aws_sdk_kinesis::Client>,
    lambda: OnceCell<aws_sdk_lambda::Client>,
    region: OnceCell<String>,
    sns: OnceCell<aws_sdk_sns::Client>,
}

impl Aws {
    /// Clients for `section`.
    pub fn new(section: AwsSection) -> Self {
        Self { endpoints: section.endpoints(), ..Self::default() }
    }

    /// S3, with `s3_endpoint_url` and `s3_force_path_style`.
    pub async fn s3(&self) -> aws_sdk_s3::Client {
        self.s3.get_or_init(|| weir_aws::clients::s3(&self.endpoints)).await.clone()
    }

    /// Kinesis, with `kinesis_endpoint_url`.
    pub async fn kinesis(&self) -> aws_sdk_kinesis::Client {
        let a = &self.endpoints;
        self.kinesis.get_or_init(|| weir_aws::clients::kinesis(a)).await.clone()
    }

    /// Lambda, with `lambda_endpoint_url`.
    pub async fn lambda(&self) -> aws_sdk_lambda::Client {
        let a = &self.endpoints;
        self.lambda.get_or_init(|| weir_aws::clients::lambda(a)).await.clone()
    }

    /// The region: `[aws] region`, else the environment's or profile's (empty if none).
    pub async fn region(&self) -> String {
        let a = &self.endpoints;
        self.region
            .get_or_init(|| async {
                weir_aws::clients::sdk(a, weir_aws::Service::Sns)
                    .await
                    .region()
                    .map(|r| r.to_string())
                    .unwrap_or_default()
            })
            .await
            .clone()
    }

    /// Glue, with `glue_endpoint_url`, in `region` when given (made for each call: an
    /// archiver reads its table once).
    pub async fn glue(&self, region: Option<&str>) -> aws_sdk_glue::Client {
        weir_aws::clients::glue(&self.endpoints, region).await
    }

    /// Iceberg tables of a Glue Data Catalog (`catalog_id`: its account, default the
    /// caller's), in `region` when given; table files through S3 with the same
    /// credentials and `s3_endpoint_url`.
    pub async fn iceberg_glue(&self, catalog_id: Option<String>, region: Option<&str>) -> Arc<dyn iceberg::Catalog> {
        weir_aws::clients::iceberg_glue(&self.endpoints, catalog_id, region).await
    }

    /// Iceberg tables of the S3 table bucket `bucket_arn` in `region`; table files
    /// through S3 with the same credentials and `s3_endpoint_url`.
    pub async fn iceberg_s3tables(&self, bucket_arn: &str, region: &str) -> Arc<dyn iceberg::Catalog> {
        weir_aws::clients::iceberg_s3tables(&self.endpoints, bucket_arn, region).await
    }

    /// Iceberg tables of the REST catalog `settings` describes; table files on S3
    /// through the same credentials and `s3_endpoint_url`.
    pub async fn iceberg_rest(
        &self,
        settings: weir_aws::iceberg_rest::RestSettings,
    ) -> iceberg::Result<Arc<dyn iceberg::Catalog>> {
        weir_aws::clients::iceberg_rest(&self.endpoints, settings).await
    }

    /// SNS, with `sns_endpoint_url`.
    pub async fn sns(&self) -> aws_sdk_sns::Client {
        let a = &self.endpoints;
        self.sns.get_or_init(|| weir_aws::clients::sns(a)).await.clone()
    }
}

/// The factory's view of the worker it builds a consumer for.
pub struct Context {
    pub(crate) name: String,
    pub(crate) at: String,
    pub(crate) worker_id: String,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) aws: Arc<Aws>,
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

    /// AWS clients from the config's `[aws]` section.
    pub fn aws(&self) -> &Aws {
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
