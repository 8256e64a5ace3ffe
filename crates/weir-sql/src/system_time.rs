//! `FOR SYSTEM_TIME AS OF PROCTIME()` after a table in `FROM`, as Flink
//! and RisingWave write a processing-time temporal join:
//!
//! ```sql
//! SELECT b.auction, s.value
//! FROM bid b JOIN side_input FOR SYSTEM_TIME AS OF PROCTIME() AS s
//!   ON b.auction % 10000 = s.key
//! ```
//!
//! sqlparser reads the clause only in dialects with table versions, whose
//! other forms (`AT (...)`, `CHANGES (...)`, `TIMESTAMP AS OF`) would take
//! table aliases PostgreSQL allows. So [`strip`] blanks the clause out of
//! the text before PostgreSQL's dialect parses it, leaving every other
//! token where it was, and [`restore`] puts it back on the table factor
//! whose name or alias it followed (sqlparser prints it after the alias,
//! so a stored view's text reads back the same).

use std::ops::ControlFlow;

use datafusion::sql::sqlparser::ast::{
    Expr, Ident, ObjectNamePart, Statement, TableFactor, TableVersion, VisitMut, VisitorMut,
};
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::keywords::Keyword;
use datafusion::sql::sqlparser::parser::Parser;
use datafusion::sql::sqlparser::tokenizer::{Location, Token, TokenWithSpan};

use crate::parse::{blanked, tokens_if_mentioned, LineOffsets, ParseError};

/// A statement's text with its `FOR SYSTEM_TIME AS OF` clauses blanked
/// out.
#[derive(Debug)]
pub(crate) struct Stripped {
    /// The text, each clause replaced by spaces.
    pub text: String,
    /// Where the name or alias each clause followed starts.
    targets: Vec<Location>,
    /// Each clause's time: `PROCTIME()` or a column.
    times: Vec<Expr>,
}

/// Blanks `FOR SYSTEM_TIME AS OF PROCTIME()` (or `AS OF` a column,
/// Flink's form, which the planner checks is a processing time) out of
/// `text`; `None` when it has none. Any other time after `AS OF` is
/// refused (0A000): Weir's temporal joins read the table as it is when
/// each row is processed.
pub(crate) fn strip(text: &str) -> Result<Option<Stripped>, ParseError> {
    let Some(tokens) = tokens_if_mentioned(text, "system_time")? else {
        return Ok(None);
    };
    let offsets = LineOffsets::new(text);
    let mut clauses = Vec::new();
    let mut targets = Vec::new();
    let mut times = Vec::new();
    let mut i = 0;
    while i + 4 <= tokens.len() {
        let clause = [Keyword::FOR, Keyword::SYSTEM_TIME, Keyword::AS, Keyword::OF];
        let starts_clause = clause
            .iter()
            .zip(&tokens[i..])
            .all(|(k, t)| matches!(&t.token, Token::Word(w) if w.keyword == *k));
        if !starts_clause {
            i += 1;
            continue;
        }
        let Some((time, len)) = time_of(&tokens[i + 4..])? else {
            return Err(ParseError::Unsupported(
                "FOR SYSTEM_TIME AS OF takes PROCTIME() or a column holding it only: a \
                 temporal join reads the table as it is when each row is processed"
                    .into(),
            ));
        };
        targets.push(target(&tokens[..i])?);
        times.push(time);
        let end = i + 4 + len;
        clauses.push(
            offsets.byte(text, tokens[i].span.start)..offsets.byte(text, tokens[end - 1].span.end),
        );
        i = end;
    }
    if targets.is_empty() {
        return Ok(None);
    }
    Ok(Some(Stripped {
        text: blanked(text, &clauses),
        targets,
        times,
    }))
}

