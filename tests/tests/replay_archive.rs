//! `weir replay --from-archive`: an archive written by the archiver (the demo's
//! `mcp-archive`, partitioned by tenant, tool and hour) is replayed into a new prefix
//! partitioned by tool and day. DuckDB reads both: the same records (as a multiset),
//! every row in the partition its own `tool_name` names, no error output. Running the
//! finished job again writes nothing; `--status` reports it done.
#![allow(clippy::unwrap_used, clippy::print_stdout)] // a test: a failed expectation is a failed test

use std::path::Path;
use std::process::{Command, Output, Stdio};

use weir_core::{Clock, SystemClock};
use weir_e2e::{by_tool_archiver_toml, duckdb, files, weir_binary};

fn weir(args: &[&str], cwd: &Path) -> Output {
    let out = Command::new(weir_binary())
        .args(args)
        .current_dir(cwd)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "weir {args:?} failed\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn config(dir: &Path) -> String {
    format!(
        "[stream]\nname = \"unused-for-archive-replays\"\n[leases]\npath = \"{}\"\nnamespace = \"backfill\"\n{}",
        dir.join("leases.db").display(),
        by_tool_archiver_toml(&dir.join("new"))
    )
}

const COLUMNS: &str = "tenant_id, tool_name, session_id, timestamp_utc, duration_ms, success, error_code";

#[test]
fn an_archive_replays_into_a_new_partitioning() {
    let dir = tempfile::tempdir().unwrap();
    let demo = dir.path().join("demo");
    weir(&["demo", "--duration", "3s", "--rate", "2000", "--out", demo.to_str().unwrap()], dir.path());
    let old = demo.join("archive/tool-events");
    let cfg = dir.path().join("replay.toml");
    std::fs::write(&cfg, config(dir.path())).unwrap();
    let to = SystemClock.now().as_millis().to_string();
    let args = [
        "replay",
        "--config",
        cfg.to_str().unwrap(),
        "--from-archive",
        old.to_str().unwrap(),
        "--from",
        "2020-01-01T00:00:00Z",
        "--to",
        &to,
        "--consumers",
        "by-tool",
        "--job",
        "retool",
    ];
    let run = weir(&args, dir.path());
    let stdout = String::from_utf8_lossy(&run.stdout).into_owned();
    assert!(stdout.contains("replay retool: "), "{stdout}");

    let old_glob = format!("{}/**/*.gz", old.display());
    let new_glob = format!("{}/new/by-tool/**/*.gz", dir.path().display());
    let count = |glob: &str| {
        duckdb(&format!("select count(*) from read_json_auto('{glob}', format = 'newline_delimited')"))[0][0]
            .as_u64()
            .unwrap()
    };
    let before = count(&old_glob);
    assert!(before > 1_000, "the demo archived {before} records");
    assert_eq!(count(&new_glob), before, "record counts equal");
    let diff = duckdb(&format!(
        "select (select count(*) from (select {COLUMNS} from read_json_auto('{old_glob}', format = 'newline_delimited') \
                 except all select {COLUMNS} from read_json_auto('{new_glob}', format = 'newline_delimited'))), \
                (select count(*) from (select {COLUMNS} from read_json_auto('{new_glob}', format = 'newline_delimited') \
                 except all select {COLUMNS} from read_json_auto('{old_glob}', format = 'newline_delimited')))"
    ));
    assert_eq!((diff[0][0].as_u64(), diff[0][1].as_u64()), (Some(0), Some(0)), "the same records, none twice");
    let misplaced = duckdb(&format!(
        "select count(*), count(distinct tool) from read_json_auto('{new_glob}', format = 'newline_delimited', hive_partitioning = true) \
         where tool <> tool_name"
    ));
    assert_eq!(misplaced[0][0].as_u64(), Some(0), "partitions follow the new query");
    let tools = duckdb(&format!(
        "select count(distinct tool) from read_json_auto('{new_glob}', format = 'newline_delimited', hive_partitioning = true)"
    ));
    assert!(tools[0][0].as_u64().unwrap() > 1, "{tools:?}");
    assert!(!dir.path().join("new/by-tool-errors").exists(), "no record failed");

    // The finished job runs again without writing anything.
    let objects = |p: &Path| files(p).len();
    let written = objects(&dir.path().join("new"));
    weir(&args, dir.path());
    assert_eq!(objects(&dir.path().join("new")), written, "a finished job writes nothing more");
    let status = weir(&[&args[..3], &["--job", "retool", "--status"]].concat(), dir.path());
    let status = String::from_utf8_lossy(&status.stdout).into_owned();
    assert!(status.contains("job retool: done;"), "{status}");
}
