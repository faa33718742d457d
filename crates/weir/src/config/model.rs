use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Result, bail};
use serde::{Deserialize, Serialize};

/// The whole configuration of `weir run`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// The worker's lease timing and queues.
    pub worker: WorkerSection,
    /// Where records come from (one stream).
    pub stream: StreamSection,
    /// Several streams read by one fleet, each a table like `[stream]` (instead of
    /// `[stream]`). Leases of all of them live in one namespace and are balanced
    /// together; consumers read all of them unless their `streams` says otherwise. A
    /// stream removed from this list is left alone: its leases stay, unread.
    pub streams: Vec<StreamSection>,
    /// The synthetic MCP events of the in-process stream (`stream.kind = "memory"`).
    pub generator: GeneratorSection,
    /// Where leases and checkpoints live.
    pub leases: LeasesSection,
    /// The consumers every record is dispatched to.
    pub consumers: Vec<ConsumerEntry>,
    /// Metrics and health endpoints.
    pub http: HttpSection,
    /// Metrics published beyond `/metrics` (CloudWatch).
    pub metrics: MetricsSection,
    /// Region, profile and endpoints of AWS services (production mode).
    pub aws: AwsSection,
}

/// `[aws]`: how to reach AWS (or emulators). Credentials come from the standard chain.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AwsSection {
    /// Region; default from the environment or profile.
    pub region: Option<String>,
    /// Named profile.
    pub profile: Option<String>,
    /// Endpoint for every service (an emulator).
    pub endpoint_url: Option<String>,
    /// Kinesis endpoint, overriding `endpoint_url`.
    pub kinesis_endpoint_url: Option<String>,
    /// DynamoDB endpoint, overriding `endpoint_url`.
    pub dynamodb_endpoint_url: Option<String>,
    /// S3 endpoint, overriding `endpoint_url`.
    pub s3_endpoint_url: Option<String>,
    /// Lambda endpoint (the archiver's Lambda transform), overriding `endpoint_url`.
    pub lambda_endpoint_url: Option<String>,
    /// SNS endpoint (alert sinks), overriding `endpoint_url`.
    pub sns_endpoint_url: Option<String>,
    /// Glue endpoint (the archiver's Parquet table, Iceberg tables), overriding
    /// `endpoint_url`.
    pub glue_endpoint_url: Option<String>,
    /// S3 Tables endpoint (Iceberg tables in a table bucket), overriding `endpoint_url`.
    pub s3tables_endpoint_url: Option<String>,
    /// Path-style S3 addressing (emulators).
    pub s3_force_path_style: bool,
}

impl AwsSection {
    /// The endpoints weir-aws builds its clients with.
    pub fn endpoints(&self) -> weir_aws::clients::Endpoints {
        weir_aws::clients::Endpoints {
            region: self.region.clone(),
            profile: self.profile.clone(),
            endpoint_url: self.endpoint_url.clone(),
            kinesis: self.kinesis_endpoint_url.clone(),
            dynamodb: self.dynamodb_endpoint_url.clone(),
            s3: self.s3_endpoint_url.clone(),
            lambda: self.lambda_endpoint_url.clone(),
            sns: self.sns_endpoint_url.clone(),
            glue: self.glue_endpoint_url.clone(),
            s3tables: self.s3tables_endpoint_url.clone(),
            s3_force_path_style: self.s3_force_path_style,
        }
    }
}

