//! The Thrift compact protocol, write side only, as much of it as a Parquet footer and
//! page header need: structs of integer, boolean, binary, struct and list fields.
//!
//! Why by hand: arrow-rs's Thrift code is private to the `parquet` crate, and the small
//! file writer ([`super::small_file`]) needs to write a footer of its own. The encoding
//! is the one in the Thrift specification (`doc/specs/thrift-compact-protocol.md`):
//! a field header holds the delta from the previous field id (1–15) and the type in one
//! byte, integers are zigzag varints, binaries a varint length and the bytes, a struct
//! ends with a 0 byte. Tested against arrow-rs's reader, which decodes every file the
//! small file writer writes (see `small_file`'s tests).

/// Compact protocol type ids.
const BOOL_TRUE: u8 = 1;
const BOOL_FALSE: u8 = 2;
const I32: u8 = 5;
const I64: u8 = 6;
const BINARY: u8 = 8;
const LIST: u8 = 9;
const STRUCT: u8 = 12;

/// Element types of a list.
#[derive(Debug, Clone, Copy)]
pub enum Elements {
    /// `i32` (enums included).
    I32,
    /// `binary` (strings included).
    Binary,
    /// `struct`.
    Struct,
}

/// A struct being written into `out`; fields must come in increasing id order.
pub struct Struct<'a> {
    out: &'a mut Vec<u8>,
    last: i16,
}

impl<'a> Struct<'a> {
    /// Starts a struct at the end of `out` (a message, a list element, or a field's
    /// value after [`Struct::struct_field`]).
    pub fn new(out: &'a mut Vec<u8>) -> Self {
        Self { out, last: 0 }
    }

    fn header(&mut self, id: i16, ty: u8) {
        let delta = id - self.last;
        if (1..=15).contains(&delta) {
            self.out.push(((delta as u8) << 4) | ty);
        } else {
            self.out.push(ty);
            varint(self.out, zigzag(i64::from(id)));
        }
        self.last = id;
    }

    /// An `i32` field (or an enum).
    pub fn i32(&mut self, id: i16, v: i32) -> &mut Self {
        self.header(id, I32);
        varint(self.out, zigzag(i64::from(v)));
        self
    }

    /// An `i64` field.
    pub fn i64(&mut self, id: i16, v: i64) -> &mut Self {
        self.header(id, I64);
        varint(self.out, zigzag(v));
        self
    }

    /// An `i16` field.
    pub fn i16(&mut self, id: i16, v: i16) -> &mut Self {
        self.header(id, 4);
        varint(self.out, zigzag(i64::from(v)));
        self
    }

    /// An `i8` field, which the compact protocol writes as one byte.
    pub fn i8(&mut self, id: i16, v: i8) -> &mut Self {
        self.header(id, 3);
        self.out.push(v as u8);
        self
    }

    /// A `bool` field.
    pub fn bool(&mut self, id: i16, v: bool) -> &mut Self {
        self.header(id, if v { BOOL_TRUE } else { BOOL_FALSE });
        self
    }

    /// A `binary` or `string` field.
    pub fn binary(&mut self, id: i16, v: &[u8]) -> &mut Self {
        self.header(id, BINARY);
        binary(self.out, v);
        self
    }

    /// A struct field: `fill` writes its fields.
    pub fn struct_field(&mut self, id: i16, fill: impl FnOnce(&mut Struct<'_>)) -> &mut Self {
        self.header(id, STRUCT);
        let mut inner = Struct::new(self.out);
        fill(&mut inner);
        inner.end();
        self
    }

    /// A list field of `len` elements; `fill` writes them (with [`put_i32`],
    /// [`binary`], or a [`Struct`] each ended with [`Struct::end`]).
    pub fn list(&mut self, id: i16, elements: Elements, len: usize, fill: impl FnOnce(&mut Vec<u8>)) -> &mut Self {
        self.header(id, LIST);
        let ty = match elements {
            Elements::I32 => I32,
            Elements::Binary => BINARY,
            Elements::Struct => STRUCT,
        };
        if len < 15 {
            self.out.push(((len as u8) << 4) | ty);
        } else {
            self.out.push(0xF0 | ty);
            varint(self.out, len as u64);
        }
        fill(self.out);
        self
    }

    /// Ends the struct (its stop byte).
    pub fn end(self) {
        self.out.push(0);
    }
}

/// An `i32` list element.
pub fn put_i32(out: &mut Vec<u8>, v: i32) {
    varint(out, zigzag(i64::from(v)));
}

/// A `binary` value: its length and bytes.
pub fn binary(out: &mut Vec<u8>, v: &[u8]) {
    varint(out, v.len() as u64);
    out.extend_from_slice(v);
}

/// An unsigned LEB128 varint (also the RLE hybrid's run headers).
pub fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bytes from the Thrift specification's examples: field deltas, the long form of
    /// a field header, zigzag varints, lists short and long.
    #[test]
    fn writes_the_specifications_bytes() {
        let mut out = Vec::new();
        let mut s = Struct::new(&mut out);
        s.i32(1, -1).i64(2, 150).bool(3, true).binary(20, b"ab");
        s.list(21, Elements::I32, 2, |o| {
            put_i32(o, 0);
            put_i32(o, 3);
        });
        s.end();
        assert_eq!(
            out,
            [0x15, 0x01, 0x16, 0xAC, 0x02, 0x11, 0x08, 0x28, 0x02, b'a', b'b', 0x19, 0x25, 0x00, 0x06, 0x00]
        );
        let mut out = Vec::new();
        let mut s = Struct::new(&mut out);
        s.list(1, Elements::Binary, 15, |o| (0..15).for_each(|_| binary(o, b"")));
        s.end();
        assert_eq!(&out[..3], [0x19, 0xF8, 0x0F]);
    }
}
