//! INSERT (with its ON CONFLICT variants) and COPY's batch insert.

use std::collections::HashSet;

use datafusion::arrow::array::{BooleanArray, RecordBatch, UInt64Array};
use datafusion::arrow::compute::{concat_batches, filter_record_batch, take_record_batch};
use datafusion::common::{Column, DFSchema, ScalarValue};
use datafusion::logical_expr::ExprSchemable;
use datafusion::logical_expr::{lit, Expr, LogicalPlan, LogicalPlanBuilder};
use datafusion::sql::sqlparser::ast::{
    Expr as SqlExpr, Insert, OnConflictAction, OnInsert, SetExpr, Statement, TableObject,
};

use crate::catalog::{normalize_ident, relation_name, Catalog, TableDef};
use crate::database::WorkingState;
use crate::error::{SqlState, WeirError, WeirResult};
use crate::session::{Params, Session};

use super::upsert::{check_conflict_target, evaluate_upsert, Arbiter};
use super::*;

/// The table an INSERT writes to.
pub fn insert_target<'a>(catalog: &'a Catalog, insert: &Insert) -> WeirResult<&'a TableDef> {
    let TableObject::TableName(name) = &insert.table else {
        return Err(WeirError::unsupported("INSERT into a table function"));
    };
    catalog.table(&relation_name(name)?)
}

/// Indices of the columns an INSERT names, in its order (all columns if
/// it names none).
pub fn insert_columns(def: &TableDef, insert: &Insert) -> WeirResult<Vec<usize>> {
    if insert.columns.is_empty() {
        return Ok((0..def.columns.len()).collect());
    }
    let mut seen = HashSet::new();
    insert
        .columns
        .iter()
        .map(|name| {
            let ident = name
                .0
                .last()
                .and_then(|p| p.as_ident())
                .ok_or_else(|| WeirError::unsupported(format!("column name {name}")))?;
            let column = normalize_ident(ident);
            let index = column_index(def, &column)?;
            if !seen.insert(index) {
                return Err(WeirError::new(
                    SqlState::DUPLICATE_COLUMN,
                    format!("column \"{column}\" specified more than once"),
                ));
            }
            Ok(index)
        })
        .collect()
}

