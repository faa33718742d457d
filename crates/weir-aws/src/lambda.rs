//! [`FunctionInvoker`] (the archiver's and the Iceberg destination's Lambda transform)
//! on aws-sdk-lambda.

use async_trait::async_trait;
use aws_sdk_lambda::error::SdkError;
use aws_sdk_lambda::primitives::Blob;
use bytes::Bytes;
use weir_core::ports::{FunctionInvoker, InvokeError};

/// Synchronous (`RequestResponse`) invocations.
pub struct LambdaInvoker {
    client: aws_sdk_lambda::Client,
}

impl LambdaInvoker {
    /// An invoker using `client` (see [`crate::clients::lambda`]).
    pub fn new(client: aws_sdk_lambda::Client) -> Self {
        Self { client }
    }
}

#[async_trait]
impl FunctionInvoker for LambdaInvoker {
    async fn invoke(&self, function: &str, payload: Bytes) -> Result<Bytes, InvokeError> {
        let out = self.client.invoke().function_name(function).payload(Blob::new(payload.to_vec())).send().await;
        match out {
            Ok(out) => {
                if let Some(kind) = out.function_error() {
                    let detail =
                        out.payload().map(|p| String::from_utf8_lossy(p.as_ref()).into_owned()).unwrap_or_default();
                    return Err(InvokeError {
                        code: "Lambda.FunctionError",
                        message: format!("function error {kind}: {}", detail.chars().take(500).collect::<String>()),
                        retryable: true,
                    });
                }
                Ok(out.payload().map(|p| Bytes::copy_from_slice(p.as_ref())).unwrap_or_default())
            }
            Err(e) => {
                let (code, retryable) = match &e {
                    SdkError::TimeoutError(_) | SdkError::DispatchFailure(_) | SdkError::ResponseError(_) => {
                        ("Lambda.InvokeFailed", true)
                    }
                    SdkError::ServiceError(s) => {
                        let err = s.err();
                        if err.is_too_many_requests_exception() {
                            ("Lambda.InvokeLimitExceeded", true)
                        } else if err.is_service_exception() || s.raw().status().as_u16() >= 500 {
                            ("Lambda.InvokeFailed", true)
                        } else if s.raw().status().as_u16() == 403 {
                            ("Lambda.InvokeAccessDenied", false)
                        } else if err.is_resource_not_found_exception() {
                            ("Lambda.FunctionNotFound", false)
                        } else {
                            ("Lambda.InvokeFailed", false)
                        }
                    }
                    _ => ("Lambda.InvokeFailed", false),
                };
                Err(InvokeError {
                    code,
                    message: aws_sdk_lambda::error::DisplayErrorContext(&e).to_string(),
                    retryable,
                })
            }
        }
    }
}
