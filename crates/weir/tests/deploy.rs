//! deploy/ kept honest against the code:
//! - the IAM policy allows every AWS operation the code calls (found by scanning the
//!   sources for the SDKs' own operation names, not from a hand list) and nothing else;
//! - the CloudFormation task role allows exactly what the policy files allow;
//! - every weir.toml under deploy/ (and the one the CloudFormation template builds)
//!   passes `weir config check`;
//! - the optional KMS grants are tied to their stream, topic or bucket, and the Lambda
//!   grant covers the function however a config qualifies it;
//! - every CloudFormation alarm and scaling policy watches a metric a running `weir`
//!   emits with those dimensions (or, for Kinesis's own, one AWS documents); every alarm
//!   notifies on OK too; the service scales on shards per worker, no shard count typed;
//!   the task's logs do not block and its health check gives a slow start time.
#![allow(clippy::unwrap_used, clippy::print_stdout)] // a test: a failed expectation is a failed test

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_norway::Value as Yaml;

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
    ("aws-sdk-s3tables", "s3tables"),
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

/// IAM actions granted without a call of their own: KMS, which services call with the
/// role's permission when what weir uses is encrypted with a customer-managed key: S3
/// for an SSE-KMS bucket (GenerateDataKey, Decrypt), Kinesis for an encrypted stream
/// (Decrypt when reading, GenerateDataKey when writing), SNS for an encrypted topic
/// (`GenerateDataKey*` and Decrypt, as the SNS developer guide asks of publishers: the
/// one wildcard action allowed).
///
/// And the object reads and writes of Iceberg tables in an S3 table bucket: the tables'
/// files go through OpenDAL's S3 client (`crates/weir-aws/src/iceberg_catalog.rs`), not
/// the AWS SDK, and S3 Tables authorises them as `GetTableData` and `PutTableData`.
const IMPLIED: &[&str] =
    &["kms:GenerateDataKey", "kms:Decrypt", "kms:GenerateDataKey*", "s3tables:GetTableData", "s3tables:PutTableData"];

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
    assert!(out.iter().all(|a| !a.contains('*') || IMPLIED.contains(&a.as_str())), "no wildcard actions: {out:?}");
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

// ---------------------------------------------------------------------------------
// deploy/cloudformation/weir.yaml, evaluated as CloudFormation would.

/// What an intrinsic function gives.
#[derive(Debug, Clone, PartialEq)]
enum Cfn {
    Str(String),
    List(Vec<String>),
    /// `!Ref AWS::NoValue`: the property is left out.
    NoValue,
}

impl Cfn {
    fn str(self) -> String {
        match self {
            Cfn::Str(s) => s,
            other => panic!("not a string: {other:?}"),
        }
    }

    fn list(self) -> Vec<String> {
        match self {
            Cfn::List(l) => l,
            Cfn::Str(s) => vec![s],
            Cfn::NoValue => Vec::new(),
        }
    }
}

fn scalar(v: &Yaml) -> String {
    match v {
        Yaml::String(s) => s.clone(),
        Yaml::Number(n) => n.to_string(),
        Yaml::Bool(b) => b.to_string(),
        other => panic!("not a scalar: {other:?}"),
    }
}

/// The template with parameter values: its defaults, then the given ones. Evaluates the
/// intrinsic functions and conditions the template uses; anything else panics, so a
/// new function in the template is noticed here.
struct Stack {
    doc: Yaml,
    values: BTreeMap<String, String>,
}

/// Parameters of a stack that reads by enhanced fan-out, with every option set;
/// `LeaseTable` is what `!Ref LeaseTable` gives.
const SAMPLE: &[(&str, &str)] = &[
    ("StreamName", "mcp-tool-events"),
    ("MaxWorkers", "40"),
    ("EfoConsumerName", "mcp-tool-events-weir"),
    ("ApplicationName", "mcp-tool-events"),
    ("ContainerImage", "111122223333.dkr.ecr.us-east-1.amazonaws.com/weir:0.1.0"),
    ("ArchiveBucketName", "my-mcp-archive"),
    ("LeaseTable", "mcp-tool-events-leases"),
    ("AlarmTopicArn", "arn:aws:sns:us-east-1:123456789012:oncall"),
    ("KmsKeyArn", "arn:aws:kms:us-east-1:123456789012:key/archive"),
    ("StreamKmsKeyArn", "arn:aws:kms:us-east-1:123456789012:key/stream"),
    ("LambdaFunctionArn", "arn:aws:lambda:us-east-1:123456789012:function:normalize:$LATEST"),
    ("AlertTopicArn", "arn:aws:sns:us-east-1:123456789012:alerts"),
    ("AlertTopicKmsKeyArn", "arn:aws:kms:us-east-1:123456789012:key/alerts"),
    ("OutputStreamName", "enriched"),
    ("OutputStreamKmsKeyArn", "arn:aws:kms:us-east-1:123456789012:key/enriched"),
    ("GlueTableName", "mcp/tool_events"),
];

