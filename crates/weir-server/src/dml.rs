//! INSERT, UPDATE and DELETE.
//!
//! Each statement holds the working state's lock while it computes its
//! change: it plans a DataFusion query over the working state (so it sees
//! every earlier statement of the open epoch), runs it, checks constraints
//! on the resulting batch, and applies it to the table. Then it releases the
//! lock and waits for its epoch to commit.
//!
//! UPDATE and DELETE plan their target as [`DML_TARGET`], whose scan also
//! yields each row's position, so the statement knows exactly which stored
//! rows to replace or remove.

use std::collections::HashSet;
use std::sync::Arc;

use datafusion::arrow::array::{Array, AsArray, BooleanArray, RecordBatch, UInt64Array};
use datafusion::arrow::compute::{concat_batches, filter_record_batch, take_record_batch};
use datafusion::arrow::datatypes::{DataType, Field, Schema, UInt64Type};
use datafusion::arrow::util::display::{ArrayFormatter, FormatOptions};
use datafusion::common::{Column, DFSchema, ScalarValue, TableReference};
use datafusion::logical_expr::ExprSchemable;
use datafusion::logical_expr::{cast, lit, when, Expr, LogicalPlan, LogicalPlanBuilder};
use datafusion::sql::sqlparser::ast::{
    AssignmentTarget, ConflictTarget, Delete, Expr as SqlExpr, FromTable, Ident, Insert,
    OnConflictAction, OnInsert, SetExpr, Statement, TableFactor, TableObject, TableWithJoins,
    Update, UpdateTableFromKind, Value,
};
use weir_state::KeyViolation;

use crate::catalog::{normalize_ident, relation_name, Catalog, TableDef};
use crate::database::WorkingState;
use crate::error::{SqlState, WeirError, WeirResult};
use crate::provider::{DML_TARGET, POSITION_COLUMN};
use crate::session::{bind, Output, Params, Session};
use crate::types::{assignable, pg_type_name};

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

fn column_index(def: &TableDef, column: &str) -> WeirResult<usize> {
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

async fn insert_rows(
    session: &Session,
    working: &mut WorkingState,
    insert: &Insert,
    params: &Params,
) -> WeirResult<usize> {
    if insert.returning.is_some() {
        return Err(WeirError::unsupported(
            "INSERT ... RETURNING is not supported yet",
        ));
    }
    let def = insert_target(&working.catalog, insert)?.clone();
    let columns = insert_columns(&def, insert)?;
    let source = match &insert.source {
        Some(query) => {
            let query = replace_default_keyword(query, &def, &columns)?;
            session.plan(Statement::Query(query), params).await?
        }
        None => LogicalPlanBuilder::empty(true).build()?,
    };
    let width = source.schema().fields().len();
    // Without a column list, VALUES may fill a prefix of the columns.
    let columns = if insert.columns.is_empty() && width < columns.len() {
        columns[..width].to_vec()
    } else {
        columns
    };
    let expected = if insert.source.is_some() {
        columns.len()
    } else {
        0
    };
    if width > expected {
        return Err(WeirError::new(
            SqlState::SYNTAX_ERROR,
            "INSERT has more expressions than target columns",
        ));
    }
    if width < expected {
        return Err(WeirError::new(
            SqlState::SYNTAX_ERROR,
            "INSERT has more target columns than expressions",
        ));
    }
    let columns = if insert.source.is_some() {
        columns
    } else {
        Vec::new()
    };
    let plan = assignment_plan(session, &def, source, &columns)?;
    let (_, batches) = session.collect(plan).await?;
    let rows = conform(&def, &batches)?;
    let table = working.table_mut(def.id)?;
    match &insert.on {
        None => {
            let count = rows.num_rows();
            check_write(&def, &rows, table.write(&[], Some(&rows))?)?;
            Ok(count)
        }
        Some(OnInsert::OnConflict(on_conflict)) => {
            check_conflict_target(
                &def,
                on_conflict.conflict_target.as_ref(),
                &on_conflict.action,
            )?;
            let keys = rows.project(&def.primary_key)?;
            let matches = table.lookup(&keys)?;
            match &on_conflict.action {
                OnConflictAction::DoNothing => {
                    let fresh: BooleanArray = matches
                        .iter()
                        .map(|m| Some(m.existing.is_none() && !m.repeated))
                        .collect();
                    let rows = filter_record_batch(&rows, &fresh)?;
                    let count = rows.num_rows();
                    check_write(&def, &rows, table.write(&[], Some(&rows))?)?;
                    Ok(count)
                }
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
                    let count = all.num_rows();
                    check_write(&def, &all, table.write(&positions, Some(&all))?)?;
                    Ok(count)
                }
            }
        }
        Some(_) => Err(WeirError::unsupported("ON DUPLICATE KEY UPDATE")),
    }
}

