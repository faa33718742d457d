//! What deploy/kubernetes renders, object by object, for every overlay, the base, and
//! the base with each component (the combinations deploy/lint.sh validates), rendered
//! with `kubectl kustomize` from a copy of the tree:
//! - the image is the overlay's `images:` entry (and editing the overlay changes it);
//! - startup, readiness and liveness probes on /healthz and /readyz at port 9090, which
//!   the rendered config (or WEIR_HTTP_LISTEN) opens on every interface;
//! - the config mounted at /etc/weir from the weir-config ConfigMap holds the overlay's
//!   weir.toml, and that passes `weir config check` with the container's environment;
//! - the ServiceAccount's IRSA role is the overlay's (none with components/pod-identity),
//!   no API token is mounted, resources, topology spread and selectors are set;
//! - the PrometheusRule has a rule for each of CloudFormation's alarms on weir's own
//!   metrics (metric, threshold, period, missing data), on metric names the code emits,
//!   and promtool checks the rules and runs their unit tests;
//! - a KEDA ScaledObject scales the Deployment on the config's stream and owns its
//!   replica count.
//!
//! kubectl comes from PATH or from deploy/lint.sh's tool venv (`deploy/lint.sh
//! --install`, which scripts/test-all.sh runs first); without it the tests say so and
//! pass, except under CI, where they fail.
#![allow(clippy::unwrap_used, clippy::print_stdout, clippy::print_stderr)] // a test: a failed expectation is a failed test

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use serde::Deserialize;
use serde_norway::Value;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// deploy/lint.sh's tool venv, where it installs kubectl and promtool if the machine
/// has none.
fn tool_venv() -> PathBuf {
    let home = std::env::var_os("WEIR_EMULATORS_HOME").map(PathBuf::from).unwrap_or_else(|| {
        PathBuf::from(std::env::var_os("HOME").unwrap_or_else(|| "/root".into())).join(".cache/weir-emulators")
    });
    home.join("lint-py/bin")
}

/// `tool` from PATH, else from the tool venv, if `ok` accepts what `tool args` prints.
fn find_tool(tool: &str, args: &[&str], ok: impl Fn(&str) -> bool) -> Option<PathBuf> {
    [PathBuf::from(tool), tool_venv().join(tool)].into_iter().find(|candidate| {
        Command::new(candidate)
            .args(args)
            .output()
            .is_ok_and(|out| out.status.success() && ok(&String::from_utf8_lossy(&out.stdout)))
    })
}

/// The tool, or None after saying why the test does nothing: a failure under CI and
/// under scripts/test-all.sh (WEIR_REQUIRE_TOOLS=1), which installs the tools first.
fn require(tool: Option<PathBuf>, what: &str) -> Option<PathBuf> {
    if tool.is_none() {
        let why = format!("{what} not found: run deploy/lint.sh --install (scripts/test-all.sh does)");
        let required =
            std::env::var_os("CI").is_some() || std::env::var_os("WEIR_REQUIRE_TOOLS").is_some_and(|v| v == "1");
        assert!(!required, "{why}");
        eprintln!("SKIPPED: {why}");
    }
    tool
}

/// kubectl whose kustomize knows components (v4 or later).
fn kubectl() -> Option<PathBuf> {
    let tool = find_tool("kubectl", &["version", "--client"], |out| {
        out.lines()
            .find_map(|l| l.strip_prefix("Kustomize Version: v"))
            .and_then(|v| v.split('.').next()?.parse::<u32>().ok())
            .is_some_and(|major| major >= 4)
    });
    require(tool, "kubectl with kustomize v4 or later")
}

fn promtool() -> Option<PathBuf> {
    require(find_tool("promtool", &["--version"], |_| true), "promtool")
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap().flatten() {
        let name = e.file_name();
        // deploy/lint.sh's scratch directories.
        if name.to_string_lossy().starts_with('.') {
            continue;
        }
        if e.path().is_dir() {
            copy_tree(&e.path(), &to.join(&name));
        } else {
            std::fs::copy(e.path(), to.join(&name)).unwrap();
        }
    }
}

