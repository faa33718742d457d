//! Converted rows as bytes: what a Parquet partition's buffer holds, so that a record
//! is read as JSON once, when it is routed, and not again when its object is sealed.
//!
//! A row is its cells in column order; a cell is a tag byte and its value, nested
//! cells inline. Integers are little-endian, lengths and counts `u32`. The bytes live
//! only in memory and in the spill directory of the process that wrote them: the
//! format has no version and is not an interface.
//!
//! Hand-written (not bincode or postcard): it is the exact inverse of [`Cell`] with
//! nothing to configure, about 100 lines, and it keeps the archiver's dependencies as
//! they are.

use super::deserialize::Cell;

const NULL: u8 = 0;
const STR: u8 = 1;
const INT: u8 = 2;
const FLOAT: u8 = 3;
const FALSE: u8 = 4;
const TRUE: u8 = 5;
const MICROS: u8 = 6;
const DAYS: u8 = 7;
const DECIMAL: u8 = 8;
const BYTES: u8 = 9;
const LIST: u8 = 10;
const STRUCT: u8 = 11;
const MAP: u8 = 12;

/// Bytes that are not rows this module wrote (a bug, or a damaged spill file).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("converted rows are damaged at byte {0}")]
pub struct Damaged(pub usize);

/// Appends one row.
pub fn put_row(cells: &[Cell], out: &mut Vec<u8>) {
    for c in cells {
        put(c, out);
    }
}

/// Appends one row of cells whose strings may be borrowed (what
/// [`put_row`] appends for the same cells owned).
pub fn put_row_refs(cells: &[CellRef<'_>], out: &mut Vec<u8>) {
    for c in cells {
        match c {
            CellRef::Str(s) => put_str(s, out),
            CellRef::Other(c) => put(c, out),
        }
    }
}

fn put_str(s: &str, out: &mut Vec<u8>) {
    out.push(STR);
    put_len(s.len(), out);
    out.extend_from_slice(s.as_bytes());
}

fn put_len(n: usize, out: &mut Vec<u8>) {
    // Lengths come from values that fit a JSON record, far below 4 GiB.
    out.extend_from_slice(&u32::try_from(n).unwrap_or(u32::MAX).to_le_bytes());
}

fn put(cell: &Cell, out: &mut Vec<u8>) {
    match cell {
        Cell::Null => out.push(NULL),
        Cell::Str(s) => put_str(s, out),
        Cell::Int(v) => {
            out.push(INT);
            out.extend_from_slice(&v.to_le_bytes());
        }
        Cell::Float(v) => {
            out.push(FLOAT);
            out.extend_from_slice(&v.to_le_bytes());
        }
        Cell::Bool(b) => out.push(if *b { TRUE } else { FALSE }),
        Cell::Micros(v) => {
            out.push(MICROS);
            out.extend_from_slice(&v.to_le_bytes());
        }
        Cell::Days(v) => {
            out.push(DAYS);
            out.extend_from_slice(&v.to_le_bytes());
        }
        Cell::Decimal(v) => {
            out.push(DECIMAL);
            out.extend_from_slice(&v.to_le_bytes());
        }
        Cell::Bytes(b) => {
            out.push(BYTES);
            put_len(b.len(), out);
            out.extend_from_slice(b);
        }
        Cell::List(items) | Cell::Struct(items) => {
            out.push(if matches!(cell, Cell::List(_)) { LIST } else { STRUCT });
            put_len(items.len(), out);
            items.iter().for_each(|c| put(c, out));
        }
        Cell::Map(entries) => {
            out.push(MAP);
            put_len(entries.len(), out);
            for (k, v) in entries {
                put_len(k.len(), out);
                out.extend_from_slice(k.as_bytes());
                put(v, out);
            }
        }
    }
}

/// A cell read by [`Rows::next_row_borrowed`]: a string borrowed from the bytes, or
/// any other cell.
#[derive(Debug, Clone, PartialEq)]
pub enum CellRef<'a> {
    /// A [`Cell::Str`], not copied.
    Str(&'a str),
    /// Any other cell.
    Other(Cell),
}

impl CellRef<'_> {
    /// The cell, its string copied.
    pub fn into_owned(self) -> Cell {
        match self {
            CellRef::Str(s) => Cell::Str(s.to_owned()),
            CellRef::Other(c) => c,
        }
    }
}

/// Reads rows of `columns` cells from bytes [`put_row`] wrote.
pub struct Rows<'a> {
    bytes: &'a [u8],
    at: usize,
    columns: usize,
}

impl<'a> Rows<'a> {
    /// The rows in `bytes`, each of `columns` cells.
    pub fn new(bytes: &'a [u8], columns: usize) -> Self {
        Self { bytes, at: 0, columns }
    }

    /// Bytes read so far (the end of the last row read).
    pub fn offset(&self) -> usize {
        self.at
    }

    /// The next row, `None` at the end.
    pub fn next_row(&mut self) -> Option<Result<Vec<Cell>, Damaged>> {
        if self.at >= self.bytes.len() {
            return None;
        }
        Some((0..self.columns).map(|_| self.cell()).collect())
    }