/// `[worker]`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WorkerSection {
    /// Unique id of this process; default `<hostname>-<pid>-<random>`. A second
    /// process started with the id of a running one refuses to start; a process
    /// restarted after a crash with the same id waits `failover` before it starts.
    pub id: Option<String>,
    /// A lease not renewed for this long may be taken by another worker.
    #[serde(with = "humantime_serde")]
    pub failover: Duration,
    /// How often held leases are renewed; at most half of `failover`.
    #[serde(with = "humantime_serde")]
    pub renew_interval: Duration,
    /// How often to look for leases to take or steal: a lease cycle reads the worker
    /// records (about 120 bytes a worker), a sample of the leases only when they show
    /// something to take, and every lease every 30 to 60 cycles. A crashed worker's
    /// leases are taken within `failover` plus about two of these.
    #[serde(with = "humantime_serde")]
    pub taker_interval: Duration,
    /// How often to list shards and create leases for new ones.
    #[serde(with = "humantime_serde")]
    pub shard_sync_interval: Duration,
    /// Deadline for consumers to flush at shutdown.
    #[serde(with = "humantime_serde")]
    pub shutdown_timeout: Duration,
    /// Batches a consumer may have queued per shard before it counts as backed up.
    pub queue_capacity: usize,
    /// Record bytes a consumer may have queued per shard before it counts as backed
    /// up (default 8 MiB, as KCL's prefetch); with `queue_capacity` it bounds the
    /// memory a slow consumer makes the worker hold.
    pub queue_bytes: usize,
    /// A consumer backed up this long is detached and catches up on its own.
    #[serde(with = "humantime_serde")]
    pub detach_after: Duration,
    /// How often acknowledged positions are checkpointed.
    #[serde(with = "humantime_serde")]
    pub checkpoint_interval: Duration,
    /// How often consumers are ticked (the archiver's interval flushes and retries).
    #[serde(with = "humantime_serde")]
    pub tick_interval: Duration,
    /// Where consumers start on shards with no checkpoint: `TRIM_HORIZON` or `LATEST`.
    pub initial_position: InitialPosition,
    /// `/readyz` (and so `weir health`, the image's health check) answers 503 once a
    /// failure has lasted this long: a shard's reads failing or not answering, the
    /// lease table's heartbeat or listing failing, lease renewals failing (for a worker
    /// holding no lease, its takes), or a consumer's calls failing on a held shard. At
    /// least twice `taker_interval`; shorter failures (a throttled read, a retried
    /// call) do not count.
    #[serde(with = "humantime_serde")]
    pub unhealthy_after: Duration,
}

impl Default for WorkerSection {
    fn default() -> Self {
        Self {
            id: None,
            failover: Duration::from_secs(10),
            renew_interval: Duration::from_millis(3_333),
            taker_interval: Duration::from_millis(3_333),
            shard_sync_interval: Duration::from_secs(60),
            shutdown_timeout: Duration::from_secs(30),
            queue_capacity: 16,
            queue_bytes: weir_runtime::DEFAULT_QUEUE_BYTES,
            detach_after: Duration::from_secs(5),
            checkpoint_interval: Duration::from_secs(1),
            tick_interval: Duration::from_secs(1),
            initial_position: InitialPosition::TrimHorizon,
            unhealthy_after: Duration::from_secs(60),
        }
    }
}

/// Where to start on a shard without checkpoints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum InitialPosition {
    /// The oldest retained record.
    TrimHorizon,
    /// Only new records.
    Latest,
}

/// Which stream to read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StreamKind {
    /// The in-process stream with synthetic MCP events (embedded mode).
    Memory,
    /// A Kinesis data stream.
    Kinesis,
}

