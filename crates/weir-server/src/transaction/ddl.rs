//! `CREATE TABLE` and `CREATE INDEX` inside a transaction block: planned
//! as outside one, against the block's catalog, and added to it; the
//! block's `COMMIT` makes them everyone's (`Transaction::commit`).
//! ORMs create their schema this way (SQLAlchemy's `create_all`,
//! migration tools), inside the transaction their driver opens.

use std::sync::Arc;

use datafusion::sql::sqlparser::ast::{CreateIndex, CreateTable};

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
        let catalog = block.catalog().clone();
        if let Some(skipped) = crate::ddl::claim_table_name(session, &catalog, create)? {
            return Ok(skipped);
        }
        let (create, serials) = crate::sequences::ddl::serial_columns(create, &catalog)?;
        let create = &create;
        crate::ddl::check_create_table(create, append_only, watermark)?;
        session.pinned.pin(Arc::new(block.read_snapshot()));
        let memory = crate::ddl::plan_columns(session, create).await?;
        let mut def = crate::ddl::table_def(session, create, &memory, append_only, watermark)?;
        let rows = match create.query {
            Some(_) => {
                let input = Arc::unwrap_or_clone(memory.input);
                let (_, batches) = session.collect(input).await?;
                Some(crate::dml::conform(&def, &batches)?)
            }
            None => None,
        };
        if !serials.is_empty() {
            // Lasting ids from the shared counter: the sequences' values
            // are kept under them from now on (a block's table ids are
            // provisional).
            let ids = {
                let mut working = session.db.working().await;
                working.catalog_changed();
                crate::sequences::ddl::allocate_ids(&mut working.catalog, serials.len())
            };
            block.create_sequences(&mut def, &ids, &serials, session.db.sequences.clone());
        }
        let id = block.create_table(def.clone())?;
        let Some(rows) = rows else {
            return Ok(Output::command("CREATE TABLE"));
        };
        let count = rows.num_rows();
        let table = block.private_state().table_mut(id)?;
        crate::dml::check_write(&def, &rows, table.write(&[], Some(&rows))?)?;
        Ok(Output::Command {
            tag: "SELECT",
            rows: Some(count),
        })
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
