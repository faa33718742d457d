//! Helpers of the buffer tests.

use std::collections::BTreeMap;
use std::io::Read;
use std::time::Duration;

use bytes::Bytes;
use weir_core::{ExtendedSequenceNumber, SequenceNumber, Timestamp};

use crate::delivery::buffers::{Limits, Overflow};
use crate::delivery::sealed::Sealed;
use crate::pipeline::route::Route;
use weir_firehose::Compression;

pub fn limits(size: u64, interval_s: u64, max: usize, overflow: Overflow) -> Limits {
    Limits {
        size_bytes: size,
        interval: Duration::from_secs(interval_s),
        memory: usize::MAX,
        max_active: Some(max),
        overflow,
        compression: Compression::Gzip,
        error_compression: Compression::Gzip,
        parquet: None,
        level: 6,
        exact_data: false,
    }
}

pub fn key(tenant: &str) -> Route {
    Route::Data([("tenantId".to_owned(), tenant.to_owned())].into())
}

pub fn pos(n: u128) -> ExtendedSequenceNumber {
    ExtendedSequenceNumber::plain(SequenceNumber::from_u128(n))
}

pub fn t(s: i64) -> Timestamp {
    Timestamp::from_millis(s * 1000)
}

pub fn gunzip(b: &Bytes) -> String {
    let mut s = String::new();
    flate2::read::GzDecoder::new(&b[..]).read_to_string(&mut s).unwrap();
    s
}

/// Record `i` of `len` bytes and a newline: half compress well (`x` repeated), half
/// poorly (letters in a long cycle).
pub fn mixed_line(i: usize, len: usize) -> String {
    let body: String = if i.is_multiple_of(2) {
        "x".repeat(len)
    } else {
        (0..len).map(|j| char::from(b'a' + ((i * 7 + j * 13) % 26) as u8)).collect()
    };
    format!("{i}:{body}\n")
}

/// What the objects hold, per route.
pub fn contents(sealed: &[Sealed]) -> BTreeMap<String, String> {
    let mut got: BTreeMap<String, String> = BTreeMap::new();
    for f in sealed {
        got.entry(f.route().scope()).or_default().push_str(&gunzip(&f.body));
    }
    got
}

pub fn budget(memory: usize) -> Limits {
    Limits { memory, max_active: None, ..limits(1 << 30, 3600, 1, Overflow::FlushOldest) }
}
