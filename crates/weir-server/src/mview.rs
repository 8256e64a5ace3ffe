//! `CREATE`, `EXPLAIN CREATE` and recovery of materialized views.
//!
//! Creating a view never holds the working lock for its backfill:
//!
//! 1. Under the lock: plan the query, run the open epoch's changes so far
//!    through the existing views, take a snapshot S of every table and view
//!    (one consistent point), and register the new view as pending, so that
//!    from now on every epoch's changes to its inputs are queued for it.
//! 2. Without the lock: push S through the new view's operators and fill
//!    the view's output table with the result.
//! 3. Push the queued changes (everything after S) through, in rounds off
//!    the lock while much has queued up, the rest under the lock, and start
//!    running the view with the others. The
//!    statement returns once the epoch holding all this is committed.
//!
//! So the view starts from S and then sees every change after S exactly
//! once: no gap, no double count.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use datafusion::arrow::array::AsArray;
use datafusion::arrow::datatypes::Int64Type;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::execution::runtime_env::RuntimeEnv;
use datafusion::logical_expr::LogicalPlan;
use datafusion::sql::sqlparser::ast::{CreateView, Query, Statement, ViewColumnDef};
use tracing::{info, warn};
use weir_state::TableId;
use weir_stream::{Changes, Dataflow, StreamPlan};

use crate::catalog::{
    relation_name, ColumnDef, ConnectorDef, MaterializedViewDef, ObjectKind, ViewFailure,
};
use crate::database::{Database, DbSnapshot};
use crate::error::{SqlState, WeirError, WeirResult};
use crate::session::{Output, Session};
use crate::views::refresh_tracking;
use weir_stream::runtime::{
    apply_output, catch_up, check_memory, position_key, Command, EarlyDeltas, PendingQueue,
    SourceInput, ViewRuntime,
};

/// Rows per batch pushed through a new view's operators during backfill.
const BACKFILL_BATCH_ROWS: usize = 64 * 1024;

/// Rounds of catching up off the lock before the last one under it; each
/// round handles what queued up during the previous one.
const CATCH_UP_ROUNDS: usize = 3;

/// A view's query, planned for streaming.
pub struct PlannedView {
    /// The operators.
    pub plan: StreamPlan,
    /// The output columns.
    pub columns: Vec<ColumnDef>,
    /// Tables and materialized views whose changes feed it.
    pub sources: BTreeSet<String>,
    /// The sources plus the plain views the query names.
    pub depends_on: Vec<String>,
    /// The output's unique key, if it has one with columns.
    pub key: Option<Vec<usize>>,
    /// Further orders the output can be looked up by.
    pub lookup_orders: Vec<Vec<usize>>,
}

/// The watermark a view running `plan` passes on to the views that read
/// it, if any.
fn output_watermark(
    plan: &StreamPlan,
    columns: &[ColumnDef],
) -> Option<crate::catalog::WatermarkDef> {
    let (column, delay) = plan.output_watermark()?;
    Some(crate::catalog::WatermarkDef {
        column,
        delay,
        expr: format!(
            "{} (its input's watermark, {delay} units behind)",
            columns.get(column)?.name
        ),
    })
}

/// Plans `query` as a materialized view against the session's pinned
/// snapshot. Anything the streaming engine cannot maintain is refused
/// with 0A000.
pub async fn plan_view(
    session: &Session,
    query: &Query,
    names: &[ViewColumnDef],
    emit_on_window_close: bool,
) -> WeirResult<PlannedView> {
    let catalog = session.pinned.get().catalog.clone();
    // A view computes in UTC, whatever the creating session's zone.
    session.use_time_zone("+00:00");
    let planned = plan_view_in(
        &session.ctx().state(),
        &catalog,
        query,
        names,
        emit_on_window_close,
    )
    .await;
    session.apply_time_zone();
    planned
}

