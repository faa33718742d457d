//! Object bodies that hold compressed bytes as they fill, without a compressor per
//! partition.
//!
//! A zlib compressor keeps about 256 KiB of state; 500 open partitions would need
//! 128 MiB for compressor state alone. Instead each body stages at most
//! [`CHUNK`] bytes of records; a full stage is compressed by one shared [`Deflater`]
//! into a run of non-final deflate blocks ending on a byte boundary (a sync flush),
//! exactly as pigz joins independently compressed pieces. Runs concatenate into one
//! valid deflate stream; `finish` adds the final block and the gzip header and trailer
//! (CRC-32 and length of the uncompressed data). The result is a single-member gzip
//! file that every reader accepts. Each chunk starts without a dictionary, which costs
//! a few percent of compression ratio against one long stream.

use bytes::Bytes;
use flate2::{Compress, Compression, Decompress, FlushCompress, FlushDecompress, Status};

use weir_core::object_format;

use crate::delivery::small_deflate::SmallDeflate;

use crate::parquet::ParquetFormat;
use std::sync::Arc;
use weir_firehose::Compression as Format;

/// Uncompressed bytes staged per body before they are compressed.
pub const CHUNK: usize = 64 * 1024;

const GZIP_HEADER: [u8; 10] = [0x1f, 0x8b, 0x08, 0, 0, 0, 0, 0, 0, 0xff];

/// A compression failure (zlib reports these only for invalid state or memory).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("compression failed: {0}")]
pub struct BodyError(pub String);

/// The raw-deflate compressors shared by every body of an archiver.
pub struct Deflater {
    compress: Compress,
    /// For runs under [`SMALL_RUN`] bytes: fixed Huffman codes skip the per-block tree
    /// building that dominates compressing a few hundred bytes (with 100,000 partitions
    /// of a few records each, that was a fifth of the archiver's time), at a few percent
    /// of ratio on pieces that small; and its hash table is small enough to clear for
    /// every object (see [`crate::delivery::small_deflate`]).
    small: SmallDeflate,
    /// Where small objects are finished (see [`Body::finish_with`]).
    scratch: Vec<u8>,
    /// The table and writer settings of `Parquet` objects.
    parquet: Option<Arc<ParquetFormat>>,
}

/// Objects smaller than this are finished in [`Deflater`]'s scratch.
const SMALL_OBJECT: usize = 16 * 1024;

/// Runs shorter than this are compressed at level 1 (see [`Deflater`]).
pub const SMALL_RUN: usize = 4096;

impl Deflater {
    /// A compressor at `level` (0–9; Firehose's GZIP is comparable to 6).
    pub fn new(level: u32) -> Self {
        Self {
            compress: Compress::new(Compression::new(level), false),
            small: SmallDeflate::default(),
            scratch: Vec::new(),
            parquet: None,
        }
    }

    /// The same, also encoding `Parquet` objects with `format`.
    pub fn with_parquet(mut self, format: Option<Arc<ParquetFormat>>) -> Self {
        self.parquet = format;
        self
    }

    /// The Parquet format, for a `Parquet` body.
    pub fn parquet(&self) -> Result<&ParquetFormat, BodyError> {
        self.parquet.as_deref().ok_or_else(|| BodyError("a Parquet object without a table".into()))
    }

    /// Compresses `input` as an independent run of blocks appended to `out`; `last`
    /// ends the stream with a final block.
    fn run(&mut self, input: &[u8], out: &mut Vec<u8>, last: bool) -> Result<(), BodyError> {
        if input.len() < SMALL_RUN && self.small.run(input, out, last).is_some() {
            return Ok(());
        }
        let compress = &mut self.compress;
        compress.reset();
        let flush = if last { FlushCompress::Finish } else { FlushCompress::Sync };
        let mut consumed = 0usize;
        loop {
            out.reserve(input.len() / 4 + 256);
            let before_in = compress.total_in();
            let status = compress.compress_vec(&input[consumed..], out, flush).map_err(|e| BodyError(e.to_string()))?;
            consumed += (compress.total_in() - before_in) as usize;
            let room_left = out.capacity() > out.len();
            match status {
                Status::StreamEnd => return Ok(()),
                _ if consumed == input.len() && room_left && !last => return Ok(()),
                _ => {}
            }
        }
    }
}

impl Deflater {
    /// One chunk compressed into an exactly-sized piece.
    fn piece(&mut self, input: &[u8]) -> Result<Vec<u8>, BodyError> {
        let mut out = Vec::new();
        self.run(input, &mut out, false)?;
        out.shrink_to_fit();
        Ok(out)
    }
}