fn yaml(path: &Path) -> Value {
    serde_norway::from_str(&std::fs::read_to_string(path).unwrap())
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn kustomize(kubectl: &Path, dir: &Path) -> Vec<Value> {
    let out = Command::new(kubectl).arg("kustomize").arg(dir).output().unwrap();
    assert!(out.status.success(), "kubectl kustomize {}: {}", dir.display(), String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    serde_norway::Deserializer::from_str(&text).map(|doc| Value::deserialize(doc).unwrap()).collect()
}

fn str_of<'a>(v: &'a Value, what: &str) -> &'a str {
    v.as_str().unwrap_or_else(|| panic!("{what}: expected a string, found {v:?}"))
}

fn seq<'a>(v: &'a Value, what: &str) -> &'a [Value] {
    v.as_sequence().map(Vec::as_slice).unwrap_or_else(|| panic!("{what}: expected a list, found {v:?}"))
}

fn string_map(v: &Value) -> BTreeMap<String, String> {
    v.as_mapping()
        .map(|m| m.iter().map(|(k, v)| (str_of(k, "key").to_owned(), str_of(v, "value").to_owned())).collect())
        .unwrap_or_default()
}

/// `sub` ⊆ `labels`, and not empty.
fn selects(sub: &BTreeMap<String, String>, labels: &BTreeMap<String, String>) -> bool {
    !sub.is_empty() && sub.iter().all(|(k, v)| labels.get(k) == Some(v))
}

/// One thing kustomize renders: an overlay, the base, or the base with one component.
struct Target {
    name: String,
    dir: PathBuf,
    /// The overlay's kustomization.yaml, parsed and as text.
    overlay: Option<(Value, String)>,
    components: BTreeSet<String>,
}

/// The base, the base with each component, and every overlay, in a copy of the tree.
fn targets(tree: &Path) -> Vec<Target> {
    let mut out =
        vec![Target { name: "base".into(), dir: tree.join("base"), overlay: None, components: BTreeSet::new() }];
    let mut components: Vec<String> = std::fs::read_dir(tree.join("components"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    components.sort();
    assert!(
        ["servicemonitor", "prometheusrule", "keda", "pod-identity"].iter().all(|c| components.iter().any(|n| n == c)),
        "{components:?}"
    );
    for c in components {
        let dir = tree.join("combos").join(&c);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("kustomization.yaml"),
            format!("resources: [../../base]\ncomponents: [../../components/{c}]\n"),
        )
        .unwrap();
        out.push(Target { name: format!("base + {c}"), dir, overlay: None, components: BTreeSet::from([c]) });
    }
    let mut overlays: Vec<PathBuf> =
        std::fs::read_dir(tree.join("overlays")).unwrap().flatten().map(|e| e.path()).collect();
    overlays.sort();
    assert!(!overlays.is_empty());
    for dir in overlays {
        let text = std::fs::read_to_string(dir.join("kustomization.yaml")).unwrap();
        let k: Value = serde_norway::from_str(&text).unwrap();
        let components = k["components"]
            .as_sequence()
            .into_iter()
            .flatten()
            .map(|c| str_of(c, "component").rsplit('/').next().unwrap().to_owned())
            .collect();
        let name = format!("overlays/{}", dir.file_name().unwrap().to_string_lossy());
        out.push(Target { name, dir, overlay: Some((k, text)), components });
    }
    out
}

/// The image an overlay's `images:` entry for `weir` gives.
fn overlay_image(name: &str, kustomization: &Value) -> String {
    let entry = kustomization["images"]
        .as_sequence()
        .into_iter()
        .flatten()
        .find(|i| i["name"] == "weir")
        .unwrap_or_else(|| panic!("{name}: no `images:` entry for `weir`: the Deployment keeps the placeholder"));
    let image = entry["newName"].as_str().unwrap_or("weir").to_owned();
    match (entry["digest"].as_str(), entry["newTag"].as_str()) {
        (Some(d), _) => format!("{image}@{d}"),
        (None, Some(t)) => format!("{image}:{t}"),
        (None, None) => image,
    }
}

/// Kubernetes memory quantities as bytes (the suffixes deploy/ uses).
fn bytes(q: &str) -> u64 {
    let (n, unit) = q.split_at(q.find(|c: char| !c.is_ascii_digit()).unwrap_or(q.len()));
    let unit = match unit {
        "" => 1,
        "Ki" => 1 << 10,
        "Mi" => 1 << 20,
        "Gi" => 1 << 30,
        other => panic!("memory quantity {q}: unit {other}"),
    };
    n.parse::<u64>().unwrap() * unit
}

/// A probe's path and port number (named ports resolved against the container's).
fn probe(container: &Value, which: &str) -> (String, u64, u64) {
    let p = &container[which];
    assert!(p.is_mapping(), "no {which}");
    let get = &p["httpGet"];
    let port = match &get["port"] {
        Value::Number(n) => n.as_u64().unwrap(),
        Value::String(name) => seq(&container["ports"], "ports")
            .iter()
            .find(|q| q["name"] == name.as_str())
            .and_then(|q| q["containerPort"].as_u64())
            .unwrap_or_else(|| panic!("{which}: no port named {name}")),
        other => panic!("{which} port {other:?}"),
    };
    // Kubernetes' defaults: every 10 s, 3 failures.
    let bound = p["periodSeconds"].as_u64().unwrap_or(10) * p["failureThreshold"].as_u64().unwrap_or(3);
    (str_of(&get["path"], which).to_owned(), port, bound)
}

fn one<'a>(objects: &'a [Value], kind: &str, target: &str) -> &'a Value {
    let found: Vec<&Value> = objects.iter().filter(|o| o["kind"] == kind).collect();
    assert_eq!(found.len(), 1, "{target}: {kind} objects: {found:?}");
    found[0]
}

