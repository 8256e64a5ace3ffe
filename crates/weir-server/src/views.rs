//! Materialized views at run time: each view's dataflow, fed every epoch
//! with the rows its tables and upstream views changed, and the view's
//! output table that readers scan.
//!
//! ```text
//!  DML ──▶ StateTable changelog ─┐ at the cut of epoch E, under the working lock:
//!                                ├─▶ view 1 dataflow ─▶ output table 1 ─┐
//!                                └─▶ view 2 dataflow ◀── changes of 1 ──┘ ─▶ output table 2
//!  then every table, output table and operator state delta goes into E's one commit.
//! ```

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use datafusion::arrow::array::{AsArray, Int64Array};
use datafusion::arrow::datatypes::{Int64Type, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::error::DataFusionError;
use tracing::warn;
use weir_state::{StateTable, TableId};
use weir_stream::{Changes, Dataflow};

use crate::database::WorkingState;

/// One running materialized view.
#[derive(Debug)]
pub struct ViewRuntime {
    /// The view's name.
    pub name: String,
    /// Its output state table.
    pub output: TableId,
    /// Its operators' state tables, in dataflow order.
    pub state_ids: Vec<TableId>,
    /// The operators.
    pub dataflow: Dataflow,
}

/// A view being created: from its snapshot on, the changes of every epoch
/// to the relations it reads, for it to catch up on before it runs.
#[derive(Debug)]
pub struct PendingView {
    /// Tells pending views apart.
    pub token: u64,
    /// The relations it reads.
    pub sources: BTreeSet<String>,
    /// Per epoch: each source's changes.
    pub queue: Vec<HashMap<String, Vec<Changes>>>,
}

/// The changes of every relation in one step.
pub type RelationChanges = HashMap<String, Vec<Changes>>;

/// Pushes the changes made since the last call through every running
/// view, in dependency order, and updates their output tables. A view
/// whose query fails on the new rows (a division by zero, an overflow)
/// stops and is marked failed; the others go on.
pub fn run_epoch(working: &mut WorkingState) {
    let WorkingState {
        catalog,
        tables,
        views,
        pending,
        epoch,
        ..
    } = working;
    let epoch = *epoch;
    let mut changes: RelationChanges = HashMap::new();
    for def in catalog.tables.values() {
        if let Some(table) = tables.get_mut(&def.id) {
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
    if changes.is_empty() {
        return;
    }
    for view in views.iter_mut() {
        let Some(def) = catalog.materialized_views.get(&view.name) else {
            continue;
        };
        if def.failed.is_some() {
            continue;
        }
        let failed_source = def.depends_on.iter().find(|s| {
            catalog
                .materialized_views
                .get(*s)
                .is_some_and(|d| d.failed.is_some())
        });
        let outcome = match failed_source {
            Some(source) => Err(format!("it reads \"{source}\", which failed")),
            None => step(view, tables, &changes).map_err(|e| {
                let error = crate::error::WeirError::from_datafusion(e);
                format!("{} (SQLSTATE {})", error.message, error.code.0)
            }),
        };
        match outcome {
            Ok(out) if out.is_empty() => {}
            Ok(out) => {
                changes.insert(view.name.clone(), vec![out]);
            }
            Err(reason) => {
                warn!(view = %view.name, %reason, "materialized view failed");
                let def = catalog
                    .materialized_views
                    .get_mut(&view.name)
                    .expect("running views are in the catalog");
                def.failed = Some(format!("{reason} at epoch {epoch}"));
            }
        }
    }
    // A failed view stops for good: its operators and their state go.
    views.retain(|v| {
        catalog
            .materialized_views
            .get(&v.name)
            .is_some_and(|d| d.failed.is_none())
    });
    for view in pending.iter_mut() {
        let relevant: RelationChanges = changes
            .iter()
            .filter(|(name, _)| view.sources.contains(*name))
            .map(|(name, c)| (name.clone(), c.clone()))
            .collect();
        if !relevant.is_empty() {
            view.queue.push(relevant);
        }
    }
}

/// One view's step: its dataflow on `changes`, then its output table.
fn step(
    view: &mut ViewRuntime,
    tables: &mut HashMap<TableId, StateTable>,
    changes: &RelationChanges,
) -> datafusion::error::Result<Changes> {
    let out = view
        .dataflow
        .step(&|relation| changes.get(relation).cloned().unwrap_or_default())?;
    let table = tables
        .get_mut(&view.output)
        .ok_or_else(|| DataFusionError::Internal(format!("no output table for {}", view.name)))?;
    apply_output(table, out)
}

/// Adds a view's output changes to its output table (rows with counts).
/// Returns the net changes, which downstream views consume.
pub fn apply_output(
    table: &mut StateTable,
    out: Vec<Changes>,
) -> datafusion::error::Result<Changes> {
    let spec = table.spec().clone();
    let width = spec.schema.fields().len() - 1;
    let view_schema: SchemaRef = Arc::new(spec.schema.project(&(0..width).collect::<Vec<_>>())?);
    let parts = out
        .into_iter()
        .map(|c| c.with_schema(view_schema.clone()))
        .collect::<datafusion::error::Result<Vec<_>>>()?;
    let net = Changes::concat(&view_schema, &parts)?.consolidate()?;
    if net.is_empty() {
        return Ok(net);
    }
    let to_df = |e: weir_state::StateError| DataFusionError::External(Box::new(e));
    let found = table.lookup(&net.rows).map_err(to_df)?;
    let positions: Vec<u64> = found.iter().filter_map(|m| m.existing).collect();
    let old_rows = table.rows_at(&positions).map_err(to_df)?;
    let old_counts = old_rows.column(width).as_primitive::<Int64Type>();
    // Merging each changed row's count with its stored count is one add per
    // changed row; the rows themselves move with `filter` kernels.
    let mut next_old = 0;
    let mut counts = Vec::with_capacity(net.len());
    for (m, &delta) in found.iter().zip(net.weights.values()) {
        let old = if m.existing.is_some() {
            next_old += 1;
            old_counts.value(next_old - 1)
        } else {
            0
        };
        let count = old + delta;
        if count < 0 {
            return Err(DataFusionError::Internal(
                "a view row would be removed more often than it was added".into(),
            ));
        }
        counts.push(count);
    }
    let counts = Int64Array::from(counts);
    let keep = datafusion::arrow::compute::kernels::cmp::gt(&counts, &Int64Array::new_scalar(0))?;
    let kept = datafusion::arrow::compute::filter_record_batch(&net.rows, &keep)?;
    let kept_counts = datafusion::arrow::compute::filter(&counts, &keep)?;
    let mut columns = kept.columns().to_vec();
    columns.push(kept_counts);
    let inserts = RecordBatch::try_new(spec.schema.clone(), columns)?;
    table
        .write(&positions, Some(&inserts))
        .map_err(to_df)?
        .map_err(|_| DataFusionError::Internal("view rows collided".into()))?;
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
        .chain(
            working
                .pending
                .iter()
                .flat_map(|p| p.sources.iter().cloned()),
        )
        .collect();
    for def in working.catalog.tables.values() {
        if let Some(table) = working.tables.get_mut(&def.id) {
            table.track_changes(read.contains(&def.name));
        }
    }
}
