//! SQL parsing, including Weir's own statements.

use std::sync::LazyLock;

use datafusion::sql::sqlparser::ast::{Expr, Statement};
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::keywords::Keyword;
use datafusion::sql::sqlparser::parser::{Parser, ParserError};
use datafusion::sql::sqlparser::tokenizer::{Location, Token, TokenWithSpan, Tokenizer};
use datafusion_pg_catalog::sql::PostgresCompatibilityParser;

use crate::event_time::WatermarkClause;
use crate::format_clause::{self, Role};
use crate::subscribe::{Form, Subscribe};

/// A statement that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// Not SQL Weir reads (SQLSTATE 42601).
    #[error("{0}")]
    Syntax(String),
    /// A string literal whose escapes spell bytes that are not UTF-8
    /// (SQLSTATE 22021).
    #[error("{0}")]
    InvalidEncoding(String),
    /// Expressions nested too deeply to plan (SQLSTATE 54001).
    #[error("{0}")]
    TooComplex(String),
    /// A form Weir reads but does not support (SQLSTATE 0A000).
    #[error("{0}")]
    Unsupported(String),
}

/// One parsed statement.
#[derive(Debug, Clone, PartialEq)]
pub enum WeirStatement {
    /// `FLUSH`: wait until every change made so far is committed.
    Flush,
    /// `CHECKPOINT`: commit an epoch now, even without changes.
    Checkpoint,
    /// `CREATE SOURCE name (columns) WITH (key = 'value', ...)`: the
    /// statement as a `CREATE TABLE` (name and columns), the options,
    /// whose keys may be dotted (`fields.x.kind`), lowercased, and the
    /// `WATERMARK FOR` clause among the columns.
    CreateSource(
        Box<Statement>,
        Vec<(String, String)>,
        Option<WatermarkClause>,
    ),
    /// `CREATE TABLE` with `APPEND ONLY`, a `WATERMARK FOR` clause, or
    /// `WITH (connector = ...)`.
    CreateTable {
        /// The statement without them.
        create: Box<Statement>,
        /// `APPEND ONLY`: the table takes inserts only.
        append_only: bool,
        /// `WATERMARK FOR col AS expr`.
        watermark: Option<WatermarkClause>,
        /// `WITH (connector = '...', ...)` (keys lowercased, may be
        /// dotted) for a table a connector feeds; empty for others.
        options: Vec<(String, String)>,
    },
    /// `CREATE MATERIALIZED VIEW ... EMIT ON WINDOW CLOSE`, without it.
    CreateViewEmitOnWindowClose(Box<Statement>),
    /// `DROP SOURCE [IF EXISTS] names [CASCADE]`, as a `DROP TABLE`.
    DropSource(Box<Statement>),
    /// `SHOW SOURCES`.
    ShowSources,
    /// `CREATE SINK name AS query WITH (...)` (or `FROM relation`): the
    /// `CREATE MATERIALIZED VIEW` it runs as, and its options (keys
    /// lowercased).
    CreateSink(Box<Statement>, Vec<(String, String)>),
    /// `DROP SINK [IF EXISTS] names [CASCADE]`, as a `DROP MATERIALIZED
    /// VIEW`.
    DropSink(Box<Statement>),
    /// `CREATE SECRET name AS 'value'`.
    CreateSecret(crate::secret::CreateSecret),
    /// `DROP SECRET names`.
    DropSecret(crate::secret::DropSecret),
    /// `SHOW SINKS`.
    ShowSinks,
    /// `MOVE direction FROM cursor`: a `FETCH` that returns no rows.
    Move(Box<Statement>),
    /// `FETCH ... WITH (TIMEOUT = 'interval')`: the `FETCH`, and how long
    /// it may wait for a subscription's rows (the interval's text).
    FetchWithin(Box<Statement>, String),
    /// `SUBSCRIBE ...`: a changefeed of a relation.
    Subscribe(Subscribe),
    /// `DECLARE name CURSOR ... FOR SUBSCRIBE ...`: the `DECLARE` with
    /// `SELECT 1` as its query, and the subscription.
    DeclareSubscribe(Box<Statement>, Subscribe),
    /// `COPY (SUBSCRIBE ...) TO STDOUT ...`: the `COPY` of `(SELECT 1)`,
    /// and the subscription.
    CopySubscribe(Box<Statement>, Subscribe),
    /// `ALTER SEQUENCE`, which sqlparser does not read.
    AlterSequence(crate::sequence_options::AlterSequence),
    /// Any statement sqlparser understands.
    Sql(Box<Statement>),
}

/// The compatibility parser is stateless once built, and building it
/// tokenizes its whole rewrite table, so one instance serves every session.
static COMPAT: LazyLock<PostgresCompatibilityParser> =
    LazyLock::new(PostgresCompatibilityParser::new);

