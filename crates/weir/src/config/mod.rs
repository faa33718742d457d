//! `weir run` configuration: defaults, then a TOML file, then `WEIR_` environment
//! variables (`WEIR_WORKER__FAILOVER=5s` sets `worker.failover`). Every struct denies
//! unknown fields; cross-field checks run at load time, and every error names the field.

mod lease_size;
mod model;

use std::path::Path;

use anyhow::{Context, Result, bail};
use figment::Figment;
use figment::providers::{Env, Format, Serialized, Toml};

pub use model::*;

use crate::plugin::Registry;

/// Loads and validates the configuration at `path` (with environment overrides).
pub fn load(path: &Path, registry: &Registry) -> Result<Config> {
    check(path, registry).map(|(config, _)| config)
}

/// [`load`], also returning the consumer kinds' warnings (`weir config check`).
pub fn check(path: &Path, registry: &Registry) -> Result<(Config, Vec<String>)> {
    if !path.exists() {
        bail!("config file {} does not exist", path.display());
    }
    extract(Toml::file_exact(path), &path.display().to_string(), registry)
}

/// Loads and validates a configuration given as TOML text (`weir run --config-toml`,
/// or `WEIR_CONFIG_TOML` where mounting a file is awkward, as on ECS Fargate).
pub fn load_text(text: &str, registry: &Registry) -> Result<Config> {
    extract(Toml::string(text), "given with --config-toml (WEIR_CONFIG_TOML)", registry).map(|(config, _)| config)
}

fn extract(file: figment::providers::Data<Toml>, origin: &str, registry: &Registry) -> Result<(Config, Vec<String>)> {
    let figment = Figment::from(Serialized::defaults(Config::default()))
        // A default, not an override: the image sets WEIR_HTTP_LISTEN=0.0.0.0:9090 so
        // that probes from outside the container reach it, and a config file's
        // `[http] listen` still wins.
        .merge(Env::raw().only(&[HTTP_LISTEN_DEFAULT]).map(|_| "http.listen".into()))
        .merge(file)
        // Only variables that name a section (WEIR_WORKER__FAILOVER, …) are config;
        // others such as WEIR_LOG belong to the command line or to tools.
        .merge(Env::prefixed("WEIR_").filter(|key| is_config_key(key.as_str())).split("__"));
    let mut config: Config = figment
        .extract()
        .map_err(|e| anyhow::anyhow!(describe(e)))
        .with_context(|| format!("invalid config {origin}"))?;
    // Sections a kind brings with its own (an archiver's backup).
    let companions: Vec<ConsumerEntry> = config.consumers.iter().flat_map(|e| registry.companions_of(e)).collect();
    config.consumers.extend(companions);
    let warnings = config.validate(registry).with_context(|| format!("invalid config {origin}"))?;
    Ok((config, warnings))
}

/// The environment variable that sets the default `[http] listen` (below the config
/// file; `WEIR_HTTP__LISTEN` overrides both).
pub const HTTP_LISTEN_DEFAULT: &str = "WEIR_HTTP_LISTEN";

/// Top-level sections of the config file.
const SECTIONS: &[&str] = &["worker", "stream", "generator", "leases", "consumers", "http", "metrics", "aws"];

/// Whether an environment key (after `WEIR_`) addresses a config field.
fn is_config_key(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    SECTIONS.iter().any(|s| key.strip_prefix(s).is_some_and(|rest| rest.starts_with("__")))
}