impl Stack {
    fn new(values: &[(&str, &str)]) -> Self {
        let text = std::fs::read_to_string(root().join("deploy/cloudformation/weir.yaml")).unwrap();
        let doc: Yaml = serde_norway::from_str(&text).unwrap();
        let mut all: BTreeMap<String, String> =
            [("AWS::Partition", "aws"), ("AWS::Region", "us-east-1"), ("AWS::AccountId", "123456789012")]
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect();
        for (name, p) in doc["Parameters"].as_mapping().expect("Parameters") {
            if let Some(d) = p.get("Default") {
                all.insert(scalar(name), scalar(d));
            }
        }
        for (k, v) in values {
            all.insert((*k).to_owned(), (*v).to_owned());
        }
        Self { doc, values: all }
    }

    /// [`SAMPLE`], with `changes` on top.
    fn sample(changes: &[(&str, &str)]) -> Self {
        let mut v: Vec<(&str, &str)> = SAMPLE.to_vec();
        v.extend_from_slice(changes);
        Self::new(&v)
    }

    /// The resources the stack creates (their `Condition` holds), by logical id.
    fn resources(&self) -> Vec<(String, &Yaml)> {
        self.doc["Resources"]
            .as_mapping()
            .expect("Resources")
            .iter()
            .filter(|(_, r)| r.get("Condition").is_none_or(|c| self.condition(&scalar(c))))
            .map(|(k, r)| (scalar(k), r))
            .collect()
    }

    fn resources_of(&self, kind: &str) -> Vec<(String, &Yaml)> {
        self.resources().into_iter().filter(|(_, r)| r["Type"] == kind).collect()
    }

    fn condition(&self, name: &str) -> bool {
        self.holds(self.doc["Conditions"].get(name).unwrap_or_else(|| panic!("no condition {name}")))
    }

    fn holds(&self, v: &Yaml) -> bool {
        let Yaml::Tagged(t) = v else { panic!("condition {v:?}") };
        match (t.tag.to_string().as_str(), &t.value) {
            ("!Equals", Yaml::Sequence(a)) => self.eval(&a[0]) == self.eval(&a[1]),
            ("!Not", Yaml::Sequence(a)) => !self.holds(&a[0]),
            ("!And", Yaml::Sequence(a)) => a.iter().all(|c| self.holds(c)),
            ("!Or", Yaml::Sequence(a)) => a.iter().any(|c| self.holds(c)),
            ("!Condition", Yaml::String(name)) => self.condition(name),
            other => panic!("cannot evaluate the condition {other:?}"),
        }
    }

    /// `!Sub`: `${Name}` from `vars`, else a parameter (or `!Ref`-able resource);
    /// `${!Literal}` stays `${Literal}`.
    fn sub(&self, text: &str, vars: &BTreeMap<String, String>) -> String {
        let (mut out, mut rest) = (String::new(), text);
        while let Some(i) = rest.find("${") {
            out.push_str(&rest[..i]);
            let end = i + rest[i..].find('}').unwrap_or_else(|| panic!("unclosed ${{ in {text}"));
            let name = &rest[i + 2..end];
            match name.strip_prefix('!') {
                Some(literal) => out.push_str(&format!("${{{literal}}}")),
                None => out.push_str(
                    vars.get(name)
                        .or_else(|| self.values.get(name))
                        .unwrap_or_else(|| panic!("!Sub: no value for ${{{name}}} in {text}")),
                ),
            }
            rest = &rest[end + 1..];
        }
        out + rest
    }