/// Plans `query` as a materialized view with `state` (a context from
/// [`crate::session::session_context`]) over `catalog`, its windows'
/// rows emitted when final if `emit_on_window_close`.
pub(crate) async fn plan_view_in(
    state: &datafusion::execution::SessionState,
    catalog: &crate::catalog::Catalog,
    query: &Query,
    names: &[ViewColumnDef],
    emit_on_window_close: bool,
) -> WeirResult<PlannedView> {
    let statement = Statement::Query(Box::new(query.clone()));
    let temporal = weir_sql::temporal_tables(query)?;
    let plan = crate::session::plan_statement(state, statement.clone()).await?;
    let plan = weir_sql::mark_temporal_tables(plan, &temporal)?;
    let plan = weir_sql::extract_temporal_filters(plan)?;
    let plan = weir_sql::extract_proctime(plan)?;
    weir_sql::check_deterministic(&plan)?;
    let optimized = state.optimize(&plan)?;
    let mut sources = BTreeSet::new();
    for (schema, name) in scanned_relations(&optimized)? {
        let readable = matches!(schema.as_deref(), None | Some(crate::catalog::SCHEMA))
            && matches!(
                catalog.kind_of(&name),
                Some(ObjectKind::Table | ObjectKind::MaterializedView | ObjectKind::Source)
            )
            && !crate::system::SYSTEM_TABLES.contains(&name.as_str());
        if !readable {
            return Err(WeirError::unsupported(format!(
                "materialized views can only read tables, sources and other materialized views, not \"{name}\""
            )));
        }
        sources.insert(name);
    }
    let mut plan_stream = weir_sql::stream_plan(&optimized)?;
    plan_stream.add_watermarks(|relation| {
        let watermark = match catalog.sources.get(relation) {
            Some(source) => source.watermark.as_ref(),
            None => match catalog.tables.get(relation) {
                Some(table) => table.watermark.as_ref(),
                None => catalog.materialized_views.get(relation)?.watermark.as_ref(),
            },
        };
        watermark.map(|w| (w.column, w.delay))
    });
    plan_stream.derive_keys(|relation| {
        if let Some(table) = catalog.tables.get(relation) {
            return (!table.primary_key.is_empty()).then(|| table.primary_key.clone());
        }
        catalog
            .materialized_views
            .get(relation)
            .and_then(|v| v.key.clone())
    });
    let append_only = |relation: &str| {
        catalog.sources.contains_key(relation)
            || catalog.tables.get(relation).is_some_and(|t| t.append_only)
            || catalog
                .materialized_views
                .get(relation)
                .is_some_and(|v| v.append_only)
    };
    plan_stream.mark_append_only(append_only);
    if emit_on_window_close {
        plan_stream
            .emit_on_window_close()
            .map_err(WeirError::unsupported)?;
        // Its windows' rows now only come once: what reads them keeps less.
        plan_stream.mark_append_only(append_only);
    }
    plan_stream
        .check_temporal_joins()
        .map_err(WeirError::unsupported)?;
    let schema = Arc::new(optimized.schema().as_arrow().clone());
    let schema = crate::colnames::wire_schema(&statement, schema);
    if names.len() > schema.fields().len() {
        return Err(WeirError::new(
            SqlState::SYNTAX_ERROR,
            "CREATE MATERIALIZED VIEW specifies more column names than columns",
        ));
    }
    let display_scales = crate::numeric_display::scales(&plan, &schema);
    let mut columns: Vec<ColumnDef> = Vec::new();
    for (i, field) in schema.fields().iter().enumerate() {
        let name = names
            .get(i)
            .map(|n| crate::catalog::normalize_ident(&n.name))
            .unwrap_or_else(|| field.name().clone());
        if columns.iter().any(|c| c.name == name) {
            return Err(WeirError::new(
                SqlState("42701"),
                format!("column \"{name}\" specified more than once"),
            ));
        }
        columns.push(ColumnDef {
            name,
            identity: None,
            data_type: field.data_type().clone(),
            nullable: field.is_nullable(),
            default: None,
            max_chars: None,
            declared: crate::varchar::declared(field).or(crate::uuid_type::declared(field)),
            json: crate::json::JsonKind::of(field),
            display_scale: display_scales[i],
        });
    }
    // Plain views are inlined by the planner; the query text names them.
    let mut depends_on: Vec<String> = crate::ddl::references(&query.to_string())
        .into_iter()
        .filter(|name| catalog.views.contains_key(name))
        .collect();
    depends_on.extend(sources.iter().cloned());
    depends_on.sort();
    depends_on.dedup();
    // A key without columns (a global aggregate's one row) keys nothing.
    let key = plan_stream
        .nodes
        .last()
        .and_then(|n| n.key.clone())
        .filter(|k| !k.is_empty());
    Ok(PlannedView {
        key,
        lookup_orders: plan_stream.output_lookup_orders(),
        plan: plan_stream,
        columns,
        sources,
        depends_on,
    })
}

