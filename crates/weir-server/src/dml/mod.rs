//! INSERT, UPDATE and DELETE.
//!
//! Each statement holds the working state's lock while it computes its
//! change: it plans a DataFusion query over the working state (so it sees
//! every earlier statement of the open epoch), runs it, checks constraints
//! on the resulting batch, and applies it to the table. Then it releases the
//! lock and waits for its epoch to commit.
//!
//! UPDATE and DELETE plan their target as [`crate::provider::DML_TARGET`], whose scan also
//! yields each row's position, so the statement knows exactly which stored
//! rows to replace or remove.

mod constraints;
mod insert;
mod returning;
mod target;
mod truncate;
mod upsert;
mod values;

use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::logical_expr::{cast, lit, when, Expr, LogicalPlan};
use datafusion::sql::sqlparser::ast::{
    AssignmentTarget, Expr as SqlExpr, SetExpr, Statement, Value,
};

use crate::catalog::{normalize_ident, Catalog, ColumnDef, TableDef};
use crate::database::WorkingState;
use crate::error::{SqlState, WeirError, WeirResult};
use crate::session::{Output, Params, Session};
use crate::types::{assignable, pg_type_name};

pub use constraints::{check_write, conform, violation_error};
pub use insert::insert_batch;
pub(crate) use insert::plan_rows;
pub(crate) use insert::text_rows;
use insert::{insert_columns, insert_rows, insert_target};
use target::{delete_query, plan_target_query, update_query};
use target::{delete_rows, update_rows, update_target};
pub use truncate::truncate;

/// Runs INSERT, UPDATE or DELETE. Outside a transaction block it waits
/// until its change is committed; inside one it changes the block's
/// private copy of the table, which COMMIT applies.
pub async fn execute(
    session: &mut Session,
    statement: &Statement,
    params: &Params,
) -> WeirResult<Output> {
    let tag = match statement {
        Statement::Insert(_) => "INSERT",
        Statement::Update(_) => "UPDATE",
        Statement::Delete(_) => "DELETE",
        other => return Err(WeirError::internal(format!("not DML: {other}"))),
    };
    if returning::items(statement).is_some() {
        // A RETURNING list that does not plan fails before anything is
        // written.
        session.pin_for_read();
        let def = target_def(&session.pinned.get().catalog, statement)?;
        returning::schema(session, statement, &def).await?;
    }
    let target = |catalog: &Catalog| writable_def(catalog, statement);
    let mut def = None;
    let written = write(session, tag, target, async |session, working| {
        def = Some(writable_def(&working.catalog, statement)?);
        apply(session, working, statement, params).await
    })
    .await?;
    match (returning::items(statement), def, written.rows) {
        (Some(_), Some(def), Some(rows)) => {
            returning::output(session, statement, tag, &def, rows).await
        }
        _ => Ok(Output::Command {
            tag,
            rows: Some(written.count),
        }),
    }
}

/// The table a DML statement writes.
fn target_def(catalog: &Catalog, statement: &Statement) -> WeirResult<TableDef> {
    Ok(match statement {
        Statement::Insert(insert) => insert_target(catalog, insert)?.clone(),
        Statement::Update(update) => update_target(catalog, &update.table)?.0.clone(),
        Statement::Delete(delete) => delete_query(catalog, delete)?.0,
        other => return Err(WeirError::internal(format!("not DML: {other}"))),
    })
}

/// The table a DML statement writes, if the statement may write it: an
/// `APPEND ONLY` table takes inserts only (views over it keep less state
/// and may close windows for good).
fn writable_def(catalog: &Catalog, statement: &Statement) -> WeirResult<TableDef> {
    let def = target_def(catalog, statement)?;
    check_not_fed(&def)?;
    let changes_rows = match statement {
        Statement::Update(_) | Statement::Delete(_) => true,
        Statement::Insert(insert) => matches!(
            insert.on.as_ref(),
            Some(datafusion::sql::sqlparser::ast::OnInsert::OnConflict(conflict))
                if matches!(conflict.action, datafusion::sql::sqlparser::ast::OnConflictAction::DoUpdate(_))
        ),
        _ => false,
    };
    if def.append_only && changes_rows {
        return Err(WeirError::new(
            SqlState("0A000"),
            format!(
                "table \"{}\" is APPEND ONLY: it takes inserts only, not updates or deletes",
                def.name
            ),
        ));
    }
    Ok(def)
}

/// Refuses DML on a table a connector feeds: its rows are its
/// upstream's, and a local change would be lost or overwritten by the
/// next upstream change of the row.
pub(crate) fn check_not_fed(def: &TableDef) -> WeirResult<()> {
    match &def.connector {
        Some(connector) => Err(WeirError::new(
            SqlState("42809"),
            format!(
                "cannot change table \"{}\": its rows come from its {} connector",
                def.name, connector.connector
            ),
        )
        .with_hint("Change the upstream table; its changes reach this table.")),
        None => Ok(()),
    }
}

