//! Materialized views at run time: what one running view holds, and the
//! helpers that maintain its output table (rows with counts). The stream
//! worker (`worker.rs`) drives them.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use datafusion::arrow::array::{AsArray, Int64Array};
use datafusion::arrow::datatypes::{Int64Type, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::error::DataFusionError;
use weir_connectors::datagen::DatagenSpec;
use weir_state::{DeltaBatches, StateTable, TableId};
use weir_stream::{Changes, Dataflow};

use crate::database::WorkingState;
use crate::error::{SqlState, WeirError};

/// One running materialized view.
#[derive(Debug)]
pub struct ViewRuntime {
    /// The view's name.
    pub name: String,
    /// Its output state table's id.
    pub id: TableId,
    /// Its operators' state tables, in dataflow order.
    pub state_ids: Vec<TableId>,
    /// The operators.
    pub dataflow: Dataflow,
    /// Its output: rows with counts.
    pub output: StateTable,
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
    /// Its generator.
    pub spec: Arc<DatagenSpec>,
    /// The columns the view reads (the reader fills the others with
    /// zeros, which nothing reads); `None`: all.
    pub columns: Option<Vec<bool>>,
    /// Rows read so far.
    pub offset: u64,
}

/// The key of a view's reader position in the manifest.
pub fn offset_key(view_id: TableId, source_id: TableId) -> String {
    format!("{view_id}/{source_id}")
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
    pub fn take(
        &mut self,
        dataflow: &mut Dataflow,
        table: &mut StateTable,
    ) -> datafusion::error::Result<()> {
        let states = dataflow.checkpoint()?;
        self.states.resize_with(states.len(), Vec::new);
        for (delta, early) in states.into_iter().zip(&mut self.states) {
            early.extend(delta);
        }
        let output = table
            .take_delta()
            .map_err(|e| DataFusionError::External(Box::new(e)))?;
        self.output.extend(output);
        Ok(())
    }
}

/// Fails with 53200 (out of memory) if a view's state holds more than
/// `budget` bytes: its operators' state and its output table, counted from
/// the allocations they hold.
pub fn check_memory(
    name: &str,
    dataflow: &Dataflow,
    output: &StateTable,
    budget: usize,
) -> datafusion::error::Result<()> {
    let used = dataflow.memory_size() + output.memory_size();
    if used <= budget {
        return Ok(());
    }
    let mib = |bytes: usize| bytes.div_ceil(1 << 20);
    let error = WeirError::new(
        SqlState::OUT_OF_MEMORY,
        format!(
            "materialized view \"{name}\" needs {} MiB for its state, more than its budget of {} MiB",
            mib(used),
            mib(budget)
        ),
    )
    .with_hint(
        "Start the server with a larger --view-memory-mb, or define the view to keep less \
         state (fewer groups, a filter before a join); weir_view_operators shows each \
         operator's state.",
    );
    Err(DataFusionError::External(Box::new(error)))
}

/// The changes of every relation in one step.
pub type RelationChanges = HashMap<String, Vec<Changes>>;

/// Takes the changes every tracked table recorded since the last call.
pub fn take_table_changes(working: &mut WorkingState) -> RelationChanges {
    let mut changes = RelationChanges::new();
    for def in working.catalog.tables.values() {
        if let Some(table) = working.tables.get_mut(&def.id) {
            let taken: Vec<Changes> = table
                .take_changes()
                .into_iter()
                .map(|(rows, weight)| {
                    let weights = Int64Array::from_value(weight, rows.num_rows());
                    Changes { rows, weights }
                })
                .collect();
            if !taken.is_empty() {
                changes.insert(def.name.clone(), taken);
            }
        }
    }
    changes
}

/// Adds a view's output changes to its output table (keyed rows, or rows
/// with counts). Returns the net changes, which downstream views consume.
pub fn apply_output(
    table: &mut StateTable,
    out: Vec<Changes>,
) -> datafusion::error::Result<Changes> {
    if !crate::catalog::is_counted(table.spec()) {
        return apply_keyed(table, out);
    }
    let spec = table.spec().clone();
    let width = spec.schema.fields().len() - 1;
    let view_schema: SchemaRef = Arc::new(spec.schema.project(&(0..width).collect::<Vec<_>>())?);
    let parts = out
        .into_iter()
        .map(|c| c.with_schema(view_schema.clone()))
        .collect::<datafusion::error::Result<Vec<_>>>()?;
    let all = Changes::concat(&view_schema, &parts)?;
    // Rows that cancel within the changes cancel in the table as well; the
    // table sums each row's weights (one key lookup per row), so the
    // changes are passed on unconsolidated.
    table
        .add_counts(&all.rows, all.weights.values())
        .map_err(|e| DataFusionError::External(Box::new(e)))?;
    Ok(all)
}

/// [`apply_output`] for a view whose output has a unique key: its rows
/// are stored once, by key. Within the changes, a key is deleted at most
/// once (its old row) and inserted at most once (its new row); anything
/// else means the key was not unique, a bug in the planner.
fn apply_keyed(table: &mut StateTable, out: Vec<Changes>) -> datafusion::error::Result<Changes> {
    let schema = table.spec().schema.clone();
    let parts = out
        .into_iter()
        .map(|c| c.with_schema(schema.clone()))
        .collect::<datafusion::error::Result<Vec<_>>>()?;
    let all = Changes::concat(&schema, &parts)?;
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
    table
        .apply_keyed(&net.rows, weights)
        .map_err(|e| DataFusionError::External(Box::new(e)))?;
    Ok(net)
}

/// The rows of a view's output table as a plain batch (each row repeated
/// by its count), projected to `projection` of the view's columns.
pub fn expand_counted(
    batch: &RecordBatch,
    projection: Option<&[usize]>,
) -> datafusion::error::Result<RecordBatch> {
    let width = batch.num_columns() - 1;
    let counts = batch.column(width).as_primitive::<Int64Type>().clone();
    let all: Vec<usize> = (0..width).collect();
    let rows = batch.project(projection.unwrap_or(&all))?;
    Changes::new(rows, counts)?.expand()
}

/// Turns table change tracking on exactly for the tables that running or
/// pending views read.
pub fn refresh_tracking(working: &mut WorkingState) {
    let read: BTreeSet<String> = working
        .catalog
        .materialized_views
        .values()
        .flat_map(|v| v.depends_on.iter().cloned())
        .chain(working.pending.values().flat_map(|s| s.iter().cloned()))
        .collect();
    for def in working.catalog.tables.values() {
        if let Some(table) = working.tables.get_mut(&def.id) {
            table.track_changes(read.contains(&def.name));
        }
    }
}
