//! deploy/ kept honest against the code:
//! - the IAM policy allows every AWS operation the code calls (found by scanning the
//!   sources for the SDKs' own operation names, not from a hand list) and nothing else;
//! - the CloudFormation task role allows exactly what the policy files allow;
//! - every weir.toml under deploy/ (and the one the CloudFormation template builds)
//!   passes `weir config check`.
#![allow(clippy::unwrap_used, clippy::print_stdout)] // a test: a failed expectation is a failed test

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The SDK crates weir builds clients of, with their IAM service prefix.
const SERVICES: &[(&str, &str)] = &[
    ("aws-sdk-kinesis", "kinesis"),
    ("aws-sdk-dynamodb", "dynamodb"),
    ("aws-sdk-s3", "s3"),
    ("aws-sdk-lambda", "lambda"),
    ("aws-sdk-sns", "sns"),
    ("aws-sdk-glue", "glue"),
];

/// API operations whose IAM action has another name (AWS's "actions, resources and
/// condition keys" pages); every other operation is authorised by its own name.
const IAM_ACTION_OF: &[(&str, &str)] = &[
    ("s3:HeadObject", "s3:GetObject"),
    ("s3:ListObjectsV2", "s3:ListBucket"),
    ("s3:HeadBucket", "s3:ListBucket"),
    ("s3:CreateMultipartUpload", "s3:PutObject"),
    ("s3:UploadPart", "s3:PutObject"),
    ("s3:CompleteMultipartUpload", "s3:PutObject"),
    ("lambda:Invoke", "lambda:InvokeFunction"),
    // TransactWriteItems has no IAM action of its own: each item needs its action. The
    // lease table's transactions hold Put items only (checked below).
    ("dynamodb:TransactWriteItems", "dynamodb:PutItem"),
];

/// Operations in the code that the worker's role deliberately does not get.
const NOT_GRANTED: &[(&str, &str)] = &[
    ("s3:CreateBucket", "S3ObjectSink::ensure_bucket, for tests; the templates create the bucket"),
    ("s3:HeadBucket", "S3ObjectSink::ensure_bucket, for tests"),
    (
        "dynamodb:Scan",
        "weir import-kcl reads a KCL application's lease table once, run by an operator with their own credentials",
    ),
];

/// IAM actions granted without a call of their own: KMS, which S3 calls on the role's
/// behalf for an SSE-KMS bucket.
const IMPLIED: &[&str] = &["kms:GenerateDataKey", "kms:Decrypt"];

/// Operation module names of each SDK (`src/operation/<name>/`), read from the SDK
/// crates' sources in the cargo registry at the versions `Cargo.lock` pins (which the
/// build unpacked). Not `cargo metadata`: offline, it wants every platform's
/// dependencies downloaded, and a fresh machine's build fetches only its own.
fn sdk_operations() -> BTreeMap<&'static str, BTreeSet<String>> {
    let lock: toml::Table = toml::from_str(&std::fs::read_to_string(root().join("Cargo.lock")).unwrap()).unwrap();
    let cargo_home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").unwrap()).join(".cargo"));
    let registries: Vec<PathBuf> = std::fs::read_dir(cargo_home.join("registry/src"))
        .unwrap_or_else(|e| panic!("{}: {e}", cargo_home.display()))
        .flatten()
        .map(|e| e.path())
        .collect();
    let mut ops = BTreeMap::new();
    for (krate, service) in SERVICES {
        let version = lock["package"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"].as_str() == Some(*krate))
            .and_then(|p| p["version"].as_str())
            .unwrap_or_else(|| panic!("{krate} is not in Cargo.lock"));
        let dir = registries
            .iter()
            .map(|r| r.join(format!("{krate}-{version}/src/operation")))
            .find(|d| d.is_dir())
            .unwrap_or_else(|| panic!("{krate} {version}: sources not unpacked under {registries:?}"));
        let names: BTreeSet<String> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .flatten()
            .filter(|e| e.path().is_dir())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        assert!(names.len() > 10, "{krate}: operations not found in {}", dir.display());
        ops.insert(*service, names);
    }
    ops
}

