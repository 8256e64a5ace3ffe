//! `RETURNING`: the rows a statement wrote (the new rows of INSERT, of
//! `ON CONFLICT DO UPDATE` and of UPDATE) or removed (DELETE's old rows),
//! each projected by the statement's `RETURNING` list.
//!
//! The list is planned by DataFusion over those rows as a relation named
//! like the statement's target (its alias, else the table), so columns,
//! qualified columns, `*`, expressions and the session's functions work as
//! in a select list; the columns are named as PostgreSQL names them
//! (`colnames.rs`).

use std::sync::Arc;

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::catalog::MemTable;
use datafusion::datasource::provider_as_source;
use datafusion::logical_expr::{LogicalPlan, LogicalPlanBuilder};
use datafusion::sql::sqlparser::ast::{FromTable, SelectItem, Statement, TableFactor};
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::parser::Parser;

use crate::catalog::{normalize_ident, TableDef};
use crate::error::{WeirError, WeirResult};
use crate::session::{Output, Session};

/// The `RETURNING` list of a DML statement, if it has one.
pub fn items(statement: &Statement) -> Option<&[SelectItem]> {
    match statement {
        Statement::Insert(insert) => insert.returning.as_deref(),
        Statement::Update(update) => update.returning.as_deref(),
        Statement::Delete(delete) => delete.returning.as_deref(),
        _ => None,
    }
}

/// The name the statement gives its target table: its alias, else the
/// table's name.
fn relation_name(statement: &Statement, def: &TableDef) -> String {
    let alias = match statement {
        Statement::Insert(insert) => insert.table_alias.as_ref().map(|a| &a.alias),
        Statement::Update(update) => table_alias(&update.table.relation),
        Statement::Delete(delete) => match &delete.from {
            FromTable::WithFromKeyword(t) | FromTable::WithoutKeyword(t) => {
                t.first().and_then(|t| table_alias(&t.relation))
            }
        },
        _ => None,
    };
    alias.map_or_else(|| def.name.clone(), normalize_ident)
}

fn table_alias(factor: &TableFactor) -> Option<&datafusion::sql::sqlparser::ast::Ident> {
    match factor {
        TableFactor::Table { alias, .. } => alias.as_ref().map(|a| &a.name),
        _ => None,
    }
}

/// `items` planned over `rows` (rows of `def`) as `name`.
fn plan(
    session: &Session,
    name: &str,
    items: &[SelectItem],
    rows: RecordBatch,
) -> WeirResult<LogicalPlan> {
    let schema = rows.schema();
    let table = MemTable::try_new(schema, vec![vec![rows]])?;
    let scan =
        LogicalPlanBuilder::scan(name, provider_as_source(Arc::new(table)), None)?.build()?;
    let state = session.ctx().state();
    let mut exprs = Vec::new();
    for item in items {
        match item {
            SelectItem::UnnamedExpr(expr) => {
                exprs.push(state.create_logical_expr(&expr.to_string(), scan.schema())?)
            }
            SelectItem::ExprWithAlias { expr, alias } => exprs.push(
                state
                    .create_logical_expr(&expr.to_string(), scan.schema())?
                    .alias(normalize_ident(alias)),
            ),
            SelectItem::Wildcard(_) | SelectItem::QualifiedWildcard(..) => {
                exprs.extend(scan.schema().columns().into_iter().map(Into::into))
            }
            SelectItem::ExprWithAliases { .. } => {
                return Err(WeirError::unsupported(
                    "several aliases for one RETURNING item",
                ))
            }
        }
    }
    let plan = LogicalPlanBuilder::from(scan).project(exprs)?.build()?;
    // As every statement is planned (`session::plan_statement`): integer
    // literals that fit are `integer`.
    Ok(crate::aggregates::cast_arguments(crate::literals::narrow(
        plan,
    )?)?)
}

/// A `SELECT` of `items`, for naming their columns as PostgreSQL does.
fn as_select(items: &[SelectItem]) -> WeirResult<Statement> {
    let list: Vec<String> = items.iter().map(ToString::to_string).collect();
    let sql = format!("SELECT {}", list.join(", "));
    let mut statements = Parser::parse_sql(&PostgreSqlDialect {}, &sql)
        .map_err(|e| WeirError::internal(format!("RETURNING list {sql}: {e}")))?;
    statements
        .pop()
        .ok_or_else(|| WeirError::internal("empty RETURNING list"))
}

/// The columns `statement`'s `RETURNING` list gives, for Describe: the
/// list planned over no rows of `def`.
pub async fn schema(
    session: &Session,
    statement: &Statement,
    def: &TableDef,
) -> WeirResult<Option<SchemaRef>> {
    let Some(items) = items(statement) else {
        return Ok(None);
    };
    let name = relation_name(statement, def);
    let plan = plan(session, &name, items, RecordBatch::new_empty(def.schema()))?;
    let types = crate::rows::wire_types(&Arc::new(plan.schema().as_arrow().clone()));
    Ok(Some(crate::colnames::wire_schema(
        &as_select(items)?,
        types,
    )))
}

/// The statement's result: `rows` projected by its `RETURNING` list, and
/// the tag `tag` with their count.
pub async fn output(
    session: &Session,
    statement: &Statement,
    tag: &'static str,
    def: &TableDef,
    rows: RecordBatch,
) -> WeirResult<Output> {
    let items = items(statement).ok_or_else(|| WeirError::internal("no RETURNING list"))?;
    let name = relation_name(statement, def);
    let plan = plan(session, &name, items, rows)?;
    let (schema, batches) = session.collect(plan).await?;
    let (schema, rows) = crate::rows::with_wire_types(schema, crate::rows::from_batches(batches));
    let schema = crate::colnames::wire_schema(&as_select(items)?, schema);
    Ok(Output::Returned { tag, schema, rows })
}
