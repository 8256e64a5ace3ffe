//! The skeleton of Weir's plan rewrites: the analyzer rules that give
//! arithmetic and casts PostgreSQL's behaviour, and the rewrites of a plan
//! as the planner made it (literal and aggregate types, parameter types).

use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{DFSchema, Result};
use datafusion::logical_expr::expr_rewriter::NamePreserver;
use datafusion::logical_expr::utils::merge_schema;
use datafusion::logical_expr::{Expr, LogicalPlan};

/// Rewrites every expression of every plan node, subqueries included,
/// bottom up with `rewrite`, which is given the node's input schema; output
/// names are kept and schemas recomputed.
pub(crate) fn rewrite_expressions(
    plan: LogicalPlan,
    rewrite: &dyn Fn(Expr, &DFSchema) -> Result<Transformed<Expr>>,
) -> Result<LogicalPlan> {
    rewrite_expressions_except(plan, &|_| false, rewrite)
}

/// [`rewrite_expressions`], leaving the nodes for which `skip` holds as
/// they are (nodes whose schema is fixed when planned, such as `VALUES`).
pub(crate) fn rewrite_expressions_except(
    plan: LogicalPlan,
    skip: &dyn Fn(&LogicalPlan) -> bool,
    rewrite: &dyn Fn(Expr, &DFSchema) -> Result<Transformed<Expr>>,
) -> Result<LogicalPlan> {
    let rewritten = plan.transform_up_with_subqueries(|plan| {
        if skip(&plan) {
            return Ok(Transformed::no(plan));
        }
        let schema = merge_schema(&plan.inputs());
        rewrite_node(plan, &|e| rewrite(e, &schema))
    })?;
    Ok(rewritten.data)
}

/// Rewrites every expression of every plan node that has one input,
/// subqueries included, bottom up with `rewrite`, which is given the
/// node's input plan (for rules that look into it, as the display scale
/// rules do); output names are kept and schemas recomputed.
pub(crate) fn rewrite_expressions_over_input(
    plan: LogicalPlan,
    rewrite: &dyn Fn(Expr, &LogicalPlan) -> Result<Transformed<Expr>>,
) -> Result<LogicalPlan> {
    let rewritten = plan.transform_up_with_subqueries(|plan| {
        let input = match plan.inputs().as_slice() {
            [input] => (*input).clone(),
            _ => return Ok(Transformed::no(plan)),
        };
        rewrite_node(plan, &|e| rewrite(e, &input))
    })?;
    Ok(rewritten.data)
}

/// `plan`'s expressions rewritten bottom up with `rewrite`, their output
/// names kept, and its schema recomputed.
fn rewrite_node(
    plan: LogicalPlan,
    rewrite: &dyn Fn(Expr) -> Result<Transformed<Expr>>,
) -> Result<Transformed<LogicalPlan>> {
    let preserver = NamePreserver::new(&plan);
    plan.map_expressions(|expr| {
        let name = preserver.save(&expr);
        let rewritten = expr.transform_up(rewrite)?;
        Ok(rewritten.update_data(|e| name.restore(e)))
    })?
    .map_data(|plan| plan.recompute_schema())
}

/// `expr` without the casts around it (those type coercion adds, or the
/// planner puts on a `VALUES` list's literals).
pub(crate) fn uncast(expr: &Expr) -> &Expr {
    match expr {
        Expr::Cast(cast) => uncast(&cast.expr),
        Expr::TryCast(cast) => uncast(&cast.expr),
        other => other,
    }
}
