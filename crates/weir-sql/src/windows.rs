//! Time windows as table functions, rewritten into queries DataFusion
//! plans:
//!
//! - `TUMBLE(rel, col, size [, offset])`: each row of `rel` with the
//!   window of `size` that holds its `col`, windows starting at
//!   `1970-01-01 + offset + k * size`: `rel`'s columns and `window_start`
//!   and `window_end` (`date_bin(size, col, origin)` and that plus
//!   `size`);
//! - `HOP(rel, col, slide, size [, offset])`: each row once for every
//!   window of `size` starting every `slide` that holds its `col`
//!   (`unnest(hop_window_starts(col, slide, size, origin))`);
//! - Flink's spelling, `TABLE(TUMBLE(TABLE rel, DESCRIPTOR(col), size))`
//!   and `TABLE(HOP(TABLE rel, DESCRIPTOR(col), slide, size))`
//!   ([`flink_window_text`]), which sqlparser does not parse, as the first.
//!
//! A window function's relation keeps `rel`'s name unless aliased, so
//! `bid.price` still names a column.

use datafusion::sql::sqlparser::ast::{
    Expr, FunctionArg, FunctionArgExpr, Query, TableAlias, TableFactor, TableFunctionArgs,
};
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::parser::Parser;
use datafusion::sql::sqlparser::tokenizer::{Token, TokenWithSpan};

/// Which window function a table factor calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Window {
    Tumble,
    Hop,
}

/// The window origin: the Unix epoch, moved by the offset if one is given.
fn origin(offset: Option<&Expr>) -> String {
    let epoch = "CAST('1970-01-01 00:00:00' AS TIMESTAMP)";
    match offset {
        Some(offset) => format!("({epoch} + {offset})"),
        None => epoch.to_owned(),
    }
}

/// Rewrites `FROM TUMBLE(...)` and `FROM HOP(...)` in place into the
/// derived tables they stand for; leaves anything else (and calls with
/// the wrong number of arguments, for the planner to refuse) alone.
pub fn rewrite_window_factor(factor: &mut TableFactor) {
    let TableFactor::Table {
        name,
        args: Some(TableFunctionArgs { args, .. }),
        alias,
        ..
    } = factor
    else {
        return;
    };
    let window = match name.to_string().to_ascii_lowercase().as_str() {
        "tumble" => Window::Tumble,
        "hop" => Window::Hop,
        _ => return,
    };
    let exprs: Option<Vec<&Expr>> = args
        .iter()
        .map(|arg| match arg {
            FunctionArg::Unnamed(FunctionArgExpr::Expr(e)) => Some(e),
            _ => None,
        })
        .collect();
    let Some(exprs) = exprs else {
        return;
    };
    let (relation, column) = match exprs.as_slice() {
        [Expr::Identifier(_) | Expr::CompoundIdentifier(_), Expr::Identifier(column), ..] => {
            (exprs[0].to_string(), column.to_string())
        }
        _ => return,
    };
    let sql = match (window, &exprs[2..]) {
        (Window::Tumble, [size, offset @ ..]) if offset.len() <= 1 => {
            let origin = origin(offset.first().copied());
            format!(
                "SELECT *, date_bin({size}, {column}, {origin}) AS window_start, \
                 date_bin({size}, {column}, {origin}) + {size} AS window_end FROM {relation}"
            )
        }
        (Window::Hop, [slide, size, offset @ ..]) if offset.len() <= 1 => {
            let origin = origin(offset.first().copied());
            format!(
                "SELECT *, window_start + {size} AS window_end FROM (SELECT *, \
                 unnest(hop_window_starts({column}, {slide}, {size}, {origin})) AS window_start \
                 FROM {relation}) AS hop_rows"
            )
        }
        _ => return,
    };
    let Ok(subquery) = parse_query(&sql) else {
        return;
    };
    let alias = alias.take().unwrap_or_else(|| {
        // The relation's own name (its last part), as the table it wraps.
        let last = relation.rsplit('.').next().unwrap_or(&relation);
        TableAlias {
            explicit: true,
            name: datafusion::sql::sqlparser::ast::Ident::new(last.trim_matches('"')),
            columns: Vec::new(),
            at: None,
        }
    });
    *factor = TableFactor::Derived {
        lateral: false,
        subquery: Box::new(subquery),
        alias: Some(alias),
        sample: None,
    };
}

fn parse_query(sql: &str) -> Result<Query, datafusion::sql::sqlparser::parser::ParserError> {
    Parser::new(&PostgreSqlDialect {})
        .try_with_sql(sql)?
        .parse_query()
        .map(|query| *query)
}

