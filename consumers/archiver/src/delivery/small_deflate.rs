//! A deflate encoder for small inputs: greedy LZ77 over a 1,024-entry hash table and
//! the fixed Huffman codes (RFC 1951 §3.2.6), the same strategy as zlib-ng's "quick"
//! level 1 that zlib-rs runs for these inputs.
//!
//! Why it is hand-written: zlib-rs keeps a 65,536-entry hash table and clears it for
//! every stream (128 KiB of memset). With 100,000 partitions each object is a stream of
//! a few hundred bytes, and that clearing alone was 5.5% of the archiver's time in
//! `cargo bench -p weir-archiver --bench cardinality` (about 1.5 µs an object, more than
//! compressing the bytes). This table is 2 KiB. Inputs are limited to
//! [`MAX_INPUT`] bytes, so positions fit in 16 bits and every distance in the window.
//! Property tests inflate its output with zlib and compare its size with zlib's level 1.

/// Longest input (positions are 16-bit; the archiver uses it below 4 KiB).
pub const MAX_INPUT: usize = 32 * 1024;

const HASH_BITS: u32 = 10;
const MIN_MATCH: usize = 3;
const MAX_MATCH: usize = 258;

/// The encoder's reusable state.
pub struct SmallDeflate {
    /// Position + 1 of the last occurrence of each 3-byte hash (0: none).
    head: [u16; 1 << HASH_BITS],
}

impl std::fmt::Debug for SmallDeflate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SmallDeflate")
    }
}

impl Default for SmallDeflate {
    fn default() -> Self {
        Self { head: [0; 1 << HASH_BITS] }
    }
}

/// Bits written least-significant first, as deflate packs them.
struct Bits<'a> {
    out: &'a mut Vec<u8>,
    acc: u64,
    n: u32,
}

impl Bits<'_> {
    #[inline(always)]
    fn put(&mut self, value: u32, bits: u32) {
        self.acc |= u64::from(value) << self.n;
        self.n += bits;
        if self.n >= 32 {
            self.out.extend_from_slice(&(self.acc as u32).to_le_bytes());
            self.acc >>= 32;
            self.n -= 32;
        }
    }

    /// Writes what is left, padded with zero bits to a byte boundary.
    fn flush(&mut self) {
        while self.n > 0 {
            self.out.push(self.acc as u8);
            self.acc >>= 8;
            self.n = self.n.saturating_sub(8);
        }
        self.acc = 0;
    }
}

/// `code` of `len` bits reversed (Huffman codes are packed most-significant bit first).
const fn reverse(code: u32, len: u32) -> u32 {
    let mut out = 0;
    let mut i = 0;
    while i < len {
        out |= ((code >> i) & 1) << (len - 1 - i);
        i += 1;
    }
    out
}

/// The fixed literal/length code of each symbol 0–287: (reversed code, length).
const LITERAL_CODES: [(u16, u8); 288] = {
    let mut t = [(0u16, 0u8); 288];
    let mut s = 0;
    while s < 288 {
        let (code, len) = match s {
            0..=143 => (0x30 + s, 8),
            144..=255 => (0x190 + s - 144, 9),
            256..=279 => (s - 256, 7),
            _ => (0xc0 + s - 280, 8),
        };
        t[s as usize] = (reverse(code, len) as u16, len as u8);
        s += 1;
    }
    t
};

/// Length symbols: (symbol, base length, extra bits), for lengths 3–258.
const LENGTHS: [(u16, u16, u8); 29] = [
    (257, 3, 0),
    (258, 4, 0),
    (259, 5, 0),
    (260, 6, 0),
    (261, 7, 0),
    (262, 8, 0),
    (263, 9, 0),
    (264, 10, 0),
    (265, 11, 1),
    (266, 13, 1),
    (267, 15, 1),
    (268, 17, 1),
    (269, 19, 2),
    (270, 23, 2),
    (271, 27, 2),
    (272, 31, 2),
    (273, 35, 3),
    (274, 43, 3),
    (275, 51, 3),
    (276, 59, 3),
    (277, 67, 4),
    (278, 83, 4),
    (279, 99, 4),
    (280, 115, 4),
    (281, 131, 5),
    (282, 163, 5),
    (283, 195, 5),
    (284, 227, 5),
    (285, 258, 0),
];

