//! Statement dispatch: the one `match` that decides what runs a statement.

use std::sync::atomic::Ordering;

use datafusion::sql::sqlparser::ast::{
    ContextModifier, Expr as SqlExpr, ObjectType, Reset, Set, Statement, Value,
};
use weir_sql::WeirStatement;

use crate::catalog::ObjectKind;
use crate::ddl;
use crate::dml;
use crate::error::{SqlState, WeirError, WeirResult};
use crate::session::{Output, Params, Session};
use crate::transaction::control;

/// Runs one statement. `COPY` only starts here; the handler feeds it data.
pub async fn execute(
    session: &mut Session,
    statement: &WeirStatement,
    params: &Params,
) -> WeirResult<Output> {
    session.apply_time_zone();
    let in_block = session.transaction.is_some();
    if let (true, Some(ddl)) = (in_block, ddl_name(statement)) {
        if !crate::transaction::ddl::fits_a_block(statement) {
            return Err(WeirError::new(
                SqlState::ACTIVE_SQL_TRANSACTION,
                format!("{ddl} cannot run inside a transaction block"),
            )
            .with_hint(
                "Weir runs statements that change the catalog outside transaction blocks, \
                 except CREATE TABLE and CREATE INDEX: COMMIT or ROLLBACK first (drivers: use \
                 autocommit for DDL).",
            ));
        }
    }
    let statement = match statement {
        WeirStatement::Flush => {
            session.db.flush().await?;
            return Ok(Output::command("FLUSH"));
        }
        WeirStatement::Checkpoint => {
            session.db.checkpoint().await?;
            return Ok(Output::command("CHECKPOINT"));
        }
        WeirStatement::CreateSource(create, options, watermark) => {
            let Statement::CreateTable(create) = create.as_ref() else {
                return Err(WeirError::internal(
                    "CREATE SOURCE parsed as another statement",
                ));
            };
            return crate::source::create(session, create, options, watermark.as_ref()).await;
        }
        WeirStatement::CreateTable {
            create,
            append_only,
            watermark,
            options,
        } => {
            let Statement::CreateTable(create) = create.as_ref() else {
                return Err(WeirError::internal(
                    "CREATE TABLE parsed as another statement",
                ));
            };
            if !options.is_empty() {
                if *append_only || watermark.is_some() {
                    return Err(WeirError::unsupported(
                        "a table a connector feeds takes its upstream's updates and deletes: \
                         it cannot be APPEND ONLY or have a WATERMARK FOR",
                    ));
                }
                return crate::cdc::create_table(session, create, options).await;
            }
            if in_block {
                return crate::transaction::ddl::create_table(
                    session,
                    create,
                    *append_only,
                    watermark.as_ref(),
                )
                .await;
            }
            return ddl::create_table(session, create, *append_only, watermark.as_ref()).await;
        }
        WeirStatement::CreateViewEmitOnWindowClose(create) => {
            let Statement::CreateView(create) = create.as_ref() else {
                return Err(WeirError::internal(
                    "CREATE MATERIALIZED VIEW parsed as another statement",
                ));
            };
            return crate::mview::create(session, create, true, None).await;
        }
        WeirStatement::CreateSink(create, options) => {
            let Statement::CreateView(create) = create.as_ref() else {
                return Err(WeirError::internal(
                    "CREATE SINK parsed as another statement",
                ));
            };
            let catalog = session.db.committed().catalog.clone();
            let sink = crate::sink::definition(&catalog, options)?;
            return crate::mview::create(session, create, false, Some(sink)).await;
        }
        WeirStatement::DropSink(drop) => {
            return drop_rewritten(session, drop, ObjectKind::Sink).await
        }
        WeirStatement::CreateSecret(create) => {
            return crate::secrets::create_secret(session, create).await
        }
        WeirStatement::DropSecret(drop) => return crate::secrets::drop_secret(session, drop).await,
        WeirStatement::AlterSequence(alter) => {
            return crate::sequences::ddl::alter_sequence(session, alter).await
        }
        WeirStatement::ShowSinks => return crate::sink::show(session),
        WeirStatement::DropSource(drop) => {
            return drop_rewritten(session, drop, ObjectKind::Source).await
        }
        WeirStatement::ShowSources => return crate::source::show(session),
        WeirStatement::Move(fetch) => return crate::cursor::move_cursor(session, fetch).await,
        WeirStatement::FetchWithin(fetch, timeout) => {
            return crate::cursor::fetch_within(session, fetch, timeout).await
        }
        WeirStatement::Subscribe(subscribe) => {
            let (schema, rows) = crate::subscribe::open(session, subscribe).await?;
            return Ok(Output::Rows { schema, rows });
        }
        WeirStatement::DeclareSubscribe(declare, subscribe) => {
            return crate::cursor::declare_subscription(session, declare, subscribe).await
        }
        WeirStatement::CopySubscribe(copy, subscribe) => {
            let (schema, rows) = crate::subscribe::open(session, subscribe).await?;
            return crate::copy_out::run_rows(session, copy, schema, rows);
        }
        WeirStatement::Sql(statement) => statement.as_ref(),
    };
    match statement {
        statement if control::is_control(statement) => control::execute(session, statement).await,
        statement if crate::cursor::is_cursor_statement(statement) => {
            crate::cursor::execute(session, statement).await
        }
        Statement::Explain { statement, .. } if matches!(statement.as_ref(), Statement::CreateView(c) if c.materialized) =>
        {
            let Statement::CreateView(create) = statement.as_ref() else {
                unreachable!("matched above")
            };
            crate::mview::explain(session, create).await
        }
        Statement::Query(_) | Statement::Explain { .. } => {
            let (schema, rows) = session.query(statement, params).await?;
            Ok(Output::Rows { schema, rows })
        }
        Statement::Insert(_) | Statement::Update(_) | Statement::Delete(_) => {
            dml::execute(session, statement, params).await
        }
        Statement::Truncate(truncate) => dml::truncate(session, truncate).await,
        Statement::CreateTable(create) if in_block => {
            crate::transaction::ddl::create_table(session, create, false, None).await
        }
        Statement::CreateTable(create) => ddl::create_table(session, create, false, None).await,
        Statement::CreateView(create) if create.materialized => {
            crate::mview::create(session, create, false, None).await
        }
        Statement::CreateView(create) => ddl::create_view(session, create).await,
        Statement::CreateIndex(create) if in_block => {
            crate::transaction::ddl::create_index(session, create).await
        }
        Statement::CreateIndex(create) => crate::indexes::create(session, create).await,
        Statement::AlterTable(alter) => crate::alter_table::alter_table(session, alter).await,
        Statement::Drop {
            object_type: ObjectType::Index,
            if_exists,
            names,
            ..
        } => crate::indexes::drop_indexes(session, names, *if_exists).await,
        Statement::CreateSequence {
            temporary,
            if_not_exists,
            name,
            data_type,
            sequence_options,
            owned_by,
        } => {
            crate::sequences::ddl::create_sequence(
                session,
                name,
                *if_not_exists,
                *temporary,
                data_type.as_ref(),
                sequence_options,
                owned_by.as_ref(),
            )
            .await
        }
        Statement::Drop {
            object_type: ObjectType::Sequence,
            if_exists,
            names,
            cascade,
            ..
        } => crate::sequences::ddl::drop_sequences(session, names, *if_exists, *cascade).await,
        Statement::Drop {
            object_type,
            if_exists,
            names,
            cascade,
            ..
        } => {
            let kind = ddl::drop_kind(*object_type)?;
            ddl::drop_relations(session, kind, names, *if_exists, *cascade).await
        }
        Statement::ShowTables { .. } => {
            let names = session
                .db
                .committed()
                .catalog
                .tables
                .keys()
                .cloned()
                .collect();
            Output::text_columns(&["name"], vec![names])
        }
        Statement::ShowViews { materialized, .. } => {
            let catalog = session.db.committed().catalog.clone();
            let names: Vec<String> = if *materialized {
                catalog
                    .materialized_views
                    .values()
                    .filter(|v| v.sink.is_none())
                    .map(|v| v.name.clone())
                    .collect()
            } else {
                catalog.views.keys().cloned().collect()
            };
            Output::text_columns(&["name"], vec![names])
        }
        Statement::ShowVariable { variable } => show(session, variable),
        Statement::Set(set) => set_variable(session, set),
        Statement::Reset(reset) => {
            let mut settings = session.settings.lock();
            match &reset.reset {
                Reset::ALL => settings.reset_all(),
                Reset::ConfigurationParameter(name) => settings.reset(&name.to_string())?,
            }
            Ok(Output::command("RESET"))
        }
        Statement::Discard { .. } => {
            session.sql_prepared.clear();
            Ok(Output::command("DISCARD ALL"))
        }
        Statement::Prepare {
            name,
            data_types,
            statement,
        } => crate::sql_prepare::prepare(session, name, data_types, statement),
        Statement::Execute {
            name: Some(name),
            parameters,
            immediate: false,
            ..
        } => {
            let Some(name) = name.0.last().and_then(|part| part.as_ident()) else {
                return Err(WeirError::new(
                    SqlState::SYNTAX_ERROR,
                    "EXECUTE needs a name",
                ));
            };
            let bound = crate::sql_prepare::bound(session, name, parameters)?;
            Box::pin(execute(session, &bound, &None)).await
        }
        Statement::Deallocate { name, .. } => Ok(crate::sql_prepare::deallocate(session, name)),
        Statement::Copy { .. } => Err(WeirError::internal("COPY is run by the handler")),
        other => Err(WeirError::unsupported(format!(
            "statement not supported: {}",
            first_words(&other.to_string())
        ))),
    }
}