/// Parses SQL text into statements with PostgreSQL's dialect.
///
/// Escape strings (`E'...'`) are decoded first ([`crate::escapes`]).
///
/// A bulk `INSERT ... VALUES` of plain literals is scanned without
/// sqlparser's expression parser ([`crate::values`]), into the same
/// statement.
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
    let sql = crate::escapes::decode_escape_strings(sql)?;
    let sql = sql.as_ref();
    if let Some(mut insert) = crate::values::parse_insert_values(sql) {
        crate::pg_forms::rewrite(&mut insert);
        return Ok(vec![WeirStatement::Sql(Box::new(insert))]);
    }
    let tokens = Tokenizer::new(&PostgreSqlDialect {}, sql)
        .tokenize_with_location()
        .map_err(|e| ParseError::Syntax(e.to_string()))?;
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
    let words = words(tokens);
    if let Some(form) = crate::subscribe::find(&words) {
        out.push(match form {
            Form::Plain => WeirStatement::Subscribe(crate::subscribe::parse_subscribe(tokens)?),
            Form::Declare => {
                let (declare, subscribe) = crate::subscribe::parse_carrier(tokens, form)?;
                WeirStatement::DeclareSubscribe(Box::new(declare), subscribe)
            }
            Form::Copy => {
                let (copy, subscribe) = crate::subscribe::parse_carrier(tokens, form)?;
                WeirStatement::CopySubscribe(Box::new(copy), subscribe)
            }
        });
        return Ok(());
    }
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
        [Token::Word(show), Token::Word(sources)]
            if show.value.eq_ignore_ascii_case("show")
                && sources.value.eq_ignore_ascii_case("sources") =>
        {
            out.push(WeirStatement::ShowSources);
            Ok(())
        }
        [Token::Word(show), Token::Word(sinks)]
            if show.value.eq_ignore_ascii_case("show")
                && sinks.value.eq_ignore_ascii_case("sinks") =>
        {
            out.push(WeirStatement::ShowSinks);
            Ok(())
        }
        [Token::Word(verb), Token::Word(noun), ..]
            if noun.quote_style.is_none()
                && noun.value.eq_ignore_ascii_case("secret")
                && (verb.value.eq_ignore_ascii_case("create")
                    || verb.value.eq_ignore_ascii_case("drop")) =>
        {
            out.push(if verb.value.eq_ignore_ascii_case("create") {
                WeirStatement::CreateSecret(crate::secret::parse_create_secret(tokens)?)
            } else {
                WeirStatement::DropSecret(crate::secret::parse_drop_secret(tokens)?)
            });
            Ok(())
        }
        [Token::Word(verb), Token::Word(noun), ..]
            if noun.quote_style.is_none() && noun.value.eq_ignore_ascii_case("sink") =>
        {
            if verb.value.eq_ignore_ascii_case("create") {
                let (view, options) = crate::sink::parse_create_sink(tokens)?;
                out.push(WeirStatement::CreateSink(Box::new(view), options));
            } else if verb.value.eq_ignore_ascii_case("drop") {
                let drop = crate::sink::parse_drop_sink(tokens)?;
                out.push(WeirStatement::DropSink(Box::new(drop)));
            } else {
                return parse_standard(text, tokens, &words, out);
            }
            Ok(())
        }
        [Token::Word(verb), ..]
            if verb.quote_style.is_none()
                && (verb.value.eq_ignore_ascii_case("fetch")
                    || verb.value.eq_ignore_ascii_case("move")) =>
        {
            let (words, timeout) = crate::fetch::split_timeout(&words[1..])?;
            let fetch = crate::fetch::parse(words)?;
            out.push(match timeout {
                Some(_) if verb.value.eq_ignore_ascii_case("move") => {
                    return Err(ParseError::Syntax("MOVE takes no WITH options".into()))
                }
                Some(timeout) => WeirStatement::FetchWithin(Box::new(fetch), timeout),
                None if verb.value.eq_ignore_ascii_case("move") => {
                    WeirStatement::Move(Box::new(fetch))
                }
                None => WeirStatement::Sql(Box::new(fetch)),
            });
            Ok(())
        }
        [Token::Word(verb), Token::Word(noun), ..]
            if noun.quote_style.is_none()
                && noun.value.eq_ignore_ascii_case("source")
                && (verb.value.eq_ignore_ascii_case("create")
                    || verb.value.eq_ignore_ascii_case("drop")) =>
        {
            out.push(parse_source_statement(tokens)?);
            Ok(())
        }
        [Token::Word(verb), Token::Word(noun), ..]
            if verb.value.eq_ignore_ascii_case("create")
                && noun.quote_style.is_none()
                && noun.value.eq_ignore_ascii_case("table")
                && connector_options_at(tokens).is_some() =>
        {
            out.push(parse_connector_table(tokens)?);
            Ok(())
        }
        [Token::Word(verb), ..]
            if verb.value.eq_ignore_ascii_case("create")
                && words.iter().any(|t| {
                    matches!(t, Token::Word(w) if w.quote_style.is_none()
                        && ["watermark", "append", "emit"].iter().any(|k| w.value.eq_ignore_ascii_case(k)))
                }) =>
        {
            let clauses = crate::event_time::strip(tokens)?;
            if !clauses.any() {
                return parse_standard(text, tokens, &words, out);
            }
            let statement = parse_rewritten(&clauses.text)?;
            out.push(match &statement {
                Statement::CreateTable(_) if !clauses.emit_on_window_close => {
                    WeirStatement::CreateTable {
                        create: Box::new(statement),
                        append_only: clauses.append_only,
                        watermark: clauses.watermark,
                        options: Vec::new(),
                    }
                }
                Statement::CreateView(view)
                    if view.materialized
                        && clauses.emit_on_window_close
                        && !clauses.append_only
                        && clauses.watermark.is_none() =>
                {
                    WeirStatement::CreateViewEmitOnWindowClose(Box::new(statement))
                }
                _ => {
                    return Err(ParseError::Syntax(
                        "APPEND ONLY and WATERMARK FOR belong to CREATE TABLE or CREATE SOURCE, \
                         EMIT ON WINDOW CLOSE to CREATE MATERIALIZED VIEW"
                            .into(),
                    ))
                }
            });
            Ok(())
        }
        [Token::Word(verb), Token::Word(noun), ..]
            if verb.value.eq_ignore_ascii_case("alter")
                && noun.quote_style.is_none()
                && noun.value.eq_ignore_ascii_case("sequence") =>
        {
            out.push(WeirStatement::AlterSequence(
                crate::sequence_options::parse_alter(&words)?,
            ));
            Ok(())
        }
        [Token::Word(verb), ..] if verb.value.eq_ignore_ascii_case("create") => {
            match crate::sequence_options::reorder(&words) {
                Some(text) => {
                    out.push(WeirStatement::Sql(Box::new(parse_rewritten(&text)?)));
                    Ok(())
                }
                None => parse_standard(text, tokens, &words, out),
            }
        }
        _ => parse_standard(text, tokens, &words, out),
    }
}

