//! One client session: its DataFusion context, pinned snapshot, settings
//! and transaction state.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use datafusion::arrow::array::StringArray;
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::catalog::{CatalogProvider, MemoryCatalogProvider};
use datafusion::common::{ParamValues, ScalarValue};
use datafusion::execution::memory_pool::MemoryLimit;
use datafusion::execution::runtime_env::RuntimeEnv;
use datafusion::execution::session_state::{SessionState, SessionStateBuilder};
use datafusion::logical_expr::{create_udf, ColumnarValue, LogicalPlan, Volatility};
use datafusion::prelude::{SessionConfig, SessionContext};
use datafusion::sql::parser::Statement as DfStatement;
use datafusion::sql::sqlparser::ast::Statement;
use datafusion_pg_catalog::pg_catalog::context::EmptyContextProvider;
use futures::StreamExt;
use pgwire::messages::response::TransactionStatus;

use crate::catalog::{DATABASE, SCHEMA};
use crate::database::Database;
use crate::error::{SqlState, WeirError, WeirResult};
use crate::provider::{PinnedSnapshot, PublicSchema};
use crate::rows::RowStream;
use crate::settings::{Settings, SharedSettings};
use crate::transaction::Transaction;

/// The PostgreSQL version Weir reports; clients pick features by it.
pub const PG_VERSION: &str = "16.6";

/// What a statement produced.
pub enum Output {
    /// Rows of a query, produced as the client reads them.
    Rows {
        /// Their schema.
        schema: SchemaRef,
        /// The rows.
        rows: RowStream,
    },
    /// A command tag such as `INSERT 0 3` (`tag`, then the row count).
    Command {
        /// The tag's words.
        tag: &'static str,
        /// Rows affected, where the tag has a count.
        rows: Option<usize>,
    },
    /// Rows of a DML statement's `RETURNING` list, under its tag (`tag`,
    /// then the row count).
    Returned {
        /// The tag's words.
        tag: &'static str,
        /// Their schema.
        schema: SchemaRef,
        /// The rows.
        rows: RowStream,
    },
    /// `BEGIN`.
    TransactionStart,
    /// `COMMIT` or `ROLLBACK`.
    TransactionEnd(&'static str),
    /// Rows a `FETCH` returned (tag `FETCH n`).
    Fetched {
        /// Their schema.
        schema: SchemaRef,
        /// The rows.
        batch: RecordBatch,
        /// From a `BINARY` cursor: sent in binary format.
        binary: bool,
    },
    /// `COPY ... TO STDOUT`: the rows, one CopyData message each,
    /// produced as the client reads them.
    CopyOut {
        /// Binary format (else text or CSV).
        binary: bool,
        /// Number of columns.
        columns: usize,
        /// The messages, header included.
        data: futures::stream::BoxStream<
            'static,
            pgwire::error::PgWireResult<pgwire::messages::copy::CopyData>,
        >,
    },
    /// `COPY ... FROM STDIN` is waiting for data.
    CopyIn {
        /// In PostgreSQL's binary format (else text or CSV).
        binary: bool,
        /// Number of columns the client sends.
        columns: usize,
    },
}

impl Output {
    /// The output, with the rows it still has to produce ended by
    /// `deadline` and reporting an error through `failed` (see
    /// [`crate::rows::watched`]).
    pub fn watched(self, deadline: Option<tokio::time::Instant>, failed: &Arc<AtomicBool>) -> Self {
        use crate::rows::watched;
        match self {
            Output::Rows { schema, rows } => Output::Rows {
                schema,
                rows: watched(rows, deadline, failed.clone()),
            },
            Output::CopyOut {
                binary,
                columns,
                data,
            } => Output::CopyOut {
                binary,
                columns,
                data: watched(data, deadline, failed.clone()),
            },
            other => other,
        }
    }

    /// A tag without a row count.
    pub fn command(tag: &'static str) -> Self {
        Output::Command { tag, rows: None }
    }

