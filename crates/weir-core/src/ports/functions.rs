//! Functions invoked synchronously with a JSON payload (a Lambda): the archiver's and
//! the Iceberg destination's transform port. weir-aws implements it with aws-sdk-lambda;
//! tests serve the Lambda Invoke API or implement it in process.

use async_trait::async_trait;
use bytes::Bytes;

/// A failed invocation.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{code}: {message}")]
pub struct InvokeError {
    /// Error code for the error output (`Lambda.FunctionError`, `Lambda.InvokeFailed`, ...).
    pub code: &'static str,
    /// What went wrong.
    pub message: String,
    /// Whether another attempt may succeed.
    pub retryable: bool,
}

/// Invokes a function synchronously with a JSON payload and returns its JSON result.
#[async_trait]
pub trait FunctionInvoker: Send + Sync {
    /// Invokes `function` (name or ARN).
    async fn invoke(&self, function: &str, payload: Bytes) -> Result<Bytes, InvokeError>;
}
