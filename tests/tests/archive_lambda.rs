//! The archiver's Lambda transform through aws-sdk-lambda against a local HTTP endpoint
//! that speaks the Lambda Invoke API and runs a handler written for this test: records
//! flow from Kinesis (ferrokinesis) through `weir run` into a local directory. The
//! handler normalises records and returns partition keys, drops some, fails some,
//! returns plain text instead of base64 for some, and answers its first invocation
//! with a throttle. Each outcome lands where Firehose would put it.
#![allow(clippy::unwrap_used, clippy::print_stdout)] // a test: a failed expectation is a failed test

use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::extract::{Path as UrlPath, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use bytes::Bytes;
use serde_json::{Value, json};
use weir_aws::kinesis::producer::{Outgoing, Producer};
use weir_e2e::patience::{Patience, cpu_ticks};
use weir_e2e::{create_stream, kinesis, spawn_weir};
use weir_testkit::Emulator;

const RECORDS: u64 = 200;
const ARN: &str = "arn:aws:lambda:us-east-1:123456789012:function:mcp-transform";

#[derive(Default)]
struct Calls {
    total: AtomicUsize,
    functions: std::sync::Mutex<Vec<String>>,
}

async fn invoke(
    State(calls): State<Arc<Calls>>,
    UrlPath(name): UrlPath<String>,
    body: Bytes,
) -> (StatusCode, HeaderMap, String) {
    let n = calls.total.fetch_add(1, Ordering::SeqCst);
    calls.functions.lock().unwrap().push(name);
    let mut headers = HeaderMap::new();
    if n == 0 {
        headers.insert("x-amzn-ErrorType", "TooManyRequestsException".parse().unwrap());
        return (StatusCode::TOO_MANY_REQUESTS, headers, r#"{"message":"Rate exceeded"}"#.into());
    }
    let event: Value = serde_json::from_slice(&body).unwrap();
    let records: Vec<Value> = event["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let id = r["recordId"].clone();
            let data = B64.decode(r["data"].as_str().unwrap()).unwrap();
            let v: Value = serde_json::from_slice(&data).unwrap();
            let tenant = v["tenantId"].as_str().unwrap_or("unknown").to_owned();
            let out = format!("{}\n", json!({"tenant_id": tenant, "session_id": v["sessionId"], "lambda": true}));
            match v["mode"].as_str().unwrap_or("ok") {
                "drop" => json!({"recordId": id, "result": "Dropped"}),
                "fail" => json!({"recordId": id, "result": "ProcessingFailed"}),
                "plain" => json!({"recordId": id, "result": "Ok", "data": out}),
                _ => json!({"recordId": id, "result": "Ok", "data": B64.encode(out),
                            "metadata": {"partitionKeys": {"tenantId": tenant}}}),
            }
        })
        .collect();
    headers.insert("content-type", "application/json".parse().unwrap());
    (StatusCode::OK, headers, json!({"records": records}).to_string())
}

fn mode(i: u64) -> &'static str {
    match i % 10 {
        3 => "drop",
        5 => "fail",
        7 => "plain",
        _ => "ok",
    }
}

