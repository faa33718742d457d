//! The Firehose destination import (API JSON, TOML, CloudFormation YAML) and its
//! validation on any text: settings or problems, never a panic. The first byte picks
//! the format.
#![no_main]

use libfuzzer_sys::fuzz_target;
use weir_firehose::{from_cloudformation_yaml, from_json, from_toml, validate};

fuzz_target!(|data: &[u8]| {
    let Some((&how, rest)) = data.split_first() else { return };
    let Ok(text) = std::str::from_utf8(rest) else { return };
    let read = match how % 3 {
        0 => from_json(text),
        1 => from_toml(text),
        _ => from_cloudformation_yaml(text, None),
    };
    if let Ok(destination) = read {
        let _ = validate(&destination);
    }
});