/// `[stream]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StreamSection {
    /// `memory` (embedded) or `kinesis`.
    pub kind: StreamKind,
    /// Stream name.
    pub name: String,
    /// Kinesis: read live through enhanced fan-out, as the consumer `efo_consumer` or,
    /// without it, `weir-<leases.namespace>` (the application's own: two applications
    /// reading one stream never share a consumer). Off (and no `efo_consumer`): polling.
    pub efo: bool,
    /// Kinesis: the enhanced fan-out consumer's name (registered if missing); setting it
    /// reads through enhanced fan-out. `weir replay --efo` reads as its own consumer,
    /// `<this>-replay-<job>`, and deregisters it when the job ends.
    pub efo_consumer: Option<String>,
    /// Kinesis, polling: most records per `GetRecords` call (1-10,000).
    pub max_records: u32,
    /// Kinesis, polling: about how many bytes one `GetRecords` call asks for
    /// (1,024-10,485,760), counting each record's data and partition key plus 256 bytes,
    /// judged from the sizes the shard's last calls returned and capped by
    /// `max_records`. Each shard's response is held while it is decoded (about 2.4 × its
    /// records' bytes), so this bounds a worker's memory: roughly 25 MiB plus shards ×
    /// 2.4 × this. A shard serves 2 MB and 5 calls
    /// a second, so the 1 MiB default still reads a shard as fast as Kinesis allows.
    pub max_bytes_per_call: u64,
    /// Memory: open shards at start.
    pub shards: usize,
    /// Moved to `generator.rate` (kept only to say so).
    #[serde(skip_serializing)]
    pub rate: Option<serde_json::Value>,
    /// Moved to `generator.tenants` (kept only to say so).
    #[serde(skip_serializing)]
    pub tenants: Option<serde_json::Value>,
    /// Moved to `generator.error_rate` (kept only to say so).
    #[serde(skip_serializing)]
    pub error_rate: Option<serde_json::Value>,
    /// Moved to `generator.malformed_rate` (kept only to say so).
    #[serde(skip_serializing)]
    pub malformed_rate: Option<serde_json::Value>,
}

impl Default for StreamSection {
    fn default() -> Self {
        Self {
            kind: StreamKind::Memory,
            name: "mcp-events".into(),
            efo: false,
            efo_consumer: None,
            max_records: 10_000,
            max_bytes_per_call: 1 << 20,
            shards: 4,
            rate: None,
            tenants: None,
            error_rate: None,
            malformed_rate: None,
        }
    }
}

/// `[generator]`: the synthetic MCP tool-call events the in-process stream carries
/// (`stream.kind = "memory"`; `weir demo` sets its own).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GeneratorSection {
    /// Events per second.
    pub rate: u32,
    /// Tenants in the traffic.
    pub tenants: u32,
    /// Share of failed tool calls (0–1).
    pub error_rate: f64,
    /// Share of malformed records (0–1).
    pub malformed_rate: f64,
}

impl Default for GeneratorSection {
    fn default() -> Self {
        Self { rate: 500, tenants: 20, error_rate: 0.02, malformed_rate: 0.001 }
    }
}

/// Where leases live.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LeasesKind {
    /// A SQLite file (embedded mode, one host).
    Sqlite,
    /// A DynamoDB table.
    Dynamodb,
}

/// `[leases]`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LeasesSection {
    /// `sqlite` or `dynamodb`.
    pub kind: LeasesKind,
    /// SQLite: database file; several processes on one host may share it.
    pub path: PathBuf,
    /// DynamoDB: table name.
    pub table: Option<String>,
    /// DynamoDB: create the table (on-demand capacity) if it does not exist.
    pub create_table: bool,
    /// Application name: lease items are scoped to it.
    pub namespace: String,
}

impl Default for LeasesSection {
    fn default() -> Self {
        Self {
            kind: LeasesKind::Sqlite,
            path: PathBuf::from("weir-leases.db"),
            table: None,
            create_table: false,
            namespace: "weir".into(),
        }
    }
}

/// One `[[consumers]]` entry: `type` picks a registered kind (`weir config check`
/// lists them), `name` keys the consumer's checkpoints; every other field belongs to
/// the kind (see the kinds below).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ConsumerEntry {
    /// The consumer kind: `count`, `log`, `files`, `archiver`, `alerting`,
    /// `enrichment`, `iceberg`, `multilang`, or a plugin's.
    #[serde(rename = "type")]
    pub kind: String,
    /// Consumer name (keys its checkpoints; letters, digits, '-' or '_'; unique).
    pub name: String,
    /// With `[[streams]]`: the names of the streams this consumer reads (default:
    /// all). Records of the others are acknowledged without reaching it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub streams: Option<Vec<String>>,
    /// The kind's own fields.
    #[serde(flatten)]
    pub settings: serde_json::Map<String, serde_json::Value>,
}