    /// Text columns: `columns[i]` holds the values of the column named
    /// `names[i]`, one per row.
    pub fn text_columns(names: &[&str], columns: Vec<Vec<String>>) -> WeirResult<Self> {
        let fields: Vec<Field> = names
            .iter()
            .map(|n| Field::new(*n, DataType::Utf8, false))
            .collect();
        let schema = Arc::new(Schema::new(fields));
        let arrays = columns
            .into_iter()
            .map(|c| Arc::new(StringArray::from(c)) as _)
            .collect();
        let batch = RecordBatch::try_new(schema.clone(), arrays)?;
        Ok(Output::Rows {
            schema,
            rows: crate::rows::from_batches(vec![batch]),
        })
    }
}

/// A message for the client that is not an error.
#[derive(Debug)]
pub struct Notice {
    /// `NOTICE` or `WARNING`.
    pub severity: &'static str,
    /// Its SQLSTATE.
    pub code: &'static str,
    /// The text.
    pub message: String,
}

/// Parameter values bound to a prepared statement.
pub type Params = Option<ParamValues>;

/// Per-connection state.
pub struct Session {
    /// The database.
    pub db: Arc<Database>,
    /// DataFusion's context (functions, settings, the catalog), made when
    /// first needed and dropped while the connection idles (see
    /// [`Session::ctx`] and [`Session::release_context`]).
    context: std::sync::OnceLock<SessionContext>,
    /// The memory pool and the rest of the runtime its queries use.
    runtime: Arc<RuntimeEnv>,
    /// The OIDs its catalog tables handed out, kept across contexts.
    oids: CatalogOidState,
    /// The snapshot statements plan against.
    pub pinned: Arc<PinnedSnapshot>,
    /// `SET` variables, shared with `current_setting` and `set_config`.
    pub settings: SharedSettings,
    /// Unique among the server's sessions (the owner of advisory locks).
    pub id: u64,
    /// The open transaction block, if any.
    pub transaction: Option<Transaction>,
    /// Open cursors by name.
    pub cursors: crate::cursor::Cursors,
    /// The user name from the startup packet.
    pub user: String,
    /// NOTICEs and WARNINGs for the client, sent before the statement's
    /// result.
    pub notices: Vec<Notice>,
    /// A statement started and has not finished: if it stays set, the
    /// statement was canceled half-way (see [`Session::settle_canceled`]).
    pub statement_running: bool,
    /// Statements run so far (the idle-in-transaction watchdog compares).
    pub statements_run: u64,
    /// Set when an error ended a result's rows after the statement
    /// returned them (see [`Session::settle_canceled`]).
    pub stream_failed: Arc<AtomicBool>,
    /// The session was ended by `idle_in_transaction_session_timeout`:
    /// the next message gets FATAL 25P03 and the connection closes.
    pub timed_out_idle: bool,
    /// While a statement runs: NOTICEs sent to the client at once (progress).
    pub progress: Option<tokio::sync::mpsc::UnboundedSender<String>>,
    /// The `TimeZone` the client was last told of (ParameterStatus).
    pub reported_time_zone: String,
    /// Simple-query point reads by statement shape (`point_read.rs`).
    pub shapes: crate::point_read::ShapeCache,
    /// Statements `PREPARE` named (`sql_prepare.rs`).
    pub sql_prepared: crate::sql_prepare::SqlPreparedStatements,
    /// `currval`'s and `lastval`'s values, and the epoch the numbers the
    /// session took wait for (`sequences/functions.rs`).
    pub sequences: Arc<crate::sequences::functions::SessionSequences>,
}

/// The OIDs a session's catalog tables have handed out (`pg_catalog`'s and
/// Weir's own rows), kept by the session so that its objects keep their
/// OIDs when its context is made again.
#[derive(Debug, Clone, Default)]
pub struct CatalogOidState {
    pg_catalog: datafusion_pg_catalog::PgCatalogOids,
    names: crate::catalog_rows::CatalogOids,
}

/// DataFusion's planner rules and Weir's (PostgreSQL's arithmetic, casts,
/// intervals and result types; lookup joins), each followed by a check of
/// the statement's deadline (`planning_deadline.rs`).
fn planner_rules(builder: SessionStateBuilder) -> SessionStateBuilder {
    use crate::planning_deadline::{checked_between, Check};
    use datafusion::optimizer::{Analyzer, Optimizer};
    use datafusion::physical_optimizer::optimizer::PhysicalOptimizer;
    let check = Arc::new(Check);
    let mut analyzer = Analyzer::new().rules;
    analyzer.extend([
        crate::numeric_text::rule(),
        crate::checked::rule(),
        crate::casts::rule(),
        Arc::new(crate::uuid_type::UuidLists),
        crate::intervals::rule(),
        crate::result_types::rule(),
    ]);
    let mut physical = PhysicalOptimizer::new().rules;
    physical.push(Arc::new(crate::lookup_join::LookupJoins));
    builder
        .with_analyzer_rules(checked_between(analyzer, check.clone()))
        .with_optimizer_rules(checked_between(Optimizer::new().rules, check.clone()))
        .with_physical_optimizer_rules(checked_between(physical, check))
}

/// A DataFusion context that plans against `pinned`, configured as every
/// session's: PostgreSQL's dialect, Weir's schema, `pg_catalog` and
/// functions. Without `db` (a process of a cluster that only plans
/// views) the system tables are absent.
pub fn session_context(
    runtime: Arc<RuntimeEnv>,
    pinned: Arc<PinnedSnapshot>,
    db: Option<Arc<Database>>,
    user: &str,
    oids: &CatalogOidState,
) -> WeirResult<SessionContext> {
    let mut config = SessionConfig::new()
        .with_default_catalog_and_schema(DATABASE, SCHEMA)
        .with_create_default_catalog_and_schema(false)
        // Weir registers its own information_schema (info_schema.rs).
        .with_information_schema(false)
        .with_target_partitions(2);
    let options = config.options_mut();
    options.sql_parser.dialect = datafusion::config::Dialect::PostgreSQL;
    options.sql_parser.map_string_types_to_utf8view = false;
    options.execution.time_zone = Some("+00:00".into());
    options.sql_parser.parse_float_as_decimal = true;
    let state = planner_rules(
        SessionStateBuilder::new()
            .with_config(config)
            .with_runtime_env(runtime)
            .with_default_features(),
    )
    .build();
    let ctx = SessionContext::new_with_state(state);
    let catalog = MemoryCatalogProvider::new();
    catalog.register_schema(
        SCHEMA,
        Arc::new(PublicSchema::new(pinned.clone(), ctx.state_weak_ref(), db)),
    )?;
    let information_schema = crate::info_schema::InformationSchema::new(
        ctx.state().catalog_list().clone(),
        pinned.clone(),
    );
    catalog.register_schema("information_schema", Arc::new(information_schema))?;
    ctx.register_catalog(DATABASE, Arc::new(catalog));
    let names = oids.names.clone();
    datafusion_pg_catalog::setup_pg_catalog_with_oids(
        &ctx,
        DATABASE,
        EmptyContextProvider,
        oids.pg_catalog.clone(),
    )
    .map_err(|e| WeirError::from_datafusion(*e))?;
    if let Some(catalog) = ctx.catalog(DATABASE) {
        if let Some(pg_catalog) = catalog.schema("pg_catalog") {
            let wrapped =
                crate::catalog_rows::PgCatalog::new(pg_catalog, pinned.clone(), names.clone());
            catalog.register_schema("pg_catalog", Arc::new(wrapped))?;
        }
    }
    crate::json::register(&ctx)?;
    crate::catalog_functions::register(&ctx, &pinned, &names);
    crate::intervals::register(&ctx)?;
    crate::pg_functions::register(&ctx);
    crate::bytea_functions::register(&ctx);
    ctx.register_udf(crate::hop_windows::hop_window_starts());
    ctx.register_udf(weir_sql::proctime_udf());
    ctx.register_udwf(weir_stream::session::session_start());
    ctx.register_udwf(weir_stream::session::session_end());
    crate::unknown_literals::register(&ctx)?;
    ctx.register_udf(version_udf());
    ctx.register_udaf(crate::average::udaf());
    ctx.register_udaf(crate::numeric_sum::udaf());
    // PostgreSQL's `variance` is the sample variance.
    ctx.register_udaf(
        datafusion::functions_aggregate::variance::var_samp_udaf()
            .as_ref()
            .clone()
            .with_aliases(["variance"]),
    );
    ctx.register_udf(crate::regtype::to_regtype());
    ctx.register_udf(crate::regtype::oid_regtype());
    ctx.register_udf(crate::to_char::PgToChar::udf());
    ctx.register_udf(
        datafusion::functions::math::ceil()
            .as_ref()
            .clone()
            .with_aliases(["ceiling"]),
    );
    ctx.register_udf(crate::uuid_type::gen_random_uuid());
    ctx.register_udf(constant_text_udf("session_user", user));
    ctx.register_udf(constant_text_udf("current_user", user));
    Ok(ctx)
}

/// DataFusion's plan of `statement`, with PostgreSQL's types for integer
/// literals and for `sum` and `avg`. Parameters are still placeholders:
/// bound later, they keep the types they were described with.
pub async fn plan_statement(
    state: &SessionState,
    statement: Statement,
) -> datafusion::common::Result<LogicalPlan> {
    let plan = state
        .statement_to_plan(DfStatement::Statement(Box::new(statement)))
        .await?;
    crate::aggregates::cast_arguments(crate::literals::narrow(plan)?)
}

impl Session {
    /// A new session for `user`; its queries draw memory from `runtime`.
    pub fn new(db: Arc<Database>, runtime: Arc<RuntimeEnv>, user: String) -> WeirResult<Self> {
        let pinned = Arc::new(PinnedSnapshot::new(db.committed()));
        static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        let id = NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let settings: SharedSettings = Arc::new(parking_lot::Mutex::new(Settings::new(&user)));
        let session = Session {
            db,
            context: std::sync::OnceLock::new(),
            runtime,
            oids: CatalogOidState::default(),
            pinned,
            id,
            settings,
            transaction: None,
            cursors: Default::default(),
            user,
            notices: Vec::new(),
            statement_running: false,
            stream_failed: Arc::default(),
            statements_run: 0,
            timed_out_idle: false,
            progress: None,
            reported_time_zone: "UTC".into(),
            shapes: Default::default(),
            sql_prepared: Default::default(),
            sequences: Default::default(),
        };
        let ctx = session.make_context()?;
        // Just made: the cell is empty.
        let _ = session.context.set(ctx);
        Ok(session)
    }

