//! The PostgreSQL wire protocol (pgwire) side of a connection: startup and
//! authentication, simple and extended queries, COPY, and cancel.

use std::fmt::Debug;
use std::sync::Arc;

use arrow_pg::datatypes::{
    arrow_schema_to_pg_fields, encode_recordbatch, field_into_pg_type, into_pg_type,
};
use async_trait::async_trait;
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::execution::runtime_env::RuntimeEnv;
use datafusion::sql::sqlparser::ast::Statement;
use futures::future::{select, Either};
use futures::{stream, Sink, SinkExt, StreamExt};
use pgwire::api::auth::StartupHandler;
use pgwire::api::cancel::DefaultCancelHandler;
use pgwire::api::copy::{send_copy_in_response, send_copy_out_response, CopyHandler};
use pgwire::api::portal::{Format, Portal};
use pgwire::api::query::{
    send_describe_response, send_execution_response, send_query_response, send_ready_for_query,
    ExtendedQueryHandler, SimpleQueryHandler,
};
use pgwire::api::results::{
    CopyResponse, DescribePortalResponse, FieldInfo, QueryResponse, Response, Tag,
};
use pgwire::api::stmt::QueryParser;
use pgwire::api::store::PortalStore;
use pgwire::api::{
    ClientInfo, ClientPortalStore, ConnectionHandle, ConnectionManager, PgWireConnectionState,
    PgWireServerHandlers, Type, DEFAULT_NAME,
};
use pgwire::error::{ErrorInfo, PgWireError, PgWireResult};
use pgwire::messages::copy::{CopyData, CopyDone, CopyFail};
use pgwire::messages::extendedquery::{Describe, Sync as SyncMessage, TARGET_TYPE_BYTE_PORTAL};
use pgwire::messages::response::{
    EmptyQueryResponse, NoticeResponse, ReadyForQuery, TransactionStatus,
};
use pgwire::messages::simplequery::Query;
use pgwire::messages::startup::ParameterStatus;
use pgwire::messages::PgWireBackendMessage;
use pgwire::types::format::FormatOptions;
use tokio::sync::Mutex;
use weir_sql::WeirStatement;

use crate::auth::{self, Auth};
use crate::copy::{self, CopyIn};
use crate::database::Database;
use crate::dml;
use crate::error::{SqlState, WeirError, WeirResult};
use crate::plan_cache::PlanCache;
use crate::point_read::PointRead;
use crate::rows::RowStream;
use crate::session::{Output, Params, Session};
use crate::statement;
use crate::transaction::{control, pipeline, Transaction};

/// What every connection shares.
#[derive(Debug)]
pub struct Shared {
    /// The database.
    pub db: Arc<Database>,
    /// Cancel-key registry.
    pub connections: Arc<ConnectionManager>,
    /// Authentication.
    pub auth: Auth,
    /// Memory for queries, shared by every session.
    pub runtime: Arc<RuntimeEnv>,
}

/// The handlers of one connection.
pub struct ConnectionHandlers {
    shared: Arc<Shared>,
    conn: Arc<Connection>,
}

impl ConnectionHandlers {
    /// Handlers for a new connection.
    pub fn new(shared: Arc<Shared>) -> Self {
        let conn = Arc::new(Connection {
            shared: shared.clone(),
            session: Arc::new(Mutex::new(None)),
            copy: std::sync::Mutex::new(None),
        });
        ConnectionHandlers { shared, conn }
    }
}

impl PgWireServerHandlers for ConnectionHandlers {
    fn simple_query_handler(&self) -> Arc<impl SimpleQueryHandler> {
        self.conn.clone()
    }

    fn extended_query_handler(&self) -> Arc<impl ExtendedQueryHandler> {
        self.conn.clone()
    }

    fn startup_handler(&self) -> Arc<impl StartupHandler> {
        Arc::new(auth::startup_handler(
            &self.shared.auth,
            &self.shared.connections,
        ))
    }

    fn copy_handler(&self) -> Arc<impl CopyHandler> {
        self.conn.clone()
    }

    fn cancel_handler(&self) -> Arc<impl pgwire::api::cancel::CancelHandler> {
        Arc::new(DefaultCancelHandler::new(self.shared.connections.clone()))
    }
}

/// One connection: its session (created on first use) and a COPY in
/// progress.
pub struct Connection {
    shared: Arc<Shared>,
    session: Arc<Mutex<Option<Session>>>,
    copy: std::sync::Mutex<Option<CopyIn>>,
}

/// The connection's session, created on first use for the client's user.
async fn lock_session<'a, C: ClientInfo>(
    slot: &'a Arc<Mutex<Option<Session>>>,
    shared: &Shared,
    client: &C,
) -> PgWireResult<tokio::sync::MappedMutexGuard<'a, Session>> {
    let mut guard = slot.lock().await;
    if guard.is_none() {
        let user = client
            .metadata()
            .get("user")
            .cloned()
            .unwrap_or_else(|| "weir".into());
        let session = Session::new(shared.db.clone(), shared.runtime.clone(), user)?;
        if let Some(name) = client.metadata().get("application_name") {
            session.settings.lock().set("application_name", name)?;
        }
        // JDBC sends the client's zone as a startup option.
        let metadata = client.metadata();
        if let Some(zone) = metadata
            .get("TimeZone")
            .or_else(|| metadata.get("timezone"))
        {
            session.settings.lock().set("TimeZone", zone)?;
        }
        *guard = Some(session);
        crate::idle::watch(slot);
    }
    Ok(tokio::sync::MutexGuard::map(guard, |s| {
        s.as_mut().expect("session created above")
    }))
}

