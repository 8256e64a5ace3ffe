//! Weir's event-time clauses, which sqlparser does not read:
//! `WATERMARK FOR col AS expr` among the columns of `CREATE SOURCE` and
//! `CREATE TABLE`, `APPEND ONLY` after a `CREATE TABLE`'s columns, and
//! `EMIT ON WINDOW CLOSE` at the end of `CREATE MATERIALIZED VIEW`
//! (RisingWave's spellings). They are taken out of the statement's
//! tokens here, and the rest is parsed as standard SQL.

use datafusion::sql::sqlparser::ast::Expr;
use datafusion::sql::sqlparser::tokenizer::{Token, TokenWithSpan};

use crate::ParseError;

/// `WATERMARK FOR column AS expr`.
#[derive(Debug, Clone, PartialEq)]
pub struct WatermarkClause {
    /// The event-time column.
    pub column: String,
    /// The watermark: the column, or the column minus an interval.
    pub expr: Expr,
}

/// What [`strip`] took out of a statement.
#[derive(Debug, Default)]
pub(crate) struct Clauses {
    /// The statement's text without them.
    pub text: String,
    pub watermark: Option<WatermarkClause>,
    pub append_only: bool,
    pub emit_on_window_close: bool,
}

impl Clauses {
    /// Whether any clause was found.
    pub fn any(&self) -> bool {
        self.watermark.is_some() || self.append_only || self.emit_on_window_close
    }
}

/// An identifier as the catalog names it: unquoted ones in lower case.
fn normalize(word: &datafusion::sql::sqlparser::tokenizer::Word) -> String {
    match word.quote_style {
        Some(_) => word.value.clone(),
        None => word.value.to_lowercase(),
    }
}

fn is_word(token: &Token, word: &str) -> bool {
    matches!(token, Token::Word(w) if w.quote_style.is_none() && w.value.eq_ignore_ascii_case(word))
}

/// Takes the event-time clauses out of a statement's tokens.
pub(crate) fn strip(tokens: &[&TokenWithSpan]) -> Result<Clauses, ParseError> {
    let syntax = |what: &str| ParseError::Syntax(format!("syntax error in {what}"));
    let mut clauses = Clauses::default();
    // The kept tokens; whitespace is kept as it comes.
    let mut kept: Vec<&Token> = Vec::with_capacity(tokens.len());
    let mut depth = 0i32;
    let mut i = 0;
    // The next token that is not whitespace, from `at`.
    let next_word =
        |at: usize| (at..tokens.len()).find(|&j| !matches!(tokens[j].token, Token::Whitespace(_)));
    while i < tokens.len() {
        let token = &tokens[i].token;
        match token {
            Token::LParen => depth += 1,
            Token::RParen => depth -= 1,
            _ => {}
        }
        if depth == 1 && is_word(token, "watermark") {
            let after =
                |at: usize, word: &str| next_word(at).filter(|&j| is_word(&tokens[j].token, word));
            let for_at = after(i + 1, "for").ok_or_else(|| syntax("WATERMARK FOR"))?;
            let column_at = next_word(for_at + 1).ok_or_else(|| syntax("WATERMARK FOR"))?;
            let Token::Word(column) = &tokens[column_at].token else {
                return Err(syntax("WATERMARK FOR: expected a column name"));
            };
            let as_at = after(column_at + 1, "as").ok_or_else(|| syntax("WATERMARK FOR ... AS"))?;
            // The expression runs to the list's next comma or its end.
            let mut end = as_at + 1;
            let mut nested = 0i32;
            while end < tokens.len() {
                match tokens[end].token {
                    Token::LParen => nested += 1,
                    Token::RParen if nested == 0 => break,
                    Token::RParen => nested -= 1,
                    Token::Comma if nested == 0 => break,
                    _ => {}
                }
                end += 1;
            }
            let text: String = tokens[as_at + 1..end]
                .iter()
                .map(|t| t.token.to_string())
                .collect();
            let expr = crate::parse::parse_expr(&text)
                .ok_or_else(|| syntax(&format!("WATERMARK FOR {} AS {text}", column.value)))?;
            if clauses.watermark.is_some() {
                return Err(syntax("WATERMARK FOR: only one watermark is allowed"));
            }
            clauses.watermark = Some(WatermarkClause {
                column: normalize(column),
                expr,
            });
            // The comma before it goes too (or the one after, if it came
            // first).
            while kept
                .last()
                .is_some_and(|t| matches!(t, Token::Whitespace(_)))
            {
                kept.pop();
            }
            if kept.last() == Some(&&Token::Comma) {
                kept.pop();
            } else if end < tokens.len() && tokens[end].token == Token::Comma {
                end += 1;
            }
            i = end;
            continue;
        }
        if depth == 0 && is_word(token, "append") {
            if let Some(only) = next_word(i + 1).filter(|&j| is_word(&tokens[j].token, "only")) {
                clauses.append_only = true;
                i = only + 1;
                continue;
            }
        }
        if depth == 0 && is_word(token, "emit") {
            let rest = crate::parse::words(&tokens[i..]);
            let words = ["emit", "on", "window", "close"];
            if rest.len() == words.len() && rest.iter().zip(words).all(|(t, w)| is_word(t, w)) {
                clauses.emit_on_window_close = true;
                break;
            }
        }
        kept.push(token);
        i += 1;
    }
    clauses.text = kept.iter().map(|t| t.to_string()).collect();
    Ok(clauses)
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
    use datafusion::sql::sqlparser::tokenizer::Tokenizer;

    fn stripped(sql: &str) -> Clauses {
        let tokens = Tokenizer::new(&PostgreSqlDialect {}, sql)
            .tokenize_with_location()
            .unwrap();
        let refs: Vec<&TokenWithSpan> = tokens.iter().collect();
        strip(&refs).unwrap()
    }

    #[test]
    fn clauses_come_out_and_the_rest_stays() {
        let c = stripped(
            "CREATE TABLE t (k int, ts timestamp, WATERMARK FOR ts AS ts - INTERVAL '5' SECOND) APPEND ONLY",
        );
        assert_eq!(c.text.trim(), "CREATE TABLE t (k int, ts timestamp)");
        let w = c.watermark.unwrap();
        assert_eq!(w.column, "ts");
        assert_eq!(w.expr.to_string(), "ts - INTERVAL '5' SECOND");
        assert!(c.append_only);

        let c = stripped("CREATE TABLE t (WATERMARK FOR \"Ts\" AS \"Ts\", \"Ts\" timestamp)");
        assert_eq!(c.text, "CREATE TABLE t ( \"Ts\" timestamp)");
        assert_eq!(c.watermark.unwrap().column, "Ts");

        let c = stripped("CREATE MATERIALIZED VIEW v AS SELECT 1 EMIT ON WINDOW CLOSE");
        assert!(c.emit_on_window_close);
        assert_eq!(c.text.trim(), "CREATE MATERIALIZED VIEW v AS SELECT 1");

        let c = stripped("SELECT emit, append FROM t");
        assert!(!c.any());
    }
}
