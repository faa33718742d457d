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
}

impl AwsSettings {
    /// Settings for a local emulator: static test credentials, `us-east-1`.
    pub fn emulator(endpoint: &str) -> Self {
        Self {
            region: Some("us-east-1".into()),
            profile: None,
            endpoint_url: Some(endpoint.to_owned()),
            static_credentials: Some(("test".into(), "test".into())),
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
    // Fail fast on unreachable endpoints; per-operation limits are set per client
    // (a SubscribeToShard stream legitimately lasts five minutes).
    loader = loader.timeout_config(TimeoutConfig::builder().connect_timeout(Duration::from_secs(3)).build());
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