    /// Pins the snapshot queries read: the transaction block's (with its
    /// own writes), or the newest committed one.
    pub fn pin_for_read(&self) {
        let snapshot = match &self.transaction {
            Some(block) => Arc::new(block.read_snapshot()),
            None => self.db.committed(),
        };
        self.pinned.pin(snapshot);
    }

    /// Plans in the session's `TimeZone`: `now()`, `timestamptz`
    /// literals and casts take it from DataFusion's `execution.time_zone`.
    pub fn apply_time_zone(&self) {
        let zone = self.settings.lock().arrow_time_zone();
        self.use_time_zone(&zone);
    }

    /// Plans in time zone `zone` (an Arrow zone) until
    /// [`Session::apply_time_zone`].
    pub fn use_time_zone(&self, zone: &str) {
        let state = self.ctx().state_ref();
        let mut state = state.write();
        if state.config().options().execution.time_zone.as_deref() != Some(zone) {
            state.config_mut().options_mut().execution.time_zone = Some(zone.to_owned());
        }
    }

    /// Queues a NOTICE for the client.
    pub fn notice(&mut self, message: String) {
        self.notices.push(Notice {
            severity: "NOTICE",
            code: "00000",
            message,
        });
    }

    /// Queues a WARNING with its SQLSTATE for the client.
    pub fn warning(&mut self, code: SqlState, message: impl Into<String>) {
        self.notices.push(Notice {
            severity: "WARNING",
            code: code.0,
            message: message.into(),
        });
    }

