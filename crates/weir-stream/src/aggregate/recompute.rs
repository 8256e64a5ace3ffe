//! [`RecomputeAggregate`]: aggregation for the functions that have no
//! columnar accumulator (`count(DISTINCT)`, `string_agg`, `array_agg`,
//! `bool_and`, ordered aggregates, ...).
//!
//! The operator keeps its input rows by group key ([`KeyedRows`]). The
//! first time an epoch touches a group, it computes the group's row as it
//! was, with DataFusion's own `AggregateExec` over the group's rows; at the
//! end of the epoch it computes the rows of every touched group once more,
//! and emits the old rows (-1) and the new ones (+1). Every aggregate
//! DataFusion has therefore works, and works under deletes; the cost of an
//! epoch is the size of the groups it touched.

use std::collections::HashSet;
use std::sync::Arc;

use datafusion::arrow::compute::concat_batches;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::execution::TaskContext;
use datafusion::physical_plan::aggregates::{AggregateExec, AggregateMode, PhysicalGroupBy};
use datafusion::physical_plan::{collect, ExecutionPlan};
use weir_state::{DeltaBatches, KeyId, TableSpec};

use crate::keyed_rows::KeyedRows;
use crate::operator::expect_tables;
use crate::plan::AggregateSpec;
use crate::{Changes, Operator, Result};

/// Aggregation that recomputes each touched group (see the module
/// documentation).
#[derive(Debug)]
pub struct RecomputeAggregate {
    spec: AggregateSpec,
    input: KeyedRows,
    input_schema: SchemaRef,
    output_schema: SchemaRef,
    task: Arc<TaskContext>,
    /// Groups touched in this epoch.
    touched: HashSet<KeyId>,
    /// Their rows before the epoch touched them.
    old: Vec<Changes>,
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
        Ok(RecomputeAggregate {
            input: KeyedRows::new(input_schema.clone(), keys, !append_only)?,
            spec,
            input_schema,
            output_schema,
            task: Arc::new(TaskContext::default()),
            touched: HashSet::new(),
            old: Vec::new(),
        })
    }

    fn is_global(&self) -> bool {
        self.spec.group.is_empty()
    }

    /// The aggregate rows of the groups present in `rows`.
    fn compute(&self, rows: &Changes) -> Result<Changes> {
        if rows.is_empty() && !self.is_global() {
            return Ok(Changes::empty(self.output_schema.clone()));
        }
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

impl Operator for RecomputeAggregate {
    fn initial(&mut self) -> Result<Vec<Changes>> {
        if self.is_global() {
            let nothing = Changes::empty(self.input_schema.clone());
            return Ok(vec![self.compute(&nothing)?]);
        }
        Ok(Vec::new())
    }

    fn process(&mut self, _port: usize, input: Changes) -> Result<Vec<Changes>> {
        let columns = self.input.key_columns(&input.rows)?;
        let existing = self.input.find_keys(&columns, input.len())?;
        let fresh: Vec<KeyId> = existing
            .into_iter()
            .flatten()
            .filter(|k| !self.touched.contains(k))
            .collect::<HashSet<_>>()
            .into_iter()
            .collect();
        if !fresh.is_empty() || (self.is_global() && self.touched.is_empty()) {
            let before = self.input.rows_with_keys(fresh.iter().copied())?;
            self.old.push(self.compute(&before)?);
        }
        let keys = self.input.update(&input)?;
        self.touched.extend(keys);
        Ok(Vec::new())
    }

    fn flush(&mut self) -> Result<Vec<Changes>> {
        if self.touched.is_empty() {
            return Ok(Vec::new());
        }
        let touched: Vec<KeyId> = self.touched.drain().collect();
        let after = self.input.rows_with_keys(touched)?;
        let mut out: Vec<Changes> = self.old.drain(..).map(|c| c.negate()).collect();
        out.push(self.compute(&after)?);
        Ok(out)
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

    fn restore_share(
        &mut self,
        tables: &[RecordBatch],
        instance: usize,
        placement: &crate::Placement,
    ) -> Result<()> {
        expect_tables(tables, 1)?;
        // A global aggregate runs as one instance.
        let by_key = !self.spec.group.is_empty();
        self.input
            .restore_share(&tables[0], instance, placement, by_key)
    }

    fn memory_size(&self) -> usize {
        self.input.memory_size()
            + self
                .old
                .iter()
                .map(|c| c.rows.get_array_memory_size())
                .sum::<usize>()
    }

    fn state_rows(&self) -> Vec<usize> {
        vec![self.input.live_rows()]
    }
}
