//! De-aggregation never panics, and whatever it cannot decode comes back unchanged.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use weir_core::kpl::{Aggregation, deaggregate};
use weir_core::{ExtendedSequenceNumber, Record, SequenceNumber, Timestamp};

fuzz_target!(|data: &[u8]| {
    let input = Bytes::copy_from_slice(data);
    let record = Record {
        partition_key: "pk".into(),
        position: ExtendedSequenceNumber::plain(SequenceNumber::from_u128(1)),
        approximate_arrival: Timestamp::from_millis(0),
        data: input.clone(),
    };
    let (out, how) = deaggregate(record);
    match how {
        Aggregation::Aggregated(n) => {
            assert_eq!(out.len(), n);
            assert!(out.iter().enumerate().all(|(i, r)| r.position.sub_sequence == i as u64));
        }
        Aggregation::Plain | Aggregation::Corrupt(_) => {
            assert_eq!(out.len(), 1);
            assert_eq!(out[0].data, input);
        }
    }
});
