//! Rows of cells into Arrow arrays, column by column.

use std::sync::Arc;

use arrow_array::builder::{
    BinaryBuilder, BooleanBuilder, Date32Builder, Decimal128Builder, Float32Builder, Float64Builder, Int8Builder,
    Int16Builder, Int32Builder, Int64Builder, StringBuilder, TimestampMicrosecondBuilder,
};
use arrow_array::{ArrayRef, ListArray, MapArray, StructArray};
use arrow_buffer::{OffsetBuffer, ScalarBuffer};
use arrow_schema::{ArrowError, Field};

use super::column_type::{ColumnType, map_entries, struct_fields};
use super::deserialize::Cell;

/// The array of one column (or member) of type `ty` from its cells, one per row.
/// Cells come from [`super::deserialize::RowReader`] for the same type, so they fit.
pub fn build(ty: &ColumnType, cells: &[&Cell]) -> Result<ArrayRef, ArrowError> {
    let wrong = || ArrowError::InvalidArgumentError(format!("a cell does not fit {ty:?}"));
    macro_rules! primitive {
        ($builder:expr, $pat:pat => $value:expr) => {{
            let mut b = $builder;
            for c in cells {
                match c {
                    Cell::Null => b.append_null(),
                    $pat => b.append_value($value),
                    _ => return Err(wrong()),
                }
            }
            Arc::new(b.finish()) as ArrayRef
        }};
    }
    let n = cells.len();
    Ok(match ty {
        ColumnType::String => primitive!(StringBuilder::new(), Cell::Str(s) => s),
        ColumnType::TinyInt => {
            primitive!(Int8Builder::with_capacity(n), Cell::Int(v) => i8::try_from(*v).map_err(|_| wrong())?)
        }
        ColumnType::SmallInt => {
            primitive!(Int16Builder::with_capacity(n), Cell::Int(v) => i16::try_from(*v).map_err(|_| wrong())?)
        }
        ColumnType::Int => {
            primitive!(Int32Builder::with_capacity(n), Cell::Int(v) => i32::try_from(*v).map_err(|_| wrong())?)
        }
        ColumnType::BigInt => primitive!(Int64Builder::with_capacity(n), Cell::Int(v) => *v),
        ColumnType::Float => primitive!(Float32Builder::with_capacity(n), Cell::Float(v) => *v as f32),
        ColumnType::Double => primitive!(Float64Builder::with_capacity(n), Cell::Float(v) => *v),
        ColumnType::Boolean => primitive!(BooleanBuilder::with_capacity(n), Cell::Bool(v) => *v),
        ColumnType::Timestamp => primitive!(TimestampMicrosecondBuilder::with_capacity(n), Cell::Micros(v) => *v),
        ColumnType::Date => primitive!(Date32Builder::with_capacity(n), Cell::Days(v) => *v),
        ColumnType::Decimal { precision, scale } => primitive!(
            Decimal128Builder::with_capacity(n).with_precision_and_scale(*precision, *scale)?,
            Cell::Decimal(v) => *v
        ),
        ColumnType::Binary => primitive!(BinaryBuilder::new(), Cell::Bytes(v) => v),
        ColumnType::Array(item) => {
            let (mut offsets, mut valid, mut items) = (vec![0i32], Vec::with_capacity(n), Vec::new());
            for c in cells {
                match c {
                    Cell::Null => valid.push(false),
                    Cell::List(v) => {
                        valid.push(true);
                        items.extend(v.iter());
                    }
                    _ => return Err(wrong()),
                }
                offsets.push(i32::try_from(items.len()).map_err(|_| wrong())?);
            }
            let field = Arc::new(Field::new("element", item.arrow(), true));
            Arc::new(ListArray::try_new(field, offset_buffer(offsets), build(item, &items)?, Some(valid.into()))?)
        }
        ColumnType::Struct(fields) => {
            let mut valid = Vec::with_capacity(n);
            let mut members: Vec<Vec<&Cell>> = vec![Vec::with_capacity(n); fields.len()];
            for c in cells {
                match c {
                    Cell::Null => {
                        valid.push(false);
                        members.iter_mut().for_each(|m| m.push(&Cell::Null));
                    }
                    Cell::Struct(v) if v.len() == fields.len() => {
                        valid.push(true);
                        members.iter_mut().zip(v).for_each(|(m, c)| m.push(c));
                    }
                    _ => return Err(wrong()),
                }
            }
            let arrays = fields.iter().zip(&members).map(|((_, t), m)| build(t, m)).collect::<Result<Vec<_>, _>>()?;
            Arc::new(StructArray::try_new(struct_fields(fields), arrays, Some(valid.into()))?)
        }
        ColumnType::Map(value) => {
            let (mut offsets, mut valid) = (vec![0i32], Vec::with_capacity(n));
            let (mut keys, mut values) = (StringBuilder::new(), Vec::new());
            for c in cells {
                match c {
                    Cell::Null => valid.push(false),
                    Cell::Map(entries) => {
                        valid.push(true);
                        for (k, v) in entries {
                            keys.append_value(k);
                            values.push(v);
                        }
                    }
                    _ => return Err(wrong()),
                }
                offsets.push(i32::try_from(values.len()).map_err(|_| wrong())?);
            }
            let entries_field = map_entries(value);
            let arrow_schema::DataType::Struct(entry_fields) = entries_field.data_type().clone() else {
                return Err(wrong());
            };
            let entries = StructArray::try_new(
                entry_fields,
                vec![Arc::new(keys.finish()) as ArrayRef, build(value, &values)?],
                None,
            )?;
            Arc::new(MapArray::try_new(entries_field, offset_buffer(offsets), entries, Some(valid.into()), false)?)
        }
    })
}

fn offset_buffer(v: Vec<i32>) -> OffsetBuffer<i32> {
    OffsetBuffer::new(ScalarBuffer::from(v))
}
