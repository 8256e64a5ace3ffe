//! UPDATE and DELETE: a query over the target table's rows and their
//! positions decides which stored rows to replace or remove.

use std::collections::HashSet;

use datafusion::arrow::array::{AsArray, RecordBatch};
use datafusion::arrow::datatypes::UInt64Type;
use datafusion::common::Column;
use datafusion::logical_expr::{Expr, LogicalPlan, LogicalPlanBuilder};
use datafusion::sql::sqlparser::ast::{
    Delete, FromTable, Ident, TableFactor, TableWithJoins, Update, UpdateTableFromKind,
};

use crate::catalog::{normalize_ident, relation_name, Catalog, TableDef};
use crate::database::WorkingState;
use crate::error::{WeirError, WeirResult};
use crate::provider::{DML_TARGET, POSITION_COLUMN};
use crate::session::{bind, Params, Session};

use super::*;

/// The table (and its alias) an UPDATE or DELETE targets.
pub(super) fn update_target<'a>(
    catalog: &'a Catalog,
    table: &TableWithJoins,
) -> WeirResult<(&'a TableDef, String)> {
    if !table.joins.is_empty() {
        return Err(WeirError::unsupported(
            "JOIN in the target of UPDATE or DELETE; use FROM or USING",
        ));
    }
    let TableFactor::Table { name, alias, .. } = &table.relation else {
        return Err(WeirError::unsupported(format!(
            "UPDATE or DELETE of {}",
            table.relation
        )));
    };
    let def = catalog.table(&relation_name(name)?)?;
    let alias = alias
        .as_ref()
        .map(|a| normalize_ident(&a.name))
        .unwrap_or_else(|| def.name.clone());
    Ok((def, alias))
}

pub(super) fn quoted(name: &str) -> String {
    Ident::with_quote('"', name).to_string()
}

/// The query an UPDATE runs: each target row's position and new values.
pub(super) fn update_query(catalog: &Catalog, update: &Update) -> WeirResult<(TableDef, String)> {
    let (def, alias) = update_target(catalog, &update.table)?;
    let mut values: Vec<Option<String>> = vec![None; def.columns.len()];
    for assignment in &update.assignments {
        let index = assignment_column(def, &assignment.target)?;
        if values[index].is_some() {
            return Err(multiple_assignments(&def.columns[index].name));
        }
        let column = &def.columns[index];
        let is_default = matches!(&assignment.value, SqlExpr::Identifier(i)
            if i.quote_style.is_none() && i.value.eq_ignore_ascii_case("default"));
        let always = column.identity == Some(crate::sequences::ddl::Identity::Always);
        if always && !is_default {
            return Err(WeirError::new(
                SqlState("428C9"),
                format!("column \"{}\" can only be updated to DEFAULT", column.name),
            )
            .with_detail(format!(
                "Column \"{}\" is an identity column defined as GENERATED ALWAYS.",
                column.name
            )));
        }
        values[index] = Some(match (is_default, column.default.as_deref()) {
            (true, Some(default)) => format!("({default})"),
            (true, None) => "NULL".to_owned(),
            (false, _) => format!("({})", assignment.value),
        });
    }
    let alias_q = quoted(&alias);
    let mut select = vec![format!("{alias_q}.{}", quoted(POSITION_COLUMN))];
    for (i, column) in def.columns.iter().enumerate() {
        let value = values[i]
            .clone()
            .unwrap_or_else(|| format!("{alias_q}.{}", quoted(&column.name)));
        select.push(format!("{value} AS {}", quoted(&format!("__weir_col{i}"))));
    }
    let mut from = format!("{} AS {alias_q}", quoted(DML_TARGET));
    if let Some(UpdateTableFromKind::AfterSet(tables) | UpdateTableFromKind::BeforeSet(tables)) =
        &update.from
    {
        for t in tables {
            from.push_str(&format!(", {t}"));
        }
    }
    let mut sql = format!("SELECT {} FROM {from}", select.join(", "));
    if let Some(selection) = &update.selection {
        sql.push_str(&format!(" WHERE {selection}"));
    }
    Ok((def.clone(), sql))
}

