//! DataFusion's view of Weir's tables: every statement plans against one
//! pinned [`DbSnapshot`], so a query reads all tables at the same epoch.

use std::sync::{Arc, RwLock, Weak};

use async_trait::async_trait;
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::catalog::view::ViewTable;
use datafusion::catalog::{SchemaProvider, Session, TableProvider};
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::datasource::TableType;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::session_state::SessionState;
use datafusion::logical_expr::{col, Expr, LogicalPlanBuilder, TableProviderFilterPushDown};
use datafusion::physical_plan::ExecutionPlan;
use weir_state::TableSnapshot;

use crate::catalog::{ColumnDef, ViewDef};
use crate::database::{Database, DbSnapshot};
use crate::lookup::{Lookup, LookupExec, Order};
use crate::lookup_join::SnapshotScanExec;
use crate::numeric_display::DisplayScale;
use crate::system;

/// The name under which a DML statement's target table is planned; its
/// scan also yields each row's position.
pub const DML_TARGET: &str = "__weir_dml_target";
/// The position column of the DML target.
pub const POSITION_COLUMN: &str = "__weir_position";

/// The snapshot a session's statements currently plan against.
#[derive(Debug)]
pub struct PinnedSnapshot {
    current: RwLock<Arc<DbSnapshot>>,
    dml_target: RwLock<Option<DmlTarget>>,
}

/// The table a DML statement changes: its rows, name and orders.
#[derive(Debug, Clone)]
struct DmlTarget {
    table: TableSnapshot,
    name: String,
    orders: Vec<Order>,
}

impl PinnedSnapshot {
    /// Pins `snapshot` for the statements that follow.
    pub fn new(snapshot: Arc<DbSnapshot>) -> Self {
        PinnedSnapshot {
            current: RwLock::new(snapshot),
            dml_target: RwLock::new(None),
        }
    }

    /// Replaces the pinned snapshot.
    pub fn pin(&self, snapshot: Arc<DbSnapshot>) {
        *self.current.write().expect("pin lock") = snapshot;
        *self.dml_target.write().expect("pin lock") = None;
    }

    /// The pinned snapshot.
    pub fn get(&self) -> Arc<DbSnapshot> {
        self.current.read().expect("pin lock").clone()
    }

    /// Makes [`DML_TARGET`] resolve to `table` (relation `name`, whose
    /// rows can be looked up by `orders`) until the next pin.
    pub fn set_dml_target(&self, table: TableSnapshot, name: &str, orders: Vec<Order>) {
        *self.dml_target.write().expect("pin lock") = Some(DmlTarget {
            table,
            name: name.to_owned(),
            orders,
        });
    }
}

/// The `public` schema: tables and views of the pinned snapshot.
#[derive(Debug)]
pub struct PublicSchema {
    pinned: Arc<PinnedSnapshot>,
    session: Weak<parking_lot::RwLock<SessionState>>,
    /// The system tables' source; `None` where only views are planned.
    db: Option<Arc<Database>>,
}

impl PublicSchema {
    /// A schema reading `pinned`; views are planned with `session`'s
    /// state; system tables come from `db`, if given.
    pub fn new(
        pinned: Arc<PinnedSnapshot>,
        session: Weak<parking_lot::RwLock<SessionState>>,
        db: Option<Arc<Database>>,
    ) -> Self {
        PublicSchema {
            pinned,
            session,
            db,
        }
    }

    /// The session's time zone, as Arrow labels timestamps.
    fn time_zone(&self) -> String {
        self.session
            .upgrade()
            .and_then(|state| state.read().config().options().execution.time_zone.clone())
            .unwrap_or_else(|| "+00:00".into())
    }

    async fn view(&self, view: &ViewDef) -> Result<Arc<dyn TableProvider>> {
        let state = self
            .session
            .upgrade()
            .ok_or_else(|| DataFusionError::Internal("session is gone".into()))?
            .read()
            .clone();
        let mut statements = weir_sql::parse(&view.query)
            .map_err(|e| DataFusionError::Plan(format!("view \"{}\": {e}", view.name)))?;
        let Some(weir_sql::WeirStatement::Sql(statement)) = statements.pop() else {
            return Err(DataFusionError::Plan(format!(
                "view \"{}\" is not a query",
                view.name
            )));
        };
        let mut plan = crate::session::plan_statement(&state, *statement).await?;
        if !view.columns.is_empty() {
            let renamed: Vec<Expr> = plan
                .schema()
                .columns()
                .into_iter()
                .zip(&view.columns)
                .map(|(c, name)| col(c).alias(name))
                .collect();
            plan = LogicalPlanBuilder::from(plan).project(renamed)?.build()?;
        }
        Ok(Arc::new(ViewTable::new(plan, Some(view.query.clone()))))
    }
}