impl Connection {
    async fn session<C: ClientInfo>(
        &self,
        client: &C,
    ) -> PgWireResult<tokio::sync::MappedMutexGuard<'_, Session>> {
        lock_session(&self.session, &self.shared, client).await
    }
}

/// Sends the NOTICEs a statement queued, and the new `TimeZone` if it
/// changed.
async fn send_notices<C>(client: &mut C, session: &mut Session) -> PgWireResult<()>
where
    C: Sink<PgWireBackendMessage> + Unpin + Send,
    C::Error: Debug,
    PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
{
    for notice in session.notices.drain(..) {
        let info = ErrorInfo::new(notice.severity.into(), notice.code.into(), notice.message);
        client
            .feed(PgWireBackendMessage::NoticeResponse(NoticeResponse::from(
                info,
            )))
            .await?;
    }
    // As PostgreSQL does, a changed TimeZone is reported (JDBC and psql
    // read it).
    let zone = session.settings.lock().get("timezone")?.to_owned();
    if zone != session.reported_time_zone {
        client
            .feed(PgWireBackendMessage::ParameterStatus(ParameterStatus::new(
                "TimeZone".into(),
                zone.clone(),
            )))
            .await?;
        session.reported_time_zone = zone;
    }
    Ok(())
}

/// How values are written for the client: as its startup options ask, in
/// the session's time zone.
fn format_options(client: &impl ClientInfo, session: &Session) -> Arc<FormatOptions> {
    let mut options = FormatOptions::from_client_metadata(client.metadata());
    options.time_zone = session.settings.lock().arrow_time_zone();
    Arc::new(options)
}

fn fields(
    schema: &SchemaRef,
    format: &Format,
    options: Arc<FormatOptions>,
) -> PgWireResult<Vec<FieldInfo>> {
    arrow_schema_to_pg_fields(schema, format, Some(options))
}

/// Rows as a query response, encoded as the client reads them.
fn rows_response(
    schema: &SchemaRef,
    rows: RowStream,
    format: &Format,
    options: Arc<FormatOptions>,
) -> PgWireResult<QueryResponse> {
    let fields = Arc::new(fields(schema, format, options)?);
    let encoded = fields.clone();
    let data_rows = rows.flat_map(move |batch| match batch {
        Ok(batch) => stream::iter(crate::panics::guard_rows(encode_recordbatch(
            encoded.clone(),
            batch,
        )))
        .left_stream(),
        Err(error) => stream::once(async { Err(error.into()) }).right_stream(),
    });
    Ok(QueryResponse::new(fields, data_rows))
}

fn into_response(
    output: Output,
    format: &Format,
    options: Arc<FormatOptions>,
) -> PgWireResult<Response> {
    Ok(match output {
        Output::Rows { schema, rows } => {
            Response::Query(rows_response(&schema, rows, format, options)?)
        }
        Output::Command { tag, rows } => {
            let mut t = Tag::new(tag);
            if tag == "INSERT" {
                t = t.with_oid(0);
            }
            if let Some(rows) = rows {
                t = t.with_rows(rows);
            }
            Response::Execution(t)
        }
        Output::Fetched {
            schema,
            batch,
            binary,
        } => {
            let format = if binary {
                &Format::UnifiedBinary
            } else {
                format
            };
            let rows = crate::rows::from_batches(vec![batch]);
            let mut response = rows_response(&schema, rows, format, options)?;
            response.set_command_tag("FETCH");
            Response::Query(response)
        }
        Output::Returned { tag, schema, rows } => {
            let mut response = rows_response(&schema, rows, format, options)?;
            response.set_command_tag(if tag == "INSERT" { "INSERT 0" } else { tag });
            Response::Query(response)
        }
        Output::TransactionStart => Response::TransactionStart(Tag::new("BEGIN")),
        Output::TransactionEnd(tag) => Response::TransactionEnd(Tag::new(tag)),
        Output::CopyIn { binary, columns } => Response::CopyIn(CopyResponse::new(
            i8::from(binary),
            columns,
            stream::empty(),
        )),
        Output::CopyOut {
            binary,
            columns,
            data,
        } => Response::CopyOut(CopyResponse::new(i8::from(binary), columns, data)),
    })
}

/// Runs `work`, turning a panic (a bug) into an XX000 error for this
/// statement instead of a lost connection.
async fn guarded<T>(work: impl std::future::Future<Output = WeirResult<T>>) -> WeirResult<T> {
    use futures::FutureExt;
    match std::panic::AssertUnwindSafe(work).catch_unwind().await {
        Ok(result) => result,
        Err(panic) => {
            let message = crate::panics::message(panic.as_ref());
            tracing::error!(%message, "statement panicked");
            Err(WeirError::internal(format!(
                "the statement panicked: {message}"
            )))
        }
    }
}