fn config_check(path: &Path, env: &BTreeMap<String, String>) -> toml::Table {
    let out = Command::new(env!("CARGO_BIN_EXE_weir")).args(["config", "check"]).arg(path).envs(env).output().unwrap();
    assert!(
        out.status.success(),
        "{}: {}{}",
        path.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    toml::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// The checks of one rendered target.
fn check_target(t: &Target, objects: &[Value], tree: &Path, scratch: &Path) {
    let name = t.name.as_str();
    let kinds: BTreeSet<&str> = objects.iter().filter_map(|o| o["kind"].as_str()).collect();
    println!("{name}: {kinds:?}");

    // Namespaced objects are in the overlay's namespace.
    if let Some(ns) = t.overlay.as_ref().and_then(|(k, _)| k["namespace"].as_str()) {
        for o in objects.iter().filter(|o| o["kind"] != "Namespace") {
            assert_eq!(o["metadata"]["namespace"], ns, "{name}: {o:?}");
        }
    }

    let deployment = one(objects, "Deployment", name);
    let spec = &deployment["spec"];
    let pod = &spec["template"]["spec"];
    let pod_labels = string_map(&spec["template"]["metadata"]["labels"]);
    assert!(selects(&string_map(&spec["selector"]["matchLabels"]), &pod_labels), "{name}: Deployment selector");
    let container = seq(&pod["containers"], "containers").iter().find(|c| c["name"] == "weir").expect("container weir");

    // The image: the overlay's, or the base's placeholder.
    let image = str_of(&container["image"], "image");
    match &t.overlay {
        Some((k, _)) => assert_eq!(image, overlay_image(name, k), "{name}: the overlay's image"),
        None => assert_eq!(image, "weir", "{name}: the base renames no image (overlays do)"),
    }

    // Probes: /healthz and /readyz on 9090; the startup probe gives a slow first start
    // (lease table creation and EFO registration, up to 60 s of waiting each) its time.
    let metrics_port = seq(&container["ports"], "ports").iter().find(|p| p["name"] == "metrics").expect("port metrics");
    assert_eq!(metrics_port["containerPort"].as_u64(), Some(9090), "{name}");
    let (path, port, startup_bound) = probe(container, "startupProbe");
    assert_eq!((path.as_str(), port), ("/healthz", 9090), "{name}: startupProbe");
    assert!(startup_bound >= 150, "{name}: the startup probe allows {startup_bound} s, under 150");
    let (path, port, _) = probe(container, "readinessProbe");
    assert_eq!((path.as_str(), port), ("/readyz", 9090), "{name}: readinessProbe");
    let (path, port, liveness_bound) = probe(container, "livenessProbe");
    assert_eq!((path.as_str(), port), ("/healthz", 9090), "{name}: livenessProbe");
    assert!(liveness_bound >= 30, "{name}: liveness restarts after {liveness_bound} s");

    // The config: /etc/weir from the generated weir-config ConfigMap, holding the
    // overlay's weir.toml (or the base's).
    let config_map = objects
        .iter()
        .find(|o| {
            o["kind"] == "ConfigMap" && o["metadata"]["name"].as_str().is_some_and(|n| n.starts_with("weir-config"))
        })
        .unwrap_or_else(|| panic!("{name}: no weir-config ConfigMap"));
    let mount = seq(&container["volumeMounts"], "volumeMounts")
        .iter()
        .find(|m| m["mountPath"] == "/etc/weir")
        .unwrap_or_else(|| panic!("{name}: nothing mounted at /etc/weir"));
    let volume = seq(&pod["volumes"], "volumes").iter().find(|v| v["name"] == mount["name"]).expect("the volume");
    assert_eq!(volume["configMap"]["name"], config_map["metadata"]["name"], "{name}: /etc/weir's ConfigMap");
    let args: Vec<&str> = seq(&container["args"], "args").iter().map(|a| str_of(a, "arg")).collect();
    let file = args
        .windows(2)
        .find(|w| w[0] == "--config")
        .and_then(|w| w[1].strip_prefix("/etc/weir/"))
        .unwrap_or_else(|| panic!("{name}: args {args:?} read no config from /etc/weir"));
    let toml_text = str_of(&config_map["data"][file], "the ConfigMap's weir.toml");
    let source = t
        .overlay
        .as_ref()
        .and_then(|(k, _)| {
            k["configMapGenerator"].as_sequence()?.iter().find(|g| g["name"] == "weir-config").map(|g| {
                assert_eq!(g["behavior"], "replace", "{name}: weir-config");
                t.dir.join(str_of(&seq(&g["files"], "files")[0], "file"))
            })
        })
        .unwrap_or_else(|| tree.join("base/weir.toml"));
    assert_eq!(
        toml_text,
        std::fs::read_to_string(&source).unwrap(),
        "{name}: the ConfigMap holds {}",
        source.display()
    );
    let env: BTreeMap<String, String> = seq(&container["env"], "env")
        .iter()
        .filter_map(|e| Some((str_of(&e["name"], "env").to_owned(), e["value"].as_str()?.to_owned())))
        .collect();
    let rendered = scratch.join(format!("{}.toml", name.replace(['/', ' ', '+'], "_")));
    std::fs::write(&rendered, toml_text).unwrap();
    let config = config_check(&rendered, &env);
    // The probes reach what the worker opens: its [http] listen, or WEIR_HTTP_LISTEN.
    let listen = config
        .get("http")
        .and_then(|h| h.get("listen"))
        .and_then(|l| l.as_str())
        .or(env.get("WEIR_HTTP_LISTEN").map(String::as_str))
        .unwrap_or_else(|| panic!("{name}: neither [http] listen nor WEIR_HTTP_LISTEN"));
    assert!(["0.0.0.0:9090", "[::]:9090"].contains(&listen), "{name}: listens on {listen}, the probes ask :9090");

    // Identity: the overlay's IRSA role (none with Pod Identity), no API token.
    let sa = one(objects, "ServiceAccount", name);
    assert_eq!(pod["serviceAccountName"], sa["metadata"]["name"], "{name}");
    assert_eq!(pod["automountServiceAccountToken"].as_bool(), Some(false), "{name}: pod token");
    assert_eq!(sa["automountServiceAccountToken"].as_bool(), Some(false), "{name}: ServiceAccount token");
    let role = sa["metadata"]["annotations"]["eks.amazonaws.com/role-arn"].as_str();
    if t.components.contains("pod-identity") {
        assert_eq!(role, None, "{name}: Pod Identity needs no IRSA annotation");
    } else {
        let role = role.unwrap_or_else(|| panic!("{name}: no IRSA role annotation"));
        assert!(role.starts_with("arn:aws:iam::") && role.contains(":role/"), "{name}: {role}");
        if let Some((_, text)) = &t.overlay {
            assert!(text.contains(role), "{name}: role {role} is not the overlay's");
        }
    }

    // Resources: requests, and a memory limit above the request.
    let res = &container["resources"];
    assert!(res["requests"]["cpu"].is_string(), "{name}: cpu request");
    let (request, limit) =
        (str_of(&res["requests"]["memory"], "memory request"), str_of(&res["limits"]["memory"], "limit"));
    assert!(bytes(limit) >= bytes(request), "{name}: memory limit {limit} under request {request}");

    // Spread over zones and hosts, among this Deployment's pods.
    let spread = seq(&pod["topologySpreadConstraints"], "topologySpreadConstraints");
    for key in ["topology.kubernetes.io/zone", "kubernetes.io/hostname"] {
        let c = spread.iter().find(|c| c["topologyKey"] == key).unwrap_or_else(|| panic!("{name}: no spread on {key}"));
        assert_eq!(c["maxSkew"].as_u64(), Some(1), "{name}: {key}");
        assert!(selects(&string_map(&c["labelSelector"]["matchLabels"]), &pod_labels), "{name}: {key} selector");
    }

    // The PDB and the Service select the workers; the Service serves the metrics port.
    let pdb = one(objects, "PodDisruptionBudget", name);
    assert!(selects(&string_map(&pdb["spec"]["selector"]["matchLabels"]), &pod_labels), "{name}: PDB selector");
    let service = one(objects, "Service", name);
    assert!(selects(&string_map(&service["spec"]["selector"]), &pod_labels), "{name}: Service selector");
    assert!(
        seq(&service["spec"]["ports"], "ports").iter().any(|p| p["name"] == "metrics" && p["targetPort"] == "metrics"),
        "{name}: Service port metrics"
    );

    // Scaling: a fixed count of at least two, or KEDA's (then no count in the manifest).
    let scaled: Vec<&Value> = objects.iter().filter(|o| o["kind"] == "ScaledObject").collect();
    if scaled.is_empty() {
        assert!(spec["replicas"].as_u64().is_some_and(|r| r >= 2), "{name}: replicas {:?}", spec["replicas"]);
    } else {
        assert!(spec["replicas"].is_null(), "{name}: KEDA owns the replica count, the manifest must not set it");
        check_keda(name, objects, deployment, sa, &config);
    }

    if let Some(monitor) = objects.iter().find(|o| o["kind"] == "ServiceMonitor") {
        let service_labels = string_map(&service["metadata"]["labels"]);
        assert!(selects(&string_map(&monitor["spec"]["selector"]["matchLabels"]), &service_labels), "{name}");
        assert!(
            seq(&monitor["spec"]["endpoints"], "endpoints")
                .iter()
                .any(|e| e["port"] == "metrics" && e["path"] == "/metrics"),
            "{name}: ServiceMonitor endpoints"
        );
    }
    if let Some(rule) = objects.iter().find(|o| o["kind"] == "PrometheusRule") {
        let service_name = str_of(&service["metadata"]["name"], "Service name");
        check_rules(name, rule, service_name);
    }
}

fn check_keda(name: &str, objects: &[Value], deployment: &Value, sa: &Value, config: &toml::Table) {
    let so = one(objects, "ScaledObject", name);
    let spec = &so["spec"];
    assert_eq!(spec["scaleTargetRef"]["name"], deployment["metadata"]["name"], "{name}: scaleTargetRef");
    assert!(spec["scaleTargetRef"]["kind"].is_null() || spec["scaleTargetRef"]["kind"] == "Deployment", "{name}");
    let (min, max) = (spec["minReplicaCount"].as_u64().unwrap(), spec["maxReplicaCount"].as_u64().unwrap());
    assert!(min >= 2 && max >= min, "{name}: replicas {min}..{max}");
    // The scaler sizes the fleet from the open shard count; the maximum only caps the
    // budget (a typed shard count there would stop the fleet following a reshard).
    assert!(max >= 32, "{name}: maxReplicaCount {max} caps the fleet below a resharded stream's needs");
    let trigger =
        seq(&spec["triggers"], "triggers").iter().find(|t| t["type"] == "aws-kinesis-stream").expect("trigger");
    let meta = &trigger["metadata"];
    let stream = config["stream"]["name"].as_str().unwrap();
    assert_eq!(meta["streamName"], stream, "{name}: KEDA watches the config's stream");
    assert!(meta["awsRegion"].as_str().is_some_and(|r| !r.is_empty()), "{name}: awsRegion");
    let per_worker: u64 = str_of(&meta["shardCount"], "shardCount").parse().unwrap();
    assert!(per_worker >= 1, "{name}");
    let auth = one(objects, "TriggerAuthentication", name);
    assert_eq!(trigger["authenticationRef"]["name"], auth["metadata"]["name"], "{name}: authenticationRef");
    let identity = &auth["spec"]["podIdentity"];
    assert_eq!(identity["provider"], "aws", "{name}");
    if identity["identityOwner"] == "workload" {
        assert!(
            sa["metadata"]["annotations"]["eks.amazonaws.com/role-arn"].is_string(),
            "{name}: identityOwner workload needs the ServiceAccount's IRSA role"
        );
    }
}

/// Each CloudFormation metric in namespace `weir`, as weir's Prometheus metric.
const PROMETHEUS_OF: &[(&str, &str)] = &[
    ("ArchiveDataFreshness", "weir_archiver_data_freshness_seconds"),
    ("ArchiveErrorRecords", "weir_archiver_error_records_total"),
    ("MillisBehindLatest", "weir_millis_behind_latest"),
    ("ArchiveBacklogBytes", "weir_archiver_backlog_bytes"),
    ("ReadFailures", "weir_shards_read_failing"),
];

/// Every `"weir_…"` string in the workspace's non-test sources: the metric names.
fn metric_names_in_code() -> BTreeSet<String> {
    fn walk(dir: &Path, out: &mut BTreeSet<String>) {
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                let text = std::fs::read_to_string(&p).unwrap();
                for piece in text.split("\"weir_").skip(1) {
                    if let Some(end) = piece.find('"') {
                        out.insert(format!("weir_{}", &piece[..end]));
                    }
                }
            }
        }
    }
    let mut out = BTreeSet::new();
    for group in ["crates", "consumers"] {
        for krate in std::fs::read_dir(root().join(group)).unwrap().flatten() {
            walk(&krate.path().join("src"), &mut out);
        }
    }
    out
}

