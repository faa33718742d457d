//! Routes: where a record goes (one data partition, i.e. one set of partition-key
//! values, or one error output type), and the byte keys buffers are found by.

use std::collections::BTreeMap;

use crate::pipeline::error_records::ErrorOutputType;

/// The partition-key values of a data route (empty without dynamic partitioning).
pub type PartitionKey = BTreeMap<String, String>;

/// Where a record goes.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Route {
    /// A data partition.
    Data(PartitionKey),
    /// The error output of one type.
    Error(ErrorOutputType),
}

const DATA_TAG: u8 = 0;
const ERROR_TAG: u8 = 1;

/// The error output types, for decoding.
const ERROR_TYPES: [ErrorOutputType; 5] = [
    ErrorOutputType::ProcessingFailed,
    ErrorOutputType::PartitioningFailed,
    ErrorOutputType::ActivePartitionsExceeded,
    ErrorOutputType::DecompressionFailed,
    ErrorOutputType::FormatConversionFailed,
];

impl Route {
    /// A stable text identity: the scope stored in intents.
    pub fn scope(&self) -> String {
        match self {
            Route::Data(keys) => serde_json::to_string(keys).unwrap_or_default(),
            Route::Error(t) => format!("error:{}", t.as_str()),
        }
    }

    /// Writes the route's key into `out` (cleared first): the bytes buffers are found
    /// by, so a record's route need not be built as a map (see [`encode_data`]).
    pub fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Route::Data(keys) => encode_data(out, keys.iter().map(|(k, v)| (k.as_str(), v.as_str()))),
            Route::Error(t) => {
                out.clear();
                out.push(ERROR_TAG);
                out.extend_from_slice(t.as_str().as_bytes());
            }
        }
    }

    /// The error output type of an error route's key; `None` for data routes.
    pub fn error_type(key: &[u8]) -> Option<ErrorOutputType> {
        let rest = key.strip_prefix(&[ERROR_TAG])?;
        ERROR_TYPES.into_iter().find(|t| t.as_str().as_bytes() == rest)
    }

    /// The route of a key written by [`Route::encode`] or [`encode_data`].
    pub fn decode(key: &[u8]) -> Option<Route> {
        match *key.first()? {
            DATA_TAG => {
                let mut keys = PartitionKey::new();
                for pair in data_pairs(key)? {
                    let (name, value) = pair?;
                    keys.insert(name.to_owned(), value.to_owned());
                }
                Some(Route::Data(keys))
            }
            ERROR_TAG => Route::error_type(key).map(Route::Error),
            _ => None,
        }
    }
}

/// A route's key as buffers find it ([`Route::encode`]), owned: what a sealed buffer
/// keeps instead of its route, so that sealing builds no map.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RouteKey(Box<[u8]>);

impl RouteKey {
    /// Wraps an encoded key.
    pub fn new(bytes: Box<[u8]>) -> Self {
        Self(bytes)
    }

    /// The key of `route`.
    pub fn of(route: &Route) -> Self {
        let mut key = Vec::new();
        route.encode(&mut key);
        Self(key.into())
    }

    /// The encoded bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// The route (`None` for bytes [`Route::encode`] did not write).
    pub fn route(&self) -> Option<Route> {
        Route::decode(&self.0)
    }

    /// Whether it is a data route's.
    pub fn is_data(&self) -> bool {
        self.0.first() == Some(&DATA_TAG)
    }

    /// The error output type of an error route's key.
    pub fn error_type(&self) -> Option<ErrorOutputType> {
        Route::error_type(&self.0)
    }

    /// The value of partition key `name` (data routes).
    pub fn value(&self, name: &str) -> Option<&str> {
        data_pairs(&self.0)?.map_while(|p| p).find(|(n, _)| *n == name).map(|(_, v)| v)
    }

    /// [`Route::scope`] of the route, written from the key.
    pub fn scope(&self) -> String {
        let Some(pairs) = data_pairs(&self.0) else {
            return self.route().map(|r| r.scope()).unwrap_or_default();
        };
        // As serde_json writes a map of strings: `{"name":"value",...}`, sorted.
        let mut out = Vec::with_capacity(self.0.len() + 16);
        out.push(b'{');
        for (i, pair) in pairs.enumerate() {
            let Some((name, value)) = pair else { return String::new() };
            if i > 0 {
                out.push(b',');
            }
            let _ = serde_json::to_writer(&mut out, name);
            out.push(b':');
            let _ = serde_json::to_writer(&mut out, value);
        }
        out.push(b'}');
        String::from_utf8(out).unwrap_or_default()
    }
}

