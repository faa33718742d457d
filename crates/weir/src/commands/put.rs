//! `weir put`: NDJSON lines from a file or stdin into a Kinesis stream.

use std::io::BufRead;
use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use bytes::Bytes;
use weir_aws::kinesis::producer::{Outgoing, Producer, check};
use weir_aws::{AwsSettings, load_sdk_config};

/// Options of `weir put`.
#[derive(Debug, clap::Args)]
pub struct PutArgs {
    /// The stream.
    #[arg(long)]
    stream: String,
    /// NDJSON file; standard input when absent.
    #[arg(long)]
    input: Option<PathBuf>,
    /// Partition key from a field path of each JSON line, e.g. `.tenantId` or
    /// `.meta.tenant`. Without it, keys are random.
    #[arg(long)]
    partition_key: Option<String>,
    #[command(flatten)]
    aws: AwsArgs,
}

/// Where AWS is.
#[derive(Debug, Clone, clap::Args)]
pub struct AwsArgs {
    /// Region (default: the standard AWS chain).
    #[arg(long, env = "AWS_REGION")]
    pub region: Option<String>,
    /// Named profile.
    #[arg(long, env = "AWS_PROFILE")]
    pub profile: Option<String>,
    /// Endpoint override (an emulator).
    #[arg(long, env = "AWS_ENDPOINT_URL_KINESIS")]
    pub endpoint_url: Option<String>,
}

impl AwsArgs {
    pub fn settings(&self) -> AwsSettings {
        AwsSettings {
            region: self.region.clone(),
            profile: self.profile.clone(),
            endpoint_url: self.endpoint_url.clone(),
            static_credentials: None,
            timeouts: Some(weir_aws::Service::Kinesis.timeouts()),
        }
    }
}

/// A field path `.a.b` over a JSON value; only plain field names.
fn parse_path(path: &str) -> Result<Vec<String>> {
    let Some(rest) = path.strip_prefix('.') else {
        bail!("--partition-key {path:?}: a path starts with '.', e.g. .tenantId")
    };
    let parts: Vec<String> = rest.split('.').map(str::to_owned).collect();
    if parts.iter().any(|p| p.is_empty()) {
        bail!("--partition-key {path:?}: empty field name");
    }
    Ok(parts)
}

fn key_at(line: &[u8], path: &[String]) -> Result<String, String> {
    let value: serde_json::Value = serde_json::from_slice(line).map_err(|e| format!("not valid JSON: {e}"))?;
    let mut v = &value;
    for p in path {
        v = v.get(p).ok_or_else(|| format!("no field .{}", path.join(".")))?;
    }
    match v {
        serde_json::Value::String(s) => Ok(s.clone()),
        serde_json::Value::Number(n) => Ok(n.to_string()),
        serde_json::Value::Bool(b) => Ok(b.to_string()),
        other => Err(format!("partition key .{} is not a scalar: {other}", path.join("."))),
    }
}

pub async fn run(args: PutArgs) -> Result<()> {
    let path = args.partition_key.as_deref().map(parse_path).transpose()?;
    let reader: Box<dyn BufRead> = match &args.input {
        Some(p) => Box::new(std::io::BufReader::new(
            std::fs::File::open(p).with_context(|| format!("cannot open {}", p.display()))?,
        )),
        None => Box::new(std::io::stdin().lock()),
    };
    let mut records = Vec::new();
    let mut rejected = Vec::new();
    for (i, line) in reader.split(b'\n').enumerate() {
        let n = i as u64 + 1;
        let mut line = line.context("read input")?;
        if line.last() == Some(&b'\r') {
            line.pop();
        }
        if line.is_empty() {
            rejected.push((n, "empty line".to_owned()));
            continue;
        }
        let key = match &path {
            Some(p) => match key_at(&line, p) {
                Ok(k) => k,
                Err(reason) => {
                    rejected.push((n, reason));
                    continue;
                }
            },
            None => format!("{:032x}", rand::random::<u128>()),
        };
        let record = Outgoing { id: n, partition_key: key, data: Bytes::from(line) };
        match check(&record) {
            Ok(()) => records.push(record),
            Err(reason) => rejected.push((n, reason)),
        }
    }
    let sdk = load_sdk_config(&args.aws.settings()).await;
    let producer = Producer::new(weir_aws::clients::kinesis_from(&sdk), &args.stream);
    let total = records.len();
    let report = producer.put_all(records).await;
    for (line, reason) in &rejected {
        eprintln!("line {line}: rejected: {reason}");
    }
    for (line, reason) in &report.failed {
        eprintln!("line {line}: failed: {reason}");
    }
    println!(
        "put {} of {} records into {} in {} calls ({} records retried); {} lines rejected, {} failed",
        report.accepted.len(),
        total,
        args.stream,
        report.calls,
        report.retried_records,
        rejected.len(),
        report.failed.len()
    );
    if !rejected.is_empty() || !report.failed.is_empty() {
        bail!("{} lines were not put (see above)", rejected.len() + report.failed.len());
    }
    Ok(())
}