/// The time after `AS OF` at the start of `tokens` and how many tokens it
/// takes: `PROCTIME()`, or a column (`p_time`, `b.p_time`). What follows
/// it must end the clause (an alias, `ON`, a join, a comma, a parenthesis
/// or the end), not continue an expression.
fn time_of(tokens: &[TokenWithSpan]) -> Result<Option<(Expr, usize)>, ParseError> {
    let ends_clause = |at: usize| {
        matches!(
            tokens.get(at).map(|t| &t.token),
            None | Some(Token::Word(_) | Token::Comma | Token::RParen | Token::SemiColon)
        )
    };
    let is_proctime = matches!(
        tokens,
        [TokenWithSpan { token: Token::Word(w), .. }, l, r, ..]
            if w.quote_style.is_none()
                && w.value.eq_ignore_ascii_case("proctime")
                && l.token == Token::LParen
                && r.token == Token::RParen
    );
    if is_proctime {
        if !ends_clause(3) {
            return Ok(None);
        }
        return Ok(Some((proctime_call()?, 3)));
    }
    // A column: its first name no keyword (unless quoted), as `ON` or
    // `AS` would be; any word after a period.
    let mut idents = Vec::new();
    let mut at = 0;
    loop {
        match tokens.get(at).map(|t| &t.token) {
            Some(Token::Word(w))
                if at > 0 || w.keyword == Keyword::NoKeyword || w.quote_style.is_some() =>
            {
                idents.push(Ident {
                    value: w.value.clone(),
                    quote_style: w.quote_style,
                    span: tokens[at].span,
                });
            }
            _ => return Ok(None),
        }
        at += 1;
        if tokens.get(at).map(|t| &t.token) != Some(&Token::Period) {
            break;
        }
        at += 1;
    }
    if !ends_clause(at) {
        return Ok(None);
    }
    let column = match idents.len() {
        1 => Expr::Identifier(idents.remove(0)),
        _ => Expr::CompoundIdentifier(idents),
    };
    Ok(Some((column, at)))
}

/// Where the table name or alias before a clause starts (`before`: the
/// tokens up to the clause): the last word, or the word before an alias's
/// column list.
fn target(before: &[TokenWithSpan]) -> Result<Location, ParseError> {
    let misplaced =
        || ParseError::Syntax("FOR SYSTEM_TIME AS OF must follow a table name in FROM".into());
    let mut at = before.len().checked_sub(1).ok_or_else(misplaced)?;
    if before[at].token == Token::RParen {
        let mut depth = 0usize;
        loop {
            match before[at].token {
                Token::RParen => depth += 1,
                Token::LParen => depth -= 1,
                _ => {}
            }
            if depth == 0 {
                break;
            }
            at = at.checked_sub(1).ok_or_else(misplaced)?;
        }
        at = at.checked_sub(1).ok_or_else(misplaced)?;
    }
    match &before[at].token {
        Token::Word(_) => Ok(before[at].span.start),
        _ => Err(misplaced()),
    }
}

/// Sets `FOR SYSTEM_TIME AS OF PROCTIME()` on the table factors of
/// `statements` that [`strip`] took it from.
pub(crate) fn restore(statements: &mut [Statement], stripped: &Stripped) -> Result<(), ParseError> {
    let mut restorer = Restorer {
        targets: &stripped.targets,
        times: &stripped.times,
        found: vec![false; stripped.targets.len()],
    };
    for statement in statements.iter_mut() {
        let _ = statement.visit(&mut restorer);
    }
    if restorer.found.contains(&false) {
        return Err(ParseError::Syntax(
            "FOR SYSTEM_TIME AS OF must follow a table name in FROM".into(),
        ));
    }
    Ok(())
}

/// `PROCTIME()` as an expression.
fn proctime_call() -> Result<Expr, ParseError> {
    Parser::new(&PostgreSqlDialect {})
        .try_with_sql("PROCTIME()")
        .and_then(|mut p| p.parse_expr())
        .map_err(|e| ParseError::Syntax(e.to_string()))
}

struct Restorer<'a> {
    targets: &'a [Location],
    times: &'a [Expr],
    found: Vec<bool>,
}

