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
        let preserver = NamePreserver::new(&plan);
        plan.map_expressions(|expr| {
            let name = preserver.save(&expr);
            let rewritten = expr.transform_up(|e| rewrite(e, &schema))?;
            Ok(rewritten.update_data(|e| name.restore(e)))
        })?
        .map_data(|plan| plan.recompute_schema())
    })?;
    Ok(rewritten.data)
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
