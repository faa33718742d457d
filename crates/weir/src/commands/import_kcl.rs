//! `weir import-kcl`: take over a KCL application in place. Reads its DynamoDB lease
//! table (KCL 2.x or 3.x), refuses while a KCL worker still renews a lease, and writes
//! the equivalent weir leases and checkpoints for the chosen consumers in weir's own
//! namespace, so that weir continues where the KCL application stopped.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::Args;
use weir_core::kcl::{plan, renewed};
use weir_core::{ConsumerName, LeaseChange, LeaseMutation, NewLease};

use crate::commands::leases::checkpoint_text;
use crate::plugin::Registry;

/// `weir import-kcl …`.
#[derive(Debug, Args)]
pub(crate) struct ImportKclArgs {
    /// The KCL application's DynamoDB lease table (its application name by default).
    #[arg(long)]
    table: String,
    /// The weir config: its stream, its lease table and namespace, its AWS settings.
    #[arg(long, short)]
    config: PathBuf,
    /// Consumers that get the KCL checkpoints (repeatable; default: every consumer of
    /// the config).
    #[arg(long)]
    consumer: Vec<String>,
    /// The KCL application's initial timestamp (RFC 3339), for leases still at
    /// AT_TIMESTAMP (KCL keeps it in the application's configuration).
    #[arg(long)]
    at_timestamp: Option<String>,
    /// How long to watch the KCL table for renewals before writing (a running KCL
    /// worker renews every failover/3, 10 s by default in KCL).
    #[arg(long, default_value = "12s", value_parser = humantime::parse_duration)]
    observe: Duration,
    /// Print what would be written; write nothing.
    #[arg(long)]
    dry_run: bool,
}

/// Runs `weir import-kcl`.
pub(crate) async fn run(args: ImportKclArgs, registry: &Registry) -> Result<()> {
    let config = crate::config::load(&args.config, registry)?;
    let client = weir_aws::clients::dynamodb(&config.aws.endpoints()).await;
    let at_timestamp = args
        .at_timestamp
        .as_deref()
        .map(|t| {
            chrono::DateTime::parse_from_rfc3339(t)
                .map(|d| weir_core::Timestamp::from_millis(d.timestamp_millis()))
                .with_context(|| format!("--at-timestamp {t:?}: not an RFC 3339 time"))
        })
        .transpose()?;
    let read = || weir_aws::kcl_table::read_kcl_leases(&client, &args.table);
    let before = read().await.with_context(|| format!("cannot read the KCL lease table {}", args.table))?;
    if before.is_empty() {
        bail!("the KCL lease table {} holds no leases", args.table);
    }
    println!("read {} items of KCL lease table {}; watching {:?} for renewals", before.len(), args.table, args.observe);
    tokio::time::sleep(args.observe).await;
    let after = read().await.with_context(|| format!("cannot read the KCL lease table {}", args.table))?;
    let live = renewed(&before, &after);
    if !live.is_empty() {
        bail!(
            "KCL workers still renew {} leases ({}): stop the KCL application first, then import (weir must not process beside it)",
            live.len(),
            live.join(", ")
        );
    }
    let plan = plan(&after, &config.stream.name, at_timestamp)?;
    for (key, why) in &plan.skipped {
        println!("skipped {key}: {why}");
    }
    let consumers: Vec<ConsumerName> = if args.consumer.is_empty() {
        config.consumers.iter().map(|c| ConsumerName::new(c.name.as_str())).collect()
    } else {
        for c in &args.consumer {
            if !config.consumers.iter().any(|x| &x.name == c) {
                bail!("--consumer {c}: the config has no consumer of that name");
            }
        }
        args.consumer.iter().map(|c| ConsumerName::new(c.as_str())).collect()
    };
    let table = crate::wiring::lease_table(&config).await?;
    let mut refused = 0;
    for p in &plan.leases {
        let names: Vec<String> = consumers.iter().map(ToString::to_string).collect();
        println!("{}: {} for {}", p.shard, checkpoint_text(&p.checkpoint), names.join(", "));
        if let Some(note) = &p.note {
            println!("  note: {note}");
        }
        if args.dry_run {
            continue;
        }
        let new = NewLease {
            key: p.shard.clone(),
            initial: weir_core::Checkpoint::TrimHorizon,
            parents: p.parents.clone(),
            hash_range: p.hash_range,
        };
        table.create_if_absent(new).await.with_context(|| format!("cannot create the lease of {}", p.shard))?;
        for consumer in &consumers {
            let seen = table.get(&p.shard).await?.with_context(|| format!("lease {} vanished", p.shard))?;
            let change = LeaseChange::Seek { consumer: consumer.clone(), to: p.checkpoint.clone(), force: false };
            if let Err(e) = table.mutate(&LeaseMutation::on(&seen, change)).await {
                refused += 1;
                println!("  not written for {consumer}: {e}");
            }
        }
    }
    if refused > 0 {
        bail!("{refused} checkpoints not written (weir workers running on this namespace? stop them and import again)");
    }
    println!(
        "{} {} leases for {} consumers in {}",
        if args.dry_run { "would write" } else { "wrote" },
        plan.leases.len(),
        consumers.len(),
        config.leases.describe()
    );
    Ok(())
}