/// Runs `work`, if `blocking`, with its runtime thread handed over to the
/// runtime's other tasks (`block_in_place`): DataFusion plans a deep
/// statement for seconds without yielding, and meanwhile the sessions
/// queued on that thread, new connections among them, would wait.
async fn off_the_runtime_if<T>(blocking: bool, work: impl std::future::Future<Output = T>) -> T {
    use tokio::runtime::{Handle, RuntimeFlavor};
    let handle = Handle::current();
    if blocking && handle.runtime_flavor() == RuntimeFlavor::MultiThread {
        tokio::task::block_in_place(|| handle.block_on(work))
    } else {
        work.await
    }
}

impl Connection {
    /// Runs one statement like [`Connection::run`], sending the progress
    /// NOTICEs it reports (a long backfill's) to the client as they come.
    async fn run_reporting<C>(
        &self,
        client: &mut C,
        session: &mut Session,
        statement: &WeirStatement,
        params: &Params,
        reuse: Reuse<'_>,
    ) -> PgWireResult<WeirResult<Output>>
    where
        C: Sink<PgWireBackendMessage> + Unpin + Send,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let (sender, mut progress) = tokio::sync::mpsc::unbounded_channel();
        session.progress = Some(sender);
        let result = {
            let run = self.run(session, statement, params, reuse);
            tokio::pin!(run);
            loop {
                tokio::select! {
                    result = &mut run => break result,
                    Some(message) = progress.recv() => {
                        let info = ErrorInfo::new("NOTICE".into(), "00000".into(), message);
                        client
                            .send(PgWireBackendMessage::NoticeResponse(NoticeResponse::from(info)))
                            .await?;
                    }
                }
            }
        };
        session.progress = None;
        Ok(result)
    }

    /// Runs one statement (starting a COPY if it is one), catching panics.
    /// In a failed transaction block only what ends the failure runs; an
    /// error fails the block.
    async fn run(
        &self,
        session: &mut Session,
        statement: &WeirStatement,
        params: &Params,
        reuse: Reuse<'_>,
    ) -> WeirResult<Output> {
        session.settle_canceled();
        if session.transaction.as_ref().is_some_and(|b| b.is_failed())
            && !matches!(statement, WeirStatement::Sql(s) if control::ends_failure(s))
        {
            return Err(control::in_failed_block());
        }
        let timeout = session.settings.lock().timeout("statement_timeout");
        let deadline = timeout.map(|limit| tokio::time::Instant::now() + limit);
        session.statement_running = true;
        // A point read takes no sequence numbers: its rows need no wait.
        let point_read = reuse.point_read.is_some();
        // A point read is a shallow statement (and is answered without
        // walking it again).
        let deep = reuse.point_read.is_none()
            && matches!(statement, WeirStatement::Sql(s) if weir_sql::is_deep(s));
        let work = crate::planning_deadline::with_deadline(
            deadline,
            guarded(self.run_unguarded(session, statement, params, reuse)),
        );
        let result = off_the_runtime_if(deep, async {
            match timeout {
                Some(limit) => tokio::time::timeout(limit, work).await.unwrap_or_else(|_| {
                    Err(WeirError::new(
                        SqlState::QUERY_CANCELED,
                        "canceling statement due to statement timeout",
                    ))
                }),
                None => work.await,
            }
        })
        .await;
        session.statement_running = false;
        let result = match result {
            Ok(output) if !point_read => {
                crate::sequences::functions::durable(session, output).await
            }
            other => other,
        };
        if result.is_err() {
            session.fail_transaction();
        }
        session.statements_run += 1;
        self.watch_idle_block(session);
        // Rows still to come are produced as the client reads them, under
        // the same timeout.
        result.map(|output| output.watched(deadline, &session.stream_failed))
    }

    /// With `idle_in_transaction_session_timeout` set and a block open:
    /// if the session runs nothing more within the timeout, its block is
    /// rolled back (what it held is freed at once) and the connection is
    /// ended at its next message.
    fn watch_idle_block(&self, session: &Session) {
        let limit = session
            .settings
            .lock()
            .timeout("idle_in_transaction_session_timeout");
        let (Some(limit), true) = (limit, session.transaction.is_some()) else {
            return;
        };
        let slot = self.session.clone();
        let seen = session.statements_run;
        tokio::spawn(async move {
            tokio::time::sleep(limit).await;
            let mut guard = slot.lock().await;
            if let Some(session) = guard.as_mut() {
                if session.statements_run == seen && session.transaction.is_some() {
                    session.close_block(false);
                    session.timed_out_idle = true;
                }
            }
        });
    }

    async fn run_unguarded(
        &self,
        session: &mut Session,
        statement: &WeirStatement,
        params: &Params,
        reuse: Reuse<'_>,
    ) -> WeirResult<Output> {
        // The statements that plan are awaited boxed: held inline, their
        // futures (13 KB for `statement::execute`) made every future above
        // them that large, and each execution, a point read's too, copied
        // them from level to level (a sixth of a point read's CPU went to
        // `memmove`).
        if let Some(output) = reuse
            .point_read
            .and_then(|(p, values)| p.read(session, values))
        {
            return output;
        }
        if let (Some(cache), WeirStatement::Sql(sql)) = (reuse.plan, statement) {
            let (schema, rows) = Box::pin(session.query_reusing(sql, params, cache)).await?;
            return Ok(Output::Rows { schema, rows });
        }
        if statement::is_copy(statement) {
            // COPY FROM reads timestamps in the session's zone.
            session.apply_time_zone();
            let WeirStatement::Sql(sql) = statement else {
                unreachable!("is_copy checked")
            };
            if crate::copy_out::is_copy_out(sql) {
                return Box::pin(crate::copy_out::run(session, sql)).await;
            }
            let copy = copy::start(&session.db.committed().catalog, sql)?;
            let columns = copy.columns.len();
            let binary = copy.format.binary;
            *self.copy.lock().expect("copy lock") = Some(copy);
            return Ok(Output::CopyIn { binary, columns });
        }
        Box::pin(statement::execute(session, statement, params)).await
    }
}