/// One statement sqlparser reads, rewritten as [`parse_standard`]
/// rewrites them.
pub(crate) fn parse_rewritten(text: &str) -> Result<Statement, ParseError> {
    let tokens = Tokenizer::new(&PostgreSqlDialect {}, text)
        .tokenize_with_location()
        .map_err(|e| ParseError::Syntax(e.to_string()))?;
    let tokens: Vec<&TokenWithSpan> = tokens.iter().collect();
    let words = words(&tokens);
    let mut parsed = Vec::new();
    parse_standard(text, &tokens, &words, &mut parsed)?;
    match (parsed.pop(), parsed.is_empty()) {
        (Some(WeirStatement::Sql(statement)), true) => Ok(*statement),
        _ => Err(ParseError::Syntax("expected one statement".into())),
    }
}

/// A statement sqlparser reads (after the rewrite of Flink's window
/// table functions).
fn parse_standard(
    text: &str,
    tokens: &[&TokenWithSpan],
    words: &[&Token],
    out: &mut Vec<WeirStatement>,
) -> Result<(), ParseError> {
    let flink = crate::windows::flink_window_text(tokens);
    let text = flink.as_deref().unwrap_or(text);
    let lookups = crate::system_time::strip(text)?;
    let text = lookups.as_ref().map_or(text, |l| l.text.as_str());
    let overriding = crate::overriding::strip(text)?;
    let text = overriding.as_ref().map_or(text, |(t, _)| t.as_str());
    // A table's definition (without `AS SELECT`) is stored, not run: a
    // default written as pg_dump writes it (`nextval('s'::regclass)`)
    // keeps its form.
    let creates_table = matches!(words, [Token::Word(c), Token::Word(t), ..]
        if c.value.eq_ignore_ascii_case("create") && t.value.eq_ignore_ascii_case("table"))
        && !words
            .iter()
            .any(|w| matches!(w, Token::Word(w) if w.keyword == Keyword::SELECT));
    // The compatibility parser's statements have no token locations,
    // which putting `FOR SYSTEM_TIME AS OF` back needs.
    let parsed = if !creates_table && lookups.is_none() && words.iter().any(|t| reads_catalog(t)) {
        COMPAT.parse(text)
    } else {
        Parser::parse_sql(&PostgreSqlDialect {}, text)
    }
    .map_err(|e| {
        if matches!(e, ParserError::RecursionLimitExceeded) {
            return ParseError::TooComplex(
                "statement too complex: it nests too deeply to parse".into(),
            );
        }
        let message = e.to_string();
        let message = message
            .strip_prefix("sql parser error: ")
            .unwrap_or(&message)
            .to_owned();
        ParseError::Syntax(message)
    })?;
    let mut parsed = parsed;
    if let Some(lookups) = &lookups {
        crate::system_time::restore(&mut parsed, lookups)?;
    }
    if let Some((_, clause)) = overriding {
        crate::overriding::apply(&mut parsed, clause)?;
    }
    for statement in &mut parsed {
        crate::depth::check_depth(statement)?;
        crate::pg_forms::rewrite(statement);
    }
    out.extend(parsed.into_iter().map(|s| WeirStatement::Sql(Box::new(s))));
    Ok(())
}

