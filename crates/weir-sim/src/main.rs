//! `weir-sim`: runs seeds of the deterministic simulation and reports what they found.
//!
//! ```text
//! weir-sim --seed 42              # one seed, with its trace's tail if it fails
//! weir-sim --seed 42 --trace      # and the tail even if it passes
//! weir-sim --seeds 1000 --from 0  # many seeds, two at a time
//! weir-sim --list 11,89,142        # these seeds, two at a time
//! ```
//!
//! Each seed of `--seeds` runs in a process of its own (this binary with `--seed`):
//! tokio seeds each runtime's `select!` from a process-wide counter, so a seed is the
//! same run only as the first simulation of a process, which is also how it replays.
#![allow(clippy::print_stdout)] // a command-line tool: its output is its answer

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Parser;
use weir_sim::{Report, Scenario, replay_command, run};

/// Runs seeds of weir's deterministic simulation.
#[derive(Parser)]
struct Args {
    /// Run this one seed.
    #[arg(long, conflicts_with_all = ["seeds", "list"])]
    seed: Option<u64>,
    /// Run this many seeds.
    #[arg(long, conflicts_with = "list")]
    seeds: Option<u64>,
    /// Run these seeds (comma-separated).
    #[arg(long, value_delimiter = ',')]
    list: Vec<u64>,
    /// The first seed of `--seeds`.
    #[arg(long, default_value_t = 0)]
    from: u64,
    /// Seeds run at once.
    #[arg(long, default_value_t = 2)]
    jobs: u64,
    /// Print the trace's tail of every failing seed, and with `--seed` of a passing
    /// one too (every line with `WEIR_SIM_FULL_TRACE` set: two runs of a seed can then
    /// be compared line by line).
    #[arg(long)]
    trace: bool,
}

/// The last line a `--seed` run prints: seed, simulated seconds, trace hash, passed.
const RESULT: &str = "RESULT";

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    if let Some(seed) = args.seed {
        let report = run(Scenario::from_seed(seed));
        print_report(&report, args.trace);
        println!(
            "{RESULT} {} {} {:016x} {}",
            report.seed,
            report.simulated.as_secs(),
            report.trace_hash,
            report.passed()
        );
        return if report.passed() { std::process::ExitCode::SUCCESS } else { std::process::ExitCode::FAILURE };
    }
    let seeds: Arc<Vec<u64>> = Arc::new(if args.list.is_empty() {
        (args.from..args.from + args.seeds.unwrap_or(100)).collect()
    } else {
        args.list.clone()
    });
    let next = Arc::new(AtomicU64::new(0));
    let failed: Arc<Mutex<Vec<u64>>> = Arc::default();
    let simulated = Arc::new(AtomicU64::new(0));
    let began = Instant::now();
    let workers: Vec<_> = (0..args.jobs.max(1))
        .map(|_| {
            let (next, failed, simulated, trace) = (next.clone(), failed.clone(), simulated.clone(), args.trace);
            let seeds = seeds.clone();
            std::thread::spawn(move || {
                loop {
                    let Some(&seed) = seeds.get(next.fetch_add(1, Ordering::SeqCst) as usize) else { return };
                    let (passed, secs, output) = run_child(seed, trace);
                    simulated.fetch_add(secs, Ordering::SeqCst);
                    if !passed {
                        print!("{output}");
                        failed.lock().unwrap_or_else(|p| p.into_inner()).push(seed);
                    }
                }
            })
        })
        .collect();
    for w in workers {
        let _ = w.join();
    }
    let failed = failed.lock().unwrap_or_else(|p| p.into_inner());
    let hours = Duration::from_secs(simulated.load(Ordering::SeqCst)).as_secs_f64() / 3600.0;
    let which = if args.list.is_empty() { format!("from {}", args.from) } else { "listed".into() };
    println!(
        "{} seeds {which}: {} failed; {hours:.1} simulated hours in {:.0} s",
        seeds.len(),
        failed.len(),
        began.elapsed().as_secs_f64()
    );
    let mut seeds: Vec<u64> = failed.clone();
    seeds.sort();
    for seed in seeds {
        println!("  failed: {}", replay_command(seed));
    }
    if failed.is_empty() { std::process::ExitCode::SUCCESS } else { std::process::ExitCode::FAILURE }
}

/// Runs `seed` in a process of its own: (passed, simulated seconds, what it printed).
fn run_child(seed: u64, trace: bool) -> (bool, u64, String) {
    let exe = match std::env::current_exe() {
        Ok(exe) => exe,
        Err(e) => return (false, 0, format!("seed {seed}: cannot find this program: {e}\n")),
    };
    let mut cmd = std::process::Command::new(exe);
    cmd.args(["--seed", &seed.to_string()]);
    if trace {
        cmd.arg("--trace");
    }
    let out = match cmd.output() {
        Ok(out) => out,
        Err(e) => return (false, 0, format!("seed {seed}: cannot run: {e}\n")),
    };
    let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    let result =
        text.lines().rev().find_map(|l| l.strip_prefix(RESULT)).map(|r| r.split_whitespace().collect::<Vec<_>>());
    match result.as_deref() {
        Some([_, secs, _, passed]) => (out.status.success() && *passed == "true", secs.parse().unwrap_or(0), text),
        _ => (false, 0, format!("seed {seed}: no result ({})\n{text}", out.status)),
    }
}

fn print_report(r: &Report, trace: bool) {
    println!("{}", r.summary);
    println!(
        "  {} simulated, {} trace lines (hash {:016x}), {:?}, {} manifests left",
        humantime_secs(r.simulated),
        r.trace_lines,
        r.trace_hash,
        r.counts,
        r.manifests_left
    );
    if trace {
        for line in &r.tail {
            println!("  | {line}");
        }
    }
    if r.passed() {
        println!("  passed");
        return;
    }
    for v in &r.violations {
        println!("  VIOLATION {v}");
    }
    println!("  replay: {}", replay_command(r.seed));
}

fn humantime_secs(d: Duration) -> String {
    format!("{}m{:02}s", d.as_secs() / 60, d.as_secs() % 60)
}
