//! `INSERT INTO t [(columns)] OVERRIDING {SYSTEM | USER} VALUE ...`, as
//! PostgreSQL writes it (and `pg_dump --inserts` does for identity
//! columns): `SYSTEM VALUE` stores the values given for a `GENERATED
//! ALWAYS AS IDENTITY` column, `USER VALUE` ignores the values given for
//! every identity column and numbers the rows from its sequence.
//!
//! sqlparser does not read the clause, and its `Insert` has no field for
//! it. [`strip`] blanks it out of the text before parsing (every other
//! token keeps its place) and [`apply`] records it on the parsed `INSERT`
//! as an optimizer hint, `/*weir+OVERRIDING SYSTEM VALUE*/`, the free
//! text an `Insert` keeps (and prints, so the statement reads back the
//! same); [`overriding`] reads it from there.

use std::fmt;

use datafusion::sql::sqlparser::ast::{
    Insert, OptimizerHint, OptimizerHintStyle, SetExpr, Statement,
};
use datafusion::sql::sqlparser::keywords::Keyword;
use datafusion::sql::sqlparser::tokenizer::Token;

use crate::parse::{blanked, tokens_if_mentioned, LineOffsets, ParseError};

/// Whose values an `INSERT` stores in identity columns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Overriding {
    /// `OVERRIDING SYSTEM VALUE`: the values given, also for `GENERATED
    /// ALWAYS` columns.
    System,
    /// `OVERRIDING USER VALUE`: the sequence's, whatever was given.
    User,
}

impl fmt::Display for Overriding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Overriding::System => f.write_str("OVERRIDING SYSTEM VALUE"),
            Overriding::User => f.write_str("OVERRIDING USER VALUE"),
        }
    }
}

/// The prefix of the hint that carries the clause.
const HINT_PREFIX: &str = "weir";

/// The clause an `INSERT` was written with, if any.
pub fn overriding(insert: &Insert) -> Option<Overriding> {
    insert
        .optimizer_hints
        .iter()
        .filter(|h| h.prefix == HINT_PREFIX)
        .find_map(|h| match h.text.trim() {
            t if t.eq_ignore_ascii_case("OVERRIDING SYSTEM VALUE") => Some(Overriding::System),
            t if t.eq_ignore_ascii_case("OVERRIDING USER VALUE") => Some(Overriding::User),
            _ => None,
        })
}

/// `text` (one statement) without its `OVERRIDING ... VALUE` clause, and
/// the clause; `None` when it has none. The clause is where PostgreSQL's
/// grammar takes it: in an `INSERT`, after the table or its column list
/// and before the rows' query (`VALUES`, `SELECT`, `WITH`, `TABLE` or a
/// parenthesis); anywhere else it is left for sqlparser to refuse.
pub(crate) fn strip(text: &str) -> Result<Option<(String, Overriding)>, ParseError> {
    let Some(tokens) = tokens_if_mentioned(text, "overriding")? else {
        return Ok(None);
    };
    let is_keyword = |i: usize, keyword: Keyword| matches!(tokens.get(i).map(|t| &t.token), Some(Token::Word(w)) if w.keyword == keyword);
    let mut depth = 0i32;
    let mut in_insert = false;
    for (i, token) in tokens.iter().enumerate() {
        match &token.token {
            Token::LParen => depth += 1,
            Token::RParen => depth -= 1,
            Token::Word(w) if depth == 0 && w.keyword == Keyword::INSERT => in_insert = true,
            Token::Word(w)
                if in_insert
                    && depth == 0
                    && w.quote_style.is_none()
                    && w.value.eq_ignore_ascii_case("overriding") =>
            {
                let kind = if is_keyword(i + 1, Keyword::SYSTEM) {
                    Overriding::System
                } else if is_keyword(i + 1, Keyword::USER) {
                    Overriding::User
                } else {
                    continue;
                };
                let after_target =
                    i > 0 && matches!(tokens[i - 1].token, Token::Word(_) | Token::RParen);
                let before_rows = [
                    Keyword::VALUES,
                    Keyword::SELECT,
                    Keyword::WITH,
                    Keyword::TABLE,
                ]
                .into_iter()
                .any(|k| is_keyword(i + 3, k))
                    || matches!(tokens.get(i + 3).map(|t| &t.token), Some(Token::LParen));
                if !(after_target && is_keyword(i + 2, Keyword::VALUE) && before_rows) {
                    continue;
                }
                let offsets = LineOffsets::new(text);
                let clause = offsets.byte(text, token.span.start)
                    ..offsets.byte(text, tokens[i + 2].span.end);
                return Ok(Some((blanked(text, &[clause]), kind)));
            }
            _ => {}
        }
    }
    Ok(None)
}

