//! `INSERT ... ON CONFLICT`: the conflict target and `DO UPDATE`.

use std::collections::HashSet;
use std::sync::Arc;

use datafusion::arrow::array::{Array, AsArray, BooleanArray, RecordBatch};
use datafusion::arrow::compute::filter_record_batch;
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::common::{DFSchema, TableReference};
use datafusion::logical_expr::{cast, lit, Expr, ExprSchemable};
use datafusion::sql::sqlparser::ast::{ConflictTarget, Expr as SqlExpr, OnConflictAction};

use crate::catalog::{normalize_ident, TableDef};
use crate::error::{SqlState, WeirError, WeirResult};
use crate::session::{Params, Session};

use super::*;

/// The constraint(s) whose conflicts an `ON CONFLICT` clause handles.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Arbiter {
    /// The primary key.
    Key,
    /// The table's unique constraint of this index (`DO NOTHING` only).
    Unique(usize),
    /// Every unique constraint and the key: `ON CONFLICT DO NOTHING`
    /// without a target.
    Any,
}

/// Which constraint `ON CONFLICT [target]` names, as PostgreSQL infers
/// it: the primary key's or a `UNIQUE` constraint's columns (in any
/// order) or name; none with `DO NOTHING` means any. `DO UPDATE` takes
/// the primary key only here.
pub(super) fn check_conflict_target(
    def: &TableDef,
    target: Option<&ConflictTarget>,
    action: &OnConflictAction,
) -> WeirResult<Arbiter> {
    let no_constraint = || {
        WeirError::new(
            SqlState("42P10"),
            "there is no unique or exclusion constraint matching the ON CONFLICT specification",
        )
    };
    let arbiter = match target {
        None if matches!(action, OnConflictAction::DoNothing) => return Ok(Arbiter::Any),
        None => {
            return Err(WeirError::new(
                SqlState::SYNTAX_ERROR,
                "ON CONFLICT DO UPDATE requires inference specification or constraint name",
            ))
        }
        Some(ConflictTarget::Columns(columns)) => {
            let named: HashSet<usize> = columns
                .iter()
                .map(|c| column_index(def, &normalize_ident(c)))
                .collect::<WeirResult<_>>()?;
            let same = |columns: &[usize]| columns.iter().copied().collect::<HashSet<_>>() == named;
            if !def.primary_key.is_empty() && same(&def.primary_key) {
                Arbiter::Key
            } else if let Some(i) = def.unique.iter().position(|u| same(&u.columns)) {
                Arbiter::Unique(i)
            } else {
                return Err(no_constraint());
            }
        }
        Some(ConflictTarget::OnConstraint(name)) => {
            let name = name.to_string();
            if !def.primary_key.is_empty() && name == format!("{}_pkey", def.name) {
                Arbiter::Key
            } else if let Some(i) = def.unique.iter().position(|u| u.name == name) {
                Arbiter::Unique(i)
            } else {
                return Err(WeirError::new(
                    SqlState::UNDEFINED_OBJECT,
                    format!(
                        "constraint \"{name}\" for table \"{}\" does not exist",
                        def.name
                    ),
                ));
            }
        }
    };
    if matches!(arbiter, Arbiter::Unique(_)) && matches!(action, OnConflictAction::DoUpdate(_)) {
        return Err(WeirError::unsupported(
            "ON CONFLICT ... DO UPDATE on a UNIQUE constraint (only on the primary key)",
        ));
    }
    Ok(arbiter)
}

/// Computes `DO UPDATE SET ...` for conflicting rows: returns the updated
/// rows and, per conflicting row, whether its `WHERE` held.
#[allow(clippy::too_many_arguments)]
pub(super) fn evaluate_upsert(
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
    let state = session.ctx().state();
    let logical = |sql: &SqlExpr| -> WeirResult<Expr> {
        let expr = state.create_logical_expr(&sql.to_string(), &df_schema)?;
        bind_expr(expr, params)
    };
    let evaluate = |expr: Expr| -> WeirResult<Arc<dyn Array>> {
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
        let value = logical(&assignment.value)?;
        let from = value.get_type(&df_schema)?;
        new_columns[index] = evaluate(assign(&def.columns[index], value, &from)?)?;
    }
    let keep = match selection {
        Some(predicate) => {
            let mask = evaluate(cast(logical(predicate)?, DataType::Boolean))?;
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
pub(super) fn nullable_schema(schema: &Schema) -> Arc<Schema> {
    let fields: Vec<Field> = schema
        .fields()
        .iter()
        .map(|f| f.as_ref().clone().with_nullable(true))
        .collect();
    Arc::new(Schema::new(fields))
}

/// Replaces placeholders in a lone expression with their bound values.
pub(super) fn bind_expr(expr: Expr, params: &Params) -> WeirResult<Expr> {
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
