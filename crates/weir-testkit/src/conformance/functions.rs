use std::sync::Arc;

use bytes::Bytes;
use weir_core::ports::{FunctionInvoker, InvokeError};

/// A [`FunctionInvoker`] under test and the functions its service holds.
pub trait FunctionHarness: Send + Sync {
    /// The invoker.
    fn invoker(&self) -> Arc<dyn FunctionInvoker>;
    /// A function that answers with the payload it was given, unchanged (`echo`
    /// unless the harness names another).
    fn echo(&self) -> String {
        "echo".into()
    }
    /// A function that raises an error (an unhandled exception in a Lambda;
    /// `raising` unless the harness names another).
    fn raising(&self) -> String {
        "raising".into()
    }
    /// A function whose invocations the service throttles (`busy` unless the harness
    /// names another).
    fn throttled(&self) -> String {
        "busy".into()
    }
    /// A name no function has.
    fn missing(&self) -> String;
}

fn expect_error(result: Result<Bytes, InvokeError>, code: &str, retryable: bool, what: &str) {
    let e = result.expect_err(what);
    assert_eq!(e.code, code, "{what}: {e}");
    assert_eq!(e.retryable, retryable, "{what}: {e}");
    assert!(!e.message.is_empty(), "{what}: the error says what went wrong");
}

/// The rules of [`FunctionInvoker`]: a function's answer comes back byte for byte (up
/// to a payload of Lambda's 6 MB synchronous limit, in any UTF-8), concurrent
/// invocations each get their own answer, and failures carry the codes Firehose
/// writes to its error output: `Lambda.FunctionError` (retryable) when the function
/// raised, `Lambda.InvokeLimitExceeded` (retryable) when throttled,
/// `Lambda.FunctionNotFound` (not retryable) when there is no such function.
pub async fn function_invoker_suite(h: &dyn FunctionHarness) {
    let invoker = h.invoker();
    let echo = h.echo();
    for payload in [
        Bytes::from_static(b"{}"),
        Bytes::from(r#"{"records":[{"recordId":"1","data":"é€😀 \u0000 \" \\"}]}"#),
        // Firehose invokes with up to 6 MB; 5 MiB of records here.
        Bytes::from(format!(r#"{{"records":[{{"recordId":"1","data":"{}"}}]}}"#, "A".repeat(5 << 20))),
    ] {
        let answer = invoker.invoke(&echo, payload.clone()).await.expect("the echo function answers");
        assert_eq!(answer.len(), payload.len(), "the answer is the function's, byte for byte");
        assert!(answer == payload, "the answer is the function's, byte for byte");
    }

    // 32 invocations at once, each its own answer.
    let calls = (0..32).map(|i| {
        let (invoker, echo) = (invoker.clone(), echo.clone());
        async move {
            let payload = Bytes::from(format!(r#"{{"n":{i}}}"#));
            (payload.clone(), invoker.invoke(&echo, payload).await)
        }
    });
    for (payload, answer) in futures::future::join_all(calls).await {
        assert_eq!(answer.expect("a concurrent invocation answers"), payload, "each invocation its own answer");
    }

    let payload = Bytes::from_static(b"{}");
    expect_error(
        invoker.invoke(&h.raising(), payload.clone()).await,
        "Lambda.FunctionError",
        true,
        "a raising function",
    );
    expect_error(
        invoker.invoke(&h.throttled(), payload.clone()).await,
        "Lambda.InvokeLimitExceeded",
        true,
        "a throttled function",
    );
    expect_error(invoker.invoke(&h.missing(), payload).await, "Lambda.FunctionNotFound", false, "a missing function");
}