/// One object's body while it fills.
pub enum Body {
    /// `UNCOMPRESSED`, or a format compressed whole when the object is finished
    /// (`ZIP`, `Snappy`, `HADOOP_SNAPPY`): the records as they are, and the format.
    Plain(Vec<u8>, Format),
    /// `GZIP`: compressed runs plus the staged tail.
    Gzip {
        /// Deflate runs so far (no header), one exactly-sized piece per chunk.
        runs: Vec<Vec<u8>>,
        /// Bytes in `runs` (kept so that [`Body::held`] is not a walk over them).
        runs_len: usize,
        /// Records not compressed yet.
        staged: Vec<u8>,
        /// CRC-32 of everything compressed so far (the stage is added when it is).
        crc: crc32fast::Hasher,
        /// Bytes appended.
        len: u64,
    },
}

impl Body {
    /// An empty body of the format.
    pub fn new(format: Format) -> Self {
        match format {
            Format::Uncompressed | Format::Zip | Format::Snappy | Format::HadoopSnappy | Format::Parquet => {
                Body::Plain(Vec::new(), format)
            }
            Format::Gzip => {
                Body::Gzip { runs: Vec::new(), runs_len: 0, staged: Vec::new(), crc: crc32fast::Hasher::new(), len: 0 }
            }
        }
    }

    /// Appends bytes.
    pub fn append(&mut self, data: &[u8], deflater: &mut Deflater) -> Result<(), BodyError> {
        match self {
            Body::Plain(v, _) => v.extend_from_slice(data),
            Body::Gzip { runs, runs_len, staged, crc, len } => {
                *len += data.len() as u64;
                // Compress the stage before it would grow past CHUNK, so its capacity
                // stays at CHUNK (records larger than that pass through whole). The
                // CRC is taken over each stage as it is compressed.
                if !staged.is_empty() && staged.len() + data.len() > CHUNK {
                    crc.update(staged);
                    let piece = deflater.piece(staged)?;
                    *runs_len += piece.len();
                    runs.push(piece);
                    staged.clear();
                }
                // The stage grows geometrically up to CHUNK (growing it a few records at
                // a time copied each chunk dozens of times), from room for about two
                // records (most of 100,000 partitions hold a few).
                let needed = staged.len() + data.len();
                if staged.capacity() < needed {
                    let grown = if staged.capacity() == 0 { needed * 2 } else { staged.capacity() * 2 };
                    let target = needed.max(grown.clamp(256, CHUNK));
                    staged.reserve_exact(target - staged.len());
                }
                staged.extend_from_slice(data);
                if staged.len() >= CHUNK {
                    crc.update(staged);
                    let piece = deflater.piece(staged)?;
                    *runs_len += piece.len();
                    runs.push(piece);
                    staged.clear();
                    staged.shrink_to(CHUNK);
                }
            }
        }
        Ok(())
    }

    /// Compresses the staged records now (to free memory) and releases the stage.
    /// The object stays valid; a piece cut short compresses a little worse.
    pub fn compact(&mut self, deflater: &mut Deflater) -> Result<(), BodyError> {
        if let Body::Gzip { runs, runs_len, staged, crc, .. } = self
            && !staged.is_empty()
        {
            crc.update(staged);
            let piece = deflater.piece(staged)?;
            *runs_len += piece.len();
            runs.push(piece);
            *staged = Vec::new();
        }
        Ok(())
    }

    /// Records staged, not compressed yet.
    pub fn staged(&self) -> usize {
        match self {
            Body::Plain(_, _) => 0,
            Body::Gzip { staged, .. } => staged.len(),
        }
    }

    /// Bytes held in memory (compressed runs plus staged records, with their
    /// allocations' capacity); constant time.
    pub fn held(&self) -> usize {
        match self {
            Body::Plain(v, _) => v.capacity(),
            Body::Gzip { runs, runs_len, staged, .. } => runs_len + runs.capacity() * 24 + staged.capacity(),
        }
    }

    /// Compressed bytes so far (all bytes for `Plain`).
    pub fn compressed(&self) -> usize {
        match self {
            Body::Plain(v, _) => v.len(),
            Body::Gzip { runs_len, .. } => *runs_len,
        }
    }

    /// Takes the compressed bytes out of memory: every compressed run, or all bytes of
    /// a `Plain` body. They must come back, in order, ahead of everything appended
    /// later: through [`Body::finish_with`], or [`Body::unspill`] if they could not be
    /// stored.
    pub fn spill_out(&mut self) -> Vec<u8> {
        match self {
            Body::Plain(v, _) => std::mem::take(v),
            Body::Gzip { runs, runs_len, .. } => {
                let mut out = Vec::with_capacity(*runs_len);
                for r in runs.drain(..) {
                    out.extend_from_slice(&r);
                }
                *runs = Vec::new();
                *runs_len = 0;
                out
            }
        }
    }

