//! Intent manifests: how the intents of many objects stay out of a shard's lease.
//!
//! Exactly-once delivery stores, before putting an object, an intent per shard in it
//! (see [`crate::delivery`]). Intents live in the shard's lease item until a checkpoint
//! passes them, about one buffer interval, and a DynamoDB item holds at most 400 KB:
//! with thousands of partitions a shard would need thousands of intents (about 300
//! bytes each) at once. So a delivery round that puts many objects holding a shard's
//! records writes their intents into one *manifest* object first (create-only, under
//! `_weir/intents/<consumer>/<shard>/`) and stores one intent naming the
//! manifest in the lease, covering the whole range of its objects.
//!
//! Which intents go inline and which into a manifest, and how a lease stays within a
//! bound of bytes, is [`crate::delivery::budget`]'s business. A manifest may also
//! *absorb* earlier manifests: it lists their keys, and its intent takes the place of
//! theirs in the lease (its range covers theirs).
//!
//! A manifest is deleted, with the manifests it absorbed, when a checkpoint passes its
//! intent ([`weir_core::Consumer::on_intents_passed`]), by whichever worker wrote that
//! checkpoint. The next owner of a shard reads the manifests of its open intents (and
//! those they absorbed) and resolves the objects they list exactly as inline intents. A
//! manifest that cannot be read (deleted by hand, corrupt) is reported and taken as
//! "nothing written": the records are archived again (duplicates, never a loss).
//!
//! Format: version 4 is [`MAGIC`], then the shard and each intent as
//! length-prefixed fields (`u32` little-endian lengths; sub-sequence numbers `u64`),
//! each target and scope front-coded against the previous one (a `u32` count of bytes
//! shared, then the rest), then the intent's exact parts and its exceptions (for each, a
//! `u32` count of runs, each its first part, then a byte: 0 when the run is that one
//! part, 1 followed by its last part; a part is its sequence number front-coded, the
//! first run's against the intent's first position, every other run's against the run
//! before it, a last part's against its run's first, then its sub-sequence number and
//! `u32` place); then the keys of the manifests it absorbs (a `u32` count, then each
//! length-prefixed). Behind a Lambda every data object lists its records, a run of one
//! each at high cardinality: written in full (version 3), a run of one took 144 bytes
//! for Kinesis's 56-digit numbers, front-coded about 50. Version 3 writes each run's
//! parts in full; version 2 is without the parts, exceptions and absorbed manifests. An
//! archiver at 100,000 partitions writes a manifest entry
//! per object, and JSON with its escaped scopes was a tenth of its time
//! (`cargo bench -p weir-archiver --bench cardinality`). Written uncompressed: gzip
//! took 4% of the archiver's time at 100,000 partitions to shrink an object that lives
//! about one buffer interval (a PUT costs the same at any size). Versions 3 and 2
//! (plain or gzip'd, as weir wrote it before) and version 1, gzip'd JSON
//! (`{"version":1,"shard":…,"intents":[…]}`), are still read.
//!
//! Names start with `_weir/` (hidden from Hive, Athena and Glue, which skip names
//! starting with `_`) and end in `.manifest`, so no `*.gz` or `*.json` glob reading the
//! archive matches them.

use std::io::Read;

use bytes::Bytes;
use serde::Deserialize;
use weir_core::{ExtendedSequenceNumber, Intent, PartPosition, PartRun, SequenceNumber, ShardId};

/// The scope of an intent whose target is a manifest. (Data scopes are JSON objects,
/// error scopes start with `error:`.)
pub const MANIFEST_SCOPE: &str = "manifest";

/// Where the manifests of every consumer live.
pub const MANIFEST_ROOT: &str = "_weir/intents/";

/// Why a manifest could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    /// Not gzip, not JSON, or not a manifest of this shard.
    #[error("manifest {key} is unreadable: {reason}")]
    Unreadable {
        /// The manifest's key.
        key: String,
        /// What is wrong.
        reason: Unreadable,
    },
}