pub(super) async fn insert_rows(
    session: &Session,
    working: &mut WorkingState,
    insert: &Insert,
    params: &Params,
) -> WeirResult<Written> {
    let def = insert_target(&working.catalog, insert)?.clone();
    let columns = insert_columns(&def, insert)?;
    let overriding = weir_sql::overriding(insert);
    if overriding.is_none() {
        check_identity_values(&def, &columns, insert)?;
    }
    // OVERRIDING USER VALUE: the values given for identity columns are
    // dropped, so that those columns take their sequences' numbers.
    let user_value = overriding == Some(weir_sql::Overriding::User);
    let literal = insert
        .source
        .as_deref()
        .and_then(super::values::literal_rows);
    let rows = match (&insert.source, literal) {
        (Some(_), Some(literal)) => {
            let columns = fit_columns(columns, literal.num_columns(), insert)?;
            let (literal, columns) = match user_value {
                true => {
                    let keep = not_identity(&def, &columns);
                    (
                        literal.project(&keep)?,
                        keep.iter().map(|&j| columns[j]).collect(),
                    )
                }
                false => (literal, columns),
            };
            batch_rows(session, &def, literal, &columns).await?
        }
        (Some(query), None) => {
            let query = replace_default_keyword(query, &def, &columns)?;
            let source = crate::colnames::disambiguate(&Statement::Query(query));
            let source = session.plan(source, params).await?;
            let columns = fit_columns(columns, source.schema().fields().len(), insert)?;
            let (source, columns) = match user_value {
                true => {
                    let keep = not_identity(&def, &columns);
                    let kept = keep
                        .iter()
                        .map(|&j| Expr::Column(Column::from(source.schema().qualified_field(j))))
                        .collect::<Vec<_>>();
                    let source = LogicalPlanBuilder::from(source).project(kept)?.build()?;
                    (source, keep.iter().map(|&j| columns[j]).collect())
                }
                false => (source, columns),
            };
            plan_rows(session, &def, source, &columns).await?
        }
        // DEFAULT VALUES: every column takes its default.
        (None, _) => {
            let source = LogicalPlanBuilder::empty(true).build()?;
            plan_rows(session, &def, source, &[]).await?
        }
    };
    let table = working.table_mut(def.id)?;
    match &insert.on {
        None => {
            check_write(&def, &rows, table.write(&[], Some(&rows))?)?;
            Ok(Written::rows(rows))
        }
        Some(OnInsert::OnConflict(on_conflict)) => {
            let arbiter = check_conflict_target(
                &def,
                on_conflict.conflict_target.as_ref(),
                &on_conflict.action,
            )?;
            if let OnConflictAction::DoNothing = &on_conflict.action {
                let rows = without_conflicts(&def, table, rows, arbiter)?;
                check_write(&def, &rows, table.write(&[], Some(&rows))?)?;
                return Ok(Written::rows(rows));
            }
            let keys = rows.project(&def.primary_key)?;
            let matches = table.lookup(&keys)?;
            match &on_conflict.action {
                OnConflictAction::DoNothing => unreachable!("handled above"),
                OnConflictAction::DoUpdate(update) => {
                    if matches.iter().any(|m| m.repeated) {
                        return Err(WeirError::new(
                            SqlState::CARDINALITY_VIOLATION,
                            "ON CONFLICT DO UPDATE command cannot affect row a second time",
                        )
                        .with_detail(
                            "Ensure that no rows proposed for insertion within the same command have duplicate constrained values.",
                        ));
                    }
                    let fresh: BooleanArray =
                        matches.iter().map(|m| Some(m.existing.is_none())).collect();
                    let conflicting: Vec<u64> = matches
                        .iter()
                        .enumerate()
                        .filter(|(_, m)| m.existing.is_some())
                        .map(|(i, _)| i as u64)
                        .collect();
                    let positions: Vec<u64> = matches.iter().filter_map(|m| m.existing).collect();
                    let existing = table.rows_at(&positions)?;
                    let excluded = take_record_batch(&rows, &UInt64Array::from(conflicting))?;
                    let alias = insert
                        .table_alias
                        .as_ref()
                        .map(|a| normalize_ident(&a.alias))
                        .unwrap_or_else(|| def.name.clone());
                    let (updated, keep) = evaluate_upsert(
                        session,
                        &def,
                        &alias,
                        &existing,
                        &excluded,
                        &update.assignments,
                        update.selection.as_ref(),
                        params,
                    )?;
                    let positions: Vec<u64> = positions
                        .into_iter()
                        .zip(keep.iter())
                        .filter(|(_, k)| k == &Some(true))
                        .map(|(p, _)| p)
                        .collect();
                    let fresh_rows = filter_record_batch(&rows, &fresh)?;
                    let all = concat_batches(&def.schema(), [&fresh_rows, &updated])?;
                    check_write(&def, &all, table.write(&positions, Some(&all))?)?;
                    Ok(Written::rows(all))
                }
            }
        }
        Some(_) => Err(WeirError::unsupported("ON DUPLICATE KEY UPDATE")),
    }
}

/// `rows` without those `ON CONFLICT DO NOTHING` leaves out: each row
/// whose key (for [`Arbiter::Key`] or [`Arbiter::Any`]) or whose values
/// in the arbiter's unique constraints are held by a stored row or an
/// earlier row of the statement.
fn without_conflicts(
    def: &TableDef,
    table: &weir_state::StateTable,
    mut rows: RecordBatch,
    arbiter: Arbiter,
) -> WeirResult<RecordBatch> {
    if matches!(arbiter, Arbiter::Key | Arbiter::Any) && !def.primary_key.is_empty() {
        let matches = table.lookup(&rows.project(&def.primary_key)?)?;
        let fresh: BooleanArray = matches
            .iter()
            .map(|m| Some(m.existing.is_none() && !m.repeated))
            .collect();
        rows = filter_record_batch(&rows, &fresh)?;
    }
    let constraints: Vec<usize> = match arbiter {
        Arbiter::Key => Vec::new(),
        Arbiter::Unique(i) => vec![i],
        Arbiter::Any => (0..def.unique.len()).collect(),
    };
    for constraint in constraints {
        let held = table.unique_conflicts(&rows, constraint)?;
        let fresh: BooleanArray = held.iter().map(|&h| Some(!h)).collect();
        rows = filter_record_batch(&rows, &fresh)?;
    }
    Ok(rows)
}

