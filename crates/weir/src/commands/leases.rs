//! `weir leases`: what the lease table says, for operators. Read-only: it opens the
//! table the config names (SQLite or DynamoDB, namespace included) and prints every
//! lease, or one, as a table on a terminal or as JSON for scripts.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand};
use weir_core::{
    Checkpoint, ConsumerName, ExtendedSequenceNumber, Lease, LeaseChange, LeaseMutation, SequenceNumber, ShardId,
    WorkerId,
};

use weir_core::policy::Cleanup;
use weir_core::ports::{LeaseTable, StreamCatalog};

use crate::config::Config;
use crate::plugin::Registry;

/// `weir leases …`.
#[derive(Debug, Args)]
pub(crate) struct LeasesArgs {
    #[command(subcommand)]
    command: LeasesCommand,
}

#[derive(Debug, Subcommand)]
enum LeasesCommand {
    /// Every lease of the config's namespace: owner, fencing counter, state,
    /// parents and children, and per consumer its checkpoint and open intents.
    List {
        /// The TOML config file (its `[leases]` section is used).
        #[arg(long, short)]
        config: PathBuf,
        /// Only this consumer's checkpoints and intents.
        #[arg(long)]
        consumer: Option<String>,
        /// JSON (one array of leases, each with its `state`) instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Move one consumer's checkpoint (backwards too) on one lease or all: for a
    /// backfill or a skip. Refused on leases a worker holds unless --force, on ended
    /// shards, and where the consumer has open intents. Prints every change.
    Seek {
        /// The consumer whose checkpoint moves.
        #[arg(long)]
        consumer: String,
        /// TRIM_HORIZON, LATEST (stored as AT_TIMESTAMP of now), an RFC 3339 time
        /// (AT_TIMESTAMP), or a sequence number (`<sequence>[.<sub-sequence>]`:
        /// processing resumes after it).
        #[arg(long)]
        to: String,
        /// The lease (shard id); or --all.
        #[arg(required_unless_present = "all", conflicts_with = "all")]
        shard: Option<String>,
        /// Every lease of the namespace that is not ended.
        #[arg(long)]
        all: bool,
        /// Also seek leases a worker holds, taking them from it (it stops processing
        /// them at its next lease write; the next owner starts at the new position).
        #[arg(long)]
        force: bool,
        /// The TOML config file (its `[leases]` section is used).
        #[arg(long, short)]
        config: PathBuf,
    },
    /// Drop one consumer's open intents on a lease, for intents that can never
    /// resolve (the bucket they name was deleted; `weir doctor` shows the consumer
    /// failing on them). The records they cover are archived again from the
    /// checkpoint: an object one of them named that was written stays, so its records
    /// are then archived twice. Refused on a lease a worker holds unless --force.
    ClearIntents {
        /// The consumer whose intents go.
        #[arg(long)]
        consumer: String,
        /// The lease key (the shard id).
        shard: String,
        /// Also on a lease a worker holds, taking it from it.
        #[arg(long)]
        force: bool,
        /// The TOML config file (its `[leases]` section is used).
        #[arg(long, short)]
        config: PathBuf,
    },
    /// Ask the worker holding a lease to let it go through the normal handoff: it
    /// drains and checkpoints, frees the lease, and a worker (maybe the same) takes
    /// it and starts the shard afresh from its checkpoints (a stuck shard's restart).
    Release {
        /// The lease key (the shard id).
        shard: String,
        /// The TOML config file (its `[leases]` section is used).
        #[arg(long, short)]
        config: PathBuf,
    },
    /// Delete ended leases nothing depends on any more: the stream no longer lists
    /// the shard (its retention passed; a listed shard without a lease would be read
    /// again) and every child has started for every consumer. Each delete is
    /// conditional on the lease being unchanged, ended and free. Prints every lease
    /// deleted or kept, and why.
    DeleteEnded {
        /// The TOML config file (its `[leases]` and `[stream]` sections are used).
        #[arg(long, short)]
        config: PathBuf,
        /// Only print what would be deleted.
        #[arg(long)]
        dry_run: bool,
    },
    /// One lease in full: every checkpoint and every open intent.
    Show {
        /// The lease key (the shard id).
        shard: String,
        /// The TOML config file (its `[leases]` section is used).
        #[arg(long, short)]
        config: PathBuf,
        /// JSON instead of text.
        #[arg(long)]
        json: bool,
    },
}

/// Runs a `weir leases` command.
pub(crate) async fn run(args: LeasesArgs, registry: &Registry) -> Result<()> {
    match args.command {
        LeasesCommand::List { config, consumer, json } => {
            let (config, table) = open_table(&config, registry).await?;
            let leases = list(table.as_ref()).await?;
            let scope = Scope::of(&config, table.as_ref()).await?;
            let consumer = consumer.map(ConsumerName::new);
            print!(
                "{}",
                if json { list_json(&leases, &scope)? } else { list_table(&leases, consumer.as_ref(), &scope) }
            );
            if !json && let Some(requests) = weir_aws::clients::summary() {
                println!("{requests}");
            }
            Ok(())
        }
        LeasesCommand::Seek { consumer, to, shard, all, force, config } => {
            // LATEST is stored as the time of the seek: a reader shared with a consumer
            // that is behind starts earlier, and `LATEST` would then deliver that
            // consumer's backlog to this one as well.
            let to = match parse_position(&to)? {
                Checkpoint::Latest => {
                    Checkpoint::AtTimestamp(weir_core::Timestamp::from_millis(chrono::Utc::now().timestamp_millis()))
                }
                other => other,
            };
            let (config, table) = open_table(&config, registry).await?;
            let leases = list(table.as_ref()).await?;
            let chosen: Vec<&Lease> = match &shard {
                Some(s) => vec![leases.iter().find(|l| l.key.as_str() == s).ok_or_else(|| no_lease(s, &config))?],
                None => leases.iter().filter(|l| all && !l.ended).collect(),
            };
            let consumer = ConsumerName::new(consumer);
            let mut refused = 0;
            for l in chosen {
                let before = checkpoint_text(l.checkpoint_for(&consumer));
                let change = LeaseChange::Seek { consumer: consumer.clone(), to: to.clone(), force };
                match table.mutate(&LeaseMutation::on(l, change)).await {
                    Ok(after) => {
                        let taken = l.owner.as_ref().map(|o| format!(" (lease taken from {o})")).unwrap_or_default();
                        println!(
                            "{}: {consumer} {before} -> {}{taken}",
                            l.key,
                            checkpoint_text(after.checkpoint_for(&consumer))
                        );
                    }
                    Err(e) => {
                        refused += 1;
                        println!("{}: not moved: {e}", l.key);
                    }
                }
            }
            if refused > 0 {
                bail!("{refused} leases not moved");
            }
            Ok(())
        }
        LeasesCommand::ClearIntents { consumer, shard, force, config } => {
            let (config, table) = open_table(&config, registry).await?;
            let lease = table.get(&ShardId::new(shard.as_str())).await?.ok_or_else(|| no_lease(&shard, &config))?;
            let consumer = ConsumerName::new(consumer);
            let open: Vec<String> =
                lease.intents.get(&consumer).map(|v| v.iter().map(|i| i.target.clone()).collect()).unwrap_or_default();
            let change = LeaseChange::ClearIntents { consumer: consumer.clone(), force };
            table.mutate(&LeaseMutation::on(&lease, change)).await.with_context(|| format!("{shard}: not cleared"))?;
            let taken = lease.owner.as_ref().map(|o| format!(" (lease taken from {o})")).unwrap_or_default();
            println!(
                "{shard}: cleared {} open intents of {consumer}{taken}; their records are archived again from {}",
                open.len(),
                checkpoint_text(lease.checkpoint_for(&consumer))
            );
            for target in open {
                println!("  {target}");
            }
            Ok(())
        }
        LeasesCommand::Release { shard, config } => {
            let (config, table) = open_table(&config, registry).await?;
            let lease = table.get(&ShardId::new(shard.as_str())).await?.ok_or_else(|| no_lease(&shard, &config))?;
            let Some(owner) = lease.owner.clone() else {
                bail!("{shard} is not held by any worker: nothing to release");
            };
            let change = LeaseChange::RequestHandoff { to: WorkerId::new(weir_core::lease::RELEASE_REQUEST) };
            table.mutate(&LeaseMutation::on(&lease, change)).await.with_context(|| {
                format!("{shard}: cannot ask {owner} to release it (a handoff may be pending already)")
            })?;
            println!(
                "{shard}: asked {owner} to release it; it drains, checkpoints and lets it go, and a worker takes it within worker.taker_interval"
            );
            Ok(())
        }
        LeasesCommand::DeleteEnded { config, dry_run } => {
            let (config, table) = open_table(&config, registry).await?;
            let catalog = crate::wiring::fleet_streams(&config, table.as_ref()).await?;
            let listed =
                catalog.list_shards().await.map_err(|e| anyhow::anyhow!("cannot list the stream's shards: {e}"))?;
            let listed = listed.into_iter().map(|s| s.id).collect();
            // Leases of streams this config does not read are not judged by its list.
            let leases: Vec<Lease> =
                list(table.as_ref()).await?.into_iter().filter(|l| catalog.covers(&l.key)).collect();
            let (mut deleted, mut kept) = (0, 0);
            for (lease, verdict) in weir_core::policy::ended_lease_cleanup(&leases, &listed) {
                let key = &lease.key;
                match verdict {
                    Cleanup::Keep(why) => {
                        kept += 1;
                        println!("{key}: kept: {why}");
                    }
                    Cleanup::Delete if dry_run => {
                        deleted += 1;
                        println!("{key}: would be deleted");
                    }
                    Cleanup::Delete => {
                        if table.delete_ended(lease).await? {
                            deleted += 1;
                            println!("{key}: deleted");
                        } else {
                            kept += 1;
                            println!("{key}: kept: it changed since it was read");
                        }
                    }
                }
            }
            let verb = if dry_run { "would be deleted" } else { "deleted" };
            println!("{deleted} ended leases {verb}, {kept} kept");
            Ok(())
        }
        LeasesCommand::Show { shard, config, json } => {
            let (config, table) = open_table(&config, registry).await?;
            let leases = list(table.as_ref()).await?;
            let lease = leases.iter().find(|l| l.key.as_str() == shard).ok_or_else(|| no_lease(&shard, &config))?;
            let scope = Scope::of(&config, table.as_ref()).await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&with_state(lease, &leases, &scope)?)?);
            } else {
                print!("{}", show_text(lease, &leases, &scope));
            }
            Ok(())
        }
    }
}

