//! `weir doctor`: why a shard is not moving. It reads the lease table twice,
//! `--observe` apart, asks each worker named by `--worker` for its `/status`, and
//! reads each Kinesis shard's trim horizon, then explains every lease that is not
//! progressing:
//! - from the table ([`leases`]): parents some consumer has not finished (named), a
//!   holder whose renewals stopped, a lease nobody holds, a handoff that does not
//!   complete, a checkpoint that did not move;
//! - from the workers ([`workers`]): a consumer detached and failing (its last error,
//!   which says when an archiver refuses batches), a read that stopped answering (a
//!   silent enhanced fan-out subscription);
//! - from the stream ([`retention`]): a checkpoint behind the trim horizon.
//!
//! Exit status 1 when something is stuck.

mod leases;
mod retention;
mod workers;

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Args;
use weir_core::ConsumerName;

use crate::config::StreamKind;
use crate::plugin::Registry;

/// `weir doctor …`.
#[derive(Debug, Args)]
pub(crate) struct DoctorArgs {
    /// The TOML config file (its `[leases]`, `[stream]` and consumers are used).
    #[arg(long, short)]
    config: PathBuf,
    /// How long to watch the table (at least the workers' renew interval; a worker
    /// renews every `worker.renew_interval`).
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    observe: Duration,
    /// A worker's HTTP address (`http://host:port`, its `http.listen`), asked for its
    /// `/status`; repeat for each worker, or give them comma-separated.
    #[arg(long = "worker", env = "WEIR_DOCTOR_WORKERS", value_delimiter = ',')]
    workers: Vec<String>,
    /// A shard's read counts as silent when it has not answered for this long.
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    silent_after: Duration,
    /// Skip reading each shard's trim horizon from the stream.
    #[arg(long)]
    no_stream: bool,
}

/// What the doctor says about one lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Finding {
    /// The shard.
    pub shard: String,
    /// Whether the shard is stuck or something needs doing (as opposed to a note).
    pub stuck: bool,
    /// The explanation.
    pub text: String,
}

/// Runs `weir doctor`.
pub(crate) async fn run(args: DoctorArgs, registry: &Registry) -> Result<()> {
    let (config, table) = crate::commands::leases::open_table(&args.config, registry).await?;
    let before = crate::commands::leases::list(table.as_ref()).await?;
    println!("{} leases in {}; watching {:?}", before.len(), config.leases.describe(), args.observe);
    tokio::time::sleep(args.observe).await;
    let after = crate::commands::leases::list(table.as_ref()).await?;
    // Leases of streams this config does not read are left alone by its workers.
    let scope = crate::commands::leases::Scope::of(&config, table.as_ref()).await?;
    let others = after.iter().filter(|l| !l.ended && !scope.covers(l)).count();
    if others > 0 {
        println!("note  {others} leases of streams not in this config are left alone (weir leases list shows them)");
    }
    let (before, after): (Vec<_>, Vec<_>) = (
        before.into_iter().filter(|l| scope.covers(l)).collect(),
        after.into_iter().filter(|l| scope.covers(l)).collect(),
    );
    let consumers: Vec<ConsumerName> = config.consumers.iter().map(|c| ConsumerName::new(c.name.as_str())).collect();
    let mut findings = leases::diagnose(&before, &after, args.observe, &consumers);

    let client =
        reqwest::Client::builder().timeout(Duration::from_secs(5)).build().context("cannot build an HTTP client")?;
    let mut statuses = Vec::new();
    for base in &args.workers {
        match workers::fetch(&client, base).await {
            Ok(s) => statuses.extend(s),
            Err(e) => println!("note  worker {base}: {e:#}"),
        }
    }
    findings.extend(workers::diagnose(&statuses, args.silent_after));

    if args.no_stream {
    } else if config.stream_list().iter().all(|s| s.kind == StreamKind::Kinesis) {
        let streams = crate::wiring::fleet_streams(&config, table.as_ref()).await?;
        let oldest = retention::oldest_retained(&streams, &after, Duration::from_secs(10)).await;
        findings.extend(retention::diagnose(&after, &oldest, &consumers));
    } else {
        println!("note  the in-process stream lives inside its worker; its trim horizon is not read");
    }

    findings.sort_by(|a, b| a.shard.cmp(&b.shard).then(b.stuck.cmp(&a.stuck)));
    let stuck =
        findings.iter().filter(|f| f.stuck).map(|f| f.shard.as_str()).collect::<std::collections::BTreeSet<_>>();
    for f in &findings {
        println!("{} {}: {}", if f.stuck { "STUCK" } else { "note " }, f.shard, f.text);
    }
    let open = after.iter().filter(|l| !l.ended).count();
    let stuck = stuck.len();
    println!("{stuck} stuck of {open} leases not ended");
    if stuck > 0 {
        std::process::exit(1);
    }
    Ok(())
}
