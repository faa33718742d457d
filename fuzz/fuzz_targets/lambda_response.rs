//! A transform function's answer, whatever it holds: one outcome per input record,
//! never a panic. The first byte is the number of input records (mod 40).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&n, body)) = data.split_first() else { return };
    weir_archiver::fuzzing::lambda_response(usize::from(n % 40), body);
});