/// The config at `path` and the lease table it names.
pub(crate) async fn open_table(path: &Path, registry: &Registry) -> Result<(Config, Arc<dyn LeaseTable>)> {
    let config = crate::config::load(path, registry)?;
    let table = crate::wiring::lease_table(&config).await?;
    Ok((config, table))
}

/// Every lease of the table.
pub(crate) async fn list(table: &dyn LeaseTable) -> Result<Vec<Lease>> {
    table.list().await.context("cannot list the leases")
}

fn no_lease(shard: &str, config: &Config) -> anyhow::Error {
    anyhow::anyhow!("no lease {shard} in {} (weir leases list shows them)", config.leases.describe())
}

/// A position as `weir leases seek --to` takes it.
pub(crate) fn parse_position(text: &str) -> Result<Checkpoint> {
    match text {
        "TRIM_HORIZON" => return Ok(Checkpoint::TrimHorizon),
        "LATEST" => return Ok(Checkpoint::Latest),
        _ => {}
    }
    if let Ok(t) = chrono::DateTime::parse_from_rfc3339(text) {
        return Ok(Checkpoint::AtTimestamp(weir_core::Timestamp::from_millis(t.timestamp_millis())));
    }
    let (seq, sub) = text.split_once('.').unwrap_or((text, "0"));
    let sequence = SequenceNumber::parse(seq).ok();
    match (sequence, sub.parse::<u64>()) {
        (Some(sequence), Ok(sub)) => Ok(Checkpoint::At(ExtendedSequenceNumber::new(sequence, sub))),
        _ => bail!(
            "--to {text:?}: not TRIM_HORIZON, LATEST, an RFC 3339 time (2026-12-01T00:00:00Z) or a sequence number"
        ),
    }
}

