//! [`Recompute`]: an operator that keeps its input rows by key and, for
//! every key an epoch touched, computes the key's output rows from all its
//! rows with DataFusion, before and after.
//!
//! The first time an epoch touches a key, the operator computes the key's
//! output as it was; at the end of the epoch it computes the output of
//! every touched key once more, and emits the difference (the old rows at
//! -1 and the new at +1, with the rows that did not change cancelled). So
//! whatever DataFusion computes over a key's rows works, and works under
//! deletes; an epoch costs the size of the keys it touched. Two operators
//! are built on it ([`Recomputation`]): aggregates without a columnar
//! accumulator (`aggregate/recompute.rs`: keys are groups) and `OVER`
//! window functions (`window_function.rs`: keys are partitions).

use std::collections::HashSet;
use std::sync::Arc;

use datafusion::arrow::compute::concat_batches;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::execution::TaskContext;
use datafusion::physical_plan::{collect, ExecutionPlan};
use weir_state::{DeltaBatches, KeyId, TableSpec};

use crate::keyed_rows::KeyedRows;
use crate::operator::expect_tables;
use crate::watermark::Watermarks;
use crate::{Changes, Operator, Result};

/// What a [`Recompute`] operator computes over a key's rows.
pub(crate) trait Recomputation: Send + std::fmt::Debug {
    /// The output rows of the keys whose rows (all of them, as a multiset
    /// expanded into plain rows) are `rows`. Called with no rows for an
    /// operator without key columns (one key), whose output over nothing
    /// may be a row (a global aggregate's).
    fn compute(&self, rows: RecordBatch, task: &Arc<TaskContext>) -> Result<RecordBatch>;

    /// Removes from `rows` those whose output `watermarks` made final:
    /// no later input changes it, so the next recomputation need not see
    /// them (and emits nothing for them). `touched`: the keys the epoch
    /// changed. By default, none.
    fn forget_final(
        &mut self,
        _rows: &mut KeyedRows,
        _watermarks: &Watermarks,
        _touched: &[KeyId],
    ) -> Result<()> {
        Ok(())
    }
}

/// Keeps rows by key and recomputes touched keys (see the module
/// documentation).
#[derive(Debug)]
pub struct Recompute<R> {
    recomputation: R,
    input: KeyedRows,
    output_schema: SchemaRef,
    task: Arc<TaskContext>,
    /// Keys touched in this epoch.
    touched: HashSet<KeyId>,
    /// Their output before the epoch touched them.
    old: Vec<Changes>,
    /// The keys the last flushed epoch touched, until the cut's advance.
    flushed: Vec<KeyId>,
}

impl<R: Recomputation> Recompute<R> {
    /// Recomputes over the rows `input` keeps by key (no key columns: all
    /// rows are one key).
    pub(crate) fn with(recomputation: R, input: KeyedRows, output_schema: SchemaRef) -> Self {
        Recompute {
            recomputation,
            input,
            output_schema,
            task: Arc::new(TaskContext::default()),
            touched: HashSet::new(),
            old: Vec::new(),
            flushed: Vec::new(),
        }
    }

    fn keyless(&self) -> bool {
        self.input.key_exprs().is_empty()
    }

    /// The output of the keys whose rows are `rows`.
    fn compute(&self, rows: &Changes) -> Result<Changes> {
        if rows.is_empty() && !self.keyless() {
            return Ok(Changes::empty(self.output_schema.clone()));
        }
        let batch = self.recomputation.compute(rows.expand()?, &self.task)?;
        Changes::inserts(batch).with_schema(self.output_schema.clone())
    }
}

/// Runs `plan` (over rows in memory, one partition) to the end and
/// returns its rows as one batch.
pub(crate) fn run_in_memory(
    plan: Arc<dyn ExecutionPlan>,
    task: &Arc<TaskContext>,
) -> Result<RecordBatch> {
    let schema = plan.schema();
    // Everything is in memory and the plan has one partition, so
    // collecting it never waits on I/O or on other tasks. DataFusion's
    // streams take part in tokio's cooperative scheduling; run inside a
    // tokio task, an exhausted budget would park this poll until the task
    // yields, which it never does here. So the budget is lifted.
    let run = tokio::task::coop::unconstrained(collect(plan, task.clone()));
    let batches = futures::executor::block_on(run)?;
    Ok(concat_batches(&schema, &batches)?)
}

impl<R: Recomputation> Operator for Recompute<R> {
    fn initial(&mut self) -> Result<Vec<Changes>> {
        if self.keyless() {
            let nothing = Changes::empty(self.input.schema().clone());
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
        if !fresh.is_empty() || (self.keyless() && self.touched.is_empty()) {
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
        let after = self.input.rows_with_keys(touched.iter().copied())?;
        self.flushed = touched;
        let mut out: Vec<Changes> = self.old.drain(..).map(|c| c.negate()).collect();
        out.push(self.compute(&after)?);
        let difference = Changes::concat(&self.output_schema, &out)?.consolidate()?;
        Ok(vec![difference])
    }

    fn advance(&mut self, watermarks: &Watermarks) -> Result<Vec<Changes>> {
        let touched = std::mem::take(&mut self.flushed);
        self.recomputation
            .forget_final(&mut self.input, watermarks, &touched)?;
        Ok(Vec::new())
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
        // An operator without keys runs as one instance.
        let by_key = !self.keyless();
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
