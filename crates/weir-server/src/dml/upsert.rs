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

pub(super) fn check_conflict_target(
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
