//! Types for the parameters a statement leaves open.
//!
//! DataFusion infers a parameter's type from a comparison or an
//! arithmetic operator (`WHERE int_col = $1`), but not from a cast or a
//! select list: `SELECT $1::int + 1` and `SELECT $1` leave `$1` untyped,
//! and Weir would describe it as `text`. PostgreSQL types it by the cast
//! (asyncpg then sends an integer), or by the type the client declared in
//! Parse (psycopg declares every parameter), and `col = ANY($1)` as an
//! array of the column's type.

use std::ops::ControlFlow;
use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, Field};
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::DFSchema;
use datafusion::logical_expr::expr::{Cast, Placeholder, TryCast};
use datafusion::logical_expr::{Expr, ExprSchemable, LogicalPlan};
use datafusion::sql::sqlparser::ast::{
    visit_expressions, ArrayElemTypeDef, DataType as SqlType, Expr as SqlExpr, Statement,
};
use pgwire::api::Type;

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
    let type_node = |e: Expr, schema: &DFSchema| match e {
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
        // `col = ANY($1)` is planned as `weir_compare_array(col, $1, ...)`:
        // `$1` is an array of the column's type, as PostgreSQL infers it.
        Expr::ScalarFunction(mut call)
            if call.name() == crate::array_compare::NAME
                && matches!(&call.args[..], [_, Expr::Placeholder(p), ..] if p.field.is_none()) =>
        {
            let element = call.args[0].get_type(schema)?;
            let Expr::Placeholder(p) = call.args.remove(1) else {
                unreachable!("matched above");
            };
            let list = DataType::List(Arc::new(Field::new_list_field(element, true)));
            call.args
                .insert(1, Expr::Placeholder(typed(p, Some(list)).data));
            Ok(Transformed::yes(Expr::ScalarFunction(call)))
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

/// The PostgreSQL types of parameters cast directly to `oid` or `oid[]`
/// in `statement` (`$1::oid[]`), by index from 0. Their Arrow type is the
/// same as `integer`'s, so without this they would be described as
/// `integer`; asyncpg binds its type introspection's `$1::oid[]` as the
/// type described and, told `int4[]`, would introspect that type again.
pub fn oid_parameters(statement: &Statement) -> Vec<(usize, Type)> {
    let mut found = Vec::new();
    let _ = visit_expressions(statement, |e| {
        if let SqlExpr::Cast {
            expr, data_type, ..
        } = e
        {
            let index = crate::point_read::parameter(expr);
            let wire = match data_type {
                SqlType::Array(ArrayElemTypeDef::SquareBracket(element, _))
                | SqlType::Array(ArrayElemTypeDef::AngleBracket(element))
                    if is_oid(element) =>
                {
                    Some(Type::OID_ARRAY)
                }
                t if is_oid(t) => Some(Type::OID),
                _ => None,
            };
            if let (Some(index), Some(wire)) = (index, wire) {
                found.push((index, wire));
            }
        }
        ControlFlow::<()>::Continue(())
    });
    found
}

/// Whether `t` is `oid` (or `pg_catalog.oid`).
fn is_oid(t: &SqlType) -> bool {
    matches!(t, SqlType::Custom(name, args)
        if args.is_empty()
            && name.0.last().is_some_and(|part| part.to_string().eq_ignore_ascii_case("oid")))
}