fn rust_sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_sources(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

fn pascal(snake: &str) -> String {
    snake
        .split('_')
        .map(|w| {
            let mut c = w.chars();
            c.next().map(|f| f.to_ascii_uppercase().to_string() + c.as_str()).unwrap_or_default()
        })
        .collect()
}

/// `service:Operation` for every SDK operation called in non-test sources (crates/*/src
/// and consumers/*/src, the test kit left out): a file that names `aws_sdk_<service>`
/// and calls `.<operation>()` on a client.
fn operations_called() -> BTreeMap<String, BTreeSet<String>> {
    let ops = sdk_operations();
    let mut files = Vec::new();
    for group in ["crates", "consumers"] {
        for krate in std::fs::read_dir(root().join(group)).unwrap().flatten() {
            if krate.file_name() != "weir-testkit" {
                rust_sources(&krate.path().join("src"), &mut files);
            }
        }
    }
    let mut called: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        // Unit tests at the bottom of a file are not what the worker calls.
        let text = text.split("#[cfg(test)]").next().unwrap_or_default();
        for (service, names) in &ops {
            if !text.contains(&format!("aws_sdk_{service}")) {
                continue;
            }
            for op in names {
                if text.contains(&format!(".{op}()")) {
                    let rel = file.strip_prefix(root()).unwrap_or(&file).display().to_string();
                    called.entry(format!("{service}:{}", pascal(op))).or_default().insert(rel);
                }
            }
        }
    }
    called
}

fn policy_actions(doc: &serde_json::Value) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for st in doc["Statement"].as_array().expect("Statement list") {
        assert_eq!(st["Effect"], "Allow", "{st}");
        match &st["Action"] {
            serde_json::Value::String(a) => {
                out.insert(a.clone());
            }
            serde_json::Value::Array(a) => out.extend(a.iter().map(|a| a.as_str().unwrap().to_owned())),
            other => panic!("Action {other}"),
        }
    }
    assert!(out.iter().all(|a| !a.contains('*')), "no wildcard actions: {out:?}");
    out
}

/// Every action of deploy/iam/weir-policy.json and deploy/iam/optional/*.json.
fn granted() -> BTreeSet<String> {
    let dir = root().join("deploy/iam");
    let mut files = vec![dir.join("weir-policy.json")];
    files.extend(std::fs::read_dir(dir.join("optional")).unwrap().flatten().map(|e| e.path()));
    let mut out = BTreeSet::new();
    for f in files {
        let doc: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&f).unwrap())
            .unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        out.extend(policy_actions(&doc));
    }
    out
}

#[test]
fn the_iam_policy_allows_what_the_code_calls_and_nothing_else() {
    let called = operations_called();
    for (service, _) in SERVICES.iter().map(|(k, s)| (s, k)) {
        assert!(called.keys().any(|k| k.starts_with(&format!("{service}:"))), "no {service} call found: {called:?}");
    }
    let lease_table = std::fs::read_to_string(root().join("crates/weir-aws/src/dynamodb.rs")).unwrap();
    assert!(lease_table.contains("TransactWriteItem::builder().put("), "the lease table's transactions hold Puts");
    for kind in ["update(", "delete(", "condition_check("] {
        assert!(
            !lease_table.contains(&format!("TransactWriteItem::builder().{kind}")),
            "a transaction item {kind}: map it"
        );
    }

    let not_granted: BTreeMap<&str, &str> = NOT_GRANTED.iter().copied().collect();
    for op in not_granted.keys() {
        assert!(called.contains_key(*op), "{op} is listed as not granted but the code no longer calls it");
    }
    let mapping: BTreeMap<&str, &str> = IAM_ACTION_OF.iter().copied().collect();
    let needed: BTreeSet<String> = called
        .keys()
        .filter(|op| !not_granted.contains_key(op.as_str()))
        .map(|op| mapping.get(op.as_str()).map_or_else(|| op.clone(), |a| (*a).to_owned()))
        .collect();
    let granted = granted();
    let missing: Vec<String> = needed
        .difference(&granted)
        .map(|a| {
            format!(
                "{a} (called in {:?})",
                called
                    .get(a)
                    .or_else(|| { mapping.iter().find(|(_, v)| **v == a.as_str()).and_then(|(k, _)| called.get(*k)) })
            )
        })
        .collect();
    assert!(missing.is_empty(), "the code calls what deploy/iam does not allow: {missing:#?}");
    let implied: BTreeSet<String> = IMPLIED.iter().map(|s| (*s).to_owned()).collect();
    let unused: Vec<&String> = granted.difference(&needed).filter(|a| !implied.contains(*a)).collect();
    assert!(unused.is_empty(), "deploy/iam allows what the code never calls: {unused:?}");
}