/// `VALUES (1, DEFAULT)`: replaces each `DEFAULT` with its column's
/// default expression (or NULL).
fn replace_default_keyword(
    query: &datafusion::sql::sqlparser::ast::Query,
    def: &TableDef,
    columns: &[usize],
) -> WeirResult<Box<datafusion::sql::sqlparser::ast::Query>> {
    use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
    use datafusion::sql::sqlparser::parser::Parser;
    let mut query = Box::new(query.clone());
    if let SetExpr::Values(values) = query.body.as_mut() {
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
            }
        }
    }
    Ok(query)
}

fn check_conflict_target(
    def: &TableDef,
    target: Option<&ConflictTarget>,
    action: &OnConflictAction,
) -> WeirResult<()> {
    let no_constraint = || {
        WeirError::new(
            SqlState("42P10"),
            "there is no unique or exclusion constraint matching the ON CONFLICT specification",
        )
    };
    if def.primary_key.is_empty() {
        return Err(no_constraint());
    }
    match target {
        None if matches!(action, OnConflictAction::DoNothing) => Ok(()),
        None => Err(WeirError::new(
            SqlState::SYNTAX_ERROR,
            "ON CONFLICT DO UPDATE requires inference specification or constraint name",
        )),
        Some(ConflictTarget::Columns(columns)) => {
            let named: HashSet<usize> = columns
                .iter()
                .map(|c| column_index(def, &normalize_ident(c)))
                .collect::<WeirResult<_>>()?;
            let key: HashSet<usize> = def.primary_key.iter().copied().collect();
            if named == key {
                Ok(())
            } else {
                Err(no_constraint())
            }
        }
        Some(ConflictTarget::OnConstraint(name)) => {
            if name.to_string() == format!("{}_pkey", def.name) {
                Ok(())
            } else {
                Err(WeirError::new(
                    SqlState::UNDEFINED_OBJECT,
                    format!(
                        "constraint \"{name}\" for table \"{}\" does not exist",
                        def.name
                    ),
                ))
            }
        }
    }
}

/// Computes `DO UPDATE SET ...` for conflicting rows: returns the updated
/// rows and, per conflicting row, whether its `WHERE` held.
#[allow(clippy::too_many_arguments)]
fn evaluate_upsert(
    session: &Session,
    def: &TableDef,
    alias: &str,
    existing: &RecordBatch,
    excluded: &RecordBatch,
    assignments: &[datafusion::sql::sqlparser::ast::Assignment],
    selection: Option<&SqlExpr>,
    params: &Params,
) -> WeirResult<(RecordBatch, BooleanArray)> {
    let n = existing.num_rows();
    let visible = def.schema();
    let loose = nullable_schema(&visible);
    let qualified = [alias, "excluded"]
        .into_iter()
        .flat_map(|q| {
            loose
                .fields()
                .iter()
                .map(move |f| (Some(TableReference::bare(q)), f.clone()))
        })
        .collect();
    let df_schema = DFSchema::new_with_metadata(qualified, Default::default())?;
    let mut columns = existing.columns().to_vec();
    columns.extend(excluded.columns().iter().cloned());
    let combined = RecordBatch::try_new(Arc::new(df_schema.as_arrow().clone()), columns)?;
    let state = session.ctx.state();
    let evaluate = |sql: &SqlExpr, data_type: &DataType| -> WeirResult<Arc<dyn Array>> {
        let expr = state.create_logical_expr(&sql.to_string(), &df_schema)?;
        let expr = bind_expr(expr, params)?;
        let expr = cast(expr, data_type.clone());
        let physical = state.create_physical_expr(expr, &df_schema)?;
        Ok(physical.evaluate(&combined)?.into_array(n)?)
    };
    let mut new_columns = existing.columns().to_vec();
    let mut assigned = HashSet::new();
    for assignment in assignments {
        let index = assignment_column(def, &assignment.target)?;
        if !assigned.insert(index) {
            return Err(multiple_assignments(&def.columns[index].name));
        }
        new_columns[index] = evaluate(&assignment.value, &def.columns[index].data_type)?;
    }
    let keep = match selection {
        Some(predicate) => {
            let mask = evaluate(predicate, &DataType::Boolean)?;
            mask.as_boolean().clone()
        }
        None => BooleanArray::from(vec![true; n]),
    };
    let updated = RecordBatch::try_new(loose, new_columns)?;
    let updated = filter_record_batch(&updated, &keep)?;
    let updated = conform(def, &[updated])?;
    let keep = BooleanArray::from(
        keep.iter()
            .map(|k| Some(k == Some(true)))
            .collect::<Vec<_>>(),
    );
    Ok((updated, keep))
}