    /// Takes the staged (not yet compressed) bytes out of memory; they stay part of the
    /// body and must come back through [`Body::prepend_stage`] before the stage is
    /// compressed. Empty for `Plain` (its bytes all go through [`Body::spill_out`]).
    pub fn take_stage(&mut self) -> Vec<u8> {
        match self {
            Body::Plain(_, _) => Vec::new(),
            Body::Gzip { staged, .. } => std::mem::take(staged),
        }
    }

    /// Puts staged bytes taken by [`Body::take_stage`] back in front of the stage.
    pub fn prepend_stage(&mut self, mut raw: Vec<u8>) {
        if let Body::Gzip { staged, .. } = self {
            raw.extend_from_slice(staged);
            *staged = raw;
        }
    }

    /// Puts back what [`Body::spill_out`] took (nothing was appended since).
    pub fn unspill(&mut self, bytes: Vec<u8>) {
        match self {
            Body::Plain(v, _) => *v = bytes,
            Body::Gzip { runs, runs_len, .. } => {
                *runs_len = bytes.len();
                *runs = vec![bytes];
            }
        }
    }

    /// Makes a body compressed whole when it is finished (`ZIP`, `Snappy`, `Parquet`,
    /// ...) finish as its records as they are: a buffer taken apart and opened again
    /// ([`crate::delivery::buffers::Buffers::forget_shard`]) need not be encoded.
    pub fn finish_plain(&mut self) {
        if let Body::Plain(_, format) = self {
            *format = Format::Uncompressed;
        }
    }

    /// The finished object.
    pub fn finish(self, deflater: &mut Deflater) -> Result<Bytes, BodyError> {
        Ok(self.finish_with(deflater, &[], |_| Ok(()))?.body)
    }

    /// The finished object, with `spilled` writing the bytes taken out by
    /// [`Body::spill_out`] (in order) where they belong. `lens` are its records'
    /// lengths in order (or empty): a `Parquet` object (its records are rows
    /// [`crate::parquet::ParquetFormat::convert`] wrote) tells from them how many rows
    /// each record is.
    pub fn finish_with(
        self,
        deflater: &mut Deflater,
        lens: &[u32],
        spilled: impl FnOnce(&mut Vec<u8>) -> Result<(), BodyError>,
    ) -> Result<Finished, BodyError> {
        let plain = |body| Ok(Finished { body, rows: Vec::new() });
        match self {
            Body::Plain(v, format) => {
                let mut out = Vec::new();
                spilled(&mut out)?;
                let whole = if out.is_empty() {
                    v
                } else {
                    out.extend_from_slice(&v);
                    out
                };
                if format == Format::Parquet {
                    let (encoded, rows) =
                        deflater.parquet()?.encode_rows(&whole, lens).map_err(|e| BodyError(e.to_string()))?;
                    return Ok(Finished { body: Bytes::from(encoded), rows });
                }
                match format.whole() {
                    None => plain(Bytes::from(whole)),
                    Some(f) => {
                        plain(Bytes::from(object_format::encode(f, &whole).map_err(|e| BodyError(e.to_string()))?))
                    }
                }
            }
            Body::Gzip { runs, staged, mut crc, len, runs_len } => {
                crc.update(&staged);
                // The last run may grow (fixed codes on incompressible bytes: 9 bits a byte).
                let size = GZIP_HEADER.len() + runs_len + staged.len() * 9 / 8 + 32;
                // A small object is written in the compressor's scratch and copied out at
                // its size: one allocation instead of two (a vector, then the `Bytes`
                // header for its spare room), for each of 100,000 small objects.
                let small = size < SMALL_OBJECT;
                let mut out = if small { std::mem::take(&mut deflater.scratch) } else { Vec::with_capacity(size) };
                out.clear();
                out.extend_from_slice(&GZIP_HEADER);
                spilled(&mut out)?;
                for r in runs {
                    out.extend_from_slice(&r);
                }
                deflater.run(&staged, &mut out, true)?;
                out.extend_from_slice(&crc.finalize().to_le_bytes());
                out.extend_from_slice(&(len as u32).to_le_bytes());
                if small {
                    let body = Bytes::copy_from_slice(&out);
                    deflater.scratch = out;
                    return plain(body);
                }
                plain(Bytes::from(out))
            }
        }
    }
}

/// A finished object.
#[derive(Debug)]
pub struct Finished {
    /// Its bytes.
    pub body: Bytes,
    /// For a `Parquet` object whose records did not each become one row: the rows of
    /// each record, in order (see [`crate::parquet::ParquetFormat::encode_rows`]);
    /// otherwise empty.
    pub rows: Vec<u32>,
}

