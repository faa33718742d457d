//! DynamoDB's capacity arithmetic, as pure functions.
//!
//! - A read of an item costs one read unit per 4 KB of it (rounded up) when strongly
//!   consistent, half that when eventually consistent; a read of a missing item costs
//!   the same as one of a 1-byte item.
//! - A Query reads at most 1 MB of items per page (request); each page costs the sum of
//!   its items' sizes, rounded up to 4 KB, not the sum of each item rounded.
//! - A write costs one write unit per 1 KB of the larger of the item before and after
//!   (rounded up, at least one); in a transaction, twice that.
//!
//! <https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/read-write-operations.html>
//! <https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/Query.Other.html>
//! <https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/transaction-apis.html>
//!
//! Read units are counted in halves (an eventually consistent read of a small item is
//! half a unit) so that every sum is exact.

/// Bytes one read unit covers.
pub const READ_UNIT_BYTES: usize = 4 * 1024;

/// Bytes one write unit covers.
pub const WRITE_UNIT_BYTES: usize = 1024;

/// The most item bytes one Query page reads.
pub const QUERY_PAGE_BYTES: usize = 1024 * 1024;

/// How a read is served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Consistency {
    /// `ConsistentRead: true`: a full unit per 4 KB.
    Strong,
    /// The default: half a unit per 4 KB.
    Eventual,
}

/// Half read units for reading `bytes` of items in one request (a GetItem, or one
/// Query page with the sizes of its items summed).
pub fn read_half_units(bytes: usize, consistency: Consistency) -> u64 {
    let units = bytes.div_ceil(READ_UNIT_BYTES).max(1) as u64;
    match consistency {
        Consistency::Strong => 2 * units,
        Consistency::Eventual => units,
    }
}

/// Write units for writing an item whose larger size (before or after) is `bytes`.
pub fn write_units(bytes: usize, transactional: bool) -> u64 {
    let units = bytes.div_ceil(WRITE_UNIT_BYTES).max(1) as u64;
    if transactional { 2 * units } else { units }
}

/// One Query page: how many items it returns and their bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Page {
    /// Items in the page.
    pub items: usize,
    /// Their summed sizes.
    pub bytes: usize,
}

/// The pages a Query over items of `sizes` (in sort-key order) takes: items are added
/// to a page while its bytes stay within [`QUERY_PAGE_BYTES`]. Always at least one page
/// (a Query that finds nothing is still a request).
pub fn query_pages(sizes: impl IntoIterator<Item = usize>) -> Vec<Page> {
    let mut pages = Vec::new();
    let mut current = Page { items: 0, bytes: 0 };
    for size in sizes {
        if current.items > 0 && current.bytes + size > QUERY_PAGE_BYTES {
            pages.push(current);
            current = Page { items: 0, bytes: 0 };
        }
        current.items += 1;
        current.bytes += size;
    }
    pages.push(current);
    pages
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_round_up_to_4_kb_and_eventual_is_half() {
        assert_eq!(read_half_units(0, Consistency::Strong), 2, "a missing item costs a unit");
        assert_eq!(read_half_units(4096, Consistency::Strong), 2);
        assert_eq!(read_half_units(4097, Consistency::Strong), 4);
        assert_eq!(read_half_units(4097, Consistency::Eventual), 2);
        assert_eq!(read_half_units(100, Consistency::Eventual), 1, "half a unit");
    }

    #[test]
    fn writes_round_up_to_1_kb_and_transactions_double() {
        assert_eq!(write_units(1, false), 1);
        assert_eq!(write_units(1024, false), 1);
        assert_eq!(write_units(1025, false), 2);
        assert_eq!(write_units(1025, true), 4);
        assert_eq!(write_units(0, true), 2);
    }

    /// A Query over N items of a known size: pages of at most 1 MB, each rounded once.
    #[test]
    fn query_pages_hold_one_mb_and_sum_before_rounding() {
        // 3,000 items of 700 bytes: 1,497 fit in a page (1,047,900 bytes).
        let pages = query_pages(std::iter::repeat_n(700, 3_000));
        let per_page = QUERY_PAGE_BYTES / 700;
        assert_eq!(per_page, 1_497);
        assert_eq!(pages.len(), 3);
        assert_eq!(pages[0], Page { items: per_page, bytes: per_page * 700 });
        assert_eq!(pages[2].items, 3_000 - 2 * per_page);
        assert_eq!(pages.iter().map(|p| p.items).sum::<usize>(), 3_000);
        let units: u64 = pages.iter().map(|p| read_half_units(p.bytes, Consistency::Strong)).sum();
        // 256 + 256 + ceil(4,200 / 4,096) = 2 units, strongly consistent.
        assert_eq!(units, 2 * (256 + 256 + 2));
        // Rounding each item instead would charge 3,000 units.
        assert!(units < 2 * 3_000);
        assert_eq!(query_pages(std::iter::empty()), vec![Page { items: 0, bytes: 0 }]);
    }
}