/// The `INSERT` a statement is or carries (`EXPLAIN`, `PREPARE`, a `WITH`
/// before it).
fn insert_of(statement: &mut Statement) -> Option<&mut Insert> {
    match statement {
        Statement::Insert(insert) => Some(insert),
        Statement::Explain { statement, .. } | Statement::Prepare { statement, .. } => {
            insert_of(statement)
        }
        Statement::Query(query) => match query.body.as_mut() {
            SetExpr::Insert(statement) => insert_of(statement),
            _ => None,
        },
        _ => None,
    }
}

/// Records `overriding` on the `INSERT` that [`strip`] took it from.
pub(crate) fn apply(
    statements: &mut [Statement],
    overriding: Overriding,
) -> Result<(), ParseError> {
    match statements {
        [statement] => match insert_of(statement) {
            Some(insert) => {
                insert.optimizer_hints.push(OptimizerHint {
                    prefix: HINT_PREFIX.to_owned(),
                    text: overriding.to_string(),
                    style: OptimizerHintStyle::MultiLine,
                });
                Ok(())
            }
            None => Err(misplaced(overriding)),
        },
        _ => Err(misplaced(overriding)),
    }
}

fn misplaced(overriding: Overriding) -> ParseError {
    ParseError::Syntax(format!(
        "syntax error at or near \"OVERRIDING\": {overriding} belongs to an INSERT"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse::{parse, parsed_text, WeirStatement};

    fn clause_of(sql: &str) -> Option<Overriding> {
        match &parse(sql).expect("parses")[..] {
            [WeirStatement::Sql(statement)] => match statement.as_ref() {
                Statement::Insert(insert) => overriding(insert),
                other => panic!("not an INSERT: {other}"),
            },
            other => panic!("not one statement: {other:?}"),
        }
    }

    #[test]
    fn the_clause_is_read_after_the_columns_and_kept_on_the_insert() {
        assert_eq!(
            clause_of("INSERT INTO t (id, v) OVERRIDING SYSTEM VALUE VALUES (1, 'a')"),
            Some(Overriding::System)
        );
        assert_eq!(
            clause_of("insert into t overriding user value select * from u"),
            Some(Overriding::User)
        );
        assert_eq!(clause_of("INSERT INTO t VALUES (1, 'OVERRIDING')"), None);
        assert_eq!(
            clause_of("INSERT INTO overriding OVERRIDING SYSTEM VALUE VALUES (1)"),
            Some(Overriding::System),
            "a table may be named overriding"
        );
        let printed = parsed_text("INSERT INTO t (id) OVERRIDING SYSTEM VALUE VALUES (1)");
        assert_eq!(
            printed,
            "INSERT /*weir+OVERRIDING SYSTEM VALUE*/ INTO t (id) VALUES (1)"
        );
        assert_eq!(
            parsed_text(&printed),
            printed,
            "the printed form reads back"
        );
    }

    #[test]
    fn a_misplaced_clause_is_a_syntax_error() {
        assert!(matches!(
            parse("INSERT INTO t OVERRIDING SYSTEM VALUE"),
            Err(ParseError::Syntax(_))
        ));
        assert!(matches!(
            parse("SELECT 1 OVERRIDING SYSTEM VALUE"),
            Err(ParseError::Syntax(_))
        ));
        assert!(matches!(
            parse("INSERT INTO t VALUES (1) OVERRIDING SYSTEM VALUE"),
            Err(ParseError::Syntax(_))
        ));
    }
}