    /// The transaction status the client is told in ReadyForQuery.
    pub fn transaction_status(&self) -> TransactionStatus {
        match &self.transaction {
            None => TransactionStatus::Idle,
            Some(block) if block.is_failed() => TransactionStatus::Error,
            Some(_) => TransactionStatus::Transaction,
        }
    }

    /// Opens a transaction block.
    pub fn open_block(&mut self, block: Transaction) {
        self.settings.lock().begin_block();
        self.transaction = Some(block);
    }

    /// Commits `block` (see [`Transaction::commit`]), then waits until the
    /// sequence numbers the session took in it are durable.
    pub async fn commit_block(&self, block: Transaction) -> WeirResult<()> {
        block.commit(&self.db).await?;
        crate::sequences::functions::wait_taken(self).await
    }

    /// Takes the open block out to end it; `committed` says how it ends,
    /// for the settings it changed and the cursors it leaves.
    pub fn close_block(&mut self, committed: bool) -> Option<Transaction> {
        self.block_ended(committed);
        self.transaction.take()
    }

    /// What ends with a block besides its writes: its settings and its
    /// cursors.
    pub fn block_ended(&mut self, committed: bool) {
        self.settings.lock().end_block(committed);
        crate::cursor::block_ended(&mut self.cursors, committed);
    }

