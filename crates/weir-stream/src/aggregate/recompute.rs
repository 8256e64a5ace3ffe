//! [`RecomputeAggregate`]: aggregation for the functions that have no
//! columnar accumulator (`count(DISTINCT)`, `string_agg`, `array_agg`,
//! `bool_and`, ordered aggregates, ...).
//!
//! The operator keeps its input rows by group key and recomputes each
//! group an epoch touched ([`Recompute`]), with DataFusion's own
//! `AggregateExec` over the group's rows. Every aggregate DataFusion has
//! therefore works, and works under deletes; the cost of an epoch is the
//! size of the groups it touched.

use std::sync::Arc;

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::execution::TaskContext;
use datafusion::physical_plan::aggregates::{AggregateExec, AggregateMode, PhysicalGroupBy};

use crate::keyed_rows::KeyedRows;
use crate::plan::AggregateSpec;
use crate::recompute::{run_in_memory, Recomputation, Recompute};
use crate::Result;

/// Aggregation that recomputes each touched group (see the module
/// documentation).
pub type RecomputeAggregate = Recompute<GroupRows>;

/// A group's aggregate row from its rows.
#[derive(Debug)]
pub struct GroupRows {
    spec: AggregateSpec,
    input_schema: SchemaRef,
}

impl Recomputation for GroupRows {
    fn compute(&self, rows: RecordBatch, task: &Arc<TaskContext>) -> Result<RecordBatch> {
        let source =
            MemorySourceConfig::try_new_exec(&[vec![rows]], self.input_schema.clone(), None)?;
        let exec = AggregateExec::try_new(
            AggregateMode::Single,
            PhysicalGroupBy::new_single(self.spec.group.clone()),
            self.spec.aggregates.clone(),
            self.spec.filters.clone(),
            source,
            self.input_schema.clone(),
        )?;
        run_in_memory(Arc::new(exec), task)
    }
}

impl RecomputeAggregate {
    /// An aggregation of rows of `input_schema` producing `output_schema`
    /// (the group columns, then one column per aggregate). `append_only`:
    /// the input never deletes.
    pub fn new(
        spec: AggregateSpec,
        input_schema: SchemaRef,
        output_schema: SchemaRef,
        append_only: bool,
    ) -> Result<Self> {
        let keys = spec.group.iter().map(|(e, _)| e.clone()).collect();
        let rows = GroupRows {
            spec,
            input_schema: input_schema.clone(),
        };
        let input = KeyedRows::new(input_schema, keys, !append_only)?;
        Ok(Recompute::with(rows, input, output_schema))
    }
}