impl ConsumerEntry {
    /// An entry from its kind, name and fields (a JSON object; anything else is no fields).
    pub fn new(kind: &str, name: &str, settings: serde_json::Value) -> Self {
        let settings = match settings {
            serde_json::Value::Object(m) => m,
            _ => serde_json::Map::new(),
        };
        Self { kind: kind.to_owned(), name: name.to_owned(), streams: None, settings }
    }

    /// The consumer's name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl Config {
    /// The streams to read: `[[streams]]`, or `[stream]` alone.
    pub fn stream_list(&self) -> Vec<&StreamSection> {
        if self.streams.is_empty() { vec![&self.stream] } else { self.streams.iter().collect() }
    }

    /// This config with only the stream named `name` (of `[[streams]]`, or `[stream]`
    /// renamed when there is no list): for commands that read one stream.
    pub fn with_one_stream(mut self, name: Option<&str>) -> Result<Self> {
        match (name, self.streams.len()) {
            (Some(n), 0) => self.stream.name = n.to_owned(),
            (None, 0) => {}
            (None, 1) => self.stream = self.streams.remove(0),
            (None, _) => bail!(
                "the config lists {} streams; name one with --stream ({})",
                self.streams.len(),
                self.streams.iter().map(|s| s.name.as_str()).collect::<Vec<_>>().join(", ")
            ),
            (Some(n), _) => {
                let Some(i) = self.streams.iter().position(|s| s.name == n) else {
                    bail!(
                        "stream {n:?} is not one of the config's [[streams]] ({})",
                        self.streams.iter().map(|s| s.name.as_str()).collect::<Vec<_>>().join(", ")
                    );
                };
                self.stream = self.streams.swap_remove(i);
            }
        }
        self.streams.clear();
        Ok(self)
    }

    /// How `weir run` reads its streams, as `/status` says: one stream's
    /// [`StreamSection::read_kind`], that of all of them when they agree, `polling`
    /// for Kinesis streams read both ways, `mixed` otherwise.
    pub fn read_kind(&self) -> &'static str {
        let kinds: std::collections::BTreeSet<&str> = self.stream_list().iter().map(|s| s.read_kind()).collect();
        match kinds.len() {
            1 => kinds.into_iter().next().unwrap_or("mixed"),
            _ if !kinds.contains("in-process") => "polling",
            _ => "mixed",
        }
    }

    /// How the streams are read, in words (start-up log lines and `weir config check`);
    /// `efo` is whether live reads go through the enhanced fan-out consumers.
    pub fn describe_stream(&self, efo: bool) -> String {
        let ns = &self.leases.namespace;
        let describe = |s: &&StreamSection| s.describe(efo, self.generator.rate, s.efo_consumer_name(ns).as_deref());
        self.stream_list().iter().map(describe).collect::<Vec<_>>().join("; ")
    }
}

