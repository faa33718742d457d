//! Archive objects in the compression formats Firehose writes to S3, besides GZIP and
//! UNCOMPRESSED: `ZIP` (one deflated entry), `Snappy` (the framing format, as
//! `python-snappy`'s stream functions and Hadoop-free readers expect) and
//! `HADOOP_SNAPPY` (Hadoop's block format, what Hive and Spark read with
//! `SnappyCodec`). Pure functions on whole bodies: the archiver encodes an object when
//! it is sealed, and replay decodes any object it finds, whatever wrote it.
//!
//! Hadoop's block format is written here by hand: it is 8 bytes of lengths around
//! each block of raw Snappy (from `snap`), and no maintained crate writes it.

use std::io::{Read, Write};

/// A compression format of archive objects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ObjectFormat {
    /// `UNCOMPRESSED`.
    Uncompressed,
    /// `GZIP`.
    Gzip,
    /// `ZIP`: one entry, [`ZIP_ENTRY`].
    Zip,
    /// `Snappy`: the framing format (stream identifier `sNaPpY`, CRC-32C per chunk).
    Snappy,
    /// `HADOOP_SNAPPY`: blocks of [`HADOOP_BLOCK`] bytes, each a big-endian
    /// uncompressed length, then one big-endian compressed length and raw Snappy.
    HadoopSnappy,
}

/// The name of the one entry of a ZIP object.
pub const ZIP_ENTRY: &str = "records";

/// Uncompressed bytes per Hadoop Snappy block (Hadoop's default buffer size).
pub const HADOOP_BLOCK: usize = 256 * 1024;

/// An object that cannot be encoded or decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{format:?} object: {reason}")]
pub struct FormatError {
    /// The format.
    pub format: ObjectFormat,
    /// What went wrong.
    pub reason: String,
}

fn error(format: ObjectFormat, reason: impl std::fmt::Display) -> FormatError {
    FormatError { format, reason: reason.to_string() }
}

impl ObjectFormat {
    /// The format of a body, judged from its first bytes (and, for Hadoop Snappy,
    /// which has no magic, from whether its block lengths add up exactly).
    pub fn sniff(body: &[u8]) -> ObjectFormat {
        if body.starts_with(&[0x1f, 0x8b]) {
            ObjectFormat::Gzip
        } else if body.starts_with(b"PK\x03\x04") || body.starts_with(b"PK\x05\x06") {
            ObjectFormat::Zip
        } else if body.starts_with(b"\xff\x06\x00\x00sNaPpY") {
            ObjectFormat::Snappy
        } else if hadoop_blocks_add_up(body) {
            ObjectFormat::HadoopSnappy
        } else {
            ObjectFormat::Uncompressed
        }
    }
}

/// `raw` compressed as `format` (GZIP at the default level).
pub fn encode(format: ObjectFormat, raw: &[u8]) -> Result<Vec<u8>, FormatError> {
    let e = |r: std::io::Error| error(format, r);
    match format {
        ObjectFormat::Uncompressed => Ok(raw.to_vec()),
        ObjectFormat::Gzip => {
            let mut w = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
            w.write_all(raw).map_err(e)?;
            w.finish().map_err(e)
        }
        ObjectFormat::Zip => {
            let mut w = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
            let options = zip::write::SimpleFileOptions::default()
                .compression_method(zip::CompressionMethod::Deflated)
                .large_file(raw.len() as u64 >= u64::from(u32::MAX));
            w.start_file(ZIP_ENTRY, options).map_err(|z| error(format, z))?;
            w.write_all(raw).map_err(e)?;
            Ok(w.finish().map_err(|z| error(format, z))?.into_inner())
        }
        ObjectFormat::Snappy => {
            let mut w = snap::write::FrameEncoder::new(Vec::new());
            w.write_all(raw).map_err(e)?;
            w.into_inner().map_err(|x| error(format, x.error()))
        }
        ObjectFormat::HadoopSnappy => {
            let mut out = Vec::with_capacity(raw.len() / 2 + 16);
            let mut encoder = snap::raw::Encoder::new();
            for block in raw.chunks(HADOOP_BLOCK) {
                let compressed = encoder.compress_vec(block).map_err(|x| error(format, x))?;
                out.extend_from_slice(&(block.len() as u32).to_be_bytes());
                out.extend_from_slice(&(compressed.len() as u32).to_be_bytes());
                out.extend_from_slice(&compressed);
            }
            Ok(out)
        }
    }
}

