//! jq partition-key queries over any record: keys or an error, never a panic. The
//! input is `query NUL record`; without a NUL, the design note's query reads it.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let (query, record) = match data.iter().position(|&b| b == 0) {
        Some(at) => (std::str::from_utf8(&data[..at]).unwrap_or("."), &data[at + 1..]),
        None => ("{tenantId: .tenant_id, toolName: .tool_name}", data),
    };
    weir_archiver::fuzzing::keys(query, record);
});
