//! `x = ANY (subquery)` and `x <> ALL (subquery)` as `x IN (subquery)` and
//! `x NOT IN (subquery)`, which they are by definition (NULLs included).
//! DataFusion 55 plans the `ANY`/`ALL` forms as mark joins without their
//! join condition, so that every row matched: a wrong answer, silently.

use std::ops::ControlFlow;

use datafusion::sql::sqlparser::ast::{visit_expressions_mut, BinaryOperator, Expr, Statement};

/// Rewrites the comparisons with a subquery in `statement` (see the module
/// documentation).
pub fn rewrite_quantified_subqueries(statement: &mut Statement) {
    let _ = visit_expressions_mut(statement, |expr| {
        let negated = match expr {
            Expr::AnyOp {
                compare_op: BinaryOperator::Eq,
                right,
                ..
            } if matches!(right.as_ref(), Expr::Subquery(_)) => false,
            Expr::AllOp {
                compare_op: BinaryOperator::NotEq,
                right,
                ..
            } if matches!(right.as_ref(), Expr::Subquery(_)) => true,
            _ => return ControlFlow::<()>::Continue(()),
        };
        let (Expr::AnyOp { left, right, .. } | Expr::AllOp { left, right, .. }) = std::mem::replace(
            expr,
            Expr::value(datafusion::sql::sqlparser::ast::Value::Null),
        ) else {
            unreachable!("matched above")
        };
        let Expr::Subquery(subquery) = *right else {
            unreachable!("matched above")
        };
        *expr = Expr::InSubquery {
            expr: left,
            subquery,
            negated,
        };
        ControlFlow::Continue(())
    });
}

#[cfg(test)]
mod tests {
    use crate::{parse, WeirStatement};

    #[test]
    fn equality_with_any_becomes_in() {
        let parsed = parse(
            "SELECT 1 FROM t WHERE a = ANY (SELECT b FROM u) AND c <> ALL (SELECT d FROM v) AND e > ANY (SELECT f FROM w)",
        )
        .unwrap();
        let WeirStatement::Sql(statement) = &parsed[0] else {
            panic!()
        };
        assert_eq!(
            statement.to_string(),
            "SELECT 1 FROM t WHERE a IN (SELECT b FROM u) AND c NOT IN (SELECT d FROM v) AND e > ANY(SELECT f FROM w)"
        );
    }
}
