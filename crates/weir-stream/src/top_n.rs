//! Top-N: `ORDER BY ... LIMIT n OFFSET m`, maintained as rows come and go.
//!
//! The input is kept as a bag ordered by the sort key (its `arrow-row`
//! encoding sorts as `ORDER BY` does), ties broken by the whole row. The
//! first change of an epoch takes the first `m + n` rows of that order;
//! at the end of the epoch they are taken again and the difference is
//! emitted, so an epoch costs `O(m + n)` plus its changes, however many
//! batches it had.

use datafusion::arrow::compute::SortOptions;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::physical_expr::PhysicalExprRef;
use weir_state::{DeltaBatches, TableSpec};

use crate::operator::expect_tables;
use crate::ordered_rows::OrderedRows;
use crate::plan::TopNSpec;
use crate::{Changes, Operator, Result};

/// The first rows of an ordered, changing input.
#[derive(Debug)]
pub struct TopN {
    input: OrderedRows,
    skip: usize,
    fetch: Option<usize>,
    /// The top rows before the epoch's first change.
    before: Option<Changes>,
}

impl TopN {
    /// The top rows of rows of `schema` by `spec`.
    pub fn new(spec: &TopNSpec, schema: SchemaRef) -> Result<Self> {
        let exprs: Vec<PhysicalExprRef> = spec.order.iter().map(|s| s.expr.clone()).collect();
        let options: Vec<SortOptions> = spec.order.iter().map(|s| s.options).collect();
        Ok(TopN {
            input: OrderedRows::new(schema, exprs, Some(options))?,
            skip: spec.skip,
            fetch: spec.fetch,
            before: None,
        })
    }

    /// The current top rows.
    fn top(&self) -> Result<Changes> {
        let mut to_skip = self.skip as i64;
        let mut room = self.fetch.map_or(i64::MAX, |f| f as i64);
        let mut rows = Vec::new();
        for (row, weight) in self.input.ordered() {
            if room == 0 {
                break;
            }
            let skipped = weight.min(to_skip);
            to_skip -= skipped;
            let taken = (weight - skipped).min(room);
            if taken > 0 {
                rows.push((row, taken));
                room -= taken;
            }
        }
        self.input.decode(&rows)
    }
}

impl Operator for TopN {
    fn process(&mut self, _port: usize, input: Changes) -> Result<Vec<Changes>> {
        if self.before.is_none() {
            self.before = Some(self.top()?);
        }
        self.input.update(&input)?;
        Ok(Vec::new())
    }

    fn flush(&mut self) -> Result<Vec<Changes>> {
        match self.before.take() {
            Some(before) => Ok(vec![before.negate(), self.top()?]),
            None => Ok(Vec::new()),
        }
    }

    fn state_specs(&self) -> Vec<TableSpec> {
        vec![self.input.state_spec()]
    }

    fn checkpoint(&mut self) -> Result<Vec<Option<DeltaBatches>>> {
        Ok(vec![self.input.take_delta()?])
    }

    fn restore(&mut self, tables: &[RecordBatch]) -> Result<()> {
        expect_tables(tables, 1)?;
        self.input.restore(&tables[0])
    }

    fn memory_size(&self) -> usize {
        self.input.memory_size()
            + self
                .before
                .as_ref()
                .map_or(0, |c| c.rows.get_array_memory_size())
    }

    fn state_rows(&self) -> Vec<usize> {
        vec![self.input.distinct_rows()]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{kv, kv_schema, net, rows};
    use datafusion::physical_expr::expressions::col;
    use datafusion::physical_expr::PhysicalSortExpr;

    #[test]
    fn the_window_follows_inserts_and_deletes_once_per_epoch() {
        let schema = kv_schema();
        let spec = TopNSpec {
            order: vec![PhysicalSortExpr::new(
                col("v", &schema).unwrap(),
                SortOptions::new(true, false),
            )],
            skip: 1,
            fetch: Some(2),
        };
        let mut top = TopN::new(&spec, schema).unwrap();
        let mut out = top
            .process(
                0,
                kv(&[
                    (Some(1), Some(10), 1),
                    (Some(2), Some(30), 1),
                    (Some(3), Some(20), 1),
                ]),
            )
            .unwrap();
        assert!(out.is_empty(), "held back until the epoch ends");
        out.extend(top.flush().unwrap());
        assert_eq!(
            net(&out),
            rows(&[("1,10", 1), ("3,20", 1)]),
            "30 is skipped"
        );
        out.extend(top.process(0, kv(&[(Some(4), Some(40), 2)])).unwrap());
        out.extend(top.flush().unwrap());
        assert_eq!(
            net(&out),
            rows(&[("2,30", 1), ("4,40", 1)]),
            "one copy of 40 is skipped"
        );
        out.extend(top.process(0, kv(&[(Some(4), Some(40), -2)])).unwrap());
        out.extend(top.process(0, kv(&[(Some(5), Some(5), 1)])).unwrap());
        out.extend(top.flush().unwrap());
        assert_eq!(net(&out), rows(&[("1,10", 1), ("3,20", 1)]));
        assert!(
            top.flush().unwrap().is_empty(),
            "an epoch without changes emits nothing"
        );
    }
}