    fn eval(&self, v: &Yaml) -> Cfn {
        match v {
            Yaml::String(_) | Yaml::Number(_) | Yaml::Bool(_) => Cfn::Str(scalar(v)),
            Yaml::Sequence(items) => {
                Cfn::List(items.iter().map(|i| self.eval(i)).filter(|e| *e != Cfn::NoValue).map(Cfn::str).collect())
            }
            Yaml::Tagged(t) => match (t.tag.to_string().as_str(), &t.value) {
                ("!Ref", Yaml::String(name)) if name == "AWS::NoValue" => Cfn::NoValue,
                ("!Ref", Yaml::String(name)) => {
                    Cfn::Str(self.values.get(name).unwrap_or_else(|| panic!("!Ref {name}: no value")).clone())
                }
                ("!Sub", Yaml::String(text)) => Cfn::Str(self.sub(text, &BTreeMap::new())),
                ("!Sub", Yaml::Sequence(a)) => {
                    let vars = a[1]
                        .as_mapping()
                        .expect("!Sub variables")
                        .iter()
                        .map(|(k, v)| (scalar(k), self.eval(v).str()))
                        .collect();
                    Cfn::Str(self.sub(a[0].as_str().expect("!Sub text"), &vars))
                }
                ("!If", Yaml::Sequence(a)) => self.eval(&a[if self.condition(&scalar(&a[0])) { 1 } else { 2 }]),
                ("!Join", Yaml::Sequence(a)) => Cfn::Str(self.eval(&a[1]).list().join(&scalar(&a[0]))),
                ("!Split", Yaml::Sequence(a)) => {
                    Cfn::List(self.eval(&a[1]).str().split(&scalar(&a[0])).map(str::to_owned).collect())
                }
                ("!Select", Yaml::Sequence(a)) => {
                    let i: usize = scalar(&a[0]).parse().unwrap();
                    let list = self.eval(&a[1]).list();
                    Cfn::Str(list.get(i).unwrap_or_else(|| panic!("!Select {i} of {list:?}")).clone())
                }
                other => panic!("cannot evaluate {other:?}"),
            },
            other => panic!("cannot evaluate {other:?}"),
        }
    }

    /// The task definition's one container.
    fn container(&self) -> &Yaml {
        &self.doc["Resources"]["TaskDefinition"]["Properties"]["ContainerDefinitions"][0]
    }

    /// The weir.toml the task gets in WEIR_CONFIG_TOML.
    fn config_toml(&self) -> String {
        let env = self.container()["Environment"].as_sequence().expect("container environment");
        let toml = env.iter().find(|e| e["Name"] == "WEIR_CONFIG_TOML").expect("WEIR_CONFIG_TOML");
        self.eval(&toml["Value"]).str()
    }

    /// The statements of the task role's policy that the stack grants.
    fn task_role_statements(&self) -> Vec<&Yaml> {
        let policies = self.doc["Resources"]["TaskRole"]["Properties"]["Policies"].as_sequence().unwrap();
        let statements = policies[0]["PolicyDocument"]["Statement"].as_sequence().unwrap();
        statements
            .iter()
            .filter_map(|s| match s {
                Yaml::Tagged(t) if t.tag == "!If" => {
                    let a = t.value.as_sequence().unwrap();
                    let chosen = &a[if self.condition(&scalar(&a[0])) { 1 } else { 2 }];
                    is_value(chosen).then_some(chosen)
                }
                other => Some(other),
            })
            .collect()
    }
}

/// False for `!Ref AWS::NoValue`.
fn is_value(v: &Yaml) -> bool {
    !matches!(v, Yaml::Tagged(t) if t.tag == "!Ref" && t.value == "AWS::NoValue")
}

#[test]
fn the_config_the_cloudformation_template_builds_passes_config_check() {
    for (stack, efo) in [(Stack::sample(&[]), true), (Stack::sample(&[("EfoConsumerName", "")]), false)] {
        let rendered = stack.config_toml();
        assert!(rendered.contains("type = \"archiver\"") && rendered.contains("cloudwatch = true"), "{rendered}");
        assert_eq!(rendered.contains("efo_consumer = \"mcp-tool-events-weir\""), efo, "{rendered}");
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
}

/// By default (`EfoConsumerName` auto) a stack reads through enhanced fan-out as its
/// own consumer, `weir-<ApplicationName>`: two stacks on one stream never share one, and
/// the service-side lag alarm watches that consumer.
#[test]
fn by_default_each_stack_reads_as_its_own_enhanced_fan_out_consumer() {
    let stack = Stack::new(&SAMPLE.iter().copied().filter(|(k, _)| *k != "EfoConsumerName").collect::<Vec<_>>());
    let rendered = stack.config_toml();
    assert!(rendered.contains("efo = true") && !rendered.contains("efo_consumer"), "{rendered}");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ecs.toml");
    std::fs::write(&path, &rendered).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_weir")).args(["config", "check"]).arg(&path).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("enhanced fan-out consumer \"weir-mcp-tool-events\""), "{text}");
    let alarm = &stack.doc["Resources"]["EfoMillisBehindLatestAlarm"]["Properties"]["Dimensions"][1]["Value"];
    assert_eq!(stack.eval(alarm).str(), "weir-mcp-tool-events");
}

// ---------------------------------------------------------------------------------
// IAM details: KMS and the Lambda grant.

