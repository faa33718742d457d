//! The simulation under `cargo test`: the seeds that found holes, and a sweep of seeds
//! (`WEIR_SIM_SEEDS`, 120 by default: about a minute on two cores in a debug build).
//! A failing seed prints the one command that replays it. Long runs are
//! `cargo run -p weir-sim --release -- --seeds 10000`.
#![allow(clippy::unwrap_used, clippy::print_stdout)] // a test: a failed expectation is a failed test

/// Seeds that failed before a fix, with what they found. Each replays the same
/// scenario as when it failed (scenarios are drawn from the seed alone); the
/// interleaving may differ since, as the code under test changed.
const REGRESSIONS: &[(u64, &str)] = &[
    (11, "hole 1: the parts of one record split across two objects, one lost"),
    (89, "a shard closed for its consumer behind a batch that failed"),
    (142, "a record sent to the error output lost: the data object around it skipped it"),
    (161, "a line the Parquet table refuses skipped as if in its partition's object"),
    (165, "a round's manifests deleted when its intent write timed out but landed"),
    (186, "the same: intents naming deleted manifests, archived twice"),
    (257, "a record an earlier owner failed and a later one archived, archived again"),
    (265, "hole 4: a put whose reply was lost re-keyed and written twice"),
    (334, "hole 3: a lease item past DynamoDB's 400 KB"),
    (363, "a round's manifests deleted after a lost lease (NotHeld)"),
    (366, "the same, with two archivers"),
    (5511, "a worker paused while resolving swept the next holder's named manifests"),
    (50530, "a child created taken on a retry also adopted by the same cycle: two shard workers"),
    (50677, "the same: the child's second worker lost it, the first never read it"),
    (50225, "a Lambda failing past five minutes: a part archived as data sent to errors too"),
];

/// Runs `weir-sim` with `args`: whether every seed passed, and what it printed.
fn sim(args: &[&str]) -> (bool, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_weir-sim")).args(args).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
}

#[test]
fn the_seeds_that_found_holes_pass() {
    let list: Vec<String> = REGRESSIONS.iter().map(|(s, _)| s.to_string()).collect();
    let (passed, text) = sim(&["--list", &list.join(","), "--jobs", "2"]);
    println!("{text}");
    let found: Vec<String> = REGRESSIONS
        .iter()
        .filter(|(seed, _)| text.contains(&format!("--seed {seed}\n")))
        .map(|(seed, what)| format!("seed {seed} ({what})"))
        .collect();
    assert!(passed, "failing again: {found:?}\n{text}");
}

#[test]
fn a_sweep_of_seeds_passes() {
    let count = std::env::var("WEIR_SIM_SEEDS").ok().and_then(|n| n.parse::<u64>().ok()).unwrap_or(120);
    let (passed, text) = sim(&["--seeds", &count.to_string(), "--from", "0", "--jobs", "2"]);
    println!("{text}");
    assert!(passed, "{text}");
    assert!(text.contains(&format!("{count} seeds from 0: 0 failed")), "{text}");
}