/// The uncompressed content of a finished object of `format` (to rebuild an object
/// without some of its records).
pub fn decode(format: Format, body: &[u8]) -> Result<Vec<u8>, BodyError> {
    match format {
        Format::Uncompressed => Ok(body.to_vec()),
        Format::Parquet => Err(BodyError("a Parquet object is not decoded into records".into())),
        Format::Zip | Format::Snappy | Format::HadoopSnappy => {
            let whole = format.whole().ok_or_else(|| BodyError(format!("{format:?} is not compressed whole")))?;
            object_format::decode(whole, body, u64::MAX).map_err(|e| BodyError(e.to_string()))
        }
        Format::Gzip => {
            let deflate = body
                .get(GZIP_HEADER.len()..body.len().saturating_sub(8))
                .ok_or_else(|| BodyError("gzip body too short".into()))?;
            let mut d = Decompress::new(false);
            let mut out = Vec::with_capacity(deflate.len() * 4);
            loop {
                out.reserve(deflate.len().max(1024));
                let consumed = d.total_in() as usize;
                let status = d
                    .decompress_vec(&deflate[consumed..], &mut out, FlushDecompress::Finish)
                    .map_err(|e| BodyError(e.to_string()))?;
                if status == Status::StreamEnd {
                    return Ok(out);
                }
                if d.total_in() as usize == deflate.len() && out.capacity() > out.len() {
                    return Err(BodyError("gzip body ends early".into()));
                }
            }
        }
    }
}

/// The body of a claimed key: a valid, empty object of the format (see the crate docs
/// on exactly-once delivery).
pub fn claim_body(format: Format, parquet: Option<Arc<ParquetFormat>>) -> Bytes {
    let mut d = Deflater::new(1).with_parquet(parquet);
    Body::new(format).finish(&mut d).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use flate2::read::MultiGzDecoder;
    use proptest::prelude::*;
    use std::io::Read;

    fn gunzip(b: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        MultiGzDecoder::new(b).read_to_end(&mut out).unwrap();
        out
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]
        #[test]
        fn any_appends_make_one_valid_gzip(parts in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..40_000), 0..12)) {
            let mut d = Deflater::new(6);
            let mut body = Body::new(Format::Gzip);
            let mut all = Vec::new();
            for p in &parts {
                body.append(p, &mut d).unwrap();
                all.extend_from_slice(p);
            }
            let bytes = body.finish(&mut d).unwrap();
            prop_assert_eq!(&gunzip(&bytes), &all);
            prop_assert_eq!(&decode(Format::Gzip, &bytes).unwrap(), &all);
            // One member: the single-member reader agrees.
            let mut single = Vec::new();
            flate2::read::GzDecoder::new(&bytes[..]).read_to_end(&mut single).unwrap();
            prop_assert_eq!(single, all);
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]
        /// Bytes spilled out at any points and written back at the end make the same
        /// object as a body that never spilled.
        #[test]
        fn spilling_keeps_the_object_whole(
            parts in proptest::collection::vec((proptest::collection::vec(any::<u8>(), 0..20_000), any::<bool>(), any::<bool>()), 0..10),
            gzip in any::<bool>(),
        ) {
            let format = if gzip { Format::Gzip } else { Format::Uncompressed };
            let mut d = Deflater::new(6);
            let mut body = Body::new(format);
            let mut disk = Vec::new();
            let mut all = Vec::new();
            for (p, spill, fail) in &parts {
                body.append(p, &mut d).unwrap();
                all.extend_from_slice(p);
                if *spill {
                    body.compact(&mut d).unwrap();
                    let out = body.spill_out();
                    if *fail {
                        body.unspill(out);
                    } else {
                        disk.extend_from_slice(&out);
                    }
                }
            }
            let bytes = body.finish_with(&mut d, &[], |out| { out.extend_from_slice(&disk); Ok(()) }).unwrap().body;
            let content = if gzip { gunzip(&bytes) } else { bytes.to_vec() };
            prop_assert_eq!(content, all);
        }
    }

    #[test]
    fn claim_bodies_are_valid_and_empty() {
        let gz = claim_body(Format::Gzip, None);
        assert!(gunzip(&gz).is_empty());
        assert!(claim_body(Format::Uncompressed, None).is_empty());
    }

    #[test]
    fn memory_is_bounded_by_the_stage_and_the_compressed_bytes() {
        let mut d = Deflater::new(6);
        let mut body = Body::new(Format::Gzip);
        let line = br#"{"schema_version":"1","tenant_id":"t-001","tool_name":"search","duration_ms":12}"#;
        for _ in 0..50_000 {
            body.append(line, &mut d).unwrap();
        }
        let raw = 50_000 * line.len();
        assert!(body.held() < CHUNK * 2 + raw / 10, "held {} for {raw} raw bytes", body.held());
    }
}
