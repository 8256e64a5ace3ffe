//! `CREATE TABLE` and `CREATE INDEX` inside a transaction block: planned
//! as outside one, against the block's catalog, and added to it; the
//! block's `COMMIT` makes them everyone's (`Transaction::commit`).
//! ORMs create their schema this way (SQLAlchemy's `create_all`,
//! migration tools), inside the transaction their driver opens.

use datafusion::sql::sqlparser::ast::{CreateIndex, CreateTable};

use crate::ddl::{fill_table, plan_table, Planned, PlannedTable};
use crate::error::{WeirError, WeirResult};
use crate::session::{Output, Session};
use crate::transaction::Transaction;

/// Whether a statement is DDL that a block can hold.
pub fn fits_a_block(statement: &weir_sql::WeirStatement) -> bool {
    use datafusion::sql::sqlparser::ast::Statement;
    match statement {
        weir_sql::WeirStatement::CreateTable { options, .. } => options.is_empty(),
        weir_sql::WeirStatement::Sql(sql) => matches!(
            sql.as_ref(),
            Statement::CreateTable(_) | Statement::CreateIndex(_)
        ),
        _ => false,
    }
}

/// `CREATE TABLE` in the session's block (`AS SELECT` included: its rows
/// are the block's writes).
pub async fn create_table(
    session: &mut Session,
    create: &CreateTable,
    append_only: bool,
    watermark: Option<&weir_sql::WatermarkClause>,
) -> WeirResult<Output> {
    in_block(session, async |session, block| {
        block.check_writable("CREATE TABLE")?;
        let snapshot = block.read_snapshot();
        let planned = plan_table(session, snapshot, create, append_only, watermark).await?;
        let PlannedTable {
            mut def,
            sequences,
            rows,
        } = match planned {
            Planned::Table(table) => *table,
            Planned::Skipped(output) => return Ok(output),
        };
        if !sequences.is_empty() {
            // Lasting ids from the shared counter: the sequences' values
            // are kept under them from now on (a block's table ids are
            // provisional).
            let ids = {
                let mut working = session.db.working().await;
                working.catalog_changed();
                crate::sequences::ddl::allocate_ids(&mut working.catalog, sequences.len())
            };
            block.create_sequences(&mut def, &ids, &sequences, session.db.sequences.clone());
        }
        let id = block.create_table(def.clone())?;
        fill_table(&def, block.private_state().table_mut(id)?, rows)
    })
    .await
}

/// `CREATE INDEX` in the session's block.
pub async fn create_index(session: &mut Session, create: &CreateIndex) -> WeirResult<Output> {
    in_block(session, async |session, block| {
        block.check_writable("CREATE INDEX")?;
        let catalog = block.catalog().clone();
        if let Some(index) = crate::indexes::new_index(session, &catalog, create)? {
            block.create_index(index);
        }
        Ok(Output::command("CREATE INDEX"))
    })
    .await
}

/// Runs `work` with the session's block taken out of it, and puts the
/// block back whatever happens.
async fn in_block(
    session: &mut Session,
    work: impl AsyncFnOnce(&mut Session, &mut Transaction) -> WeirResult<Output>,
) -> WeirResult<Output> {
    let Some(mut block) = session.transaction.take() else {
        return Err(WeirError::internal("block DDL outside a block"));
    };
    let result = work(session, &mut block).await;
    session.transaction = Some(block);
    result
}
