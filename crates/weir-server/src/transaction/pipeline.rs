//! The extended protocol's implicit transaction: as in PostgreSQL, the
//! statements a client sends between two Syncs outside a block run as one
//! transaction, so a pipeline of writes (pgjdbc's batches, asyncpg's
//! `executemany`) commits whole at its Sync or, after an error, not at
//! all.
//!
//! The block is opened at the first write that is not the pipeline's
//! last message before Sync: a lone write (what a driver sends for one
//! statement: Parse, Bind, Execute, Sync) commits on its own, which is
//! the same outcome without a block's private copies.

use datafusion::sql::sqlparser::ast::Statement;
use weir_sql::WeirStatement;

use super::{control, Transaction};
use crate::error::WeirResult;
use crate::session::Session;
use crate::statement::fits_implicit_block;

/// Before an Execute of `statement`; `sync_follows` says whether the
/// next message received is the Sync that ends the pipeline. Opens the
/// pipeline's block for a write that more messages follow; commits it
/// first for a statement that cannot run in a block (DDL, `COPY`).
/// Transaction statements run in it: `BEGIN` makes it an explicit block,
/// `COMMIT` and `ROLLBACK` end it.
pub async fn before_execute(
    session: &mut Session,
    statement: &WeirStatement,
    sync_follows: bool,
) -> WeirResult<()> {
    match &session.transaction {
        None if !sync_follows && is_write(statement) => {
            let block = Transaction::new(session.db.committed(), false, true);
            session.open_block(block);
            Ok(())
        }
        Some(block)
            if block.is_implicit()
                && !fits_implicit_block(statement)
                && !matches!(statement, WeirStatement::Sql(s) if control::is_control(s)) =>
        {
            end(session).await
        }
        _ => Ok(()),
    }
}

/// At Sync (or a simple query after Executes without one): commits the
/// pipeline's block, if one is open.
pub async fn end(session: &mut Session) -> WeirResult<()> {
    let Some(block) = session.transaction.take_if(|b| b.is_implicit()) else {
        return Ok(());
    };
    let result = session.commit_block(block).await;
    session.block_ended(result.is_ok());
    result
}

fn is_write(statement: &WeirStatement) -> bool {
    matches!(
        statement,
        WeirStatement::Sql(s) if matches!(
            s.as_ref(),
            Statement::Insert(_) | Statement::Update(_) | Statement::Delete(_)
        )
    )
}