/// What is wrong with an unreadable manifest.
#[derive(Debug, thiserror::Error)]
pub enum Unreadable {
    /// Neither a binary manifest nor gzip (version 1).
    #[error("neither a manifest nor gzip: {0}")]
    NotGzip(std::io::Error),
    /// A binary manifest whose fields do not parse.
    #[error("not a manifest: {0}")]
    Corrupt(Corrupt),
    /// Gzip, but not a version 1 manifest's JSON.
    #[error("not a manifest: {0}")]
    NotJson(serde_json::Error),
    /// A JSON manifest of a version this weir does not know.
    #[error("version {0} (this weir reads versions 1 to 4)")]
    Version(u32),
    /// Written for another shard.
    #[error("it belongs to shard {0}")]
    OtherShard(ShardId),
}

/// Where a binary manifest's fields stop making sense (every length is checked before
/// anything is allocated for it).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Corrupt {
    /// A field runs past the end.
    #[error("ends early")]
    EndsEarly,
    /// A text is not UTF-8.
    #[error("not UTF-8: {0}")]
    NotUtf8(std::str::Utf8Error),
    /// A front-coded text shares more than the previous text has.
    #[error("shares more than the previous text has")]
    SharesTooMuch,
    /// A count larger than the bytes left could hold.
    #[error("{count} {what} in {bytes} bytes")]
    TooMany {
        /// How many the body says.
        count: usize,
        /// Of what (`intents`, `runs`, `absorbed manifests`).
        what: &'static str,
        /// Bytes left.
        bytes: usize,
    },
    /// A run's flag is neither 0 (one part) nor 1 (first and last).
    #[error("run flag {0}")]
    RunFlag(u8),
    /// A sequence number does not parse.
    #[error(transparent)]
    Sequence(weir_core::SequenceNumberError),
    /// Bytes after the last field.
    #[error("{0} bytes after the last intent")]
    Trailing(usize),
}

/// The first bytes of a version 4 manifest (the one written).
pub const MAGIC: &[u8; 8] = b"WEIRMF4\n";

/// The first bytes of a version 3 manifest, still read.
const MAGIC_V3: &[u8; 8] = b"WEIRMF3\n";

/// The first bytes of a version 2 manifest (after gunzip), still read.
const MAGIC_V2: &[u8; 8] = b"WEIRMF2\n";

/// A version 1 manifest.
#[derive(Deserialize)]
struct BodyV1 {
    version: u32,
    shard: ShardId,
    intents: Vec<Intent>,
}

/// One intent, borrowed from the objects of a round (a manifest lists thousands: they
/// are written without being built).
#[derive(Debug, Clone)]
pub struct IntentRef<'a> {
    /// [`Intent::target`].
    pub target: &'a str,
    /// [`Intent::scope`].
    pub scope: &'a str,
    /// [`Intent::first`].
    pub first: &'a ExtendedSequenceNumber,
    /// [`Intent::last`].
    pub last: &'a ExtendedSequenceNumber,
    /// [`Intent::parts`].
    pub parts: &'a [PartRun],
    /// [`Intent::except`].
    pub except: &'a [PartRun],
}

impl IntentRef<'_> {
    /// The intent.
    pub fn to_intent(&self) -> Intent {
        Intent {
            target: self.target.to_owned(),
            scope: self.scope.to_owned(),
            first: self.first.clone(),
            last: self.last.clone(),
            parts: self.parts.to_vec(),
            except: self.except.to_vec(),
        }
    }
}

/// A fresh manifest key of `consumer` for `shard`.
pub fn key(consumer: &str, shard: &ShardId) -> String {
    let id: u128 = rand::random();
    format!("{}{id:032x}.manifest", prefix(consumer, shard))
}

/// Where the manifests of `consumer` for `shard` are (ends in `/`).
pub fn prefix(consumer: &str, shard: &ShardId) -> String {
    format!("{MANIFEST_ROOT}{consumer}/{shard}/")
}

