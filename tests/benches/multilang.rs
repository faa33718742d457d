//! The cost of a KCL MultiLang processor on weir: `weir run --until-caught-up` over the
//! same ferrokinesis stream (4 shards, 1 KB records, polling) with a Python processor on
//! `amazon_kclpy` that only checkpoints each batch, and with weir's no-op Rust `count`
//! consumer, in the same run. Prints records/s and CPU-seconds per 100k records of the
//! whole process tree (weir and its Python children), start to exit.
//!
//! cargo bench -p weir-e2e --bench multilang        (100,000 records)
//! Under `cargo test` it runs once with 2,000 records as a smoke test.
#![allow(clippy::unwrap_used, clippy::print_stdout)] // a test: a failed expectation is a failed test

use std::path::Path;
use std::time::Duration;

use weir_e2e::{
    KCLPY_CHECKPOINTER, cpu_seconds, create_stream, emulators_home, kinesis, put_kilobyte_records, timed, weir_command,
};
use weir_testkit::Emulator;

/// Runs `weir run --until-caught-up` with `consumer` (a `[[consumers]]` table); returns
/// wall and CPU seconds of weir and its children.
fn run(dir: &Path, endpoint: &str, name: &str, consumer: &str, n: u64) -> (f64, f64) {
    let cfg = dir.join(format!("{name}.toml"));
    std::fs::write(
        &cfg,
        format!(
            "[worker]\ninitial_position = \"TRIM_HORIZON\"\n[stream]\nkind = \"kinesis\"\nname = \"bench\"\n\
             [leases]\npath = \"{}\"\n[aws]\nkinesis_endpoint_url = \"{endpoint}\"\n[http]\nlisten = \"\"\n\
             [[consumers]]\n{consumer}\n",
            dir.join(format!("{name}.db")).display()
        ),
    )
    .unwrap();
    let mut cmd = weir_command();
    cmd.args(["run", "--config", cfg.to_str().unwrap(), "--until-caught-up"]);
    let c0 = cpu_seconds(true);
    let (out, wall) = timed(cmd, Duration::from_secs(900));
    let cpu = cpu_seconds(true) - c0;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains(&format!("({n} records processed)")), "{name}: {stdout}");
    (wall.as_secs_f64(), cpu)
}

#[tokio::main]
async fn main() {
    let full = std::env::args().any(|a| a == "--bench");
    let n: u64 = if full { 100_000 } else { 2_000 };
    let emu = Emulator::start("ferrokinesis", &[]);
    let client = kinesis(&emu.endpoint).await;
    create_stream(&client, "bench", 4).await;
    put_kilobyte_records(&client, "bench", n).await;

    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("processor.py"), KCLPY_CHECKPOINTER).unwrap();
    let kclpy = emulators_home().join("amazon_kclpy-3.2.0");
    let rust = run(dir.path(), &emu.endpoint, "rust", "type = \"count\"\nname = \"count\"", n);
    let python = run(
        dir.path(),
        &emu.endpoint,
        "python",
        &format!(
            "type = \"multilang\"\nname = \"py\"\ncommand = [\"python3\", \"processor.py\"]\ncwd = \"{}\"\n\
             env = {{ PYTHONPATH = \"{}\" }}",
            dir.path().display(),
            kclpy.display()
        ),
        n,
    );
    println!("\n`weir run --until-caught-up` over {n} records of 1 KB, ferrokinesis, 4 shards, polling");
    println!("(emulator-bound; whole process tree, start to exit)");
    println!("{:<40} {:>9} {:>11} {:>22}", "consumer", "seconds", "records/s", "CPU-s per 100k records");
    for (name, (wall, cpu)) in [("count (no-op Rust)", rust), ("multilang (Python, checkpoint per batch)", python)] {
        let rate = n as f64 / wall;
        println!("{name:<40} {wall:>9.2} {rate:>11.0} {:>22.2}", cpu * 100_000.0 / n as f64);
    }
    println!("Python/Rust ratios: wall {:.2}, CPU {:.2}", python.0 / rust.0, python.1 / rust.1);
}
