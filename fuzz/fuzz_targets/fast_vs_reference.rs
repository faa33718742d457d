//! Differential: the fast path (one-pass scanner and writer) and the reference
//! pipeline (serde_json, jaq) on the same bytes, in every configuration with a fast
//! path. Whenever the fast path answers, its line and route must be the reference's.
#![no_main]

use std::cell::RefCell;

use libfuzzer_sys::fuzz_target;
use weir_archiver::fuzzing::Differential;

thread_local! {
    static PATHS: RefCell<Differential> = RefCell::new(Differential::default());
}

fuzz_target!(|data: &[u8]| {
    PATHS.with(|p| p.borrow_mut().check(data));
});