impl StreamSection {
    /// How `weir run` reads this stream: `enhanced fan-out`, `polling` or `in-process`.
    pub fn read_kind(&self) -> &'static str {
        match self.kind {
            StreamKind::Memory => "in-process",
            StreamKind::Kinesis if self.efo || self.efo_consumer.is_some() => "enhanced fan-out",
            StreamKind::Kinesis => "polling",
        }
    }

    /// The enhanced fan-out consumer live reads go through (`None`: polling), for an
    /// application whose lease namespace is `namespace`.
    pub fn efo_consumer_name(&self, namespace: &str) -> Option<String> {
        match self.kind {
            StreamKind::Memory => None,
            StreamKind::Kinesis => {
                self.efo_consumer.clone().or_else(|| self.efo.then(|| derived_efo_consumer(namespace)))
            }
        }
    }

    /// How this stream is read, in words; `rate` is the generator's (in-process),
    /// `consumer` the enhanced fan-out consumer (see [`Self::efo_consumer_name`]).
    pub fn describe(&self, efo: bool, rate: u32, consumer: Option<&str>) -> String {
        match self.kind {
            StreamKind::Memory => {
                format!("in-process stream {:?} ({} shards, synthetic MCP events at {rate}/s)", self.name, self.shards)
            }
            StreamKind::Kinesis => match (consumer, efo) {
                (Some(consumer), true) => {
                    format!("Kinesis stream {:?} through enhanced fan-out consumer {consumer:?}", self.name)
                }
                _ => {
                    let o = weir_aws::KinesisOptions::default();
                    format!(
                        "Kinesis stream {:?} by polling (GetRecords of about {} KiB, up to {} records, at least {} ms apart per shard, {} ms at the tip)",
                        self.name,
                        self.max_bytes_per_call / 1_024,
                        self.max_records,
                        o.poll_interval.as_millis(),
                        o.idle_poll_interval.as_millis()
                    )
                }
            },
        }
    }
}

impl LeasesSection {
    /// Where leases live, in words.
    pub fn describe(&self) -> String {
        match self.kind {
            LeasesKind::Sqlite => format!("SQLite {}, namespace {:?}", self.path.display(), self.namespace),
            LeasesKind::Dynamodb => {
                format!("DynamoDB table {}, namespace {:?}", self.table.as_deref().unwrap_or_default(), self.namespace)
            }
        }
    }
}

/// `[http]`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HttpSection {
    /// Address of `/metrics`, `/healthz` and `/readyz`; empty (`listen = ""`,
    /// `WEIR_HTTP__LISTEN=`) to disable; port 0 for a free port, logged at start (several
    /// workers on one host). Default 127.0.0.1:9090, or `WEIR_HTTP_LISTEN` when set (the
    /// image sets 0.0.0.0:9090 so that its probes reach it).
    #[serde(deserialize_with = "listen_address")]
    pub listen: Option<SocketAddr>,
}

/// `http.listen`: an address, or empty for none.
fn listen_address<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<SocketAddr>, D::Error> {
    use serde::de::Error;
    let text = Option::<String>::deserialize(d)?;
    match text.as_deref().map(str::trim) {
        None | Some("") => Ok(None),
        Some(t) => t.parse().map(Some).map_err(|e| {
            D::Error::custom(format!("{t:?} is not an address such as 127.0.0.1:9090 (empty to disable): {e}"))
        }),
    }
}

impl Default for HttpSection {
    fn default() -> Self {
        Self { listen: Some(SocketAddr::from(([127, 0, 0, 1], 9090))) }
    }
}

/// `[metrics]`: metrics published beyond the Prometheus endpoint.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MetricsSection {
    /// Write CloudWatch embedded metric format lines to stdout (CloudWatch Logs turns
    /// them into metrics: `ArchiveDataFreshness`, `ArchiveErrorRecords`,
    /// `MillisBehindLatest`, ...; the deploy/ alarms use them).
    pub cloudwatch: bool,
    /// CloudWatch namespace of those metrics.
    pub namespace: String,
    /// How often a line is written.
    #[serde(with = "humantime_serde")]
    pub interval: Duration,
}

impl Default for MetricsSection {
    fn default() -> Self {
        Self { cloudwatch: false, namespace: "weir".into(), interval: Duration::from_secs(60) }
    }
}