/// Distance codes: (base distance, extra bits), code = index.
const DISTANCES: [(u16, u8); 30] = [
    (1, 0),
    (2, 0),
    (3, 0),
    (4, 0),
    (5, 1),
    (7, 1),
    (9, 2),
    (13, 2),
    (17, 3),
    (25, 3),
    (33, 4),
    (49, 4),
    (65, 5),
    (97, 5),
    (129, 6),
    (193, 6),
    (257, 7),
    (385, 7),
    (513, 8),
    (769, 8),
    (1025, 9),
    (1537, 9),
    (2049, 10),
    (3073, 10),
    (4097, 11),
    (6145, 11),
    (8193, 12),
    (12289, 12),
    (16385, 13),
    (24577, 13),
];

#[inline(always)]
fn hash(b: &[u8], i: usize) -> usize {
    let v = u32::from(b[i]) | u32::from(b[i + 1]) << 8 | u32::from(b[i + 2]) << 16;
    (v.wrapping_mul(0x9e37_79b1) >> (32 - HASH_BITS)) as usize
}

impl SmallDeflate {
    /// Appends `input` to `out` as one fixed-code deflate block, final when `last`;
    /// otherwise followed by an empty stored block so that the run ends on a byte
    /// boundary and runs concatenate into one stream (what zlib's `Z_SYNC_FLUSH` does).
    /// `None` (nothing written) when `input` is longer than [`MAX_INPUT`].
    pub fn run(&mut self, input: &[u8], out: &mut Vec<u8>, last: bool) -> Option<()> {
        if input.len() > MAX_INPUT {
            return None;
        }
        self.head.fill(0);
        out.reserve(input.len() + input.len() / 8 + 16);
        let mut bits = Bits { out, acc: 0, n: 0 };
        // Block header: BFINAL, then BTYPE 01 (fixed codes).
        bits.put(u32::from(last), 1);
        bits.put(1, 2);
        let mut i = 0;
        // Positions with three bytes ahead can start a match.
        let matchable = input.len().saturating_sub(MIN_MATCH - 1);
        while i < matchable {
            let h = hash(input, i);
            let candidate = self.head[h] as usize;
            self.head[h] = (i + 1) as u16;
            let len = match candidate {
                0 => 0,
                c => match_length(input, c - 1, i),
            };
            if len >= MIN_MATCH {
                put_match(&mut bits, len, i - (candidate - 1));
                i += len;
            } else {
                let (code, len) = LITERAL_CODES[input[i] as usize];
                bits.put(u32::from(code), u32::from(len));
                i += 1;
            }
        }
        for &b in &input[i.min(input.len())..] {
            let (code, len) = LITERAL_CODES[b as usize];
            bits.put(u32::from(code), u32::from(len));
        }
        let (code, len) = LITERAL_CODES[256];
        bits.put(u32::from(code), u32::from(len));
        if !last {
            // An empty stored block: header, alignment, LEN 0, NLEN 0xffff.
            bits.put(0, 3);
            bits.flush();
            bits.out.extend_from_slice(&[0, 0, 0xff, 0xff]);
        } else {
            bits.flush();
        }
        Some(())
    }
}

/// How many bytes from `at` equal those from `i` (`at < i`), at most [`MAX_MATCH`] and
/// not past the end; eight at a time.
#[inline(always)]
fn match_length(b: &[u8], at: usize, i: usize) -> usize {
    let most = (b.len() - i).min(MAX_MATCH);
    let mut n = 0;
    while n + 8 <= most {
        let (x, y) = (&b[at + n..at + n + 8], &b[i + n..i + n + 8]);
        let diff =
            u64::from_le_bytes(x.try_into().unwrap_or_default()) ^ u64::from_le_bytes(y.try_into().unwrap_or_default());
        if diff != 0 {
            return n + (diff.trailing_zeros() / 8) as usize;
        }
        n += 8;
    }
    while n < most && b[at + n] == b[i + n] {
        n += 1;
    }
    n
}

