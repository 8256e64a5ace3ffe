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
mod target;
mod upsert;

use std::sync::Arc;

use datafusion::arrow::datatypes::DataType;
use datafusion::sql::sqlparser::ast::{
    AssignmentTarget, Expr as SqlExpr, SetExpr, Statement, Value,
};

use crate::catalog::{normalize_ident, Catalog, TableDef};
use crate::error::{SqlState, WeirError, WeirResult};
use crate::session::{Output, Params, Session};
use crate::types::pg_type_name;

pub use constraints::{check_write, conform};
pub use insert::insert_batch;
use insert::{insert_columns, insert_rows, insert_target};
pub use target::{delete_query, plan_target_query, update_query};
use target::{delete_rows, update_rows, update_target};

/// Runs INSERT, UPDATE or DELETE and waits until its change is committed.
pub async fn execute(
    session: &Session,
    statement: &Statement,
    params: &Params,
) -> WeirResult<Output> {
    let db = session.db.clone();
    let mut working = db.working().await;
    session.pinned.pin(Arc::new(working.snapshot()));
    let (tag, rows) = match statement {
        Statement::Insert(insert) => (
            "INSERT",
            insert_rows(session, &mut working, insert, params).await?,
        ),
        Statement::Update(update) => (
            "UPDATE",
            update_rows(session, &mut working, update, params).await?,
        ),
        Statement::Delete(delete) => (
            "DELETE",
            delete_rows(session, &mut working, delete, params).await?,
        ),
        other => return Err(WeirError::internal(format!("not DML: {other}"))),
    };
    let epoch = working.epoch;
    drop(working);
    if rows > 0 {
        db.wait_committed(epoch).await?;
    }
    Ok(Output::Command {
        tag,
        rows: Some(rows),
    })
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

/// Types of `$n` parameters that stand alone in an INSERT's VALUES or an
/// UPDATE's SET, taken from their target columns (index = n - 1).
pub fn parameter_hints(catalog: &Catalog, statement: &Statement) -> Vec<(usize, DataType)> {
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
                            hints.push((n, def.columns[column].data_type.clone()));
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
                if let (AssignmentTarget::ColumnName(name), Some(n)) =
                    (&assignment.target, placeholder_index(&assignment.value))
                {
                    let column = name
                        .0
                        .last()
                        .and_then(|p| p.as_ident())
                        .map(normalize_ident);
                    if let Some(index) = column.and_then(|c| def.column_index(&c)) {
                        hints.push((n, def.columns[index].data_type.clone()));
                    }
                }
            }
        }
        _ => {}
    }
    hints
}

pub(super) fn placeholder_index(expr: &SqlExpr) -> Option<usize> {
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

pub(super) fn type_mismatch(column: &str, to: &DataType, from: &DataType) -> WeirError {
    WeirError::new(
        SqlState::DATATYPE_MISMATCH,
        format!(
            "column \"{column}\" is of type {} but expression is of type {}",
            pg_type_name(to),
            pg_type_name(from)
        ),
    )
}