/// The positions in `columns` (an INSERT's target columns) of the
/// columns that are not identity columns.
fn not_identity(def: &TableDef, columns: &[usize]) -> Vec<usize> {
    (0..columns.len())
        .filter(|&j| def.columns[columns[j]].identity.is_none())
        .collect()
}

/// Fails with 428C9 when the INSERT gives a value (not `DEFAULT`) to a
/// `GENERATED ALWAYS AS IDENTITY` column, as PostgreSQL does without
/// `OVERRIDING`.
fn check_identity_values(def: &TableDef, columns: &[usize], insert: &Insert) -> WeirResult<()> {
    use crate::sequences::ddl::Identity;
    let is_default = |expr: &SqlExpr| {
        matches!(expr, SqlExpr::Identifier(i)
            if i.quote_style.is_none() && i.value.eq_ignore_ascii_case("default"))
    };
    let values = insert
        .source
        .as_deref()
        .and_then(|q| match q.body.as_ref() {
            SetExpr::Values(values) => Some(values),
            _ => None,
        });
    for (j, &column) in columns.iter().enumerate() {
        let column = &def.columns[column];
        if column.identity != Some(Identity::Always) {
            continue;
        }
        let only_defaults =
            values.is_some_and(|v| v.rows.iter().all(|row| row.get(j).is_none_or(is_default)));
        if !only_defaults {
            return Err(WeirError::new(
                SqlState("428C9"),
                format!(
                    "cannot insert a non-DEFAULT value into column \"{}\"",
                    column.name
                ),
            )
            .with_detail(format!(
                "Column \"{}\" is an identity column defined as GENERATED ALWAYS.",
                column.name
            ))
            .with_hint("Use OVERRIDING SYSTEM VALUE to override."));
        }
    }
    Ok(())
}

/// `VALUES (1, DEFAULT)`: replaces each `DEFAULT` with its column's
/// default expression (or NULL).
pub(super) fn replace_default_keyword(
    query: &datafusion::sql::sqlparser::ast::Query,
    def: &TableDef,
    columns: &[usize],
) -> WeirResult<Box<datafusion::sql::sqlparser::ast::Query>> {
    use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
    use datafusion::sql::sqlparser::parser::Parser;
    let mut query = Box::new(query.clone());
    if let SetExpr::Values(values) = query.body.as_mut() {
        let several_rows = values.rows.len() > 1;
        for row in values.rows.iter_mut() {
            for (expr, &column) in row.iter_mut().zip(columns) {
                let is_default = matches!(expr, SqlExpr::Identifier(i)
                    if i.quote_style.is_none() && i.value.eq_ignore_ascii_case("default"));
                if is_default {
                    let sql = def.columns[column].default.as_deref().unwrap_or("NULL");
                    *expr = Parser::new(&PostgreSqlDialect {})
                        .try_with_sql(sql)
                        .and_then(|mut p| p.parse_expr())
                        .map_err(|e| WeirError::internal(format!("stored default {sql}: {e}")))?;
                }
                assign_numeric(expr, &def.columns[column].data_type);
                if several_rows {
                    assign_text_literal(expr, &def.columns[column].data_type);
                    assign_tagged(expr, &def.columns[column]);
                }
            }
        }
    }
    Ok(query)
}

