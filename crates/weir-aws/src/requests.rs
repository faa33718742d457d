//! What weir asks of AWS: every request of every client weir builds, counted by an SDK
//! interceptor ([`RequestCounter`]) rather than at call sites, so a call added later is
//! counted too.
//!
//! Per operation (one SDK call, all its attempts) the counter records
//! - `weir_aws_requests_total{service, operation, outcome}`: one per call, with the
//!   outcome of its last attempt ([`Outcome`]);
//! - `weir_aws_request_retries_total{service, operation}`: attempts after the first;
//! - `weir_aws_request_throttles_total{service, operation}`: attempts the service
//!   refused as throttled (429, or a throttling error code such as
//!   `ProvisionedThroughputExceededException` or `SlowDown`).
//!
//! AWS bills every attempt, so the billed requests of an operation are its calls plus
//! its retries. The same counts are kept in a [`RequestLedger`] for commands that print
//! them instead of serving `/metrics`.
//!
//! An enhanced fan-out `SubscribeToShard` counts once, when its event stream opens.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use aws_runtime::retries::classifiers::THROTTLING_ERRORS;
use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::interceptors::Intercept;
use aws_smithy_runtime_api::client::interceptors::context::FinalizerInterceptorContextRef;
use aws_smithy_runtime_api::client::orchestrator::{HttpResponse, Metadata};
use aws_smithy_runtime_api::client::retries::RequestAttempts;
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use aws_smithy_types::config_bag::ConfigBag;

use crate::Service;

/// How one attempt, or a call's last attempt, ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Outcome {
    /// A 2xx or 3xx response.
    Ok,
    /// The service refused the request as throttled.
    Throttled,
    /// Any other 4xx response (a failed condition, a missing resource, bad input).
    ClientError,
    /// A 5xx response that is not throttling.
    ServerError,
    /// No response within the attempt or operation timeout.
    Timeout,
    /// No response: the connection failed or was cut, or the request was never sent.
    Transport,
}

impl Outcome {
    /// The label value on `/metrics`.
    pub fn label(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::Throttled => "throttled",
            Outcome::ClientError => "client_error",
            Outcome::ServerError => "server_error",
            Outcome::Timeout => "timeout",
            Outcome::Transport => "transport",
        }
    }
}

/// The counts of one operation of one service.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OperationCounts {
    /// Calls by the outcome of their last attempt.
    pub calls: BTreeMap<Outcome, u64>,
    /// Attempts after the first.
    pub retries: u64,
    /// Attempts refused as throttled.
    pub throttles: u64,
}

impl OperationCounts {
    /// Every call, whatever its outcome.
    pub fn total_calls(&self) -> u64 {
        self.calls.values().sum()
    }

    /// Requests AWS bills: every attempt of every call that reached it.
    pub fn attempts(&self) -> u64 {
        self.total_calls() + self.retries
    }
}

/// In-process counts by `(service, operation)`, shared by the counters of one process.
#[derive(Debug, Default)]
pub struct RequestLedger {
    counts: Mutex<BTreeMap<(&'static str, String), OperationCounts>>,
}

impl RequestLedger {
    /// An empty ledger.
    pub fn new() -> Arc<Self> {
        Arc::default()
    }

    /// The counts so far, ordered by service then operation.
    pub fn snapshot(&self) -> BTreeMap<(&'static str, String), OperationCounts> {
        self.counts.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    fn record(&self, service: &'static str, operation: &str, f: impl FnOnce(&mut OperationCounts)) {
        let mut counts = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        f(counts.entry((service, operation.to_owned())).or_default());
    }
}

/// The SDK interceptor that counts requests; add one to every client's config
/// (`config::Builder::from(&sdk).interceptor(RequestCounter::new(service, ledger))`).
#[derive(Debug, Clone)]
pub struct RequestCounter {
    service: &'static str,
    ledger: Arc<RequestLedger>,
}

impl RequestCounter {
    /// A counter for a client of `service`, recording into `ledger` and `/metrics`.
    pub fn new(service: Service, ledger: Arc<RequestLedger>) -> Self {
        Self { service: service.label(), ledger }
    }
}

impl Intercept for RequestCounter {
    fn name(&self) -> &'static str {
        "weir-request-counter"
    }

    fn read_after_attempt(
        &self,
        context: &FinalizerInterceptorContextRef<'_>,
        _: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        if outcome(context) == Outcome::Throttled {
            let operation = operation(cfg);
            metrics::counter!("weir_aws_request_throttles_total", "service" => self.service, "operation" => operation.clone())
                .increment(1);
            self.ledger.record(self.service, &operation, |c| c.throttles += 1);
        }
        Ok(())
    }

