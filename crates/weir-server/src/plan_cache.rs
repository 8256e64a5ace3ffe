//! Plans that prepared queries reuse: a prepared `SELECT` is planned once
//! (SQL to DataFusion's logical plan) per catalog and time zone, and each
//! later execution rebinds that plan's scans to the rows of its own read
//! snapshot, binds its parameters and runs it. DataFusion still optimizes
//! and physically plans each execution: it cannot bind parameters into a
//! physical plan (a point read skips that too, `point_read.rs`).
//!
//! Only plans whose every scan reads a table or materialized view (also
//! through plain views) are kept: system tables, `pg_catalog` and sources
//! are read as they are when planned, so such queries are planned anew.
//! A kept plan holds no rows: its scans are emptied until rebound.

use std::sync::Arc;

use datafusion::arrow::record_batch::RecordBatch;
use datafusion::catalog::view::ViewTable;
use datafusion::catalog::TableProvider;
use datafusion::common::tree_node::Transformed;
use datafusion::datasource::{provider_as_source, source_as_provider};
use datafusion::error::DataFusionError;
use datafusion::logical_expr::LogicalPlan;
use parking_lot::Mutex;
use weir_state::TableSnapshot;

use crate::catalog::Catalog;
use crate::database::DbSnapshot;
use crate::provider::SnapshotTable;

/// One prepared query's kept plan.
#[derive(Debug, Default)]
pub struct PlanCache {
    kept: Mutex<Option<Kept>>,
}

/// A plan and what it was planned under.
#[derive(Debug)]
struct Kept {
    catalog: Arc<Catalog>,
    time_zone: String,
    plan: LogicalPlan,
}

impl PlanCache {
    /// The kept plan, bound to `snapshot`'s rows, if it was planned under
    /// the same catalog and time zone.
    pub fn get(&self, snapshot: &DbSnapshot, time_zone: &str) -> Option<LogicalPlan> {
        let kept = self.kept.lock();
        let kept = kept.as_ref()?;
        let same_catalog =
            Arc::ptr_eq(&kept.catalog, &snapshot.catalog) || *kept.catalog == *snapshot.catalog;
        if !same_catalog || kept.time_zone != time_zone {
            return None;
        }
        rebind(&kept.plan, &|name, _| rows_of(snapshot, name))
    }

    /// Keeps `plan` (planned under `snapshot`'s catalog and `time_zone`)
    /// if it can be rebound.
    pub fn keep(&self, plan: &LogicalPlan, snapshot: &DbSnapshot, time_zone: &str) {
        let emptied = rebind(plan, &|_, rows| {
            let spec = rows.spec().clone();
            let empty = RecordBatch::new_empty(spec.schema.clone());
            Some(TableSnapshot::from_rows(spec, empty))
        });
        if let Some(plan) = emptied {
            *self.kept.lock() = Some(Kept {
                catalog: snapshot.catalog.clone(),
                time_zone: time_zone.to_owned(),
                plan,
            });
        }
    }
}

/// The rows of relation `name` (a table or materialized view) in
/// `snapshot`.
fn rows_of(snapshot: &DbSnapshot, name: &str) -> Option<TableSnapshot> {
    let catalog = &snapshot.catalog;
    let id = match catalog.tables.get(name) {
        Some(table) => table.id,
        None => catalog.materialized_views.get(name)?.id,
    };
    snapshot.tables.get(&id).cloned()
}

/// `plan` with each scan of a relation reading `rows(name, current rows)`
/// instead; `None` if a scan reads anything else or `rows` has none.
fn rebind(
    plan: &LogicalPlan,
    rows: &dyn Fn(&str, &TableSnapshot) -> Option<TableSnapshot>,
) -> Option<LogicalPlan> {
    let not_reusable = || DataFusionError::Plan("not reusable".into());
    plan.clone()
        .transform_up_with_subqueries(|node| {
            let LogicalPlan::TableScan(mut scan) = node else {
                return Ok(Transformed::no(node));
            };
            let provider = source_as_provider(&scan.source)?;
            let rebound: Arc<dyn TableProvider> =
                if let Some(table) = provider.downcast_ref::<SnapshotTable>() {
                    let fresh = table
                        .rows()
                        .and_then(|current| rows(table.relation(), current))
                        .ok_or_else(not_reusable)?;
                    Arc::new(table.at(fresh))
                } else if let Some(view) = provider.downcast_ref::<ViewTable>() {
                    let inner = rebind(view.logical_plan(), rows).ok_or_else(not_reusable)?;
                    Arc::new(ViewTable::new(inner, view.definition().cloned()))
                } else {
                    return Err(not_reusable());
                };
            scan.source = provider_as_source(rebound);
            Ok(Transformed::yes(LogicalPlan::TableScan(scan)))
        })
        .ok()
        .map(|t| t.data)
}