/// `3m`, `90s`, `1h` as seconds.
fn seconds(d: &str) -> u64 {
    let (n, unit) = d.split_at(d.len() - 1);
    n.parse::<u64>().unwrap()
        * match unit {
            "s" => 1,
            "m" => 60,
            "h" => 3600,
            other => panic!("duration {d}: unit {other}"),
        }
}

fn prom_duration(s: u64) -> String {
    if s.is_multiple_of(60) { format!("{}m", s / 60) } else { format!("{s}s") }
}

fn check_rules(name: &str, rule: &Value, service_name: &str) {
    let rules: Vec<&Value> = seq(&rule["spec"]["groups"], "groups")
        .iter()
        .flat_map(|g| seq(&g["rules"], "rules").iter())
        .filter(|r| r["alert"].is_string())
        .collect();
    let by_alert: BTreeMap<&str, &Value> = rules.iter().map(|r| (str_of(&r["alert"], "alert"), *r)).collect();
    assert_eq!(by_alert.len(), rules.len(), "{name}: alert names repeat");

    // Metric names the code emits (and that `job` is the Service's, as the
    // ServiceMonitor's scrape labels it).
    let known = metric_names_in_code();
    for (alert, r) in &by_alert {
        let expr = str_of(&r["expr"], "expr");
        let mut rest = expr;
        while let Some(at) = rest.find("weir_") {
            let metric: String =
                rest[at..].chars().take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_').collect();
            rest = &rest[at + metric.len()..];
            assert!(known.contains(&metric), "{name}: {alert} uses {metric}, which the code does not emit");
        }
        for job in expr.split("job=\"").skip(1) {
            assert_eq!(&job[..job.find('"').unwrap()], service_name, "{name}: {alert}'s job");
        }
        assert!(r["labels"]["severity"].is_string() && r["annotations"]["summary"].is_string(), "{name}: {alert}");
    }

    // The CloudFormation alarms, one rule each: metric, threshold (the parameter's
    // default), period and missing-data treatment.
    let cfn = yaml(&root().join("deploy/cloudformation/weir.yaml"));
    let params = &cfn["Parameters"];
    let mut expected = BTreeSet::new();
    for (id, res) in cfn["Resources"].as_mapping().unwrap() {
        let id = str_of(id, "resource");
        let p = &res["Properties"];
        if res["Type"] != "AWS::CloudWatch::Alarm" || p["Namespace"] != "weir" {
            continue;
        }
        let cfn_metric = str_of(&p["MetricName"], "MetricName");
        let metric = PROMETHEUS_OF
            .iter()
            .find(|(m, _)| *m == cfn_metric)
            .unwrap_or_else(|| {
                panic!("{id} alarms on {cfn_metric}: add it to PROMETHEUS_OF and a rule to components/prometheusrule")
            })
            .1;
        let alert = format!("Weir{}", id.strip_suffix("Alarm").unwrap_or(id));
        let r = by_alert.get(alert.as_str()).unwrap_or_else(|| panic!("{name}: no rule {alert} for {id}"));
        let expr = str_of(&r["expr"], "expr");
        assert!(expr.contains(metric), "{name}: {alert} does not use {metric}: {expr}");
        let threshold = match &p["Threshold"] {
            Value::Number(n) => n.to_string(),
            Value::Tagged(t) if t.tag == "!Ref" => {
                let default = &params[str_of(&t.value, "!Ref")]["Default"];
                default.as_u64().map(|n| n.to_string()).unwrap_or_else(|| str_of(default, "Default").to_owned())
            }
            other => panic!("{id}: Threshold {other:?}"),
        };
        let op = match str_of(&p["ComparisonOperator"], "ComparisonOperator") {
            "GreaterThanThreshold" => ">",
            "GreaterThanOrEqualToThreshold" => ">=",
            other => panic!("{id}: {other}"),
        };
        let compared = format!(") {op} {threshold}");
        assert!(expr.contains(&compared), "{name}: {alert} is not `{compared}` as {id}: {expr}");
        let period = p["Period"].as_u64().unwrap();
        let points = p["DatapointsToAlarm"].as_u64().or(p["EvaluationPeriods"].as_u64()).unwrap();
        let for_ = r["for"].as_str().map_or(0, seconds);
        match str_of(&p["Statistic"], "Statistic") {
            // A maximum over each period, high for `points` periods.
            "Maximum" => assert_eq!(for_, period * points, "{name}: {alert}'s `for` against {id}"),
            // A sum over the period, above the threshold once.
            "Sum" => {
                assert_eq!(points, 1, "{id}");
                assert!(expr.contains(&format!("[{}]", prom_duration(period))), "{name}: {alert}'s window: {expr}");
            }
            other => panic!("{id}: statistic {other}"),
        }
        let breaching = p["TreatMissingData"] == "breaching";
        assert_eq!(expr.contains("absent("), breaching, "{name}: {alert}'s missing data against {id}");
        expected.insert(alert);
    }
    let found: BTreeSet<String> = by_alert.keys().map(|s| (*s).to_owned()).collect();
    assert_eq!(found, expected, "{name}: the rules against CloudFormation's alarms in namespace weir");
}

