//! `SUBSCRIBE`, the changefeed statement (Materialize's spelling), which
//! sqlparser does not read, and the two statements that carry one:
//!
//! - `SUBSCRIBE [TO] relation [WITH (PROGRESS [= bool], SNAPSHOT [=
//!   bool])] [AS OF epoch]` (the clauses in either order);
//! - `DECLARE name CURSOR [WITH HOLD] FOR SUBSCRIBE ...`, read by
//!   sqlparser with a placeholder query in place of the `SUBSCRIBE`;
//! - `COPY (SUBSCRIBE ...) TO STDOUT [options]`, the same way.

use datafusion::sql::sqlparser::ast::{Ident, ObjectName, Statement};
use datafusion::sql::sqlparser::tokenizer::{Span, Token, TokenWithSpan};

use crate::parse::{parse_one, ParseError};

/// What a `SUBSCRIBE` asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subscribe {
    /// The table or materialized view.
    pub relation: ObjectName,
    /// `AS OF epoch`: start at this committed epoch instead of the newest.
    pub as_of: Option<u64>,
    /// `SNAPSHOT` (default true): begin with the rows at the start epoch.
    pub snapshot: bool,
    /// `PROGRESS` (default false): a row marks each epoch that closes.
    pub progress: bool,
}

/// Where a statement's `SUBSCRIBE` stands, if it has one: the statement
/// starts with it, is a `DECLARE ... FOR SUBSCRIBE`, or a `COPY
/// (SUBSCRIBE ...)`.
pub(crate) fn find(words: &[&Token]) -> Option<Form> {
    let word = |i: usize, name: &str| {
        matches!(words.get(i), Some(Token::Word(w)) if w.quote_style.is_none()
            && w.value.eq_ignore_ascii_case(name))
    };
    if word(0, "subscribe") {
        return Some(Form::Plain);
    }
    if word(0, "copy") && words.get(1) == Some(&&Token::LParen) && word(2, "subscribe") {
        return Some(Form::Copy);
    }
    if word(0, "declare") {
        let at = words.iter().position(|t| {
            matches!(t, Token::Word(w) if w.quote_style.is_none() && w.value.eq_ignore_ascii_case("for"))
        })?;
        return word(at + 1, "subscribe").then_some(Form::Declare);
    }
    None
}

/// The statements that carry a `SUBSCRIBE`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Form {
    Plain,
    Declare,
    Copy,
}

/// `SUBSCRIBE ...`: `tokens` start with the `SUBSCRIBE` word.
pub(crate) fn parse_subscribe(tokens: &[&TokenWithSpan]) -> Result<Subscribe, ParseError> {
    let words = crate::parse::words(tokens);
    let mut rest = &words[1..];
    if let [Token::Word(to), tail @ ..] = rest {
        // `TO` is optional; a relation named `to` needs quotes.
        if to.quote_style.is_none() && to.value.eq_ignore_ascii_case("to") {
            rest = tail;
        }
    }
    let mut parts = Vec::new();
    loop {
        match rest {
            [Token::Word(w), tail @ ..] => {
                parts.push(Ident {
                    value: w.value.clone(),
                    quote_style: w.quote_style,
                    span: Span::empty(),
                });
                rest = tail;
            }
            _ => return Err(syntax("SUBSCRIBE needs a relation name")),
        }
        match rest {
            [Token::Period, tail @ ..] => rest = tail,
            _ => break,
        }
    }
    let mut subscribe = Subscribe {
        relation: ObjectName::from(parts),
        as_of: None,
        snapshot: true,
        progress: false,
    };
    let (mut seen_with, mut seen_as_of) = (false, false);
    while let [Token::Word(w), tail @ ..] = rest {
        if w.value.eq_ignore_ascii_case("with") && !seen_with {
            seen_with = true;
            rest = parse_options(tail, &mut subscribe)?;
        } else if w.value.eq_ignore_ascii_case("as") && !seen_as_of {
            seen_as_of = true;
            let tail = match tail {
                [Token::Word(of), tail @ ..] if of.value.eq_ignore_ascii_case("of") => tail,
                _ => return Err(syntax("expected OF after AS")),
            };
            let [Token::Number(n, _), tail @ ..] = tail else {
                return Err(syntax("AS OF needs an epoch number"));
            };
            let epoch = n
                .parse()
                .map_err(|_| syntax(&format!("invalid epoch {n}")))?;
            subscribe.as_of = Some(epoch);
            rest = tail;
        } else {
            break;
        }
    }
    if let Some(token) = rest.first() {
        return Err(syntax(&format!("unexpected \"{token}\"")));
    }
    Ok(subscribe)
}

