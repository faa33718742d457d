//! The config loader's fuzz corpus (`fuzz/corpus/config_toml/`: the seeds, and every
//! input that once made the loader panic) replayed through the loader as the fuzz
//! target does: a config or an error naming what is wrong, never a panic. CI replays
//! it here; `scripts/fuzz.sh` fuzzes the target itself (`fuzz/config/`), whose build
//! needs the whole crate with the AWS SDK.
#![allow(clippy::unwrap_used)] // a test: a failed expectation is a failed test

use std::path::Path;

#[test]
fn every_input_of_the_config_fuzz_corpus_loads_or_is_refused() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/config_toml");
    let mut inputs: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
    inputs.sort();
    assert!(inputs.len() >= 6, "seeds in {}: {}", dir.display(), inputs.len());
    let app = weir::App::new();
    let (mut loaded, mut refused) = (0, 0);
    for input in &inputs {
        let data = std::fs::read(input).unwrap();
        let Ok(text) = std::str::from_utf8(&data) else { continue };
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| app.check_config(text).is_ok()));
        match outcome {
            Ok(true) => loaded += 1,
            Ok(false) => refused += 1,
            Err(_) => panic!("the config loader panicked on {}", input.display()),
        }
    }
    assert!(loaded > 0 && refused > 0, "seeds both load and are refused: {loaded} loaded, {refused} refused");
}
