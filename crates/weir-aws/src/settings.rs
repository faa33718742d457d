use std::time::Duration;

use aws_config::timeout::TimeoutConfig;
use aws_config::{BehaviorVersion, Region, SdkConfig};

/// Where and as whom to reach AWS (or an emulator).
#[derive(Debug, Clone, Default)]
pub struct AwsSettings {
    /// Region; default from the environment/profile chain.
    pub region: Option<String>,
    /// Named profile from `~/.aws/config`.
    pub profile: Option<String>,
    /// Endpoint override (an emulator such as `http://127.0.0.1:4566`).
    pub endpoint_url: Option<String>,
    /// Static access key and secret (emulators, tests); otherwise the standard chain.
    pub static_credentials: Option<(String, String)>,
    /// Request timeouts of the service the client is for (see [`Service::timeouts`]);
    /// `None`: only the 3 s connect timeout.
    pub timeouts: Option<TimeoutConfig>,
}

/// An AWS service weir calls, for its request timeouts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Service {
    /// Kinesis Data Streams.
    Kinesis,
    /// DynamoDB (leases, checkpoints, intents).
    DynamoDb,
    /// S3 (archive objects, manifests, lookups).
    S3,
    /// Lambda (the archiver's transform).
    Lambda,
    /// SNS (alert sinks).
    Sns,
    /// Glue Data Catalog (the archiver's Parquet table, Iceberg tables).
    Glue,
    /// S3 Tables (Iceberg tables in a table bucket).
    S3Tables,
}

impl Service {
    /// The `service` label of its request counters (`weir_aws_requests_total`).
    pub fn label(self) -> &'static str {
        match self {
            Service::Kinesis => "kinesis",
            Service::DynamoDb => "dynamodb",
            Service::S3 => "s3",
            Service::Lambda => "lambda",
            Service::Sns => "sns",
            Service::Glue => "glue",
            Service::S3Tables => "s3tables",
        }
    }

    /// Request timeouts: without them a request on a connection that a partition
    /// black-holed never answers, and whatever awaits it (a lease renewal, a
    /// delivery, a read) waits forever. Each attempt and each operation (all its
    /// retries) is bounded by what the call may legitimately take:
    /// - Kinesis: 10 s an attempt, 30 s an operation. A `SubscribeToShard` is bounded
    ///   only until its event stream opens; the stream itself is watched by the
    ///   enhanced fan-out reader's silence timeout.
    /// - DynamoDB: 3 s an attempt, 10 s an operation (lease writes must end well
    ///   within the failover time; the runtime also gives up at the lease's validity).
    /// - S3: 60 s an attempt (a 128 MiB object on a slow link), 180 s an operation.
    /// - Lambda: 330 s an attempt (Firehose lets a transform run 5 minutes), 700 s.
    /// - SNS, Glue and S3 Tables: 10 s an attempt, 30 s an operation.
    pub fn timeouts(self) -> TimeoutConfig {
        let s = Duration::from_secs;
        let (attempt, total) = match self {
            Service::Kinesis => (s(10), s(30)),
            Service::DynamoDb => (s(3), s(10)),
            Service::S3 => (s(60), s(180)),
            Service::Lambda => (s(330), s(700)),
            Service::Sns | Service::Glue | Service::S3Tables => (s(10), s(30)),
        };
        request_timeouts(attempt, total)
    }
}

impl AwsSettings {
    /// Settings for a local emulator: static test credentials, `us-east-1`.
    pub fn emulator(endpoint: &str) -> Self {
        Self {
            region: Some("us-east-1".into()),
            profile: None,
            endpoint_url: Some(endpoint.to_owned()),
            static_credentials: Some(("test".into(), "test".into())),
            timeouts: None,
        }
    }
}

/// Loads an SDK configuration from the standard chain, with these overrides.
pub async fn load_sdk_config(settings: &AwsSettings) -> SdkConfig {
    let mut loader = aws_config::defaults(BehaviorVersion::latest());
    if let Some(region) = &settings.region {
        loader = loader.region(Region::new(region.clone()));
    }
    if let Some(profile) = &settings.profile {
        loader = loader.profile_name(profile);
    }
    if let Some(url) = &settings.endpoint_url {
        loader = loader.endpoint_url(url);
    }
    if let Some((key, secret)) = &settings.static_credentials {
        loader = loader.credentials_provider(aws_sdk_dynamodb::config::Credentials::new(
            key.clone(),
            secret.clone(),
            None,
            None,
            "weir-static",
        ));
    }
    // Fail fast on unreachable endpoints; request limits per service (`timeouts`).
    let timeouts = settings
        .timeouts
        .clone()
        .unwrap_or_else(|| TimeoutConfig::builder().connect_timeout(Duration::from_secs(3)).build());
    loader = loader.timeout_config(timeouts);
    loader.load().await
}

/// Timeouts for request/response calls (DynamoDB, S3 metadata, Kinesis control plane):
/// each attempt at most `attempt`, all attempts of one operation at most `total`.
pub fn request_timeouts(attempt: Duration, total: Duration) -> TimeoutConfig {
    TimeoutConfig::builder()
        .connect_timeout(Duration::from_secs(3))
        .operation_attempt_timeout(attempt)
        .operation_timeout(total)
        .build()
}
