//! `CREATE SECRET` and `DROP SECRET` (RisingWave's spelling), which
//! sqlparser does not read:
//!
//! - `CREATE SECRET [IF NOT EXISTS] name [WITH (backend = 'meta')] AS
//!   'value'`;
//! - `DROP SECRET [IF EXISTS] name [, ...]`.
//!
//! Connector options name a secret as `key = SECRET name`
//! ([`crate::parse`]'s option reader turns it into the key
//! `key@secret`: see [`secret_key`]).

use datafusion::sql::sqlparser::tokenizer::{Token, TokenWithSpan};

use crate::parse::{parse_options, ParseError};

/// A secret's value; its `Debug` does not show it, so that a logged
/// statement does not leak it.
#[derive(Clone, PartialEq)]
pub struct SecretValue(pub String);

impl std::fmt::Debug for SecretValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SecretValue(<redacted>)")
    }
}

/// `CREATE SECRET`.
#[derive(Debug, Clone, PartialEq)]
pub struct CreateSecret {
    /// Its name (lowercased unless quoted).
    pub name: String,
    /// Its value.
    pub value: SecretValue,
    /// `IF NOT EXISTS`.
    pub if_not_exists: bool,
}

/// `DROP SECRET`.
#[derive(Debug, Clone, PartialEq)]
pub struct DropSecret {
    /// The names.
    pub names: Vec<String>,
    /// `IF EXISTS`.
    pub if_exists: bool,
}

/// The option key under which `key = SECRET name` keeps the secret's
/// name. Keys are read from words and periods, so no key a user writes
/// unquoted ends so.
pub fn secret_key(key: &str) -> String {
    format!("{key}@secret")
}

/// The option key a secret reference stands for (`password@secret` →
/// `password`), if `key` is one.
pub fn referenced_key(key: &str) -> Option<&str> {
    key.strip_suffix("@secret")
}

fn syntax(what: &str) -> ParseError {
    ParseError::Syntax(what.into())
}

/// A word's name as PostgreSQL folds it.
fn name_of(token: Option<&Token>) -> Result<String, ParseError> {
    match token {
        Some(Token::Word(w)) if w.quote_style.is_some() => Ok(w.value.clone()),
        Some(Token::Word(w)) => Ok(w.value.to_lowercase()),
        _ => Err(syntax("expected a secret name")),
    }
}

fn is_word(token: Option<&&Token>, word: &str) -> bool {
    matches!(token, Some(Token::Word(w)) if w.quote_style.is_none() && w.value.eq_ignore_ascii_case(word))
}

/// `CREATE SECRET ...` (`tokens` start with `CREATE SECRET`).
pub(crate) fn parse_create_secret(tokens: &[&TokenWithSpan]) -> Result<CreateSecret, ParseError> {
    let words = crate::parse::words(tokens);
    let mut at = 2;
    let if_not_exists = is_word(words.get(at), "if");
    if if_not_exists {
        if !is_word(words.get(at + 1), "not") || !is_word(words.get(at + 2), "exists") {
            return Err(syntax("expected IF NOT EXISTS"));
        }
        at += 3;
    }
    let name = name_of(words.get(at).copied())?;
    at += 1;
    if is_word(words.get(at), "with") {
        let close = words[at..]
            .iter()
            .position(|t| matches!(t, Token::RParen))
            .ok_or_else(|| syntax("unterminated WITH options"))?;
        // The option tokens again, from the unfiltered list.
        let start = tokens
            .iter()
            .position(|t| std::ptr::eq(&t.token, words[at + 1]))
            .expect("a token of the list");
        let end = tokens
            .iter()
            .position(|t| std::ptr::eq(&t.token, words[at + close]))
            .expect("a token of the list");
        for (key, value) in parse_options(&tokens[start..=end])? {
            if key != "backend" || value != "meta" {
                return Err(ParseError::Syntax(format!(
                    "unsupported secret option {key} = '{value}'; secrets are kept in the catalog \
                     (backend = 'meta')"
                )));
            }
        }
        at += close + 1;
    }
    if !is_word(words.get(at), "as") {
        return Err(syntax("expected AS 'value' after the secret's name"));
    }
    let value = match words.get(at + 1) {
        Some(Token::SingleQuotedString(v)) => v.clone(),
        _ => return Err(syntax("a secret's value is a string literal")),
    };
    if words.len() != at + 2 {
        return Err(syntax("unexpected text after the secret's value"));
    }
    Ok(CreateSecret {
        name,
        value: SecretValue(value),
        if_not_exists,
    })
}

/// `DROP SECRET ...` (`tokens` start with `DROP SECRET`).
pub(crate) fn parse_drop_secret(tokens: &[&TokenWithSpan]) -> Result<DropSecret, ParseError> {
    let words = crate::parse::words(tokens);
    let mut at = 2;
    let if_exists = is_word(words.get(at), "if");
    if if_exists {
        if !is_word(words.get(at + 1), "exists") {
            return Err(syntax("expected IF EXISTS"));
        }
        at += 2;
    }
    let mut names = vec![name_of(words.get(at).copied())?];
    at += 1;
    while matches!(words.get(at), Some(Token::Comma)) {
        names.push(name_of(words.get(at + 1).copied())?);
        at += 2;
    }
    if words.len() != at {
        return Err(syntax("expected DROP SECRET [IF EXISTS] name [, ...]"));
    }
    Ok(DropSecret { names, if_exists })
}

#[cfg(test)]
mod tests {
    use crate::parse::{parse, WeirStatement};

    #[test]
    fn secrets_are_created_dropped_and_referenced() {
        let parsed = parse(
            "CREATE SECRET IF NOT EXISTS Pg_Pw WITH (backend = 'meta') AS 'hunter2';
             DROP SECRET IF EXISTS a, \"B\";
             CREATE SINK s AS SELECT 1 AS x WITH (connector = 'postgres', password = SECRET pg_pw)",
        )
        .unwrap();
        let WeirStatement::CreateSecret(create) = &parsed[0] else {
            panic!("{parsed:?}")
        };
        assert_eq!(create.name, "pg_pw");
        assert_eq!(create.value.0, "hunter2");
        assert!(create.if_not_exists);
        assert!(
            !format!("{parsed:?}").contains("hunter2"),
            "Debug hides the value"
        );
        let WeirStatement::DropSecret(drop) = &parsed[1] else {
            panic!("{parsed:?}")
        };
        assert_eq!(drop.names, ["a", "B"]);
        let WeirStatement::CreateSink(_, options) = &parsed[2] else {
            panic!("{parsed:?}")
        };
        assert!(options.contains(&("password@secret".into(), "pg_pw".into())));
        for bad in [
            "CREATE SECRET s AS 1",
            "CREATE SECRET s WITH (backend = 'vault') AS 'x'",
            "CREATE SECRET s AS 'x' extra",
            "DROP SECRET",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }
}