/// The (name, value) pairs of a data route's key, in order, without building a map;
/// `None` when `key` is not a data route's, an item `None` when the key is malformed.
pub fn data_pairs(key: &[u8]) -> Option<impl Iterator<Item = Option<(&str, &str)>>> {
    let mut rest = key.strip_prefix(&[DATA_TAG])?;
    let mut text = move || -> Option<Option<&str>> {
        if rest.is_empty() {
            return None;
        }
        let taken = (|| {
            let (len, tail) = rest.split_first_chunk::<4>()?;
            let (text, tail) = tail.split_at_checked(u32::from_le_bytes(*len) as usize)?;
            rest = tail;
            std::str::from_utf8(text).ok()
        })();
        if taken.is_none() {
            rest = &[];
        }
        Some(taken)
    };
    Some(std::iter::from_fn(move || {
        let name = text()?;
        let value = text();
        Some(match (name, value) {
            (Some(n), Some(Some(v))) => Some((n, v)),
            _ => None,
        })
    }))
}

/// Writes the key of the data route with these partition keys into `out` (cleared
/// first). `pairs` must come sorted by name, as a [`PartitionKey`] iterates, for the
/// key to equal [`Route::encode`]'s. Each name and value is length-prefixed, so no
/// content can make two routes share a key.
pub fn encode_data<'a>(out: &mut Vec<u8>, pairs: impl Iterator<Item = (&'a str, &'a str)>) {
    out.clear();
    out.push(DATA_TAG);
    for (name, value) in pairs {
        for text in [name, value] {
            out.extend_from_slice(&(text.len() as u32).to_le_bytes());
            out.extend_from_slice(text.as_bytes());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Keys round-trip, and two routes share a key only when they are equal.
        #[test]
        fn route_keys_identify_routes(
            a in proptest::collection::btree_map("[a-z\u{0}\u{4}]{0,3}", "[a-z\u{0}\u{4}é]{0,3}", 0..3),
            b in proptest::collection::btree_map("[a-z\u{0}\u{4}]{0,3}", "[a-z\u{0}\u{4}é]{0,3}", 0..3),
        ) {
            let (ra, rb) = (Route::Data(a.clone()), Route::Data(b));
            let (mut ka, mut kb) = (Vec::new(), Vec::new());
            ra.encode(&mut ka);
            rb.encode(&mut kb);
            prop_assert_eq!(Route::decode(&ka), Some(ra.clone()));
            prop_assert_eq!(ka == kb, ra == rb);
            let mut direct = Vec::new();
            encode_data(&mut direct, a.iter().map(|(k, v)| (k.as_str(), v.as_str())));
            prop_assert_eq!(&direct, &ka);
            prop_assert_eq!(Route::error_type(&ka), None);
            let pairs: Vec<(&str, &str)> = data_pairs(&ka).unwrap().map(Option::unwrap).collect();
            prop_assert_eq!(pairs, a.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect::<Vec<_>>());
            let key = RouteKey::new(ka.clone().into());
            prop_assert_eq!(key.scope(), ra.scope());
            prop_assert!(key.is_data());
            for (k, v) in &a {
                prop_assert_eq!(key.value(k), Some(v.as_str()));
            }
            prop_assert_eq!(key.route(), Some(ra.clone()));
        }
    }

    #[test]
    fn error_routes_have_their_own_keys() {
        for t in ERROR_TYPES {
            let mut key = Vec::new();
            Route::Error(t).encode(&mut key);
            assert_eq!(Route::decode(&key), Some(Route::Error(t)));
            assert_eq!(Route::error_type(&key), Some(t));
            let key = RouteKey::new(key.into());
            assert_eq!((key.is_data(), key.error_type(), key.scope()), (false, Some(t), Route::Error(t).scope()));
        }
        assert_eq!(Route::decode(b"\x02"), None);
        assert_eq!(Route::decode(b"\x00\x05\x00\x00\x00ab"), None, "length past the end");
        assert_eq!(Route::decode(b"\x00\x01\x00\x00\x00a"), None, "a name without a value");
        assert_eq!(Route::decode(b""), None);
    }
}
