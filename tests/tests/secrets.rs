//! Secrets stay out of every output: credentials from the environment, a webhook URL
//! with tokens in its path and query, an SNS topic ARN and a Lambda function ARN. Every
//! endpoint is unreachable, so every one of them fails and is reported; `weir config
//! check`, the worker's stdout and stderr (debug logs), `/metrics`, `/readyz` and the
//! archive's error output are searched for each secret string, and the redacted forms
//! are checked to be there (so the test cannot pass by reporting nothing).
#![allow(clippy::unwrap_used, clippy::print_stdout)] // a test: a failed expectation is a failed test

use std::io::Read;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use weir_e2e::patience::{Patience, cpu_ticks};
use weir_e2e::{files, free_port, weir_command};

const SECRETS: [&str; 8] = [
    "AKIASECRETACCESSKEYID",
    "SECRETAWSSECRETKEY000",
    "SECRETSESSIONTOKEN111",
    "SECRETWEBHOOKTOKEN123",
    "SECRETQUERY456",
    "SECRETTOPICNAME789",
    "SECRETFUNCTIONNAME",
    "123456789012",
];

fn config(dir: &Path, port: u16) -> std::path::PathBuf {
    let cfg = dir.join("weir.toml");
    let text = format!(
        r#"[worker]
failover = "3s"
renew_interval = "1s"
checkpoint_interval = "300ms"
[stream]
name = "mcp-events"
shards = 2
[generator]
rate = 200
tenants = 5
error_rate = 0.3
[leases]
path = "{leases}"
namespace = "secrets"
[aws]
lambda_endpoint_url = "http://127.0.0.1:1"
sns_endpoint_url = "http://127.0.0.1:1"
[[consumers]]
type = "alerting"
name = "alerts"
[[consumers.sinks]]
type = "webhook"
url = "http://hooks-user:SECRETQUERY456@127.0.0.1:1/hooks/T000/SECRETWEBHOOKTOKEN123?token=SECRETQUERY456"
timeout = "200ms"
[[consumers.sinks]]
type = "sns"
topic_arn = "arn:aws:sns:us-east-1:123456789012:SECRETTOPICNAME789"
[[consumers.rules]]
name = "errors"
filter = ".success == false"
aggregate = "count"
condition = "> 0"
window = "1s"
cooldown = "1s"
[[consumers]]
type = "archiver"
name = "archive"
directory = "{out}"
transform = "lambda"
[consumers.destination]
Prefix = "events/"
ErrorOutputPrefix = "errors/!{{firehose:error-output-type}}/"
CompressionFormat = "UNCOMPRESSED"
BufferingHints = {{ SizeInMBs = 1, IntervalInSeconds = 0 }}
[consumers.destination.ProcessingConfiguration]
Enabled = true
Processors = [ {{ Type = "Lambda", Parameters = [
  {{ ParameterName = "LambdaArn", ParameterValue = "arn:aws:lambda:us-east-1:123456789012:function:SECRETFUNCTIONNAME" }},
  {{ ParameterName = "NumberOfRetries", ParameterValue = "1" }},
] }} ]
[http]
listen = "127.0.0.1:{port}"
"#,
        leases = dir.join("leases.db").display(),
        out = dir.join("out").display(),
    );
    std::fs::write(&cfg, text).unwrap();
    cfg
}

fn secret_env(cmd: &mut std::process::Command) {
    cmd.env("AWS_ACCESS_KEY_ID", "AKIASECRETACCESSKEYID")
        .env("AWS_SECRET_ACCESS_KEY", "SECRETAWSSECRETKEY000")
        .env("AWS_SESSION_TOKEN", "SECRETSESSIONTOKEN111");
}

fn get(port: u16, path: &str) -> String {
    use std::io::Write;
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(s, "GET {path} HTTP/1.0\r\nHost: x\r\n\r\n").unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

fn leaks(what: &str, text: &str) -> Vec<String> {
    SECRETS.iter().filter(|s| text.contains(*s)).map(|s| format!("{what} shows {s}")).collect()
}

#[test]
fn no_output_shows_a_secret() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let cfg = config(dir.path(), port);
    let mut found = Vec::new();

    let mut check = weir_command();
    secret_env(&mut check);
    let out = check.args(["config", "check"]).arg(&cfg).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    found.extend(leaks("config check", &String::from_utf8_lossy(&out.stdout)));
    found.extend(leaks("config check stderr", &String::from_utf8_lossy(&out.stderr)));

    let mut run = weir_command();
    secret_env(&mut run);
    let stderr_path = dir.path().join("stderr.log");
    let mut child = run
        .args(["run", "--log-level", "debug", "--config"])
        .arg(&cfg)
        .stderr(Stdio::from(std::fs::File::create(&stderr_path).unwrap()))
        .spawn()
        .unwrap();
    // Until every failure has been reported: the webhook's and SNS's attempts, and
    // error records of the failed Lambda in the archive.
    let mut patience = Patience::new(Duration::from_secs(60));
    let errors_dir = dir.path().join("out").join("errors");
    loop {
        let log = std::fs::read_to_string(&stderr_path).unwrap_or_default();
        let reported =
            log.contains("sink=webhook") && log.contains("sink=sns") && log.contains("transform invocation failed");
        if reported && !files(&errors_dir).is_empty() {
            break;
        }
        let seen = (log.len(), files(&errors_dir).len(), cpu_ticks(child.id()));
        if let Err(why) = patience.observe(seen) {
            panic!("failures not reported: {why}:\n{log}");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let metrics = get(port, "/metrics");
    assert!(metrics.contains("weir_"), "{metrics}");
    found.extend(leaks("/metrics", &metrics));
    found.extend(leaks("/readyz", &get(port, "/readyz")));
    let unknown = get(port, "/debug/config");
    assert!(unknown.starts_with("HTTP/1.0 404") || unknown.starts_with("HTTP/1.1 404"), "{unknown}");
    assert!(get(port, "/metrics?x=1").contains("200 OK"));

    let term = std::process::Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap();
    assert!(term.success());
    let mut stdout = String::new();
    child.stdout.take().unwrap().read_to_string(&mut stdout).unwrap();
    assert!(child.wait().unwrap().success());
    found.extend(leaks("stdout", &stdout));
    let log = std::fs::read_to_string(&stderr_path).unwrap();
    found.extend(leaks("logs", &log));
    let mut records = String::new();
    for f in files(&dir.path().join("out")) {
        records.push_str(&std::fs::read_to_string(&f).unwrap());
    }
    found.extend(leaks("archive", &records));
    assert!(found.is_empty(), "{found:#?}");

    // What is shown instead: enough to know which endpoint failed.
    assert!(log.contains("webhook http://127.0.0.1:1/…"), "{log}");
    assert!(log.contains("arn:aws:lambda:us-east-1:…"), "{log}");
    assert!(records.contains(r#""lambdaArn":"arn:aws:lambda:us-east-1:…""#), "{records}");
}
