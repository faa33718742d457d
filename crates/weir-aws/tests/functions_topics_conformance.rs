//! The Lambda and SNS adapters through their ports' conformance suites.
//! `LambdaInvoker` against the Lambda Invoke API served here with the answers AWS
//! documents for it (success, `X-Amz-Function-Error`, 429 `TooManyRequestsException`,
//! 404 `ResourceNotFoundException`): moto runs functions only in Docker.
//! `SnsPublisher` on moto, what a topic received read back through moto's model API.
#![allow(clippy::unwrap_used, clippy::print_stdout)] // a test: a failed expectation is a failed test

use std::sync::Arc;

use async_trait::async_trait;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Path};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::IntoResponse;
use weir_aws::{AwsSettings, LambdaInvoker, SnsPublisher, load_sdk_config};
use weir_core::ports::{FunctionInvoker, Publisher};
use weir_testkit::Emulator;
use weir_testkit::conformance::{FunctionHarness, TopicHarness, function_invoker_suite, publisher_suite};

/// The Invoke API's answer for function `name`, as AWS gives it.
async fn invoke(Path(name): Path<String>, payload: Bytes) -> impl IntoResponse {
    let mut headers = HeaderMap::new();
    let json = HeaderValue::from_static("application/json");
    headers.insert("content-type", json);
    match name.as_str() {
        "echo" => {
            headers.insert("x-amz-executed-version", HeaderValue::from_static("$LATEST"));
            (StatusCode::OK, headers, payload)
        }
        "raising" => {
            headers.insert("x-amz-function-error", HeaderValue::from_static("Unhandled"));
            let body = r#"{"errorMessage":"'records'","errorType":"KeyError","requestId":"1","stackTrace":[]}"#;
            (StatusCode::OK, headers, Bytes::from_static(body.as_bytes()))
        }
        "busy" => {
            headers.insert("x-amzn-errortype", HeaderValue::from_static("TooManyRequestsException"));
            let body = r#"{"Reason":"ReservedFunctionConcurrentInvocationLimitExceeded","Type":"User","message":"Rate Exceeded."}"#;
            (StatusCode::TOO_MANY_REQUESTS, headers, Bytes::from_static(body.as_bytes()))
        }
        other => {
            headers.insert("x-amzn-errortype", HeaderValue::from_static("ResourceNotFoundException"));
            let body = format!(
                r#"{{"Type":"User","Message":"Function not found: arn:aws:lambda:us-east-1:123456789012:function:{other}"}}"#
            );
            (StatusCode::NOT_FOUND, headers, Bytes::from(body))
        }
    }
}

struct Lambda(Arc<LambdaInvoker>);

impl FunctionHarness for Lambda {
    fn invoker(&self) -> Arc<dyn FunctionInvoker> {
        self.0.clone()
    }
    fn missing(&self) -> String {
        "arn:aws:lambda:us-east-1:123456789012:function:nothing".into()
    }
}

#[tokio::test]
async fn lambda_invoker_passes_conformance_on_the_invoke_api() {
    let app = axum::Router::new()
        .route("/2015-03-31/functions/{name}/invocations", axum::routing::post(invoke))
        // Lambda takes synchronous payloads of up to 6 MB.
        .layer(DefaultBodyLimit::max(6 << 20));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let server = tokio::spawn(async move { axum::serve(listener, app).await });
    let client = aws_sdk_lambda::Client::new(&load_sdk_config(&AwsSettings::emulator(&url)).await);
    function_invoker_suite(&Lambda(Arc::new(LambdaInvoker::new(client)))).await;
    server.abort();
}

struct Sns {
    publisher: Arc<SnsPublisher>,
    moto: String,
    topic: String,
}

#[async_trait]
impl TopicHarness for Sns {
    fn publisher(&self) -> Arc<dyn Publisher> {
        self.publisher.clone()
    }
    fn topic(&self) -> String {
        self.topic.clone()
    }
    fn missing(&self) -> String {
        "arn:aws:sns:us-east-1:123456789012:nowhere".into()
    }
    async fn received(&self) -> Vec<(String, String)> {
        // moto keeps each topic's `sent_notifications`: (id, message, subject, …).
        let url = format!("{}/moto-api/data.json", self.moto);
        let data: serde_json::Value =
            serde_json::from_str(&reqwest::get(url).await.unwrap().text().await.unwrap()).unwrap();
        let topics = data["sns"]["Topic"].as_array().unwrap();
        let topic = topics.iter().find(|t| t["arn"] == self.topic.as_str()).expect("the topic is in moto's models");
        let sent = topic["sent_notifications"].as_array().unwrap();
        sent.iter().map(|n| (n[2].as_str().unwrap_or("").to_owned(), n[1].as_str().unwrap().to_owned())).collect()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sns_publisher_passes_conformance_on_moto() {
    let moto = Emulator::start("moto", &[]);
    let client = aws_sdk_sns::Client::new(&load_sdk_config(&AwsSettings::emulator(&moto.endpoint)).await);
    let topic = client.create_topic().name("weir-alerts").send().await.unwrap().topic_arn().unwrap().to_owned();
    let harness = Sns { publisher: Arc::new(SnsPublisher::new(client)), moto: moto.endpoint.clone(), topic };
    publisher_suite(&harness).await;
}
