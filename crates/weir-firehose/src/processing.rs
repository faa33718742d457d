//! `ProcessingConfiguration`: the processors of a delivery stream, shared by every
//! destination, and the `Lambda` processor's settings read with Firehose's names,
//! ranges and defaults.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;

use crate::Problem;

/// One processor parameter.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Parameter {
    /// Name.
    #[serde(rename = "ParameterName")]
    pub name: String,
    /// Value (always text in Firehose's API).
    #[serde(rename = "ParameterValue")]
    pub value: Value,
}

/// One processor.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Processor {
    /// `MetadataExtraction`, `Lambda`, `AppendDelimiterToRecord`, `RecordDeAggregation`, ….
    #[serde(rename = "Type")]
    pub kind: String,
    /// Parameters.
    #[serde(rename = "Parameters", default)]
    pub parameters: Vec<Parameter>,
}

/// `ProcessingConfiguration`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Processing {
    /// Whether processors run.
    #[serde(rename = "Enabled")]
    pub enabled: Option<bool>,
    /// Processors, in order.
    #[serde(rename = "Processors", default)]
    pub processors: Vec<Processor>,
}

impl Processor {
    /// The parameters by name, each value as text (Firehose's API holds them as
    /// strings; a number or boolean written in TOML or YAML is read as its text).
    pub fn parameters(&self) -> BTreeMap<&str, String> {
        self.parameters
            .iter()
            .map(|x| {
                let value = match &x.value {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                (x.name.as_str(), value)
            })
            .collect()
    }
}

/// A Lambda transform.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LambdaSettings {
    /// Function ARN.
    pub arn: String,
    /// Retries of a failed invocation (0–300, default 3).
    pub retries: u32,
    /// Payload size per invocation (0.2–3 MiB, default 1 MiB).
    pub buffer_bytes: u64,
    /// Longest wait to fill an invocation (60–900 s, default 60 s).
    pub buffer_interval: Duration,
}

impl LambdaSettings {
    /// Reads a `Lambda` processor's parameters (`LambdaArn`, `NumberOfRetries`,
    /// `BufferSizeInMBs`, `BufferIntervalInSeconds`) with Firehose's ranges and
    /// defaults. `field` is the processor's path (`ProcessingConfiguration.Processors[0]`);
    /// every problem names its parameter under it. The settings are given even when
    /// there are problems (a value with a problem replaced by its default), so a caller
    /// reports the rest of its own checks without echoes.
    pub fn read(processor: &Processor, field: &str) -> (Self, Vec<Problem>) {
        let ps = processor.parameters();
        let mut problems = Vec::new();
        let arn = ps.get("LambdaArn").cloned().unwrap_or_default();
        if arn.is_empty() {
            problems.push(Problem {
                field: format!("{field}.LambdaArn"),
                reason: "a Lambda processor needs LambdaArn".into(),
            });
        }
        let mut num = |name: &str, default: f64, (lo, hi): (f64, f64)| -> f64 {
            let Some(text) = ps.get(name) else { return default };
            let reason = match text.parse::<f64>() {
                Ok(v) if (lo..=hi).contains(&v) => return v,
                Ok(_) => format!("{text} is outside {lo}–{hi}"),
                Err(_) => format!("{text:?} is not a number"),
            };
            problems.push(Problem { field: format!("{field}.{name}"), reason });
            default
        };
        let retries = num("NumberOfRetries", 3.0, (0.0, 300.0));
        let size = num("BufferSizeInMBs", 1.0, (0.2, 3.0));
        let wait = num("BufferIntervalInSeconds", 60.0, (60.0, 900.0));
        let settings = Self {
            arn,
            retries: retries as u32,
            buffer_bytes: (size * 1024.0 * 1024.0) as u64,
            buffer_interval: Duration::from_secs(wait as u64),
        };
        (settings, problems)
    }
}