/// The (schema, name) of every relation a plan scans.
fn scanned_relations(plan: &LogicalPlan) -> WeirResult<Vec<(Option<String>, String)>> {
    let mut found = Vec::new();
    plan.apply_with_subqueries(|node| {
        if let LogicalPlan::TableScan(scan) = node {
            found.push((
                scan.table_name.schema().map(str::to_owned),
                scan.table_name.table().to_owned(),
            ));
        }
        Ok(TreeNodeRecursion::Continue)
    })?;
    Ok(found)
}

/// `EXPLAIN CREATE MATERIALIZED VIEW`: the streaming plan, one line per row.
pub async fn explain(session: &mut Session, create: &CreateView) -> WeirResult<Output> {
    session.pin_for_read();
    let planned = plan_view(session, &create.query, &create.columns, false).await?;
    let lines = planned.plan.explain();
    Output::text_columns(&["QUERY PLAN"], vec![lines])
}

static NEXT_PENDING: AtomicU64 = AtomicU64::new(0);

/// Removes a pending view when creation ends in any way (error, cancel).
struct PendingGuard {
    db: Arc<Database>,
    token: u64,
}

impl Drop for PendingGuard {
    fn drop(&mut self) {
        let (db, token) = (self.db.clone(), self.token);
        tokio::spawn(async move {
            let mut working = db.working().await;
            db.send_control(Command::RemovePending(token));
            if working.pending.remove(&token).is_some() {
                refresh_tracking(&mut working);
            }
        });
    }
}

