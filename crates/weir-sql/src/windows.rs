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
//! - `SESSION(rel, col, gap [, key ...])`: each row of `rel` with the
//!   session window of its partition (the rows with its `key` values)
//!   that holds it: consecutive times less than `gap` apart are one
//!   session, from its first time to its last plus `gap`
//!   (`session_start(col, gap)` and `session_end(col, gap)` over the
//!   partition; see `weir_stream::session`);
//! - Flink's spelling, `TABLE(TUMBLE(TABLE rel, DESCRIPTOR(col), size))`
//!   `TABLE(HOP(TABLE rel, DESCRIPTOR(col), slide, size))` and
//!   `TABLE(SESSION(TABLE rel PARTITION BY key, DESCRIPTOR(col), gap))`
//!   ([`flink_window_text`]), which sqlparser does not parse, as the
//!   others.
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
    Session,
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
        "session" => Window::Session,
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
        (Window::Session, [gap, keys @ ..]) => {
            let keys: Vec<String> = keys.iter().map(|k| k.to_string()).collect();
            let partition = if keys.is_empty() {
                String::new()
            } else {
                format!("PARTITION BY {} ", keys.join(", "))
            };
            let over = format!("OVER ({partition}ORDER BY {column})");
            format!(
                "SELECT *, session_start({column}, {gap}) {over} AS window_start, \
                 session_end({column}, {gap}) {over} AS window_end FROM {relation}"
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
    // Text put before a token: a session's `PARTITION BY` keys, moved to
    // the end of its call.
    let mut inserted: Vec<Option<String>> = vec![None; words.len()];
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
        // within the call, become nothing and `col`; `PARTITION BY keys`
        // after the relation moves to the end of the call.
        let mut depth = 0;
        // The key tokens, while reading them; then the keys read.
        let mut reading: Option<Vec<usize>> = None;
        let mut keys: Vec<usize> = Vec::new();
        for (m, &j) in significant.iter().enumerate().skip(k + 1) {
            match words[j] {
                Token::LParen => depth += 1,
                Token::RParen => {
                    depth -= 1;
                    if depth == 1 && !keys.is_empty() {
                        inserted[j] = Some(format!(", {}", key_list(&words, &keys)));
                    }
                    if depth == 0 {
                        dropped[j] = true;
                        break;
                    }
                }
                Token::Comma if depth == 2 && reading.is_some() => {
                    keys = reading.take().unwrap_or_default();
                    continue;
                }
                _ if depth == 2
                    && reading.is_none()
                    && is_word(j, "partition")
                    && significant.get(m + 1).is_some_and(|&by| is_word(by, "by")) =>
                {
                    dropped[j] = true;
                    dropped[significant[m + 1]] = true;
                    reading = Some(Vec::new());
                    continue;
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
            if let Some(read) = reading.as_mut() {
                if !dropped[j] {
                    read.push(j);
                    dropped[j] = true;
                }
            }
        }
    }
    found.then(|| {
        words
            .iter()
            .zip(&dropped)
            .zip(&inserted)
            .flat_map(|((token, &drop), before)| {
                let token = (!drop).then(|| token.to_string());
                before.clone().into_iter().chain(token)
            })
            .collect()
    })
}

/// The keys of `PARTITION BY` (tokens `keys`), without the parentheses
/// around a list of them.
fn key_list(words: &[&Token], keys: &[usize]) -> String {
    let parenthesized = keys.len() >= 2
        && words[keys[0]] == &Token::LParen
        && words[keys[keys.len() - 1]] == &Token::RParen;
    let keys = if parenthesized {
        &keys[1..keys.len() - 1]
    } else {
        keys
    };
    keys.iter()
        .map(|&t| words[t].to_string())
        .collect::<Vec<_>>()
        .join(" ")
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
        let sql = rewritten(
            "SELECT * FROM SESSION(bid, date_time, INTERVAL '10' SECOND, bidder, auction)",
        );
        assert!(sql.contains("session_end(date_time, INTERVAL '10' SECOND) OVER (PARTITION BY bidder, auction ORDER BY date_time) AS window_end"), "{sql}");
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
        let sql = "SELECT * FROM TABLE(SESSION(TABLE bid PARTITION BY (bidder, auction), DESCRIPTOR(date_time), INTERVAL '10' SECOND))";
        let tokens = Tokenizer::new(&PostgreSqlDialect {}, sql)
            .tokenize_with_location()
            .expect("tokens");
        let tokens: Vec<&TokenWithSpan> = tokens.iter().collect();
        let text = flink_window_text(&tokens).expect("a window call");
        assert_eq!(
            text.split_whitespace().collect::<Vec<_>>().join(" "),
            "SELECT * FROM SESSION( bid , date_time, INTERVAL '10' SECOND, bidder , auction)"
        );
        let plain = Tokenizer::new(&PostgreSqlDialect {}, "SELECT * FROM TABLE(x)")
            .tokenize_with_location()
            .expect("tokens");
        assert_eq!(flink_window_text(&plain.iter().collect::<Vec<_>>()), None);
    }
}