#[async_trait]
impl SimpleQueryHandler for Connection {
    /// pgwire's simple-query loop, except that ReadyForQuery reports the
    /// session's own transaction status (a `ROLLBACK TO` leaves a failed
    /// block; a failed `COMMIT` ends it).
    async fn on_query<C>(&self, client: &mut C, query: Query) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        if !matches!(client.state(), PgWireConnectionState::ReadyForQuery) {
            return Err(PgWireError::NotReadyForQuery);
        }
        client.set_state(PgWireConnectionState::QueryInProgress);
        let canceled = match client.session_extensions().get::<Arc<ConnectionHandle>>() {
            Some(handle) => Some(handle.start_query().await),
            None => None,
        };
        let answered = match canceled {
            Some(canceled) => match select(
                SimpleQueryHandler::do_query(self, client, &query.query),
                canceled,
            )
            .await
            {
                Either::Left((result, _)) => result,
                Either::Right(_) => Err(PgWireError::QueryCanceled),
            },
            None => SimpleQueryHandler::do_query(self, client, &query.query).await,
        };
        if let Err(error) = answered {
            // pgwire answers the error and ReadyForQuery from the status
            // set here.
            let status = self.transaction_status(client).await?;
            client.set_transaction_status(status);
            return Err(error);
        }
        let status = self.transaction_status(client).await?;
        client.set_transaction_status(status);
        if !matches!(client.state(), PgWireConnectionState::CopyInProgress(_)) {
            client.set_state(PgWireConnectionState::ReadyForQuery);
            send_ready_for_query(client, status).await?;
        }
        Ok(())
    }

    /// Runs the statements of a simple query and answers each as it
    /// completes: a query's rows go to the client as they are produced.
    /// Everything is sent here, so no responses are left to return.
    async fn do_query<C>(&self, client: &mut C, query: &str) -> PgWireResult<Vec<Response>>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let mut session = self.session(client).await?;
        check_alive(&session)?;
        // Executes sent without their Sync end their pipeline here.
        if let Err(e) = pipeline::end(&mut session).await {
            send_response(client, error_response(e)).await?;
            return Ok(Vec::new());
        }
        let statements = match weir_sql::parse(query) {
            Ok(statements) => statements,
            Err(error) => {
                session.fail_transaction();
                send_response(client, error_response(WeirError::from(error))).await?;
                return Ok(Vec::new());
            }
        };
        if statements.is_empty() {
            send_response(client, Response::EmptyQuery).await?;
            return Ok(Vec::new());
        }
        // Several statements in one query run as one transaction, as in
        // PostgreSQL, unless they manage transactions or the catalog.
        let implicit = statements.len() > 1
            && session.transaction.is_none()
            && statements.iter().all(statement::fits_implicit_block);
        if implicit {
            let block = Transaction::new(session.db.committed(), false, true);
            session.open_block(block);
        }
        for statement in &statements {
            // A point read by constants takes the prepared path's
            // shortcut once a statement of its shape ran (`point_read.rs`).
            let shortcut = match statement {
                WeirStatement::Sql(sql) => {
                    // The catalog the statement reads, without pinning.
                    let session = &mut *session;
                    let committed = session.db.committed();
                    let catalog = match &session.transaction {
                        Some(block) => block.catalog(),
                        None => &committed.catalog,
                    };
                    session.shapes.find(catalog, sql)
                }
                _ => None,
            };
            let reuse = Reuse {
                point_read: shortcut
                    .as_ref()
                    .map(|(read, values)| (read.as_ref(), values)),
                plan: None,
            };
            let store = client.portal_store();
            if let Err(e) = crate::sql_prepare::deallocate_protocol(store, &session, statement) {
                session.fail_transaction();
                send_response(client, error_response(e)).await?;
                return Ok(Vec::new());
            }
            let result = self
                .run_reporting(client, &mut session, statement, &None, reuse)
                .await?;
            send_notices(client, &mut session).await?;
            let output = match result {
                Ok(output) => output,
                Err(e) => {
                    send_response(client, error_response(e)).await?;
                    return Ok(Vec::new());
                }
            };
            if let (Some((read, _)), Output::Rows { schema, .. }) = (&shortcut, &output) {
                read.learn(schema, &session.pinned.get().catalog);
            }
            let copying = matches!(output, Output::CopyIn { .. });
            let options = format_options(client, &session);
            let response = into_response(output, &Format::UnifiedText, options)?;
            // Until the rows are all sent the statement is running: an
            // error or a cancel among them fails the block.
            session.statement_running = true;
            send_response(client, response).await?;
            session.statement_running = false;
            if copying {
                return Ok(Vec::new());
            }
        }
        if implicit {
            if let Some(block) = session.transaction.take() {
                let result = session.commit_block(block).await;
                session.block_ended(result.is_ok());
                if let Err(e) = result {
                    send_response(client, error_response(e)).await?;
                }
            }
        }
        Ok(Vec::new())
    }
}