    /// The next row's cells appended to `out`, a string cell borrowed from the bytes
    /// (the rest as [`Rows::next_row`] reads them); `None` at the end.
    pub fn next_row_borrowed(&mut self, out: &mut Vec<CellRef<'a>>) -> Option<Result<(), Damaged>> {
        if self.at >= self.bytes.len() {
            return None;
        }
        let mut row = || {
            for _ in 0..self.columns {
                out.push(if self.bytes.get(self.at) == Some(&STR) {
                    self.at += 1;
                    CellRef::Str(self.str()?)
                } else {
                    CellRef::Other(self.cell()?)
                });
            }
            Ok(())
        };
        Some(row())
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], Damaged> {
        let end = self.at.checked_add(n).filter(|e| *e <= self.bytes.len()).ok_or(Damaged(self.at))?;
        let s = &self.bytes[self.at..end];
        self.at = end;
        Ok(s)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], Damaged> {
        let at = self.at;
        self.take(N)?.try_into().map_err(|_| Damaged(at))
    }

    fn len(&mut self) -> Result<usize, Damaged> {
        Ok(u32::from_le_bytes(self.array()?) as usize)
    }

    /// A length and that many bytes of UTF-8, borrowed.
    fn str(&mut self) -> Result<&'a str, Damaged> {
        let (at, n) = (self.at, self.len()?);
        std::str::from_utf8(self.take(n)?).map_err(|_| Damaged(at))
    }

    fn text(&mut self) -> Result<String, Damaged> {
        self.str().map(str::to_owned)
    }

    fn cell(&mut self) -> Result<Cell, Damaged> {
        let at = self.at;
        let [tag] = self.array()?;
        Ok(match tag {
            NULL => Cell::Null,
            STR => Cell::Str(self.text()?),
            INT => Cell::Int(i64::from_le_bytes(self.array()?)),
            FLOAT => Cell::Float(f64::from_le_bytes(self.array()?)),
            FALSE => Cell::Bool(false),
            TRUE => Cell::Bool(true),
            MICROS => Cell::Micros(i64::from_le_bytes(self.array()?)),
            DAYS => Cell::Days(i32::from_le_bytes(self.array()?)),
            DECIMAL => Cell::Decimal(i128::from_le_bytes(self.array()?)),
            BYTES => {
                let n = self.len()?;
                Cell::Bytes(self.take(n)?.to_vec())
            }
            LIST | STRUCT => {
                let n = self.len()?;
                // Each cell is at least a byte: a count past the rest is damage, not a
                // reason to allocate.
                if n > self.bytes.len() - self.at {
                    return Err(Damaged(at));
                }
                let items = (0..n).map(|_| self.cell()).collect::<Result<Vec<_>, _>>()?;
                if tag == LIST { Cell::List(items) } else { Cell::Struct(items) }
            }
            MAP => {
                let n = self.len()?;
                if n > self.bytes.len() - self.at {
                    return Err(Damaged(at));
                }
                let mut entries = Vec::with_capacity(n);
                for _ in 0..n {
                    let k = self.text()?;
                    entries.push((k, self.cell()?));
                }
                Cell::Map(entries)
            }
            _ => return Err(Damaged(at)),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_cell_comes_back() {
        let row = vec![
            Cell::Null,
            Cell::Str("tenant é".into()),
            Cell::Int(-7),
            Cell::Float(1.5e300),
            Cell::Bool(true),
            Cell::Bool(false),
            Cell::Micros(1_518_033_528_123_000),
            Cell::Days(-3),
            Cell::Decimal(-170_141_183_460_469_231_731_687_303_715_884_105_727),
            Cell::Bytes(vec![0, 255]),
            Cell::List(vec![Cell::Int(1), Cell::Null]),
            Cell::Struct(vec![Cell::Str(String::new()), Cell::List(Vec::new())]),
            Cell::Map(vec![("k".into(), Cell::Map(vec![("x".into(), Cell::Float(-0.0))]))]),
        ];
        let mut bytes = Vec::new();
        put_row(&row, &mut bytes);
        put_row(&row, &mut bytes);
        let mut rows = Rows::new(&bytes, row.len());
        assert_eq!(rows.next_row(), Some(Ok(row.clone())));
        assert_eq!(rows.next_row(), Some(Ok(row.clone())));
        assert_eq!(rows.offset(), bytes.len());
        assert_eq!(rows.next_row(), None);
        let mut rows = Rows::new(&bytes, row.len());
        let mut cells = Vec::new();
        assert_eq!(rows.next_row_borrowed(&mut cells), Some(Ok(())));
        let owned: Vec<Cell> = cells.into_iter().map(CellRef::into_owned).collect();
        assert_eq!(owned, row);
    }

    #[test]
    fn damage_is_an_error_not_a_panic() {
        let mut bytes = Vec::new();
        put_row(&[Cell::Str("abc".into()), Cell::List(vec![Cell::Int(1)])], &mut bytes);
        for cut in 0..bytes.len() {
            let mut rows = Rows::new(&bytes[..cut], 2);
            assert!(matches!(rows.next_row(), None | Some(Err(_))), "cut at {cut}");
        }
        assert!(Rows::new(&[LIST, 255, 255, 255, 255], 1).next_row().unwrap().is_err());
        assert!(Rows::new(&[99], 1).next_row().unwrap().is_err());
        for cut in 0..bytes.len() {
            let mut rows = Rows::new(&bytes[..cut], 2);
            assert!(matches!(rows.next_row_borrowed(&mut Vec::new()), None | Some(Err(_))), "cut at {cut}");
        }
        assert!(Rows::new(&[STR, 1, 0, 0, 0, 0xff], 1).next_row_borrowed(&mut Vec::new()).unwrap().is_err());
    }
}