/// Whether `intent` names a manifest.
pub fn is_manifest(intent: &Intent) -> bool {
    intent.scope == MANIFEST_SCOPE
}

/// What a manifest lists.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Listed {
    /// Intents.
    pub intents: Vec<Intent>,
    /// Keys of the manifests it absorbed.
    pub absorbs: Vec<String>,
}

/// The manifest of `intents` (all of `shard`) absorbing the manifests of `absorbed`
/// (their intents): its body, and the one intent that goes into the lease, covering
/// every intent's range and every absorbed manifest's.
pub fn write(key: &str, shard: &ShardId, intents: &[IntentRef<'_>], absorbed: &[Intent]) -> Option<(Bytes, Intent)> {
    let ranges = intents.iter().map(|i| (i.first, i.last)).chain(absorbed.iter().map(|i| (&i.first, &i.last)));
    let (first, last) =
        ranges.fold(None, |acc: Option<(&ExtendedSequenceNumber, &ExtendedSequenceNumber)>, (f, l)| {
            Some(acc.map_or((f, l), |(af, al)| (af.min(f), al.max(l))))
        })?;
    let (first, last) = (first.clone(), last.clone());
    if intents.is_empty() {
        return None;
    }
    let mut raw = Vec::with_capacity(64 + intents.len() * 160);
    raw.extend_from_slice(MAGIC);
    put_text(&mut raw, shard.as_str().as_bytes());
    raw.extend_from_slice(&u32::try_from(intents.len()).ok()?.to_le_bytes());
    let (mut target, mut scope): (&[u8], &[u8]) = (b"", b"");
    for i in intents {
        put_shared(&mut raw, target, i.target.as_bytes());
        put_shared(&mut raw, scope, i.scope.as_bytes());
        (target, scope) = (i.target.as_bytes(), i.scope.as_bytes());
        for position in [i.first, i.last] {
            put_position(&mut raw, position);
        }
        for runs in [i.parts, i.except] {
            raw.extend_from_slice(&u32::try_from(runs.len()).ok()?.to_le_bytes());
            let mut previous = i.first.sequence.as_str().as_bytes();
            for run in runs {
                put_part(&mut raw, previous, &run.first);
                if run.last == run.first {
                    raw.push(0);
                } else {
                    raw.push(1);
                    put_part(&mut raw, run.first.position.sequence.as_str().as_bytes(), &run.last);
                }
                previous = run.first.position.sequence.as_str().as_bytes();
            }
        }
    }
    raw.extend_from_slice(&u32::try_from(absorbed.len()).ok()?.to_le_bytes());
    for a in absorbed {
        put_text(&mut raw, a.target.as_bytes());
    }
    let intent = Intent {
        target: key.to_owned(),
        scope: MANIFEST_SCOPE.to_owned(),
        first,
        last,
        parts: Vec::new(),
        except: Vec::new(),
    };
    Some((Bytes::from(raw), intent))
}

fn put_position(out: &mut Vec<u8>, position: &ExtendedSequenceNumber) {
    put_text(out, position.sequence.as_str().as_bytes());
    out.extend_from_slice(&position.sub_sequence.to_le_bytes());
}

/// A part: its sequence number front-coded against `previous`, its sub-sequence number
/// and its place.
fn put_part(out: &mut Vec<u8>, previous: &[u8], part: &PartPosition) {
    put_shared(out, previous, part.position.sequence.as_str().as_bytes());
    out.extend_from_slice(&part.position.sub_sequence.to_le_bytes());
    out.extend_from_slice(&part.part.to_le_bytes());
}

fn put_text(out: &mut Vec<u8>, text: &[u8]) {
    out.extend_from_slice(&(text.len() as u32).to_le_bytes());
    out.extend_from_slice(text);
}

/// `text` as the count of bytes it shares with `previous`, then the rest.
fn put_shared(out: &mut Vec<u8>, previous: &[u8], text: &[u8]) {
    let shared = previous.iter().zip(text).take_while(|(a, b)| a == b).count();
    out.extend_from_slice(&(shared as u32).to_le_bytes());
    put_text(out, &text[shared..]);
}

/// Reads a binary body, field by field, every length checked.
struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    fn bytes(&mut self, n: usize) -> Result<&'a [u8], Corrupt> {
        let (taken, rest) = self.rest.split_at_checked(n).ok_or(Corrupt::EndsEarly)?;
        self.rest = rest;
        Ok(taken)
    }

    fn u32(&mut self) -> Result<usize, Corrupt> {
        let b = self.bytes(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize)
    }

    fn u64(&mut self) -> Result<u64, Corrupt> {
        let b = self.bytes(8)?;
        Ok(u64::from_le_bytes(b.try_into().map_err(|_| Corrupt::EndsEarly)?))
    }

    fn text(&mut self) -> Result<&'a str, Corrupt> {
        let n = self.u32()?;
        std::str::from_utf8(self.bytes(n)?).map_err(Corrupt::NotUtf8)
    }

    /// A front-coded text after `previous`.
    fn shared(&mut self, previous: &str) -> Result<String, Corrupt> {
        let shared = self.u32()?;
        let head = previous.get(..shared).ok_or(Corrupt::SharesTooMuch)?;
        Ok(format!("{head}{}", self.text()?))
    }

    /// A count of runs, then the runs, in `version`'s encoding: 4 front-codes each
    /// run's first sequence number against the previous run's (the first against
    /// `anchor`) and its last against its first, and writes a run of one part once.
    fn runs(&mut self, version: Version, anchor: &ExtendedSequenceNumber) -> Result<Vec<PartRun>, Corrupt> {
        if version == Version::V3 {
            return self.runs_v3();
        }
        let runs = self.u32()?;
        // Each run takes at least 21 bytes (a first part sharing every digit, a flag).
        if runs > self.rest.len() / 21 {
            return Err(Corrupt::TooMany { count: runs, what: "runs", bytes: self.rest.len() });
        }
        let mut out: Vec<PartRun> = Vec::with_capacity(runs);
        for _ in 0..runs {
            let previous = out.last().map_or(anchor, |r| &r.first.position);
            let first = self.part(previous)?;
            let last = match self.bytes(1)?[0] {
                0 => first.clone(),
                1 => self.part(&first.position)?,
                flag => return Err(Corrupt::RunFlag(flag)),
            };
            out.push(PartRun { first, last });
        }
        Ok(out)
    }

    /// A part written by [`put_part`] after `previous`.
    fn part(&mut self, previous: &ExtendedSequenceNumber) -> Result<PartPosition, Corrupt> {
        let digits = self.shared(previous.sequence.as_str())?;
        let sequence = SequenceNumber::parse(&digits).map_err(Corrupt::Sequence)?;
        let position = ExtendedSequenceNumber::new(sequence, self.u64()?);
        Ok(PartPosition { position, part: self.u32()? as u32 })
    }

    /// Runs as version 3 wrote them: each part in full.
    fn runs_v3(&mut self) -> Result<Vec<PartRun>, Corrupt> {
        let runs = self.u32()?;
        // Each run takes at least 34 bytes (two positions of one digit, and places).
        if runs > self.rest.len() / 34 {
            return Err(Corrupt::TooMany { count: runs, what: "runs", bytes: self.rest.len() });
        }
        let mut out = Vec::with_capacity(runs);
        for _ in 0..runs {
            let first = PartPosition { position: self.position()?, part: self.u32()? as u32 };
            let last = PartPosition { position: self.position()?, part: self.u32()? as u32 };
            out.push(PartRun { first, last });
        }
        Ok(out)
    }

    fn position(&mut self) -> Result<ExtendedSequenceNumber, Corrupt> {
        let sequence = SequenceNumber::parse(self.text()?).map_err(Corrupt::Sequence)?;
        Ok(ExtendedSequenceNumber::new(sequence, self.u64()?))
    }
}