/// Sends one statement's response of a simple query.
async fn send_response<C>(client: &mut C, response: Response) -> PgWireResult<()>
where
    C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
    C::Error: Debug,
    PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
{
    match response {
        Response::EmptyQuery => {
            client
                .feed(PgWireBackendMessage::EmptyQueryResponse(
                    EmptyQueryResponse::new(),
                ))
                .await?;
        }
        Response::Query(results) => send_query_response(client, results, true).await?,
        Response::Execution(tag)
        | Response::TransactionStart(tag)
        | Response::TransactionEnd(tag) => send_execution_response(client, tag).await?,
        Response::Error(error) => {
            client
                .feed(PgWireBackendMessage::ErrorResponse((*error).into()))
                .await?;
        }
        Response::CopyIn(copy) => {
            send_copy_in_response(client, copy).await?;
            client.set_state(PgWireConnectionState::CopyInProgress(false));
        }
        Response::CopyOut(copy) => send_copy_out_response(client, copy).await?,
        Response::CopyBoth(_) => {
            return Err(WeirError::internal("COPY BOTH is not answered here").into());
        }
    }
    Ok(())
}

/// FATAL 25P03 (the connection closes) once the idle-in-transaction
/// timeout ended the session.
fn check_alive(session: &Session) -> PgWireResult<()> {
    if session.timed_out_idle {
        return Err(PgWireError::UserError(Box::new(ErrorInfo::new(
            "FATAL".into(),
            "25P03".into(),
            "terminating connection due to idle-in-transaction timeout".into(),
        ))));
    }
    Ok(())
}

fn error_response(error: WeirError) -> Response {
    let PgWireError::UserError(info) = <PgWireError as From<WeirError>>::from(error) else {
        unreachable!("WeirError converts to a user error")
    };
    Response::Error(info)
}

impl Connection {
    /// The session's transaction status for ReadyForQuery, after settling a
    /// statement that was canceled half-way.
    async fn transaction_status<C: ClientInfo>(
        &self,
        client: &C,
    ) -> PgWireResult<TransactionStatus> {
        let mut session = self.session(client).await?;
        session.settle_canceled();
        Ok(session.transaction_status())
    }
}

/// A statement prepared with Parse: its parameter types and result columns
/// are worked out once.
#[derive(Debug, Clone)]
pub struct Prepared {
    statement: Option<WeirStatement>,
    parameters: Vec<DataType>,
    /// The PostgreSQL type of each parameter that differs from its Arrow
    /// type's (`jsonb` for a parameter stored in a `jsonb` column).
    wire_types: Vec<Option<Type>>,
    schema: Option<SchemaRef>,
    /// Set when the statement is a point read the planner need not run.
    point_read: Option<Arc<PointRead>>,
    /// A query's plan, kept between executions (`plan_cache.rs`).
    plan: Option<Arc<PlanCache>>,
}

/// What a statement may reuse from its earlier executions.
#[derive(Clone, Copy, Default)]
struct Reuse<'a> {
    /// A point read served without the planner, and its values.
    point_read: Option<(&'a PointRead, &'a Params)>,
    /// A prepared query's kept plan.
    plan: Option<&'a PlanCache>,
}

/// Parses and describes statements for the extended protocol.
pub struct Parser {
    session: Arc<Mutex<Option<Session>>>,
    shared: Arc<Shared>,
}

#[async_trait]
impl QueryParser for Parser {
    type Statement = Prepared;