/// Every problem figment found, one per line, each with the field path.
fn describe(e: figment::Error) -> String {
    e.into_iter()
        .map(|e| {
            let field = if e.path.is_empty() { "(top level)".to_owned() } else { e.path.join(".") };
            format!("field `{field}`: {}", e.kind)
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// Loads inside figment's jail, which holds a process-wide lock:
    /// `environment_overrides_file` sets `WEIR_*` variables in its jail, and no load
    /// here may see them.
    #[allow(clippy::result_large_err)] // figment's Jail API returns its own error type
    fn load(path: &Path) -> Result<Config> {
        let mut out = None;
        figment::Jail::expect_with(|_| {
            out = Some(super::load(path, crate::App::new().registry()));
            Ok(())
        });
        out.expect("the jail ran the load")
    }

    fn write(text: &str) -> tempfile::NamedTempFile {
        let mut f = tempfile::Builder::new().suffix(".toml").tempfile().unwrap();
        f.write_all(text.as_bytes()).unwrap();
        f
    }

    #[test]
    fn example_config_parses() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/weir.toml");
        let c = load(&path).unwrap();
        assert_eq!(c.consumers.len(), 3);
        assert_eq!(c.worker.failover, std::time::Duration::from_secs(10));
    }

    #[test]
    fn unknown_field_is_named() {
        let f = write("[worker]\nfailovr = \"10s\"\n");
        let e = format!("{:#}", load(f.path()).unwrap_err());
        assert!(e.contains("failovr"), "{e}");
        assert!(e.contains("worker"), "{e}");
    }

    #[test]
    fn bad_duration_is_named() {
        let f = write("[worker]\nfailover = \"ten seconds\"\n");
        let e = format!("{:#}", load(f.path()).unwrap_err());
        assert!(e.contains("worker.failover"), "{e}");
    }

    #[test]
    fn cross_field_checks_name_the_field() {
        let f = write("[worker]\nfailover = \"10s\"\nrenew_interval = \"9s\"\n");
        let e = format!("{:#}", load(f.path()).unwrap_err());
        assert!(e.contains("worker.renew_interval"), "{e}");
        let f = write("[[consumers]]\ntype = \"count\"\nname = \"a\"\n[[consumers]]\ntype = \"log\"\nname = \"a\"\n");
        let e = format!("{:#}", load(f.path()).unwrap_err());
        assert!(e.contains("consumers[1].name"), "{e}");
        let f = write(
            "[[consumers]]\ntype = \"count\"\nname = \"a\"\nwindow = 3\n[[consumers]]\ntype = \"nope\"\nname = \"b\"\n",
        );
        let e = format!("{:#}", load(f.path()).unwrap_err());
        assert!(e.contains("field `consumers[0].window`: unknown field `window`"), "{e}");
        assert!(e.contains("field `consumers[1].type`: unknown consumer type \"nope\"; registered: count, log"), "{e}");
        let f = write("[stream]\nshards = 0\n");
        let e = format!("{:#}", load(f.path()).unwrap_err());
        assert!(e.contains("stream.shards"), "{e}");
        let f = write("[stream]\nkind = \"kinesis\"\nmax_records = 10001\nmax_bytes_per_call = 100\n");
        let e = format!("{:#}", load(f.path()).unwrap_err());
        assert!(e.contains("field `stream.max_records`: must be between 1 and 10000"), "{e}");
        assert!(e.contains("field `stream.max_bytes_per_call`: must be between 1024 and 10485760"), "{e}");
        let f = write(
            "[stream]\nkind = \"kinesis\"\nmax_records = 1000\nmax_bytes_per_call = 2097152\n\
             [[consumers]]\ntype = \"count\"\nname = \"c\"\n",
        );
        let described = load(f.path()).unwrap().describe_stream(false);
        assert!(described.contains("GetRecords of about 2048 KiB, up to 1000 records"), "{described}");
    }

    #[test]
    fn every_problem_is_reported_at_once() {
        let f = write(
            "[worker]\nfailover = \"10s\"\nrenew_interval = \"9s\"\nqueue_capacity = 0\n[stream]\nshards = 0\nrate = 10\n\
             [generator]\nerror_rate = 2.0\n[leases]\nnamespace = \"\"\n\
             [[consumers]]\ntype = \"count\"\nname = \"bad name\"\n\
             [[consumers]]\ntype = \"files\"\nname = \"files\"\nmax_bytes = 0\n",
        );
        let e = format!("{:#}", load(f.path()).unwrap_err());
        for field in [
            "worker.renew_interval",
            "worker.queue_capacity",
            "stream.shards",
            "generator.error_rate",
            "leases.namespace",
            "consumers[0].name",
            "consumers[1].max_bytes",
        ] {
            assert!(e.contains(&format!("field `{field}`")), "{field} missing from {e}");
        }
        assert!(e.contains("field `stream.rate`: moved to `generator.rate`"), "{e}");
        assert!(e.contains("field `consumers[1]`: needs exactly one of `directory` and `bucket`"), "{e}");
    }

    #[test]
    fn several_streams_are_checked_together() {
        let ok = write(
            "[[streams]]\nkind = \"kinesis\"\nname = \"a\"\n[[streams]]\nkind = \"kinesis\"\nname = \"b\"\nefo_consumer = \"weir\"\n\
             [[consumers]]\ntype = \"count\"\nname = \"c\"\nstreams = [\"b\"]\n[[consumers]]\ntype = \"count\"\nname = \"d\"\n",
        );
        let c = load(ok.path()).unwrap();
        assert_eq!(c.stream_list().iter().map(|s| s.name.as_str()).collect::<Vec<_>>(), ["a", "b"]);
        assert_eq!(c.consumers[0].streams, Some(vec!["b".to_owned()]));
        assert!(c.describe_stream(true).contains("\"a\" by polling"));
        assert!(c.describe_stream(true).contains("\"b\" through enhanced fan-out consumer \"weir\""));
        let one = c.clone().with_one_stream(Some("b")).unwrap();
        assert_eq!((one.stream.name.as_str(), one.streams.len()), ("b", 0));
        let e = c.clone().with_one_stream(None).unwrap_err().to_string();
        assert!(e.contains("lists 2 streams; name one with --stream (a, b)"), "{e}");
        let e = c.with_one_stream(Some("z")).unwrap_err().to_string();
        assert!(e.contains("\"z\" is not one of the config's [[streams]] (a, b)"), "{e}");

        let bad = write(
            "[stream]\nname = \"x\"\n[[streams]]\nname = \"a\"\n[[streams]]\nname = \"a\"\nefo_consumer = \"e\"\n\
             [[streams]]\nname = \"no/slash\"\n\
             [[consumers]]\ntype = \"count\"\nname = \"c\"\nstreams = [\"a\", \"q\"]\n",
        );
        let e = format!("{:#}", load(bad.path()).unwrap_err());
        for problem in [
            "field `stream`: give either [stream] or [[streams]], not both",
            "field `streams[1].name`: \"a\" is listed twice",
            "field `streams[1].efo_consumer`: only for kind = \"kinesis\"",
            "field `streams[2].name`: a Kinesis stream name",
            "field `consumers[0].streams`: \"q\" is not one of the [[streams]]",
        ] {
            assert!(e.contains(problem), "{problem} missing from {e}");
        }
        let single = write("[[consumers]]\ntype = \"count\"\nname = \"c\"\nstreams = [\"mcp-events\"]\n");
        let e = format!("{:#}", load(single.path()).unwrap_err());
        assert!(e.contains("field `consumers[0].streams`: only with [[streams]]"), "{e}");
    }

    #[test]
    #[allow(clippy::result_large_err)] // figment's Jail API returns its own error type
    fn environment_overrides_file() {
        let f = write("[worker]\nfailover = \"10s\"\n[[consumers]]\ntype = \"count\"\nname = \"c\"\n");
        figment::Jail::expect_with(|jail| {
            jail.set_env("WEIR_WORKER__FAILOVER", "20s");
            jail.set_env("WEIR_LOG", "debug");
            jail.set_env("WEIR_LOG_FORMAT", "json");
            jail.set_env("WEIR_EMULATORS_HOME", "/tmp/elsewhere");
            jail.set_env("WEIR_WORKERS", "3");
            let c = super::load(f.path(), crate::App::new().registry()).map_err(|e| format!("{e:#}"))?;
            assert_eq!(c.worker.failover, std::time::Duration::from_secs(20));
            Ok(())
        });
    }

    #[test]
    #[allow(clippy::result_large_err)] // figment's Jail API returns its own error type
    fn the_images_listen_default_sits_below_the_file_and_the_override() {
        let plain = write("[[consumers]]\ntype = \"count\"\nname = \"c\"\n");
        let pinned = write("[http]\nlisten = \"127.0.0.1:9999\"\n[[consumers]]\ntype = \"count\"\nname = \"c\"\n");
        figment::Jail::expect_with(|jail| {
            let app = crate::App::new();
            let registry = app.registry();
            let listen = |f: &tempfile::NamedTempFile| {
                super::load(f.path(), registry).map(|c| c.http.listen.map(|a| a.to_string())).unwrap()
            };
            assert_eq!(listen(&plain).as_deref(), Some("127.0.0.1:9090"), "bare metal: loopback");
            jail.set_env(super::HTTP_LISTEN_DEFAULT, "0.0.0.0:9090");
            assert_eq!(listen(&plain).as_deref(), Some("0.0.0.0:9090"), "the image's default");
            assert_eq!(listen(&pinned).as_deref(), Some("127.0.0.1:9999"), "the file wins over the default");
            jail.set_env("WEIR_HTTP__LISTEN", "127.0.0.1:7000");
            assert_eq!(listen(&pinned).as_deref(), Some("127.0.0.1:7000"), "the override wins over the file");
            Ok(())
        });
    }

    /// Each exactly-once archiver may keep tens of kilobytes of intents in the lease item
    /// of a shard it reads: more of them than DynamoDB's 400 KB holds beside the
    /// lease's own fields are refused, naming them. Archivers in `firehose` mode keep
    /// none, and with `[[streams]]` only those reading a stream count for its leases.
    #[test]
    fn more_exactly_once_archivers_than_a_lease_item_holds_are_refused() {
        let archiver = |i: usize, extra: &str| {
            format!(
                "[[consumers]]\ntype = \"archiver\"\nname = \"archive-{i:02}\"\ndirectory = \"out\"\n{extra}[consumers.destination]\n"
            )
        };
        let one = load(write(&archiver(0, "")).path()).unwrap();
        let size = &lease_size::lease_sizes(&one)[0];
        let each = size.archivers[0].1;
        assert!((30_000..50_000).contains(&each), "an archiver's intents: {each} bytes");
        // Each archiver added adds its checkpoint to the lease too.
        let fit = (0..).take_while(|n| n * (each + 200) + size.lease <= weir_core::ports::MAX_LEASE_ITEM_BYTES).last();
        let fit = fit.unwrap();
        let many = |n: usize, extra: &dyn Fn(usize) -> String| {
            let text: String = (0..n).map(|i| archiver(i, &extra(i))).collect();
            load(write(&text).path())
        };
        many(fit, &|_| String::new()).unwrap();
        let e = format!("{:#}", many(fit + 1, &|_| String::new()).unwrap_err());
        assert!(
            e.contains(&format!("field `consumers`: the {} exactly-once archivers \"archive-00\"", fit + 1)),
            "{e}"
        );
        assert!(e.contains(&format!("\"archive-{fit:02}\" may keep up to {each} bytes of intents each")), "{e}");
        assert!(e.contains("past DynamoDB's item limit of 409600 bytes"), "{e}");
        assert!(e.contains(&format!("at most {fit} fit")), "{e}");
        // At least once keeps no intents.
        many(fit + 1, &|i| if i == 0 { "mode = \"firehose\"\n".into() } else { String::new() }).unwrap();
        // Split between two streams, each stream's leases hold half of them.
        let two = |n: usize| {
            let text: String = (0..n)
                .map(|i| archiver(i, &format!("streams = [\"{}\"]\n", if i % 2 == 0 { "a" } else { "b" })))
                .collect();
            load(write(&format!("[[streams]]\nname = \"a\"\n[[streams]]\nname = \"b\"\n{text}")).path())
        };
        two(fit + 1).unwrap();
        let e = format!("{:#}", two(2 * fit + 2).unwrap_err());
        assert!(e.contains("of stream \"a\""), "{e}");
    }
}