/// A text literal of a `VALUES` list of several rows, cast to its
/// column's type when that is not text: PostgreSQL reads such a literal
/// as a value of its column's type, while a query's `VALUES` list unifies
/// each column's rows to one type first, and fails on text beside
/// another type (`VALUES (ARRAY[1]), ('{4,5}')`).
fn assign_text_literal(expr: &mut SqlExpr, column_type: &DataType) {
    use datafusion::sql::sqlparser::ast::{CastKind, Value};
    use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
    use datafusion::sql::sqlparser::parser::Parser;
    let SqlExpr::Value(value) = expr else {
        return;
    };
    let text = matches!(
        value.value,
        Value::SingleQuotedString(_) | Value::EscapedStringLiteral(_)
    );
    if !text || matches!(column_type, DataType::Utf8 | DataType::Decimal128(..)) {
        return;
    }
    let name = crate::types::pg_type_name(column_type);
    let Ok(data_type) = Parser::new(&PostgreSqlDialect {})
        .try_with_sql(&name)
        .and_then(|mut p| p.parse_data_type())
    else {
        return;
    };
    *expr = SqlExpr::Cast {
        kind: CastKind::Cast,
        expr: Box::new(expr.clone()),
        data_type,
        array: false,
        format: None,
    };
}

/// A value of a `VALUES` list of several rows for a `uuid`, `varchar` or
/// JSON column, cast to that type: DataFusion refuses a list whose rows
/// differ in a column's type tag (`(gen_random_uuid()), ('a0ee...')`),
/// and the cast gives every row the tag. (`varchar` without its length: a
/// longer value still fails with 22001 rather than being cut.)
fn assign_tagged(expr: &mut SqlExpr, column: &crate::catalog::ColumnDef) {
    use datafusion::sql::sqlparser::ast::{CastKind, DataType as Sql};
    let data_type = match (column.json, column.declared.map(|d| d.oid)) {
        (Some(crate::json::JsonKind::Json), _) => Sql::JSON,
        (Some(crate::json::JsonKind::Jsonb), _) => Sql::JSONB,
        (None, Some(crate::uuid_type::OID)) => Sql::Uuid,
        (None, Some(crate::varchar::OID)) => Sql::Varchar(None),
        _ => return,
    };
    *expr = SqlExpr::Cast {
        kind: CastKind::Cast,
        expr: Box::new(expr.clone()),
        data_type,
        array: false,
        format: None,
    };
}

/// A value of a `VALUES` list for a `numeric` column, cast to the
/// column's type, as PostgreSQL casts each value of an INSERT's `VALUES`
/// to its column: planned as a query, the list's columns would first be
/// unified to one type (`VALUES (19.9), ('0.25')` to a scale of 1, which
/// rounds `0.25`; `VALUES (5), ('0.25')` to `bigint`).
fn assign_numeric(expr: &mut SqlExpr, column_type: &DataType) {
    use datafusion::sql::sqlparser::ast::{CastKind, DataType as Sql, ExactNumberInfo};
    let DataType::Decimal128(precision, scale) = *column_type else {
        return;
    };
    *expr = SqlExpr::Cast {
        kind: CastKind::Cast,
        expr: Box::new(expr.clone()),
        data_type: Sql::Numeric(ExactNumberInfo::PrecisionAndScale(
            u64::from(precision),
            i64::from(scale),
        )),
        array: false,
        format: None,
    };
}

/// The target columns of an INSERT whose source has `width` columns:
/// without a column list, VALUES may fill a prefix of the table's columns.
fn fit_columns(mut columns: Vec<usize>, width: usize, insert: &Insert) -> WeirResult<Vec<usize>> {
    if insert.columns.is_empty() && width < columns.len() {
        columns.truncate(width);
    }
    if width != columns.len() {
        let problem = if width > columns.len() {
            "INSERT has more expressions than target columns"
        } else {
            "INSERT has more target columns than expressions"
        };
        return Err(WeirError::new(SqlState::SYNTAX_ERROR, problem));
    }
    Ok(columns)
}

/// The rows `source` stores in `def`: column `columns[j]` takes source
/// column `j`, the others their default (or NULL), by the assignment rules;
/// checked against the table's constraints.
pub(crate) async fn plan_rows(
    session: &Session,
    def: &TableDef,
    source: LogicalPlan,
    columns: &[usize],
) -> WeirResult<RecordBatch> {
    let state = session.ctx().state();
    let source_schema = source.schema().clone();
    let empty = DFSchema::empty();
    let mut exprs = Vec::with_capacity(def.columns.len());
    for (i, column) in def.columns.iter().enumerate() {
        let value = match columns.iter().position(|&c| c == i) {
            Some(j) => Expr::Column(Column::from(source_schema.qualified_field(j))),
            None => match &column.default {
                Some(sql) => state.create_logical_expr(sql, &empty)?,
                None => lit(ScalarValue::Null),
            },
        };
        let from = value.get_type(&source_schema)?;
        exprs.push(assign(column, value, &from)?);
    }
    let plan = LogicalPlanBuilder::from(source).project(exprs)?.build()?;
    let (_, batches) = session.collect(plan).await?;
    conform(def, &batches)
}

