//! Prefix expressions and Java time patterns on any text: parsed and evaluated (with
//! hostile partition values) or refused, never a panic; an evaluated key never holds a
//! `..` segment made by a partition value (one the same template makes with a plain
//! value comes from the operator's text, which `Prefixes::new` refuses at start).
#![no_main]

use std::collections::BTreeMap;

use libfuzzer_sys::fuzz_target;
use weir_core::Timestamp;
use weir_firehose::java_time::JavaPattern;
use weir_firehose::prefix::{Evaluation, Field, Template, check_partition_value};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let (template, value) = text.split_once('\n').unwrap_or((text, "v"));
    let _ = check_partition_value(value);
    if let Ok(p) = JavaPattern::compile(template) {
        for ms in [0, 1_764_400_000_123, -62_135_596_800_000, 253_402_300_799_999] {
            let _ = p.format(Timestamp::from_millis(ms), chrono_tz::Tz::Asia__Kolkata);
        }
    }
    for field in [Field::Prefix, Field::ErrorOutputPrefix] {
        let Ok(t) = Template::parse(template, field) else { continue };
        let keys: BTreeMap<String, String> =
            t.partition_keys().into_iter().map(|k| (k.to_owned(), value.to_owned())).collect();
        let e = Evaluation {
            oldest_arrival: Timestamp::from_millis(1_764_400_000_123),
            time_zone: chrono_tz::Tz::UTC,
            partition_keys: &keys,
            error_output_type: "processing-failed",
        };
        // The same template with a plain value: a `..` it makes comes from the template
        // and its time pattern (refused at start by `Prefixes::new`), not from a value.
        let plain: BTreeMap<String, String> = keys.keys().map(|k| (k.clone(), "v".to_owned())).collect();
        let from_template = t
            .evaluate(&Evaluation { partition_keys: &plain, ..e })
            .map_or(true, |key| key.split('/').any(|s| s == ".."));
        if let Ok(key) = t.evaluate(&e) {
            if check_partition_value(value).is_ok() && !from_template {
                assert!(!key.split('/').any(|s| s == ".."), "{template:?} with {value:?} made {key:?}");
            }
        }
    }
});
