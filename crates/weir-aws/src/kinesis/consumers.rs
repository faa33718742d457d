//! The enhanced fan-out consumers registered on a stream: listed for `weir efo list`,
//! deregistered by `weir efo deregister` and at the end of a `weir replay --efo` job
//! (a registered consumer is billed per shard-hour whether it reads or not).

use aws_sdk_kinesis::Client;
use weir_core::ports::ReadError;

use crate::error::describe;

/// One enhanced fan-out consumer of a stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EfoConsumerInfo {
    /// Its name.
    pub name: String,
    /// `CREATING`, `ACTIVE` or `DELETING`.
    pub status: String,
    /// When it was registered (Unix milliseconds).
    pub created_ms: Option<i64>,
}

/// The ARN of `stream` (DescribeStreamSummary); errors name the stream and the fix.
pub(super) async fn stream_arn(client: &Client, stream: &str) -> Result<String, ReadError> {
    let out = client.describe_stream_summary().stream_name(stream).send().await.map_err(|e| {
        if e.as_service_error().is_some_and(|s| s.is_resource_not_found_exception()) {
            ReadError::Fatal(format!("kinesis stream {stream} not found: create it or fix stream.name / region"))
        } else {
            ReadError::Fatal(format!(
                "cannot describe kinesis stream {stream}: {} (needs kinesis:DescribeStreamSummary)",
                describe(&e)
            ))
        }
    })?;
    out.stream_description_summary()
        .map(|s| s.stream_arn().to_owned())
        .ok_or_else(|| ReadError::Fatal(format!("kinesis stream {stream}: no ARN in DescribeStreamSummary")))
}

/// How many hours `stream` keeps records (DescribeStreamSummary; 24 when it does not
/// say).
pub async fn retention_hours(client: &Client, stream: &str) -> Result<i32, ReadError> {
    let out = client.describe_stream_summary().stream_name(stream).send().await.map_err(|e| {
        ReadError::Fatal(format!("stream {stream}: {} (needs kinesis:DescribeStreamSummary)", describe(&e)))
    })?;
    Ok(out.stream_description_summary().map(|d| d.retention_period_hours()).unwrap_or(24))
}

/// Every enhanced fan-out consumer registered on `stream`, by name.
pub async fn list_efo_consumers(client: &Client, stream: &str) -> Result<Vec<EfoConsumerInfo>, ReadError> {
    let arn = stream_arn(client, stream).await?;
    let mut out = Vec::new();
    let mut token: Option<String> = None;
    loop {
        // ListStreamConsumers takes either the stream ARN or a NextToken, not both.
        let call = match &token {
            Some(t) => client.list_stream_consumers().next_token(t),
            None => client.list_stream_consumers().stream_arn(&arn),
        };
        let page = call.send().await.map_err(|e| {
            ReadError::Fatal(format!(
                "cannot list the enhanced fan-out consumers of {stream}: {} (needs kinesis:ListStreamConsumers)",
                describe(&e)
            ))
        })?;
        for c in page.consumers() {
            out.push(EfoConsumerInfo {
                name: c.consumer_name().to_owned(),
                status: c.consumer_status().as_str().to_owned(),
                created_ms: c.consumer_creation_timestamp().to_millis().ok(),
            });
        }
        token = page.next_token().map(str::to_owned);
        if token.is_none() {
            break;
        }
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

/// Deregisters the consumer `name` of `stream`: `true` if it was registered, `false`
/// if there was none of that name (nothing to do).
pub async fn deregister_efo_consumer(client: &Client, stream: &str, name: &str) -> Result<bool, ReadError> {
    let arn = stream_arn(client, stream).await?;
    match client.deregister_stream_consumer().stream_arn(&arn).consumer_name(name).send().await {
        Ok(_) => Ok(true),
        Err(e) if e.as_service_error().is_some_and(|s| s.is_resource_not_found_exception()) => Ok(false),
        Err(e) => Err(ReadError::Fatal(format!(
            "cannot deregister enhanced fan-out consumer {name} of {stream}: {} (needs kinesis:DeregisterStreamConsumer)",
            describe(&e)
        ))),
    }
}
