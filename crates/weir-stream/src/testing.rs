//! Helpers for the operators' unit tests: small batches in, sorted rows
//! with weights out.

use std::sync::Arc;

use datafusion::arrow::array::{Array, Int32Array, Int64Array};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::ScalarValue;
use datafusion::physical_expr::expressions::col;
use datafusion::physical_expr::PhysicalExprRef;

use crate::Changes;

/// The schema `(k int, v int)`, both nullable.
pub fn kv_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int32, true),
        Field::new("v", DataType::Int32, true),
    ]))
}

/// Grouping by `k` of [`kv_schema`] (or no grouping), and the output
/// fields that grouping contributes.
pub fn group_by_k(grouped: bool) -> (Vec<(PhysicalExprRef, String)>, Vec<Field>) {
    if grouped {
        let k = col("k", &kv_schema()).unwrap();
        (
            vec![(k, "k".to_owned())],
            vec![Field::new("k", DataType::Int32, true)],
        )
    } else {
        (Vec::new(), Vec::new())
    }
}

/// `(k, v, weight)` rows as changes of [`kv_schema`].
pub fn kv(rows: &[(Option<i32>, Option<i32>, i64)]) -> Changes {
    let batch = RecordBatch::try_new(
        kv_schema(),
        vec![
            Arc::new(Int32Array::from(
                rows.iter().map(|r| r.0).collect::<Vec<_>>(),
            )),
            Arc::new(Int32Array::from(
                rows.iter().map(|r| r.1).collect::<Vec<_>>(),
            )),
        ],
    )
    .unwrap();
    Changes::new(
        batch,
        Int64Array::from(rows.iter().map(|r| r.2).collect::<Vec<_>>()),
    )
    .unwrap()
}

/// The net effect of `outputs`: each distinct row as text with its total
/// weight, sorted, without rows whose weights cancel.
pub fn net(outputs: &[Changes]) -> Vec<(String, i64)> {
    let mut rows: Vec<(String, i64)> = Vec::new();
    for changes in outputs {
        for i in 0..changes.len() {
            let cells: Vec<String> = changes
                .rows
                .columns()
                .iter()
                .map(|c| {
                    if c.is_null(i) {
                        "NULL".to_owned()
                    } else {
                        ScalarValue::try_from_array(c, i).unwrap().to_string()
                    }
                })
                .collect();
            let text = cells.join(",");
            let weight = changes.weights.value(i);
            match rows.iter_mut().find(|(t, _)| *t == text) {
                Some(entry) => entry.1 += weight,
                None => rows.push((text, weight)),
            }
        }
    }
    rows.retain(|(_, w)| *w != 0);
    rows.sort();
    rows
}

/// Shorthand for expected [`net`] results.
pub fn rows(expected: &[(&str, i64)]) -> Vec<(String, i64)> {
    expected.iter().map(|(t, w)| (t.to_string(), *w)).collect()
}

/// The bound of an `Int32` column: watermark node `node`'s watermark.
pub fn int_bound(node: usize) -> crate::watermark::ColumnBound {
    crate::watermark::ColumnBound {
        node,
        data_type: DataType::Int32,
        expr: Arc::new(datafusion::physical_expr::expressions::Column::new(
            "watermark",
            0,
        )),
        first_element: false,
    }
}