#[test]
fn every_overlay_and_component_renders_what_a_fleet_needs() {
    let Some(kubectl) = kubectl() else { return };
    let scratch = tempfile::tempdir().unwrap();
    let tree = scratch.path().join("kubernetes");
    copy_tree(&root().join("deploy/kubernetes"), &tree);
    let targets = targets(&tree);
    for t in &targets {
        let objects = kustomize(&kubectl, &t.dir);
        check_target(t, &objects, &tree, scratch.path());
    }
    // Metrics on in at least one overlay, as the issue asks of the shipped one.
    let mcp = targets.iter().find(|t| t.name == "overlays/mcp-pipeline").expect("overlays/mcp-pipeline");
    assert!(mcp.components.contains("servicemonitor") && mcp.components.contains("prometheusrule"));
}

/// The defect this guards: the base renamed `weir`, so an overlay's `images:` entry
/// matched nothing and every overlay deployed the base's image.
#[test]
fn editing_an_overlays_image_changes_what_is_deployed() {
    let Some(kubectl) = kubectl() else { return };
    let scratch = tempfile::tempdir().unwrap();
    let tree = scratch.path().join("kubernetes");
    copy_tree(&root().join("deploy/kubernetes"), &tree);
    for overlay in std::fs::read_dir(tree.join("overlays")).unwrap().flatten() {
        let file = overlay.path().join("kustomization.yaml");
        let mut k: Value = yaml(&file);
        let images = k["images"].as_sequence_mut().expect("images");
        let entry = images.iter_mut().find(|i| i["name"] == "weir").expect("images: weir");
        entry["newName"] = "registry.example.com/team/weir-edited".into();
        entry["newTag"] = "9.9.9".into();
        std::fs::write(&file, serde_norway::to_string(&k).unwrap()).unwrap();
        let objects = kustomize(&kubectl, &overlay.path());
        let deployment = one(&objects, "Deployment", "edited overlay");
        let images: Vec<&str> = seq(&deployment["spec"]["template"]["spec"]["containers"], "containers")
            .iter()
            .map(|c| str_of(&c["image"], "image"))
            .collect();
        assert_eq!(images, ["registry.example.com/team/weir-edited:9.9.9"], "{}", overlay.path().display());
    }
}

