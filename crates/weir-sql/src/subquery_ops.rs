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

use std::ops::ControlFlow;

use datafusion::sql::sqlparser::ast::{
    visit_expressions_mut, BinaryOperator, Expr, GroupByExpr, Query, SelectItem, SetExpr,
    Statement, Value,
};
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::parser::Parser;

/// Rewrites the comparisons with a quantified subquery in `statement` (see
/// the module documentation).
pub fn rewrite_quantified_subqueries(statement: &mut Statement) {
    let _ = visit_expressions_mut(statement, |expr| {
        let all = match expr {
            Expr::AnyOp { right, .. } if is_subquery(right) => false,
            Expr::AllOp { right, .. } if is_subquery(right) => true,
            _ => return ControlFlow::<()>::Continue(()),
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
        ControlFlow::Continue(())
    });
}

fn is_subquery(expr: &Expr) -> bool {
    matches!(expr, Expr::Subquery(_))
}

/// `left op ANY/ALL (query)` decided from the aggregates of `query`'s one
/// column; `None` for an operator that is not a comparison.
fn by_aggregates(left: &Expr, query: &Query, all: bool, op: &BinaryOperator) -> Option<Expr> {
    let x = format!("({left})");
    let of = |aggregate: &str| aggregate_of(query, aggregate);
    let (min, max) = (of("min(v)"), of("max(v)"));
    let (rows, values) = (of("count(*)"), of("count(v)"));
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
    Parser::new(&PostgreSqlDialect {})
        .try_with_sql(&format!("({text}) AND true"))
        .and_then(|mut parser| parser.parse_expr())
        .ok()
}

/// A scalar subquery computing `aggregate` (of `v`, the value) over the
/// rows of `query`: the query itself with the aggregate as its select list
/// where it is a plain select, so that a correlated query stays one DataFusion
/// decorrelates; else over it as a derived table.
fn aggregate_of(query: &Query, aggregate: &str) -> String {
    if let SetExpr::Select(select) = query.body.as_ref() {
        let plain = select.projection.len() == 1
            && select.distinct.is_none()
            && select.having.is_none()
            && select.group_by == GroupByExpr::Expressions(vec![], vec![])
            && query.order_by.is_none()
            && query.limit_clause.is_none()
            && query.with.is_none();
        if let (
            true,
            SelectItem::UnnamedExpr(value) | SelectItem::ExprWithAlias { expr: value, .. },
        ) = (plain, &select.projection[0])
        {
            let mut aggregated = query.clone();
            if let SetExpr::Select(select) = aggregated.body.as_mut() {
                let text = aggregate.replace("(v)", &format!("({value})"));
                if let Ok(expr) = Parser::new(&PostgreSqlDialect {})
                    .try_with_sql(&text)
                    .and_then(|mut parser| parser.parse_expr())
                {
                    select.projection = vec![SelectItem::UnnamedExpr(expr)];
                    return format!("({aggregated})");
                }
            }
        }
    }
    format!("(SELECT {aggregate} FROM ({query}) AS weir_quantified(v))")
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
        // An array on the right is not a subquery: left as it is.
        assert!(rewritten("SELECT 1 FROM t WHERE a > ANY(ARRAY[1, 2])").contains("ANY"));
    }
}
