//! Stateless operators: filter, projection, unnesting, renaming and
//! constant input.

use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, BooleanArray, OffsetSizeTrait, UInt32Array,
};
use datafusion::arrow::compute::take;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::{RecordBatch, RecordBatchOptions};
use datafusion::error::DataFusionError;
use datafusion::physical_expr::PhysicalExprRef;

use crate::operator::stateless;
use crate::{Changes, Operator, Result};

/// Keeps the rows for which a predicate is true; weights pass through.
#[derive(Debug)]
pub struct Filter {
    predicate: PhysicalExprRef,
}

impl Filter {
    /// A filter by `predicate`.
    pub fn new(predicate: PhysicalExprRef) -> Self {
        Filter { predicate }
    }
}

impl Operator for Filter {
    fn process(&mut self, _port: usize, input: Changes) -> Result<Vec<Changes>> {
        let mask = self
            .predicate
            .evaluate(&input.rows)?
            .into_array(input.len())?;
        let mask = mask
            .as_any()
            .downcast_ref::<BooleanArray>()
            .ok_or_else(|| DataFusionError::Internal("filter predicate is not boolean".into()))?;
        Ok(vec![input.filter(mask)?])
    }

    stateless!();
}

/// Computes output columns from expressions; weights pass through.
#[derive(Debug)]
pub struct Project {
    exprs: Vec<PhysicalExprRef>,
    schema: SchemaRef,
}

impl Project {
    /// A projection to `schema` by `exprs`.
    pub fn new(exprs: Vec<PhysicalExprRef>, schema: SchemaRef) -> Self {
        Project { exprs, schema }
    }
}

impl Operator for Project {
    fn process(&mut self, _port: usize, input: Changes) -> Result<Vec<Changes>> {
        let rows = input.len();
        let columns = self
            .exprs
            .iter()
            .map(|e| e.evaluate(&input.rows)?.into_array(rows))
            .collect::<Result<Vec<_>>>()?;
        let batch = RecordBatch::try_new_with_options(
            self.schema.clone(),
            columns,
            &RecordBatchOptions::new().with_row_count(Some(rows)),
        )?;
        Ok(vec![Changes::new(batch, input.weights)?])
    }

    stateless!();
}

/// Each row once per element of its list column, the element in the
/// list's place (`unnest`): a weight goes with each copy.
#[derive(Debug)]
pub struct Unnest {
    column: usize,
    keep_null: bool,
    keep_empty: bool,
    schema: SchemaRef,
}

impl Unnest {
    /// Unnests list column `column`, to `schema`; a NULL (`keep_null`) or
    /// empty (`keep_empty`) list gives one row with a NULL element, else
    /// none.
    pub fn new(column: usize, keep_null: bool, keep_empty: bool, schema: SchemaRef) -> Self {
        Unnest {
            column,
            keep_null,
            keep_empty,
            schema,
        }
    }

    /// For each output row, its input row and its element (`None`: NULL).
    fn positions<O: OffsetSizeTrait>(
        &self,
        list: &datafusion::arrow::array::GenericListArray<O>,
    ) -> (Vec<u32>, Vec<Option<u32>>) {
        let offsets = list.value_offsets();
        let (mut rows, mut elements) = (Vec::new(), Vec::new());
        // Per row: each contributes as many rows as its list has elements.
        for row in 0..list.len() {
            let (start, end) = (offsets[row].as_usize(), offsets[row + 1].as_usize());
            let keep = if list.is_null(row) {
                self.keep_null
            } else {
                start == end && self.keep_empty
            };
            if keep {
                rows.push(row as u32);
                elements.push(None);
            } else if list.is_valid(row) {
                for element in start..end {
                    rows.push(row as u32);
                    elements.push(Some(element as u32));
                }
            }
        }
        (rows, elements)
    }
}

impl Operator for Unnest {
    fn process(&mut self, _port: usize, input: Changes) -> Result<Vec<Changes>> {
        let list = input.rows.column(self.column);
        let ((rows, elements), values) = if let Some(list) = list.as_list_opt::<i32>() {
            (self.positions(list), list.values().clone())
        } else if let Some(list) = list.as_list_opt::<i64>() {
            (self.positions(list), list.values().clone())
        } else {
            return Err(DataFusionError::Internal(format!(
                "unnest of a {} column",
                list.data_type()
            )));
        };
        let rows = UInt32Array::from(rows);
        let elements = UInt32Array::from(elements);
        let columns = input
            .rows
            .columns()
            .iter()
            .enumerate()
            .map(|(i, column)| {
                if i == self.column {
                    take(values.as_ref(), &elements, None)
                } else {
                    take(column.as_ref(), &rows, None)
                }
            })
            .collect::<std::result::Result<Vec<ArrayRef>, _>>()?;
        let weights = take(&input.weights, &rows, None)?;
        let batch = RecordBatch::try_new_with_options(
            self.schema.clone(),
            columns,
            &RecordBatchOptions::new().with_row_count(Some(rows.len())),
        )?;
        Ok(vec![Changes::new(batch, weights.as_primitive().clone())?])
    }