    fn read_after_execution(
        &self,
        context: &FinalizerInterceptorContextRef<'_>,
        _: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let operation = operation(cfg);
        let outcome = outcome(context);
        let retries = u64::from(cfg.load::<RequestAttempts>().map_or(1, RequestAttempts::attempts).saturating_sub(1));
        metrics::counter!(
            "weir_aws_requests_total",
            "service" => self.service,
            "operation" => operation.clone(),
            "outcome" => outcome.label()
        )
        .increment(1);
        if retries > 0 {
            metrics::counter!("weir_aws_request_retries_total", "service" => self.service, "operation" => operation.clone())
                .increment(retries);
        }
        self.ledger.record(self.service, &operation, |c| {
            *c.calls.entry(outcome).or_default() += 1;
            c.retries += retries;
        });
        Ok(())
    }
}

fn operation(cfg: &ConfigBag) -> String {
    cfg.load::<Metadata>().map_or_else(|| "unknown".to_owned(), |m| m.name().to_owned())
}

fn outcome(context: &FinalizerInterceptorContextRef<'_>) -> Outcome {
    match context.response() {
        Some(response) => of_response(response),
        None => match context.output_or_error() {
            Some(Err(e)) if e.is_timeout_error() => Outcome::Timeout,
            _ => Outcome::Transport,
        },
    }
}

/// The outcome a response means: its status, and for errors the AWS error code.
pub(crate) fn of_response(response: &HttpResponse) -> Outcome {
    let status = response.status().as_u16();
    if status < 400 {
        return Outcome::Ok;
    }
    let throttled = status == 429
        || error_code(response.headers().get("x-amzn-errortype"), response.body().bytes())
            .is_some_and(|code| THROTTLING_ERRORS.contains(&code.as_str()));
    match (throttled, status) {
        (true, _) => Outcome::Throttled,
        (false, 400..=499) => Outcome::ClientError,
        _ => Outcome::ServerError,
    }
}

/// The AWS error code of an error response, as the SDK's deserialisers find it: the
/// `x-amzn-ErrorType` header, else `__type` or `code` of a JSON body (awsJson: Kinesis,
/// DynamoDB, Lambda), else `<Code>` of an XML body (S3, SNS). Namespaces (`ns#Code`)
/// and the header's `:uri` suffix are dropped.
fn error_code(header: Option<&str>, body: Option<&[u8]>) -> Option<String> {
    let clean = |raw: &str| {
        let raw = raw.split(':').next().unwrap_or(raw);
        raw.rsplit('#').next().unwrap_or(raw).trim().to_owned()
    };
    if let Some(h) = header {
        return Some(clean(h));
    }
    let body = body?;
    if body.first() == Some(&b'{') {
        let value: serde_json::Value = serde_json::from_slice(body).ok()?;
        let code = value.get("__type").or_else(|| value.get("code"))?.as_str()?;
        return Some(clean(code));
    }
    let text = std::str::from_utf8(body).ok()?;
    let start = text.find("<Code>")? + "<Code>".len();
    let end = start + text[start..].find("</Code>")?;
    Some(clean(&text[start..end]))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn response(status: u16, header: Option<&str>, body: &str) -> HttpResponse {
        let mut r = HttpResponse::new(
            status.try_into().expect("status"),
            aws_smithy_types::body::SdkBody::from(body.to_owned()),
        );
        if let Some(h) = header {
            r.headers_mut().insert("x-amzn-ErrorType", h.to_owned());
        }
        r
    }

    #[test]
    fn responses_are_classified_by_status_and_error_code() {
        assert_eq!(of_response(&response(200, None, "{}")), Outcome::Ok);
        assert_eq!(of_response(&response(429, None, "")), Outcome::Throttled);
        let kinesis = r#"{"__type":"com.amazonaws.kinesis#ProvisionedThroughputExceededException","message":"slow"}"#;
        assert_eq!(of_response(&response(400, None, kinesis)), Outcome::Throttled);
        let header = "ThrottlingException:http://internal.amazon.com/coral/com.amazon.coral.availability/";
        assert_eq!(of_response(&response(400, Some(header), "{}")), Outcome::Throttled);
        let s3 = "<?xml version=\"1.0\"?><Error><Code>SlowDown</Code><Message>m</Message></Error>";
        assert_eq!(of_response(&response(503, None, s3)), Outcome::Throttled);
        let failed = r#"{"__type":"com.amazonaws.dynamodb.v20120810#ConditionalCheckFailedException"}"#;
        assert_eq!(of_response(&response(400, None, failed)), Outcome::ClientError);
        let precondition = "<Error><Code>PreconditionFailed</Code></Error>";
        assert_eq!(of_response(&response(412, None, precondition)), Outcome::ClientError);
        assert_eq!(
            of_response(&response(500, None, "<Error><Code>InternalError</Code></Error>")),
            Outcome::ServerError
        );
        assert_eq!(of_response(&response(503, None, "not xml at all")), Outcome::ServerError);
    }
}
