//! The fast path: the reference pipeline's answer for the common case, in one pass.
//!
//! For the configurations almost every user runs (no transform or the built-in
//! `mcp-normalize`; no dynamic partitioning, or a key query made of top-level field
//! paths such as `{tenantId: .tenant_id, toolName: .tool_name}` whose keys are the
//! prefix's), [`FastPath::route`] gives a part's line and route key as the reference
//! path ([`crate::pipeline`]) would, without parsing the record into a tree, without
//! the jq interpreter. It may answer "not sure"; the archiver then asks the
//! reference. It never decides an error: every record that fails (malformed, a missing
//! or invalid key) is one it is not sure of, so error records are the reference's by
//! construction.
//!
//! Pieces: [`mod@scan`] reads the wanted members of an object in one pass; [`normalize`]
//! writes `mcp-normalize`'s line from them. A property test feeds the same parts,
//! hostile ones included, to this path and to the reference and requires the same lines
//! and routes.
//!
//! (A cache of route keys by key texts once sat here. With the scanner writing the
//! key texts directly it no longer paid: removing it cost 3% at 240 partitions, saved
//! 3% and 15 MiB at 100,000, and left the throughput bench unchanged.)
//!
//! What it buys: `cargo bench -p weir-archiver --bench throughput` (the design note's
//! pipeline, 1,000,000 events) spends about 1.2 µs per record with it; the reference
//! (a serde_json tree per record, then jaq) about four times as much.

#[cfg(any(test, feature = "fuzzing"))]
pub mod differential;
pub mod normalize;
pub mod scan;

use std::borrow::Cow;

use weir_core::Timestamp;

use crate::pipeline::route::encode_data;
use crate::pipeline::transform::Transformer;
use scan::{Scalar, scan};
use weir_firehose::ArchiverSettings;
use weir_firehose::prefix::check_partition_value;

/// Most key fields the fast path reads.
const MAX_KEYS: usize = 8;

/// The fast path of one archiver configuration.
#[derive(Debug)]
pub struct FastPath {
    shape: Shape,
    /// `None`: no dynamic partitioning (every record goes to the one data route).
    keys: Option<Keys>,
    append_delimiter: bool,
}

/// What the transform makes of a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    /// Nothing: records are archived as they are.
    Raw,
    /// `mcp-normalize`.
    Mcp,
}

/// A key query of top-level field paths whose keys are exactly the prefix's.
#[derive(Debug)]
struct Keys {
    /// Key names, sorted (as a route's keys are).
    names: Vec<String>,
    /// For each name, the slot of the field it reads: in `fields` (raw records), or in
    /// [`weir_mcp::ARCHIVE_FIELDS`] (normalised lines).
    slots: Vec<usize>,
    /// The distinct fields read (raw records).
    fields: Vec<String>,
}