/// `CREATE MATERIALIZED VIEW [IF NOT EXISTS] name AS query`.
/// `CREATE MATERIALIZED VIEW`, with `EMIT ON WINDOW CLOSE` if
/// `emit_on_window_close`.
pub async fn create(
    session: &mut Session,
    create: &CreateView,
    emit_on_window_close: bool,
    sink: Option<ConnectorDef>,
) -> WeirResult<Output> {
    let name = relation_name(&create.name)?;
    if create.or_replace {
        return Err(WeirError::unsupported(
            "CREATE OR REPLACE MATERIALIZED VIEW; drop the view and create it again",
        ));
    }
    let tag = match sink {
        Some(_) => "CREATE SINK",
        None => "CREATE MATERIALIZED VIEW",
    };
    let db = session.db.clone();
    // 1. Plan, snapshot the tables, register with the stream worker.
    let queue: PendingQueue = Arc::default();
    let (planned, mut snapshot, views_reply, guard) = {
        let mut working = db.working().await;
        if let Some(skipped) =
            crate::ddl::claim_name(session, &working.catalog, &name, create.if_not_exists, tag)?
        {
            return Ok(skipped);
        }
        session.pinned.pin(Arc::new(db.working_snapshot(&working)));
        let planned = plan_view(
            session,
            &create.query,
            &create.columns,
            emit_on_window_close,
        )
        .await?;
        // The tables' changes so far belong to the snapshot: the running
        // views get them now, and the new view queues only later ones.
        let changes = crate::views::take_table_changes(&mut working);
        if !changes.is_empty() {
            db.send_control(Command::Changes(changes));
        }
        let token = NEXT_PENDING.fetch_add(1, Ordering::Relaxed);
        let (reply, views_reply) = tokio::sync::oneshot::channel();
        let relations: BTreeSet<String> = planned
            .sources
            .iter()
            .filter(|s| !working.catalog.sources.contains_key(*s))
            .cloned()
            .collect();
        db.send_control(Command::AddPending {
            token,
            sources: relations.clone(),
            queue: queue.clone(),
            reply,
        });
        working.pending.insert(token, relations);
        refresh_tracking(&mut working);
        let guard = PendingGuard {
            db: db.clone(),
            token,
        };
        let snapshot = db.working_snapshot(&working);
        (planned, snapshot, views_reply, guard)
    };
    if let Some(sink) = &sink {
        let append_only = planned.plan.nodes.last().is_some_and(|n| n.append_only);
        crate::sink::check(&db, &snapshot.catalog, sink, &planned.columns, append_only).await?;
    }
    // The views it reads, as of the same point in their stream.
    let views = views_reply
        .await
        .map_err(|_| WeirError::internal("the stream worker is gone"))?;
    for def in snapshot.catalog.materialized_views.values() {
        if let Some(table) = views.get(&def.name) {
            snapshot.tables.insert(def.id, table.clone());
        }
    }

    // 2. Backfill from the snapshot, without the lock.
    let started = Instant::now();
    let dataflow = Dataflow::new(&planned.plan)?;
    let inputs = source_rows(&snapshot, &planned)?;
    let input_rows: usize = inputs.iter().map(|(_, c)| c.len()).sum();
    let progress = session.progress.clone();
    let view = name.clone();
    let spec = crate::catalog::view_output_spec(&planned.columns, planned.key.as_deref());
    let budget = db.view_memory_bytes();
    let (dataflow, table, early) = tokio::task::spawn_blocking(move || {
        backfill(&view, budget, dataflow, spec, inputs, |done| {
            if let Some(progress) = progress
                .as_ref()
                .filter(|_| input_rows >= BACKFILL_BATCH_ROWS)
            {
                let _ = progress.send(format!(
                    "materialized view \"{view}\": backfilled {done} of {input_rows} rows"
                ));
            }
        })
    })
    .await
    .map_err(|e| WeirError::internal(format!("backfill task: {e}")))??;

    // 3. Catch up on what changed since the snapshot, in rounds while much
    // queues up; the stream worker does the rest when the view starts.
    let (mut dataflow, mut table, mut early) = (dataflow, table, early);
    for _ in 0..CATCH_UP_ROUNDS {
        let queued = std::mem::take(&mut *queue.lock().expect("queue lock"));
        if queued.is_empty() {
            break;
        }
        let view = name.clone();
        (dataflow, table, early) = tokio::task::spawn_blocking(move || {
            let out = catch_up(&mut dataflow, queued)?;
            apply_output(&mut table, out)?;
            check_memory(&view, &dataflow, &table, budget)?;
            early.take(&mut dataflow, &mut table)?;
            Ok::<_, datafusion::error::DataFusionError>((dataflow, table, early))
        })
        .await
        .map_err(|e| WeirError::internal(format!("catch-up task: {e}")))??;
    }
    let rows = view_rows(&table)?;
    let mut working = db.working().await;
    if working.catalog.kind_of(&name).is_some() {
        return Err(crate::ddl::duplicate_relation(&name));
    }
    for source in &planned.depends_on {
        let same = match (
            snapshot.catalog.kind_of(source),
            working.catalog.kind_of(source),
        ) {
            (Some(a), Some(b)) => {
                a == b
                    && relation_id_of(&snapshot.catalog, source)
                        == relation_id_of(&working.catalog, source)
            }
            _ => false,
        };
        if !same {
            return Err(WeirError::new(
                SqlState("40001"),
                format!("\"{source}\" was dropped or replaced while the view was being created"),
            ));
        }
    }
    let id = working.catalog.take_id();
    let state_ids: Vec<TableId> = (0..dataflow.state_specs().len())
        .map(|_| working.catalog.take_id())
        .collect();
    let sources = source_inputs(&db, &working.catalog, &planned, |_| None)?;
    let watermark = output_watermark(&planned.plan, &planned.columns);
    let def = MaterializedViewDef {
        name: name.clone(),
        query: create.query.to_string(),
        columns: planned.columns,
        id,
        state_ids: state_ids.clone(),
        depends_on: planned.depends_on,
        failed: None,
        append_only: planned.plan.nodes.last().is_some_and(|n| n.append_only),
        key: planned.key.clone(),
        lookup_orders: planned.lookup_orders.clone(),
        emit_on_window_close,
        sink: sink.clone(),
        watermark,
    };
    let query = def.query.clone();
    working.catalog.materialized_views.insert(name.clone(), def);
    db.send_control(Command::Start(
        Box::new(ViewRuntime {
            name: name.clone(),
            id,
            state_ids,
            plan: planned.plan.clone(),
            definition: crate::cluster::view_definition(
                &working.catalog,
                &query,
                emit_on_window_close,
            )?,
            reads_views: views_read(&working.catalog, &planned.sources),
            dataflow,
            restored: None,
            output: table,
            // The worker hands it the backfill when it starts the sink.
            sink: sink.as_ref().map(crate::sink::open),
            sources,
            early,
        }),
        Some(guard.token),
    ));
    working.pending.remove(&guard.token);
    refresh_tracking(&mut working);
    working.catalog_changed();
    let epoch = working.epoch;
    drop(working);
    drop(guard);
    info!(view = %name, input_rows, elapsed_ms = started.elapsed().as_millis() as u64, "created materialized view");
    db.wait_committed(epoch).await?;
    if sink.is_some() {
        return Ok(Output::command(tag));
    }
    // PostgreSQL's tag: the rows the view was filled with.
    Ok(Output::Command {
        tag: "SELECT",
        rows: Some(rows),
    })
}