impl Config {
    /// Cross-field checks, and each consumer's section checked by its registered kind;
    /// errors name the field (every consumer's problem at once). Returns the kinds'
    /// warnings, each as `<kind> "<name>": <warning>`.
    pub fn validate(&self, registry: &crate::plugin::Registry) -> Result<Vec<String>> {
        let mut problems = self.section_problems();
        let mut warnings = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for (i, c) in self.consumers.iter().enumerate() {
            let name = c.name();
            if name.is_empty() || !name.chars().all(|ch| ch.is_ascii_alphanumeric() || ch == '-' || ch == '_') {
                problems.push(format!(
                    "field `consumers[{i}].name`: {name:?} must be non-empty letters, digits, '-' or '_'"
                ));
            } else if !seen.insert(name) {
                problems.push(format!(
                    "field `consumers[{i}].name`: {name:?} is used twice; names key checkpoints and must be unique"
                ));
            }
            match registry.check(i, c) {
                Ok(ws) => warnings.extend(ws.into_iter().map(|w| format!("{} {name:?}: {w}", c.kind))),
                Err(e) => problems.push(format!("{e:#}")),
            }
        }
        problems.extend(super::lease_size::problems(self));
        if !problems.is_empty() {
            bail!("{}", problems.join("\n"));
        }
        Ok(warnings)
    }

