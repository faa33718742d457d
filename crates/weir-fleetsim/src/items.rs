//! The sizes of the items the DynamoDB lease table stores, as DynamoDB counts them
//! (attribute names plus values; a number takes one byte per two significant digits
//! plus one: <https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/CapacityUnitCalculations.html>).
//!
//! Lease items: [`weir_core::ports::lease_item_bytes`], the port's documented *upper
//! bound* of the adapter's item (the lease's JSON plus a 320-byte allowance for the
//! key and index attributes beside it; the adapter's tests check the bound). The
//! adapter's own encoding is built from AWS SDK types, which stay out of the simulator;
//! so lease reads and writes here cost what the bound says, at most a few hundred
//! bytes per item more than DynamoDB would count (see RESULTS.md for what that does to
//! a Query of the namespace).
//!
//! Worker and namespace records: computed attribute by attribute from what the adapter
//! writes (`pk`, `sk`, `counter`, `instance`, `held`, `active`; `pk`, `sk`, `stream`,
//! `format`, `buckets`, `worker_buckets`), with numbers at their largest (20 digits).

use weir_core::WorkerId;

/// The bytes of a number attribute's value of up to 20 digits, at most.
const NUMBER_BYTES: usize = 11;

/// The bytes of the key attributes `pk` = `namespace`, `sk` = `sort_key`.
fn key_bytes(namespace: &str, sort_key_len: usize) -> usize {
    "pk".len() + namespace.len() + "sk".len() + sort_key_len
}

/// A worker record under hash key `pk`: `sk` = `worker#<id>`, `counter`, `instance`
/// (32 hex digits), `held`, `active`.
pub fn worker_item_bytes(pk: &str, worker: &WorkerId) -> usize {
    key_bytes(pk, "worker#".len() + worker.as_str().len())
        + "counter".len()
        + NUMBER_BYTES
        + "instance".len()
        + 32
        + "held".len()
        + NUMBER_BYTES
        + "active".len()
        + NUMBER_BYTES
}

/// The namespace record: `sk` = `meta`, `stream`, `format`, `buckets`, `worker_buckets`.
pub fn meta_item_bytes(namespace: &str, stream: &str) -> usize {
    key_bytes(namespace, "meta".len())
        + "stream".len()
        + stream.len()
        + "format".len()
        + NUMBER_BYTES
        + "buckets".len()
        + NUMBER_BYTES
        + "worker_buckets".len()
        + NUMBER_BYTES
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn worker_records_are_small_items() {
        // pk(2) + "app"(3) + sk(2) + "worker#w-1"(10) + counter(7+11) + instance(8+32)
        // + held(4+11) + active(6+11).
        assert_eq!(worker_item_bytes("app", &WorkerId::new("w-1")), 107);
        assert_eq!(meta_item_bytes("app", "s"), 2 + 3 + 2 + 4 + 6 + 1 + 6 + 11 + 7 + 11 + 14 + 11);
    }
}
