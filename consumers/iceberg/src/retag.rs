//! Arrays built for the archiver's Parquet columns, re-typed as the table's Arrow
//! schema: the same values, with the table's field names, field ids, nullability and
//! time zone, and `binary` as `LargeBinary`. Only field metadata and the binary
//! offsets change; no value is converted.

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::{Array, ArrayRef, LargeBinaryArray, ListArray, MapArray, StructArray, make_array};
use arrow_schema::{ArrowError, DataType};

/// `array` as `target`, a type of the same shape.
pub fn retag(array: &ArrayRef, target: &DataType) -> Result<ArrayRef, ArrowError> {
    if array.data_type() == target {
        return Ok(array.clone());
    }
    Ok(match (array.data_type(), target) {
        (DataType::Binary, DataType::LargeBinary) => {
            Arc::new(array.as_binary::<i32>().iter().collect::<LargeBinaryArray>()) as ArrayRef
        }
        (DataType::Struct(_), DataType::Struct(fields)) => {
            let s = array.as_struct();
            let columns = s
                .columns()
                .iter()
                .zip(fields.iter())
                .map(|(c, f)| retag(c, f.data_type()))
                .collect::<Result<Vec<_>, _>>()?;
            Arc::new(StructArray::try_new(fields.clone(), columns, s.nulls().cloned())?)
        }
        (DataType::List(_), DataType::List(field)) => {
            let l = array.as_list::<i32>();
            let values = retag(l.values(), field.data_type())?;
            Arc::new(ListArray::try_new(field.clone(), l.offsets().clone(), values, l.nulls().cloned())?)
        }
        (DataType::Map(_, _), DataType::Map(field, sorted)) => {
            let m = array.as_map();
            let DataType::Struct(_) = field.data_type() else {
                return Err(ArrowError::InvalidArgumentError(format!("map entries of type {}", field.data_type())));
            };
            let entries = retag(&(Arc::new(m.entries().clone()) as ArrayRef), field.data_type())?;
            Arc::new(MapArray::try_new(
                field.clone(),
                m.offsets().clone(),
                entries.as_struct().clone(),
                m.nulls().cloned(),
                *sorted,
            )?)
        }
        // Same layout, another type (a time zone): the same buffers.
        _ => make_array(array.to_data().into_builder().data_type(target.clone()).build()?),
    })
}