/// IAM's resource match: `*` any run of characters, `?` one.
fn iam_match(pattern: &str, arn: &str) -> bool {
    let (p, a): (Vec<char>, Vec<char>) = (pattern.chars().collect(), arn.chars().collect());
    // matched[j]: pattern[..i] matches arn[..j].
    let mut matched = vec![false; a.len() + 1];
    matched[0] = true;
    for &pc in &p {
        let mut next = vec![false; a.len() + 1];
        for j in 0..=a.len() {
            next[j] = match pc {
                '*' => matched[j] || (j > 0 && next[j - 1]),
                '?' => j > 0 && matched[j - 1],
                c => j > 0 && matched[j - 1] && a[j - 1] == c,
            };
        }
        matched = next;
    }
    matched[a.len()]
}

/// Invocations the Lambda grant must allow (`function:fn`, however the config
/// qualifies it: Firehose configs write `:$LATEST`) and must not (another function).
fn check_lambda_grant(resources: &[String], account: &str, what: &str) {
    let arn = |f: &str| format!("arn:aws:lambda:us-east-1:{account}:function:{f}");
    for ok in ["fn", "fn:$LATEST", "fn:live", "fn:7"] {
        assert!(resources.iter().any(|r| iam_match(r, &arn(ok))), "{what}: {resources:?} must allow {}", arn(ok));
    }
    for denied in ["fn-admin", "fnx:$LATEST", "other", "other:fn"] {
        assert!(
            !resources.iter().any(|r| iam_match(r, &arn(denied))),
            "{what}: {resources:?} must not allow {}",
            arn(denied)
        );
    }
}

#[test]
fn the_lambda_grant_covers_every_qualifier_of_the_function_and_no_other_function() {
    assert!(iam_match("a:*", "a:b:c") && !iam_match("a:*", "a") && iam_match("a?c", "abc") && !iam_match("ab", "abc"));
    // The policy file, placeholders filled in.
    let file = root().join("deploy/iam/optional/lambda-transform.json");
    let doc: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    let resources: Vec<String> = doc["Statement"][0]["Resource"]
        .as_array()
        .expect("a list of resources")
        .iter()
        .map(|r| {
            r.as_str()
                .unwrap()
                .replace("REGION", "us-east-1")
                .replace("ACCOUNT_ID", "123456789012")
                .replace("FUNCTION_NAME", "fn")
        })
        .collect();
    check_lambda_grant(&resources, "123456789012", "deploy/iam/optional/lambda-transform.json");

    // The template, with the function's ARN in each form a Firehose config names it.
    for given in ["function:fn", "function:fn:$LATEST", "function:fn:live", "function:fn:7"] {
        let arn = format!("arn:aws:lambda:us-east-1:210987654321:{given}");
        let stack = Stack::sample(&[("LambdaFunctionArn", &arn)]);
        let statement = stack
            .task_role_statements()
            .into_iter()
            .find(|s| s["Sid"] == "ArchiverLambdaTransform")
            .expect("the Lambda statement");
        let resources = stack.eval(&statement["Resource"]).list();
        check_lambda_grant(&resources, "210987654321", &format!("the template with LambdaFunctionArn {arn}"));
    }
    let stack = Stack::sample(&[("LambdaFunctionArn", "")]);
    assert!(!stack.task_role_statements().iter().any(|s| s["Sid"] == "ArchiverLambdaTransform"));
}

