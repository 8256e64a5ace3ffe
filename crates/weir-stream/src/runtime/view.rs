//! One running materialized view: its operators, its output table (rows
//! by key, or rows with counts), the sources it reads, and its memory
//! budget.

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::error::DataFusionError;
use weir_state::{DeltaBatches, StateTable, TableId, TableSpec};

use super::source::Source;
use crate::{Changes, Dataflow, Result, StreamPlan};

/// The column of a view's output table that counts each row, when nothing
/// narrower than all its columns is unique.
pub const COUNT_COLUMN: &str = "__weir_count";

/// The changes of every relation in one step.
pub type RelationChanges = HashMap<String, Vec<Changes>>;

/// One running materialized view.
#[derive(Debug)]
pub struct ViewRuntime {
    /// The view's name.
    pub name: String,
    /// Its output state table's id.
    pub id: TableId,
    /// Its operators' state tables, in dataflow order.
    pub state_ids: Vec<TableId>,
    /// Its plan, which a view that runs partitioned instantiates once
    /// per worker.
    pub plan: StreamPlan,
    /// What a process of a cluster other than the coordinator's needs to
    /// plan it again (the server's encoding, read by its
    /// [`ViewBuilder`](super::ViewBuilder)).
    pub definition: String,
    /// The materialized views it reads (what else it reads are tables
    /// and sources).
    pub reads_views: std::collections::BTreeSet<String>,
    /// The operators.
    pub dataflow: Dataflow,
    /// The operator state tables' rows as recovered (every state table,
    /// in dataflow order), for a view that runs partitioned; `None` for a
    /// new view.
    pub restored: Option<Vec<RecordBatch>>,
    /// Its output: rows by key, or rows with counts; empty for a sink.
    pub output: StateTable,
    /// Where a sink's output goes instead of `output`.
    pub sink: Option<Box<dyn super::Sink>>,
    /// The sources it reads through readers of its own.
    pub sources: Vec<SourceInput>,
    /// State deltas taken before it started running (its backfill), to be
    /// committed with its first epoch.
    pub early: EarlyDeltas,
}

/// A source a view reads, and where its reader stands.
#[derive(Debug, Clone)]
pub struct SourceInput {
    /// The source's catalog id.
    pub source_id: TableId,
    /// The source's name (the relation its dataflow reads).
    pub name: String,
    /// The connector that reads it.
    pub source: Arc<dyn Source>,
    /// The columns the view reads; `None`: all.
    pub columns: Option<Vec<bool>>,
    /// Every split's position as last checkpointed (one per split of the
    /// source).
    pub positions: Vec<u64>,
}

/// A new view's state deltas taken off the lock and off the stream worker
/// (its backfill, catch-up rounds), for the epoch that starts it: gathering
/// a large view's state at a barrier would stall every other view.
#[derive(Debug, Default)]
pub struct EarlyDeltas {
    /// The output table's deltas.
    pub output: Vec<DeltaBatches>,
    /// Each operator state's deltas, in dataflow order.
    pub states: Vec<Vec<DeltaBatches>>,
}

impl EarlyDeltas {
    /// Takes what changed in the operators' states and the output table.
    /// The dataflow must have been flushed.
    pub fn take(&mut self, dataflow: &mut Dataflow, table: &mut StateTable) -> Result<()> {
        let states = dataflow.checkpoint()?;
        self.states.resize_with(states.len(), Vec::new);
        for (delta, early) in states.into_iter().zip(&mut self.states) {
            early.extend(delta);
        }
        self.output.extend(table.take_delta().map_err(external)?);
        Ok(())
    }
}

/// A view's state outgrew its budget (`--view-memory-mb`). The server
/// reports it as SQLSTATE 53200 (out of memory).
#[derive(Debug, Clone)]
pub struct MemoryBudgetExceeded {
    /// The view.
    pub view: String,
    /// Bytes its state holds.
    pub used: usize,
    /// Bytes it may hold.
    pub budget: usize,
}

impl std::fmt::Display for MemoryBudgetExceeded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mib = |bytes: usize| bytes.div_ceil(1 << 20);
        write!(
            f,
            "materialized view \"{}\" needs {} MiB for its state, more than its budget of {} MiB",
            self.view,
            mib(self.used),
            mib(self.budget)
        )
    }
}

impl std::error::Error for MemoryBudgetExceeded {}

/// Fails with [`MemoryBudgetExceeded`] if a view's state holds more than
/// `budget` bytes: its operators' state and its output table, counted from
/// the allocations they hold.
pub fn check_memory(
    name: &str,
    dataflow: &Dataflow,
    output: &StateTable,
    budget: usize,
) -> Result<()> {
    within_budget(name, dataflow.memory_size() + output.memory_size(), budget)
}

/// Fails with [`MemoryBudgetExceeded`] if `used` bytes of a view's state
/// are more than `budget`.
pub(super) fn within_budget(name: &str, used: usize, budget: usize) -> Result<()> {
    if used <= budget {
        return Ok(());
    }
    Err(DataFusionError::External(Box::new(MemoryBudgetExceeded {
        view: name.to_owned(),
        used,
        budget,
    })))
}

/// Whether a view output table of `spec` stores a count with each row.
pub fn is_counted(spec: &TableSpec) -> bool {
    spec.schema
        .fields()
        .last()
        .is_some_and(|f| f.name() == COUNT_COLUMN)
}