/// What a statement wrote.
pub(super) struct Written {
    /// The number of rows it inserted, updated or deleted.
    count: usize,
    /// The rows, for `RETURNING`: the new rows of an INSERT or UPDATE, the
    /// old rows of a DELETE (only when it has a `RETURNING` list).
    rows: Option<RecordBatch>,
}

impl Written {
    fn rows(rows: RecordBatch) -> Self {
        Written {
            count: rows.num_rows(),
            rows: Some(rows),
        }
    }
}

/// Runs `change` (which returns the rows it changed) where a write of
/// `session` goes: inside a transaction block, against the block's
/// private tables, after copying in the table `target` names (`verb`
/// names the statement for a read-only block's error); outside one,
/// against the working state under its lock, then waiting until the epoch
/// is committed. Reads of the change's planning see the same state.
async fn write(
    session: &mut Session,
    verb: &str,
    target: impl FnOnce(&Catalog) -> WeirResult<TableDef>,
    change: impl AsyncFnOnce(&Session, &mut WorkingState) -> WeirResult<Written>,
) -> WeirResult<Written> {
    if let Some(mut block) = session.transaction.take() {
        let result = match target(block.catalog()).and_then(|def| block.prepare_write(&def, verb)) {
            Ok(()) => {
                session.pinned.pin(Arc::new(block.read_snapshot()));
                change(session, block.private_state()).await
            }
            Err(e) => Err(e),
        };
        session.transaction = Some(block);
        return result;
    }
    let db = session.db.clone();
    let mut working = db.working().await;
    session.pinned.pin(Arc::new(db.working_snapshot(&working)));
    let written = change(session, &mut working).await?;
    let epoch = working.epoch;
    drop(working);
    if written.count > 0 {
        db.wait_committed(epoch).await?;
    }
    Ok(written)
}

/// Applies a DML statement to `working`; returns what it wrote.
async fn apply(
    session: &Session,
    working: &mut WorkingState,
    statement: &Statement,
    params: &Params,
) -> WeirResult<Written> {
    match statement {
        Statement::Insert(insert) => insert_rows(session, working, insert, params).await,
        Statement::Update(update) => update_rows(session, working, update, params).await,
        Statement::Delete(delete) => delete_rows(session, working, delete, params).await,
        other => Err(WeirError::internal(format!("not DML: {other}"))),
    }
}

pub(super) fn column_index(def: &TableDef, column: &str) -> WeirResult<usize> {
    def.column_index(column).ok_or_else(|| {
        WeirError::new(
            SqlState::UNDEFINED_COLUMN,
            format!(
                "column \"{column}\" of relation \"{}\" does not exist",
                def.name
            ),
        )
    })
}

/// What the extended protocol's Describe needs of a DML statement: the
/// types its lone `$n` parameters take from their target columns (index =
/// n - 1), and the plan of the query it runs, whose other parameters
/// DataFusion types. Plans against the session's pinned snapshot.
pub async fn describe(
    session: &Session,
    statement: &Statement,
) -> WeirResult<(Vec<ParameterHint>, Option<LogicalPlan>, Option<SchemaRef>)> {
    let catalog = session.pinned.get().catalog.clone();
    let hints = parameter_hints(&catalog, statement);
    let returned = match returning::items(statement) {
        Some(_) => returning::schema(session, statement, &target_def(&catalog, statement)?).await?,
        None => None,
    };
    let plan = match statement {
        Statement::Insert(insert) => match &insert.source {
            Some(query) => {
                // `DEFAULT` in VALUES stands for the column's default, as
                // when the statement runs.
                let def = insert_target(&catalog, insert)?;
                let columns = insert_columns(def, insert)?;
                let query = insert::replace_default_keyword(query, def, &columns)?;
                Some(session.plan(Statement::Query(query), &None).await?)
            }
            None => None,
        },
        Statement::Update(update) => {
            let (def, query) = update_query(&catalog, update)?;
            Some(plan_target_query(session, &def, &query, &None).await?)
        }
        Statement::Delete(delete) => {
            let (def, query) = delete_query(&catalog, delete)?;
            Some(plan_target_query(session, &def, &query, &None).await?)
        }
        _ => None,
    };
    Ok((hints, plan, returned))
}

/// The type of a `$n` parameter (`index` = n - 1) that stands alone in an
/// INSERT's VALUES or an UPDATE's SET: its target column's.
pub struct ParameterHint {
    /// Which parameter.
    pub index: usize,
    /// The column's Arrow type.
    pub data_type: DataType,
    /// The column's type on the wire where its Arrow type does not say
    /// it: `json`, `jsonb`, `uuid`.
    pub wire: Option<pgwire::api::Type>,
}