/// Which leases a config reads: its streams' names, and the stream whose leases keep
/// bare shard ids (the namespace's first; it may no longer be configured).
#[derive(Debug, Clone)]
pub(crate) struct Scope {
    names: Vec<String>,
    bare: Option<String>,
}

impl Scope {
    /// The scope of `config` on `table`.
    pub(crate) async fn of(config: &Config, table: &dyn LeaseTable) -> Result<Self> {
        let names: Vec<String> = config.stream_list().iter().map(|s| s.name.clone()).collect();
        // A namespace not claimed yet: its bare keys are the (first) stream's.
        let bare = table.namespace_meta().await?.map(|m| m.stream).or_else(|| names.first().cloned());
        Ok(Self { names, bare })
    }

    /// Whether this config reads the lease.
    pub(crate) fn covers(&self, lease: &Lease) -> bool {
        self.unconfigured(lease).is_none()
    }

    /// The stream a lease belongs to when this config does not read it.
    fn unconfigured(&self, lease: &Lease) -> Option<String> {
        match weir_runtime::streams::key_stream(lease.key.as_str(), self.bare.as_deref()) {
            Some(stream) if self.names.iter().any(|n| n == stream) => None,
            stream => Some(stream.unwrap_or_default().to_owned()),
        }
    }
}

