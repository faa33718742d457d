//! A seed is one run: the same trace every time it runs, each time in a process of its
//! own (as `weir-sim --seeds` runs seeds and as a failing seed replays).
#![allow(clippy::unwrap_used, clippy::print_stdout)] // a test: a failed expectation is a failed test

/// The `RESULT` line of `weir-sim --seed <seed>`: seed, simulated seconds, trace hash.
fn result(seed: u64) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_weir-sim"))
        .args(["--seed", &seed.to_string()])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let line = text.lines().find(|l| l.starts_with("RESULT")).unwrap_or_else(|| panic!("no result: {text}"));
    line.split_whitespace().take(4).collect::<Vec<_>>().join(" ")
}

#[test]
fn a_seed_replays_the_same_run() {
    for seed in [3, 36] {
        let (a, b) = (result(seed), result(seed));
        println!("{a}");
        assert_eq!(a, b, "seed {seed} ran twice differently");
    }
}