/// Every KMS grant is tied to what it protects: S3 through `kms:ViaService`, Kinesis
/// and SNS through the encryption context they pass (the stream's or topic's ARN).
#[test]
fn kms_grants_are_tied_to_their_bucket_stream_or_topic() {
    let kms_statements = |doc: &serde_json::Value| -> Vec<serde_json::Value> {
        doc["Statement"].as_array().unwrap().iter().filter(|s| s.to_string().contains("\"kms:")).cloned().collect()
    };
    let dir = root().join("deploy/iam/optional");
    let mut sids = BTreeSet::new();
    for f in std::fs::read_dir(&dir).unwrap().flatten() {
        let doc: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(f.path()).unwrap()).unwrap();
        for st in kms_statements(&doc) {
            let cond = &st["Condition"]["StringEquals"];
            let keys: Vec<&String> = cond.as_object().map(|o| o.keys().collect()).unwrap_or_default();
            assert!(
                keys.iter().any(|k| *k == "kms:ViaService" || k.starts_with("kms:EncryptionContext:")),
                "{}: {st}",
                f.path().display()
            );
            sids.insert(st["Sid"].as_str().unwrap().to_owned());
        }
    }
    assert_eq!(
        sids,
        ["AlertingSnsSinkKms", "ArchiveBucketKms", "EnrichmentRepublishKms", "KinesisStreamKms"]
            .map(str::to_owned)
            .into(),
        "one optional KMS grant per encrypted thing weir reads or writes"
    );

    // The template: each grant exactly when its key is given, on that key, with the
    // same condition naming the sample stack's stream, topic or region.
    let expected: &[(&str, &str, &str, &str)] = &[
        ("ArchiveBucketKms", "KmsKeyArn", "kms:ViaService", "s3.us-east-1.amazonaws.com"),
        (
            "KinesisStreamKms",
            "StreamKmsKeyArn",
            "kms:EncryptionContext:aws:kinesis:arn",
            "arn:aws:kinesis:us-east-1:123456789012:stream/mcp-tool-events",
        ),
        (
            "EnrichmentRepublishKms",
            "OutputStreamKmsKeyArn",
            "kms:EncryptionContext:aws:kinesis:arn",
            "arn:aws:kinesis:us-east-1:123456789012:stream/enriched",
        ),
        (
            "AlertingSnsSinkKms",
            "AlertTopicKmsKeyArn",
            "kms:EncryptionContext:aws:sns:topicArn",
            "arn:aws:sns:us-east-1:123456789012:alerts",
        ),
    ];
    let all = Stack::sample(&[]);
    let statements = all.task_role_statements();
    for (sid, key_param, cond_key, cond_value) in expected {
        let st = statements.iter().find(|s| s["Sid"] == *sid).unwrap_or_else(|| panic!("{sid} with every key given"));
        assert_eq!(all.eval(&st["Resource"]).str(), all.values[*key_param], "{sid}");
        assert_eq!(all.eval(&st["Condition"]["StringEquals"][*cond_key]).str(), *cond_value, "{sid}");
        let without = Stack::sample(&[(key_param, "")]);
        assert!(!without.task_role_statements().iter().any(|s| s["Sid"] == *sid), "{sid} without {key_param}");
    }
    // An output stream's or topic's key grants nothing when that integration is off.
    let off = Stack::sample(&[("OutputStreamName", ""), ("AlertTopicArn", "")]);
    for sid in ["EnrichmentRepublishKms", "AlertingSnsSinkKms"] {
        assert!(!off.task_role_statements().iter().any(|s| s["Sid"] == sid), "{sid} with the integration off");
    }
}

// ---------------------------------------------------------------------------------
// Alarms and scaling: tied to metrics weir emits.

/// One metric an alarm or a scaling policy watches.
#[derive(Debug)]
struct Watched {
    /// Logical id of the alarm or policy.
    by: String,
    namespace: String,
    metric: String,
    dimensions: BTreeMap<String, String>,
}

/// What every alarm and every target tracking policy on a custom metric of `stack`
/// watches.
fn watched(stack: &Stack) -> Vec<Watched> {
    let dims = |v: &Yaml| -> BTreeMap<String, String> {
        v.as_sequence()
            .map(|d| d.iter().map(|d| (stack.eval(&d["Name"]).str(), stack.eval(&d["Value"]).str())).collect())
            .unwrap_or_default()
    };
    let mut out = Vec::new();
    for (id, r) in stack.resources_of("AWS::CloudWatch::Alarm") {
        let p = &r["Properties"];
        assert!(p.get("Metrics").is_none(), "{id}: metric math; teach this test to read it");
        out.push(Watched {
            by: id,
            namespace: stack.eval(&p["Namespace"]).str(),
            metric: stack.eval(&p["MetricName"]).str(),
            dimensions: dims(&p["Dimensions"]),
        });
    }
    for (id, r) in stack.resources_of("AWS::ApplicationAutoScaling::ScalingPolicy") {
        if let Some(m) =
            r["Properties"]["TargetTrackingScalingPolicyConfiguration"].get("CustomizedMetricSpecification")
        {
            assert!(m.get("Metrics").is_none(), "{id}: metric math; teach this test to read it");
            out.push(Watched {
                by: id,
                namespace: stack.eval(&m["Namespace"]).str(),
                metric: stack.eval(&m["MetricName"]).str(),
                dimensions: dims(&m["Dimensions"]),
            });
        }
    }
    out
}

/// Kinesis's own metrics the template may alarm on: name, dimensions, and whether
/// they exist for enhanced fan-out reads (else for polling), as AWS documents them
/// ("Monitoring the Amazon Kinesis Data Streams service with CloudWatch": GetRecords
/// metrics per StreamName; SubscribeToShardEvent per StreamName and ConsumerName).
const KINESIS_METRICS: &[(&str, &[&str], bool)] = &[
    ("GetRecords.IteratorAgeMilliseconds", &["StreamName"], false),
    ("SubscribeToShardEvent.MillisBehindLatest", &["StreamName", "ConsumerName"], true),
];