/// `CREATE SOURCE` and `DROP SOURCE`: parsed as `CREATE TABLE` and `DROP
/// TABLE`, except that `CREATE SOURCE`'s `WITH` options are read here,
/// since sqlparser takes only single-word option keys.
fn parse_source_statement(tokens: &[&TokenWithSpan]) -> Result<WeirStatement, ParseError> {
    let clauses = crate::event_time::strip(tokens)?;
    if clauses.append_only || clauses.emit_on_window_close {
        return Err(ParseError::Syntax(
            "a source takes a WATERMARK FOR clause, not APPEND ONLY or EMIT ON WINDOW CLOSE".into(),
        ));
    }
    let watermark = clauses.watermark;
    // Tokenized again without the clause: the tokens borrow the text.
    let text = clauses.text;
    let retokenized = Tokenizer::new(&PostgreSqlDialect {}, &text)
        .tokenize_with_location()
        .map_err(|e| ParseError::Syntax(e.to_string()))?;
    let tokens: Vec<&TokenWithSpan> = retokenized.iter().collect();
    let tokens = &tokens[..];
    let mut depth = 0i32;
    let mut with = None;
    let mut replaced = false;
    let mut text = String::new();
    let mut includes = Vec::new();
    let mut skip_to = 0;
    for (i, token) in tokens.iter().enumerate() {
        if i < skip_to {
            continue;
        }
        match &token.token {
            Token::LParen => depth += 1,
            Token::RParen => depth -= 1,
            Token::Word(w) if depth == 0 && w.value.eq_ignore_ascii_case("with") => {
                with = Some(i);
                break;
            }
            Token::Word(w)
                if depth == 0
                    && w.quote_style.is_none()
                    && w.value.eq_ignore_ascii_case("include") =>
            {
                let (option, next) = include_clause(tokens, i + 1)?;
                includes.push(option);
                skip_to = next;
                continue;
            }
            Token::Word(w) if !replaced && w.value.eq_ignore_ascii_case("source") => {
                replaced = true;
                text.push_str("TABLE");
                continue;
            }
            _ => {}
        }
        text.push_str(&token.token.to_string());
    }
    let statement = parse_one(&text)?;
    let is_create = matches!(statement, Statement::CreateTable(_));
    match with {
        None if is_create => Ok(WeirStatement::CreateSource(
            Box::new(statement),
            Vec::new(),
            watermark,
        )),
        None if watermark.is_none() => Ok(WeirStatement::DropSource(Box::new(statement))),
        Some(i) if is_create => Ok(WeirStatement::CreateSource(
            Box::new(statement),
            includes
                .into_iter()
                .chain(with_options(&tokens[i + 1..], Role::Source)?)
                .collect(),
            watermark,
        )),
        Some(_) => Err(ParseError::Syntax(
            "syntax error at or near \"WITH\"".into(),
        )),
        None => Err(ParseError::Syntax(
            "syntax error at or near \"WATERMARK\"".into(),
        )),
    }
}

/// `INCLUDE kind [AS name]` from `tokens[at..]` (after `INCLUDE`): the
/// option it stands for, `include.<kind> = '<name>'` (`''` without a
/// name), and where the tokens after it start.
fn include_clause(
    tokens: &[&TokenWithSpan],
    at: usize,
) -> Result<((String, String), usize), ParseError> {
    let syntax = || ParseError::Syntax("expected INCLUDE kind [AS name]".into());
    let mut words = tokens
        .iter()
        .enumerate()
        .skip(at)
        .filter(|(_, t)| !matches!(t.token, Token::Whitespace(_)));
    let Some((_, Token::Word(kind))) = words.next().map(|(i, t)| (i, &t.token)) else {
        return Err(syntax());
    };
    let key = format!("include.{}", kind.value.to_lowercase());
    let mut after = words.clone();
    match after.next() {
        Some((_, t)) if matches!(&t.token, Token::Word(w) if w.keyword == Keyword::AS) => {
            let Some((i, Token::Word(name))) = after.next().map(|(i, t)| (i, &t.token)) else {
                return Err(syntax());
            };
            if name.quote_style.is_none() && name.keyword == Keyword::WITH {
                return Err(syntax());
            }
            let name = match name.quote_style {
                Some(_) => name.value.clone(),
                None => name.value.to_lowercase(),
            };
            Ok(((key, name), i + 1))
        }
        Some((i, _)) => Ok(((key, String::new()), i)),
        None => Err(syntax()),
    }
}

/// Where a top-level `WITH (` whose options name a `connector` starts,
/// if the statement has one (`CREATE TABLE ... WITH (connector = ...)`).
fn connector_options_at(tokens: &[&TokenWithSpan]) -> Option<usize> {
    let mut depth = 0i32;
    for (i, token) in tokens.iter().enumerate() {
        match &token.token {
            Token::LParen => depth += 1,
            Token::RParen => depth -= 1,
            Token::Word(w) if depth == 0 && w.value.eq_ignore_ascii_case("with") => {
                let names_connector = tokens[i + 1..].iter().any(
                    |t| matches!(&t.token, Token::Word(w) if w.value.eq_ignore_ascii_case("connector")),
                );
                return names_connector.then_some(i);
            }
            _ => {}
        }
    }
    None
}

/// `CREATE TABLE name (columns, PRIMARY KEY (...)) WITH (connector = ...)`:
/// the table without its options, and the options, read here since
/// sqlparser takes only single-word option keys.
fn parse_connector_table(tokens: &[&TokenWithSpan]) -> Result<WeirStatement, ParseError> {
    // `APPEND ONLY` and `WATERMARK FOR` are passed on, for the server to
    // say why a table a connector feeds takes neither.
    let clauses = crate::event_time::strip(tokens)?;
    if clauses.emit_on_window_close {
        return Err(ParseError::Syntax(
            "EMIT ON WINDOW CLOSE belongs to CREATE MATERIALIZED VIEW".into(),
        ));
    }
    let retokenized = Tokenizer::new(&PostgreSqlDialect {}, &clauses.text)
        .tokenize_with_location()
        .map_err(|e| ParseError::Syntax(e.to_string()))?;
    let tokens: Vec<&TokenWithSpan> = retokenized.iter().collect();
    let with = connector_options_at(&tokens)
        .ok_or_else(|| ParseError::Syntax("expected WITH (connector = ...)".into()))?;
    let as_query = tokens[with..]
        .iter()
        .any(|t| matches!(&t.token, Token::Word(w) if w.keyword == Keyword::AS));
    let text: String = tokens[..with].iter().map(|t| t.token.to_string()).collect();
    let statement = parse_one(&text)?;
    if as_query || !matches!(&statement, Statement::CreateTable(create) if create.query.is_none()) {
        return Err(ParseError::Syntax(
            "a table a connector feeds is declared with its columns, not AS SELECT".into(),
        ));
    }
    Ok(WeirStatement::CreateTable {
        create: Box::new(statement),
        append_only: clauses.append_only,
        watermark: clauses.watermark,
        options: parse_options(&tokens[with + 1..])?,
    })
}