impl VisitorMut for Restorer<'_> {
    type Break = ();

    fn pre_visit_table_factor(&mut self, factor: &mut TableFactor) -> ControlFlow<()> {
        let TableFactor::Table {
            name,
            alias,
            version,
            ..
        } = factor
        else {
            return ControlFlow::Continue(());
        };
        let name_at = match name.0.last() {
            Some(ObjectNamePart::Identifier(ident)) => Some(ident.span.start),
            _ => None,
        };
        let alias_at = alias.as_ref().map(|a| a.name.span.start);
        let clauses = self.targets.iter().zip(self.times).zip(&mut self.found);
        for ((target, time), found) in clauses {
            if Some(*target) == name_at || Some(*target) == alias_at {
                *version = Some(TableVersion::ForSystemTimeAsOf(time.clone()));
                *found = true;
            }
        }
        ControlFlow::Continue(())
    }
}

#[cfg(test)]
mod tests {
    use crate::parse::{parse, parsed_text, ParseError};

    #[test]
    fn the_clause_is_read_after_the_name_or_the_alias_and_printed_after_the_alias() {
        let printed = parsed_text(
            "SELECT b.a, s.v FROM bid AS b JOIN dim FOR SYSTEM_TIME AS OF PROCTIME() AS s \
             ON b.a = s.k",
        );
        assert_eq!(
            printed,
            "SELECT b.a, s.v FROM bid AS b JOIN dim AS s FOR SYSTEM_TIME AS OF PROCTIME() \
             ON b.a = s.k"
        );
        assert_eq!(
            parsed_text(&printed),
            printed,
            "the printed form reads back"
        );
        let unaliased = parsed_text(
            "SELECT * FROM bid LEFT JOIN dim\nFOR SYSTEM_TIME AS OF\nproctime() ON bid.a = dim.k",
        );
        assert_eq!(
            unaliased,
            "SELECT * FROM bid LEFT JOIN dim FOR SYSTEM_TIME AS OF PROCTIME() ON bid.a = dim.k"
        );
        let with_columns = parsed_text(
            "SELECT * FROM bid JOIN dim AS d (k, v) FOR SYSTEM_TIME AS OF PROCTIME() ON a = k",
        );
        assert!(
            with_columns.contains("dim AS d (k, v) FOR SYSTEM_TIME AS OF PROCTIME()"),
            "{with_columns}"
        );
        assert_eq!(
            parsed_text("SELECT 'FOR SYSTEM_TIME AS OF x' FROM t"),
            "SELECT 'FOR SYSTEM_TIME AS OF x' FROM t",
            "a string is not a clause"
        );
    }

    #[test]
    fn flinks_column_form_is_read_too() {
        let printed = parsed_text(
            "SELECT * FROM (SELECT *, PROCTIME() AS p_time FROM bid) b \
             JOIN side FOR SYSTEM_TIME AS OF b.p_time AS s ON b.a = s.k",
        );
        assert!(
            printed.contains("JOIN side AS s FOR SYSTEM_TIME AS OF b.p_time ON"),
            "{printed}"
        );
        assert_eq!(parsed_text(&printed), printed);
    }

    #[test]
    fn other_times_and_places_are_refused() {
        assert!(matches!(
            parse("SELECT * FROM a JOIN b FOR SYSTEM_TIME AS OF a.ts + 1 ON a.k = b.k"),
            Err(ParseError::Unsupported(_))
        ));
        assert!(matches!(
            parse("SELECT * FROM a JOIN b FOR SYSTEM_TIME AS OF now() ON a.k = b.k"),
            Err(ParseError::Unsupported(_))
        ));
        assert!(matches!(
            parse("SELECT * FROM a JOIN b FOR SYSTEM_TIME AS OF PROCTIME() - INTERVAL '1' HOUR ON a.k = b.k"),
            Err(ParseError::Unsupported(_))
        ));
        assert!(matches!(
            parse("SELECT 1 FOR SYSTEM_TIME AS OF PROCTIME()"),
            Err(ParseError::Syntax(_))
        ));
        assert!(matches!(
            parse("SELECT * FROM (SELECT 1) FOR SYSTEM_TIME AS OF PROCTIME()"),
            Err(ParseError::Syntax(_))
        ));
    }
}
