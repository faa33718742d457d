//! A KCL MultiLangDaemon `.properties` file, read as `java.util.Properties` reads it,
//! and turned into the weir config that runs the same application.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use anyhow::{Result, bail};

/// Parses Java properties text: `key = value`, `key: value` or `key value`; `#` and `!`
/// comments; a trailing backslash continues a line; `\t`, `\n`, `\\`, `\uXXXX` escapes.
pub fn parse(text: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut logical = String::new();
    for raw in text.lines() {
        let line = raw.trim_start();
        if logical.is_empty() && (line.is_empty() || line.starts_with('#') || line.starts_with('!')) {
            continue;
        }
        let trailing = line.chars().rev().take_while(|&c| c == '\\').count();
        if trailing % 2 == 1 {
            logical.push_str(&line[..line.len() - 1]);
            continue;
        }
        logical.push_str(line);
        let (key, value) = split(&logical);
        out.insert(unescape(&key), unescape(&value));
        logical.clear();
    }
    if !logical.is_empty() {
        let (key, value) = split(&logical);
        out.insert(unescape(&key), unescape(&value));
    }
    out
}

/// Key and value of a logical line: the key ends at the first unescaped `=`, `:` or
/// whitespace; the separator and the whitespace around it are dropped.
fn split(line: &str) -> (String, String) {
    let mut escaped = false;
    for (i, c) in line.char_indices() {
        if escaped {
            escaped = false;
            continue;
        }
        match c {
            '\\' => escaped = true,
            '=' | ':' | ' ' | '\t' => {
                let key = line[..i].to_owned();
                let mut rest = line[i..].trim_start_matches([' ', '\t']);
                if c.is_whitespace() {
                    rest = rest.strip_prefix(['=', ':']).unwrap_or(rest);
                } else {
                    rest = &rest[1..];
                }
                return (key, rest.trim_start_matches([' ', '\t']).to_owned());
            }
            _ => {}
        }
    }
    (line.to_owned(), String::new())
}

fn unescape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('t') => out.push('\t'),
            Some('n') => out.push('\n'),
            Some('r') => out.push('\r'),
            Some('f') => out.push('\u{c}'),
            Some('u') => {
                let hex: String = chars.by_ref().take(4).collect();
                match u32::from_str_radix(&hex, 16).ok().and_then(char::from_u32) {
                    Some(ch) => out.push(ch),
                    None => out.push_str(&hex),
                }
            }
            Some(other) => out.push(other),
            None => {}
        }
    }
    out
}

/// Properties weir reads; the value says what it becomes.
const READ: &[&str] = &[
    "executableName",
    "streamName",
    "streamArn",
    "applicationName",
    "tableName",
    "initialPositionInStream",
    "regionName",
    "kinesisEndpoint",
    "dynamoDBEndpoint",
    "failoverTimeMillis",
    "shardSyncIntervalMillis",
    "workerId",
    "timeoutInSeconds",
    "shutdownGraceMillis",
    "retrievalMode",
    "consumerName",
    "processingLanguage",
    "AwsCredentialsProvider",
    "AWSCredentialsProvider",
];

/// Properties that select polling under KCL's default retrieval mode.
const POLLING: &[&str] =
    &["maxRecords", "idleTimeBetweenReadsInMillis", "retryGetRecordsInSeconds", "maxGetRecordsThreadPool"];

/// Properties that do not apply to weir (it does what they tune its own way); accepted
/// without a warning.
const NOT_NEEDED: &[&str] = &[
    "cleanupLeasesUponShardCompletion",
    "callProcessRecordsEvenForEmptyRecordList",
    "parentShardPollIntervalMillis",
    "taskBackoffTimeMillis",
    "metricsLevel",
    "metricsBufferTimeMillis",
    "metricsMaxQueueSize",
    "validateSequenceNumberBeforeCheckpointing",
    "maxActiveThreads",
    "initialLeaseTableReadCapacity",
    "initialLeaseTableWriteCapacity",
    "cloudWatchEndpoint",
];

/// What `weir multilang` runs, with the warnings to print.
pub struct Translated {
    /// A complete `weir.toml`.
    pub toml: String,
    /// One line per property weir does not use.
    pub warnings: Vec<String>,
}

/// Options of the command that shape the config.
pub struct Options<'a> {
    /// Leases in this SQLite file instead of DynamoDB.
    pub sqlite: Option<&'a Path>,
    /// `http.listen`.
    pub listen: Option<&'a str>,
}

fn toml_str(s: &str) -> String {
    toml::Value::String(s.to_owned()).to_string()
}

fn millis(props: &BTreeMap<String, String>, key: &str) -> Result<Option<u64>> {
    match props.get(key) {
        None => Ok(None),
        Some(v) => match v.trim().parse::<u64>() {
            Ok(n) => Ok(Some(n)),
            Err(_) => bail!("{key} = {v:?}: not a whole number"),
        },
    }
}

