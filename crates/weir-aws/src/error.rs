//! Classification of AWS SDK errors, and retries.
//!
//! Errors are classified by the SDK's typed variants (timeouts and dispatch failures
//! are transient) and, for service errors, by error code and HTTP status - never by
//! message text.

use std::future::Future;
use std::time::Duration;

use aws_sdk_dynamodb::config::http::HttpResponse;
use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use rand::Rng;

/// How an error should be handled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorClass {
    /// The service asked us to slow down: back off, then retry.
    Throttling,
    /// A passing failure (network, timeout, 5xx): retry.
    Transient,
    /// Retrying will not help (validation, permissions, missing resource).
    Permanent,
}

const THROTTLING_CODES: &[&str] = &[
    "ThrottlingException",
    "Throttling",
    "ProvisionedThroughputExceededException",
    "RequestLimitExceeded",
    "LimitExceededException",
    "SlowDown",
    "TooManyRequestsException",
    "RequestThrottled",
    "KMSThrottlingException",
];

const TRANSIENT_CODES: &[&str] = &[
    "InternalServerError",
    "InternalFailure",
    "InternalError",
    "ServiceUnavailable",
    "ServiceUnavailableException",
    "RequestTimeout",
    "RequestTimeoutException",
    "TransactionInProgressException",
    "ConditionalRequestConflict",
];

/// Classifies an SDK error.
pub fn classify<E: ProvideErrorMetadata>(err: &SdkError<E, HttpResponse>) -> ErrorClass {
    match err {
        SdkError::TimeoutError(_) | SdkError::DispatchFailure(_) | SdkError::ResponseError(_) => ErrorClass::Transient,
        SdkError::ServiceError(se) => {
            let code = se.err().code().unwrap_or_default();
            if THROTTLING_CODES.contains(&code) {
                ErrorClass::Throttling
            } else if TRANSIENT_CODES.contains(&code) || se.raw().status().as_u16() >= 500 {
                ErrorClass::Transient
            } else {
                ErrorClass::Permanent
            }
        }
        _ => ErrorClass::Permanent,
    }
}

/// A one-line description of an SDK error: code and message, or the failure kind.
pub fn describe<E: ProvideErrorMetadata + std::error::Error, R>(err: &SdkError<E, R>) -> String {
    match err {
        SdkError::ServiceError(se) => {
            let e = se.err();
            format!("{}: {}", e.code().unwrap_or("error"), e.message().unwrap_or(""))
        }
        SdkError::TimeoutError(_) => "request timed out".into(),
        SdkError::DispatchFailure(f) => format!("could not send request: {f:?}"),
        other => format!("{other}"),
    }
}

/// Retries `op` while it fails with a retryable class, with exponential backoff and
/// full jitter, until `deadline` has passed since the first attempt.
pub async fn retry<T, E, F, Fut>(deadline: Duration, mut op: F, class_of: impl Fn(&E) -> ErrorClass) -> Result<T, E>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    let start = tokio::time::Instant::now();
    let mut attempt: u32 = 0;
    loop {
        match op().await {
            Ok(v) => return Ok(v),
            Err(e) => {
                let class = class_of(&e);
                let cap = Duration::from_millis(50u64.saturating_mul(1 << attempt.min(10))).min(Duration::from_secs(5));
                let base = if class == ErrorClass::Throttling { cap * 2 } else { cap };
                let delay = Duration::from_millis(rand::rng().random_range(0..=base.as_millis() as u64));
                if class == ErrorClass::Permanent || start.elapsed() + delay > deadline {
                    return Err(e);
                }
                attempt += 1;
                tokio::time::sleep(delay).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    #[derive(Debug, PartialEq)]
    struct E(ErrorClass);

    #[tokio::test(start_paused = true)]
    async fn retries_transient_failures_until_success() {
        let calls = AtomicU32::new(0);
        let r = retry(
            Duration::from_secs(10),
            || async {
                let n = calls.fetch_add(1, Ordering::SeqCst);
                if n < 3 { Err(E(if n == 1 { ErrorClass::Throttling } else { ErrorClass::Transient })) } else { Ok(n) }
            },
            |e: &E| e.0,
        )
        .await;
        assert_eq!(r, Ok(3));
        assert_eq!(calls.load(Ordering::SeqCst), 4);
    }

    #[tokio::test(start_paused = true)]
    async fn permanent_errors_are_not_retried() {
        let calls = AtomicU32::new(0);
        let r: Result<(), E> = retry(
            Duration::from_secs(10),
            || async {
                calls.fetch_add(1, Ordering::SeqCst);
                Err(E(ErrorClass::Permanent))
            },
            |e: &E| e.0,
        )
        .await;
        assert_eq!(r, Err(E(ErrorClass::Permanent)));
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn gives_up_at_the_deadline() {
        let start = tokio::time::Instant::now();
        let r: Result<(), E> =
            retry(Duration::from_secs(20), || async { Err(E(ErrorClass::Transient)) }, |e: &E| e.0).await;
        assert!(r.is_err());
        assert!(start.elapsed() <= Duration::from_secs(20), "stopped within the deadline: {:?}", start.elapsed());
        assert!(start.elapsed() >= Duration::from_secs(5), "kept trying for a while: {:?}", start.elapsed());
    }
}
