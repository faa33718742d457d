//! Route keys of partition-key texts seen before.
//!
//! Partitions are few (Firehose caps active partitions at 500) and records repeat
//! their partition-key values all the time. Turning a record's raw key texts into a
//! route key costs more than looking them up: unescaping, the sanitiser's checks of
//! every value and encoding the key took about 1,000 instructions per record in the
//! throughput bench, a lookup a fifth of that. The cache maps the exact raw JSON texts
//! of the key fields to the route key they produced, so a hit gives the same key the
//! full computation would (it is a function of those texts alone). Texts that fail the
//! checks are not cached: they take the full path, with its error message, every time.

use std::collections::HashMap;

/// Route keys by the raw texts of a flat query's fields (in the query's order).
#[derive(Debug)]
pub struct RouteCache {
    keys: HashMap<Box<[u8]>, Box<[u8]>, foldhash::fast::RandomState>,
    limit: usize,
    /// The lookup key of the last `get`, reused by `put`.
    scratch: Vec<u8>,
}

impl RouteCache {
    /// A cache holding at most `limit` entries (it starts over when full: a workload
    /// with more distinct keys than that gains nothing from it anyway).
    pub fn new(limit: usize) -> Self {
        Self { keys: HashMap::default(), limit, scratch: Vec::with_capacity(128) }
    }

    /// Writes the route key cached for `texts` into `key` (cleared first); `false`
    /// when there is none.
    pub fn get(&mut self, texts: &[&[u8]], key: &mut Vec<u8>) -> bool {
        self.scratch.clear();
        for text in texts {
            // Length-prefixed, so that no two lists of texts share a lookup key.
            self.scratch.extend_from_slice(&(text.len() as u32).to_le_bytes());
            self.scratch.extend_from_slice(text);
        }
        match self.keys.get(self.scratch.as_slice()) {
            Some(cached) => {
                key.clear();
                key.extend_from_slice(cached);
                true
            }
            None => false,
        }
    }

    /// Remembers `key` for the texts of the last [`RouteCache::get`].
    pub fn put(&mut self, key: &[u8]) {
        if self.keys.len() >= self.limit {
            self.keys.clear();
        }
        self.keys.insert(self.scratch.as_slice().into(), key.into());
    }

    /// Entries held.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.keys.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn gives_back_what_was_put_for_the_same_texts_only() {
        let mut cache = RouteCache::new(10);
        let mut key = vec![9];
        assert!(!cache.get(&[b"\"a\"", b"\"b\""], &mut key));
        assert_eq!(key, [9], "a miss leaves the key alone");
        cache.put(b"key-ab");
        assert!(cache.get(&[b"\"a\"", b"\"b\""], &mut key));
        assert_eq!(key, b"key-ab");
        // The same bytes split differently are other texts.
        assert!(!cache.get(&[b"\"a\"\"", b"b\""], &mut key));
        assert!(!cache.get(&[b"\"a\"\"b\""], &mut key));
    }

    #[test]
    fn starts_over_when_full() {
        let mut cache = RouteCache::new(2);
        let mut key = Vec::new();
        for text in [b"1", b"2", b"3"] {
            assert!(!cache.get(&[text], &mut key));
            cache.put(text);
        }
        assert_eq!(cache.len(), 1);
        assert!(cache.get(&[b"3"], &mut key));
        assert!(!cache.get(&[b"1"], &mut key));
    }

    proptest! {
        /// Whatever the sequence of lookups, a hit gives the key that was computed for
        /// exactly those texts.
        #[test]
        fn a_hit_is_the_key_of_those_texts(
            lookups in proptest::collection::vec(proptest::collection::vec("[ab\"]{0,3}", 1..4), 1..60),
            limit in 1usize..8,
        ) {
            let key_of = |texts: &[String]| format!("{texts:?}").into_bytes();
            let mut cache = RouteCache::new(limit);
            let mut key = Vec::new();
            for texts in &lookups {
                let raw: Vec<&[u8]> = texts.iter().map(|t| t.as_bytes()).collect();
                if cache.get(&raw, &mut key) {
                    prop_assert_eq!(&key, &key_of(texts));
                } else {
                    cache.put(&key_of(texts));
                }
                prop_assert!(cache.len() <= limit);
            }
        }
    }
}
