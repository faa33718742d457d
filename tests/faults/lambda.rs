//! A Lambda transform that, for the length of an outage, times out (the function
//! error Lambda returns after the function's timeout), answers 500, or returns a body
//! that is not the Firehose contract. Records of failed invocations go to the error
//! output (`processing-failed`) after the retries, as Firehose does; every record
//! ends up exactly once in the archive or the error output.

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use bytes::Bytes;
use serde_json::{Value, json};

use crate::harness::{Env, Extra, Traffic, now_ms, outage};

const HEALTHY: u8 = 0;
const FAILING: u8 = 1;

#[derive(Default)]
struct Function {
    mode: AtomicU8,
    calls: AtomicUsize,
    failed: AtomicUsize,
}

async fn invoke(State(f): State<Arc<Function>>, body: Bytes) -> (StatusCode, HeaderMap, String) {
    let n = f.calls.fetch_add(1, Ordering::SeqCst);
    let mut headers = HeaderMap::new();
    headers.insert("content-type", "application/json".parse().unwrap());
    if f.mode.load(Ordering::SeqCst) == FAILING {
        f.failed.fetch_add(1, Ordering::SeqCst);
        match n % 3 {
            0 => {
                // What Lambda answers when the function runs past its timeout.
                tokio::time::sleep(Duration::from_secs(3)).await;
                headers.insert("x-amz-function-error", "Unhandled".parse().unwrap());
                let body =
                    json!({"errorType": "Sandbox.Timedout", "errorMessage": "Task timed out after 3.00 seconds"});
                return (StatusCode::OK, headers, body.to_string());
            }
            1 => {
                headers.insert("x-amzn-ErrorType", "ServiceException".parse().unwrap());
                return (StatusCode::INTERNAL_SERVER_ERROR, headers, r#"{"message":"internal error"}"#.into());
            }
            _ => return (StatusCode::OK, headers, "{\"records\": [ {\"recordId\": ".into()),
        }
    }
    let event: Value = serde_json::from_slice(&body).unwrap();
    let records: Vec<Value> = event["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let v: Value = serde_json::from_slice(&B64.decode(r["data"].as_str().unwrap()).unwrap()).unwrap();
            let tenant = v["tenantId"].as_str().unwrap().to_owned();
            let line = format!("{}\n", json!({"tenant_id": tenant, "session_id": v["sessionId"]}));
            json!({"recordId": r["recordId"], "result": "Ok", "data": B64.encode(line),
                   "metadata": {"partitionKeys": {"tenantId": tenant}}})
        })
        .collect();
    (StatusCode::OK, headers, json!({"records": records}).to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failing_lambda_sends_records_to_the_error_output_exactly_once() {
    let function = Arc::new(Function::default());
    let (url, server) = weir_e2e::serve_lambda(post(invoke), Arc::clone(&function)).await;

    let env = Env::new("fault-lambda", 2).await;
    let w = env.worker("lambda-w1", &Extra { lambda: Some(url), ..Extra::default() }).await;
    w.wait_reading(Duration::from_secs(60)).await;
    let traffic = Traffic::start(env.kinesis.clone(), &env.name, 100);
    env.alerts.wait_for(3, Duration::from_secs(60)).await;

    let from = now_ms();
    function.mode.store(FAILING, Ordering::SeqCst);
    tokio::time::sleep(outage()).await;
    function.mode.store(HEALTHY, Ordering::SeqCst);
    let to = now_ms();
    env.alerts.wait_for(env.alerts.count() + 3, Duration::from_secs(60)).await;
    let produced = traffic.stop(from, to).await;
    let tally =
        env.tally("Lambda times out, answers 500, or garbles", &produced, &[&w], Duration::from_secs(120)).await;
    println!(
        "{} invocations, {} failed",
        function.calls.load(Ordering::SeqCst),
        function.failed.load(Ordering::SeqCst)
    );
    tally.report_and_check(true);
    assert!(function.failed.load(Ordering::SeqCst) > 0, "the function never failed: the scenario tested nothing");
    assert!(tally.to_error_output > 0, "no record reached the error output while the function failed");
    server.abort();
}