/// `DROP SOURCE` or `DROP SINK` (`kind`), parsed as the `DROP` of
/// another kind.
async fn drop_rewritten(
    session: &mut Session,
    drop: &Statement,
    kind: ObjectKind,
) -> WeirResult<Output> {
    let Statement::Drop {
        if_exists,
        names,
        cascade,
        ..
    } = drop
    else {
        return Err(WeirError::internal("DROP parsed as another statement"));
    };
    ddl::drop_relations(session, kind, names, *if_exists, *cascade).await
}

/// The name of a statement that changes the catalog (DDL), as
/// PostgreSQL's errors name it; `None` for any other. Weir runs DDL
/// outside transaction blocks only.
fn ddl_name(statement: &WeirStatement) -> Option<String> {
    let statement = match statement {
        WeirStatement::CreateSource(..) => return Some("CREATE SOURCE".into()),
        WeirStatement::CreateTable { .. } => return Some("CREATE TABLE".into()),
        WeirStatement::CreateViewEmitOnWindowClose(_) => {
            return Some("CREATE MATERIALIZED VIEW".into())
        }
        WeirStatement::DropSource(_) => return Some("DROP SOURCE".into()),
        WeirStatement::CreateSink(..) => return Some("CREATE SINK".into()),
        WeirStatement::DropSink(_) => return Some("DROP SINK".into()),
        WeirStatement::CreateSecret(_) => return Some("CREATE SECRET".into()),
        WeirStatement::DropSecret(_) => return Some("DROP SECRET".into()),
        WeirStatement::AlterSequence(_) => return Some("ALTER SEQUENCE".into()),
        WeirStatement::Sql(statement) => statement.as_ref(),
        _ => return None,
    };
    Some(match statement {
        Statement::CreateTable(_) => "CREATE TABLE".into(),
        Statement::CreateView(create) if create.materialized => "CREATE MATERIALIZED VIEW".into(),
        Statement::CreateView(_) => "CREATE VIEW".into(),
        Statement::CreateIndex(_) => "CREATE INDEX".into(),
        Statement::CreateSequence { .. } => "CREATE SEQUENCE".into(),
        Statement::AlterTable(_) => "ALTER TABLE".into(),
        Statement::Drop { object_type, .. } => format!("DROP {object_type}"),
        _ => return None,
    })
}

