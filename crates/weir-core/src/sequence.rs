//! Kinesis sequence numbers.
//!
//! A sequence number is a decimal string of up to 129 digits. Ordering is numeric,
//! never lexicographic: `"9" < "10"`. Strings that are not decimal numbers are rejected
//! at parse time, so an unparseable value can never be mis-ordered.

use std::cmp::Ordering;
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Longest sequence number accepted, in digits (after leading zeros are removed).
pub const MAX_SEQUENCE_DIGITS: usize = 129;

/// Why a string is not a sequence number.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SequenceNumberError {
    /// The string is empty.
    #[error("sequence number is empty")]
    Empty,
    /// The string has a character that is not an ASCII digit.
    #[error("sequence number {value:?} has a non-digit character at byte {index}")]
    NotDecimal {
        /// The rejected input (truncated to 64 characters).
        value: String,
        /// Byte offset of the first bad character.
        index: usize,
    },
    /// The number has more digits than Kinesis allows.
    #[error("sequence number has {digits} digits, more than the maximum of {MAX_SEQUENCE_DIGITS}")]
    TooLong {
        /// Number of significant digits.
        digits: usize,
    },
}

/// A validated, normalised (no leading zeros) decimal sequence number.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct SequenceNumber(Arc<str>);

impl SequenceNumber {
    /// Parses and normalises a decimal sequence number.
    pub fn parse(value: &str) -> Result<Self, SequenceNumberError> {
        if value.is_empty() {
            return Err(SequenceNumberError::Empty);
        }
        if let Some(index) = value.bytes().position(|b| !b.is_ascii_digit()) {
            return Err(SequenceNumberError::NotDecimal { value: value.chars().take(64).collect(), index });
        }
        let trimmed = value.trim_start_matches('0');
        let normalised = if trimmed.is_empty() { "0" } else { trimmed };
        if normalised.len() > MAX_SEQUENCE_DIGITS {
            return Err(SequenceNumberError::TooLong { digits: normalised.len() });
        }
        Ok(Self(Arc::from(normalised)))
    }

    /// A sequence number from an integer (tests, in-process streams).
    pub fn from_u128(value: u128) -> Self {
        Self(Arc::from(value.to_string()))
    }

    /// The normalised decimal digits.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl Ord for SequenceNumber {
    fn cmp(&self, other: &Self) -> Ordering {
        // Normalised: no leading zeros, so more digits means a larger number.
        self.0.len().cmp(&other.0.len()).then_with(|| self.0.as_bytes().cmp(other.0.as_bytes()))
    }
}

impl PartialOrd for SequenceNumber {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl FromStr for SequenceNumber {
    type Err = SequenceNumberError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

impl fmt::Display for SequenceNumber {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for SequenceNumber {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Seq({})", self.0)
    }
}

impl Serialize for SequenceNumber {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for SequenceNumber {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Self::parse(&s).map_err(serde::de::Error::custom)
    }
}

/// A position inside a shard at KPL granularity: the Kinesis sequence number plus the
/// index of a user record inside an aggregated record (0 for plain records).
///
/// Ordered by sequence number, then sub-sequence.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ExtendedSequenceNumber {
    /// The Kinesis sequence number of the (possibly aggregated) record.
    pub sequence: SequenceNumber,
    /// Index of the user record inside an aggregate; 0 for non-aggregated records.
    #[serde(default)]
    pub sub_sequence: u64,
}

impl ExtendedSequenceNumber {
    /// A position with the given sub-sequence.
    pub fn new(sequence: SequenceNumber, sub_sequence: u64) -> Self {
        Self { sequence, sub_sequence }
    }

    /// The position of a plain (non-aggregated) record.
    pub fn plain(sequence: SequenceNumber) -> Self {
        Self::new(sequence, 0)
    }
}

impl fmt::Debug for ExtendedSequenceNumber {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.sequence, self.sub_sequence)
    }
}

impl fmt::Display for ExtendedSequenceNumber {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.sub_sequence == 0 {
            write!(f, "{}", self.sequence)
        } else {
            write!(f, "{}.{}", self.sequence, self.sub_sequence)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use num_bigint::BigUint;
    use proptest::prelude::*;

    fn digits() -> impl Strategy<Value = String> {
        // Up to 129 significant digits, sometimes with leading zeros.
        ("0{0,3}", "[0-9]{1,129}").prop_map(|(zeros, body)| format!("{zeros}{body}"))
    }

    proptest! {
        #[test]
        fn ordering_matches_big_integers(a in digits(), b in digits()) {
            let (sa, sb) = (SequenceNumber::parse(&a).unwrap(), SequenceNumber::parse(&b).unwrap());
            let (ba, bb) = (a.parse::<BigUint>().unwrap(), b.parse::<BigUint>().unwrap());
            prop_assert_eq!(sa.cmp(&sb), ba.cmp(&bb));
            prop_assert_eq!(sa == sb, ba == bb);
            prop_assert_eq!(sa.as_str(), ba.to_string());
        }

        #[test]
        fn never_panics_on_arbitrary_text(s in ".{0,200}") {
            let _ = SequenceNumber::parse(&s);
        }
    }

    #[test]
    fn numeric_not_lexicographic() {
        let nine = SequenceNumber::parse("9").unwrap();
        let ten = SequenceNumber::parse("10").unwrap();
        assert!(nine < ten);
        assert_eq!(SequenceNumber::parse("0010").unwrap(), ten);
    }

    #[test]
    fn rejects_bad_input() {
        assert_eq!(SequenceNumber::parse(""), Err(SequenceNumberError::Empty));
        assert!(matches!(SequenceNumber::parse("12a4"), Err(SequenceNumberError::NotDecimal { index: 2, .. })));
        assert!(SequenceNumber::parse("-1").is_err());
        assert!(SequenceNumber::parse(" 1").is_err());
        let long = "1".repeat(130);
        assert_eq!(SequenceNumber::parse(&long), Err(SequenceNumberError::TooLong { digits: 130 }));
        assert!(SequenceNumber::parse(&"9".repeat(129)).is_ok());
        assert!(SequenceNumber::parse(&format!("000{}", "9".repeat(129))).is_ok());
    }

    #[test]
    fn extended_orders_by_sequence_then_sub() {
        let s = |v: &str, sub| ExtendedSequenceNumber::new(SequenceNumber::parse(v).unwrap(), sub);
        assert!(s("5", 9) < s("10", 0));
        assert!(s("10", 0) < s("10", 1));
    }

    #[test]
    fn serde_rejects_garbage() {
        let bad: Result<SequenceNumber, _> = serde_json::from_str("\"12x\"");
        assert!(bad.is_err());
        let good: SequenceNumber = serde_json::from_str("\"0042\"").unwrap();
        assert_eq!(good.as_str(), "42");
    }
}