/// What a lease is doing, in words; leases of a stream the config does not read are
/// `unconfigured` (workers leave them alone).
fn shown_state(lease: &Lease, all: &[Lease], scope: &Scope) -> String {
    match scope.unconfigured(lease) {
        Some(stream) if !lease.ended => format!("unconfigured (stream {stream:?} is not in [[streams]])"),
        _ => state(lease, all),
    }
}

/// What a lease is doing, in words.
pub(crate) fn state(lease: &Lease, all: &[Lease]) -> String {
    if lease.ended {
        return "ended".into();
    }
    let unfinished: Vec<&str> = lease
        .parents
        .iter()
        .filter(|p| all.iter().find(|l| &l.key == *p).is_some_and(|l| !l.ended))
        .map(ShardId::as_str)
        .collect();
    match (&lease.owner, &lease.handoff_to) {
        (_, _) if !unfinished.is_empty() => format!("waiting for parents {}", unfinished.join(", ")),
        (Some(_), Some(to)) if to.as_str() == weir_core::lease::RELEASE_REQUEST => "releasing".into(),
        (Some(_), Some(to)) => format!("handing over to {to}"),
        (Some(_), None) => "held".into(),
        (None, _) => "free".into(),
    }
}

/// A checkpoint as operators write it (`weir leases seek` takes the same forms).
pub(crate) fn checkpoint_text(cp: &Checkpoint) -> String {
    match cp {
        Checkpoint::TrimHorizon => "TRIM_HORIZON".into(),
        Checkpoint::Latest => "LATEST".into(),
        Checkpoint::AtTimestamp(t) => chrono::DateTime::from_timestamp_millis(t.as_millis())
            .map_or_else(|| format!("AT_TIMESTAMP {}", t.as_millis()), |d| format!("AT_TIMESTAMP {}", d.to_rfc3339())),
        Checkpoint::At(p) => p.to_string(),
        Checkpoint::ShardEnd => "SHARD_END".into(),
    }
}

