//! Comparisons with `ANY`/`ALL` of a subquery, rewritten into forms
//! DataFusion 55 answers right. It plans `x op ANY (subquery)` and `x op
//! ALL (subquery)` as mark joins without their join condition: every row
//! matched, or none, silently. So:
//!
//! - `x = ANY (q)` is `x IN (q)` and `x <> ALL (q)` is `x NOT IN (q)`, as
//!   the standard defines them (NULLs included);
//! - any other comparison is decided from the subquery's `count(*)`,
//!   `count(v)`, `min(v)` and `max(v)` (uncorrelated scalar subqueries when
//!   `q` is), with SQL's three-valued result: `x > ANY (q)` is false for an
//!   empty `q`, true if `x > min`, else NULL if `x` or a value of `q` is
//!   NULL, else false; `ALL` is the dual.
//!
//! [`aggregated`], a subquery's rows reduced to one aggregate, also serves
//! `EXISTS` in a select list ([`crate::pg_forms`]).

use std::ops::ControlFlow;

use datafusion::sql::sqlparser::ast::{
    visit_expressions_mut, BinaryOperator, Expr, GroupByExpr, Ident, Query, SelectItem, SetExpr,
    Value,
};

use crate::parse::parse_expr;

/// `expr` rewritten if it compares with `ANY`/`ALL` of a subquery (see
/// the module documentation).
pub fn rewrite_quantified(expr: &mut Expr) {
    let all = match expr {
        Expr::AnyOp { right, .. } if is_subquery(right) => false,
        Expr::AllOp { right, .. } if is_subquery(right) => true,
        _ => return,
    };
    let original = std::mem::replace(expr, Expr::value(Value::Null));
    let (Expr::AnyOp {
        left,
        compare_op,
        right,
        ..
    }
    | Expr::AllOp {
        left,
        compare_op,
        right,
    }) = &original
    else {
        unreachable!("matched above")
    };
    let Expr::Subquery(query) = right.as_ref() else {
        unreachable!("matched above")
    };
    *expr = match (all, compare_op) {
        (false, BinaryOperator::Eq) | (true, BinaryOperator::NotEq) => Expr::InSubquery {
            expr: left.clone(),
            subquery: query.clone(),
            negated: all,
        },
        _ => by_aggregates(left, query, all, compare_op).unwrap_or(original),
    };
}

fn is_subquery(expr: &Expr) -> bool {
    matches!(expr, Expr::Subquery(_))
}

/// `left op ANY/ALL (query)` decided from the aggregates of `query`'s one
/// column; `None` for an operator that is not a comparison.
fn by_aggregates(left: &Expr, query: &Query, all: bool, op: &BinaryOperator) -> Option<Expr> {
    let x = format!("({left})");
    let of = |aggregate: &str| aggregated(query, aggregate, None, "weir_quantified");
    let (min, max) = (of("min(v)")?, of("max(v)")?);
    let (rows, values) = (of("count(*)")?, of("count(v)")?);
    // For ANY: some value satisfies the comparison; for ALL: every one does.
    let holds = match (op, all) {
        (BinaryOperator::Gt | BinaryOperator::GtEq, false) => format!("{x} {op} {min}"),
        (BinaryOperator::Gt | BinaryOperator::GtEq, true) => format!("{x} {op} {max}"),
        (BinaryOperator::Lt | BinaryOperator::LtEq, false) => format!("{x} {op} {max}"),
        (BinaryOperator::Lt | BinaryOperator::LtEq, true) => format!("{x} {op} {min}"),
        (BinaryOperator::NotEq, false) => format!("({x} <> {min} OR {x} <> {max})"),
        (BinaryOperator::Eq, true) => format!("({x} = {min} AND {x} = {max})"),
        _ => return None,
    };
    let unknown = format!("{x} IS NULL OR {rows} > {values}");
    let text = if all {
        format!(
            "CASE WHEN {rows} = 0 THEN true WHEN NOT ({holds}) THEN false \
             WHEN {unknown} THEN NULL ELSE true END"
        )
    } else {
        format!(
            "CASE WHEN {rows} = 0 THEN false WHEN {holds} THEN true \
             WHEN {unknown} THEN NULL ELSE false END"
        )
    };
    // `AND true` keeps the value and makes the column's name `?column?`,
    // the comparison's, rather than `case`.
    parse_expr(&format!("({text}) AND true"))
}