    stateless!();
}

/// Constant rows (`VALUES`, a `SELECT` without `FROM`): emitted once.
#[derive(Debug)]
pub struct Values {
    rows: Option<RecordBatch>,
}

impl Values {
    /// The constant `rows`.
    pub fn new(rows: RecordBatch) -> Self {
        Values { rows: Some(rows) }
    }
}

impl Operator for Values {
    fn initial(&mut self) -> Result<Vec<Changes>> {
        Ok(self.rows.take().map(Changes::inserts).into_iter().collect())
    }

    fn process(&mut self, _port: usize, _input: Changes) -> Result<Vec<Changes>> {
        Err(DataFusionError::Internal(
            "constant rows have no input".into(),
        ))
    }

    stateless!();
}

/// Forwards its inputs' changes under the output schema's column names:
/// where a relation's changes enter the dataflow, and `UNION ALL` (whose
/// inputs' columns already have the output's types).
#[derive(Debug)]
pub struct Rename {
    schema: SchemaRef,
}

impl Rename {
    /// Changes renamed to `schema`.
    pub fn new(schema: SchemaRef) -> Self {
        Rename { schema }
    }
}

impl Operator for Rename {
    fn process(&mut self, _port: usize, input: Changes) -> Result<Vec<Changes>> {
        Ok(vec![input.with_schema(self.schema.clone())?])
    }

    stateless!();
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    use datafusion::arrow::array::{Int32Array, Int64Array};
    use datafusion::arrow::datatypes::{DataType, Field, Schema};
    use datafusion::logical_expr::Operator as BinOp;
    use datafusion::physical_expr::expressions::{binary, col, lit};

    #[test]
    fn filter_keeps_matching_rows_with_their_weights() {
        let schema = Arc::new(Schema::new(vec![Field::new("x", DataType::Int32, true)]));
        let rows = RecordBatch::try_new(
            schema.clone(),
            vec![Arc::new(Int32Array::from(vec![
                Some(1),
                Some(5),
                None,
                Some(9),
            ]))],
        )
        .unwrap();
        let input = Changes::new(rows, Int64Array::from(vec![1, -1, 1, 2])).unwrap();
        let predicate = binary(col("x", &schema).unwrap(), BinOp::Gt, lit(3), &schema).unwrap();
        let out = Filter::new(predicate).process(0, input).unwrap();
        assert_eq!(out[0].len(), 2);
        assert_eq!(out[0].weights.values().to_vec(), vec![-1, 2]);
    }

    #[test]
    fn unnest_gives_a_row_per_element_each_with_its_row_weight() {
        use datafusion::arrow::array::ListArray;
        use datafusion::arrow::datatypes::Int32Type;

        let list_type = DataType::List(Arc::new(Field::new_list_field(DataType::Int32, true)));
        let schema = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int32, false),
            Field::new("l", list_type, true),
        ]));
        let lists = ListArray::from_iter_primitive::<Int32Type, _, _>(vec![
            Some(vec![Some(1), Some(2)]),
            None,
            Some(vec![]),
            Some(vec![Some(7)]),
        ]);
        let rows = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(Int32Array::from(vec![10, 20, 30, 40])),
                Arc::new(lists),
            ],
        )
        .unwrap();
        let input = Changes::new(rows, Int64Array::from(vec![1, 1, 1, -2])).unwrap();
        let out_schema = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int32, false),
            Field::new("e", DataType::Int32, true),
        ]));
        let run = |keep_null, keep_empty| {
            let out = Unnest::new(1, keep_null, keep_empty, out_schema.clone())
                .process(0, input.clone())
                .unwrap();
            let rows = &out[0].rows;
            let keys = rows.column(0).as_primitive::<Int32Type>().values().to_vec();
            let elements: Vec<Option<i32>> =
                rows.column(1).as_primitive::<Int32Type>().iter().collect();
            (keys, elements, out[0].weights.values().to_vec())
        };
        assert_eq!(
            run(false, false),
            (
                vec![10, 10, 40],
                vec![Some(1), Some(2), Some(7)],
                vec![1, 1, -2]
            )
        );
        assert_eq!(
            run(true, true),
            (
                vec![10, 10, 20, 30, 40],
                vec![Some(1), Some(2), None, None, Some(7)],
                vec![1, 1, 1, 1, -2]
            )
        );
    }
}
