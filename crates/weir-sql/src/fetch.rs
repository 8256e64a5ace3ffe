//! `FETCH` and `MOVE` as PostgreSQL writes them. sqlparser reads only
//! `FETCH direction FROM name` with an unsigned count; PostgreSQL lets the
//! direction (`NEXT`), the count after `FORWARD` or `BACKWARD` (1) and
//! `FROM`/`IN` go unsaid, and counts may be negative (`ABSOLUTE -1`).

use datafusion::sql::sqlparser::ast::{
    FetchDirection, FetchPosition, Ident, Statement, Value, ValueWithSpan,
};
use datafusion::sql::sqlparser::tokenizer::Token;

use crate::parse::ParseError;

/// `words` (after `FETCH`) without a trailing `WITH (TIMEOUT = 'x')`
/// (Materialize's spelling: how long a `FETCH` of a subscription may
/// wait), and the timeout's text.
pub fn split_timeout<'a, 'b>(
    words: &'a [&'b Token],
) -> Result<(&'a [&'b Token], Option<String>), ParseError> {
    let Some(with) = words
        .iter()
        .position(|t| matches!(t, Token::Word(w) if w.quote_style.is_none() && is(w, "with")))
    else {
        return Ok((words, None));
    };
    let timeout = match &words[with + 1..] {
        [Token::LParen, Token::Word(name), Token::Eq, value, Token::RParen]
            if is(name, "timeout") =>
        {
            match value {
                Token::SingleQuotedString(text) | Token::Number(text, _) => text.clone(),
                other => {
                    return Err(ParseError::Syntax(format!(
                        "TIMEOUT takes an interval, not {other}"
                    )))
                }
            }
        }
        _ => {
            return Err(ParseError::Syntax(
                "FETCH takes WITH (TIMEOUT = 'interval') only".into(),
            ))
        }
    };
    Ok((&words[..with], Some(timeout)))
}

/// The `FETCH` statement spelled by `words`, the words after `FETCH` or
/// `MOVE` (whitespace left out).
pub fn parse(words: &[&Token]) -> Result<Statement, ParseError> {
    let syntax = |what: String| ParseError::Syntax(format!("syntax error in FETCH: {what}"));
    let Some((Token::Word(name), direction)) = words.split_last() else {
        return Err(syntax("a cursor name must end it".into()));
    };
    let direction = match direction {
        [rest @ .., Token::Word(w)] if is(w, "from") || is(w, "in") => rest,
        all => all,
    };
    let direction = match direction {
        [] => FetchDirection::Next,
        [Token::Word(w)] if is(w, "next") => FetchDirection::Next,
        [Token::Word(w)] if is(w, "prior") => FetchDirection::Prior,
        [Token::Word(w)] if is(w, "first") => FetchDirection::First,
        [Token::Word(w)] if is(w, "last") => FetchDirection::Last,
        [Token::Word(w)] if is(w, "all") => FetchDirection::All,
        [Token::Word(w), count @ ..] if is(w, "absolute") => FetchDirection::Absolute {
            limit: number(count).ok_or_else(|| syntax("ABSOLUTE needs a count".into()))?,
        },
        [Token::Word(w), count @ ..] if is(w, "relative") => FetchDirection::Relative {
            limit: number(count).ok_or_else(|| syntax("RELATIVE needs a count".into()))?,
        },
        [Token::Word(w), Token::Word(all)] if is(w, "forward") && is(all, "all") => {
            FetchDirection::ForwardAll
        }
        [Token::Word(w), Token::Word(all)] if is(w, "backward") && is(all, "all") => {
            FetchDirection::BackwardAll
        }
        [Token::Word(w), count @ ..] if is(w, "forward") => FetchDirection::Forward {
            limit: optional_number(count).ok_or_else(|| syntax("bad FORWARD count".into()))?,
        },
        [Token::Word(w), count @ ..] if is(w, "backward") => FetchDirection::Backward {
            limit: optional_number(count).ok_or_else(|| syntax("bad BACKWARD count".into()))?,
        },
        count => FetchDirection::Count {
            limit: number(count).ok_or_else(|| {
                let words: Vec<String> = count.iter().map(|t| t.to_string()).collect();
                syntax(format!("unexpected \"{}\"", words.join(" ")))
            })?,
        },
    };
    Ok(Statement::Fetch {
        name: Ident {
            value: name.value.clone(),
            quote_style: name.quote_style,
            span: datafusion::sql::sqlparser::tokenizer::Span::empty(),
        },
        direction,
        position: FetchPosition::From,
        into: None,
    })
}

fn is(word: &datafusion::sql::sqlparser::tokenizer::Word, keyword: &str) -> bool {
    word.quote_style.is_none() && word.value.eq_ignore_ascii_case(keyword)
}

/// A whole number, perhaps signed.
fn number(tokens: &[&Token]) -> Option<ValueWithSpan> {
    let (sign, digits) = match tokens {
        [Token::Minus, Token::Number(n, _)] => ("-", n),
        [Token::Plus, Token::Number(n, _)] | [Token::Number(n, _)] => ("", n),
        _ => return None,
    };
    digits.parse::<i64>().ok()?;
    Some(Value::Number(format!("{sign}{digits}"), false).with_empty_span())
}

/// No count, or a number.
fn optional_number(tokens: &[&Token]) -> Option<Option<ValueWithSpan>> {
    if tokens.is_empty() {
        return Some(None);
    }
    number(tokens).map(Some)
}