/// `schema` with every field nullable (for batches not yet checked).
fn nullable_schema(schema: &Schema) -> Arc<Schema> {
    let fields: Vec<Field> = schema
        .fields()
        .iter()
        .map(|f| f.as_ref().clone().with_nullable(true))
        .collect();
    Arc::new(Schema::new(fields))
}

/// Replaces placeholders in a lone expression with their bound values.
fn bind_expr(expr: Expr, params: &Params) -> WeirResult<Expr> {
    use datafusion::common::tree_node::{Transformed, TreeNode};
    let Some(values) = params else {
        return Ok(expr);
    };
    Ok(expr
        .transform_up(|e| match e {
            Expr::Placeholder(p) => {
                let (value, _) = values.get_placeholders_with_values(&p.id)?.into_inner();
                Ok(Transformed::yes(lit(value)))
            }
            other => Ok(Transformed::no(other)),
        })?
        .data)
}

fn assignment_column(def: &TableDef, target: &AssignmentTarget) -> WeirResult<usize> {
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

fn multiple_assignments(column: &str) -> WeirError {
    WeirError::new(
        SqlState::SYNTAX_ERROR,
        format!("multiple assignments to same column \"{column}\""),
    )
}

/// Projects `source` onto the table's columns: column `columns[j]` takes
/// source column `j`, the others their default (or NULL), each cast to the
/// column's type.
fn assignment_plan(
    session: &Session,
    def: &TableDef,
    source: LogicalPlan,
    columns: &[usize],
) -> WeirResult<LogicalPlan> {
    let state = session.ctx.state();
    let source_schema = source.schema().clone();
    let empty = DFSchema::empty();
    let mut exprs = Vec::with_capacity(def.columns.len());
    for (i, column) in def.columns.iter().enumerate() {
        let value = match columns.iter().position(|&c| c == i) {
            Some(j) => {
                let (qualifier, field) = source_schema.qualified_field(j);
                if !assignable(field.data_type(), &column.data_type) {
                    return Err(type_mismatch(
                        &column.name,
                        &column.data_type,
                        field.data_type(),
                    ));
                }
                Expr::Column(Column::new(qualifier.cloned(), field.name()))
            }
            None => match &column.default {
                Some(sql) => state.create_logical_expr(sql, &empty)?,
                None => lit(ScalarValue::Null),
            },
        };
        let value = match (&column.data_type, value.get_type(&source_schema)?) {
            (DataType::Binary, DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View) => {
                bytea_from_text(value)
            }
            _ => cast(value, column.data_type.clone()),
        };
        exprs.push(value.alias(&column.name));
    }
    Ok(LogicalPlanBuilder::from(source).project(exprs)?.build()?)
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

fn type_mismatch(column: &str, to: &DataType, from: &DataType) -> WeirError {
    WeirError::new(
        SqlState::DATATYPE_MISMATCH,
        format!(
            "column \"{column}\" is of type {} but expression is of type {}",
            pg_type_name(to),
            pg_type_name(from)
        ),
    )
}

/// One batch with exactly the table's schema: checks NOT NULL (23502).
pub fn conform(def: &TableDef, batches: &[RecordBatch]) -> WeirResult<RecordBatch> {
    let schema = def.schema();
    let Some(first) = batches.first() else {
        return Ok(RecordBatch::new_empty(schema));
    };
    let batch = concat_batches(&first.schema(), batches)?;
    for (i, column) in def.columns.iter().enumerate() {
        if let Some(limit) = column.max_chars {
            check_char_limit(batch.column(i), limit)?;
        }
        if !column.nullable && batch.column(i).null_count() > 0 {
            return Err(WeirError::new(
                SqlState::NOT_NULL_VIOLATION,
                format!(
                    "null value in column \"{}\" of relation \"{}\" violates not-null constraint",
                    column.name, def.name
                ),
            ));
        }
    }
    Ok(RecordBatch::try_new(schema, batch.columns().to_vec())?)
}

/// `varchar(n)`: no value longer than `limit` characters (22001). The byte
/// lengths come from a kernel; only values with more bytes than `limit`
/// need their characters counted.
fn check_char_limit(column: &dyn Array, limit: u64) -> WeirResult<()> {
    let Some(strings) = column.as_string_opt::<i32>() else {
        return Ok(());
    };
    let bytes = datafusion::arrow::compute::kernels::length::length(strings)?;
    let bytes = bytes.as_primitive::<datafusion::arrow::datatypes::Int32Type>();
    for (i, n) in bytes.iter().enumerate() {
        if n.is_some_and(|n| n as u64 > limit) && strings.value(i).chars().count() as u64 > limit {
            return Err(WeirError::new(
                SqlState("22001"),
                format!("value too long for type character varying({limit})"),
            ));
        }
    }
    Ok(())
}

/// Turns a refused write into PostgreSQL's unique-violation error.
pub fn check_write(
    def: &TableDef,
    rows: &RecordBatch,
    result: Result<(), KeyViolation>,
) -> WeirResult<()> {
    let Err(violation) = result else {
        return Ok(());
    };
    let options = FormatOptions::default().with_null("null");
    let mut values = Vec::new();
    for &k in &def.primary_key {
        let formatter = ArrayFormatter::try_new(rows.column(k).as_ref(), &options)?;
        values.push(formatter.value(violation.row).to_string());
    }
    let names: Vec<&str> = def
        .primary_key
        .iter()
        .map(|&k| def.columns[k].name.as_str())
        .collect();
    Err(WeirError::new(
        SqlState::UNIQUE_VIOLATION,
        format!(
            "duplicate key value violates unique constraint \"{}_pkey\"",
            def.name
        ),
    )
    .with_detail(format!(
        "Key ({})=({}) already exists.",
        names.join(", "),
        values.join(", ")
    )))
}

/// The table (and its alias) an UPDATE or DELETE targets.
fn update_target<'a>(
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

fn quoted(name: &str) -> String {
    Ident::with_quote('"', name).to_string()
}

/// The query an UPDATE runs: each target row's position and new values.
pub fn update_query(catalog: &Catalog, update: &Update) -> WeirResult<(TableDef, String)> {
    if update.returning.is_some() {
        return Err(WeirError::unsupported(
            "UPDATE ... RETURNING is not supported yet",
        ));
    }
    let (def, alias) = update_target(catalog, &update.table)?;
    let mut values: Vec<Option<String>> = vec![None; def.columns.len()];
    for assignment in &update.assignments {
        let index = assignment_column(def, &assignment.target)?;
        if values[index].is_some() {
            return Err(multiple_assignments(&def.columns[index].name));
        }
        values[index] = Some(format!("({})", assignment.value));
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
pub fn delete_query(catalog: &Catalog, delete: &Delete) -> WeirResult<(TableDef, String)> {
    if delete.returning.is_some() {
        return Err(WeirError::unsupported(
            "DELETE ... RETURNING is not supported yet",
        ));
    }
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

/// Plans one of the generated UPDATE/DELETE queries with `def`'s rows as
/// the target.
pub async fn plan_target_query(
    session: &Session,
    snapshot_tables: &std::collections::HashMap<u64, weir_state::TableSnapshot>,
    def: &TableDef,
    sql: &str,
    params: &Params,
) -> WeirResult<LogicalPlan> {
    let target = snapshot_tables
        .get(&def.id)
        .cloned()
        .ok_or_else(|| WeirError::internal(format!("no snapshot of {}", def.name)))?;
    session.pinned.set_dml_target(target);
    let mut statements = weir_sql::parse(sql)?;
    let Some(weir_sql::WeirStatement::Sql(statement)) = statements.pop() else {
        return Err(WeirError::internal(format!(
            "generated query did not parse: {sql}"
        )));
    };
    let plan = session
        .ctx
        .state()
        .statement_to_plan(datafusion::sql::parser::Statement::Statement(statement))
        .await?;
    bind(plan, params)
}

/// Distinct positions from the first column of `batches`, with the index
/// of each one's first row.
fn distinct_positions(batches: &[RecordBatch]) -> (Vec<u64>, Vec<(usize, usize)>) {
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

async fn update_rows(
    session: &Session,
    working: &mut WorkingState,
    update: &Update,
    params: &Params,
) -> WeirResult<usize> {
    let (def, sql) = update_query(&working.catalog, update)?;
    let snapshot = session.pinned.get();
    let plan = plan_target_query(session, &snapshot.tables, &def, &sql, params).await?;
    let schema = plan.schema().clone();
    let mut exprs = vec![Expr::Column(Column::from(schema.qualified_field(0)))];
    for (i, column) in def.columns.iter().enumerate() {
        let (qualifier, field) = schema.qualified_field(i + 1);
        if !assignable(field.data_type(), &column.data_type) {
            return Err(type_mismatch(
                &column.name,
                &column.data_type,
                field.data_type(),
            ));
        }
        let value = Expr::Column(Column::new(qualifier.cloned(), field.name()));
        exprs.push(cast(value, column.data_type.clone()).alias(&column.name));
    }
    let plan = LogicalPlanBuilder::from(plan).project(exprs)?.build()?;
    let (_, batches) = session.collect(plan).await?;
    let (positions, first_rows) = distinct_positions(&batches);
    if positions.is_empty() {
        return Ok(0);
    }
    let refs: Vec<&RecordBatch> = batches.iter().collect();
    let new_rows = datafusion::arrow::compute::interleave_record_batch(&refs, &first_rows)?;
    let columns: Vec<usize> = (1..new_rows.num_columns()).collect();
    let new_rows = conform(&def, &[new_rows.project(&columns)?])?;
    let table = working.table_mut(def.id)?;
    check_write(&def, &new_rows, table.write(&positions, Some(&new_rows))?)?;
    Ok(positions.len())
}

async fn delete_rows(
    session: &Session,
    working: &mut WorkingState,
    delete: &Delete,
    params: &Params,
) -> WeirResult<usize> {
    let (def, sql) = delete_query(&working.catalog, delete)?;
    let snapshot = session.pinned.get();
    let plan = plan_target_query(session, &snapshot.tables, &def, &sql, params).await?;
    let (_, batches) = session.collect(plan).await?;
    let (positions, _) = distinct_positions(&batches);
    if positions.is_empty() {
        return Ok(0);
    }
    let table = working.table_mut(def.id)?;
    table
        .write(&positions, None)?
        .map_err(|_| WeirError::internal("a delete cannot violate a key"))?;
    Ok(positions.len())
}

/// Stores rows that arrive as a batch (COPY): `batch`'s columns go to the
/// table columns `columns`, the others take their defaults. Returns the row
/// count once it is committed.
pub async fn insert_batch(
    session: &Session,
    table: &str,
    columns: &[usize],
    batch: RecordBatch,
) -> WeirResult<usize> {
    let db = session.db.clone();
    let mut working = db.working().await;
    let def = working.catalog.table(table)?.clone();
    let source = session.ctx.read_batch(batch)?.into_unoptimized_plan();
    let plan = assignment_plan(session, &def, source, columns)?;
    let (_, batches) = session.collect(plan).await?;
    let rows = conform(&def, &batches)?;
    let count = rows.num_rows();
    let table = working.table_mut(def.id)?;
    check_write(&def, &rows, table.write(&[], Some(&rows))?)?;
    let epoch = working.epoch;
    drop(working);
    if count > 0 {
        db.wait_committed(epoch).await?;
    }
    Ok(count)
}