#[test]
fn the_cloudformation_task_role_grants_what_the_policy_files_grant() {
    let text = std::fs::read_to_string(root().join("deploy/cloudformation/weir.yaml")).unwrap();
    let prefixes: Vec<String> = SERVICES.iter().map(|(_, s)| format!("{s}:")).chain(["kms:".to_owned()]).collect();
    // Every `- service:Action` list item of the template (the task role's statements;
    // the other roles use AWS managed policies).
    let in_template: BTreeSet<String> = text
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- "))
        .filter(|a| prefixes.iter().any(|p| a.starts_with(p.as_str())) && !a.contains(' '))
        .map(str::to_owned)
        .collect();
    // The stack creates the lease table itself: its task role does not need CreateTable.
    let mut expected = granted();
    assert!(expected.remove("dynamodb:CreateTable"));
    assert_eq!(in_template, expected, "deploy/cloudformation/weir.yaml against deploy/iam");
}

fn config_check(path: &Path) {
    let out = Command::new(env!("CARGO_BIN_EXE_weir")).args(["config", "check"]).arg(path).output().unwrap();
    assert!(
        out.status.success(),
        "{}: {}{}",
        path.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn every_config_under_deploy_passes_config_check() {
    for f in ["deploy/kubernetes/base/weir.toml", "deploy/kubernetes/overlays/mcp-pipeline/weir.toml"] {
        config_check(&root().join(f));
    }
}

/// Renders the `!Join`, `!Sub`, `!If` (true branch) and `!Ref` of the template's
/// WEIR_CONFIG_TOML with sample parameters.
fn render(v: &serde_norway::Value, params: &BTreeMap<&str, &str>) -> String {
    use serde_norway::Value;
    let sub = |s: &str| {
        let mut s = s.to_owned();
        for (k, v) in params {
            s = s.replace(&format!("${{{k}}}"), v);
        }
        assert!(!s.contains("${"), "unknown parameter in {s}");
        s
    };
    match v {
        Value::String(s) => s.clone(),
        Value::Tagged(t) => {
            let tag = t.tag.to_string();
            match (tag.as_str(), &t.value) {
                ("!Sub", Value::String(s)) => sub(s),
                ("!Ref", Value::String(name)) => {
                    params.get(name.as_str()).unwrap_or_else(|| panic!("!Ref {name}")).to_string()
                }
                ("!If", Value::Sequence(branches)) => render(&branches[1], params),
                ("!Join", Value::Sequence(args)) => {
                    let sep = args[0].as_str().unwrap();
                    let items = args[1].as_sequence().unwrap();
                    items.iter().map(|i| render(i, params)).collect::<Vec<_>>().join(sep)
                }
                other => panic!("cannot render {other:?}"),
            }
        }
        other => panic!("cannot render {other:?}"),
    }
}

#[test]
fn the_config_the_cloudformation_template_builds_passes_config_check() {
    let text = std::fs::read_to_string(root().join("deploy/cloudformation/weir.yaml")).unwrap();
    let doc: serde_norway::Value = serde_norway::from_str(&text).unwrap();
    let env = doc["Resources"]["TaskDefinition"]["Properties"]["ContainerDefinitions"][0]["Environment"]
        .as_sequence()
        .expect("container environment");
    let toml = env.iter().find(|e| e["Name"] == "WEIR_CONFIG_TOML").expect("WEIR_CONFIG_TOML")["Value"].clone();
    let params = BTreeMap::from([
        ("StreamName", "mcp-tool-events"),
        ("EfoConsumerName", "weir"),
        ("LeaseTable", "mcp-tool-events-leases"),
        ("ApplicationName", "mcp-tool-events"),
        ("ArchiveBucketName", "my-mcp-archive"),
        ("ConsumersToml", ""),
    ]);
    let rendered = render(&toml, &params);
    assert!(rendered.contains("type = \"archiver\"") && rendered.contains("cloudwatch = true"), "{rendered}");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ecs.toml");
    std::fs::write(&path, &rendered).unwrap();
    config_check(&path);
    // The task passes it in WEIR_CONFIG_TOML; a bad one fails at start naming the field.
    let out = Command::new(env!("CARGO_BIN_EXE_weir"))
        .arg("run")
        .env("WEIR_CONFIG_TOML", rendered.replace("kind = \"dynamodb\"", "kind = \"postgres\""))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("leases.kind") && err.contains("WEIR_CONFIG_TOML"), "{err}");
}
