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
//! planned.

use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{Result, ScalarValue};
use datafusion::logical_expr::{Expr, LogicalPlan};

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
    rewrite_expressions_except(plan, &fixed_when_planned, &|e, _| narrow_literal(e))
}
