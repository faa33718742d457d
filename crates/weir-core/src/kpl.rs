//! KPL aggregated records.
//!
//! The Kinesis Producer Library packs several user records into one Kinesis record:
//! the magic bytes `F3 89 9A C2`, a protobuf `AggregatedRecord`, and the MD5 of the
//! protobuf bytes. [`deaggregate`] unpacks them into user records that share the
//! Kinesis sequence number and carry their index as sub-sequence number, so a checkpoint
//! can point inside an aggregate and a restart resumes there.
//!
//! ```text
//! message AggregatedRecord { repeated string partition_key_table = 1;
//!                            repeated string explicit_hash_key_table = 2;
//!                            repeated Record records = 3; }
//! message Record { required uint64 partition_key_index = 1;
//!                  optional uint64 explicit_hash_key_index = 2;
//!                  required bytes data = 3; repeated Tag tags = 4; }
//! ```
//!
//! Anything that does not decode - wrong magic, bad MD5, truncated or malformed
//! protobuf, an index out of range - is passed through unchanged as one record, and the
//! outcome says why, so the caller can count it. Decoding never panics.

use bytes::Bytes;
use md5::{Digest, Md5};

use crate::record::Record;
use crate::sequence::ExtendedSequenceNumber;

/// The four bytes that start every KPL aggregate.
pub const KPL_MAGIC: [u8; 4] = [0xF3, 0x89, 0x9A, 0xC2];

/// What [`deaggregate`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Aggregation {
    /// Not an aggregate (no magic): passed through.
    Plain,
    /// An aggregate of this many user records.
    Aggregated(usize),
    /// Starts with the magic but is not a valid aggregate: passed through unchanged.
    Corrupt(&'static str),
}

/// Unpacks a record if it is a KPL aggregate. See the module documentation.
pub fn deaggregate(record: Record) -> (Vec<Record>, Aggregation) {
    let data = &record.data;
    if data.len() < KPL_MAGIC.len() + 16 || data[..4] != KPL_MAGIC {
        return (vec![record], Aggregation::Plain);
    }
    let body_end = data.len() - 16;
    let body = data.slice(4..body_end);
    let digest: [u8; 16] = Md5::digest(&body).into();
    if digest[..] != data[body_end..] {
        return (vec![record], Aggregation::Corrupt("md5 mismatch"));
    }
    match decode_aggregate(&body) {
        Ok(parts) => {
            let n = parts.len();
            let sequence = record.position.sequence.clone();
            let out = parts
                .into_iter()
                .enumerate()
                .map(|(i, (partition_key, data))| Record {
                    partition_key,
                    position: ExtendedSequenceNumber::new(sequence.clone(), i as u64),
                    approximate_arrival: record.approximate_arrival,
                    data,
                })
                .collect();
            (out, Aggregation::Aggregated(n))
        }
        Err(reason) => (vec![record], Aggregation::Corrupt(reason)),
    }
}

struct Reader<'a> {
    buf: &'a Bytes,
    pos: usize,
}

impl Reader<'_> {
    fn done(&self) -> bool {
        self.pos >= self.buf.len()
    }

    fn varint(&mut self) -> Result<u64, &'static str> {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let byte = *self.buf.get(self.pos).ok_or("truncated varint")?;
            self.pos += 1;
            value |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err("varint too long")
    }

    fn bytes(&mut self) -> Result<Bytes, &'static str> {
        let len = usize::try_from(self.varint()?).map_err(|_| "length too large")?;
        let end = self.pos.checked_add(len).ok_or("length overflow")?;
        if end > self.buf.len() {
            return Err("truncated field");
        }
        let out = self.buf.slice(self.pos..end);
        self.pos = end;
        Ok(out)
    }

    /// Skips a field of `wire` type.
    fn skip(&mut self, wire: u64) -> Result<(), &'static str> {
        let n = match wire {
            0 => return self.varint().map(|_| ()),
            1 => 8,
            2 => return self.bytes().map(|_| ()),
            5 => 4,
            _ => return Err("unsupported wire type"),
        };
        if self.pos + n > self.buf.len() {
            return Err("truncated field");
        }
        self.pos += n;
        Ok(())
    }
}

fn utf8(b: Bytes) -> Result<String, &'static str> {
    String::from_utf8(b.to_vec()).map_err(|_| "partition key is not UTF-8")
}

fn decode_aggregate(body: &Bytes) -> Result<Vec<(String, Bytes)>, &'static str> {
    let mut r = Reader { buf: body, pos: 0 };
    let mut keys = Vec::new();
    let mut records = Vec::new();
    while !r.done() {
        let tag = r.varint()?;
        match (tag >> 3, tag & 7) {
            (1, 2) => keys.push(utf8(r.bytes()?)?),
            (3, 2) => records.push(decode_record(&r.bytes()?)?),
            (_, wire) => r.skip(wire)?,
        }
    }
    if records.is_empty() {
        return Err("aggregate without records");
    }
    records
        .into_iter()
        .map(|(index, data)| {
            let key =
                usize::try_from(index).ok().and_then(|i| keys.get(i)).ok_or("partition key index out of range")?;
            Ok((key.clone(), data))
        })
        .collect()
}