/// The query a DELETE runs: the positions of the rows to delete.
pub(super) fn delete_query(catalog: &Catalog, delete: &Delete) -> WeirResult<(TableDef, String)> {
    let tables = match &delete.from {
        FromTable::WithFromKeyword(t) | FromTable::WithoutKeyword(t) => t,
    };
    let [table] = tables.as_slice() else {
        return Err(WeirError::unsupported("DELETE from several tables"));
    };
    let (def, alias) = update_target(catalog, table)?;
    let alias_q = quoted(&alias);
    let mut sql = format!(
        "SELECT {alias_q}.{} FROM {} AS {alias_q}",
        quoted(POSITION_COLUMN),
        quoted(DML_TARGET)
    );
    for t in delete.using.iter().flatten() {
        sql.push_str(&format!(", {t}"));
    }
    if let Some(selection) = &delete.selection {
        sql.push_str(&format!(" WHERE {selection}"));
    }
    Ok((def.clone(), sql))
}

/// Plans one of the generated UPDATE/DELETE queries with `def`'s rows in
/// the session's pinned snapshot as the target.
pub(super) async fn plan_target_query(
    session: &Session,
    def: &TableDef,
    sql: &str,
    params: &Params,
) -> WeirResult<LogicalPlan> {
    let target = session
        .pinned
        .get()
        .tables
        .get(&def.id)
        .cloned()
        .ok_or_else(|| WeirError::internal(format!("no snapshot of {}", def.name)))?;
    let orders = session.pinned.get().catalog.orders(&def.name);
    session.pinned.set_dml_target(target, &def.name, orders);
    let mut statements = weir_sql::parse(sql)?;
    let Some(weir_sql::WeirStatement::Sql(statement)) = statements.pop() else {
        return Err(WeirError::internal(format!(
            "generated query did not parse: {sql}"
        )));
    };
    let plan = crate::session::plan_statement(&session.ctx().state(), *statement).await?;
    bind(plan, params)
}

/// Distinct positions from the first column of `batches`, with the index
/// of each one's first row. A FROM or USING join can match one target row
/// several times; PostgreSQL then changes it once, with the first match.
pub(super) fn distinct_positions(batches: &[RecordBatch]) -> (Vec<u64>, Vec<(usize, usize)>) {
    let mut seen = HashSet::new();
    let mut positions = Vec::new();
    let mut rows = Vec::new();
    for (b, batch) in batches.iter().enumerate() {
        let column = batch.column(0).as_primitive::<UInt64Type>();
        for (r, position) in column.values().iter().enumerate() {
            if seen.insert(*position) {
                positions.push(*position);
                rows.push((b, r));
            }
        }
    }
    (positions, rows)
}

pub(super) async fn update_rows(
    session: &Session,
    working: &mut WorkingState,
    update: &Update,
    params: &Params,
) -> WeirResult<Written> {
    let (def, sql) = update_query(&working.catalog, update)?;
    let plan = plan_target_query(session, &def, &sql, params).await?;
    let schema = plan.schema().clone();
    let mut exprs = vec![Expr::Column(Column::from(schema.qualified_field(0)))];
    for (i, column) in def.columns.iter().enumerate() {
        let (qualifier, field) = schema.qualified_field(i + 1);
        let value = Expr::Column(Column::new(qualifier.cloned(), field.name()));
        exprs.push(assign(column, value, field.data_type())?);
    }
    let plan = LogicalPlanBuilder::from(plan).project(exprs)?.build()?;
    let (_, batches) = session.collect(plan).await?;
    let (positions, first_rows) = distinct_positions(&batches);
    if positions.is_empty() {
        return Ok(Written::rows(RecordBatch::new_empty(def.schema())));
    }
    let refs: Vec<&RecordBatch> = batches.iter().collect();
    let new_rows = datafusion::arrow::compute::interleave_record_batch(&refs, &first_rows)?;
    let columns: Vec<usize> = (1..new_rows.num_columns()).collect();
    let new_rows = conform(&def, &[new_rows.project(&columns)?])?;
    let table = working.table_mut(def.id)?;
    check_write(&def, &new_rows, table.write(&positions, Some(&new_rows))?)?;
    Ok(Written::rows(new_rows))
}

pub(super) async fn delete_rows(
    session: &Session,
    working: &mut WorkingState,
    delete: &Delete,
    params: &Params,
) -> WeirResult<Written> {
    let (def, sql) = delete_query(&working.catalog, delete)?;
    let plan = plan_target_query(session, &def, &sql, params).await?;
    let (_, batches) = session.collect(plan).await?;
    let (positions, _) = distinct_positions(&batches);
    let table = working.table_mut(def.id)?;
    // RETURNING reads the rows as they were.
    let old_rows = match delete.returning {
        Some(_) => Some(table.rows_at(&positions)?),
        None => None,
    };
    if !positions.is_empty() {
        table
            .write(&positions, None)?
            .map_err(|_| WeirError::internal("a delete cannot violate a key"))?;
    }
    Ok(Written {
        count: positions.len(),
        rows: old_rows,
    })
}
