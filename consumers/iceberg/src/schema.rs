//! An Iceberg table's schema as the columns records are converted to.
//!
//! Records are read with the same rules as the S3 archiver's Parquet conversion
//! (`weir_parquet`, OpenX JSON SerDe, case-insensitive keys): each Iceberg type maps
//! to the Hive type the conversion already reads, and a required field is checked
//! per record, so a record without it goes to the error output with the field's name
//! instead of failing the batch.
//!
//! | Iceberg | read as | written as (Arrow) |
//! |---|---|---|
//! | `boolean`, `int`, `long`, `float`, `double`, `date`, `string` | the same | the same |
//! | `decimal(p,s)` | `decimal(p,s)` | `Decimal128(p,s)` |
//! | `timestamp` | `timestamp` | microseconds, no zone |
//! | `timestamptz` | `timestamp` (UTC) | microseconds, UTC |
//! | `binary` | `binary` (base64 text) | `LargeBinary` |
//! | `list<T>`, `struct<...>` | the same | the same |
//! | `map<string,T>` | `map<string,T>` | the same |
//!
//! `time`, `timestamp_ns`, `timestamptz_ns`, `uuid`, `fixed(n)` and maps whose keys
//! are not strings are refused when the table is opened, naming the field.

use iceberg::spec::{NestedFieldRef, PrimitiveType, Schema, Type};
use weir_parquet::deserialize::Cell;
use weir_parquet::{Column, ColumnType};

/// A field whose type weir does not write.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("field {field:?} has type {ty}, which weir does not write to Iceberg tables yet")]
pub struct UnsupportedType {
    /// The field's path (`a.b.element`).
    pub field: String,
    /// Its Iceberg type.
    pub ty: String,
}

/// Which values must be present, mirroring a column's type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Shape {
    /// A primitive.
    Leaf,
    /// `list<T>`: whether an element may be null.
    List { element_required: bool, element: Box<Shape> },
    /// `struct<...>`: each member's name, whether it is required, and its shape.
    Struct(Vec<(String, bool, Shape)>),
    /// `map<string,T>`: whether a value may be null.
    Map { value_required: bool, value: Box<Shape> },
}

/// A top-level field: the column records are read into, whether it is required.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableColumn {
    /// The column (name and the type records are read as).
    pub column: Column,
    /// Whether a row must have it.
    pub required: bool,
    /// What inside it must be present.
    pub shape: Shape,
}

/// The columns of `schema`, in order.
pub fn columns(schema: &Schema) -> Result<Vec<TableColumn>, UnsupportedType> {
    schema
        .as_struct()
        .fields()
        .iter()
        .map(|f| {
            let (ty, shape) = read_as(f, &f.name)?;
            Ok(TableColumn { column: Column { name: f.name.clone(), ty }, required: f.required, shape })
        })
        .collect()
}

fn read_as(field: &NestedFieldRef, path: &str) -> Result<(ColumnType, Shape), UnsupportedType> {
    let unsupported = || UnsupportedType { field: path.to_owned(), ty: field.field_type.to_string() };
    Ok(match field.field_type.as_ref() {
        Type::Primitive(p) => {
            let ty = match p {
                PrimitiveType::Boolean => ColumnType::Boolean,
                PrimitiveType::Int => ColumnType::Int,
                PrimitiveType::Long => ColumnType::BigInt,
                PrimitiveType::Float => ColumnType::Float,
                PrimitiveType::Double => ColumnType::Double,
                PrimitiveType::Decimal { precision, scale } => ColumnType::Decimal {
                    precision: u8::try_from(*precision).map_err(|_| unsupported())?,
                    scale: i8::try_from(*scale).map_err(|_| unsupported())?,
                },
                PrimitiveType::Date => ColumnType::Date,
                PrimitiveType::Timestamp | PrimitiveType::Timestamptz => ColumnType::Timestamp,
                PrimitiveType::String => ColumnType::String,
                PrimitiveType::Binary => ColumnType::Binary,
                PrimitiveType::Time
                | PrimitiveType::TimestampNs
                | PrimitiveType::TimestamptzNs
                | PrimitiveType::Uuid
                | PrimitiveType::Fixed(_) => return Err(unsupported()),
            };
            (ty, Shape::Leaf)
        }
        Type::List(list) => {
            let element = &list.element_field;
            let (ty, shape) = read_as(element, &format!("{path}.element"))?;
            (
                ColumnType::Array(Box::new(ty)),
                Shape::List { element_required: element.required, element: Box::new(shape) },
            )
        }
        Type::Struct(s) => {
            let mut types = Vec::new();
            let mut shapes = Vec::new();
            for f in s.fields() {
                let (ty, shape) = read_as(f, &format!("{path}.{}", f.name))?;
                types.push((f.name.clone(), ty));
                shapes.push((f.name.clone(), f.required, shape));
            }
            (ColumnType::Struct(types), Shape::Struct(shapes))
        }
        Type::Map(map) => {
            if *map.key_field.field_type != Type::Primitive(PrimitiveType::String) {
                return Err(unsupported());
            }
            let value = &map.value_field;
            let (ty, shape) = read_as(value, &format!("{path}.value"))?;
            (ColumnType::Map(Box::new(ty)), Shape::Map { value_required: value.required, value: Box::new(shape) })
        }
    })
}

/// The first required value `row` lacks, as a path (`arguments.query`), if any.
pub fn missing(columns: &[TableColumn], row: &[Cell]) -> Option<String> {
    columns.iter().zip(row).find_map(|(c, cell)| {
        if matches!(cell, Cell::Null) {
            return c.required.then(|| c.column.name.clone());
        }
        lacks(&c.shape, cell, &c.column.name)
    })
}

fn lacks(shape: &Shape, cell: &Cell, path: &str) -> Option<String> {
    match (shape, cell) {
        (Shape::List { element_required, element }, Cell::List(items)) => items.iter().find_map(|item| {
            let path = format!("{path}.element");
            if matches!(item, Cell::Null) {
                return element_required.then_some(path);
            }
            lacks(element, item, &path)
        }),
        (Shape::Struct(members), Cell::Struct(cells)) => {
            members.iter().zip(cells).find_map(|((name, required, shape), cell)| {
                let path = format!("{path}.{name}");
                if matches!(cell, Cell::Null) {
                    return required.then_some(path);
                }
                lacks(shape, cell, &path)
            })
        }
        (Shape::Map { value_required, value }, Cell::Map(entries)) => entries.iter().find_map(|(key, cell)| {
            let path = format!("{path}.{key}");
            if matches!(cell, Cell::Null) {
                return value_required.then_some(path);
            }
            lacks(value, cell, &path)
        }),
        _ => None,
    }
}
