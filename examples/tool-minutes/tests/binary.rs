//! The plugin binary itself: `config check` accepts the `tool-minutes` kind that plain
//! `weir` does not know, and names a field the kind refuses. (This test also makes
//! `cargo test` build `weir-tool-minutes`, which tests/tests/plugin_example.rs runs.)
#![allow(clippy::unwrap_used)] // a test: a failed expectation is a failed test

use std::path::Path;
use std::process::{Command, Output};

fn check(binary: &str, config: &Path) -> Output {
    Command::new(binary).args(["config", "check"]).arg(config).output().unwrap()
}

fn write_config(dir: &Path, consumer: &str) -> std::path::PathBuf {
    let cfg = dir.join("weir.toml");
    let text = format!(
        "[stream]\nkind = \"kinesis\"\nname = \"calls\"\n[leases]\npath = \"{leases}\"\n[http]\nlisten = \"\"\n\
         [[consumers]]\ntype = \"tool-minutes\"\nname = \"minutes\"\n{consumer}\n",
        leases = dir.join("leases.db").display(),
    );
    std::fs::write(&cfg, text).unwrap();
    cfg
}

#[test]
fn config_check_knows_the_plugin_kind() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("minutes.db");
    let cfg = write_config(dir.path(), &format!("path = \"{}\"", db.display()));
    let out = check(env!("CARGO_BIN_EXE_weir-tool-minutes"), &cfg);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn config_check_names_a_field_the_kind_refuses() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(dir.path(), "path = \"x.db\"\nno_such_field = 1");
    let out = check(env!("CARGO_BIN_EXE_weir-tool-minutes"), &cfg);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("no_such_field"), "{stderr}");
}
