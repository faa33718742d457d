//! Wiring a worker from its config: the stream, the lease table, the SDK settings of
//! each service, and what consumers are built with. `weir run`, `weir replay`, `weir
//! demo` and the lease commands share it.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use tokio_util::sync::CancellationToken;
use weir_aws::{DynamoDbLeaseTable, KinesisOptions, KinesisStream};
use weir_core::Clock;
use weir_core::ports::{LeaseTable, ShardReader, StreamCatalog};
use weir_local::{GeneratorConfig, McpEventGenerator, MemoryStream, SqliteLeaseTable, StreamOptions};
use weir_runtime::TokioClock;
use weir_runtime::consumers::OnlyStreams;
use weir_runtime::streams::{StreamPart, Streams};

use crate::config::{Config, LeasesKind, StreamKind};
use crate::plugin::BuildEnv;

/// Wraps the consumers whose config entry names `streams` so they get only those
/// streams' records.
pub(crate) fn only_their_streams(
    consumers: Vec<Box<dyn weir_core::Consumer>>,
    config: &Config,
    streams: &Streams,
) -> Vec<Box<dyn weir_core::Consumer>> {
    consumers
        .into_iter()
        .map(|c| {
            let reads = config.consumers.iter().find(|e| e.name == c.name()).and_then(|e| e.streams.clone());
            match reads {
                Some(reads) => Box::new(OnlyStreams::new(c, streams.clone(), reads)) as Box<dyn weir_core::Consumer>,
                None => c,
            }
        })
        .collect()
}

/// `<hostname>-<pid>-<random>`: unique per process.
pub fn default_worker_id() -> String {
    let host = std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "weir".into());
    format!("{host}-{}-{:04x}", std::process::id(), rand::random::<u16>())
}

/// Cancels `token` on SIGTERM or Ctrl-C.
pub fn cancel_on_signal(token: CancellationToken) {
    tokio::spawn(async move {
        #[cfg(unix)]
        {
            let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(e) => {
                    tracing::error!(error = %e, "cannot listen for SIGTERM");
                    return;
                }
            };
            // The drain starts first, then it is logged: a log line never stands
            // between a signal and the drain.
            let signal = tokio::select! {
                _ = term.recv() => "SIGTERM",
                _ = tokio::signal::ctrl_c() => "Ctrl-C",
            };
            token.cancel();
            tracing::info!("{signal}: draining");
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
            token.cancel();
        }
    });
}

/// Feeds synthetic MCP events into `stream` at `rate` per second until `stop` (or
/// until `limit` events were sent). With `incident = (after, tenant, error_rate)`, that
/// tenant starts failing `after` the start.
pub fn spawn_generator(
    stream: MemoryStream,
    config: GeneratorConfig,
    rate: u32,
    limit: Option<u64>,
    incident: Option<(Duration, u32, f64)>,
    stop: CancellationToken,
) -> tokio::task::JoinHandle<u64> {
    tokio::spawn(async move {
        let mut generator = McpEventGenerator::new(config);
        let started = tokio::time::Instant::now();
        let mut incident = incident;
        let mut tick = tokio::time::interval(Duration::from_millis(10));
        let per_tick = f64::from(rate) / 100.0;
        let (mut owed, mut sent) = (0.0, 0u64);
        loop {
            tokio::select! {
                _ = stop.cancelled() => return sent,
                _ = tick.tick() => {
                    if let Some((after, tenant, rate)) = incident
                        && started.elapsed() >= after
                    {
                        generator.set_hot_tenant(tenant, rate);
                        incident = None;
                    }
                    owed += per_tick;
                    while owed >= 1.0 && limit.is_none_or(|l| sent < l) {
                        let (key, data) = generator.next_event(stream.now());
                        stream.put(&key, data);
                        owed -= 1.0;
                        sent += 1;
                    }
                }
            }
        }
    })
}

/// The adapters a config selects.
pub(crate) struct Wired {
    pub table: Arc<dyn LeaseTable>,
    pub reader: Arc<dyn ShardReader>,
    pub catalog: Arc<dyn StreamCatalog>,
    /// The in-process streams the config uses (each gets a generator).
    pub memory: Vec<MemoryStream>,
    /// With several streams, the joined streams (to give consumers only theirs).
    pub streams: Option<Streams>,
}

/// Reader, catalog and (for the in-process stream) the stream itself.
pub(crate) type StreamParts = (Arc<dyn ShardReader>, Arc<dyn StreamCatalog>, Option<MemoryStream>);

/// The stream the config names: reader, catalog, and the in-process stream when it is one.
pub(crate) async fn wire_stream(config: &Config, clock: Arc<TokioClock>) -> Result<StreamParts> {
    Ok(match config.stream.kind {
        StreamKind::Memory => {
            let options = StreamOptions { shards: config.stream.shards, ..StreamOptions::default() };
            let stream = MemoryStream::new(options, clock);
            (Arc::new(stream.clone()), Arc::new(stream.clone()), Some(stream))
        }
        StreamKind::Kinesis => {
            let options = KinesisOptions {
                efo_consumer: config.stream.efo_consumer_name(&config.leases.namespace),
                max_records: i32::try_from(config.stream.max_records).unwrap_or(10_000),
                max_bytes_per_call: config.stream.max_bytes_per_call,
                ..KinesisOptions::default()
            };
            let stream = open_kinesis(config, options).await?;
            (Arc::new(stream.clone()), Arc::new(stream), None)
        }
    })
}