fn first_words(sql: &str) -> String {
    sql.split_whitespace().take(3).collect::<Vec<_>>().join(" ")
}

fn show(
    session: &Session,
    variable: &[datafusion::sql::sqlparser::ast::Ident],
) -> WeirResult<Output> {
    let name = variable
        .iter()
        .map(|i| i.value.to_ascii_lowercase())
        .collect::<Vec<_>>()
        .join(" ");
    let counters = &session.db.counters;
    let value = match name.as_str() {
        "all" => {
            let (names, values): (Vec<String>, Vec<String>) = session
                .settings
                .lock()
                .all()
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .unzip();
            return Output::text_columns(&["name", "setting"], vec![names, values]);
        }
        "transaction isolation level" => "read committed".to_owned(),
        "committed_epoch" => session.db.committed_epoch().to_string(),
        "epochs_committed" => counters.epochs.load(Ordering::Relaxed).to_string(),
        "epochs_without_views" => counters
            .epochs_without_views
            .load(Ordering::Relaxed)
            .to_string(),
        "objects_written" => counters.objects.load(Ordering::Relaxed).to_string(),
        "oldest_retained_epoch" => counters
            .oldest_retained_epoch
            .load(Ordering::Relaxed)
            .to_string(),
        "bytes_written" => counters.bytes.load(Ordering::Relaxed).to_string(),
        "time zone" => session.settings.lock().get("timezone")?.to_owned(),
        other => session.settings.lock().get(other)?.to_owned(),
    };
    Output::text_columns(&[&shown_name(&name)], vec![vec![value]])
}

