//! The statements that open, end and mark transaction blocks: `BEGIN`,
//! `COMMIT`, `ROLLBACK`, `SAVEPOINT`, `RELEASE`, `ROLLBACK TO` and
//! `SET TRANSACTION`, answered as PostgreSQL answers them.

use datafusion::sql::sqlparser::ast::{Set, Statement, TransactionAccessMode, TransactionMode};

use crate::catalog::normalize_ident;
use crate::error::{SqlState, WeirError, WeirResult};
use crate::session::{Output, Session};

use super::Transaction;

/// Whether `statement` is one this module runs.
pub fn is_control(statement: &Statement) -> bool {
    matches!(
        statement,
        Statement::StartTransaction { .. }
            | Statement::Commit { .. }
            | Statement::Rollback { .. }
            | Statement::Savepoint { .. }
            | Statement::ReleaseSavepoint { .. }
            | Statement::Set(Set::SetTransaction { .. })
    )
}

/// Whether `statement` may run in a failed block: what ends it or rolls
/// back to a savepoint.
pub fn ends_failure(statement: &Statement) -> bool {
    matches!(
        statement,
        Statement::Commit { .. } | Statement::Rollback { .. }
    )
}

/// The error of every other statement in a failed block.
pub fn in_failed_block() -> WeirError {
    WeirError::new(
        SqlState::IN_FAILED_SQL_TRANSACTION,
        "current transaction is aborted, commands ignored until end of transaction block",
    )
}

/// Runs a statement for which [`is_control`] holds.
pub async fn execute(session: &mut Session, statement: &Statement) -> WeirResult<Output> {
    match statement {
        Statement::StartTransaction { modes, .. } => Ok(begin(session, read_only(modes))),
        Statement::Commit { chain, .. } => commit(session, *chain).await,
        Statement::Rollback {
            savepoint: Some(name),
            ..
        } => {
            block(session, "ROLLBACK TO SAVEPOINT")?.rollback_to(&normalize_ident(name))?;
            Ok(Output::command("ROLLBACK"))
        }
        Statement::Rollback { chain, .. } => Ok(rollback(session, *chain)),
        Statement::Savepoint { name } => {
            block(session, "SAVEPOINT")?.savepoint(normalize_ident(name));
            Ok(Output::command("SAVEPOINT"))
        }
        Statement::ReleaseSavepoint { name } => {
            block(session, "RELEASE SAVEPOINT")?.release(&normalize_ident(name))?;
            Ok(Output::command("RELEASE"))
        }
        Statement::Set(Set::SetTransaction { modes, .. }) => {
            if let (Some(block), Some(read_only)) = (&mut session.transaction, read_only(modes)) {
                block.set_read_only(read_only);
            }
            Ok(Output::command("SET"))
        }
        other => Err(WeirError::internal(format!(
            "not a transaction statement: {other}"
        ))),
    }
}

/// `READ ONLY` / `READ WRITE` among a statement's modes, if named.
/// Isolation levels are accepted: every block runs at snapshot isolation.
fn read_only(modes: &[TransactionMode]) -> Option<bool> {
    modes.iter().rev().find_map(|m| match m {
        TransactionMode::AccessMode(TransactionAccessMode::ReadOnly) => Some(true),
        TransactionMode::AccessMode(TransactionAccessMode::ReadWrite) => Some(false),
        TransactionMode::IsolationLevel(_) => None,
    })
}

fn begin(session: &mut Session, read_only: Option<bool>) -> Output {
    if let Some(block) = session.transaction.as_mut().filter(|b| b.is_implicit()) {
        block.make_explicit();
        if let Some(read_only) = read_only {
            block.set_read_only(read_only);
        }
    } else if session.transaction.is_some() {
        session.warning(
            SqlState::ACTIVE_SQL_TRANSACTION,
            "there is already a transaction in progress",
        );
    } else {
        let default_read_only = session
            .settings
            .lock()
            .get("default_transaction_read_only")
            .is_ok_and(|v| v == "on");
        let block = Transaction::new(
            session.db.committed(),
            read_only.unwrap_or(default_read_only),
            false,
        );
        session.open_block(block);
    }
    Output::TransactionStart
}

async fn commit(session: &mut Session, chain: bool) -> WeirResult<Output> {
    let Some(block) = session.transaction.take() else {
        session.warning(
            SqlState::NO_ACTIVE_SQL_TRANSACTION,
            "there is no transaction in progress",
        );
        return Ok(Output::TransactionEnd("COMMIT"));
    };
    let read_only = block.read_only;
    let result = if block.is_failed() {
        Ok("ROLLBACK")
    } else {
        session.commit_block(block).await.map(|()| "COMMIT")
    };
    session.block_ended(matches!(result, Ok("COMMIT")));
    let tag = result?;
    if chain {
        begin(session, Some(read_only));
    }
    Ok(Output::TransactionEnd(tag))
}

fn rollback(session: &mut Session, chain: bool) -> Output {
    match session.close_block(false) {
        Some(block) if chain => {
            begin(session, Some(block.read_only));
        }
        Some(_) => {}
        None => session.warning(
            SqlState::NO_ACTIVE_SQL_TRANSACTION,
            "there is no transaction in progress",
        ),
    }
    Output::TransactionEnd("ROLLBACK")
}

/// The open block, or 25P01 naming `what` needs one.
fn block<'a>(session: &'a mut Session, what: &str) -> WeirResult<&'a mut Transaction> {
    session.transaction.as_mut().ok_or_else(|| {
        WeirError::new(
            SqlState::NO_ACTIVE_SQL_TRANSACTION,
            format!("{what} can only be used in transaction blocks"),
        )
    })
}