fn decode_record(buf: &Bytes) -> Result<(u64, Bytes), &'static str> {
    let mut r = Reader { buf, pos: 0 };
    let (mut key, mut data) = (None, None);
    while !r.done() {
        let tag = r.varint()?;
        match (tag >> 3, tag & 7) {
            (1, 0) => key = Some(r.varint()?),
            (3, 2) => data = Some(r.bytes()?),
            (_, wire) => r.skip(wire)?,
        }
    }
    Ok((key.ok_or("record without partition key index")?, data.ok_or("record without data")?))
}

/// Builds a KPL aggregate of `(partition key, data)` user records, as the KPL does
/// (one partition key table entry per distinct key). For producers and tests.
pub fn aggregate(records: &[(String, Bytes)]) -> Bytes {
    fn varint(out: &mut Vec<u8>, mut v: u64) {
        while v >= 0x80 {
            out.push((v as u8) | 0x80);
            v >>= 7;
        }
        out.push(v as u8);
    }
    fn field(out: &mut Vec<u8>, number: u64, payload: &[u8]) {
        varint(out, (number << 3) | 2);
        varint(out, payload.len() as u64);
        out.extend_from_slice(payload);
    }
    let mut keys: Vec<&str> = Vec::new();
    let mut body = Vec::new();
    let mut recs = Vec::new();
    for (key, data) in records {
        let index = match keys.iter().position(|k| k == key) {
            Some(i) => i,
            None => {
                keys.push(key);
                keys.len() - 1
            }
        };
        let mut rec = Vec::new();
        varint(&mut rec, 1 << 3);
        varint(&mut rec, index as u64);
        field(&mut rec, 3, data);
        recs.push(rec);
    }
    for k in &keys {
        field(&mut body, 1, k.as_bytes());
    }
    for rec in &recs {
        field(&mut body, 3, rec);
    }
    let digest: [u8; 16] = Md5::digest(&body).into();
    let mut out = KPL_MAGIC.to_vec();
    out.extend_from_slice(&body);
    out.extend_from_slice(&digest);
    Bytes::from(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{SequenceNumber, Timestamp};
    use proptest::prelude::*;

    fn rec(data: Bytes) -> Record {
        Record {
            partition_key: "outer".into(),
            position: ExtendedSequenceNumber::plain(SequenceNumber::from_u128(77)),
            approximate_arrival: Timestamp::from_millis(5),
            data,
        }
    }

    proptest! {
        #[test]
        fn round_trips(users in proptest::collection::vec(("[a-z]{0,8}", proptest::collection::vec(any::<u8>(), 0..64)), 1..30)) {
            let users: Vec<(String, Bytes)> = users.into_iter().map(|(k, d)| (k, Bytes::from(d))).collect();
            let (out, how) = deaggregate(rec(aggregate(&users)));
            prop_assert_eq!(how, Aggregation::Aggregated(users.len()));
            for (i, (r, (k, d))) in out.iter().zip(&users).enumerate() {
                prop_assert_eq!(&r.partition_key, k);
                prop_assert_eq!(&r.data, d);
                prop_assert_eq!(r.position.sub_sequence, i as u64);
                prop_assert_eq!(r.position.sequence.as_str(), "77");
                prop_assert_eq!(r.approximate_arrival, Timestamp::from_millis(5));
            }
        }

        #[test]
        fn arbitrary_bytes_never_panic(tail in proptest::collection::vec(any::<u8>(), 0..300), magic in any::<bool>()) {
            let mut data = if magic { KPL_MAGIC.to_vec() } else { Vec::new() };
            data.extend(tail);
            let input = Bytes::from(data);
            let (out, how) = deaggregate(rec(input.clone()));
            if how != Aggregation::Plain && !matches!(how, Aggregation::Aggregated(_)) {
                prop_assert_eq!(out.len(), 1);
                prop_assert_eq!(&out[0].data, &input);
            }
        }

        #[test]
        fn corrupted_aggregates_pass_through(flip in 4usize..40) {
            let users = vec![("k".to_owned(), Bytes::from_static(b"hello world")), ("j".to_owned(), Bytes::from_static(b"x"))];
            let mut data = aggregate(&users).to_vec();
            let i = flip.min(data.len() - 1);
            data[i] ^= 0x55;
            let input = Bytes::from(data);
            let (out, how) = deaggregate(rec(input.clone()));
            prop_assert!(matches!(how, Aggregation::Corrupt(_)));
            prop_assert_eq!(out.len(), 1);
            prop_assert_eq!(&out[0].data, &input);
        }
    }

    #[test]
    fn plain_records_pass_through() {
        let (out, how) = deaggregate(rec(Bytes::from_static(b"{\"tenantId\":\"t-1\"}")));
        assert_eq!(how, Aggregation::Plain);
        assert_eq!(out[0].position.sub_sequence, 0);
    }

    #[test]
    fn valid_md5_but_bad_protobuf_is_corrupt() {
        let body = vec![0x1a, 0x05, 0x00];
        let digest: [u8; 16] = Md5::digest(&body).into();
        let mut data = KPL_MAGIC.to_vec();
        data.extend(&body);
        data.extend(digest);
        let (out, how) = deaggregate(rec(Bytes::from(data)));
        assert_eq!(how, Aggregation::Corrupt("truncated field"));
        assert_eq!(out.len(), 1);
    }
}