fn with_state(lease: &Lease, all: &[Lease], scope: &Scope) -> Result<serde_json::Value> {
    // Hash keys go past what a JSON number holds exactly: decimal strings.
    let mut plain = lease.clone();
    plain.hash_range = None;
    let mut v = serde_json::to_value(&plain)?;
    if let Some(o) = v.as_object_mut() {
        o.insert("state".into(), shown_state(lease, all, scope).into());
        let range =
            lease.hash_range.map(|r| serde_json::json!({ "start": r.start.to_string(), "end": r.end.to_string() }));
        o.insert("hash_range".into(), range.unwrap_or(serde_json::Value::Null));
    }
    Ok(v)
}

fn list_json(leases: &[Lease], scope: &Scope) -> Result<String> {
    let all: Vec<serde_json::Value> = leases.iter().map(|l| with_state(l, leases, scope)).collect::<Result<_>>()?;
    Ok(format!("{}\n", serde_json::to_string_pretty(&all)?))
}

/// Long sequence numbers shortened for a table: the last 12 digits.
fn short(text: String) -> String {
    let digits = text.chars().take_while(char::is_ascii_digit).count();
    if digits > 16 { format!("…{}", &text[digits - 12..]) } else { text }
}

fn list_table(leases: &[Lease], only: Option<&ConsumerName>, scope: &Scope) -> String {
    let mut consumers: Vec<ConsumerName> = leases
        .iter()
        .flat_map(|l| l.checkpoints.keys().chain(l.intents.keys()).cloned())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    if let Some(c) = only {
        consumers.retain(|x| x == c);
        if consumers.is_empty() {
            consumers.push(c.clone());
        }
    }
    let mut rows: Vec<Vec<String>> = Vec::new();
    let mut header: Vec<String> =
        ["shard", "owner", "counter", "state", "parents", "children"].iter().map(|s| (*s).to_owned()).collect();
    header.extend(consumers.iter().map(|c| c.to_string()));
    rows.push(header);
    for l in leases {
        let list = |ids: &[ShardId]| {
            if ids.is_empty() { "-".to_owned() } else { ids.iter().map(ShardId::as_str).collect::<Vec<_>>().join(",") }
        };
        let mut row = vec![
            l.key.to_string(),
            l.owner.as_ref().map_or("-".into(), ToString::to_string),
            l.counter.to_string(),
            shown_state(l, leases, scope),
            list(&l.parents),
            list(&l.children),
        ];
        for c in &consumers {
            let cp = short(checkpoint_text(l.checkpoint_for(c)));
            let open = l.intents.get(c).map_or(0, Vec::len);
            row.push(if open > 0 { format!("{cp} ({open} open intents)") } else { cp });
        }
        rows.push(row);
    }
    let widths: Vec<usize> =
        (0..rows[0].len()).map(|i| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0)).collect();
    let mut out = String::new();
    for r in &rows {
        let cells: Vec<String> = r.iter().zip(&widths).map(|(c, w)| format!("{c:<w$}")).collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    out.push_str(&format!("{} leases\n", leases.len()));
    out
}

