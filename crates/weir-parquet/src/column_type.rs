//! Column types by their Hive / Glue names (`string`, `bigint`, `decimal(10,2)`,
//! `array<struct<a:int>>`, ...), as a Glue table or weir's inline `columns` list gives
//! them, and the Arrow type each is written as.

use std::sync::Arc;

use arrow_schema::{DataType, Field, Fields, TimeUnit};

/// A column's type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ColumnType {
    /// `string`, `varchar(n)`, `char(n)`.
    String,
    /// `tinyint` (8 bits).
    TinyInt,
    /// `smallint` (16 bits).
    SmallInt,
    /// `int`, `integer` (32 bits).
    Int,
    /// `bigint` (64 bits).
    BigInt,
    /// `float` (32 bits).
    Float,
    /// `double`.
    Double,
    /// `boolean`.
    Boolean,
    /// `timestamp` (microseconds, no time zone, as Hive's).
    Timestamp,
    /// `date`.
    Date,
    /// `decimal(p,s)` (`decimal` alone is Hive's `decimal(10,0)`).
    Decimal {
        /// Digits in all, 1–38.
        precision: u8,
        /// Digits after the point, 0–precision.
        scale: i8,
    },
    /// `binary` (base64 text in JSON).
    Binary,
    /// `array<T>`.
    Array(Box<ColumnType>),
    /// `struct<name:T,...>`.
    Struct(Vec<(String, ColumnType)>),
    /// `map<string,T>` (JSON object keys are strings).
    Map(Box<ColumnType>),
}

/// Why a type name does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("type {text:?}: {reason} (at character {at})")]
pub struct TypeError {
    /// The whole type text.
    pub text: String,
    /// What is wrong.
    pub reason: String,
    /// Character position.
    pub at: usize,
}

impl ColumnType {
    /// Parses a Hive type name (case-insensitive, spaces allowed between parts).
    pub fn parse(text: &str) -> Result<ColumnType, TypeError> {
        let mut p = Parser { text, at: 0, depth: 0 };
        let t = p.ty()?;
        p.space();
        if p.at != text.len() {
            return Err(p.error("unexpected text after the type"));
        }
        Ok(t)
    }

    /// The Arrow type its values are written as.
    pub fn arrow(&self) -> DataType {
        match self {
            ColumnType::String => DataType::Utf8,
            ColumnType::TinyInt => DataType::Int8,
            ColumnType::SmallInt => DataType::Int16,
            ColumnType::Int => DataType::Int32,
            ColumnType::BigInt => DataType::Int64,
            ColumnType::Float => DataType::Float32,
            ColumnType::Double => DataType::Float64,
            ColumnType::Boolean => DataType::Boolean,
            ColumnType::Timestamp => DataType::Timestamp(TimeUnit::Microsecond, None),
            ColumnType::Date => DataType::Date32,
            ColumnType::Decimal { precision, scale } => DataType::Decimal128(*precision, *scale),
            ColumnType::Binary => DataType::Binary,
            ColumnType::Array(item) => DataType::List(Arc::new(Field::new("element", item.arrow(), true))),
            ColumnType::Struct(fields) => DataType::Struct(struct_fields(fields)),
            ColumnType::Map(value) => DataType::Map(map_entries(value), false),
        }
    }
}

/// The Arrow fields of a struct's members (every one nullable: JSON may omit it).
pub fn struct_fields(fields: &[(String, ColumnType)]) -> Fields {
    fields.iter().map(|(n, t)| Field::new(n, t.arrow(), true)).collect()
}

/// The entries field of a `map<string,T>`.
pub fn map_entries(value: &ColumnType) -> Arc<Field> {
    let entries =
        Fields::from(vec![Field::new("key", DataType::Utf8, false), Field::new("value", value.arrow(), true)]);
    Arc::new(Field::new("key_value", DataType::Struct(entries), false))
}

/// Deepest nesting of `array`, `struct` and `map` accepted.
const MAX_DEPTH: usize = 32;

struct Parser<'a> {
    text: &'a str,
    at: usize,
    depth: usize,
}