    async fn parse_sql<C>(
        &self,
        client: &C,
        sql: &str,
        types: &[Option<Type>],
    ) -> PgWireResult<Option<Self::Statement>>
    where
        C: ClientInfo + Unpin + Send + Sync,
    {
        let mut session = lock_session(&self.session, &self.shared, client).await?;
        check_alive(&session)?;
        let declared: Vec<Option<DataType>> = types
            .iter()
            .map(|t| t.as_ref().and_then(arrow_type_of))
            .collect();
        let prepared = match parse_one(sql) {
            Ok(Some(statement)) => describe(&mut session, &statement, &declared)
                .await
                .map(|described| Some((statement, described))),
            Ok(None) => Ok(None),
            Err(e) => Err(e),
        };
        let (statement, described) = match prepared {
            Ok(Some(prepared)) => prepared,
            Ok(None) => return Ok(None),
            Err(e) => {
                // As in PostgreSQL, a statement that cannot be prepared
                // fails the transaction block it is in.
                session.fail_transaction();
                return Err(e.into());
            }
        };
        let Described {
            types: inferred,
            wire_types,
            schema,
        } = described;
        let count = inferred.len().max(types.len());
        let parameters = (0..count)
            .map(|i| {
                let inferred = inferred.get(i).cloned().flatten();
                match (types.get(i).cloned().flatten(), inferred) {
                    // A numeric the statement stores or casts at a known
                    // precision and scale is decoded at those, rounding as
                    // PostgreSQL rounds into numeric(p, s).
                    (Some(Type::NUMERIC), Some(decimal @ DataType::Decimal128(..))) => decimal,
                    (declared, inferred) => declared
                        .and_then(|t| arrow_type_of(&t))
                        .or(inferred)
                        .unwrap_or(DataType::Utf8),
                }
            })
            .collect();
        let mut wire_types = wire_types;
        wire_types.resize(count, None);
        let plan = match &statement {
            WeirStatement::Sql(sql) if matches!(**sql, Statement::Query(_)) => Some(Arc::default()),
            _ => None,
        };
        let point_read = match &statement {
            WeirStatement::Sql(sql) => {
                PointRead::recognise(&session.pinned.get().catalog, sql).map(Arc::new)
            }
            _ => None,
        };
        Ok(Some(Prepared {
            statement: Some(statement),
            parameters,
            wire_types,
            schema,
            point_read,
            plan,
        }))
    }

    fn get_parameter_types(&self, stmt: &Self::Statement) -> PgWireResult<Vec<Type>> {
        stmt.parameters
            .iter()
            .zip(&stmt.wire_types)
            .map(|(t, wire)| match wire {
                Some(wire) => Ok(wire.clone()),
                None => into_pg_type(t),
            })
            .collect()
    }

    fn get_result_schema(
        &self,
        stmt: &Self::Statement,
        column_format: Option<&Format>,
    ) -> PgWireResult<Vec<FieldInfo>> {
        match &stmt.schema {
            Some(schema) => fields(
                schema,
                column_format.unwrap_or(&Format::UnifiedText),
                Arc::new(FormatOptions::default()),
            ),
            None => Ok(Vec::new()),
        }
    }
}

/// The one statement of a Parse message, if any.
fn parse_one(sql: &str) -> WeirResult<Option<WeirStatement>> {
    let mut statements = weir_sql::parse(sql)?;
    if statements.len() > 1 {
        return Err(WeirError::new(
            SqlState::SYNTAX_ERROR,
            "cannot insert multiple commands into a prepared statement",
        ));
    }
    Ok(statements.pop())
}

/// The Arrow type Weir decodes a parameter of PostgreSQL type `t` into.
fn arrow_type_of(t: &Type) -> Option<DataType> {
    use datafusion::arrow::datatypes::{IntervalUnit, TimeUnit};
    Some(match *t {
        Type::BOOL => DataType::Boolean,
        Type::INT2 => DataType::Int16,
        Type::INT4 => DataType::Int32,
        Type::INT8 => DataType::Int64,
        Type::FLOAT4 => DataType::Float32,
        Type::FLOAT8 => DataType::Float64,
        Type::NUMERIC => DataType::Decimal128(38, 10),
        Type::TEXT | Type::VARCHAR | Type::BPCHAR | Type::NAME => DataType::Utf8,
        Type::BYTEA => DataType::Binary,
        Type::DATE => DataType::Date32,
        Type::TIME => DataType::Time64(TimeUnit::Microsecond),
        Type::TIMESTAMP => DataType::Timestamp(TimeUnit::Microsecond, None),
        Type::TIMESTAMPTZ => DataType::Timestamp(TimeUnit::Microsecond, Some("+00:00".into())),
        Type::INTERVAL => DataType::Interval(IntervalUnit::MonthDayNano),
        _ => return None,
    })
}

/// What a Parse learns of a statement: its parameters' types (by `$n`,
/// where known), the PostgreSQL types of those whose Arrow type does not
/// say it (`jsonb`), and its result schema.
#[derive(Default)]
struct Described {
    types: Vec<Option<DataType>>,
    wire_types: Vec<Option<Type>>,
    schema: Option<SchemaRef>,
}