fn show_text(l: &Lease, all: &[Lease], scope: &Scope) -> String {
    let mut out = String::new();
    let mut line = |k: &str, v: String| out.push_str(&format!("{k:<10} {v}\n"));
    let ids = |ids: &[ShardId]| ids.iter().map(ShardId::as_str).collect::<Vec<_>>().join(", ");
    line("shard", l.key.to_string());
    line("owner", l.owner.as_ref().map_or("-".into(), ToString::to_string));
    line("counter", l.counter.to_string());
    line("state", shown_state(l, all, scope));
    line("initial", checkpoint_text(&l.initial));
    line("parents", ids(&l.parents));
    line("children", ids(&l.children));
    if let Some(r) = &l.hash_range {
        line("hash keys", format!("{r:?}"));
    }
    let consumers: BTreeSet<&ConsumerName> = l.checkpoints.keys().chain(l.intents.keys()).collect();
    for c in consumers {
        out.push_str(&format!("consumer {c}\n  checkpoint {}\n", checkpoint_text(l.checkpoint_for(c))));
        for i in l.intents.get(c).into_iter().flatten() {
            out.push_str(&format!("  open intent {} [{}, {}] scope {}\n", i.target, i.first, i.last, i.scope));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(key: &str) -> Lease {
        weir_testkit::fixtures::new_lease(key, &[]).into_lease()
    }

    #[test]
    fn states_say_what_a_lease_waits_for() {
        let mut parent = lease("p");
        let mut child = lease("c");
        child.parents = vec![ShardId::new("p")];
        let all = vec![parent.clone(), child.clone()];
        assert_eq!(state(&child, &all), "waiting for parents p");
        assert_eq!(state(&parent, &all), "free");
        parent.ended = true;
        assert_eq!(state(&child, &[parent.clone(), child.clone()]), "free");
        child.owner = Some(WorkerId::new("w1"));
        assert_eq!(state(&child, &[parent.clone(), child.clone()]), "held");
        child.handoff_to = Some(WorkerId::new("w2"));
        assert_eq!(state(&child, &[parent.clone(), child.clone()]), "handing over to w2");
        assert_eq!(state(&parent, &[parent.clone()]), "ended");
    }

    #[test]
    fn positions_parse_as_operators_write_them() {
        assert_eq!(parse_position("TRIM_HORIZON").unwrap(), Checkpoint::TrimHorizon);
        assert_eq!(parse_position("LATEST").unwrap(), Checkpoint::Latest);
        assert_eq!(
            parse_position("2026-12-01T00:00:00Z").unwrap(),
            Checkpoint::AtTimestamp(weir_core::Timestamp::from_millis(1_796_083_200_000))
        );
        let seq = "49590338271490256608559692538361571095921575989136588898";
        let sub = parse_position(&format!("{seq}.4")).unwrap();
        assert_eq!(sub, Checkpoint::At(ExtendedSequenceNumber::new(SequenceNumber::parse(seq).unwrap(), 4)));
        for bad in ["yesterday", "12abc", "", "4959.x"] {
            let e = parse_position(bad).unwrap_err().to_string();
            assert!(e.contains("RFC 3339"), "{bad}: {e}");
        }
    }

    #[test]
    fn long_sequence_numbers_are_shortened_in_tables_only() {
        let seq = "49590338271490256608559692538361571095921575989136588898";
        let cp = Checkpoint::At(ExtendedSequenceNumber::plain(SequenceNumber::parse(seq).unwrap()));
        assert_eq!(checkpoint_text(&cp), seq);
        assert_eq!(short(checkpoint_text(&cp)), "…989136588898");
        let sub = Checkpoint::At(ExtendedSequenceNumber::new(SequenceNumber::parse(seq).unwrap(), 3));
        assert_eq!(short(checkpoint_text(&sub)), "…989136588898.3", "the KPL sub-sequence stays");
        assert_eq!(short("TRIM_HORIZON".into()), "TRIM_HORIZON");
    }

    /// A config reads the leases of its streams; the bare keys belong to the
    /// namespace's first stream, which may have left the config, as workers see it.
    #[test]
    fn scopes_name_the_streams_a_config_does_not_read() {
        let scope = |names: &[&str], bare: &str| Scope {
            names: names.iter().map(|s| s.to_string()).collect(),
            bare: Some(bare.to_owned()),
        };
        let (plain, joined, other) = (lease("shardId-1"), lease("b:shardId-1"), lease("c:shardId-1"));
        let both = scope(&["a", "b"], "a");
        assert!(both.covers(&plain) && both.covers(&joined) && !both.covers(&other));
        assert_eq!(both.unconfigured(&other).as_deref(), Some("c"));
        let without_first = scope(&["b"], "a");
        assert!(!without_first.covers(&plain), "the first stream left the config");
        assert_eq!(without_first.unconfigured(&plain).as_deref(), Some("a"));
        assert!(without_first.covers(&joined));
    }
}