fn lines_under(dir: &Path) -> Vec<(String, Value)> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else { return out };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(lines_under(&p));
        } else if p.extension().is_some_and(|x| x == "gz") {
            let mut text = String::new();
            flate2::read::MultiGzDecoder::new(std::fs::File::open(&p).unwrap()).read_to_string(&mut text).unwrap();
            out.extend(text.lines().map(|l| (p.display().to_string(), serde_json::from_str(l).unwrap())));
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lambda_outcomes_land_where_firehose_puts_them() {
    let fk = Emulator::start("ferrokinesis", &[]);
    let k = kinesis(&fk.endpoint).await;
    create_stream(&k, "lambda-events", 2).await;
    let calls = Arc::new(Calls::default());
    let (lambda_url, _server) = weir_e2e::serve_lambda(post(invoke), calls.clone()).await;

    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("archive");
    let cfg = dir.path().join("weir.toml");
    std::fs::write(
        &cfg,
        format!(
            r#"
[worker]
id = "lambda-worker"
checkpoint_interval = "300ms"
tick_interval = "250ms"
[stream]
kind = "kinesis"
name = "lambda-events"
[leases]
path = "{leases}"
[aws]
kinesis_endpoint_url = "{kinesis}"
lambda_endpoint_url = "{lambda_url}"
[[consumers]]
type = "archiver"
name = "lambda-archive"
directory = "{out}"
transform = "lambda"
[consumers.destination]
Prefix = "events/tenant=!{{partitionKeyFromLambda:tenantId}}/"
ErrorOutputPrefix = "errors/!{{firehose:error-output-type}}/"
CompressionFormat = "GZIP"
BufferingHints = {{ SizeInMBs = 64, IntervalInSeconds = 1 }}
DynamicPartitioningConfiguration = {{ Enabled = true }}
[consumers.destination.ProcessingConfiguration]
Enabled = true
Processors = [ {{ Type = "Lambda", Parameters = [
  {{ ParameterName = "LambdaArn", ParameterValue = "{ARN}" }},
  {{ ParameterName = "NumberOfRetries", ParameterValue = "3" }} ] }} ]
"#,
            leases = dir.path().join("leases.db").display(),
            kinesis = fk.endpoint,
            out = out.display(),
        ),
    )
    .unwrap();
    let mut weir = spawn_weir(&cfg, &dir.path().join("weir.log"));
    let producer = Producer::new(k.clone(), "lambda-events");
    let records = (0..RECORDS)
        .map(|i| Outgoing {
            id: i,
            partition_key: format!("pk-{i}"),
            data: Bytes::from(format!(r#"{{"tenantId":"t-{}","sessionId":"r{i}","mode":"{}"}}"#, i % 3, mode(i))),
        })
        .collect();
    assert_eq!(producer.put_all(records).await.accepted.len() as u64, RECORDS);

    let dropped = (0..RECORDS).filter(|i| mode(*i) == "drop").count();
    let mut patience = Patience::new(Duration::from_secs(90));
    let (data, errors) = loop {
        let data = lines_under(&out.join("events"));
        let errors = lines_under(&out.join("errors"));
        if data.len() + errors.len() + dropped >= RECORDS as usize {
            break (data, errors);
        }
        if let Err(why) = patience.observe((data.len(), errors.len(), cpu_ticks(weir.id()))) {
            panic!(
                "{why}: {} data + {} error lines\n{}",
                data.len(),
                errors.len(),
                std::fs::read_to_string(dir.path().join("weir.log")).unwrap_or_default()
            );
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    weir.kill().unwrap();
    weir.wait().unwrap();

    assert_eq!(data.len(), (0..RECORDS).filter(|i| mode(*i) == "ok").count());
    for (path, v) in &data {
        assert_eq!(v["lambda"], json!(true));
        let tenant = v["tenant_id"].as_str().unwrap();
        assert!(path.contains(&format!("/events/tenant={tenant}/")), "{path} holds {tenant}");
    }
    let mut codes: BTreeMap<(String, String), usize> = BTreeMap::new();
    for (path, v) in &errors {
        let kind = path.split("/errors/").nth(1).unwrap().split('/').next().unwrap().to_owned();
        *codes.entry((kind, v["errorCode"].as_str().unwrap().to_owned())).or_default() += 1;
        assert_eq!(v["lambdaArn"], json!("arn:aws:lambda:us-east-1:…"), "error records show the function redacted");
        let raw = B64.decode(v["rawData"].as_str().unwrap()).unwrap();
        let raw: Value = serde_json::from_slice(&raw).unwrap();
        assert!(matches!(raw["mode"].as_str(), Some("fail" | "plain")), "{raw}");
    }
    let plain = (0..RECORDS).filter(|i| mode(*i) == "plain").count();
    let failed = (0..RECORDS).filter(|i| mode(*i) == "fail").count();
    assert_eq!(
        codes,
        BTreeMap::from([
            (("processing-failed".into(), "Lambda.InvalidBase64".into()), plain),
            (("processing-failed".into(), "Lambda.ProcessingFailedStatus".into()), failed),
        ])
    );
    assert!(calls.total.load(Ordering::SeqCst) >= 2, "the throttled invocation was retried");
    assert!(calls.functions.lock().unwrap().iter().all(|f| f == ARN), "invoked by ARN");
}