/// The PrometheusRule's rules as Prometheus loads them (promtool check rules), and its
/// unit tests (components/prometheusrule/rules.test.yaml: series in, alerts out).
#[test]
fn the_alerting_rules_load_and_fire_as_their_tests_say() {
    let (Some(kubectl), Some(promtool)) = (kubectl(), promtool()) else { return };
    let scratch = tempfile::tempdir().unwrap();
    let tree = scratch.path().join("kubernetes");
    copy_tree(&root().join("deploy/kubernetes"), &tree);
    let objects = kustomize(&kubectl, &tree.join("overlays/mcp-pipeline"));
    let rule = one(&objects, "PrometheusRule", "overlays/mcp-pipeline");
    let rules = scratch.path().join("rules.yaml");
    std::fs::write(&rules, serde_norway::to_string(&rule["spec"]).unwrap()).unwrap();
    let tests = scratch.path().join("rules.test.yaml");
    std::fs::copy(tree.join("components/prometheusrule/rules.test.yaml"), &tests).unwrap();
    for args in [vec!["check", "rules"], vec!["test", "rules"]] {
        let file = if args[0] == "check" { &rules } else { &tests };
        let out = Command::new(&promtool).args(&args).arg(file).current_dir(scratch.path()).output().unwrap();
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        println!("promtool {}: {text}", args.join(" "));
        assert!(out.status.success(), "promtool {}: {text}", args.join(" "));
    }
}
