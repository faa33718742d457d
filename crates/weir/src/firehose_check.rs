//! `weir config check --firehose FILE`: an existing Firehose destination, checked with
//! Firehose's ranges and weir's rules; every problem and warning is printed.

use std::path::Path;

use anyhow::{Context, Result, bail};
use weir_archiver::firehose_config::{from_cloudformation_yaml, from_json, from_toml, validate};

pub fn run(file: &Path, resource: Option<&str>) -> Result<()> {
    let text = std::fs::read_to_string(file).with_context(|| format!("cannot read {}", file.display()))?;
    let ext = file.extension().and_then(|e| e.to_str()).unwrap_or_default();
    let destination = match ext {
        "json" => from_json(&text),
        "yaml" | "yml" => from_cloudformation_yaml(&text, resource),
        "toml" => from_toml(&text),
        other => bail!("{}: unknown extension {other:?}: use .json, .yaml, .yml or .toml", file.display()),
    }
    .with_context(|| format!("{} is not a Firehose S3 destination", file.display()))?;
    match validate(&destination) {
        Ok(settings) => {
            println!(
                "{}: ok (buffer {} MiB / {} s, {:?}, dynamic partitioning {}{}{}{})",
                file.display(),
                settings.buffer_bytes / (1024 * 1024),
                settings.buffer_interval.as_secs(),
                settings.compression,
                if settings.dynamic_partitioning_retry.is_some() { "on" } else { "off" },
                match settings.decompression {
                    None => "",
                    Some(d) if d.message_extraction => ", CloudWatch Logs records: messages extracted",
                    Some(_) => ", CloudWatch Logs records: decompressed",
                },
                match &settings.conversion {
                    None => String::new(),
                    Some(c) => format!(
                        ", {:?} Parquet with {}",
                        c.parquet.compression,
                        match c.glue_table() {
                            Some((db, table)) =>
                                format!("the columns of Glue table {db}.{table}, or the archiver's `columns`"),
                            None => "the archiver's `columns`".into(),
                        }
                    ),
                },
                match &settings.backup {
                    None => String::new(),
                    Some(b) => format!(
                        ", source records backed up under {:?} ({}) by consumer <name>-backup",
                        b.prefix.clone().unwrap_or_default(),
                        b.compression_format.as_deref().unwrap_or("UNCOMPRESSED")
                    ),
                }
            );
            for w in &settings.warnings {
                println!("warning: {w}");
            }
            Ok(())
        }
        Err(problems) => {
            for p in &problems {
                eprintln!("problem: {p}");
            }
            bail!("{}: {} problem(s)", file.display(), problems.len())
        }
    }
}