/// `( name [= value], ... )` after `WITH`; returns the tokens after it.
fn parse_options<'a, 'b>(
    tokens: &'a [&'b Token],
    subscribe: &mut Subscribe,
) -> Result<&'a [&'b Token], ParseError> {
    let [Token::LParen, after @ ..] = tokens else {
        return Err(syntax("expected ( after WITH"));
    };
    let mut rest: &'a [&'b Token] = after;
    loop {
        let [Token::Word(name), tail @ ..] = rest else {
            return Err(syntax("expected an option name"));
        };
        rest = tail;
        let mut value = true;
        if let [Token::Eq, tail @ ..] = rest {
            value = match tail.first() {
                Some(Token::Word(w)) if w.value.eq_ignore_ascii_case("true") => true,
                Some(Token::Word(w)) if w.value.eq_ignore_ascii_case("false") => false,
                Some(Token::SingleQuotedString(s)) if s.eq_ignore_ascii_case("true") => true,
                Some(Token::SingleQuotedString(s)) if s.eq_ignore_ascii_case("false") => false,
                other => {
                    let shown = other.map_or("nothing".to_owned(), |t| t.to_string());
                    return Err(syntax(&format!(
                        "option {} takes true or false, not {shown}",
                        name.value
                    )));
                }
            };
            rest = &tail[1..];
        }
        match name.value.to_lowercase().as_str() {
            "progress" => subscribe.progress = value,
            "snapshot" => subscribe.snapshot = value,
            other => {
                return Err(syntax(&format!(
                    "unknown option {other} (SUBSCRIBE takes PROGRESS and SNAPSHOT)"
                )))
            }
        }
        match rest {
            [Token::Comma, tail @ ..] => rest = tail,
            [Token::RParen, tail @ ..] => return Ok(tail),
            _ => return Err(syntax("expected , or ) in WITH options")),
        }
    }
}

/// `DECLARE ... FOR SUBSCRIBE ...` or `COPY (SUBSCRIBE ...) ...`: the
/// statement with `SELECT 1` in place of the subscription, and the
/// subscription.
pub(crate) fn parse_carrier(
    tokens: &[&TokenWithSpan],
    form: Form,
) -> Result<(Statement, Subscribe), ParseError> {
    let start = tokens
        .iter()
        .position(|t| matches!(&t.token, Token::Word(w) if w.quote_style.is_none() && w.value.eq_ignore_ascii_case("subscribe")))
        .ok_or_else(|| syntax("expected SUBSCRIBE"))?;
    let end = match form {
        Form::Copy => {
            // The parenthesis that closes `(SUBSCRIBE ...`.
            let mut depth = 1;
            let mut end = None;
            for (i, token) in tokens.iter().enumerate().skip(start) {
                match token.token {
                    Token::LParen => depth += 1,
                    Token::RParen => {
                        depth -= 1;
                        if depth == 0 {
                            end = Some(i);
                            break;
                        }
                    }
                    _ => {}
                }
            }
            end.ok_or_else(|| syntax("COPY (SUBSCRIBE ...) misses its )"))?
        }
        _ => tokens.len(),
    };
    let subscribe = parse_subscribe(&tokens[start..end])?;
    let text: String = tokens[..start]
        .iter()
        .map(|t| t.token.to_string())
        .chain(std::iter::once("SELECT 1".to_owned()))
        .chain(tokens[end..].iter().map(|t| t.token.to_string()))
        .collect();
    Ok((parse_one(&text)?, subscribe))
}

fn syntax(what: &str) -> ParseError {
    ParseError::Syntax(format!("syntax error in SUBSCRIBE: {what}"))
}

#[cfg(test)]
mod tests {
    use crate::{parse, WeirStatement};

    use super::Subscribe;

    fn subscribe(sql: &str) -> Subscribe {
        match parse(sql).unwrap().pop() {
            Some(WeirStatement::Subscribe(s)) => s,
            other => panic!("{sql}: {other:?}"),
        }
    }

    #[test]
    fn reads_every_clause_in_either_order() {
        let s = subscribe("SUBSCRIBE TO totals");
        assert_eq!(s.relation.to_string(), "totals");
        assert_eq!((s.as_of, s.snapshot, s.progress), (None, true, false));
        let s = subscribe("subscribe public.\"Totals\" WITH (PROGRESS, SNAPSHOT = false) AS OF 42");
        assert_eq!(s.relation.to_string(), "public.\"Totals\"");
        assert_eq!((s.as_of, s.snapshot, s.progress), (Some(42), false, true));
        let s = subscribe("SUBSCRIBE t AS OF 7 WITH (progress = true)");
        assert_eq!((s.as_of, s.snapshot, s.progress), (Some(7), true, true));
    }

    #[test]
    fn refuses_what_it_does_not_know() {
        for sql in [
            "SUBSCRIBE",
            "SUBSCRIBE TO",
            "SUBSCRIBE t WITH (FOO)",
            "SUBSCRIBE t WITH (PROGRESS = 3)",
            "SUBSCRIBE t AS OF x",
            "SUBSCRIBE t AS OF 1 AS OF 2",
            "SUBSCRIBE t WHERE a = 1",
            "SUBSCRIBE (SELECT 1)",
        ] {
            assert!(parse(sql).is_err(), "{sql}");
        }
    }

    #[test]
    fn carriers_keep_their_own_clauses() {
        match parse("DECLARE c CURSOR WITH HOLD FOR SUBSCRIBE v WITH (PROGRESS)")
            .unwrap()
            .pop()
        {
            Some(WeirStatement::DeclareSubscribe(declare, s)) => {
                assert!(declare.to_string().contains("WITH HOLD"), "{declare}");
                assert!(s.progress);
            }
            other => panic!("{other:?}"),
        }
        match parse("COPY (SUBSCRIBE v AS OF 3) TO STDOUT WITH (FORMAT csv)")
            .unwrap()
            .pop()
        {
            Some(WeirStatement::CopySubscribe(copy, s)) => {
                assert!(copy.to_string().to_lowercase().contains("csv"), "{copy}");
                assert_eq!(s.as_of, Some(3));
            }
            other => panic!("{other:?}"),
        }
    }
}