/// A scalar subquery reducing the rows of `query` to `aggregate` (SQL in
/// which `v` stands for the query's one value), its column named `alias`.
/// Where `query` is a plain select, the aggregate replaces its select list,
/// so that a correlated query stays one DataFusion decorrelates; else it is
/// computed over `query` as a derived table named `derived`.
pub(crate) fn aggregated(
    query: &Query,
    aggregate: &str,
    alias: Option<&str>,
    derived: &str,
) -> Option<Expr> {
    let mut aggregate_expr = parse_expr(aggregate)?;
    let mut value_used = false;
    let _ = visit_expressions_mut(&mut aggregate_expr, |e| {
        value_used |= matches!(e, Expr::Identifier(i) if i.value == "v");
        ControlFlow::<()>::Continue(())
    });
    if let Some(value) = plain_select_value(query, value_used) {
        if let Some(value) = value {
            let _ = visit_expressions_mut(&mut aggregate_expr, |e| {
                if matches!(e, Expr::Identifier(i) if i.value == "v") {
                    *e = value.clone();
                }
                ControlFlow::<()>::Continue(())
            });
        }
        let mut reduced = query.clone();
        reduced.order_by = None;
        if let SetExpr::Select(select) = reduced.body.as_mut() {
            select.projection = vec![match alias {
                Some(alias) => SelectItem::ExprWithAlias {
                    expr: aggregate_expr,
                    alias: Ident::with_quote('"', alias),
                },
                None => SelectItem::UnnamedExpr(aggregate_expr),
            }];
        }
        return Some(Expr::Subquery(Box::new(reduced)));
    }
    let alias = alias.map(|a| format!(" AS \"{a}\"")).unwrap_or_default();
    let columns = if value_used { "(v)" } else { "" };
    parse_expr(&format!(
        "(SELECT {aggregate}{alias} FROM ({query}) AS {derived}{columns})"
    ))
}

/// For a plain select (no grouping, `DISTINCT`, limit or `WITH`): `Some`,
/// holding its one value where `value_used`; `None` for any other query, or
/// when the value is wanted and the select has more than one.
fn plain_select_value(query: &Query, value_used: bool) -> Option<Option<&Expr>> {
    let SetExpr::Select(select) = query.body.as_ref() else {
        return None;
    };
    let plain = select.distinct.is_none()
        && select.having.is_none()
        && select.group_by == GroupByExpr::Expressions(vec![], vec![])
        && query.limit_clause.is_none()
        && query.with.is_none();
    if !plain {
        return None;
    }
    if !value_used {
        return Some(None);
    }
    match select.projection.as_slice() {
        [SelectItem::UnnamedExpr(value) | SelectItem::ExprWithAlias { expr: value, .. }] => {
            Some(Some(value))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use crate::parse::parsed_text as rewritten;

    #[test]
    fn equality_with_any_becomes_in() {
        assert_eq!(
            rewritten(
                "SELECT 1 FROM t WHERE a = ANY (SELECT b FROM u) AND c <> ALL (SELECT d FROM v)"
            ),
            "SELECT 1 FROM t WHERE a IN (SELECT b FROM u) AND c NOT IN (SELECT d FROM v)"
        );
    }

    #[test]
    fn other_comparisons_use_the_aggregates() {
        let text = rewritten("SELECT 1 FROM t WHERE a > ANY (SELECT b FROM u WHERE u.k = t.k)");
        assert!(
            text.contains("(a) > (SELECT min(b) FROM u WHERE u.k = t.k)"),
            "{text}"
        );
        let text = rewritten("SELECT 1 FROM t WHERE a <= ALL (SELECT DISTINCT b FROM u)");
        assert!(
            text.contains("NOT ((a) <= (SELECT min(v) FROM (SELECT DISTINCT b FROM u) AS weir_quantified (v))"),
            "{text}"
        );
        // An array on the right is not a subquery: `pg_forms` compares
        // with its elements.
        assert_eq!(
            rewritten("SELECT 1 FROM t WHERE a > ANY(ARRAY[1, 2])"),
            "SELECT 1 FROM t WHERE weir_compare_array(a, ARRAY[1, 2], '>', 'any')"
        );
    }
}