/// The text of a statement whose tokens call a window function in Flink's
/// spelling, `TABLE(TUMBLE(TABLE rel, DESCRIPTOR(col), ...))`, with each
/// such call spelled `TUMBLE(rel, col, ...)`; `None` if there is none.
pub fn flink_window_text(tokens: &[&TokenWithSpan]) -> Option<String> {
    let words: Vec<&Token> = tokens.iter().map(|t| &t.token).collect();
    let significant: Vec<usize> = (0..words.len())
        .filter(|&i| !matches!(words[i], Token::Whitespace(_)))
        .collect();
    let is_word = |i: usize, word: &str| matches!(words[i], Token::Word(w) if w.quote_style.is_none() && w.value.eq_ignore_ascii_case(word));
    let is_window = |i: usize| {
        ["tumble", "hop", "cumulate", "session"]
            .iter()
            .any(|w| is_word(i, w))
    };
    // Token indexes to drop, and the closing parentheses to drop with them.
    let mut dropped = vec![false; words.len()];
    let mut found = false;
    for (k, &i) in significant.iter().enumerate() {
        let next = |n: usize| significant.get(k + n).copied();
        // TABLE ( window ( TABLE rel
        let (Some(open), Some(function), Some(call), Some(table)) =
            (next(1), next(2), next(3), next(4))
        else {
            continue;
        };
        if !(is_word(i, "table")
            && words[open] == &Token::LParen
            && is_window(function)
            && words[call] == &Token::LParen
            && is_word(table, "table"))
        {
            continue;
        }
        found = true;
        dropped[i] = true;
        dropped[open] = true;
        dropped[table] = true;
        // The parenthesis that closes `TABLE(`, and `DESCRIPTOR(col)`
        // within the call, become nothing and `col`.
        let mut depth = 0;
        for (m, &j) in significant.iter().enumerate().skip(k + 1) {
            match words[j] {
                Token::LParen => depth += 1,
                Token::RParen => {
                    depth -= 1;
                    if depth == 0 {
                        dropped[j] = true;
                        break;
                    }
                }
                _ if depth == 2 && is_word(j, "descriptor") => {
                    let (Some(&open), Some(&close)) =
                        (significant.get(m + 1), significant.get(m + 3))
                    else {
                        continue;
                    };
                    if words[open] == &Token::LParen && words[close] == &Token::RParen {
                        dropped[j] = true;
                        dropped[open] = true;
                        dropped[close] = true;
                    }
                }
                _ => {}
            }
        }
    }
    found.then(|| {
        words
            .iter()
            .zip(&dropped)
            .filter(|(_, &drop)| !drop)
            .map(|(token, _)| token.to_string())
            .collect()
    })
}

#[cfg(test)]
mod tests {
    use datafusion::sql::sqlparser::tokenizer::Tokenizer;

    use super::*;

    fn rewritten(sql: &str) -> String {
        let mut statements = Parser::parse_sql(&PostgreSqlDialect {}, sql).expect("parses");
        crate::pg_forms::rewrite(&mut statements[0]);
        statements[0].to_string()
    }

    #[test]
    fn tumble_and_hop_become_derived_tables_named_after_their_relation() {
        let sql = rewritten(
            "SELECT window_start, count(*) FROM TUMBLE(bid, date_time, INTERVAL '10' SECOND) GROUP BY window_start",
        );
        assert!(sql.contains("date_bin(INTERVAL '10' SECOND, date_time, CAST('1970-01-01 00:00:00' AS TIMESTAMP)) AS window_start"), "{sql}");
        assert!(sql.contains("FROM bid) AS bid"), "{sql}");
        let sql = rewritten(
            "SELECT * FROM HOP(s.bid, date_time, INTERVAL '2' SECOND, INTERVAL '10' SECOND, INTERVAL '1' SECOND) AS h",
        );
        assert!(sql.contains("unnest(hop_window_starts(date_time, INTERVAL '2' SECOND, INTERVAL '10' SECOND, (CAST('1970-01-01 00:00:00' AS TIMESTAMP) + INTERVAL '1' SECOND)))"), "{sql}");
        assert!(sql.ends_with("AS h"), "{sql}");
        // Not a window call: left alone.
        let plain = "SELECT * FROM tumbling(bid, date_time, 3)";
        assert_eq!(rewritten(plain), plain);
        let wrong = "SELECT * FROM TUMBLE(bid, date_time)";
        assert_eq!(rewritten(wrong), wrong);
    }

    #[test]
    fn flink_spelling_becomes_the_plain_call() {
        let sql = "SELECT * FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(date_time), INTERVAL '10' SECOND)) t WHERE x IN (SELECT 1)";
        let tokens = Tokenizer::new(&PostgreSqlDialect {}, sql)
            .tokenize_with_location()
            .expect("tokens");
        let tokens: Vec<&TokenWithSpan> = tokens.iter().collect();
        assert_eq!(
            flink_window_text(&tokens).as_deref(),
            Some("SELECT * FROM TUMBLE( bid, date_time, INTERVAL '10' SECOND) t WHERE x IN (SELECT 1)")
        );
        let plain = Tokenizer::new(&PostgreSqlDialect {}, "SELECT * FROM TABLE(x)")
            .tokenize_with_location()
            .expect("tokens");
        assert_eq!(flink_window_text(&plain.iter().collect::<Vec<_>>()), None);
    }
}