/// A manifest's version (1, gzip'd JSON, is read apart).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Version {
    /// No parts, exceptions or absorbed manifests.
    V2,
    /// Parts and exceptions in full.
    V3,
    /// Parts and exceptions front-coded (the one written).
    V4,
}

impl Version {
    /// The version a body's first bytes name.
    fn of(raw: &[u8]) -> Option<Version> {
        [(MAGIC, Version::V4), (MAGIC_V3, Version::V3), (MAGIC_V2, Version::V2)]
            .into_iter()
            .find_map(|(magic, v)| raw.starts_with(magic).then_some(v))
    }
}

/// Reads a version 2, 3 or 4 body.
fn read_binary(raw: &[u8], version: Version) -> Result<(ShardId, Listed), Corrupt> {
    let with_parts = version != Version::V2;
    let mut r = Reader { rest: &raw[MAGIC.len()..] };
    let shard = ShardId::new(r.text()?);
    let n = r.u32()?;
    // Each intent takes at least 32 bytes: a count past that is corrupt.
    if n > r.rest.len() / 32 {
        return Err(Corrupt::TooMany { count: n, what: "intents", bytes: r.rest.len() });
    }
    let mut intents: Vec<Intent> = Vec::with_capacity(n);
    for _ in 0..n {
        let (target, scope) = intents.last().map_or(("", ""), |i| (i.target.as_str(), i.scope.as_str()));
        let (target, scope) = (r.shared(target)?, r.shared(scope)?);
        let (first, last) = (r.position()?, r.position()?);
        let (parts, except) =
            if with_parts { (r.runs(version, &first)?, r.runs(version, &first)?) } else { (Vec::new(), Vec::new()) };
        intents.push(Intent { target, scope, first, last, parts, except });
    }
    let mut absorbs = Vec::new();
    if with_parts {
        let n = r.u32()?;
        if n > r.rest.len() / 4 {
            return Err(Corrupt::TooMany { count: n, what: "absorbed manifests", bytes: r.rest.len() });
        }
        for _ in 0..n {
            absorbs.push(r.text()?.to_owned());
        }
    }
    if !r.rest.is_empty() {
        return Err(Corrupt::Trailing(r.rest.len()));
    }
    Ok((shard, Listed { intents, absorbs }))
}

