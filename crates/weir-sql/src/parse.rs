//! SQL parsing, including Weir's own statements.

use std::sync::LazyLock;

use datafusion::sql::sqlparser::ast::Statement;
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::tokenizer::{Token, Tokenizer};
use datafusion_pg_catalog::sql::PostgresCompatibilityParser;

/// A statement that does not parse (SQLSTATE 42601).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ParseError(pub String);

/// One parsed statement.
#[derive(Debug, Clone, PartialEq)]
pub enum WeirStatement {
    /// `FLUSH`: wait until every change made so far is committed.
    Flush,
    /// Any statement sqlparser understands.
    Sql(Box<Statement>),
}

/// The parser is stateless once built, and building it tokenizes its whole
/// rewrite table, so one instance serves every session.
static PARSER: LazyLock<PostgresCompatibilityParser> =
    LazyLock::new(PostgresCompatibilityParser::new);

/// Parses SQL text into statements with PostgreSQL's dialect.
///
/// Statements are split at top-level semicolons first so that Weir's own
/// statements (`FLUSH`) can stand beside standard ones. The standard ones go
/// through datafusion-pg-catalog's parser, which also rewrites the catalog
/// queries that psql and drivers send (`pg_catalog` operators, `regclass`
/// casts, ...) into forms DataFusion can plan.
pub fn parse(sql: &str) -> Result<Vec<WeirStatement>, ParseError> {
    let tokens = Tokenizer::new(&PostgreSqlDialect {}, sql)
        .tokenize()
        .map_err(|e| ParseError(e.to_string()))?;
    let mut statements = Vec::new();
    for segment in tokens.split(|t| matches!(t, Token::SemiColon)) {
        let words: Vec<&Token> = segment
            .iter()
            .filter(|t| !matches!(t, Token::Whitespace(_)))
            .collect();
        match words.as_slice() {
            [] => {}
            [Token::Word(w)] if w.value.eq_ignore_ascii_case("flush") => {
                statements.push(WeirStatement::Flush)
            }
            _ => {
                let text: String = segment.iter().map(ToString::to_string).collect();
                let parsed = PARSER.parse(&text).map_err(|e| {
                    let message = e.to_string();
                    let message = message
                        .strip_prefix("sql parser error: ")
                        .unwrap_or(&message)
                        .to_owned();
                    ParseError(message)
                })?;
                statements.extend(parsed.into_iter().map(|s| WeirStatement::Sql(Box::new(s))));
            }
        }
    }
    Ok(statements)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_weir_and_standard_statements() {
        let parsed = parse("INSERT INTO t VALUES (';'); flush ; SELECT 1;").unwrap();
        assert_eq!(parsed.len(), 3);
        assert_eq!(parsed[1], WeirStatement::Flush);
        assert!(matches!(&parsed[0], WeirStatement::Sql(s) if s.to_string().contains("';'")));
    }

    #[test]
    fn syntax_errors_are_reported() {
        let err = parse("SELEC 1").unwrap_err();
        assert!(err.0.contains("SELEC"), "{err}");
    }

    #[test]
    fn empty_input_has_no_statements() {
        assert!(parse(" ; ;").unwrap().is_empty());
    }
}