/// The Kinesis stream the config names, read with `options`.
async fn open_kinesis(config: &Config, options: KinesisOptions) -> Result<KinesisStream> {
    let aws = &config.aws;
    let client = weir_aws::clients::kinesis(&aws.endpoints()).await;
    KinesisStream::open(client, &config.stream.name, options)
        .await
        .map_err(|e| anyhow::anyhow!("stream {}: {e}", config.stream.name))
}

/// Wires the config's lease table and stream(s), and claims the lease namespace for
/// them (see [`crate::namespace`]). The streams are always joined (see
/// [`weir_runtime::streams`]), one stream too, so that leases of streams the config
/// does not name (`stream:shardId` keys) are left alone.
pub(crate) async fn wire(config: &Config, clock: Arc<TokioClock>) -> Result<Wired> {
    let table = lease_table(config).await?;
    let names: Vec<String> = config.stream_list().iter().map(|s| s.name.clone()).collect();
    let bare = if config.streams.len() < 2 {
        crate::namespace::claim(table.as_ref(), &config.stream.name, &config.leases.namespace).await?;
        config.stream.name.clone()
    } else {
        crate::namespace::claim_streams(table.as_ref(), &names, &config.leases.namespace).await?
    };
    let mut parts = Vec::new();
    let mut memory = Vec::new();
    for section in config.stream_list() {
        let one = config.clone().with_one_stream(Some(&section.name))?;
        let (reader, catalog, m) = wire_stream(&one, clock.clone()).await?;
        memory.extend(m);
        parts.push(StreamPart { name: section.name.clone(), bare: section.name == bare, reader, catalog });
    }
    let streams = Streams::new(parts);
    Ok(Wired {
        table,
        reader: Arc::new(streams.clone()),
        catalog: Arc::new(streams.clone()),
        memory,
        streams: (config.streams.len() > 1).then_some(streams),
    })
}

/// The config's Kinesis streams, joined as the fleet reads them, for commands that
/// list or look at shards (polling; no enhanced fan-out consumer is registered,
/// nothing is claimed). The in-process stream exists only inside the process that
/// runs it.
pub(crate) async fn fleet_streams(config: &Config, table: &dyn LeaseTable) -> Result<Streams> {
    let bare = table.namespace_meta().await?.map(|m| m.stream);
    let mut parts = Vec::new();
    for section in config.stream_list() {
        let one = config.clone().with_one_stream(Some(&section.name))?;
        if one.stream.kind == StreamKind::Memory {
            anyhow::bail!(
                "stream.kind = \"memory\": the in-process stream lives only inside `weir run`; this command needs a Kinesis stream"
            );
        }
        let stream = Arc::new(open_kinesis(&one, KinesisOptions::default()).await?);
        parts.push(StreamPart {
            name: section.name.clone(),
            bare: bare.as_deref().is_none_or(|b| b == section.name),
            reader: stream.clone(),
            catalog: stream,
        });
    }
    Ok(Streams::new(parts))
}

/// The lease table the config names (namespace included).
pub(crate) async fn lease_table(config: &Config) -> Result<Arc<dyn LeaseTable>> {
    let aws = &config.aws;
    let table: Arc<dyn LeaseTable> = match config.leases.kind {
        LeasesKind::Sqlite => {
            if let Some(dir) = config.leases.path.parent().filter(|p| !p.as_os_str().is_empty()) {
                std::fs::create_dir_all(dir)
                    .with_context(|| format!("leases.path: cannot create {}", dir.display()))?;
            }
            Arc::new(
                SqliteLeaseTable::open(&config.leases.path, &config.leases.namespace)
                    .with_context(|| format!("leases.path: cannot open {}", config.leases.path.display()))?,
            )
        }
        LeasesKind::Dynamodb => {
            let client = weir_aws::clients::dynamodb(&aws.endpoints()).await;
            let name = config.leases.table.clone().unwrap_or_default();
            Arc::new(
                DynamoDbLeaseTable::open(client, &name, &config.leases.namespace, config.leases.create_table)
                    .await
                    .with_context(|| format!("leases.table {name}"))?,
            )
        }
    };
    Ok(table)
}

/// What the registry needs to build `config`'s consumers for `worker_id`.
pub(crate) fn build_env(config: &Config, worker_id: &str, clock: Arc<dyn Clock>) -> BuildEnv {
    BuildEnv {
        worker_id: worker_id.to_owned(),
        clock,
        aws: Arc::new(weir_aws::clients::Clients::new(config.aws.endpoints())),
        stream_name: config.stream.name.clone(),
        archive_prefix: None,
        replay_job: None,
    }
}