/// The tokens that are not whitespace.
pub(crate) fn words<'a>(tokens: &[&'a TokenWithSpan]) -> Vec<&'a Token> {
    tokens
        .iter()
        .map(|t| &t.token)
        .filter(|t| !matches!(t, Token::Whitespace(_)))
        .collect()
}

/// One SQL expression, for rewrites that write theirs as text.
pub(crate) fn parse_expr(sql: &str) -> Option<Expr> {
    Parser::new(&PostgreSqlDialect {})
        .try_with_sql(sql)
        .and_then(|mut parser| parser.parse_expr())
        .ok()
}

pub(crate) fn parse_one(text: &str) -> Result<Statement, ParseError> {
    let mut parsed = Parser::parse_sql(&PostgreSqlDialect {}, text)
        .map_err(|e| ParseError::Syntax(e.to_string()))?;
    match (parsed.pop(), parsed.is_empty()) {
        (Some(statement), true) => Ok(statement),
        _ => Err(ParseError::Syntax("expected one statement".into())),
    }
}

/// `( key = value, ... )` where a key is words joined by dots or dashes
/// (`scan.startup.timestamp-millis`), or a quoted string as Flink SQL
/// writes keys (`'connector' = 'kafka'`), and a value is a string, number
/// or word.
/// A source's or sink's `WITH (...)` options from `tokens` (after `WITH`),
/// with those of a `FORMAT ... ENCODE ...` clause after them.
pub(crate) fn with_options(
    tokens: &[&TokenWithSpan],
    role: Role,
) -> Result<Vec<(String, String)>, ParseError> {
    let mut depth = 0;
    let close = tokens.iter().position(|t| {
        match t.token {
            Token::LParen => depth += 1,
            Token::RParen => depth -= 1,
            _ => return false,
        }
        depth == 0
    });
    let Some(close) = close else {
        return parse_options(tokens);
    };
    let options = parse_options(&tokens[..=close])?;
    let rest = &tokens[close + 1..];
    if rest.iter().all(|t| matches!(t.token, Token::Whitespace(_))) {
        return Ok(options);
    }
    format_clause::merge(options, format_clause::options(rest, role)?)
}

pub(crate) fn parse_options(
    tokens: &[&TokenWithSpan],
) -> Result<Vec<(String, String)>, ParseError> {
    let mut words = tokens
        .iter()
        .map(|t| &t.token)
        .filter(|t| !matches!(t, Token::Whitespace(_)))
        .peekable();
    let syntax = |what: &str| ParseError::Syntax(format!("syntax error in WITH options: {what}"));
    if words.next() != Some(&Token::LParen) {
        return Err(syntax("expected ("));
    }
    let mut options = Vec::new();
    loop {
        let mut key = String::new();
        loop {
            match words.next() {
                Some(Token::Word(w)) => key.push_str(&w.value.to_lowercase()),
                Some(Token::SingleQuotedString(quoted)) if key.is_empty() => {
                    key = quoted.to_lowercase();
                    if !matches!(words.peek(), Some(Token::Eq)) {
                        return Err(syntax("expected = after a quoted key"));
                    }
                }
                Some(Token::Period) if !key.is_empty() => key.push('.'),
                Some(Token::Minus) if !key.is_empty() && !key.ends_with(['.', '-']) => {
                    key.push('-')
                }
                Some(Token::Eq) if !key.is_empty() && !key.ends_with(['.', '-']) => break,
                Some(Token::RParen) if key.is_empty() && options.is_empty() => return Ok(options),
                other => return Err(syntax(&format!("unexpected {}", describe(other)))),
            }
        }
        let value = match words.next() {
            Some(Token::SingleQuotedString(v)) => v.clone(),
            Some(Token::Number(v, _)) => v.clone(),
            // `key = SECRET name`: a reference to a `CREATE SECRET`.
            Some(Token::Word(w))
                if w.quote_style.is_none()
                    && w.value.eq_ignore_ascii_case("secret")
                    && matches!(words.peek(), Some(Token::Word(_))) =>
            {
                let Some(Token::Word(name)) = words.next() else {
                    unreachable!("peeked a word")
                };
                key = crate::secret::secret_key(&key);
                if name.quote_style.is_some() {
                    name.value.clone()
                } else {
                    name.value.to_lowercase()
                }
            }
            Some(Token::Word(w)) => w.value.clone(),
            other => return Err(syntax(&format!("unexpected {}", describe(other)))),
        };
        options.push((key, value));
        match words.next() {
            Some(Token::Comma) => continue,
            Some(Token::RParen) if words.peek().is_none() => return Ok(options),
            other => return Err(syntax(&format!("unexpected {}", describe(other)))),
        }
    }
}