impl Parser<'_> {
    fn error(&self, reason: &str) -> TypeError {
        TypeError { text: self.text.to_owned(), reason: reason.to_owned(), at: self.at }
    }

    fn space(&mut self) {
        while self.text[self.at..].starts_with(' ') {
            self.at += 1;
        }
    }

    fn eat(&mut self, c: char) -> bool {
        self.space();
        if self.text[self.at..].starts_with(c) {
            self.at += c.len_utf8();
            true
        } else {
            false
        }
    }

    fn expect(&mut self, c: char) -> Result<(), TypeError> {
        if self.eat(c) { Ok(()) } else { Err(self.error(&format!("expected '{c}'"))) }
    }

    /// A name: letters, digits and underscores.
    fn word(&mut self) -> &str {
        self.space();
        let start = self.at;
        let rest = &self.text[start..];
        let len = rest.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(rest.len());
        self.at += len;
        &self.text[start..start + len]
    }

    fn number(&mut self) -> Result<u32, TypeError> {
        let w = self.word().to_owned();
        w.parse().map_err(|_| self.error("expected a number"))
    }

    fn ty(&mut self) -> Result<ColumnType, TypeError> {
        let start = self.at;
        let name = self.word().to_ascii_lowercase();
        let t = match name.as_str() {
            "string" => ColumnType::String,
            "varchar" | "char" => {
                self.expect('(')?;
                self.number()?;
                self.expect(')')?;
                ColumnType::String
            }
            "tinyint" => ColumnType::TinyInt,
            "smallint" => ColumnType::SmallInt,
            "int" | "integer" => ColumnType::Int,
            "bigint" => ColumnType::BigInt,
            "float" => ColumnType::Float,
            "double" => ColumnType::Double,
            "boolean" => ColumnType::Boolean,
            "timestamp" => ColumnType::Timestamp,
            "date" => ColumnType::Date,
            "binary" => ColumnType::Binary,
            "decimal" => {
                let (mut precision, mut scale) = (10, 0);
                if self.eat('(') {
                    precision = self.number()?;
                    if self.eat(',') {
                        scale = self.number()?;
                    }
                    self.expect(')')?;
                }
                if !(1..=38).contains(&precision) || scale > precision {
                    return Err(self.error("decimal(p,s) needs 1 <= p <= 38 and 0 <= s <= p"));
                }
                ColumnType::Decimal { precision: precision as u8, scale: scale as i8 }
            }
            "array" | "struct" | "map" => {
                self.depth += 1;
                if self.depth > MAX_DEPTH {
                    return Err(self.error(&format!("nested deeper than {MAX_DEPTH} levels")));
                }
                self.expect('<')?;
                let t = match name.as_str() {
                    "array" => ColumnType::Array(Box::new(self.ty()?)),
                    "map" => {
                        let key_at = self.at;
                        let key = self.ty()?;
                        if key != ColumnType::String {
                            self.at = key_at;
                            return Err(self.error("map keys must be string (JSON object keys are strings)"));
                        }
                        self.expect(',')?;
                        ColumnType::Map(Box::new(self.ty()?))
                    }
                    _ => {
                        let mut fields: Vec<(String, ColumnType)> = Vec::new();
                        loop {
                            let field = self.word().to_owned();
                            if field.is_empty() {
                                return Err(self.error("expected a field name"));
                            }
                            if fields.iter().any(|(f, _)| f.eq_ignore_ascii_case(&field)) {
                                return Err(self.error(&format!("field {field:?} appears twice")));
                            }
                            self.expect(':')?;
                            fields.push((field, self.ty()?));
                            if !self.eat(',') {
                                break;
                            }
                        }
                        ColumnType::Struct(fields)
                    }
                };
                self.expect('>')?;
                self.depth -= 1;
                t
            }
            "" => return Err(self.error("expected a type name")),
            _ => {
                self.at = start;
                self.space();
                return Err(self.error(&format!(
                    "unknown type {name:?} (known: string, varchar(n), char(n), tinyint, smallint, int, bigint, float, double, boolean, timestamp, date, decimal(p,s), binary, array<T>, struct<name:T,...>, map<string,T>)"
                )));
            }
        };
        Ok(t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hive_names_parse() {
        assert_eq!(ColumnType::parse("string").unwrap(), ColumnType::String);
        assert_eq!(ColumnType::parse(" BIGINT ").unwrap(), ColumnType::BigInt);
        assert_eq!(ColumnType::parse("varchar(64)").unwrap(), ColumnType::String);
        assert_eq!(ColumnType::parse("decimal(12, 3)").unwrap(), ColumnType::Decimal { precision: 12, scale: 3 });
        assert_eq!(ColumnType::parse("decimal").unwrap(), ColumnType::Decimal { precision: 10, scale: 0 });
        assert_eq!(
            ColumnType::parse("array<struct<name:string,args:map<string,bigint>>>").unwrap(),
            ColumnType::Array(Box::new(ColumnType::Struct(vec![
                ("name".into(), ColumnType::String),
                ("args".into(), ColumnType::Map(Box::new(ColumnType::BigInt))),
            ])))
        );
    }

    #[test]
    fn bad_names_say_where() {
        let e = ColumnType::parse("array<strin>").unwrap_err();
        assert!(e.reason.contains("unknown type \"strin\""), "{e}");
        assert_eq!(e.at, 6);
        assert!(ColumnType::parse("map<int,string>").unwrap_err().reason.contains("map keys"));
        assert!(ColumnType::parse("decimal(40,2)").is_err());
        assert!(ColumnType::parse("decimal(4,5)").is_err());
        assert!(ColumnType::parse("struct<a:int,A:int>").unwrap_err().reason.contains("twice"));
        assert!(ColumnType::parse("array<int").is_err());
        assert!(ColumnType::parse("int int").is_err());
        assert!(ColumnType::parse("").is_err());
        assert!(ColumnType::parse(&format!("{}int{}", "array<".repeat(40), ">".repeat(40))).is_err());
    }
}