/// How many rows a view's output `table` holds (a counted view's rows
/// each as often as its count).
fn view_rows(table: &weir_state::StateTable) -> WeirResult<usize> {
    if !weir_stream::runtime::is_counted(table.spec()) {
        return Ok(table.len());
    }
    let counts = table.spec().schema.fields().len() - 1;
    let mut rows = 0i64;
    for batch in table.snapshot().scan(Some(&[counts]), false)? {
        let column = batch.column(0).as_primitive::<Int64Type>();
        rows += datafusion::arrow::compute::sum(column).unwrap_or(0);
    }
    Ok(usize::try_from(rows).unwrap_or(0))
}

/// The materialized views among the relations a view reads (`reads`; the
/// others are tables and sources).
fn views_read(catalog: &crate::catalog::Catalog, reads: &BTreeSet<String>) -> BTreeSet<String> {
    reads
        .iter()
        .filter(|name| catalog.materialized_views.contains_key(*name))
        .cloned()
        .collect()
}

/// The datagen sources a planned view reads, each with the columns it
/// reads and its splits' starting positions (`positions`, or every split
/// at its beginning).
fn source_inputs(
    db: &Database,
    catalog: &crate::catalog::Catalog,
    planned: &PlannedView,
    positions: impl Fn(TableId) -> Option<Vec<u64>>,
) -> WeirResult<Vec<SourceInput>> {
    planned
        .sources
        .iter()
        .filter_map(|name| catalog.sources.get(name))
        .map(|def| {
            let source = def.connector(db, catalog)?;
            let positions = positions(def.id).unwrap_or_else(|| vec![0; source.splits() as usize]);
            Ok(SourceInput {
                source_id: def.id,
                name: def.name.clone(),
                source,
                columns: planned.plan.columns_read(&def.name, def.columns.len()),
                positions,
            })
        })
        .collect()
}

