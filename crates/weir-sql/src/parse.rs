//! SQL parsing, including Weir's own statements.

use std::sync::LazyLock;

use datafusion::sql::sqlparser::ast::Statement;
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::parser::Parser;
use datafusion::sql::sqlparser::tokenizer::{Location, Token, TokenWithSpan, Tokenizer};
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
    /// `CHECKPOINT`: commit an epoch now, even without changes.
    Checkpoint,
    /// Any statement sqlparser understands.
    Sql(Box<Statement>),
}

/// The compatibility parser is stateless once built, and building it
/// tokenizes its whole rewrite table, so one instance serves every session.
static COMPAT: LazyLock<PostgresCompatibilityParser> =
    LazyLock::new(PostgresCompatibilityParser::new);

/// Parses SQL text into statements with PostgreSQL's dialect.
///
/// The text is split at top-level semicolons first, so that Weir's own
/// statements (`FLUSH`, `CHECKPOINT`) can stand beside standard ones. A statement that
/// reads the system catalogs (`pg_*`, `information_schema`, `regclass`
/// casts, `current_user` ...) goes through datafusion-pg-catalog's
/// compatibility parser, which rewrites the queries psql and drivers send
/// into forms DataFusion can plan. Other statements are parsed as written:
/// some of those rewrites (subqueries in the select list) change what
/// ordinary queries mean.
pub fn parse(sql: &str) -> Result<Vec<WeirStatement>, ParseError> {
    let tokens = Tokenizer::new(&PostgreSqlDialect {}, sql)
        .tokenize_with_location()
        .map_err(|e| ParseError(e.to_string()))?;
    let offsets = LineOffsets::new(sql);
    let mut statements = Vec::new();
    let mut start = 0;
    let mut segment: Vec<&TokenWithSpan> = Vec::new();
    for token in tokens
        .iter()
        .chain(std::iter::once(&TokenWithSpan::wrap(Token::EOF)))
    {
        let end = match token.token {
            Token::SemiColon => offsets.byte(sql, token.span.start),
            Token::EOF => sql.len(),
            _ => {
                segment.push(token);
                continue;
            }
        };
        parse_segment(&sql[start..end], &segment, &mut statements)?;
        segment.clear();
        start = (end + 1).min(sql.len());
    }
    Ok(statements)
}

fn parse_segment(
    text: &str,
    tokens: &[&TokenWithSpan],
    out: &mut Vec<WeirStatement>,
) -> Result<(), ParseError> {
    let words: Vec<&Token> = tokens
        .iter()
        .map(|t| &t.token)
        .filter(|t| !matches!(t, Token::Whitespace(_)))
        .collect();
    match words.as_slice() {
        [] => Ok(()),
        [Token::Word(w)] if w.value.eq_ignore_ascii_case("flush") => {
            out.push(WeirStatement::Flush);
            Ok(())
        }
        [Token::Word(w)] if w.value.eq_ignore_ascii_case("checkpoint") => {
            out.push(WeirStatement::Checkpoint);
            Ok(())
        }
        _ => {
            let parsed = if words.iter().any(|t| reads_catalog(t)) {
                COMPAT.parse(text)
            } else {
                Parser::parse_sql(&PostgreSqlDialect {}, text)
            }
            .map_err(|e| {
                let message = e.to_string();
                let message = message
                    .strip_prefix("sql parser error: ")
                    .unwrap_or(&message)
                    .to_owned();
                ParseError(message)
            })?;
            out.extend(parsed.into_iter().map(|s| WeirStatement::Sql(Box::new(s))));
            Ok(())
        }
    }
}

/// Whether a token names something only catalog queries use.
fn reads_catalog(token: &Token) -> bool {
    let Token::Word(word) = token else {
        return false;
    };
    if word.quote_style.is_some() {
        return false;
    }
    let w = word.value.to_ascii_lowercase();
    w.starts_with("pg_")
        || w.starts_with("reg")
            && matches!(
                w.as_str(),
                "regclass"
                    | "regtype"
                    | "regproc"
                    | "regprocedure"
                    | "regnamespace"
                    | "regoper"
                    | "regrole"
            )
        || matches!(
            w.as_str(),
            "information_schema"
                | "current_user"
                | "session_user"
                | "current_schema"
                | "current_schemas"
        )
        || w.starts_with("has_") && w.ends_with("_privilege")
}

/// Byte offsets of line starts, to turn token locations into slices.
struct LineOffsets(Vec<usize>);

impl LineOffsets {
    fn new(sql: &str) -> Self {
        let mut starts = vec![0];
        starts.extend(sql.match_indices('\n').map(|(i, _)| i + 1));
        LineOffsets(starts)
    }

    /// The byte offset of a 1-based (line, column-in-characters) location.
    fn byte(&self, sql: &str, location: Location) -> usize {
        let line_start = self.0[(location.line as usize)
            .saturating_sub(1)
            .min(self.0.len() - 1)];
        sql[line_start..]
            .char_indices()
            .nth((location.column as usize).saturating_sub(1))
            .map_or(sql.len(), |(i, _)| line_start + i)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sql_of(statement: &WeirStatement) -> String {
        match statement {
            WeirStatement::Sql(s) => s.to_string(),
            WeirStatement::Flush => "FLUSH".into(),
            WeirStatement::Checkpoint => "CHECKPOINT".into(),
        }
    }

    #[test]
    fn splits_weir_and_standard_statements() {
        let parsed = parse("INSERT INTO t VALUES (';'); flush ; SELECT 1;").unwrap();
        assert_eq!(parsed.len(), 3);
        assert_eq!(parsed[1], WeirStatement::Flush);
        assert!(sql_of(&parsed[0]).contains("';'"));
    }

    #[test]
    fn quotes_and_escapes_survive_splitting() {
        let parsed = parse(
            "SELECT 'it''s';\nSELECT E'C:\\\\temp', 'é;x'; CREATE TABLE \"we\"\"ird\" (a INT)",
        )
        .unwrap();
        assert_eq!(parsed.len(), 3);
        assert_eq!(sql_of(&parsed[0]), "SELECT 'it''s'");
        assert!(
            sql_of(&parsed[1]).contains("'é;x'"),
            "{}",
            sql_of(&parsed[1])
        );
        assert!(
            sql_of(&parsed[2]).contains("\"we\"\"ird\""),
            "{}",
            sql_of(&parsed[2])
        );
    }

    #[test]
    fn only_catalog_queries_are_rewritten() {
        assert!(reads_catalog(&Token::make_word("pg_class", None)));
        assert!(!reads_catalog(&Token::make_word("orders", None)));
        let parsed = parse("SELECT (SELECT count(*) FROM b WHERE b.x = a.x) FROM a").unwrap();
        assert!(
            sql_of(&parsed[0]).contains("count(*)"),
            "{}",
            sql_of(&parsed[0])
        );
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