/// The column name of `SHOW name`: the parameter's name as PostgreSQL
/// spells it (`DateStyle`, `TimeZone`).
fn shown_name(name: &str) -> String {
    match name {
        "datestyle" => "DateStyle".into(),
        "intervalstyle" => "IntervalStyle".into(),
        "timezone" | "time zone" => "TimeZone".into(),
        "transaction isolation level" => "transaction_isolation".into(),
        other => other.replace(' ', "_"),
    }
}

/// The text of a `SET` value as PostgreSQL would store it.
fn setting_text(values: &[SqlExpr]) -> String {
    values
        .iter()
        .map(|v| match v {
            SqlExpr::Value(v) => match &v.value {
                Value::SingleQuotedString(s) | Value::DoubleQuotedString(s) => s.clone(),
                other => other.to_string(),
            },
            SqlExpr::Identifier(i) => i.value.clone(),
            other => other.to_string(),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn set_variable(session: &mut Session, set: &Set) -> WeirResult<Output> {
    let (name, value, local) = match set {
        Set::SingleAssignment {
            variable,
            values,
            scope,
            ..
        } => (
            variable.to_string(),
            setting_text(values),
            matches!(scope, Some(ContextModifier::Local)),
        ),
        Set::SetTimeZone { value, local } => (
            "timezone".to_owned(),
            setting_text(std::slice::from_ref(value)),
            *local,
        ),
        Set::SetNames { charset_name, .. } => (
            "client_encoding".to_owned(),
            charset_name.to_string(),
            false,
        ),
        // Session authorization and roles are accepted: Weir has one user
        // model. (`SET TRANSACTION` is `transaction::control`'s.)
        Set::SetSessionParam(_) | Set::SetRole { .. } => return Ok(Output::command("SET")),
        other => {
            return Err(WeirError::unsupported(format!("SET form: {other}")));
        }
    };
    let mut settings = session.settings.lock();
    // `SET TIME ZONE LOCAL` is the server's zone, its default.
    if value.eq_ignore_ascii_case("default")
        || (name == "timezone" && value.eq_ignore_ascii_case("local"))
    {
        settings.reset(&name)?;
    } else if local {
        if !settings.set_local(&name, &value)? {
            drop(settings);
            session.warning(
                SqlState::NO_ACTIVE_SQL_TRANSACTION,
                "SET LOCAL can only be used in transaction blocks",
            );
        }
    } else {
        settings.set(&name, &value)?;
    }
    Ok(Output::command("SET"))
}

/// Whether a statement may run in the transaction block the server opens
/// around a multi-statement query: queries, DML and settings, not COPY,
/// DDL or statements that manage blocks themselves.
pub fn fits_implicit_block(statement: &WeirStatement) -> bool {
    let WeirStatement::Sql(statement) = statement else {
        return matches!(
            statement,
            WeirStatement::ShowSources | WeirStatement::ShowSinks
        );
    };
    matches!(
        statement.as_ref(),
        Statement::Query(_)
            | Statement::Insert(_)
            | Statement::Update(_)
            | Statement::Delete(_)
            | Statement::Set(_)
            | Statement::Reset(_)
            | Statement::ShowVariable { .. }
    ) && !control::is_control(statement)
}

/// Whether a statement is `COPY`.
pub fn is_copy(statement: &WeirStatement) -> bool {
    matches!(statement, WeirStatement::Sql(s) if matches!(s.as_ref(), Statement::Copy { .. }))
}