/// Pushes a snapshot's rows through a new view's operators batch by batch,
/// adding each batch's output to a fresh output table of `spec`, and takes
/// the resulting state deltas. `progress` hears the rows done so far.
fn backfill(
    name: &str,
    budget: usize,
    mut dataflow: Dataflow,
    spec: weir_state::TableSpec,
    inputs: Vec<(String, Changes)>,
    progress: impl Fn(usize),
) -> datafusion::error::Result<(Dataflow, weir_state::StateTable, EarlyDeltas)> {
    let to_df =
        |e: weir_state::StateError| datafusion::error::DataFusionError::External(Box::new(e));
    let mut table = weir_state::StateTable::new(spec).map_err(to_df)?;
    apply_output(&mut table, dataflow.initial()?)?;
    let mut done = 0;
    for (relation, rows) in inputs {
        done += rows.len();
        let out = dataflow.push(&relation, rows)?;
        apply_output(&mut table, out)?;
        check_memory(name, &dataflow, &table, budget)?;
        progress(done);
    }
    apply_output(&mut table, dataflow.flush()?)?;
    check_memory(name, &dataflow, &table, budget)?;
    let mut early = EarlyDeltas::default();
    early.take(&mut dataflow, &mut table)?;
    Ok((dataflow, table, early))
}

/// The state table id behind a table or materialized view, if any.
fn relation_id_of(catalog: &crate::catalog::Catalog, name: &str) -> Option<TableId> {
    catalog
        .tables
        .get(name)
        .map(|t| t.id)
        .or_else(|| catalog.materialized_views.get(name).map(|v| v.id))
        .or_else(|| catalog.sources.get(name).map(|s| s.id))
}

/// Every row of each source in `snapshot`, in batches, as insertions.
fn source_rows(snapshot: &DbSnapshot, planned: &PlannedView) -> WeirResult<Vec<(String, Changes)>> {
    let mut out = Vec::new();
    // The tables temporal joins look up come first: the rows of the other
    // inputs are looked up in them as they come.
    let looked_up = planned.plan.temporal_relations();
    let (first, rest): (Vec<&String>, Vec<&String>) =
        planned.sources.iter().partition(|s| looked_up.contains(*s));
    for name in first.into_iter().chain(rest) {
        if snapshot.catalog.sources.contains_key(name) {
            // A view's own reader delivers a source's rows once it runs.
            continue;
        }
        let (id, counted) = match relation_id_of(&snapshot.catalog, name) {
            Some(id) => (
                id,
                snapshot
                    .catalog
                    .materialized_views
                    .get(name)
                    .is_some_and(|v| v.key.is_none()),
            ),
            None => return Err(crate::catalog::undefined_relation(name)),
        };
        let table = snapshot
            .tables
            .get(&id)
            .ok_or_else(|| WeirError::internal(format!("no snapshot of {name}")))?;
        // A table written by many small statements is many small chunks;
        // they go through the operators in batches of about
        // BACKFILL_BATCH_ROWS (an aggregate that recomputes its touched
        // groups pays per batch, not per row).
        let mut pending: Vec<RecordBatch> = Vec::new();
        let mut pending_rows = 0;
        for batch in table.scan(None, false)? {
            let rows = if counted {
                crate::views::expand_counted(&batch, None)?
            } else {
                batch
            };
            let mut offset = 0;
            while offset < rows.num_rows() {
                let len = (BACKFILL_BATCH_ROWS - pending_rows).min(rows.num_rows() - offset);
                pending.push(rows.slice(offset, len));
                pending_rows += len;
                offset += len;
                if pending_rows == BACKFILL_BATCH_ROWS {
                    out.push((name.clone(), inserts_of(&mut pending)?));
                    pending_rows = 0;
                }
            }
        }
        if pending_rows > 0 {
            out.push((name.clone(), inserts_of(&mut pending)?));
        }
    }
    Ok(out)
}

/// The batches in `pending`, as one batch of insertions; empties it.
fn inserts_of(pending: &mut Vec<RecordBatch>) -> WeirResult<Changes> {
    let schema = pending[0].schema();
    let rows = datafusion::arrow::compute::concat_batches(&schema, pending.iter())
        .map_err(|e| WeirError::from_datafusion(e.into()))?;
    pending.clear();
    Ok(Changes::inserts(rows))
}

