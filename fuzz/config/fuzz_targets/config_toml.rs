//! The config loader on any text: a config or an error naming what is wrong, never a
//! panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let app = weir::App::new();
        let _ = app.check_config(text);
    }
});