fn put_match(bits: &mut Bits<'_>, len: usize, distance: usize) {
    let l = LENGTHS.partition_point(|&(_, base, _)| usize::from(base) <= len) - 1;
    let (symbol, base, extra) = LENGTHS[l];
    let (code, code_len) = LITERAL_CODES[symbol as usize];
    bits.put(u32::from(code), u32::from(code_len));
    if extra > 0 {
        bits.put((len - usize::from(base)) as u32, u32::from(extra));
    }
    let d = DISTANCES.partition_point(|&(base, _)| usize::from(base) <= distance) - 1;
    let (base, extra) = DISTANCES[d];
    bits.put(reverse(d as u32, 5), 5);
    if extra > 0 {
        bits.put((distance - usize::from(base)) as u32, u32::from(extra));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flate2::{Compress, Compression, Decompress, FlushCompress, FlushDecompress};
    use proptest::prelude::*;

    fn inflate(raw: &[u8]) -> Vec<u8> {
        let mut d = Decompress::new(false);
        // Deflate expands at most about 1,032 times.
        let mut out = Vec::with_capacity(raw.len() * 1100 + 1024);
        d.decompress_vec(raw, &mut out, FlushDecompress::Finish).unwrap();
        assert_eq!(d.total_in() as usize, raw.len(), "the whole stream is read");
        out
    }

    fn zlib_level1(input: &[u8]) -> usize {
        let mut c = Compress::new(Compression::new(1), false);
        let mut out = Vec::with_capacity(input.len() * 2 + 64);
        c.compress_vec(input, &mut out, FlushCompress::Finish).unwrap();
        out.len()
    }

    /// Text like the archive's: JSON lines with repeats, and some noise.
    fn lines() -> impl Strategy<Value = Vec<u8>> {
        let line = prop_oneof![
            "[a-z_]{1,12}".prop_map(|t| format!(
                r#"{{"schema_version":"1","tenant_id":"t-{t}","tool_name":"search","success":true}}"#
            )),
            proptest::collection::vec(any::<u8>(), 0..200).prop_map(|b| String::from_utf8_lossy(&b).into_owned()),
            "[a-c]{0,300}",
        ];
        proptest::collection::vec(line, 0..30).prop_map(|l| l.join("\n").into_bytes())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(500))]
        /// Runs inflate to their input, alone and concatenated into one stream, and are
        /// not much larger than zlib's level 1.
        #[test]
        fn inflates_to_its_input(parts in proptest::collection::vec(lines(), 1..4), random in proptest::collection::vec(any::<u8>(), 0..5000)) {
            let mut e = SmallDeflate::default();
            let mut stream = Vec::new();
            let mut all = Vec::new();
            for (i, p) in parts.iter().enumerate() {
                let p = &p[..p.len().min(MAX_INPUT)];
                e.run(p, &mut stream, i + 1 == parts.len()).unwrap();
                all.extend_from_slice(p);
            }
            prop_assert_eq!(inflate(&stream), all);
            for input in [&parts[0][..parts[0].len().min(MAX_INPUT)], &random[..]] {
                let mut one = Vec::new();
                e.run(input, &mut one, true).unwrap();
                prop_assert_eq!(inflate(&one), input);
                prop_assert!(one.len() <= zlib_level1(input) * 5 / 4 + 16, "{} bytes against zlib's {}", one.len(), zlib_level1(input));
            }
        }
    }

    #[test]
    fn edges() {
        let mut e = SmallDeflate::default();
        for input in [&b""[..], b"a", b"ab", b"abc", b"aaaa", &[0u8; 300][..], &[7u8; MAX_INPUT][..]] {
            let mut out = Vec::new();
            e.run(input, &mut out, true).unwrap();
            assert_eq!(inflate(&out), input);
        }
        let mut out = Vec::new();
        assert!(e.run(&[0; MAX_INPUT + 1], &mut out, true).is_none());
        assert!(out.is_empty());
        // Every length and many distances: a repeated pattern of each period.
        for period in [1usize, 2, 3, 17, 255, 256, 1000, 4095] {
            let input: Vec<u8> = (0..9000).map(|i| (i % period) as u8 ^ (i / 7000) as u8).collect();
            let mut out = Vec::new();
            e.run(&input, &mut out, true).unwrap();
            assert_eq!(inflate(&out), input, "period {period}");
        }
    }
}
