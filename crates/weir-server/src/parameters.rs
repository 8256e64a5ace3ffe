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
use datafusion::logical_expr::expr::{Cast, Placeholder, TryCast};
use datafusion::logical_expr::{Expr, LogicalPlan};

use crate::error::WeirResult;

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
    let typed = plan.transform_up_with_subqueries(|node| {
        node.map_expressions(|expr| {
            expr.transform_up(|e| {
                Ok(match e {
                    Expr::Placeholder(placeholder) => {
                        let t = declared_type(&placeholder.id);
                        typed(placeholder, t).update_data(Expr::Placeholder)
                    }
                    Expr::Cast(Cast { expr, field }) => match *expr {
                        Expr::Placeholder(p) => {
                            let t = Some(field.data_type().clone());
                            typed(p, t).update_data(|p| {
                                let expr = Box::new(Expr::Placeholder(p));
                                Expr::Cast(Cast { expr, field })
                            })
                        }
                        expr => Transformed::no(Expr::Cast(Cast {
                            expr: Box::new(expr),
                            field,
                        })),
                    },
                    Expr::TryCast(TryCast { expr, field }) => match *expr {
                        Expr::Placeholder(p) => {
                            let t = Some(field.data_type().clone());
                            typed(p, t).update_data(|p| {
                                let expr = Box::new(Expr::Placeholder(p));
                                Expr::TryCast(TryCast { expr, field })
                            })
                        }
                        expr => Transformed::no(Expr::TryCast(TryCast {
                            expr: Box::new(expr),
                            field,
                        })),
                    },
                    other => Transformed::no(other),
                })
            })
        })?
        .map_data(|node| node.recompute_schema())
    })?;
    Ok(typed.data)
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
