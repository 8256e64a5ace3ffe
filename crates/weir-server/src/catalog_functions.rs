//! Catalog functions that ORMs call while reflecting a table and that
//! datafusion-pg-catalog does not provide, answered from Weir's model:
//! Weir has no sequences and one collation, so `pg_get_serial_sequence`
//! is NULL and every collation is visible.

use std::sync::Arc;

use datafusion::arrow::array::{new_null_array, BooleanArray};
use datafusion::arrow::datatypes::DataType;
use datafusion::logical_expr::{create_udf, ColumnarValue, ScalarUDF, Volatility};
use datafusion::prelude::SessionContext;

use crate::functions::rows_of;

/// Registers the functions in `ctx`.
pub fn register(ctx: &SessionContext) {
    ctx.register_udf(pg_get_serial_sequence());
    ctx.register_udf(pg_collation_is_visible());
}

/// `pg_get_serial_sequence(table, column)`: the sequence behind a serial
/// column; NULL, as Weir has no sequences.
fn pg_get_serial_sequence() -> ScalarUDF {
    create_udf(
        "pg_get_serial_sequence",
        vec![DataType::Utf8, DataType::Utf8],
        DataType::Utf8,
        Volatility::Stable,
        Arc::new(|args: &[ColumnarValue]| {
            Ok(ColumnarValue::Array(new_null_array(
                &DataType::Utf8,
                rows_of(args),
            )))
        }),
    )
}

/// `pg_collation_is_visible(oid)`: true, as Weir's one collation is.
fn pg_collation_is_visible() -> ScalarUDF {
    create_udf(
        "pg_collation_is_visible",
        vec![DataType::Int32],
        DataType::Boolean,
        Volatility::Stable,
        Arc::new(|args: &[ColumnarValue]| {
            let rows = rows_of(args);
            Ok(ColumnarValue::Array(Arc::new(BooleanArray::from(vec![
                true;
                rows
            ]))))
        }),
    )
}
