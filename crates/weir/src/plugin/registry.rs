//! Consumer kinds by `type` name: how to check a section and build a consumer.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use anyhow::{Context as _, Result, anyhow};
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};
use weir_core::{Clock, Consumer};

use weir_aws::clients::Clients;

use super::named::Named;
use super::{Context, Plugin, StatusLine};
use crate::config::ConsumerEntry;

type Check = Box<dyn Fn(&Map<String, Value>, &str) -> Result<Vec<String>> + Send + Sync>;
type BuildFuture<'a> = Pin<Box<dyn Future<Output = Result<Box<dyn Consumer>>> + Send + 'a>>;
type Build = Box<dyn for<'a> Fn(&'a Map<String, Value>, &'a Context) -> BuildFuture<'a> + Send + Sync>;
type Companions = Box<dyn Fn(&ConsumerEntry) -> Vec<ConsumerEntry> + Send + Sync>;

struct Kind {
    name: String,
    about: &'static str,
    check: Check,
    build: Build,
    /// Sections a section of this kind brings with it (an archiver's backup).
    companions: Option<Companions>,
}

/// The consumer kinds an application knows.
#[derive(Default)]
pub(crate) struct Registry {
    kinds: Vec<Kind>,
}

/// What the consumers of one worker need besides their sections.
pub(crate) struct BuildEnv {
    /// The worker's id.
    pub worker_id: String,
    /// The clock.
    pub clock: Arc<dyn Clock>,
    /// AWS clients, created on first use.
    pub aws: Arc<Clients>,
    /// `stream.name`.
    pub stream_name: String,
    /// `weir replay --archive-prefix`.
    pub archive_prefix: Option<String>,
    /// `weir replay --job`.
    pub replay_job: Option<String>,
}

/// Consumers built for one worker, and the lines they add to `/readyz`.
pub(crate) struct Built {
    /// In config order.
    pub consumers: Vec<Box<dyn Consumer>>,
    /// `/readyz` lines.
    pub status: Vec<StatusLine>,
}

/// Deserialises a section into `C`; errors name the field under `at`.
pub(crate) fn parse<C: DeserializeOwned>(section: &Map<String, Value>, at: &str) -> Result<C> {
    serde_path_to_error::deserialize(Value::Object(section.clone())).map_err(|e| {
        let path = e.path().to_string();
        let field = if path == "." { at.to_owned() } else { format!("{at}.{path}") };
        anyhow!("field `{field}`: {}", e.into_inner())
    })
}

impl Registry {
    /// Registers kind `name` (the `type` of its sections); a later registration of the
    /// same name replaces the earlier one.
    pub fn register<P: Plugin>(&mut self, name: &str) {
        let check: Check = Box::new(|section, at| {
            let config: P::Config = parse(section, at)?;
            P::check(&config, at)
        });
        let build: Build = Box::new(|section, ctx| {
            Box::pin(async move {
                let config: P::Config = parse(section, ctx.at())?;
                let consumer = P::build(config, ctx).await?;
                Ok(Box::new(consumer) as Box<dyn Consumer>)
            })
        });
        self.kinds.retain(|k| k.name != name);
        self.kinds.push(Kind { name: name.to_owned(), about: P::ABOUT, check, build, companions: None });
    }

    /// Lets every section of kind `name` bring sections of its own beside it, added to
    /// the config when it is loaded and checked like the rest (an archiver with
    /// `S3BackupMode Enabled` brings a second archiver for the source records). A kind
    /// registered again later loses its companions.
    pub fn companions(&mut self, name: &str, f: impl Fn(&ConsumerEntry) -> Vec<ConsumerEntry> + Send + Sync + 'static) {
        if let Some(kind) = self.kinds.iter_mut().find(|k| k.name == name) {
            kind.companions = Some(Box::new(f));
        }
    }

    /// The sections `entry` brings with it (see [`Registry::companions`]).
    pub fn companions_of(&self, entry: &ConsumerEntry) -> Vec<ConsumerEntry> {
        match self.kinds.iter().find(|k| k.name == entry.kind).and_then(|k| k.companions.as_ref()) {
            Some(f) => f(entry),
            None => Vec::new(),
        }
    }

    /// Registered kind names, in registration order.
    pub fn names(&self) -> Vec<&str> {
        self.kinds.iter().map(|k| k.name.as_str()).collect()
    }

    /// `type  about` lines, for `--help`.
    pub fn describe(&self) -> String {
        let width = self.kinds.iter().map(|k| k.name.len()).max().unwrap_or(0);
        self.kinds.iter().map(|k| format!("  {:width$}  {}", k.name, k.about)).collect::<Vec<_>>().join("\n")
    }

    fn kind(&self, entry: &ConsumerEntry, at: &str) -> Result<&Kind> {
        self.kinds.iter().find(|k| k.name == entry.kind).ok_or_else(|| {
            anyhow!(
                "field `{at}.type`: unknown consumer type {:?}; registered: {}",
                entry.kind,
                self.names().join(", ")
            )
        })
    }

    /// Checks the section of `consumers[i]`; returns its warnings.
    pub fn check(&self, i: usize, entry: &ConsumerEntry) -> Result<Vec<String>> {
        let at = format!("consumers[{i}]");
        let kind = self.kind(entry, &at)?;
        (kind.check)(&entry.settings, &at)
    }

    /// Builds every consumer of `entries` for one worker.
    pub async fn build(&self, entries: &[ConsumerEntry], env: &BuildEnv) -> Result<Built> {
        let mut built = Built { consumers: Vec::new(), status: Vec::new() };
        for (i, entry) in entries.iter().enumerate() {
            let at = format!("consumers[{i}]");
            let kind = self.kind(entry, &at)?;
            let ctx = Context {
                name: entry.name.clone(),
                at: at.clone(),
                worker_id: env.worker_id.clone(),
                clock: env.clock.clone(),
                aws: env.aws.clone(),
                stream_name: env.stream_name.clone(),
                archive_prefix: env.archive_prefix.clone(),
                replay_job: env.replay_job.clone(),
                status: Mutex::new(Vec::new()),
            };
            let consumer = (kind.build)(&entry.settings, &ctx)
                .await
                .with_context(|| format!("{at} ({} {:?})", entry.kind, entry.name))?;
            // The config's name keys the checkpoints, whatever the consumer calls itself.
            built.consumers.push(Box::new(Named::new(entry.name.clone(), consumer)));
            built.status.extend(ctx.status.into_inner().unwrap_or_else(|p| p.into_inner()));
        }
        Ok(built)
    }
}
