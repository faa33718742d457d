//! Where a transform's output keeps its top-level fields.
//!
//! A transform that writes JSON itself (the built-in `mcp-normalize`) knows where each
//! field of its output lies. Handing that over lets the partition-key query read the
//! fields it needs without parsing the output a second time; the keys are the same as
//! a parse would give (a property test in [`crate::partition`] checks it).

use std::ops::Range;

/// The top-level fields of a JSON object a transform wrote, with the byte range of
/// each field's value in that output.
///
/// Contract, promised by the transform that builds it: the output is one JSON object
/// whose top-level fields are exactly `names`, each once, in any order, and the bytes
/// at a field's range are that field's value as valid JSON text without surrounding
/// whitespace. A field whose range was never set is unknown, and readers fall back to
/// parsing the output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FieldIndex {
    names: &'static [&'static str],
    ranges: [(u16, u16); FieldIndex::MAX],
}

impl FieldIndex {
    /// Most fields an index describes.
    pub const MAX: usize = 8;

    /// An index of an object with the fields `names` (at most [`FieldIndex::MAX`];
    /// `None` for more), no range set yet.
    pub fn new(names: &'static [&'static str]) -> Option<Self> {
        (names.len() <= Self::MAX).then_some(Self { names, ranges: [(0, 0); Self::MAX] })
    }

    /// Records where the value of field number `field` (its place in `names`) lies.
    /// Ignored for a field number out of range or a range past 64 KiB (readers then
    /// parse the output).
    pub fn set(&mut self, field: usize, range: Range<usize>) {
        if let (Some(slot), Ok(start), Ok(end)) =
            (self.ranges.get_mut(field), u16::try_from(range.start), u16::try_from(range.end))
            && field < self.names.len()
        {
            *slot = (start, end);
        }
    }

    /// The fields of the object.
    pub fn names(&self) -> &'static [&'static str] {
        self.names
    }

    /// What the index says about field `name` of `data`: `Some(Some(text))` with its
    /// raw JSON value, `Some(None)` when the object has no such field, `None` when the
    /// index cannot tell (the range was not set, lies outside `data`, or is not UTF-8).
    pub fn raw<'d>(&self, data: &'d [u8], name: &str) -> Option<Option<&'d str>> {
        match self.raw_bytes(data, name)? {
            None => Some(None),
            Some(raw) => std::str::from_utf8(raw).ok().map(Some),
        }
    }

    /// [`FieldIndex::raw`] as bytes, not checked as UTF-8.
    pub fn raw_bytes<'d>(&self, data: &'d [u8], name: &str) -> Option<Option<&'d [u8]>> {
        match self.names.iter().position(|n| *n == name) {
            None => Some(None),
            Some(i) => self.raw_bytes_at(data, i).map(Some),
        }
    }

    /// The raw JSON value of field number `field` (its place in `names`), as bytes not
    /// checked as UTF-8; `None` when the index cannot tell.
    pub fn raw_bytes_at<'d>(&self, data: &'d [u8], field: usize) -> Option<&'d [u8]> {
        let (start, end) = *self.ranges.get(field).filter(|_| field < self.names.len())?;
        if start >= end {
            return None;
        }
        data.get(start as usize..end as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_set_fields_and_knows_absent_ones() {
        let data = br#"{"a":"x","b":12}"#;
        let mut index = FieldIndex::new(&["a", "b"]).unwrap();
        assert_eq!(index.raw(data, "a"), None, "not set yet");
        index.set(0, 5..8);
        index.set(1, 13..15);
        assert_eq!(index.raw(data, "a"), Some(Some("\"x\"")));
        assert_eq!(index.raw(data, "b"), Some(Some("12")));
        assert_eq!(index.raw(data, "c"), Some(None));
        index.set(1, 13..99);
        assert_eq!(index.raw(data, "b"), None, "outside the data");
        index.set(0, 70_000..70_003);
        assert_eq!(index.raw(data, "a"), Some(Some("\"x\"")), "a range past 64 KiB is not recorded");
        index.set(7, 0..1);
        assert_eq!(index.names(), &["a", "b"]);
    }

    #[test]
    fn at_most_max_fields() {
        const MANY: [&str; FieldIndex::MAX + 1] = ["f"; FieldIndex::MAX + 1];
        assert!(FieldIndex::new(&MANY).is_none());
        assert!(FieldIndex::new(&MANY[..FieldIndex::MAX]).is_some());
    }
}
