//! Top-N: `ORDER BY ... LIMIT n OFFSET m`, maintained as rows come and go.
//!
//! The input is kept as a bag ordered by the sort key (its `arrow-row`
//! encoding sorts as `ORDER BY` does), ties broken by the whole row. A
//! change recomputes the first `m + n` rows of that order before and after
//! and emits the difference, so its cost is `O(m + n)` plus the change.

use datafusion::arrow::compute::SortOptions;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::physical_expr::PhysicalExprRef;

use crate::plan::TopNSpec;
use crate::{Changes, Multiset, Operator, Result};

/// The first rows of an ordered, changing input.
#[derive(Debug)]
pub struct TopN {
    input: Multiset,
    skip: usize,
    fetch: Option<usize>,
}

impl TopN {
    /// The top rows of rows of `schema` by `spec`.
    pub fn new(spec: &TopNSpec, schema: SchemaRef) -> Result<Self> {
        let exprs: Vec<PhysicalExprRef> = spec.order.iter().map(|s| s.expr.clone()).collect();
        let options: Vec<SortOptions> = spec.order.iter().map(|s| s.options).collect();
        Ok(TopN {
            input: Multiset::new(schema, exprs, Some(options))?,
            skip: spec.skip,
            fetch: spec.fetch,
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
        let before = self.top()?;
        self.input.update(&input)?;
        let after = self.top()?;
        Ok(vec![before.negate(), after])
    }

    fn state(&mut self) -> Vec<&mut Multiset> {
        vec![&mut self.input]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{kv, kv_schema, net, rows};
    use datafusion::physical_expr::expressions::col;
    use datafusion::physical_expr::PhysicalSortExpr;

    #[test]
    fn the_window_follows_inserts_and_deletes() {
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
        assert_eq!(
            net(&out),
            rows(&[("1,10", 1), ("3,20", 1)]),
            "30 is skipped"
        );
        out.extend(top.process(0, kv(&[(Some(4), Some(40), 2)])).unwrap());
        assert_eq!(
            net(&out),
            rows(&[("2,30", 1), ("4,40", 1)]),
            "one copy of 40 is skipped"
        );
        out.extend(top.process(0, kv(&[(Some(4), Some(40), -2)])).unwrap());
        assert_eq!(net(&out), rows(&[("1,10", 1), ("3,20", 1)]));
    }
}