/// Rebuilds every materialized view's operators after a restart: plans
/// its query again and loads each operator's state from the last
/// checkpoint. A view that can no longer be planned is marked failed.
pub async fn restore(db: &Arc<Database>, runtime: Arc<RuntimeEnv>) -> WeirResult<()> {
    let committed = db.committed();
    let mut defs: Vec<MaterializedViewDef> = committed
        .catalog
        .materialized_views
        .values()
        .cloned()
        .collect();
    defs.sort_by_key(|d| d.id);
    if defs.is_empty() {
        return Ok(());
    }
    if db.recovered_state_format() < weir_state::Manifest::STATE_FORMAT {
        return rebuild(db, runtime, defs).await;
    }
    let started = Instant::now();
    let offsets = committed.offsets.clone();
    let session = Session::new(db.clone(), runtime, "weir".into())?;
    let mut views = Vec::new();
    let mut failed = Vec::new();
    for def in defs.iter().filter(|d| d.failed.is_none()) {
        session.pinned.pin(committed.clone());
        let planned = match parse_query(&def.query) {
            Ok(query) => plan_view(&session, &query, &[], def.emit_on_window_close).await,
            Err(e) => Err(e),
        };
        let (mut dataflow, planned) = match planned.and_then(|p| Ok((Dataflow::new(&p.plan)?, p))) {
            Ok(d) => d,
            Err(e) => {
                warn!(view = %def.name, error = %e, "materialized view cannot be planned again");
                failed.push((def.name.clone(), ViewFailure::from_error(&e)));
                continue;
            }
        };
        let specs = dataflow.state_specs();
        if specs.len() != def.state_ids.len() {
            failed.push((
                def.name.clone(),
                ViewFailure::other("its plan changed since it was created"),
            ));
            continue;
        }
        let mut tables = Vec::with_capacity(specs.len());
        for (spec, &id) in specs.into_iter().zip(&def.state_ids) {
            tables.push(db.load_state(id, spec).await?);
        }
        let restored = tables.clone();
        dataflow.restore(tables)?;
        let output = db
            .take_restored_output(def.id)
            .ok_or_else(|| WeirError::internal(format!("no output table for {}", def.name)))?;
        let sources = source_inputs(db, &committed.catalog, &planned, |source| {
            offsets.get(&position_key(def.id, source)).cloned()
        })?;
        views.push(ViewRuntime {
            name: def.name.clone(),
            id: def.id,
            state_ids: def.state_ids.clone(),
            plan: planned.plan,
            definition: crate::cluster::view_definition(
                &committed.catalog,
                &def.query,
                def.emit_on_window_close,
            )?,
            reads_views: views_read(&committed.catalog, &planned.sources),
            dataflow,
            restored: Some(restored),
            output,
            sink: def.sink.as_ref().map(crate::sink::open),
            sources,
            early: EarlyDeltas::default(),
        });
    }
    let mut working = db.working().await;
    for (name, failure) in failed {
        db.view_failed(&name, failure);
        working.catalog_changed();
    }
    let count = views.len();
    for view in views {
        db.send_control(Command::Start(Box::new(view), None));
    }
    refresh_tracking(&mut working);
    info!(
        views = count,
        elapsed_ms = started.elapsed().as_millis() as u64,
        "restored materialized views"
    );
    Ok(())
}