#[async_trait]
impl SchemaProvider for PublicSchema {
    fn table_names(&self) -> Vec<String> {
        self.pinned.get().catalog.relation_names()
    }

    async fn table(&self, name: &str) -> Result<Option<Arc<dyn TableProvider>>> {
        if name == DML_TARGET {
            let target = self.pinned.dml_target.read().expect("pin lock").clone();
            return Ok(target.map(|t| {
                Arc::new(SnapshotTable::new(t.table, true).ordered(&t.name, t.orders)) as _
            }));
        }
        let snapshot = self.pinned.get();
        if let Some(def) = snapshot.catalog.tables.get(name) {
            let table =
                snapshot.tables.get(&def.id).cloned().ok_or_else(|| {
                    DataFusionError::Internal(format!("no snapshot of table {name}"))
                })?;
            return Ok(Some(Arc::new(
                SnapshotTable::new(table, false)
                    .in_zone(&self.time_zone())
                    .displayed(def.columns.iter().map(table_display_scale))
                    .ordered(name, snapshot.catalog.orders(name)),
            )));
        }
        if let Some(view) = snapshot.catalog.views.get(name) {
            return self.view(view).await.map(Some);
        }
        if let Some(view) = snapshot.catalog.materialized_views.get(name) {
            if view.sink.is_some() {
                let error = crate::error::WeirError::new(
                    crate::error::SqlState::WRONG_OBJECT_TYPE,
                    format!("\"{name}\" is a sink: its rows go to its connector, not to a table"),
                );
                return Err(DataFusionError::External(Box::new(error)));
            }
            if let Some(failure) = &view.failed {
                let mut error = crate::error::WeirError::new(
                    crate::error::SqlState(crate::error::leak_code(&failure.sqlstate)),
                    format!(
                        "materialized view \"{name}\" is no longer maintained: {}",
                        failure.message
                    ),
                )
                .with_detail("Drop the view and create it again.");
                error.hint = failure.hint.clone();
                return Err(DataFusionError::External(Box::new(error)));
            }
            let table = snapshot.tables.get(&view.id).cloned().ok_or_else(|| {
                DataFusionError::Internal(format!("no snapshot of materialized view {name}"))
            })?;
            let zone = self.time_zone();
            if view.key.is_some() {
                return Ok(Some(Arc::new(
                    SnapshotTable::new(table, false)
                        .in_zone(&zone)
                        .displayed(view.columns.iter().map(|c| c.display_scale))
                        .ordered(name, snapshot.catalog.orders(name)),
                )));
            }
            return Ok(Some(Arc::new(
                SnapshotTable::counted(table, view.schema())
                    .in_zone(&zone)
                    .displayed(view.columns.iter().map(|c| c.display_scale))
                    .ordered(name, snapshot.catalog.orders(name)),
            )));
        }
        if let Some(source) = snapshot.catalog.sources.get(name) {
            return Ok(Some(Arc::new(crate::source::SourceTable::new(source))));
        }
        if let (Some(sequence), Some(db)) = (snapshot.catalog.sequences.get(name), &self.db) {
            let row = db
                .sequences
                .relation(sequence)
                .map_err(|e| DataFusionError::External(Box::new(e)))?;
            let table = datafusion::catalog::MemTable::try_new(row.schema(), vec![vec![row]])?;
            return Ok(Some(Arc::new(table)));
        }
        match &self.db {
            Some(db) => system::table(db, &snapshot, name).transpose(),
            None => Ok(None),
        }
    }

    async fn table_type(&self, name: &str) -> Result<Option<TableType>> {
        let snapshot = self.pinned.get();
        Ok(
            if snapshot.catalog.tables.contains_key(name)
                || snapshot
                    .catalog
                    .materialized_views
                    .get(name)
                    .is_some_and(|v| v.sink.is_none())
                || snapshot.catalog.sources.contains_key(name)
            {
                Some(TableType::Base)
            } else if snapshot.catalog.views.contains_key(name) {
                Some(TableType::View)
            } else {
                None
            },
        )
    }

