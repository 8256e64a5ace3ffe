//! The server's side of materialized views at run time: the table changes
//! it hands the stream runtime (`weir_stream::runtime`), which tables track
//! changes, and how readers see a view's output table.

use std::collections::BTreeSet;

use datafusion::arrow::array::{AsArray, Int64Array};
use datafusion::arrow::datatypes::Int64Type;
use datafusion::arrow::record_batch::RecordBatch;
use weir_stream::runtime::RelationChanges;
use weir_stream::Changes;

use crate::database::WorkingState;

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
