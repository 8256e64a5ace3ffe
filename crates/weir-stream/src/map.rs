//! Stateless operators: filter, projection, renaming and constant input.

use datafusion::arrow::array::{Array, BooleanArray};
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
}