    /// Marks the open block failed after a statement error; a block the
    /// server opened around a multi-statement query is rolled back.
    pub fn fail_transaction(&mut self) {
        match &mut self.transaction {
            Some(block) if block.is_implicit() => {
                self.close_block(false);
            }
            Some(block) => block.fail(),
            None => {}
        }
    }

    /// Called before each statement and before each ReadyForQuery: a
    /// statement that was canceled half-way (its future dropped), or whose
    /// rows ended in an error while they streamed, fails the block it ran
    /// in, as any error does.
    pub fn settle_canceled(&mut self) {
        let stream_failed = self.stream_failed.swap(false, Ordering::AcqRel);
        if std::mem::take(&mut self.statement_running) || stream_failed {
            self.fail_transaction();
        }
    }

    /// Plans a statement against the pinned snapshot and binds `params`.
    pub async fn plan(&self, statement: Statement, params: &Params) -> WeirResult<LogicalPlan> {
        self.apply_time_zone();
        let plan = plan_statement(&self.ctx().state(), statement).await?;
        bind(plan, params)
    }

    /// The columns `plan` returns once the analyzer rules have run (they
    /// may change a column's type: a timestamp difference becomes an
    /// interval with days, a function PostgreSQL types otherwise is cast),
    /// as Describe reports them; the planner's if the analyzer fails here.
    pub fn result_schema(&self, plan: &LogicalPlan) -> SchemaRef {
        let state = self.ctx().state();
        match state
            .analyzer()
            .execute_and_check(plan.clone(), state.config_options(), |_, _| {})
        {
            Ok(analyzed) => Arc::new(analyzed.schema().as_arrow().clone()),
            Err(_) => Arc::new(plan.schema().as_arrow().clone()),
        }
    }

    /// Starts a query (a `SELECT`, `EXPLAIN`, a cursor's or `COPY`'s) at
    /// the session's read snapshot; its rows are produced as they are read,
    /// under the names and types PostgreSQL gives them.
    pub async fn query(
        &self,
        statement: &Statement,
        params: &Params,
    ) -> WeirResult<(SchemaRef, RowStream)> {
        self.pin_for_read();
        let plan = self
            .plan(crate::colnames::disambiguate(statement), params)
            .await?;
        let (schema, rows) = self.stream(plan).await?;
        Ok((crate::colnames::wire_schema(statement, schema), rows))
    }

    /// [`Session::query`] for a prepared query whose plan `cache` keeps
    /// between executions (`plan_cache.rs`).
    pub async fn query_reusing(
        &self,
        statement: &Statement,
        params: &Params,
        cache: &crate::plan_cache::PlanCache,
    ) -> WeirResult<(SchemaRef, RowStream)> {
        self.pin_for_read();
        self.apply_time_zone();
        let snapshot = self.pinned.get();
        let zone = self.settings.lock().arrow_time_zone();
        let plan = match cache.get(&snapshot, &zone) {
            Some(plan) => {
                self.db.plans_reused.fetch_add(1, Ordering::Relaxed);
                plan
            }
            None => {
                let statement = crate::colnames::disambiguate(statement);
                let plan = plan_statement(&self.ctx().state(), statement).await?;
                cache.keep(&plan, &snapshot, &zone);
                plan
            }
        };
        let (schema, rows) = self.stream(bind(plan, params)?).await?;
        Ok((crate::colnames::wire_schema(statement, schema), rows))
    }

    /// Starts a plan; its rows are produced as they are read (see
    /// [`crate::rows::start`]).
    async fn stream(&self, plan: LogicalPlan) -> WeirResult<(SchemaRef, RowStream)> {
        let frame = self.ctx().execute_logical_plan(plan.clone()).await?;
        let batches = frame.execute_stream().await?;
        // The executed plan's schema, after the analyzer rules: they may
        // change a column's type (`timestamp - timestamp` becomes an
        // `interval` with days, `intervals.rs`), which the DataFrame's
        // schema, taken before them, does not show.
        let executed = batches.schema();
        let displayed = crate::numeric_display::annotate(&plan, &executed);
        let rows = crate::rows::start(batches).await?;
        let rows = crate::rows::relabeled(&executed, displayed.clone(), rows);
        Ok(crate::rows::with_wire_types(displayed, rows))
    }

