//! Integer literals typed as PostgreSQL types them.
//!
//! DataFusion's planner makes every integer literal a `bigint`;
//! PostgreSQL makes it an `integer` when it fits. The type is visible to
//! clients (node-pg and postgres.js return `bigint`s as strings), in
//! overflow (`2147483647 + 1` is out of range for `integer`) and in the
//! column types of views. [`narrow`] rewrites a plan as the planner made
//! it, before parameters are bound and before type coercion, so that
//! coercion then sees PostgreSQL's types and a bound `bigint` parameter
//! stays one.
//!
//! `VALUES` rows, `LIMIT` counts and statements with a recursive query
//! keep DataFusion's `bigint`: their types are fixed when they are
//! planned. A set operation's columns are typed again from its narrowed
//! inputs (`SELECT 1 UNION SELECT 2` is `integer`), a string literal in one
//! branch taking another branch's type.

use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{Result, ScalarValue};
use std::sync::Arc;

use datafusion::arrow::datatypes::DataType;
use datafusion::logical_expr::{cast, Expr, LogicalPlan, Projection, Union};

use crate::plan_rewrite::rewrite_expressions_except;

/// `expr` as an `integer` literal if it is a `bigint` one that fits.
fn narrow_literal(expr: Expr) -> Result<Transformed<Expr>> {
    match expr {
        Expr::Literal(ScalarValue::Int64(Some(v)), metadata) if i32::try_from(v).is_ok() => {
            let narrowed = ScalarValue::Int32(Some(v as i32));
            Ok(Transformed::yes(Expr::Literal(narrowed, metadata)))
        }
        other => Ok(Transformed::no(other)),
    }
}

/// `plan` with its `bigint` literals that fit an `integer` narrowed (see
/// the module doc), names kept and schemas recomputed.
pub fn narrow(plan: LogicalPlan) -> Result<LogicalPlan> {
    // A recursive query's work table has the type of its first term as
    // planned; narrowing that term alone would part the two.
    if plan.exists(|p| Ok(matches!(p, LogicalPlan::RecursiveQuery(_))))? {
        return Ok(plan);
    }
    let fixed_when_planned = |plan: &LogicalPlan| {
        matches!(
            plan,
            LogicalPlan::Values(_) | LogicalPlan::Limit(_) | LogicalPlan::Dml(_)
        )
    };
    let narrowed =
        rewrite_expressions_except(plan, &fixed_when_planned, &|e, _| narrow_literal(e))?;
    retype_unions(narrowed)
}

/// `plan` with each set operation's columns typed again from its inputs
/// (as the planner types them: from the first input, type coercion then
/// unifying them), and the nodes above retyped: a union keeps the schema it
/// was planned with, which said `bigint` for a column of narrowed literals.
fn retype_unions(plan: LogicalPlan) -> Result<LogicalPlan> {
    if !plan.exists(|p| Ok(matches!(p, LogicalPlan::Union(_))))? {
        return Ok(plan);
    }
    let retyped = plan.transform_up_with_subqueries(|plan| match plan {
        LogicalPlan::Union(union) => {
            let inputs = type_string_literals(union.inputs)?;
            let retyped = Union::try_new_with_loose_types(inputs)?;
            Ok(Transformed::yes(LogicalPlan::Union(retyped)))
        }
        other => other.recompute_schema().map(Transformed::yes),
    })?;
    Ok(retyped.data)
}

/// A set operation's `inputs` with each string literal a branch selects
/// cast to the type another branch gives its column, as PostgreSQL
/// resolves an unknown-typed literal (`SELECT 1 UNION SELECT '5'` is
/// `integer`; `SELECT 1 UNION SELECT 'a'` fails with 22P02). A column that
/// is text or a literal in every branch stays text.
fn type_string_literals(mut inputs: Vec<Arc<LogicalPlan>>) -> Result<Vec<Arc<LogicalPlan>>> {
    let width = inputs.first().map_or(0, |p| p.schema().fields().len());
    for column in 0..width {
        let typed = inputs.iter().find_map(|input| {
            let data_type = input.schema().field(column).data_type();
            match data_type {
                DataType::Null | DataType::Utf8 => None,
                // A decimal literal's type is its own digits' (`1.5` is
                // `numeric(2,1)`); the string is read as any `numeric`.
                DataType::Decimal128(..) => Some(crate::numeric_display::UNCONSTRAINED),
                other => Some(other.clone()),
            }
        });
        let Some(data_type) = typed else { continue };
        for input in inputs.iter_mut() {
            let LogicalPlan::Projection(projection) = input.as_ref() else {
                continue;
            };
            let Some(expr) = projection.expr.get(column) else {
                continue;
            };
            let literal = match expr {
                Expr::Alias(alias) => alias.expr.as_ref(),
                other => other,
            };
            if !matches!(literal, Expr::Literal(ScalarValue::Utf8(Some(_)), _)) {
                continue;
            }
            let (qualifier, field) = projection.schema.qualified_field(column);
            let typed_literal = cast(literal.clone(), data_type.clone())
                .alias_qualified(qualifier.cloned(), field.name());
            let mut exprs = projection.expr.clone();
            exprs[column] = typed_literal;
            let retyped = Projection::try_new(exprs, Arc::clone(&projection.input))?;
            *input = Arc::new(LogicalPlan::Projection(retyped));
        }
    }
    Ok(inputs)
}