/// Translates the properties of a file in `dir` into a weir config.
pub fn translate(props: &BTreeMap<String, String>, dir: &Path, options: &Options<'_>) -> Result<Translated> {
    let mut problems = Vec::new();
    let mut warnings = Vec::new();
    let get = |k: &str| props.get(k).map(|v| v.trim()).filter(|v| !v.is_empty());
    let Some(executable) = get("executableName") else {
        bail!("executableName is required (the processor, e.g. executableName = sample_kclpy_app.py)");
    };
    // As the daemon: the command split on spaces. A script beside the properties file
    // runs from there.
    let mut command: Vec<String> = executable.split(' ').filter(|s| !s.is_empty()).map(str::to_owned).collect();
    if let Some(first) = command.first_mut()
        && !first.contains('/')
        && dir.join(first.as_str()).is_file()
    {
        *first = format!("./{first}");
    }
    let stream = match (get("streamName"), get("streamArn")) {
        (Some(name), _) => name.to_owned(),
        (None, Some(arn)) => arn.rsplit('/').next().unwrap_or(arn).to_owned(),
        (None, None) => {
            problems.push("streamName (or streamArn) is required".to_owned());
            String::new()
        }
    };
    let Some(application) = get("applicationName") else {
        bail!("applicationName is required (it names the lease table and the checkpoints)");
    };
    let position = match get("initialPositionInStream").unwrap_or("LATEST") {
        p @ ("TRIM_HORIZON" | "LATEST") => p,
        "AT_TIMESTAMP" => {
            problems.push(
                "initialPositionInStream = AT_TIMESTAMP: weir run starts at TRIM_HORIZON or LATEST; use `weir replay --from` for a time window".into(),
            );
            "LATEST"
        }
        other => {
            problems.push(format!("initialPositionInStream = {other:?}: TRIM_HORIZON or LATEST"));
            "LATEST"
        }
    };
    let polling_set: Vec<&str> = POLLING.iter().copied().filter(|k| props.contains_key(*k)).collect();
    let efo = match get("retrievalMode").or_else(|| get("RetrievalMode")).map(str::to_ascii_uppercase).as_deref() {
        Some("FANOUT") => true,
        Some("POLLING") => false,
        Some("DEFAULT") | None => polling_set.is_empty(),
        Some(other) => {
            problems.push(format!("retrievalMode = {other:?}: FANOUT, POLLING or DEFAULT"));
            false
        }
    };
    let max_records = match get("maxRecords").map(str::parse::<u32>) {
        Some(Ok(n)) if (1..=10_000).contains(&n) => Some(n),
        Some(_) => {
            problems.push("maxRecords: a number of records from 1 to 10000".into());
            None
        }
        None => None,
    };
    for k in polling_set.iter().filter(|k| **k != "maxRecords") {
        warnings.push(format!("{k}: weir polls with its own GetRecords limits and pacing; ignored"));
    }
    for k in ["AwsCredentialsProvider", "AWSCredentialsProvider"] {
        if let Some(v) = get(k)
            && !v.starts_with("DefaultCredentialsProvider")
            && !v.starts_with("DefaultAWSCredentialsProviderChain")
        {
            warnings.push(format!(
                "{k} = {v}: weir uses the default credential chain (environment, profile, web identity, container and instance roles)"
            ));
        }
    }
    let failover = millis(props, "failoverTimeMillis")?;
    let shard_sync = millis(props, "shardSyncIntervalMillis")?;
    let timeout = millis(props, "timeoutInSeconds")?;
    let grace = millis(props, "shutdownGraceMillis")?;
    for k in props.keys() {
        let known = READ.contains(&k.as_str())
            || POLLING.contains(&k.as_str())
            || NOT_NEEDED.contains(&k.as_str())
            || k == "RetrievalMode";
        if !known {
            warnings.push(format!("{k}: not a property weir reads; ignored"));
        }
    }
    if !problems.is_empty() {
        bail!("{}", problems.join("\n"));
    }

    let mut t = String::new();
    let w = |t: &mut String, s: String| {
        t.push_str(&s);
        t.push('\n');
    };
    w(&mut t, "# Translated by `weir multilang` from a KCL MultiLangDaemon properties file.".into());
    w(&mut t, "[worker]".into());
    if let Some(id) = get("workerId") {
        w(&mut t, format!("id = {}", toml_str(id)));
    }
    w(&mut t, format!("initial_position = {}", toml_str(position)));
    if let Some(ms) = failover {
        w(&mut t, format!("failover = \"{ms}ms\""));
        // KCL renews at a third of the failover time.
        w(&mut t, format!("renew_interval = \"{}ms\"", (ms / 3).max(1)));
    }
    if let Some(ms) = shard_sync {
        w(&mut t, format!("shard_sync_interval = \"{ms}ms\""));
    }
    w(&mut t, "\n[stream]\nkind = \"kinesis\"".into());
    w(&mut t, format!("name = {}", toml_str(&stream)));
    if efo {
        w(&mut t, format!("efo_consumer = {}", toml_str(get("consumerName").unwrap_or(application))));
    }
    if let Some(n) = max_records {
        w(&mut t, format!("max_records = {n}"));
    }
    w(&mut t, "\n[leases]".into());
    match options.sqlite {
        Some(path) => {
            w(&mut t, "kind = \"sqlite\"".into());
            w(&mut t, format!("path = {}", toml_str(&path.display().to_string())));
        }
        None => {
            // Not the KCL application's own table: its items have another schema.
            let table = format!("{}-weir", get("tableName").unwrap_or(application));
            w(&mut t, "kind = \"dynamodb\"".into());
            w(&mut t, format!("table = {}", toml_str(&table)));
            w(&mut t, "create_table = true".into());
        }
    }
    w(&mut t, format!("namespace = {}", toml_str(application)));
    w(&mut t, "\n[aws]".into());
    if let Some(r) = get("regionName") {
        w(&mut t, format!("region = {}", toml_str(r)));
    }
    if let Some(e) = get("kinesisEndpoint") {
        w(&mut t, format!("kinesis_endpoint_url = {}", toml_str(&endpoint(e))));
    }
    if let Some(e) = get("dynamoDBEndpoint") {
        w(&mut t, format!("dynamodb_endpoint_url = {}", toml_str(&endpoint(e))));
    }
    if let Some(listen) = options.listen {
        w(&mut t, format!("\n[http]\nlisten = {}", toml_str(listen)));
    }
    w(&mut t, "\n[[consumers]]\ntype = \"multilang\"".into());
    w(&mut t, format!("name = {}", toml_str(application)));
    let list: Vec<String> = command.iter().map(|c| toml_str(c)).collect();
    w(&mut t, format!("command = [{}]", list.join(", ")));
    w(&mut t, format!("cwd = {}", toml_str(&dir.display().to_string())));
    if let Some(s) = timeout {
        w(&mut t, format!("timeout = \"{s}s\""));
    }
    if let Some(ms) = grace {
        w(&mut t, format!("shutdown_grace = \"{ms}ms\""));
    }
    let _ = writeln!(t);
    Ok(Translated { toml: t, warnings })
}