/// The rows `batch` stores in `def`, as [`plan_rows`] computes them. When
/// the batch fills every column, the assignment casts are evaluated on it
/// directly as physical expressions: planning and optimizing a query per
/// statement cost more than the casts themselves for a few hundred rows.
async fn batch_rows(
    session: &Session,
    def: &TableDef,
    batch: RecordBatch,
    columns: &[usize],
) -> WeirResult<RecordBatch> {
    if columns.len() == def.columns.len() && !batch.columns().is_empty() {
        if let Some(exprs) = direct_assignments(session, def, &batch, columns) {
            let arrays = exprs
                .iter()
                .map(|e| e.evaluate(&batch)?.into_array(batch.num_rows()))
                .collect::<datafusion::error::Result<Vec<_>>>()?;
            // Nullable: `conform` reports NULLs in NOT NULL columns.
            let schema = super::upsert::nullable_schema(&def.schema());
            return conform(def, &[RecordBatch::try_new(schema, arrays)?]);
        }
    }
    let source = session.ctx().read_batch(batch)?.into_unoptimized_plan();
    plan_rows(session, def, source, columns).await
}

/// The physical expressions assigning `batch`'s columns to the columns
/// `columns` of `def`, if they can be built without the planner's help.
fn direct_assignments(
    session: &Session,
    def: &TableDef,
    batch: &RecordBatch,
    columns: &[usize],
) -> Option<Vec<std::sync::Arc<dyn datafusion::physical_expr::PhysicalExpr>>> {
    let schema = DFSchema::try_from(batch.schema().as_ref().clone()).ok()?;
    let state = session.ctx().state();
    let mut exprs = vec![None; def.columns.len()];
    for (j, &i) in columns.iter().enumerate() {
        let field = batch.schema().field(j).clone();
        let value = Expr::Column(Column::new_unqualified(field.name()));
        let assigned = assign(&def.columns[i], value, field.data_type()).ok()?;
        exprs[i] = Some(state.create_physical_expr(assigned, &schema).ok()?);
    }
    exprs.into_iter().collect()
}

/// Stores rows that arrive as a batch (COPY): `batch`'s columns go to the
/// table columns `columns`, the others take their defaults. Returns the row
/// count; outside a transaction block, once it is committed.
pub async fn insert_batch(
    session: &mut Session,
    table: &str,
    columns: &[usize],
    batch: RecordBatch,
) -> WeirResult<usize> {
    let target = |catalog: &Catalog| catalog.table(table).cloned();
    let written = write(session, "COPY FROM", target, async |session, working| {
        write_batch(session, working, table, columns, batch).await
    })
    .await?;
    Ok(written.count)
}

/// The rows of table `def` that `batch` (every column, as text) stands
/// for: cast as COPY casts its text, with `def`'s constraints checked.
pub(crate) async fn text_rows(
    session: &Session,
    def: &TableDef,
    batch: RecordBatch,
) -> WeirResult<RecordBatch> {
    let columns: Vec<usize> = (0..def.columns.len()).collect();
    batch_rows(session, def, batch, &columns).await
}

/// Inserts a batch into `working`'s table `table`.
async fn write_batch(
    session: &Session,
    working: &mut WorkingState,
    table: &str,
    columns: &[usize],
    batch: RecordBatch,
) -> WeirResult<Written> {
    let def = working.catalog.table(table)?.clone();
    super::check_not_fed(&def)?;
    let rows = batch_rows(session, &def, batch, columns).await?;
    let table = working.table_mut(def.id)?;
    check_write(&def, &rows, table.write(&[], Some(&rows))?)?;
    Ok(Written::rows(rows))
}