/// The content of a `format` object, refusing more than `limit` bytes of it.
pub fn decode(format: ObjectFormat, body: &[u8], limit: u64) -> Result<Vec<u8>, FormatError> {
    let mut out = Vec::new();
    let e = |r: std::io::Error| error(format, r);
    match format {
        ObjectFormat::Uncompressed => out.extend_from_slice(body),
        ObjectFormat::Gzip => {
            flate2::read::MultiGzDecoder::new(body).take(limit.saturating_add(1)).read_to_end(&mut out).map_err(e)?;
        }
        ObjectFormat::Zip => {
            let mut archive = zip::ZipArchive::new(std::io::Cursor::new(body)).map_err(|z| error(format, z))?;
            for i in 0..archive.len() {
                let entry = archive.by_index(i).map_err(|z| error(format, z))?;
                let room = (limit.saturating_add(1)).saturating_sub(out.len() as u64);
                entry.take(room).read_to_end(&mut out).map_err(e)?;
            }
        }
        ObjectFormat::Snappy => {
            snap::read::FrameDecoder::new(body).take(limit.saturating_add(1)).read_to_end(&mut out).map_err(e)?;
        }
        ObjectFormat::HadoopSnappy => {
            let mut decoder = snap::raw::Decoder::new();
            let mut rest = body;
            while !rest.is_empty() {
                let (want, chunks) = block_header(rest).ok_or_else(|| error(format, "truncated block"))?;
                rest = chunks;
                let mut got = 0usize;
                while got < want {
                    let (len, after) = block_header(rest).ok_or_else(|| error(format, "truncated chunk"))?;
                    let chunk = after.get(..len).ok_or_else(|| error(format, "chunk past the end"))?;
                    let plain = decoder.decompress_vec(chunk).map_err(|x| error(format, x))?;
                    got += plain.len();
                    if (out.len() + plain.len()) as u64 > limit {
                        return Err(error(format, format!("larger than {limit} bytes")));
                    }
                    out.extend_from_slice(&plain);
                    rest = &after[len..];
                }
                if got != want {
                    return Err(error(format, "block lengths disagree"));
                }
            }
        }
    }
    if out.len() as u64 > limit {
        return Err(error(format, format!("larger than {limit} bytes")));
    }
    Ok(out)
}

/// A big-endian length and what follows it.
fn block_header(b: &[u8]) -> Option<(usize, &[u8])> {
    let (len, rest) = b.split_first_chunk::<4>()?;
    Some((u32::from_be_bytes(*len) as usize, rest))
}

