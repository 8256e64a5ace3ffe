//! The selects a query body is made of.

use datafusion::sql::sqlparser::ast::{Select, SetExpr};

/// The selects of `body`: itself, or the operands of its set operations
/// and parenthesized queries (not subqueries inside expressions).
pub fn selects_mut(body: &mut SetExpr) -> Vec<&mut Select> {
    let mut selects = Vec::new();
    let mut bodies = vec![body];
    while let Some(body) = bodies.pop() {
        match body {
            SetExpr::SetOperation { left, right, .. } => {
                bodies.push(left.as_mut());
                bodies.push(right.as_mut());
            }
            SetExpr::Query(inner) => bodies.push(inner.body.as_mut()),
            SetExpr::Select(select) => selects.push(select.as_mut()),
            _ => {}
        }
    }
    selects
}
