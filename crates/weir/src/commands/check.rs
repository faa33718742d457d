//! `weir config check FILE`: the config read and validated as `weir run` would, with
//! every problem named, and what it would run.

use std::path::Path;

use anyhow::Result;

use crate::config;
use crate::plugin::Registry;

/// Checks `file`; prints what it would run, and its warnings.
pub fn run(file: &Path, registry: &Registry) -> Result<()> {
    let (c, warnings) = config::check(file, registry)?;
    println!(
        "{}: ok ({} consumers: {}; reading {}; leases in {})",
        file.display(),
        c.consumers.len(),
        c.consumers.iter().map(|c| format!("{} ({})", c.name, c.kind)).collect::<Vec<_>>().join(", "),
        c.describe_stream(true),
        c.leases.describe()
    );
    for w in warnings {
        println!("warning: {w}");
    }
    println!("consumer kinds: {}", registry.names().join(", "));
    Ok(())
}