impl ParameterHint {
    fn new(index: usize, column: &ColumnDef) -> Self {
        let uuid = column.is_uuid();
        ParameterHint {
            index,
            data_type: column.data_type.clone(),
            wire: match column.json {
                Some(kind) => Some(kind.pg_type()),
                None => uuid.then_some(pgwire::api::Type::UUID),
            },
        }
    }
}

/// Types of `$n` parameters that stand alone in an INSERT's VALUES or an
/// UPDATE's SET, taken from their target columns.
fn parameter_hints(catalog: &Catalog, statement: &Statement) -> Vec<ParameterHint> {
    let mut hints = Vec::new();
    match statement {
        Statement::Insert(insert) => {
            let Ok(def) = insert_target(catalog, insert) else {
                return hints;
            };
            let Ok(columns) = insert_columns(def, insert) else {
                return hints;
            };
            if let Some(SetExpr::Values(values)) = insert.source.as_ref().map(|q| &*q.body) {
                for row in &values.rows {
                    for (expr, &column) in row.iter().zip(&columns) {
                        if let Some(n) = placeholder_index(expr) {
                            hints.push(ParameterHint::new(n, &def.columns[column]));
                        }
                    }
                }
            }
        }
        Statement::Update(update) => {
            let Ok((def, _)) = update_target(catalog, &update.table) else {
                return hints;
            };
            for assignment in &update.assignments {
                let column = assignment_column(def, &assignment.target);
                if let (Ok(index), Some(n)) = (column, placeholder_index(&assignment.value)) {
                    hints.push(ParameterHint::new(n, &def.columns[index]));
                }
            }
        }
        _ => {}
    }
    hints
}

fn placeholder_index(expr: &SqlExpr) -> Option<usize> {
    match expr {
        SqlExpr::Value(v) => match &v.value {
            Value::Placeholder(p) => p.strip_prefix('$')?.parse::<usize>().ok()?.checked_sub(1),
            _ => None,
        },
        SqlExpr::Nested(inner) => placeholder_index(inner),
        _ => None,
    }
}

pub(super) fn assignment_column(def: &TableDef, target: &AssignmentTarget) -> WeirResult<usize> {
    match target {
        AssignmentTarget::ColumnName(name) => {
            let ident = name
                .0
                .last()
                .and_then(|p| p.as_ident())
                .ok_or_else(|| WeirError::unsupported(format!("assignment to {name}")))?;
            column_index(def, &normalize_ident(ident))
        }
        AssignmentTarget::Tuple(_) => Err(WeirError::unsupported(
            "assigning a tuple of columns; assign each column",
        )),
    }
}

pub(super) fn multiple_assignments(column: &str) -> WeirError {
    WeirError::new(
        SqlState::SYNTAX_ERROR,
        format!("multiple assignments to same column \"{column}\""),
    )
}

/// The expression that stores `value`, of type `from`, in `column`, by
/// PostgreSQL's assignment rules: 42804 across type categories, text read
/// as bytea's hex format, as JSON (validated, `jsonb` in normal form) or as
/// a uuid, a
/// cast otherwise (PostgreSQL's text casts: `casts::assign_cast`). Every
/// write path (INSERT, COPY, UPDATE, ON CONFLICT DO UPDATE) goes through
/// here.
pub(super) fn assign(column: &ColumnDef, value: Expr, from: &DataType) -> WeirResult<Expr> {
    let text = matches!(
        from,
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View
    );
    let uuid = column.is_uuid();
    let allowed = match column.json {
        Some(_) => text || from.is_null(),
        None if uuid => text || from.is_null(),
        None => assignable(from, &column.data_type),
    };
    if !allowed {
        return Err(WeirError::new(
            SqlState::DATATYPE_MISMATCH,
            format!(
                "column \"{}\" is of type {} but expression is of type {}",
                column.name,
                column.type_name(),
                pg_type_name(from)
            ),
        ));
    }
    let stored = match (column.json, &column.data_type) {
        (Some(kind), _) => crate::json::input(kind, value),
        (None, _) if uuid => crate::uuid_type::input(value),
        (None, DataType::Binary) if text => bytea_from_text(value),
        _ => crate::casts::assign_cast(value, from, &column.data_type),
    };
    Ok(stored.alias(&column.name))
}

/// Text to bytea as PostgreSQL reads it: `\x` followed by hex digits is the
/// hex format; anything else is taken as the bytes of the text.
fn bytea_from_text(text: Expr) -> Expr {
    use datafusion::functions::expr_fn::{decode, starts_with, substr};
    when(
        starts_with(text.clone(), lit("\\x")),
        decode(substr(text.clone(), lit(3i64)), lit("hex")),
    )
    .otherwise(cast(text, DataType::Binary))
    .expect("a CASE with a WHEN")
}
