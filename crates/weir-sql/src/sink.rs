//! `CREATE SINK` and `DROP SINK`, which sqlparser does not read:
//!
//! - `CREATE SINK [IF NOT EXISTS] name AS query WITH (connector = '...',
//!   ...)` and `CREATE SINK name FROM relation WITH (...)` (RisingWave's
//!   spellings), either with `FORMAT PLAIN | UPSERT ENCODE ...` after the
//!   options (`format_clause.rs`), become the `CREATE MATERIALIZED VIEW`
//!   they run as (`FROM rel` as `AS SELECT * FROM rel`) and the options;
//! - `DROP SINK [IF EXISTS] names [CASCADE]` becomes a `DROP MATERIALIZED
//!   VIEW` of the names.

use datafusion::sql::sqlparser::ast::Statement;
use datafusion::sql::sqlparser::tokenizer::{Token, TokenWithSpan};

use crate::format_clause::Role;
use crate::parse::{parse_one, parse_rewritten, with_options, ParseError};

/// `CREATE SINK ...` (`tokens` start with `CREATE SINK`): the view it
/// runs as and its options.
pub(crate) fn parse_create_sink(
    tokens: &[&TokenWithSpan],
) -> Result<(Statement, Vec<(String, String)>), ParseError> {
    let mut depth = 0i32;
    let mut with = None;
    for (i, token) in tokens.iter().enumerate() {
        match &token.token {
            Token::LParen => depth += 1,
            Token::RParen => depth -= 1,
            Token::Word(w) if depth == 0 && w.value.eq_ignore_ascii_case("with") => with = Some(i),
            _ => {}
        }
    }
    // The last top-level WITH: a query may start with its own.
    let Some(with) = with else {
        return Err(ParseError::Syntax(
            "CREATE SINK needs WITH (connector = '...')".into(),
        ));
    };
    let options = with_options(&tokens[with + 1..], Role::Sink)?;
    let mut text = String::new();
    let mut words_seen = 0;
    let mut body_started = false;
    for token in &tokens[..with] {
        if let Token::Word(w) = &token.token {
            words_seen += 1;
            // `CREATE SINK`: the second word.
            if words_seen == 2 {
                text.push_str("MATERIALIZED VIEW");
                continue;
            }
            if !body_started && w.quote_style.is_none() {
                if w.value.eq_ignore_ascii_case("from") {
                    body_started = true;
                    text.push_str("AS SELECT * FROM");
                    continue;
                }
                body_started = w.value.eq_ignore_ascii_case("as");
            }
        }
        text.push_str(&token.token.to_string());
    }
    // Rewritten as any statement is (windows, PostgreSQL forms).
    let statement = parse_rewritten(&text)?;
    match &statement {
        Statement::CreateView(view) if view.materialized => Ok((statement, options)),
        _ => Err(ParseError::Syntax(
            "expected CREATE SINK name AS query WITH (...) or CREATE SINK name FROM relation WITH (...)"
                .into(),
        )),
    }
}

/// `DROP SINK ...` (`tokens` start with `DROP SINK`), as a `DROP
/// MATERIALIZED VIEW`.
pub(crate) fn parse_drop_sink(tokens: &[&TokenWithSpan]) -> Result<Statement, ParseError> {
    let mut text = String::new();
    let mut words_seen = 0;
    for token in tokens {
        if matches!(token.token, Token::Word(_)) {
            words_seen += 1;
            if words_seen == 2 {
                text.push_str("MATERIALIZED VIEW");
                continue;
            }
        }
        text.push_str(&token.token.to_string());
    }
    parse_one(&text)
}