/// KCL accepts endpoints without a scheme (`localhost:4567`).
fn endpoint(e: &str) -> String {
    if e.contains("://") { e.to_owned() } else { format!("https://{e}") }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn java_properties_syntax() {
        let p = parse(
            "# comment\n! also\nexecutableName = sample_kclpy_app.py\nstreamName: s1\nregionName us-east-1\n\
             long = a \\\n    b\nescaped\\ key = x\\ty\nunicode = \\u00e9\nempty\n",
        );
        assert_eq!(p["executableName"], "sample_kclpy_app.py");
        assert_eq!(p["streamName"], "s1");
        assert_eq!(p["regionName"], "us-east-1");
        assert_eq!(p["long"], "a b");
        assert_eq!(p["escaped key"], "x\ty");
        assert_eq!(p["unicode"], "é");
        assert_eq!(p["empty"], "");
    }

    #[test]
    fn the_kclpy_sample_translates() {
        let p = parse(
            "executableName = sample_kclpy_app.py\nstreamName = kclpysample\napplicationName = PythonKCLSample\n\
             AwsCredentialsProvider = DefaultCredentialsProvider\nprocessingLanguage = python/3.8\n\
             initialPositionInStream = TRIM_HORIZON\nregionName = us-east-1\nmetricsLevel = NONE\nfrobnicate = 1\n",
        );
        let t = translate(&p, Path::new("/app"), &Options { sqlite: None, listen: None }).unwrap();
        assert!(t.toml.contains("name = \"kclpysample\""), "{}", t.toml);
        assert!(t.toml.contains("efo_consumer = \"PythonKCLSample\""), "{}", t.toml);
        assert!(t.toml.contains("table = \"PythonKCLSample-weir\""), "{}", t.toml);
        assert!(t.toml.contains("initial_position = \"TRIM_HORIZON\""), "{}", t.toml);
        assert!(t.toml.contains("command = [\"sample_kclpy_app.py\"]"), "{}", t.toml);
        assert_eq!(t.warnings, vec!["frobnicate: not a property weir reads; ignored".to_owned()]);
        let p = parse("executableName = x\nstreamName = s\napplicationName = a\nmaxRecords = 100\n");
        let t = translate(&p, Path::new("/app"), &Options { sqlite: Some(Path::new("l.db")), listen: None }).unwrap();
        assert!(!t.toml.contains("efo_consumer"), "polling properties select polling: {}", t.toml);
        assert!(t.toml.contains("max_records = 100"), "maxRecords is kept: {}", t.toml);
        assert!(t.warnings.is_empty(), "{:?}", t.warnings);
        assert!(t.toml.contains("kind = \"sqlite\""), "{}", t.toml);
        let p =
            parse("executableName = x\nstreamName = s\napplicationName = a\ninitialPositionInStream = AT_TIMESTAMP\n");
        let e = translate(&p, Path::new("/"), &Options { sqlite: None, listen: None }).err().unwrap().to_string();
        assert!(e.contains("AT_TIMESTAMP"), "{e}");
    }
}