    /// Every problem of the sections other than the consumers', each naming its field.
    fn section_problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        let mut problem = |field: &str, what: String| problems.push(format!("field `{field}`: {what}"));
        let w = &self.worker;
        if w.failover < Duration::from_millis(100) {
            problem("worker.failover", "must be at least 100ms".into());
        }
        if w.renew_interval.is_zero() || w.renew_interval * 2 > w.failover {
            problem(
                "worker.renew_interval",
                format!("must be positive and at most half of worker.failover ({:?})", w.failover),
            );
        }
        if w.queue_capacity == 0 {
            problem("worker.queue_capacity", "must be at least 1".into());
        }
        if w.queue_bytes == 0 {
            problem("worker.queue_bytes", "must be at least 1".into());
        }
        if w.unhealthy_after < w.taker_interval * 2 {
            problem(
                "worker.unhealthy_after",
                format!("must be at least twice worker.taker_interval ({:?})", w.taker_interval),
            );
        }
        if w.id.as_deref().is_some_and(|id| id.is_empty() || id == weir_core::lease::RELEASE_REQUEST) {
            problem(
                "worker.id",
                format!(
                    "must not be empty or {:?} (that id asks a worker to release a lease)",
                    weir_core::lease::RELEASE_REQUEST
                ),
            );
        }
        if !self.streams.is_empty() && self.stream != StreamSection::default() {
            problem("stream", "give either [stream] or [[streams]], not both".into());
        }
        let sections: Vec<(String, &StreamSection)> = if self.streams.is_empty() {
            vec![("stream".into(), &self.stream)]
        } else {
            self.streams.iter().enumerate().map(|(i, s)| (format!("streams[{i}]"), s)).collect()
        };
        let mut names = std::collections::BTreeSet::new();
        for (at, stream) in &sections {
            if stream.shards == 0 || stream.shards > 1024 {
                problem(&format!("{at}.shards"), "must be between 1 and 1024".into());
            }
            if stream.max_records == 0 || stream.max_records > 10_000 {
                problem(&format!("{at}.max_records"), "must be between 1 and 10000 (GetRecords' limit)".into());
            }
            if !(1_024..=10 << 20).contains(&stream.max_bytes_per_call) {
                problem(
                    &format!("{at}.max_bytes_per_call"),
                    "must be between 1024 and 10485760 (10 MiB, GetRecords' limit)".into(),
                );
            }
            if stream.kind == StreamKind::Memory && stream.efo_consumer.is_some() {
                problem(&format!("{at}.efo_consumer"), "only for kind = \"kinesis\"".into());
            }
            if stream.kind == StreamKind::Memory && stream.efo {
                problem(&format!("{at}.efo"), "only for kind = \"kinesis\"".into());
            }
            if let Some(name) = stream.efo_consumer_name(&self.leases.namespace)
                && !is_efo_consumer_name(&name)
            {
                let field = if stream.efo_consumer.is_some() {
                    format!("{at}.efo_consumer")
                } else {
                    "leases.namespace".into()
                };
                problem(
                    &field,
                    format!(
                        "{name:?} cannot name an enhanced fan-out consumer (1-128 of A-Z a-z 0-9 _ . -); set {at}.efo_consumer"
                    ),
                );
            }
            let valid = !stream.name.is_empty()
                && stream.name.len() <= 128
                && stream.name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
            if !valid {
                problem(&format!("{at}.name"), "a Kinesis stream name: 1-128 of letters, digits, '_', '-', '.'".into());
            }
            if !names.insert(stream.name.as_str()) {
                problem(&format!("{at}.name"), format!("{:?} is listed twice", stream.name));
            }
        }
        for (i, c) in self.consumers.iter().enumerate() {
            let Some(reads) = &c.streams else { continue };
            if self.streams.is_empty() {
                problem(&format!("consumers[{i}].streams"), "only with [[streams]]".into());
            }
            for r in reads.iter().filter(|r| !names.contains(r.as_str())) {
                problem(&format!("consumers[{i}].streams"), format!("{r:?} is not one of the [[streams]]"));
            }
        }
        for (field, set) in [
            ("rate", &self.stream.rate),
            ("tenants", &self.stream.tenants),
            ("error_rate", &self.stream.error_rate),
            ("malformed_rate", &self.stream.malformed_rate),
        ] {
            if set.is_some() {
                problem(&format!("stream.{field}"), format!("moved to `generator.{field}` (section [generator])"));
            }
        }
        let g = &self.generator;
        for (field, v) in [("generator.error_rate", g.error_rate), ("generator.malformed_rate", g.malformed_rate)] {
            if !(0.0..=1.0).contains(&v) {
                problem(field, format!("must be between 0 and 1, got {v}"));
            }
        }
        if self.leases.kind == LeasesKind::Dynamodb && self.leases.table.as_deref().is_none_or(str::is_empty) {
            problem("leases.table", "required when leases.kind = \"dynamodb\"".into());
        }
        if self.metrics.cloudwatch
            && (self.metrics.interval < Duration::from_secs(1) || self.metrics.namespace.is_empty())
        {
            problem("metrics", "with cloudwatch = true, interval must be at least 1s and namespace non-empty".into());
        }
        if self.leases.namespace.is_empty() {
            problem("leases.namespace", "must not be empty".into());
        }
        if self.consumers.is_empty() {
            problem("consumers", "at least one consumer is needed".into());
        }
        problems
    }

    /// Runtime settings from `[worker]`.
    pub fn runtime(&self, worker_id: &str) -> weir_runtime::RuntimeConfig {
        let w = &self.worker;
        let mut r = weir_runtime::RuntimeConfig::new(worker_id.into());
        r.failover = w.failover;
        r.renew_interval = w.renew_interval;
        r.taker_interval = w.taker_interval;
        r.shard_sync_interval = w.shard_sync_interval;
        r.handoff_timeout = w.failover;
        r.shutdown_timeout = w.shutdown_timeout;
        r.queue_capacity = w.queue_capacity;
        r.queue_bytes = w.queue_bytes;
        r.detach_after = w.detach_after;
        r.checkpoint_interval = w.checkpoint_interval;
        r.tick_interval = w.tick_interval;
        r.initial_position = match w.initial_position {
            InitialPosition::TrimHorizon => weir_core::Checkpoint::TrimHorizon,
            InitialPosition::Latest => weir_core::Checkpoint::Latest,
        };
        r
    }
}

/// The enhanced fan-out consumer of an application with lease namespace `namespace`
/// when `efo = true` names none: `weir-<namespace>`.
pub fn derived_efo_consumer(namespace: &str) -> String {
    format!("weir-{namespace}")
}

/// Whether `name` is a valid Kinesis consumer name (`[a-zA-Z0-9_.-]+`, at most 128).
pub fn is_efo_consumer_name(name: &str) -> bool {
    (1..=128).contains(&name.len()) && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b))
}