/// The keys a manifest body says it absorbed (none if it cannot be read).
pub fn absorbed_by(body: &[u8]) -> Vec<String> {
    match Version::of(body) {
        Some(v) if v != Version::V2 => read_binary(body, v).map(|(_, listed)| listed.absorbs).unwrap_or_default(),
        _ => Vec::new(),
    }
}

/// What a manifest of `shard` lists.
pub fn read(key: &str, shard: &ShardId, body: &[u8]) -> Result<Listed, ManifestError> {
    let bad = |reason: Unreadable| ManifestError::Unreadable { key: key.to_owned(), reason };
    let mut unzipped = Vec::new();
    let raw: &[u8] = if Version::of(body).is_some() {
        body
    } else {
        flate2::read::GzDecoder::new(body).read_to_end(&mut unzipped).map_err(|e| bad(Unreadable::NotGzip(e)))?;
        &unzipped
    };
    let (written_for, listed) = if let Some(version) = Version::of(raw) {
        read_binary(raw, version).map_err(|e| bad(Unreadable::Corrupt(e)))?
    } else {
        let b: BodyV1 = serde_json::from_slice(raw).map_err(|e| bad(Unreadable::NotJson(e)))?;
        if b.version != 1 {
            return Err(bad(Unreadable::Version(b.version)));
        }
        (b.shard, Listed { intents: b.intents, absorbs: Vec::new() })
    };
    if written_for != *shard {
        return Err(bad(Unreadable::OtherShard(written_for)));
    }
    Ok(listed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::any;
    use proptest::prop_oneof;
    use weir_core::SequenceNumber;

    fn p(n: u128) -> ExtendedSequenceNumber {
        ExtendedSequenceNumber::plain(SequenceNumber::from_u128(n))
    }

    fn intent(key: &str, first: u128, last: u128) -> Intent {
        Intent {
            target: key.into(),
            scope: "{\"tenant\":\"t\"}".into(),
            first: p(first),
            last: p(last),
            parts: vec![],
            except: vec![],
        }
    }

    #[test]
    fn a_manifest_round_trips_and_covers_its_intents() {
        let shard = ShardId::new("shardId-000000000001");
        let k = key("archive", &shard);
        assert!(k.starts_with("_weir/intents/archive/shardId-000000000001/"), "{k}");
        assert!(k.ends_with(".manifest"));
        weir_core::ports::validate_key(&k).unwrap();
        let intents = vec![intent("a.gz", 5, 9), intent("b.gz", 2, 20), intent("c.gz", 7, 8)];
        let refs: Vec<IntentRef<'_>> = intents
            .iter()
            .map(|i| IntentRef {
                target: &i.target,
                scope: &i.scope,
                first: &i.first,
                last: &i.last,
                parts: &i.parts,
                except: &i.except,
            })
            .collect();
        let (body, lease_intent) = write(&k, &shard, &refs, &[]).unwrap();
        assert!(is_manifest(&lease_intent));
        assert_eq!((lease_intent.first, lease_intent.last), (p(2), p(20)));
        assert_eq!(read(&k, &shard, &body).unwrap().intents, intents);
        // One that absorbs earlier manifests covers their ranges too and lists them.
        let earlier = [
            Intent { scope: MANIFEST_SCOPE.into(), ..intent("m1", 1, 3) },
            Intent { scope: MANIFEST_SCOPE.into(), ..intent("m2", 21, 30) },
        ];
        let (absorbing, its_intent) = write(&k, &shard, &refs, &earlier).unwrap();
        assert_eq!((its_intent.first, its_intent.last), (p(1), p(30)));
        let listed = read(&k, &shard, &absorbing).unwrap();
        assert_eq!((listed.intents, listed.absorbs), (intents.clone(), vec!["m1".to_owned(), "m2".to_owned()]));
        let other = ShardId::new("shardId-000000000002");
        assert!(read(&k, &other, &body).is_err(), "another shard's manifest is refused");
        assert!(read(&k, &shard, b"not gzip").is_err());
        assert!(body.starts_with(MAGIC), "written uncompressed");
        assert_eq!(read(&k, &shard, &gzip(&body)).unwrap().intents, intents, "gzip'd, as earlier weirs wrote them");
        assert!(write(&k, &shard, &[], &[]).is_none(), "no manifest of nothing");
    }

    fn gzip(raw: &[u8]) -> Vec<u8> {
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        std::io::Write::write_all(&mut gz, raw).unwrap();
        gz.finish().unwrap()
    }

    #[test]
    fn version_one_manifests_are_still_read() {
        let shard = ShardId::new("shardId-000000000001");
        let intents = vec![intent("a.gz", 5, 9), intent("b.gz", 2, 20)];
        let v1 = serde_json::json!({"version": 1, "shard": shard, "intents": intents});
        let body = gzip(&serde_json::to_vec(&v1).unwrap());
        assert_eq!(read("k", &shard, &body).unwrap().intents, intents);
        let v3 = gzip(br#"{"version":3,"shard":"shardId-000000000001","intents":[]}"#);
        assert!(read("k", &shard, &v3).unwrap_err().to_string().contains("version 3"));
    }

    /// A version 2 manifest (written before intents listed parts) is still read: its
    /// intents list no parts.
    #[test]
    fn version_two_manifests_are_still_read() {
        let shard = ShardId::new("shardId-000000000001");
        let intents = vec![intent("a.gz", 5, 9), intent("b.gz", 2, 20)];
        let mut raw = MAGIC_V2.to_vec();
        put_text(&mut raw, shard.as_str().as_bytes());
        raw.extend_from_slice(&(intents.len() as u32).to_le_bytes());
        let (mut target, mut scope): (&[u8], &[u8]) = (b"", b"");
        for i in &intents {
            put_shared(&mut raw, target, i.target.as_bytes());
            put_shared(&mut raw, scope, i.scope.as_bytes());
            (target, scope) = (i.target.as_bytes(), i.scope.as_bytes());
            put_position(&mut raw, &i.first);
            put_position(&mut raw, &i.last);
        }
        assert_eq!(read("k", &shard, &raw).unwrap().intents, intents);
        assert_eq!(read("k", &shard, &gzip(&raw)).unwrap().intents, intents, "gzip'd, as weir wrote them before");
    }

    /// Kinesis's 56-digit sequence number `n` records into a shard.
    fn kinesis(n: u128) -> ExtendedSequenceNumber {
        let digits = format!("49590338271490256608559692{:030}", n * 1_000_003);
        ExtendedSequenceNumber::plain(SequenceNumber::parse(&digits).unwrap())
    }

    /// A data object behind a Lambda at high cardinality lists its records one run
    /// each: front-coded, a run of one takes about a third of what version 3 wrote.
    #[test]
    fn runs_of_one_part_are_front_coded() {
        let shard = ShardId::new("shardId-000000000001");
        let parts: Vec<PartRun> = (0..1_000u128)
            .map(|n| {
                let part = PartPosition { position: kinesis(n * 7), part: 0 };
                PartRun { first: part.clone(), last: part }
            })
            .collect();
        let (first, last) = (kinesis(0), kinesis(7_000));
        let i = IntentRef { target: "t/a.gz", scope: "{}", first: &first, last: &last, parts: &parts, except: &[] };
        let (body, _) = write("k", &shard, std::slice::from_ref(&i), &[]).unwrap();
        assert_eq!(read("k", &shard, &body).unwrap().intents, vec![i.to_intent()]);
        let per_run = body.len() / parts.len();
        assert!(per_run <= 50, "{per_run} bytes a run of one part");
        assert!(v3(&shard, &[i.to_intent()]).len() / parts.len() >= 140, "version 3 wrote each part in full");
    }

    /// A version 3 body of `intents`, as weir wrote them before runs were front-coded.
    fn v3(shard: &ShardId, intents: &[Intent]) -> Vec<u8> {
        let mut raw = MAGIC_V3.to_vec();
        put_text(&mut raw, shard.as_str().as_bytes());
        raw.extend_from_slice(&(intents.len() as u32).to_le_bytes());
        let (mut target, mut scope): (&[u8], &[u8]) = (b"", b"");
        for i in intents {
            put_shared(&mut raw, target, i.target.as_bytes());
            put_shared(&mut raw, scope, i.scope.as_bytes());
            (target, scope) = (i.target.as_bytes(), i.scope.as_bytes());
            put_position(&mut raw, &i.first);
            put_position(&mut raw, &i.last);
            for runs in [&i.parts, &i.except] {
                raw.extend_from_slice(&(runs.len() as u32).to_le_bytes());
                for run in runs {
                    for p in [&run.first, &run.last] {
                        put_position(&mut raw, &p.position);
                        raw.extend_from_slice(&p.part.to_le_bytes());
                    }
                }
            }
        }
        raw.extend_from_slice(&1u32.to_le_bytes());
        put_text(&mut raw, b"_weir/intents/archive/shardId-000000000001/old.manifest");
        raw
    }

    /// A version 3 manifest (runs in full) is still read, and so are its absorbed keys.
    #[test]
    fn version_three_manifests_are_still_read() {
        let shard = ShardId::new("shardId-000000000001");
        let run = |a: u128, b: u128| PartRun {
            first: PartPosition { position: kinesis(a), part: 1 },
            last: PartPosition { position: kinesis(b), part: 0 },
        };
        let intents = vec![
            Intent { parts: vec![run(5, 5), run(6, 9)], ..intent("a.gz", 5, 9) },
            Intent { except: vec![run(3, 4)], ..intent("b.gz", 2, 20) },
        ];
        let raw = v3(&shard, &intents);
        let listed = read("k", &shard, &raw).unwrap();
        assert_eq!(listed.intents, intents);
        assert_eq!(listed.absorbs, vec!["_weir/intents/archive/shardId-000000000001/old.manifest".to_owned()]);
        assert_eq!(absorbed_by(&raw), listed.absorbs);
        assert_eq!(read("k", &shard, &gzip(&raw)).unwrap().intents, intents, "gzip'd");
    }

    proptest::proptest! {
        /// Any intents round-trip, and no cut or changed byte of a manifest is read as
        /// anything but an error or the same intents (never a panic).
        #[test]
        fn manifests_round_trip_and_corruption_is_an_error(
            items in proptest::collection::vec(("[a-c/=]{0,12}", "[a-c\"{}]{0,8}", prop_oneof![0u128..10, 0u128..1u128 << 100], any::<u64>(), proptest::collection::vec(any::<u32>(), 0..4)), 1..20),
            cut in any::<proptest::sample::Index>(),
            flip in any::<proptest::sample::Index>(),
        ) {
            let shard = ShardId::new("shardId-000000000007");
            let intents: Vec<Intent> = items
                .iter()
                .map(|(t, s, seq, sub, runs)| Intent {
                    target: t.clone(),
                    scope: s.clone(),
                    first: ExtendedSequenceNumber::new(SequenceNumber::from_u128(*seq), *sub),
                    last: ExtendedSequenceNumber::new(SequenceNumber::from_u128(seq + 1), 0),
                    // Runs of several parts, and (every third) of one.
                    parts: runs
                        .iter()
                        .map(|part| {
                            let first = PartPosition { position: ExtendedSequenceNumber::new(SequenceNumber::from_u128(*seq), *sub), part: *part };
                            let last = if part % 3 == 0 {
                                first.clone()
                            } else {
                                PartPosition { position: ExtendedSequenceNumber::plain(SequenceNumber::from_u128(seq + 1)), part: part / 2 }
                            };
                            PartRun { first, last }
                        })
                        .collect(),
                    except: runs.iter().take(1).map(|part| PartRun {
                        first: PartPosition { position: ExtendedSequenceNumber::plain(SequenceNumber::from_u128(*seq)), part: *part },
                        last: PartPosition { position: ExtendedSequenceNumber::plain(SequenceNumber::from_u128(*seq)), part: part.saturating_add(1) },
                    }).collect(),
                })
                .collect();
            let refs: Vec<IntentRef<'_>> = intents
                .iter()
                .map(|i| IntentRef { target: &i.target, scope: &i.scope, first: &i.first, last: &i.last, parts: &i.parts, except: &i.except })
                .collect();
            let absorbed: Vec<Intent> = items.iter().take(2).map(|(t, _, _, _, _)| Intent { scope: MANIFEST_SCOPE.into(), ..intent(t, 1, 2) }).collect();
            let (body, _) = write("k", &shard, &refs, &absorbed).unwrap();
            let expected = Listed { intents: intents.clone(), absorbs: absorbed.iter().map(|a| a.target.clone()).collect() };
            proptest::prop_assert_eq!(&read("k", &shard, &body).unwrap(), &expected);
            // As written (uncompressed) and as earlier weirs wrote it (gzip'd).
            proptest::prop_assert_eq!(&read("k", &shard, &gzip(&body)).unwrap(), &expected);
            let mut raw = body.to_vec();
            let cut = cut.index(raw.len());
            proptest::prop_assert!(read("k", &shard, &raw[..cut]).is_err());
            proptest::prop_assert!(read("k", &shard, &gzip(&raw[..cut])).is_err());
            let at = flip.index(raw.len());
            raw[at] ^= 0x55;
            for body in [raw.clone(), gzip(&raw)] {
                if let Ok(got) = read("k", &shard, &body) {
                    proptest::prop_assert_eq!(got.intents.len(), intents.len());
                }
            }
        }
    }
}