/// Metrics an alarm may watch that a healthy local run cannot make weir emit, with the
/// reason; each must still be in crates/weir/src/cloudwatch.rs's PUBLISHED list.
const NOT_OBSERVED: &[(&str, &str)] = &[];

/// (namespace, metric, dimension name → value) of every metric of every EMF document.
type Emitted = BTreeSet<(String, String, BTreeMap<String, String>)>;

fn emitted(doc: &serde_json::Value) -> Emitted {
    let mut out = Emitted::new();
    for d in doc["_aws"]["CloudWatchMetrics"].as_array().into_iter().flatten() {
        let ns = d["Namespace"].as_str().unwrap_or_default().to_owned();
        for set in d["Dimensions"].as_array().into_iter().flatten() {
            let dims: BTreeMap<String, String> = set
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|n| n.as_str())
                .map(|n| (n.to_owned(), doc[n].as_str().unwrap_or("<missing>").to_owned()))
                .collect();
            for m in d["Metrics"].as_array().into_iter().flatten() {
                let name = m["Name"].as_str().unwrap_or_default().to_owned();
                assert!(doc[&name].is_number() || doc[&name].is_array(), "{name} declared without a value: {doc}");
                out.insert((ns.clone(), name, dims.clone()));
            }
        }
    }
    out
}

fn seen(emitted: &Emitted, w: &Watched) -> bool {
    emitted.iter().any(|(ns, metric, dims)| *ns == w.namespace && *metric == w.metric && *dims == w.dimensions)
}

/// Runs `weir run` on the in-process stream with the template's `[metrics]` and lease
/// namespace, an archiver writing to a directory, and malformed records (so the error
/// output is used), and collects its EMF lines until every one of `wanted` has shown
/// (or until neither a line came nor the worker used CPU for 60 s).
fn run_and_collect_emf(metrics_namespace: &str, application: &str, wanted: &[&Watched]) -> (Emitted, String) {
    use std::io::BufRead;
    use std::time::Duration;

    use weir_testkit::patience::{Patience, cpu_ticks};
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("weir.toml");
    std::fs::write(
        &config,
        format!(
            r#"[worker]
failover = "2s"
renew_interval = "500ms"
taker_interval = "500ms"
tick_interval = "200ms"
[stream]
kind = "memory"
shards = 2
[generator]
rate = 300
malformed_rate = 0.05
[leases]
path = "{dir}/leases.db"
namespace = "{application}"
[[consumers]]
type = "archiver"
name = "archive"
directory = "{dir}/archive"
transform = "mcp-normalize"
[consumers.destination]
Prefix = "events/tenant=!{{partitionKeyFromQuery:tenantId}}/"
ErrorOutputPrefix = "errors/!{{firehose:error-output-type}}/"
CompressionFormat = "GZIP"
BufferingHints = {{ SizeInMBs = 64, IntervalInSeconds = 1 }}
DynamicPartitioningConfiguration = {{ Enabled = true }}
[consumers.destination.ProcessingConfiguration]
Enabled = true
Processors = [{{ Type = "MetadataExtraction", Parameters = [
  {{ ParameterName = "MetadataExtractionQuery", ParameterValue = "{{tenantId: .tenant_id}}" }},
  {{ ParameterName = "JsonParsingEngine", ParameterValue = "JQ-1.6" }} ] }}]
[http]
listen = "127.0.0.1:0"
[metrics]
cloudwatch = true
namespace = "{metrics_namespace}"
interval = "1s"
"#,
            dir = dir.path().display()
        ),
    )
    .unwrap();
    let log = dir.path().join("run.log");
    let mut child = Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(["run", "--config"])
        .arg(&config)
        .stdout(std::process::Stdio::piped())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    let stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut all = Emitted::new();
    let take = |line: String, all: &mut Emitted| {
        let doc: serde_json::Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON: {line}: {e}"));
        all.extend(emitted(&doc));
    };
    // Lines arriving and the worker's CPU time are progress; on none, the caller's
    // checks say what is missing.
    let mut patience = Patience::new(Duration::from_secs(60));
    let mut lines = 0u64;
    while !wanted.iter().all(|w| seen(&all, w)) {
        if let Err(why) = patience.observe((lines, cpu_ticks(child.id()))) {
            println!("stopped waiting for the wanted lines: {why}");
            break;
        }
        match rx.recv_timeout(Duration::from_millis(200)) {
            Ok(line) => {
                lines += 1;
                take(line, &mut all);
            }
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
        }
    }
    if child.try_wait().unwrap().is_none() {
        let term = Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap();
        assert!(term.success());
    }
    let status = child.wait().unwrap();
    reader.join().unwrap();
    for line in rx.try_iter() {
        take(line, &mut all);
    }
    let log = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(status.success(), "weir run after SIGTERM: {status}\n{log}");
    (all, log)
}

