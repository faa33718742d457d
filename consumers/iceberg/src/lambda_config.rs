//! Firehose's `Lambda` processor as the Iceberg destination takes it: from weir's
//! config section (`lambda = { arn = ... }`) or imported from a delivery stream's
//! `ProcessingConfiguration`.

use serde::{Deserialize, Serialize};

/// Firehose's `Lambda` processor (the `[aws]` section's `lambda_endpoint_url`,
/// region and credentials apply).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LambdaConfig {
    /// The function's ARN (`LambdaArn`).
    #[serde(default)]
    pub arn: String,
    /// Retries of an invocation that failed in a way worth retrying (0–300, default
    /// 3; `NumberOfRetries`); after them the records go to the error output.
    #[serde(default = "three")]
    pub retries: u32,
    /// Payload of one invocation, MiB (0.2–3, default 1; `BufferSizeInMBs`).
    #[serde(default = "one_mib")]
    pub buffer_size_mib: f64,
}

fn three() -> u32 {
    3
}

fn one_mib() -> f64 {
    1.0
}

impl LambdaConfig {
    /// Each field out of range, with the reason.
    pub fn problems(&self) -> Vec<(&'static str, String)> {
        let mut out = Vec::new();
        if !self.arn.starts_with("arn:") || self.arn.split(':').count() < 7 {
            out.push(("arn", format!("{:?} is not a Lambda function's ARN", self.arn)));
        }
        if self.retries > 300 {
            out.push(("retries", format!("{} is not 0–300", self.retries)));
        }
        if !(0.2..=3.0).contains(&self.buffer_size_mib) {
            out.push(("buffer_size_mib", format!("{} is not 0.2–3", self.buffer_size_mib)));
        }
        out
    }
}
