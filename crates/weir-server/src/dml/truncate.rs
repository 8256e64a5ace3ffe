//! `TRUNCATE [TABLE] name [, ...] [RESTART IDENTITY | CONTINUE IDENTITY]
//! [CASCADE | RESTRICT]`: every row of the tables deleted, in one epoch
//! (or with the transaction block's other writes), so materialized views
//! see the rows go as they see a `DELETE`.
//!
//! `RESTART IDENTITY` starts the sequences the tables' columns own
//! (`SERIAL`, identity) again from their first value once the rows are
//! gone, in the same epoch. Inside a transaction block it is refused
//! (0A000): a sequence's value is not transactional here, and a restart
//! that took effect before the block's commit, or only at it, would hand
//! out numbers the block's or other sessions' rows already hold. Weir has
//! no foreign keys, so `CASCADE` and `RESTRICT` change nothing.

use std::sync::Arc;

use datafusion::sql::sqlparser::ast::{Statement, Truncate, TruncateIdentityOption};
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::parser::Parser;

use crate::catalog::{relation_name, Catalog};
use crate::error::{SqlState, WeirError, WeirResult};
use crate::sequences::SequenceDef;
use crate::session::{Output, Session};

use super::target::delete_rows;
use super::writable_def;

/// Runs `TRUNCATE`.
pub async fn truncate(session: &mut Session, truncate: &Truncate) -> WeirResult<Output> {
    let mut deletes = Vec::with_capacity(truncate.table_names.len());
    for target in &truncate.table_names {
        let name = relation_name(&target.name)?;
        if deletes.iter().any(|(n, _)| n == &name) {
            continue;
        }
        let sql = format!("DELETE FROM {}", crate::catalog_functions::quoted(&name));
        let delete = Parser::parse_sql(&PostgreSqlDialect {}, &sql)
            .ok()
            .and_then(|mut s| s.pop())
            .ok_or_else(|| WeirError::internal(format!("{sql} does not parse")))?;
        deletes.push((name, delete));
    }
    let restart = matches!(truncate.identity, Some(TruncateIdentityOption::Restart));
    let db = session.db.clone();
    if restart && session.transaction.is_some() {
        return Err(WeirError::new(
            SqlState::FEATURE_NOT_SUPPORTED,
            "TRUNCATE ... RESTART IDENTITY cannot run inside a transaction block",
        )
        .with_hint(
            "Run it outside the block, or TRUNCATE inside it and move the sequences with setval after COMMIT.",
        ));
    }
    if let Some(mut block) = session.transaction.take() {
        let result = async {
            for (_, delete) in &deletes {
                let def = writable_def(block.catalog(), delete)?;
                block.prepare_write(&def, "TRUNCATE TABLE")?;
                session.pinned.pin(Arc::new(block.read_snapshot()));
                run_delete(session, block.private_state(), delete).await?;
            }
            Ok::<(), WeirError>(())
        }
        .await;
        session.transaction = Some(block);
        result?;
        return Ok(Output::command("TRUNCATE TABLE"));
    }
    let mut working = db.working().await;
    // Every table checked before any row goes.
    for (_, delete) in &deletes {
        writable_def(&working.catalog, delete)?;
    }
    session.pinned.pin(Arc::new(db.working_snapshot(&working)));
    for (_, delete) in &deletes {
        run_delete(session, &mut working, delete).await?;
    }
    if restart {
        for sequence in owned_sequences(&working.catalog, &deletes) {
            db.sequences.restart(&sequence)?;
        }
    }
    let epoch = working.epoch;
    drop(working);
    db.wait_committed(epoch).await?;
    Ok(Output::command("TRUNCATE TABLE"))
}

async fn run_delete(
    session: &Session,
    working: &mut crate::database::WorkingState,
    delete: &Statement,
) -> WeirResult<()> {
    let Statement::Delete(delete) = delete else {
        return Err(WeirError::internal("TRUNCATE's delete is not a DELETE"));
    };
    delete_rows(session, working, delete, &None).await?;
    Ok(())
}

/// The sequences the columns of the truncated tables own.
fn owned_sequences(catalog: &Catalog, deletes: &[(String, Statement)]) -> Vec<SequenceDef> {
    catalog
        .sequences
        .values()
        .filter(|s| {
            s.owned_by
                .as_ref()
                .is_some_and(|(table, _)| deletes.iter().any(|(name, _)| name == table))
        })
        .cloned()
        .collect()
}
