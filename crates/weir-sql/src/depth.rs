//! A limit on how deeply a statement's expressions nest.
//!
//! DataFusion's analysis of an expression chain costs more than linear
//! time in its length (type coercion asks every operator for the type of
//! its whole left side): in a debug build a 2,000-term `1 + 1 + ...` took
//! over a minute to plan, and 10,000 terms many minutes, holding a thread
//! of the server. PostgreSQL bounds such statements by its stack (54001,
//! statement too complex); Weir bounds them by nesting depth, checked on
//! the parsed statement before anything is planned.

use std::ops::ControlFlow;

use datafusion::sql::sqlparser::ast::{Expr, Statement, Visit, Visitor};

use crate::ParseError;

/// The deepest expression nesting a statement may have. ORMs write long
/// `OR` chains (2,500 terms plan in well under a second in a release
/// build); arithmetic chains near the limit still take seconds.
pub const MAX_EXPRESSION_DEPTH: usize = 3_000;

/// Nesting from which planning a statement takes long enough (tens of
/// milliseconds and more) that it should not hold a runtime thread.
const DEEP: usize = 256;

/// Counts the nesting of expressions while visiting, stopping once it
/// passes `limit`.
struct Depth {
    limit: usize,
    current: usize,
}

impl Visitor for Depth {
    type Break = ();

    fn pre_visit_expr(&mut self, _expr: &Expr) -> ControlFlow<()> {
        self.current += 1;
        if self.current > self.limit {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    }

    fn post_visit_expr(&mut self, _expr: &Expr) -> ControlFlow<()> {
        self.current -= 1;
        ControlFlow::Continue(())
    }
}

/// Whether `statement`'s expressions nest deeper than `limit` levels.
fn nests_deeper_than(statement: &Statement, limit: usize) -> bool {
    statement.visit(&mut Depth { limit, current: 0 }).is_break()
}

/// Whether `statement`'s expressions nest deeply enough that planning it
/// takes long: the server then plans it off its runtime threads.
pub fn is_deep(statement: &Statement) -> bool {
    nests_deeper_than(statement, DEEP - 1)
}

/// Refuses `statement` (54001) if its expressions nest deeper than
/// [`MAX_EXPRESSION_DEPTH`].
pub fn check_depth(statement: &Statement) -> Result<(), ParseError> {
    if nests_deeper_than(statement, MAX_EXPRESSION_DEPTH) {
        return Err(ParseError::TooComplex(format!(
            "statement too complex: expressions nest deeper than {MAX_EXPRESSION_DEPTH} levels"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
    use datafusion::sql::sqlparser::parser::Parser;

    fn parsed(sql: &str) -> Statement {
        Parser::parse_sql(&PostgreSqlDialect {}, sql)
            .unwrap()
            .remove(0)
    }

    #[test]
    fn long_chains_are_refused_and_wide_lists_are_not() {
        let chain = |n: usize| format!("SELECT {}", vec!["1"; n].join(" + "));
        assert!(check_depth(&parsed(&chain(MAX_EXPRESSION_DEPTH - 10))).is_ok());
        assert!(matches!(
            check_depth(&parsed(&chain(MAX_EXPRESSION_DEPTH + 10))),
            Err(ParseError::TooComplex(_))
        ));
        let list: Vec<String> = (0..20_000).map(|i| i.to_string()).collect();
        let wide = format!("SELECT 1 IN ({})", list.join(", "));
        assert!(check_depth(&parsed(&wide)).is_ok());
        assert!(!is_deep(&parsed(&wide)));
        assert!(!is_deep(&parsed(&chain(DEEP - 10))));
        assert!(is_deep(&parsed(&chain(DEEP + 10))));
    }
}