    /// Bytes a statement's results may hold in memory: the query memory
    /// pool's limit (`--query-memory-mb`).
    pub fn query_memory_limit(&self) -> usize {
        match self.ctx().runtime_env().memory_pool.memory_limit() {
            MemoryLimit::Finite(bytes) => bytes,
            _ => usize::MAX,
        }
    }

    /// Runs a plan to completion, for a statement that uses the whole
    /// result at once (DML, `CREATE TABLE AS`). The result may take at most
    /// as much memory as the query memory pool holds (54000 beyond that).
    pub async fn collect(&self, plan: LogicalPlan) -> WeirResult<(SchemaRef, Vec<RecordBatch>)> {
        let frame = self.ctx().execute_logical_plan(plan).await?;
        let schema = Arc::new(frame.schema().as_arrow().clone());
        let limit = self.query_memory_limit();
        let mut stream = frame.execute_stream().await?;
        let mut batches = Vec::new();
        let mut bytes = 0usize;
        while let Some(batch) = stream.next().await {
            let batch = batch?;
            bytes += batch.get_array_memory_size();
            if bytes > limit {
                return Err(WeirError::new(
                    SqlState::PROGRAM_LIMIT_EXCEEDED,
                    format!("the result is larger than the query memory limit ({limit} bytes)"),
                ));
            }
            batches.push(batch);
        }
        Ok((schema, batches))
    }
}

impl Session {
    /// DataFusion's context, made again if [`Session::release_context`]
    /// dropped it.
    pub fn ctx(&self) -> &SessionContext {
        self.context.get_or_init(|| {
            // The same construction succeeded when the session started.
            self.make_context()
                .expect("a session's context can be made again")
        })
    }

    /// A DataFusion context for this session: every session's
    /// configuration (see [`session_context`]) with the functions that
    /// read its settings and hold its advisory locks, in its time zone,
    /// handing out the OIDs it handed out before.
    fn make_context(&self) -> WeirResult<SessionContext> {
        let ctx = session_context(
            self.runtime.clone(),
            self.pinned.clone(),
            Some(self.db.clone()),
            &self.user,
            &self.oids,
        )?;
        crate::functions::register(
            &ctx,
            self.settings.clone(),
            self.db.advisory_locks.clone(),
            self.id,
        );
        crate::sequences::functions::register(
            &ctx,
            self.db.sequences.clone(),
            self.pinned.clone(),
            self.sequences.clone(),
            self.oids.names.clone(),
        );
        let zone = self.settings.lock().arrow_time_zone();
        ctx.state_ref()
            .write()
            .config_mut()
            .options_mut()
            .execution
            .time_zone = Some(zone);
        Ok(ctx)
    }

    /// Drops the DataFusion context of a session that holds nothing it
    /// needs (no transaction block, no cursor): an idle connection then
    /// costs a few KiB instead of about 100. The next statement makes it
    /// again (about 0.1 ms). Returns whether it dropped one.
    pub fn release_context(&mut self) -> bool {
        if self.transaction.is_some() || !self.cursors.is_empty() {
            return false;
        }
        self.context.take().is_some()
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.db.advisory_locks.unlock_all(self.id);
    }
}

/// Replaces `$n` placeholders with bound values.
pub fn bind(plan: LogicalPlan, params: &Params) -> WeirResult<LogicalPlan> {
    match params {
        Some(values) => Ok(plan.replace_params_with_values(values)?),
        None => Ok(plan),
    }
}

/// `version()` as PostgreSQL words it, so clients that parse it are happy.
fn version_udf() -> datafusion::logical_expr::ScalarUDF {
    let text = format!(
        "PostgreSQL {PG_VERSION} (Weir {}) on {}, a streaming database",
        env!("CARGO_PKG_VERSION"),
        std::env::consts::ARCH
    );
    constant_text_udf("version", &text)
}

/// A function of no arguments that returns `text`.
fn constant_text_udf(name: &str, text: &str) -> datafusion::logical_expr::ScalarUDF {
    let text = text.to_owned();
    create_udf(
        name,
        vec![],
        DataType::Utf8,
        Volatility::Stable,
        Arc::new(move |_| Ok(ColumnarValue::Scalar(ScalarValue::Utf8(Some(text.clone()))))),
    )
}