fn describe(token: Option<&Token>) -> String {
    token.map_or("end of input".into(), |t| format!("\"{t}\""))
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

/// The tokens of `text` without whitespace, if `text` holds `word` (ASCII,
/// any case) at all: most statements do not, and are not tokenized again.
pub(crate) fn tokens_if_mentioned(
    text: &str,
    word: &str,
) -> Result<Option<Vec<TokenWithSpan>>, ParseError> {
    let mentioned = text
        .as_bytes()
        .windows(word.len())
        .any(|w| w.eq_ignore_ascii_case(word.as_bytes()));
    if !mentioned {
        return Ok(None);
    }
    let tokens = Tokenizer::new(&PostgreSqlDialect {}, text)
        .tokenize_with_location()
        .map_err(|e| ParseError::Syntax(e.to_string()))?;
    Ok(Some(
        tokens
            .into_iter()
            .filter(|t| !matches!(t.token, Token::Whitespace(_)))
            .collect(),
    ))
}

/// `text` with the characters in `ranges` (byte ranges of `text`)
/// replaced by spaces, newlines kept: every other token keeps its line
/// and column, so locations in the result's parse are locations in
/// `text`.
pub(crate) fn blanked(text: &str, ranges: &[std::ops::Range<usize>]) -> String {
    text.char_indices()
        .map(|(i, c)| {
            if c != '\n' && ranges.iter().any(|r| r.contains(&i)) {
                ' '
            } else {
                c
            }
        })
        .collect()
}

/// Byte offsets of line starts, to turn token locations into slices.
pub(crate) struct LineOffsets(Vec<usize>);

impl LineOffsets {
    pub(crate) fn new(sql: &str) -> Self {
        let mut starts = vec![0];
        starts.extend(sql.match_indices('\n').map(|(i, _)| i + 1));
        LineOffsets(starts)
    }

    /// The byte offset of a 1-based (line, column-in-characters) location.
    pub(crate) fn byte(&self, sql: &str, location: Location) -> usize {
        let line_start = self.0[(location.line as usize)
            .saturating_sub(1)
            .min(self.0.len() - 1)];
        sql[line_start..]
            .char_indices()
            .nth((location.column as usize).saturating_sub(1))
            .map_or(sql.len(), |(i, _)| line_start + i)
    }
}

/// The text of the one statement `sql` parses into (tests of rewrites).
#[cfg(test)]
pub(crate) fn parsed_text(sql: &str) -> String {
    match &parse(sql).expect("parses")[..] {
        [WeirStatement::Sql(statement)] => statement.to_string(),
        other => panic!("not one SQL statement: {other:?}"),
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
            WeirStatement::ShowSources => "SHOW SOURCES".into(),
            WeirStatement::ShowSinks => "SHOW SINKS".into(),
            WeirStatement::CreateSink(s, o) => format!("{s} {o:?}"),
            WeirStatement::DropSink(s) => s.to_string(),
            WeirStatement::CreateSecret(s) => format!("{s:?}"),
            WeirStatement::DropSecret(s) => format!("{s:?}"),
            WeirStatement::CreateSource(s, o, w) => format!("{s} {o:?} {w:?}"),
            WeirStatement::CreateTable {
                create,
                append_only,
                watermark,
                options,
            } => format!("{create} append_only={append_only} {watermark:?} {options:?}"),
            WeirStatement::CreateViewEmitOnWindowClose(s) => format!("{s} EMIT ON WINDOW CLOSE"),
            WeirStatement::DropSource(s) => s.to_string(),
            WeirStatement::Move(s) => format!("MOVE {s}"),
            WeirStatement::Subscribe(s) => format!("{s:?}"),
            WeirStatement::AlterSequence(a) => format!("{a:?}"),
            WeirStatement::FetchWithin(f, t) => format!("{f} WITH (TIMEOUT = {t})"),
            WeirStatement::DeclareSubscribe(d, s) | WeirStatement::CopySubscribe(d, s) => {
                format!("{d} {s:?}")
            }
        }
    }

    #[test]
    fn fetch_and_move_take_postgresql_short_forms() {
        for (sql, parsed) in [
            ("FETCH c", "FETCH NEXT FROM c"),
            ("fetch from \"My c\"", "FETCH NEXT FROM \"My c\""),
            ("FETCH FORWARD IN c", "FETCH FORWARD FROM c"),
            ("FETCH BACKWARD -2 c", "FETCH BACKWARD -2 FROM c"),
            ("FETCH 5 c", "FETCH 5 FROM c"),
            ("FETCH ABSOLUTE -1 FROM c", "FETCH ABSOLUTE -1 FROM c"),
            ("FETCH FORWARD ALL FROM c", "FETCH FORWARD ALL FROM c"),
            ("MOVE LAST IN c", "MOVE FETCH LAST FROM c"),
            ("move c", "MOVE FETCH NEXT FROM c"),
        ] {
            let statements = parse(sql).unwrap_or_else(|e| panic!("{sql}: {e}"));
            assert_eq!(sql_of(&statements[0]), parsed, "{sql}");
        }
        for bad in [
            "FETCH",
            "FETCH 1.5 FROM c",
            "FETCH ABSOLUTE FROM c",
            "MOVE 1 FROM 2",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn sink_statements_run_as_views() {
        let parsed = parse(
            "CREATE SINK s AS WITH t AS (SELECT 1 AS x) SELECT x FROM t WITH (connector = 'blackhole'); \
             CREATE SINK IF NOT EXISTS f FROM v WITH (connector = 'blackhole', type = 'append-only'); \
             DROP SINK IF EXISTS s, f CASCADE; SHOW SINKS",
        )
        .unwrap();
        let WeirStatement::CreateSink(view, options) = &parsed[0] else {
            panic!("{:?}", parsed[0]);
        };
        assert_eq!(
            view.to_string(),
            "CREATE MATERIALIZED VIEW s AS WITH t AS (SELECT 1 AS x) SELECT x FROM t"
        );
        assert_eq!(
            options,
            &[("connector".to_string(), "blackhole".to_string())]
        );
        assert_eq!(
            sql_of(&parsed[1]),
            "CREATE MATERIALIZED VIEW IF NOT EXISTS f AS SELECT * FROM v [(\"connector\", \"blackhole\"), (\"type\", \"append-only\")]"
        );
        assert_eq!(
            sql_of(&parsed[2]),
            "DROP MATERIALIZED VIEW IF EXISTS s, f CASCADE"
        );
        assert_eq!(parsed[3], WeirStatement::ShowSinks);
        // The query is rewritten as a view's would be.
        let windowed = parse(
            "CREATE SINK w AS SELECT window_start FROM TUMBLE(bid, date_time, INTERVAL '10' SECOND) \
             WHERE auction % 2 = 0 WITH (connector = 'blackhole')",
        )
        .unwrap();
        let view = parse(
            "CREATE MATERIALIZED VIEW w AS SELECT window_start FROM TUMBLE(bid, date_time, INTERVAL '10' SECOND) \
             WHERE auction % 2 = 0",
        )
        .unwrap();
        let (WeirStatement::CreateSink(sink, _), WeirStatement::Sql(view)) =
            (&windowed[0], &view[0])
        else {
            panic!("{windowed:?}");
        };
        assert_eq!(sink.to_string(), view.to_string());
        for bad in [
            "CREATE SINK s AS SELECT 1",
            "CREATE SINK s WITH (connector = 'blackhole')",
            "CREATE SINK s FROM WITH (connector = 'blackhole')",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn format_encode_clauses_are_options() {
        let options = |sql: &str| -> Vec<(String, String)> {
            match parse(sql).unwrap().remove(0) {
                WeirStatement::CreateSource(_, options, _) => options,
                WeirStatement::CreateSink(_, options) => options,
                other => panic!("{other:?}"),
            }
        };
        let pairs = |list: &[(&str, &str)]| -> Vec<(String, String)> {
            list.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        assert_eq!(
            options(
                "CREATE SOURCE s (k int) WITH (connector = 'kafka', topic = 't') \
                 FORMAT PLAIN ENCODE CSV (without_header = 'true', delimiter = ';')"
            ),
            pairs(&[
                ("connector", "kafka"),
                ("topic", "t"),
                ("format", "csv"),
                ("csv.delimiter", ";"),
            ])
        );
        // WITH may say the same, or refine AVRO to Confluent's framing.
        assert_eq!(
            options(
                "CREATE SOURCE s (k int) WITH (connector = 'kafka', format = 'avro-confluent') \
                 format plain encode avro (avro.schema = '{}')"
            ),
            pairs(&[
                ("connector", "kafka"),
                ("format", "avro-confluent"),
                ("avro.schema", "{}"),
            ])
        );
        assert_eq!(
            options(
                "CREATE SINK k FROM v WITH (connector = 'kafka', primary_key = 'id') \
                 FORMAT UPSERT ENCODE JSON"
            ),
            pairs(&[
                ("connector", "kafka"),
                ("primary_key", "id"),
                ("type", "upsert"),
                ("format", "json"),
            ])
        );
        assert_eq!(
            options("CREATE SINK f AS SELECT 1 WITH (connector = 'filesystem') FORMAT PLAIN ENCODE PARQUET"),
            pairs(&[
                ("connector", "filesystem"),
                ("type", "append-only"),
                ("format", "parquet"),
            ])
        );
        for (bad, unsupported) in [
            ("CREATE SOURCE s (k int) WITH (connector = 'kafka') FORMAT UPSERT ENCODE JSON", true),
            ("CREATE SOURCE s (k int) WITH (connector = 'kafka') FORMAT PLAIN ENCODE PROTOBUF", true),
            (
                "CREATE SOURCE s (k int) WITH (connector = 'kafka') FORMAT PLAIN ENCODE AVRO \
                 (schema.registry = 'http://r')",
                true,
            ),
            ("CREATE SINK k FROM v WITH (connector = 'kafka') FORMAT DEBEZIUM ENCODE JSON", true),
            ("CREATE SOURCE s (k int) WITH (connector = 'kafka', format = 'csv') FORMAT PLAIN ENCODE JSON", false),
            ("CREATE SINK k FROM v WITH (connector = 'kafka', type = 'upsert') FORMAT PLAIN ENCODE JSON", false),
            ("CREATE SOURCE s (k int) WITH (connector = 'kafka') FORMAT PLAIN", false),
            ("CREATE SOURCE s (k int) WITH (connector = 'kafka', value.format = 'csv') FORMAT PLAIN ENCODE JSON", false),
            ("CREATE SOURCE s (k int) WITH (connector = 'kafka', 'csv.field-delimiter' = ',') FORMAT PLAIN ENCODE CSV (delimiter = ';')", false),
            ("CREATE SOURCE s (k int) WITH (connector = 'kafka') ENCODE JSON", false),
            ("CREATE SOURCE s (k int) WITH (connector = 'kafka') FORMAT PLAIN ENCODE CSV (without_header = 'maybe')", false),
        ] {
            match parse(bad) {
                Err(ParseError::Unsupported(_)) => assert!(unsupported, "{bad}"),
                Err(ParseError::Syntax(_)) => assert!(!unsupported, "{bad}"),
                other => panic!("{bad}: {other:?}"),
            }
        }
    }

    #[test]
    fn source_statements_take_dotted_options() {
        let parsed = parse(
            "CREATE SOURCE s (k int, v text) WITH (connector = 'datagen', fields.k.kind = 'sequence', rows_per_second = 10); DROP SOURCE IF EXISTS s CASCADE; show sources",
        )
        .unwrap();
        let WeirStatement::CreateSource(create, options, _) = &parsed[0] else {
            panic!("{:?}", parsed[0]);
        };
        assert_eq!(create.to_string(), "CREATE TABLE s (k INT, v TEXT)");
        assert_eq!(
            options,
            &[
                ("connector".to_string(), "datagen".to_string()),
                ("fields.k.kind".to_string(), "sequence".to_string()),
                ("rows_per_second".to_string(), "10".to_string()),
            ]
        );
        assert_eq!(sql_of(&parsed[1]), "DROP TABLE IF EXISTS s CASCADE");
        assert_eq!(parsed[2], WeirStatement::ShowSources);
        // RisingWave's INCLUDE clauses, as options.
        let parsed = parse(
            "CREATE SOURCE s (k int) INCLUDE partition AS P INCLUDE key INCLUDE offset AS \"Off\" WITH (connector = 'kafka')",
        )
        .unwrap();
        let WeirStatement::CreateSource(create, options, _) = &parsed[0] else {
            panic!("{:?}", parsed[0]);
        };
        assert_eq!(create.to_string(), "CREATE TABLE s (k INT)");
        assert_eq!(
            options,
            &[
                ("include.partition".to_string(), "p".to_string()),
                ("include.key".to_string(), String::new()),
                ("include.offset".to_string(), "Off".to_string()),
                ("connector".to_string(), "kafka".to_string()),
            ]
        );
        assert!(parse("CREATE SOURCE s (k int) INCLUDE WITH (connector = 'kafka')").is_err());
        assert!(
            parse("CREATE SOURCE s (k int) INCLUDE key AS WITH (connector = 'kafka')").is_err()
        );
        // Flink's dashed and quoted keys.
        let parsed = parse(
            "CREATE SOURCE s (k int) WITH ('Connector' = 'filesystem', source.monitor-interval = '1s', 'csv.field-delimiter' = ';')",
        )
        .unwrap();
        let WeirStatement::CreateSource(_, options, _) = &parsed[0] else {
            panic!("{:?}", parsed[0]);
        };
        assert_eq!(
            options,
            &[
                ("connector".to_string(), "filesystem".to_string()),
                ("source.monitor-interval".to_string(), "1s".to_string()),
                ("csv.field-delimiter".to_string(), ";".to_string()),
            ]
        );
        for bad in [
            "CREATE SOURCE s (k int) WITH (connector 'datagen')",
            "CREATE SOURCE s (k int) WITH (fields. = 'x')",
            "CREATE SOURCE s (k int) WITH (a- = 'x')",
            "CREATE SOURCE s (k int) WITH (-a = 'x')",
            "CREATE SOURCE s (k int) WITH ('a' b = 'x')",
            "CREATE SOURCE s (k int) WITH (a = 'x'",
            "DROP SOURCE s WITH (a = 1)",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
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
        assert!(err.to_string().contains("SELEC"), "{err}");
    }

    #[test]
    fn a_table_a_connector_feeds_keeps_its_dotted_options() {
        let parsed = parse(
            "CREATE TABLE t (id INT PRIMARY KEY, v TEXT) WITH (connector = 'postgres-cdc', \
             Table.Name = 'orders', port = 5432)",
        )
        .unwrap();
        let WeirStatement::CreateTable {
            create, options, ..
        } = &parsed[0]
        else {
            panic!("{parsed:?}")
        };
        assert!(create
            .to_string()
            .starts_with("CREATE TABLE t (id INT PRIMARY KEY"));
        assert_eq!(
            options,
            &[
                ("connector".into(), "postgres-cdc".into()),
                ("table.name".into(), "orders".into()),
                ("port".into(), "5432".into()),
            ]
        );
        // Storage parameters without a connector stay sqlparser's.
        let plain = parse("CREATE TABLE u (a INT) WITH (fillfactor = 70)").unwrap();
        assert!(matches!(&plain[0], WeirStatement::Sql(_)), "{plain:?}");
        assert!(parse("CREATE TABLE w WITH (connector = 'x') AS SELECT 1").is_err());
    }

    #[test]
    fn empty_input_has_no_statements() {
        assert!(parse(" ; ;").unwrap().is_empty());
    }
}