/// Parses `{name: .field, other: .field2}` with plain identifiers; `None` for any other
/// query (repeated names, nested paths, anything else jq can say).
fn field_paths(query: &str) -> Option<Vec<(String, String)>> {
    let body = query.trim().strip_prefix('{')?.strip_suffix('}')?;
    let ident = |s: &str| {
        let s = s.trim();
        let mut chars = s.chars();
        let first_ok = chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
        (first_ok && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')).then(|| s.to_owned())
    };
    let mut out: Vec<(String, String)> = Vec::new();
    for pair in body.split(',') {
        let (name, path) = pair.split_once(':')?;
        let name = ident(name)?;
        let field = ident(path.trim().strip_prefix('.')?)?;
        if out.iter().any(|(n, _)| *n == name) {
            return None;
        }
        out.push((name, field));
    }
    (!out.is_empty()).then_some(out)
}

impl Keys {
    fn of(settings: &ArchiverSettings, shape: Shape) -> Option<Self> {
        let mut paths = field_paths(settings.metadata_query.as_deref()?)?;
        paths.sort();
        let prefix: std::collections::BTreeSet<&str> = settings.prefixes.data.partition_keys().into_iter().collect();
        let names: Vec<String> = paths.iter().map(|(n, _)| n.clone()).collect();
        if names.len() > MAX_KEYS || names.len() != prefix.len() || !names.iter().all(|n| prefix.contains(n.as_str())) {
            return None;
        }
        let mut fields: Vec<String> = Vec::new();
        let mut slots = Vec::new();
        for (_, field) in &paths {
            let slot = match shape {
                Shape::Mcp => weir_mcp::ARCHIVE_FIELDS.iter().position(|f| f == field)?,
                Shape::Raw => match fields.iter().position(|f| f == field) {
                    Some(i) => i,
                    None => {
                        fields.push(field.clone());
                        fields.len() - 1
                    }
                },
            };
            slots.push(slot);
        }
        Some(Self { names, slots, fields })
    }
}

impl FastPath {
    /// The fast path of this configuration, if it has one.
    pub fn new(transformer: &Transformer, settings: &ArchiverSettings) -> Option<Self> {
        let shape = match transformer {
            Transformer::None => Shape::Raw,
            Transformer::McpNormalize => Shape::Mcp,
            Transformer::InProcess(_) | Transformer::Lambda(_) => return None,
        };
        let keys = match settings.dynamic_partitioning_retry {
            None => None,
            Some(_) => Some(Keys::of(settings, shape)?),
        };
        Some(Self { shape, keys, append_delimiter: settings.append_delimiter })
    }

    /// Appends the line of one part (`data`, arrived at `arrival`) to `line` and writes
    /// its route's key into `key`, exactly as the reference path would; `false` when
    /// not sure, with `line` as it was (and `key` unspecified).
    pub fn route(&self, data: &[u8], arrival: Timestamp, line: &mut Vec<u8>, key: &mut Vec<u8>) -> bool {
        let start = line.len();
        let routed = match self.shape {
            Shape::Raw => self.route_raw(data, key, line),
            Shape::Mcp => self.route_mcp(data, arrival, key, line, start),
        };
        if !routed {
            line.truncate(start);
            return false;
        }
        if self.append_delimiter {
            line.push(b'\n');
        }
        true
    }

    fn route_raw(&self, data: &[u8], key: &mut Vec<u8>, line: &mut Vec<u8>) -> bool {
        let Some(keys) = &self.keys else {
            line.extend_from_slice(data);
            encode_data(key, std::iter::empty());
            return true;
        };
        let mut found = [None; MAX_KEYS];
        let fields = &keys.fields;
        if !scan(data, |k| fields.iter().position(|f| f.as_bytes() == k), &mut found[..fields.len()]) {
            return false;
        }
        let mut texts: [&[u8]; MAX_KEYS] = [b""; MAX_KEYS];
        for (text, slot) in texts.iter_mut().zip(&keys.slots) {
            match found[*slot] {
                Some(Scalar::Str(s, _)) => *text = s,
                Some(Scalar::Bool(true)) => *text = b"true",
                Some(Scalar::Bool(false)) => *text = b"false",
                // Missing or null (an error), or a number (jq's text of it): the reference.
                _ => return false,
            }
        }
        if !route_of(keys, &texts[..keys.names.len()], key) {
            return false;
        }
        line.extend_from_slice(data);
        true
    }

    fn route_mcp(&self, data: &[u8], arrival: Timestamp, key: &mut Vec<u8>, line: &mut Vec<u8>, start: usize) -> bool {
        let Some(places) = normalize::write(data, arrival, line) else { return false };
        let Some(keys) = &self.keys else {
            encode_data(key, std::iter::empty());
            return true;
        };
        let written = &line[start..];
        let mut texts: [&[u8]; MAX_KEYS] = [b""; MAX_KEYS];
        for (text, slot) in texts.iter_mut().zip(&keys.slots) {
            let (a, b) = places[*slot];
            *text = &written[a as usize..b as usize];
        }
        route_of(keys, &texts[..keys.names.len()], key)
    }
}

/// Writes the route key of keys whose values have the JSON texts `texts` (in the order
/// of `keys.names`) into `key`; `false` unless every value is a string or boolean that
/// passes the partition-value checks.
fn route_of(keys: &Keys, texts: &[&[u8]], key: &mut Vec<u8>) -> bool {
    let mut values: [Cow<'_, str>; MAX_KEYS] = Default::default();
    for (value, text) in values.iter_mut().zip(texts) {
        match key_text(text) {
            Some(v) if check_partition_value(&v).is_ok() => *value = v,
            _ => return false,
        }
    }
    encode_data(key, keys.names.iter().map(String::as_str).zip(values.iter().map(|v| v.as_ref())));
    true
}

/// A partition-key value from a value's JSON text: strings (borrowed unless they hold
/// escapes) and booleans; `None` for anything else.
fn key_text(raw: &[u8]) -> Option<Cow<'_, str>> {
    let raw = std::str::from_utf8(raw).ok()?;
    match raw {
        "true" | "false" => Some(Cow::Borrowed(raw)),
        _ => {
            let inner = raw.strip_prefix('"')?.strip_suffix('"')?;
            // Partition values are short: a plain loop beats a memchr call.
            if inner.bytes().any(|b| b == b'\\') {
                serde_json::from_str::<String>(raw).ok().map(Cow::Owned)
            } else {
                Some(Cow::Borrowed(inner))
            }
        }
    }
}

#[cfg(test)]
mod tests;