/// The enhanced fan-out consumer a config reads as, from `weir config check`.
fn efo_consumer_of(config: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("weir.toml");
    std::fs::write(&path, config).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_weir")).args(["config", "check"]).arg(&path).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    let after = text.split("enhanced fan-out consumer \"").nth(1).unwrap_or_else(|| panic!("no consumer in {text}"));
    after[..after.find('"').unwrap()].to_owned()
}

/// Defect 8 of issue 32: every alarm (and the scaling policy) of the template watches a
/// metric that weir really emits, in that namespace, with exactly those dimensions and
/// values, seen in the EMF lines of a running `weir run` configured as the template
/// configures it; Kinesis's own metrics as AWS documents them, for the read mode the
/// template's config uses. Matched against any dimension set a line declares, so extra
/// metrics and dimension sets do not matter.
#[test]
fn every_alarm_watches_a_metric_weir_emits_with_its_dimensions() {
    let published = std::fs::read_to_string(root().join("crates/weir/src/cloudwatch.rs")).unwrap();
    let mut checked = BTreeSet::new();
    // A named consumer, the default (`auto`: the application's own), and polling.
    for efo_param in ["mcp-tool-events-weir", "auto", ""] {
        let read_efo = !efo_param.is_empty();
        let stack = Stack::sample(&[("EfoConsumerName", efo_param)]);
        let rendered = stack.config_toml();
        let config: toml::Table = toml::from_str(&rendered).unwrap();
        // The consumer the workers register, as the code derives it.
        let consumer = read_efo.then(|| efo_consumer_of(&rendered));
        let metrics = config["metrics"].as_table().expect("[metrics]");
        assert_eq!(metrics["cloudwatch"].as_bool(), Some(true), "the template turns the EMF lines on");
        let namespace = metrics["namespace"].as_str().unwrap().to_owned();
        let application = config["leases"]["namespace"].as_str().unwrap().to_owned();
        let stream = &config["stream"];
        let watched = watched(&stack);

        // AWS/Kinesis: documented names and dimensions, and the read mode's own metric.
        let kinesis: Vec<&Watched> = watched.iter().filter(|w| w.namespace == "AWS/Kinesis").collect();
        for w in &kinesis {
            let (_, dims, efo) = KINESIS_METRICS
                .iter()
                .find(|(m, _, _)| *m == w.metric)
                .unwrap_or_else(|| panic!("{}: {} is not a Kinesis metric this test knows", w.by, w.metric));
            assert_eq!(*efo, read_efo, "{}: {} is not emitted for this read mode", w.by, w.metric);
            let mut want = BTreeMap::from([("StreamName".to_owned(), stream["name"].as_str().unwrap().to_owned())]);
            if *efo {
                want.insert("ConsumerName".into(), consumer.clone().expect("an enhanced fan-out consumer"));
            }
            assert_eq!(dims.len(), want.len());
            assert_eq!(w.dimensions, want, "{}: dimensions", w.by);
        }
        assert_eq!(kinesis.len(), 1, "one Kinesis lag alarm for the read mode (efo: {read_efo}): {kinesis:?}");

        // weir's own: observed.
        let own: Vec<&Watched> = watched.iter().filter(|w| w.namespace != "AWS/Kinesis").collect();
        for w in &own {
            assert_eq!(w.namespace, namespace, "{}: the config's metrics.namespace", w.by);
        }
        let (observable, not_observed): (Vec<&Watched>, Vec<&Watched>) =
            own.iter().partition(|w| !NOT_OBSERVED.iter().any(|(m, _)| *m == w.metric));
        for w in not_observed {
            assert!(published.contains(&format!("name: \"{}\"", w.metric)), "{}: {} is not PUBLISHED", w.by, w.metric);
        }
        let (emitted, log) = run_and_collect_emf(&namespace, &application, &observable);
        let missing: Vec<String> = observable
            .iter()
            .filter(|w| !seen(&emitted, w))
            .map(|w| format!("{}: {} {} {:?}", w.by, w.namespace, w.metric, w.dimensions))
            .collect();
        assert!(missing.is_empty(), "watched but never emitted: {missing:#?}\nemitted: {emitted:#?}\nlog:\n{log}");
        checked.extend(watched.iter().map(|w| w.by.clone()));
    }
    println!("alarms and policies checked: {checked:?}");
    for id in ["ArchiveFreshnessAlarm", "ArchiveErrorRecordsAlarm", "ConsumerLagAlarm", "ArchiveBacklogAlarm"] {
        assert!(checked.contains(id), "{id} checked");
    }
}

