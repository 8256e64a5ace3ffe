//! Incremental aggregation: `GROUP BY` and global aggregates.
//!
//! The operator keeps its input as a bag of rows grouped by the group key.
//! For every group a batch of changes touches, it computes the group's
//! aggregates before and after the change with DataFusion's own
//! `AggregateExec` and emits the difference (old row out, new row in).
//! Every aggregate DataFusion has therefore works, and works under deletes:
//! min/max, `count(DISTINCT)`, `string_agg`, `FILTER (WHERE ...)`. The
//! cost of a change is the size of the groups it touches, not of the input.

use std::collections::BTreeSet;
use std::sync::Arc;

use datafusion::arrow::compute::concat_batches;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::execution::TaskContext;
use datafusion::physical_plan::aggregates::{AggregateExec, AggregateMode, PhysicalGroupBy};
use datafusion::physical_plan::collect;

use crate::plan::AggregateSpec;
use crate::{Changes, Multiset, Operator, Result};

/// Hash aggregation over a changing input.
#[derive(Debug)]
pub struct Aggregate {
    spec: AggregateSpec,
    input: Multiset,
    input_schema: SchemaRef,
    output_schema: SchemaRef,
    task: Arc<TaskContext>,
}

impl Aggregate {
    /// An aggregation of rows of `input_schema` producing `output_schema`
    /// (the group columns, then one column per aggregate).
    pub fn new(
        spec: AggregateSpec,
        input_schema: SchemaRef,
        output_schema: SchemaRef,
    ) -> Result<Self> {
        let keys = spec.group.iter().map(|(e, _)| e.clone()).collect();
        Ok(Aggregate {
            input: Multiset::new(input_schema.clone(), keys, None)?,
            spec,
            input_schema,
            output_schema,
            task: Arc::new(TaskContext::default()),
        })
    }

    fn is_global(&self) -> bool {
        self.spec.group.is_empty()
    }

    /// The aggregate rows of the groups present in `rows`.
    fn compute(&self, rows: &Changes) -> Result<Changes> {
        let expanded = rows.expand()?;
        let source =
            MemorySourceConfig::try_new_exec(&[vec![expanded]], self.input_schema.clone(), None)?;
        let exec = AggregateExec::try_new(
            AggregateMode::Single,
            PhysicalGroupBy::new_single(self.spec.group.clone()),
            self.spec.aggregates.clone(),
            self.spec.filters.clone(),
            source,
            self.input_schema.clone(),
        )?;
        let schema = exec.schema();
        // Everything is in memory and the plan has one partition, so
        // collecting it never waits on I/O or on other tasks. DataFusion's
        // streams take part in tokio's cooperative scheduling; run inside a
        // tokio task, an exhausted budget would park this poll until the
        // task yields, which it never does here. So the budget is lifted.
        let run = tokio::task::coop::unconstrained(collect(Arc::new(exec), self.task.clone()));
        let batches = futures::executor::block_on(run)?;
        let batch: RecordBatch = concat_batches(&schema, &batches)?;
        Changes::inserts(batch).with_schema(self.output_schema.clone())
    }
}

use datafusion::physical_plan::ExecutionPlan as _;

impl Operator for Aggregate {
    fn initial(&mut self) -> Result<Vec<Changes>> {
        if self.is_global() {
            let nothing = Changes::empty(self.input_schema.clone());
            return Ok(vec![self.compute(&nothing)?]);
        }
        Ok(Vec::new())
    }

    fn process(&mut self, _port: usize, input: Changes) -> Result<Vec<Changes>> {
        let columns = self.input.key_columns(&input.rows)?;
        let keys = self.input.encode_keys(&columns, input.len())?;
        let touched: BTreeSet<&[u8]> = keys.iter().map(|k| k.as_ref()).collect();
        let before = self.input.rows_with_keys(touched.iter().copied())?;
        self.input.update_with_keys(&input, &keys)?;
        let after = self.input.rows_with_keys(touched.iter().copied())?;
        Ok(vec![self.compute(&before)?.negate(), self.compute(&after)?])
    }

    fn state(&mut self) -> Vec<&mut Multiset> {
        vec![&mut self.input]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{group_by_k, kv, kv_schema, net, rows};
    use datafusion::arrow::datatypes::{DataType, Field, Schema};
    use datafusion::functions_aggregate::count::count_udaf;
    use datafusion::functions_aggregate::min_max::max_udaf;
    use datafusion::physical_expr::aggregate::AggregateExprBuilder;
    use datafusion::physical_expr::expressions::col;

    fn aggregate(grouped: bool) -> Aggregate {
        let schema = kv_schema();
        let v = col("v", &schema).unwrap();
        let count = AggregateExprBuilder::new(count_udaf(), vec![v.clone()])
            .schema(schema.clone())
            .alias("n")
            .build()
            .unwrap();
        let max = AggregateExprBuilder::new(max_udaf(), vec![v])
            .schema(schema.clone())
            .alias("mx")
            .build()
            .unwrap();
        let (group, mut fields) = group_by_k(grouped);
        fields.push(Field::new("n", DataType::Int64, false));
        fields.push(Field::new("mx", DataType::Int32, true));
        let spec = AggregateSpec {
            group,
            aggregates: vec![Arc::new(count), Arc::new(max)],
            filters: vec![None, None],
        };
        Aggregate::new(spec, schema, Arc::new(Schema::new(fields))).unwrap()
    }

    #[test]
    fn max_stays_right_when_the_maximum_is_deleted() {
        let mut agg = aggregate(true);
        let mut out = agg.initial().unwrap();
        out.extend(
            agg.process(
                0,
                kv(&[
                    (Some(1), Some(5), 1),
                    (Some(1), Some(9), 1),
                    (None, None, 1),
                ]),
            )
            .unwrap(),
        );
        assert_eq!(net(&out), rows(&[("1,2,9", 1), ("NULL,0,NULL", 1)]));
        out.extend(agg.process(0, kv(&[(Some(1), Some(9), -1)])).unwrap());
        assert_eq!(net(&out), rows(&[("1,1,5", 1), ("NULL,0,NULL", 1)]));
        out.extend(
            agg.process(0, kv(&[(Some(1), Some(5), -1), (None, None, -1)]))
                .unwrap(),
        );
        assert!(net(&out).is_empty(), "groups without rows disappear");
    }

    #[test]
    fn a_global_aggregate_always_has_one_row() {
        let mut agg = aggregate(false);
        let mut out = agg.initial().unwrap();
        assert_eq!(net(&out), rows(&[("0,NULL", 1)]));
        out.extend(agg.process(0, kv(&[(Some(1), Some(3), 2)])).unwrap());
        assert_eq!(net(&out), rows(&[("2,3", 1)]));
        out.extend(agg.process(0, kv(&[(Some(1), Some(3), -2)])).unwrap());
        assert_eq!(net(&out), rows(&[("0,NULL", 1)]));
    }
}