    fn table_exist(&self, name: &str) -> bool {
        self.pinned.get().catalog.kind_of(name).is_some()
    }
}

/// How a table's `column` is written: as its definition says, or, for a
/// table created before definitions said it, as its declared type does.
fn table_display_scale(column: &ColumnDef) -> Option<DisplayScale> {
    column
        .display_scale
        .or_else(|| crate::numeric_display::stored_scale(&column.data_type, column.declared))
}

/// A table at one epoch, scanned from memory.
#[derive(Debug, Clone)]
pub struct SnapshotTable {
    table: TableSnapshot,
    schema: SchemaRef,
    with_positions: bool,
    /// A materialized view's rows: the last column counts each row.
    counted: bool,
    /// `timestamptz` columns are shown in the session's zone: scans
    /// relabel them (the stored label is UTC).
    relabelled: bool,
    /// Each column's [`ColumnDef::display_scale`] (empty: none).
    display_scales: Vec<Option<DisplayScale>>,
    /// The relation's name, as `EXPLAIN` shows a lookup in it.
    relation: String,
    /// The orders its rows can be looked up by (`lookup.rs`).
    orders: Vec<Order>,
}

impl SnapshotTable {
    /// A provider over a materialized view's output table, whose rows
    /// carry counts; scans repeat each row by its count. `schema` is the
    /// view's.
    pub fn counted(table: TableSnapshot, schema: SchemaRef) -> Self {
        SnapshotTable {
            table,
            schema,
            with_positions: false,
            counted: true,
            relabelled: false,
            display_scales: Vec::new(),
            relation: String::new(),
            orders: Vec::new(),
        }
    }

    /// A provider over `table`; `with_positions` adds [`POSITION_COLUMN`].
    pub fn new(table: TableSnapshot, with_positions: bool) -> Self {
        let visible = table.spec().visible_schema();
        let schema = if with_positions {
            let mut fields: Vec<_> = visible.fields().iter().cloned().collect();
            fields.push(Arc::new(Field::new(
                POSITION_COLUMN,
                DataType::UInt64,
                false,
            )));
            Arc::new(Schema::new(fields))
        } else {
            visible
        };
        SnapshotTable {
            table,
            schema,
            with_positions,
            counted: false,
            relabelled: false,
            display_scales: Vec::new(),
            relation: String::new(),
            orders: Vec::new(),
        }
    }

    /// The table with its columns' `numeric` values written with
    /// `scales` (`numeric_display.rs`).
    pub fn displayed(mut self, scales: impl Iterator<Item = Option<DisplayScale>>) -> Self {
        self.display_scales = scales.collect();
        self
    }

    /// The fewest fraction digits column `index`'s values are written
    /// with, if its definition says.
    pub fn display_scale(&self, index: usize) -> Option<DisplayScale> {
        self.display_scales.get(index).copied().flatten()
    }

    /// The table of relation `name`, whose rows can be looked up by
    /// `orders`.
    pub fn ordered(mut self, name: &str, orders: Vec<Order>) -> Self {
        self.relation = name.to_owned();
        self.orders = orders;
        self
    }

    /// The table read in time zone `zone` (`time_zone.rs`).
    pub fn in_zone(mut self, zone: &str) -> Self {
        if let Some(schema) = crate::time_zone::relabel_schema(&self.schema, zone) {
            self.schema = schema;
            self.relabelled = true;
        }
        self
    }
}

#[async_trait]
impl TableProvider for SnapshotTable {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> Result<Vec<TableProviderFilterPushDown>> {
        Ok(filters
            .iter()
            .map(|f| {
                if crate::lookup::usable(f, &self.schema, &self.orders) {
                    TableProviderFilterPushDown::Inexact
                } else {
                    TableProviderFilterPushDown::Unsupported
                }
            })
            .collect())
    }

