//! Types for the parameters a statement leaves open.
//!
//! DataFusion infers a parameter's type from a comparison or an
//! arithmetic operator (`WHERE int_col = $1`), but not from a cast or a
//! select list: `SELECT $1::int + 1` and `SELECT $1` leave `$1` untyped,
//! and Weir would describe it as `text`. PostgreSQL types it by the cast
//! (asyncpg then sends an integer), or by the type the client declared in
//! Parse (psycopg declares every parameter).

use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, Field};
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::DFSchema;
use datafusion::logical_expr::expr::{Cast, Placeholder, TryCast};
use datafusion::logical_expr::{Expr, LogicalPlan};

use crate::error::WeirResult;
use crate::plan_rewrite::rewrite_expressions;

/// `plan` with each untyped parameter `$n` given the type in
/// `declared[n - 1]` if there is one, else the type of a cast applied
/// directly to it, and its schemas recomputed.
pub fn type_open_parameters(
    plan: LogicalPlan,
    declared: &[Option<DataType>],
) -> WeirResult<LogicalPlan> {
    let declared_type = |id: &str| {
        let n: usize = id.strip_prefix('$')?.parse().ok()?;
        declared.get(n.checked_sub(1)?)?.clone()
    };
    let type_node = |e: Expr, _: &DFSchema| match e {
        Expr::Placeholder(p) => {
            let t = declared_type(&p.id);
            Ok(typed(p, t).update_data(Expr::Placeholder))
        }
        Expr::Cast(Cast { ref field, .. }) | Expr::TryCast(TryCast { ref field, .. }) => {
            let target = field.data_type().clone();
            e.map_children(|child| match child {
                Expr::Placeholder(p) => {
                    Ok(typed(p, Some(target.clone())).update_data(Expr::Placeholder))
                }
                other => Ok(Transformed::no(other)),
            })
        }
        other => Ok(Transformed::no(other)),
    };
    Ok(rewrite_expressions(plan, &type_node)?)
}

/// `placeholder` with type `t` if it has none yet.
fn typed(placeholder: Placeholder, t: Option<DataType>) -> Transformed<Placeholder> {
    match (placeholder.field.is_none(), t) {
        (true, Some(t)) => Transformed::yes(Placeholder {
            field: Some(Arc::new(Field::new(placeholder.id.clone(), t, true))),
            id: placeholder.id,
        }),
        _ => Transformed::no(placeholder),
    }
}
