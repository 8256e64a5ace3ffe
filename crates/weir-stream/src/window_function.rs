//! [`RecomputeWindow`]: `OVER` window functions (`rank`, `dense_rank`,
//! `lag`, `lead`, `first_value`, `last_value`, `row_number`, aggregates
//! over frames, ...) in views.
//!
//! A window function's value for a row depends on the other rows of its
//! partition, so the operator keeps its input rows by partition and
//! recomputes each partition an epoch touched ([`Recompute`]) with
//! DataFusion's own `WindowAggExec` over the partition's rows, sorted by
//! the functions' partition and order keys. It emits the rows whose
//! values changed: a row added at the end of a partition changes its own
//! row (and those a frame reaches), a row added at the front renumbers the
//! partition. An epoch costs the size of the partitions it touched; a
//! function without `PARTITION BY` makes the whole input one partition.
//! (`ROW_NUMBER() ... <= n` is planned as [`crate::GroupTopNSpec`]
//! instead, which never recomputes a partition.)

use std::sync::Arc;

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::execution::TaskContext;
use datafusion::physical_expr::LexOrdering;
use datafusion::physical_plan::sorts::sort::SortExec;
use datafusion::physical_plan::windows::WindowAggExec;
use datafusion::physical_plan::ExecutionPlan;

use crate::plan::WindowSpec;
use weir_state::KeyId;

use crate::keyed_rows::KeyedRows;
use crate::recompute::{run_in_memory, Recomputation, Recompute};
use crate::session::{with_sessions, SessionExpiry};
use crate::watermark::Watermarks;
use crate::Result;

/// Window functions that recompute each touched partition (see the
/// module documentation).
pub type RecomputeWindow = Recompute<PartitionRows>;

/// A partition's rows with their window function values, from its rows.
#[derive(Debug)]
pub struct PartitionRows {
    spec: WindowSpec,
    input_schema: SchemaRef,
    output_schema: SchemaRef,
    /// For session functions under a watermark: how to forget the rows
    /// of final sessions.
    expiry: Option<SessionExpiry>,
}

impl Recomputation for PartitionRows {
    fn compute(&self, rows: RecordBatch, task: &Arc<TaskContext>) -> Result<RecordBatch> {
        if let Some(session) = &self.spec.session {
            // All partitions' sessions at once, without a plan per call.
            return with_sessions(&rows, &self.spec.partition, session, &self.output_schema);
        }
        let mut input: Arc<dyn ExecutionPlan> =
            MemorySourceConfig::try_new_exec(&[vec![rows]], self.input_schema.clone(), None)?;
        if let Some(order) = LexOrdering::new(self.spec.order.clone()) {
            input = Arc::new(SortExec::new(order, input));
        }
        let exec = WindowAggExec::try_new(self.spec.functions.clone(), input, false)?;
        run_in_memory(Arc::new(exec), task)
    }

    fn forget_final(
        &mut self,
        rows: &mut KeyedRows,
        watermarks: &Watermarks,
        touched: &[KeyId],
    ) -> Result<()> {
        match &mut self.expiry {
            Some(expiry) => expiry.forget_final(rows, watermarks, touched),
            None => Ok(()),
        }
    }
}

impl RecomputeWindow {
    /// The functions of `spec` over rows of `input_schema`, producing
    /// `output_schema` (the input's columns, then one per function).
    /// `append_only`: the input never deletes; `expiry`: the functions
    /// are session functions under a watermark, whose final sessions'
    /// rows are forgotten.
    pub fn new(
        spec: WindowSpec,
        input_schema: SchemaRef,
        output_schema: SchemaRef,
        append_only: bool,
        expiry: Option<SessionExpiry>,
    ) -> Result<Self> {
        let keys = spec.partition.clone();
        // Forgetting rows deletes them from the durable store, by id.
        let input = if append_only {
            KeyedRows::removable(input_schema.clone(), keys, expiry.is_some())?
        } else {
            KeyedRows::new(input_schema.clone(), keys, true)?
        };
        let rows = PartitionRows {
            spec,
            input_schema: input_schema.clone(),
            output_schema: output_schema.clone(),
            expiry,
        };
        Ok(Recompute::with(rows, input, output_schema))
    }
}