/// Whether `body` is a whole number of Hadoop Snappy blocks (lengths only; at least
/// one block; a plain text body fails at its first length).
fn hadoop_blocks_add_up(body: &[u8]) -> bool {
    let mut rest = body;
    if rest.is_empty() {
        return false;
    }
    while !rest.is_empty() {
        let Some((want, mut chunks)) = block_header(rest) else { return false };
        if want > HADOOP_BLOCK * 64 {
            return false;
        }
        let mut got = 0usize;
        while got < want {
            let Some((len, after)) = block_header(chunks) else { return false };
            let Some(chunk) = after.get(..len) else { return false };
            match snap::raw::decompress_len(chunk) {
                Ok(n) if n > 0 || want == 0 => got += n,
                _ => return false,
            }
            chunks = &after[len..];
        }
        if got != want {
            return false;
        }
        rest = chunks;
    }
    true
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    const ALL: [ObjectFormat; 5] = [
        ObjectFormat::Uncompressed,
        ObjectFormat::Gzip,
        ObjectFormat::Zip,
        ObjectFormat::Snappy,
        ObjectFormat::HadoopSnappy,
    ];

    #[test]
    fn hadoop_snappy_is_blocks_of_lengths_and_raw_snappy() {
        let raw = vec![b'x'; HADOOP_BLOCK + 10];
        let body = encode(ObjectFormat::HadoopSnappy, &raw).unwrap();
        assert_eq!(&body[..4], &(HADOOP_BLOCK as u32).to_be_bytes());
        let first = u32::from_be_bytes(body[4..8].try_into().unwrap()) as usize;
        let second_block = &body[8 + first..];
        assert_eq!(&second_block[..4], &10u32.to_be_bytes());
        assert_eq!(ObjectFormat::sniff(&body), ObjectFormat::HadoopSnappy);
        assert_eq!(decode(ObjectFormat::HadoopSnappy, &body, u64::MAX).unwrap(), raw);
    }

    #[test]
    fn text_is_not_mistaken_for_hadoop_snappy() {
        for text in [&b"{\"tenantId\":\"t\"}\n"[..], b"abcd", b"\0\0\0\x05\0\0\0\x01x", b""] {
            assert_eq!(ObjectFormat::sniff(text), ObjectFormat::Uncompressed, "{text:?}");
        }
    }

    #[test]
    fn limits_are_kept() {
        let raw = vec![b'y'; 10_000];
        for f in ALL {
            let body = encode(f, &raw).unwrap();
            assert!(decode(f, &body, 9_999).is_err(), "{f:?}");
            assert_eq!(decode(f, &body, 10_000).unwrap(), raw, "{f:?}");
        }
    }

    fn hex(text: &str) -> Vec<u8> {
        (0..text.len()).step_by(2).map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap()).collect()
    }

    /// Objects written by other tools (Python's `zipfile`, `python-snappy`'s framed and
    /// Hadoop stream compressors) are recognised and read.
    #[test]
    fn reads_what_other_writers_write() {
        let text = b"{\"n\":1}\n{\"n\":2}\n\n{\"n\":3}\n";
        for (format, body) in [
            (ObjectFormat::HadoopSnappy, "0000001900000019191c7b226e223a317d0a05082c327d0a0a7b226e223a337d0a"),
            (
                ObjectFormat::Snappy,
                "ff060000734e61507059011d0000ea08a5527b226e223a317d0a7b226e223a327d0a0a7b226e223a337d0a",
            ),
            (
                ObjectFormat::Zip,
                "504b03041400000008000870835d02c614441400000019000000070000007265636f726473ab56ca53b232ace5aa06d146b55c\
                 1086712d1700504b010214031400000008000870835d02c6144414000000190000000700000000000000000000008001000000\
                 007265636f726473504b0506000000000100010035000000390000000000",
            ),
        ] {
            let body = hex(body);
            assert_eq!(ObjectFormat::sniff(&body), format);
            assert_eq!(decode(format, &body, 1 << 20).unwrap(), text, "{format:?}");
        }
    }

    proptest! {
        /// Every format round-trips and is recognised from its bytes (a non-empty
        /// uncompressed body that happens to parse as Hadoop Snappy aside).
        #[test]
        fn round_trip_and_sniff(raw in proptest::collection::vec(any::<u8>(), 0..3_000), lines in 1usize..50) {
            let text: Vec<u8> = (0..lines).flat_map(|i| format!("{{\"n\":{i}}}\n").into_bytes()).collect();
            for input in [&raw, &text] {
                for f in ALL {
                    let body = encode(f, input).unwrap();
                    prop_assert_eq!(&decode(f, &body, u64::MAX).unwrap(), input);
                    if f != ObjectFormat::Uncompressed && !input.is_empty() {
                        prop_assert_eq!(ObjectFormat::sniff(&body), f);
                    }
                }
            }
            prop_assert_eq!(ObjectFormat::sniff(&text), ObjectFormat::Uncompressed);
        }

        /// Decoding any bytes in any format is an answer or an error, never a panic.
        #[test]
        fn garbage_is_an_error_not_a_panic(body in proptest::collection::vec(any::<u8>(), 0..512)) {
            for f in ALL {
                let _ = decode(f, &body, 1 << 20);
            }
            let _ = ObjectFormat::sniff(&body);
        }
    }
}