    async fn scan(
        &self,
        _state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        _limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let to_df = |e: weir_state::StateError| DataFusionError::External(Box::new(e));
        let lookup = crate::lookup::plan(
            filters,
            &self.schema,
            &self.table.spec().schema,
            &self.orders,
        );
        if self.with_positions {
            let found = match &lookup {
                Some(lookup) => self
                    .table
                    .select(&lookup.columns, &lookup.selection, None, true)
                    .map_err(to_df)?,
                None => None,
            };
            let (batches, lookup) = match found {
                Some(batches) => (batches, lookup),
                None => (self.table.scan(None, true).map_err(to_df)?, None),
            };
            let Some(lookup) = lookup else {
                let exec = MemorySourceConfig::try_new_exec(
                    &[batches],
                    self.schema.clone(),
                    projection.cloned(),
                )?;
                return Ok(exec);
            };
            let (batches, schema) = match projection {
                Some(p) => (
                    batches
                        .iter()
                        .map(|b| b.project(p))
                        .collect::<std::result::Result<Vec<_>, _>>()?,
                    Arc::new(self.schema.project(p)?),
                ),
                None => (batches, self.schema.clone()),
            };
            let batches = batches
                .into_iter()
                .map(|b| RecordBatch::try_new(schema.clone(), b.columns().to_vec()))
                .collect::<std::result::Result<Vec<_>, _>>()?;
            return Ok(Arc::new(LookupExec::new(
                &self.relation,
                &lookup,
                schema,
                batches,
            )));
        }
        let (batches, schema, looked_up) =
            self.read(projection.map(Vec::as_slice), lookup.as_ref())?;
        match lookup {
            Some(lookup) if looked_up => Ok(Arc::new(LookupExec::new(
                &self.relation,
                &lookup,
                schema,
                batches,
            ))),
            // A lookup join may narrow the scan of an ordered relation.
            _ if !self.orders.is_empty() => Ok(Arc::new(SnapshotScanExec::new(
                Arc::new(self.clone()),
                projection.cloned(),
                schema,
                batches,
            ))),
            _ => Ok(MemorySourceConfig::try_new_exec(&[batches], schema, None)?),
        }
    }
}

impl SnapshotTable {
    /// The relation's name.
    pub fn relation(&self) -> &str {
        &self.relation
    }

    /// The rows it reads, if it reads a named relation (not a DML
    /// target): a kept plan rebinds it to newer rows (`plan_cache.rs`).
    pub fn rows(&self) -> Option<&TableSnapshot> {
        (!self.relation.is_empty() && !self.with_positions).then_some(&self.table)
    }

    /// The same table reading `table`, the relation's rows at another
    /// epoch.
    pub fn at(&self, table: TableSnapshot) -> Self {
        SnapshotTable {
            table,
            ..self.clone()
        }
    }

    /// The orders its rows can be looked up by.
    pub fn orders(&self) -> &[Order] {
        &self.orders
    }

    /// The types its stored columns hold (probe values are cast to them).
    pub fn stored_schema(&self) -> &Schema {
        &self.table.spec().schema
    }

    /// The rows of `projection`: those `lookup` selects, if it is given
    /// and its columns can be looked up by order, else all of them. Also
    /// returns the rows' schema and whether the lookup was used. Not for
    /// a DML target (no positions).
    pub fn read(
        &self,
        projection: Option<&[usize]>,
        lookup: Option<&Lookup>,
    ) -> Result<(Vec<RecordBatch>, SchemaRef, bool)> {
        let to_df = |e: weir_state::StateError| DataFusionError::External(Box::new(e));
        // A counted view's rows are read whole, then repeated.
        let read = if self.counted { None } else { projection };
        let found = match lookup {
            Some(lookup) => self
                .table
                .select(&lookup.columns, &lookup.selection, read, false)
                .map_err(to_df)?,
            None => None,
        };
        let looked_up = found.is_some();
        let batches = match found {
            Some(batches) => batches,
            None => self.table.scan(read, false).map_err(to_df)?,
        };
        let batches = if self.counted {
            batches
                .iter()
                .map(|b| crate::views::expand_counted(b, projection))
                .collect::<Result<Vec<_>>>()?
        } else {
            batches
        };
        let schema = match projection {
            Some(p) => Arc::new(self.schema.project(p)?),
            None => self.schema.clone(),
        };
        let batches = if self.relabelled {
            batches
                .iter()
                .map(|batch| crate::time_zone::relabel_batch(batch, &schema))
                .collect::<Result<Vec<_>>>()?
        } else {
            batches
        };
        Ok((batches, schema, looked_up))
    }
}