#[test]
fn every_alarm_notifies_when_it_fires_and_when_it_clears() {
    for topic in ["arn:aws:sns:us-east-1:123456789012:oncall", ""] {
        for efo in ["mcp-tool-events-weir", ""] {
            let stack = Stack::sample(&[("AlarmTopicArn", topic), ("EfoConsumerName", efo)]);
            let alarms = stack.resources_of("AWS::CloudWatch::Alarm");
            assert!(alarms.len() >= 6, "{alarms:?}");
            for (id, r) in alarms {
                for key in ["AlarmActions", "OKActions"] {
                    let v = r["Properties"].get(key).unwrap_or_else(|| panic!("{id}: no {key}"));
                    let expected = if topic.is_empty() { Cfn::NoValue } else { Cfn::List(vec![topic.to_owned()]) };
                    assert_eq!(stack.eval(v), expected, "{id}: {key}");
                }
            }
        }
    }
}

#[test]
fn the_service_scales_on_shards_per_worker_with_no_shard_count_typed() {
    let stack = Stack::sample(&[("MaxWorkers", "12"), ("TargetShardsPerWorker", "3")]);
    // The shard count is nowhere a parameter: the fleet follows the stream's shards (a
    // reshard included) through the leases its workers hold; the ceiling is a budget.
    assert!(stack.doc["Parameters"].get("ShardCount").is_none(), "no typed shard count to keep up to date");
    let target = &stack.doc["Resources"]["ScalableTarget"]["Properties"];
    assert_eq!(stack.eval(&target["MaxCapacity"]).str(), "12", "the budget ceiling");
    assert_eq!(stack.eval(&target["MinCapacity"]).str(), "1");
    let policies = stack.resources_of("AWS::ApplicationAutoScaling::ScalingPolicy");
    let on_leases = policies
        .iter()
        .find_map(|(_, p)| {
            let c = &p["Properties"]["TargetTrackingScalingPolicyConfiguration"];
            c.get("CustomizedMetricSpecification").map(|m| (c, m))
        })
        .expect("a target tracking policy on a custom metric");
    let (config, metric) = on_leases;
    assert_eq!(metric["MetricName"], "LeasesHeld");
    assert_eq!(metric["Statistic"], "Average", "leases per worker: proportional to 1 / workers");
    assert_eq!(stack.eval(&config["TargetValue"]).str(), "3");
    // Each worker's LeasesHeld is its own leases (folded by sum over labels, one value
    // per worker per line), so the average over workers is shards per worker.
    let published = std::fs::read_to_string(root().join("crates/weir/src/cloudwatch.rs")).unwrap();
    let leases_held = published.split("Published {").find(|p| p.contains("name: \"LeasesHeld\"")).expect("LeasesHeld");
    assert!(leases_held.contains("Fold::Sum") && leases_held.contains("LEASES_HELD"), "{leases_held}");
}

#[test]
fn the_task_logs_without_blocking_and_gives_a_slow_first_start_time() {
    let stack = Stack::sample(&[]);
    let c = stack.container();
    let options = &c["LogConfiguration"]["Options"];
    assert_eq!(c["LogConfiguration"]["LogDriver"], "awslogs");
    assert_eq!(options["mode"], "non-blocking", "a slow CloudWatch Logs never blocks the worker");
    let buffer = scalar(&options["max-buffer-size"]);
    assert!(buffer.ends_with('m') && buffer.trim_end_matches('m').parse::<u32>().is_ok_and(|m| m >= 4), "{buffer}");
    let hc = &c["HealthCheck"];
    assert_eq!(stack.eval(&hc["Command"]).list(), ["CMD", "weir", "health", "--url", "http://127.0.0.1:9090/readyz"]);
    let start: u32 = scalar(&hc["StartPeriod"]).parse().unwrap();
    assert!((120..=300).contains(&start), "StartPeriod {start}: long enough for EFO registration, at most ECS's 300");
    // The image's own HEALTHCHECK waits as long.
    let dockerfile = std::fs::read_to_string(root().join("deploy/Dockerfile")).unwrap();
    assert!(dockerfile.contains(&format!("--start-period={start}s")), "deploy/Dockerfile HEALTHCHECK");
    assert!(dockerfile.contains("ENV WEIR_HTTP_LISTEN=0.0.0.0:9090"), "the image listens where its probes reach");
}