/// Rebuilds every materialized view from its inputs, for state written in
/// an older format: each view is planned again and backfilled from the
/// recovered tables (and the views rebuilt before it), gets new state
/// table ids (the old tables leave with the next manifest), and reads its
/// sources again from their first row. Until the views catch up, they
/// stand at earlier source positions than before the upgrade.
async fn rebuild(
    db: &Arc<Database>,
    runtime: Arc<RuntimeEnv>,
    defs: Vec<MaterializedViewDef>,
) -> WeirResult<()> {
    let started = Instant::now();
    warn!(
        views = defs.len(),
        from = db.recovered_state_format(),
        to = weir_state::Manifest::STATE_FORMAT,
        "operator state of an older format: rebuilding materialized views from their inputs"
    );
    let session = Session::new(db.clone(), runtime, "weir".into())?;
    let mut snapshot = (*db.committed()).clone();
    let mut failed = Vec::new();
    for def in defs.iter().filter(|d| d.failed.is_none()) {
        // The old output table is not needed: the view is filled again.
        drop(db.take_restored_output(def.id));
        session.pinned.pin(Arc::new(snapshot.clone()));
        let planned = match parse_query(&def.query) {
            Ok(query) => plan_view(&session, &query, &[], def.emit_on_window_close).await,
            Err(e) => Err(e),
        };
        let built = match planned {
            Ok(planned) => {
                let inputs = source_rows(&snapshot, &planned)?;
                let spec =
                    crate::catalog::view_output_spec(&planned.columns, planned.key.as_deref());
                let dataflow = Dataflow::new(&planned.plan)?;
                let (name, budget) = (def.name.clone(), db.view_memory_bytes());
                tokio::task::spawn_blocking(move || {
                    backfill(&name, budget, dataflow, spec, inputs, |_| {})
                        .map(|built| (planned, built))
                })
                .await
                .map_err(|e| WeirError::internal(format!("rebuild task: {e}")))?
                .map_err(WeirError::from)
            }
            Err(e) => Err(e),
        };
        let (planned, (dataflow, output, early)) = match built {
            Ok(built) => built,
            Err(e) => {
                warn!(view = %def.name, error = %e, "materialized view cannot be rebuilt");
                failed.push((def.name.clone(), ViewFailure::from_error(&e)));
                continue;
            }
        };
        let mut working = db.working().await;
        let id = working.catalog.take_id();
        let state_ids: Vec<TableId> = (0..dataflow.state_specs().len())
            .map(|_| working.catalog.take_id())
            .collect();
        let sources = source_inputs(db, &working.catalog, &planned, |_| None)?;
        let Some(entry) = working.catalog.materialized_views.get_mut(&def.name) else {
            continue;
        };
        entry.id = id;
        entry.state_ids = state_ids.clone();
        // The query's result types may be what changed with the format
        // (format 3: PostgreSQL's, 4: quotients' scales), and with them
        // how the columns are written; the column names stay the view's
        // own.
        for (column, planned) in entry.columns.iter_mut().zip(&planned.columns) {
            column.data_type = planned.data_type.clone();
            column.nullable = planned.nullable;
            column.display_scale = planned.display_scale;
        }
        entry.append_only = planned.plan.nodes.last().is_some_and(|n| n.append_only);
        entry.key = planned.key.clone();
        entry.lookup_orders = planned.lookup_orders.clone();
        entry.watermark = output_watermark(&planned.plan, &entry.columns);
        working.catalog_changed();
        snapshot.catalog = Arc::new(working.catalog.clone());
        snapshot.tables.insert(id, output.snapshot());
        db.send_control(Command::Start(
            Box::new(ViewRuntime {
                name: def.name.clone(),
                id,
                state_ids,
                plan: planned.plan.clone(),
                definition: crate::cluster::view_definition(
                    &working.catalog,
                    &def.query,
                    def.emit_on_window_close,
                )?,
                reads_views: views_read(&working.catalog, &planned.sources),
                dataflow,
                restored: None,
                output,
                sink: def.sink.as_ref().map(crate::sink::open),
                sources,
                early,
            }),
            None,
        ));
    }
    let mut working = db.working().await;
    for (name, failure) in failed {
        db.view_failed(&name, failure);
        working.catalog_changed();
    }
    refresh_tracking(&mut working);
    info!(
        views = defs.len(),
        elapsed_ms = started.elapsed().as_millis() as u64,
        "rebuilt materialized views"
    );
    Ok(())
}

pub(crate) fn parse_query(sql: &str) -> WeirResult<Query> {
    let mut statements = weir_sql::parse(sql)?;
    match statements.pop() {
        Some(weir_sql::WeirStatement::Sql(statement)) => match *statement {
            Statement::Query(query) => Ok(*query),
            other => Err(WeirError::internal(format!(
                "view query is not a query: {other}"
            ))),
        },
        _ => Err(WeirError::internal("view query is not a query")),
    }
}