/// Describes a statement. A parameter whose type the client `declared`
/// and the statement leaves open (`SELECT $1`) has the declared type, as
/// in PostgreSQL; one the statement types (`WHERE int_col = $1`) keeps it.
async fn describe(
    session: &mut Session,
    statement: &WeirStatement,
    declared: &[Option<DataType>],
) -> WeirResult<Described> {
    if let WeirStatement::Subscribe(subscribe) = statement {
        let plan = crate::subscribe::plan(session, subscribe).await?;
        return Ok(Described {
            schema: Some(plan.schema),
            ..Described::default()
        });
    }
    let sql = match statement {
        WeirStatement::Sql(sql) | WeirStatement::FetchWithin(sql, _) => sql,
        _ => return Ok(Described::default()),
    };
    session.pin_for_read();
    let mut wire_types = Vec::new();
    let mut types: Vec<Option<DataType>> = Vec::new();
    let mut note = |n: usize, t: Option<DataType>| {
        if types.len() <= n {
            types.resize(n + 1, None);
        }
        if types[n].is_none() {
            types[n] = t;
        }
    };
    // The columns of a DML statement's RETURNING list.
    let mut returned = None;
    let plan = match sql.as_ref() {
        Statement::Explain { statement, .. } if matches!(statement.as_ref(), Statement::CreateView(c) if c.materialized) =>
        {
            let schema = Schema::new(vec![Field::new("QUERY PLAN", DataType::Utf8, false)]);
            return Ok(Described {
                schema: Some(Arc::new(schema)),
                ..Described::default()
            });
        }
        Statement::Query(_) | Statement::Explain { .. } => {
            let plan = session
                .plan(crate::colnames::disambiguate(sql), &None)
                .await?;
            Some(crate::parameters::type_open_parameters(plan, declared)?)
        }
        Statement::Insert(_) | Statement::Update(_) | Statement::Delete(_) => {
            let (hints, plan, returning) = dml::describe(session, sql).await?;
            returned = returning;
            for hint in hints {
                if wire_types.len() <= hint.index {
                    wire_types.resize(hint.index + 1, None);
                }
                wire_types[hint.index] = hint.wire;
                note(hint.index, Some(hint.data_type));
            }
            plan
        }
        Statement::Fetch { name, .. } => {
            // The cursor's rows, whose columns are known since DECLARE.
            let name = crate::catalog::normalize_ident(name);
            return Ok(Described {
                schema: crate::cursor::describe(&session.cursors, &name).map(|(s, _)| s),
                ..Described::default()
            });
        }
        Statement::ShowVariable { .. } | Statement::ShowTables { .. } => {
            // SHOW has no side effects: run it to learn its columns.
            if let Output::Rows { schema, .. } =
                statement::execute(session, statement, &None).await?
            {
                return Ok(Described {
                    schema: Some(schema),
                    ..Described::default()
                });
            }
            None
        }
        _ => None,
    };
    let Some(plan) = plan else {
        return Ok(Described {
            types,
            wire_types,
            schema: returned,
        });
    };
    for (index, wire) in crate::parameters::oid_parameters(sql) {
        if wire_types.len() <= index {
            wire_types.resize(index + 1, None);
        }
        wire_types[index] = Some(wire);
    }
    for (name, field) in plan.get_parameter_fields()? {
        if let Some(n) = name.strip_prefix('$').and_then(|n| n.parse::<usize>().ok()) {
            if n > 0 {
                // A parameter compared with a `uuid` is a `uuid` on the
                // wire.
                let tagged = field.as_ref().filter(|f| crate::uuid_type::is_uuid(f));
                if let Some(wire) = tagged.and_then(|f| field_into_pg_type(f).ok()) {
                    if wire_types.len() < n {
                        wire_types.resize(n, None);
                    }
                    wire_types[n - 1].get_or_insert(wire);
                }
                note(n - 1, field.map(|f| f.data_type().clone()));
            }
        }
    }
    let schema = matches!(
        sql.as_ref(),
        Statement::Query(_) | Statement::Explain { .. }
    )
    .then(|| {
        let types = crate::rows::wire_types(&session.result_schema(&plan));
        crate::colnames::wire_schema(sql, types)
    })
    .or(returned);
    Ok(Described {
        types,
        wire_types,
        schema,
    })
}

#[async_trait]
impl ExtendedQueryHandler for Connection {
    type Statement = Prepared;
    type QueryParser = Parser;