/// How many of the columns of an output table of `spec` are the view's
/// (all but the count, if it has one).
fn view_width(spec: &TableSpec) -> usize {
    spec.schema.fields().len() - usize::from(is_counted(spec))
}

/// The schema of the view's rows of an output table of `spec`.
fn view_schema(spec: &TableSpec) -> Result<SchemaRef> {
    let columns: Vec<usize> = (0..view_width(spec)).collect();
    Ok(Arc::new(spec.schema.project(&columns)?))
}

/// A view's output changes as one batch under its own column names.
fn view_rows(spec: &TableSpec, out: Vec<Changes>) -> Result<Changes> {
    let schema = view_schema(spec)?;
    let parts = out
        .into_iter()
        .map(|c| c.with_schema(schema.clone()))
        .collect::<Result<Vec<_>>>()?;
    Changes::concat(&schema, &parts)
}

impl ViewRuntime {
    /// A new sink's output so far (its backfill and catch-up, which went
    /// into its output table before it ran): handed to its sink as
    /// changes, the table emptied, its deltas dropped. Returns the rows
    /// handed over; 0 for a view that is not a sink.
    pub fn hand_over_backfill(&mut self) -> Result<usize> {
        let Some(sink) = self.sink.as_mut() else {
            return Ok(0);
        };
        let spec = self.output.spec().clone();
        let width = view_width(&spec);
        let schema = view_schema(&spec)?;
        let mut handed = 0;
        for batch in self.output.snapshot().scan(None, false).map_err(external)? {
            let changes = match is_counted(&spec) {
                true => Changes::new(
                    batch.project(&(0..width).collect::<Vec<_>>())?,
                    crate::changes::as_weights(batch.column(width))?,
                )?,
                false => Changes::inserts(batch),
            }
            .with_schema(schema.clone())?;
            if !changes.is_empty() {
                handed += changes.len();
                sink.write(&changes)?;
            }
        }
        self.output = StateTable::new(spec).map_err(external)?;
        self.early.output.clear();
        Ok(handed)
    }
}

/// A view's output changes: to its sink if it is one (returned as one
/// batch of the output's columns), else into its output table (see
/// [`apply_output`]).
pub fn deliver(
    table: &mut StateTable,
    sink: Option<&mut Box<dyn super::Sink>>,
    out: Vec<Changes>,
) -> Result<Changes> {
    let Some(sink) = sink else {
        return apply_output(table, out);
    };
    let all = view_rows(table.spec(), out)?;
    if !all.is_empty() {
        sink.write(&all)?;
    }
    Ok(all)
}

/// Adds a view's output changes to its output table (keyed rows, or rows
/// with counts). Returns the net changes, which downstream views consume.
pub fn apply_output(table: &mut StateTable, out: Vec<Changes>) -> Result<Changes> {
    if !is_counted(table.spec()) {
        return apply_keyed(table, out);
    }
    let all = view_rows(table.spec(), out)?;
    // Rows that cancel within the changes cancel in the table as well; the
    // table sums each row's weights (one key lookup per row), so the
    // changes are passed on unconsolidated.
    table
        .add_counts(&all.rows, all.weights.values())
        .map_err(external)?;
    Ok(all)
}

/// [`apply_output`] for a view whose output has a unique key: its rows
/// are stored once, by key. Within the changes, a key is deleted at most
/// once (its old row) and inserted at most once (its new row); anything
/// else means the key was not unique, a bug in the planner.
fn apply_keyed(table: &mut StateTable, out: Vec<Changes>) -> Result<Changes> {
    let all = view_rows(table.spec(), out)?;
    // Inserts alone cannot cancel each other: no need to consolidate.
    let net = if all.weights.values().iter().all(|&w| w == 1) {
        all
    } else {
        all.consolidate()?
    };
    if net.is_empty() {
        return Ok(net);
    }
    let weights = net.weights.values();
    if weights.iter().any(|&w| w != 1 && w != -1) {
        return Err(DataFusionError::Internal(
            "a materialized view's key is not unique".into(),
        ));
    }
    table.apply_keyed(&net.rows, weights).map_err(external)?;
    Ok(net)
}

/// Pushes queued changes through a new view's operators and ends the
/// epoch, so that its output is complete: the operators' results do not
/// depend on how changes are cut into batches (a temporal join's depend
/// on the order its two inputs' changes come in, which is kept).
pub fn catch_up(dataflow: &mut Dataflow, queue: Vec<RelationChanges>) -> Result<Vec<Changes>> {
    let mut out = Vec::new();
    for step in queue {
        for (relation, changes) in step {
            for change in changes {
                out.extend(dataflow.push(&relation, change)?);
            }
        }
    }
    out.extend(dataflow.flush()?);
    Ok(out)
}

/// Each state table's rows after `deltas` (in order, from empty), as a
/// restart would load them from the store.
pub(super) fn full_state(
    specs: &[TableSpec],
    deltas: &[Vec<DeltaBatches>],
) -> Result<Vec<RecordBatch>> {
    specs
        .iter()
        .enumerate()
        .map(|(i, spec)| {
            let deltas = deltas.get(i).map(Vec::as_slice).unwrap_or_default();
            weir_state::rows_after(spec, deltas).map_err(external)
        })
        .collect()
}

fn external(e: weir_state::StateError) -> DataFusionError {
    DataFusionError::External(Box::new(e))
}