    /// A Describe of a portal that the protocol did not bind may name a
    /// cursor declared with `DECLARE`: in PostgreSQL both are portals, so
    /// it is answered with the cursor's row description.
    async fn on_describe<C>(&self, client: &mut C, message: Describe) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let portal = message.name.as_deref().unwrap_or(DEFAULT_NAME);
        if message.target_type == TARGET_TYPE_BYTE_PORTAL
            && client.portal_store().get_portal(portal).is_none()
        {
            let session = self.session(client).await?;
            if let Some((schema, binary)) = crate::cursor::describe(&session.cursors, portal) {
                let format = if binary {
                    Format::UnifiedBinary
                } else {
                    Format::UnifiedText
                };
                let fields = fields(&schema, &format, format_options(client, &session))?;
                drop(session);
                return send_describe_response(client, &DescribePortalResponse::new(fields)).await;
            }
        }
        self._on_describe(client, message).await
    }

    fn query_parser(&self) -> Arc<Self::QueryParser> {
        Arc::new(Parser {
            session: self.session.clone(),
            shared: self.shared.clone(),
        })
    }

    /// As pgwire's, but the pipeline's implicit block commits first (an
    /// error doing so is answered before ReadyForQuery), and ReadyForQuery
    /// reports the session's transaction status (see
    /// [`SimpleQueryHandler::on_query`]).
    async fn on_sync<C>(&self, client: &mut C, _message: SyncMessage) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        client.portal_store().rm_portal(DEFAULT_NAME);
        let (ended, status) = {
            let mut session = self.session(client).await?;
            session.settle_canceled();
            let ended = pipeline::end(&mut session).await;
            (ended, session.transaction_status())
        };
        if let Err(e) = ended {
            send_response(client, error_response(e)).await?;
        }
        client.set_transaction_status(status);
        client
            .send(PgWireBackendMessage::ReadyForQuery(ReadyForQuery::new(
                status,
            )))
            .await?;
        client.flush().await?;
        Ok(())
    }

    async fn do_query<C>(
        &self,
        client: &mut C,
        portal: &Portal<Self::Statement>,
        _max_rows: usize,
    ) -> PgWireResult<Response>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let prepared = &portal.statement.statement;
        let Some(statement) = &prepared.statement else {
            return Ok(Response::EmptyQuery);
        };
        if portal.parameter_len() != prepared.parameters.len() {
            return Err(WeirError::new(
                SqlState::PROTOCOL_VIOLATION,
                format!(
                    "bind message supplies {} parameters, but prepared statement \"{}\" requires {}",
                    portal.parameter_len(),
                    portal.statement.id.replace(DEFAULT_NAME, ""),
                    prepared.parameters.len()
                ),
            )
            .into());
        }
        let params = if prepared.parameters.is_empty() {
            None
        } else {
            let types: Vec<Option<&DataType>> = prepared.parameters.iter().map(Some).collect();
            let wire_types: Vec<Option<&Type>> =
                prepared.wire_types.iter().map(Option::as_ref).collect();
            Some(
                arrow_pg::datatypes::df::deserialize_parameters_with_server_types(
                    portal,
                    &types,
                    &wire_types,
                )?,
            )
        };
        let mut session = self.session(client).await?;
        check_alive(&session)?;
        if let Err(e) =
            pipeline::before_execute(&mut session, statement, client.sync_follows()).await
        {
            session.fail_transaction();
            return Err(e.into());
        }
        let store = client.portal_store();
        if let Err(e) = crate::sql_prepare::deallocate_protocol(store, &session, statement) {
            session.fail_transaction();
            return Err(e.into());
        }
        let point_read = prepared.point_read.as_deref();
        let reuse = Reuse {
            point_read: point_read.map(|read| (read, &params)),
            plan: prepared.plan.as_deref(),
        };
        let result = self
            .run_reporting(client, &mut session, statement, &params, reuse)
            .await?;
        send_notices(client, &mut session).await?;
        let options = format_options(client, &session);
        let output = result?;
        if let (Output::Rows { schema, .. }, Some(described)) = (&output, &prepared.schema) {
            check_result_types(described, schema)?;
            if let Some(point_read) = point_read {
                point_read.learn(schema, &session.pinned.get().catalog);
            }
        }
        into_response(output, &portal.result_column_format, options)
    }
}

/// A prepared query's rows must have the types its Describe announced:
/// after the tables it reads changed (dropped and created again), the
/// client would read them wrongly. PostgreSQL answers 0A000 then, and
/// drivers prepare the statement again.
fn check_result_types(described: &SchemaRef, executed: &SchemaRef) -> PgWireResult<()> {
    let types = |schema: &SchemaRef| -> PgWireResult<Vec<u32>> {
        schema
            .fields()
            .iter()
            .map(|field| arrow_pg::datatypes::field_into_pg_type(field).map(|t| t.oid()))
            .collect()
    };
    if types(described)? != types(executed)? {
        let mut info = ErrorInfo::new(
            "ERROR".into(),
            SqlState::FEATURE_NOT_SUPPORTED.0.into(),
            "cached plan must not change result type".into(),
        );
        // pgjdbc recognises the error by PostgreSQL's routine name and
        // prepares the statement again.
        info.routine = Some("RevalidateCachedQuery".into());
        return Err(PgWireError::UserError(Box::new(info)));
    }
    Ok(())
}

#[async_trait]
impl CopyHandler for Connection {
    async fn on_copy_data<C>(&self, _client: &mut C, copy_data: CopyData) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let mut copy = self.copy.lock().expect("copy lock");
        match copy.as_mut() {
            Some(c) => {
                if let Err(e) = c.push(&copy_data.data) {
                    *copy = None;
                    return Err(e.into());
                }
                Ok(())
            }
            None => Ok(()),
        }
    }

    async fn on_copy_done<C>(&self, client: &mut C, _done: CopyDone) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let Some(copy) = self.copy.lock().expect("copy lock").take() else {
            return Err(WeirError::new(SqlState::PROTOCOL_VIOLATION, "no COPY in progress").into());
        };
        let mut session = self.session(client).await?;
        let insert = async {
            let rows = copy.parse()?;
            dml::insert_batch(&mut session, &copy.table.name, &copy.columns, rows).await
        };
        let result = guarded(insert).await;
        let count = match result {
            Ok(count) => count,
            Err(e) => {
                session.fail_transaction();
                client.set_transaction_status(session.transaction_status());
                return Err(e.into());
            }
        };
        client.set_transaction_status(session.transaction_status());
        drop(session);
        client
            .send(PgWireBackendMessage::CommandComplete(
                Tag::new("COPY").with_rows(count).into(),
            ))
            .await?;
        Ok(())
    }

    async fn on_copy_fail<C>(&self, client: &mut C, fail: CopyFail) -> PgWireError
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        self.copy.lock().expect("copy lock").take();
        if let Ok(mut session) = self.session(client).await {
            session.fail_transaction();
            client.set_transaction_status(session.transaction_status());
        }
        WeirError::new(
            SqlState::QUERY_CANCELED,
            format!("COPY from stdin failed: {}", fail.message),
        )
        .into()
    }
}
