//! Sequence options in any order, as PostgreSQL takes them.
//!
//! sqlparser reads a sequence's options (`CREATE SEQUENCE s INCREMENT 1
//! START 5`, `GENERATED ALWAYS AS IDENTITY (START WITH 10 INCREMENT BY
//! 5)`) only in one order: `INCREMENT`, `MINVALUE`, `MAXVALUE`, `START`,
//! `CACHE`, `CYCLE`, after `AS type` and before `OWNED BY`. PostgreSQL
//! takes them in any order; so the statement's text is written again
//! with its options in sqlparser's order before it is parsed.

use datafusion::sql::sqlparser::ast::{DataType, ObjectName, SequenceOptions, Statement};
use datafusion::sql::sqlparser::tokenizer::Token;

use crate::ParseError;

/// `ALTER SEQUENCE [IF EXISTS] name [AS type] [options] [RESTART [[WITH]
/// n]] [OWNED BY table.column | NONE]`: only what it names changes.
#[derive(Debug, Clone, PartialEq)]
pub struct AlterSequence {
    /// The sequence.
    pub name: ObjectName,
    /// `IF EXISTS`.
    pub if_exists: bool,
    /// `AS type`.
    pub data_type: Option<DataType>,
    /// The options named, as `CREATE SEQUENCE` reads them.
    pub options: Vec<SequenceOptions>,
    /// `RESTART` (`Some(None)`: from the start value) or `RESTART WITH n`.
    pub restart: Option<Option<i64>>,
    /// `OWNED BY`.
    pub owned_by: Option<ObjectName>,
}

/// Reads `ALTER SEQUENCE` from `words` (its tokens without whitespace):
/// `RESTART` is taken out, and the rest is read as the options of a
/// `CREATE SEQUENCE` of the same name.
pub(crate) fn parse_alter(words: &[&Token]) -> Result<AlterSequence, ParseError> {
    let mut rest: Vec<String> = Vec::with_capacity(words.len());
    let mut restart = None;
    let mut if_exists = false;
    let mut i = 2;
    if words.get(i).is_some_and(|t| is_keyword(t, "if"))
        && words.get(i + 1).is_some_and(|t| is_keyword(t, "exists"))
    {
        if_exists = true;
        i += 2;
    }
    while i < words.len() {
        if is_keyword(words[i], "restart") {
            i += 1;
            if words.get(i).is_some_and(|t| is_keyword(t, "with")) {
                i += 1;
            }
            let negative = matches!(words.get(i), Some(Token::Minus));
            if negative {
                i += 1;
            }
            let value = match words.get(i) {
                Some(Token::Number(digits, _)) => {
                    i += 1;
                    let value: i64 = digits.parse().map_err(|_| {
                        ParseError::Syntax(format!("RESTART value {digits} is not a bigint"))
                    })?;
                    Some(if negative { -value } else { value })
                }
                _ if negative => {
                    return Err(ParseError::Syntax("RESTART WITH needs a number".into()))
                }
                _ => None,
            };
            restart = Some(value);
            continue;
        }
        rest.push(words[i].to_string());
        i += 1;
    }
    let text = format!("CREATE SEQUENCE {}", rest.join(" "));
    let tokens = datafusion::sql::sqlparser::tokenizer::Tokenizer::new(
        &datafusion::sql::sqlparser::dialect::PostgreSqlDialect {},
        &text,
    )
    .tokenize()
    .map_err(|e| ParseError::Syntax(e.to_string()))?;
    let create_words: Vec<&Token> = tokens
        .iter()
        .filter(|t| !matches!(t, Token::Whitespace(_)))
        .collect();
    let text = reorder(&create_words).unwrap_or(text);
    match crate::parse::parse_rewritten(&text)? {
        Statement::CreateSequence {
            name,
            data_type,
            sequence_options,
            owned_by,
            ..
        } => Ok(AlterSequence {
            name,
            if_exists,
            data_type,
            options: sequence_options,
            restart,
            owned_by,
        }),
        _ => Err(ParseError::Syntax("ALTER SEQUENCE does not parse".into())),
    }
}

/// The option clauses in the order sqlparser reads them; each is named by
/// its first word (`NO` clauses by their second).
const ORDER: [&str; 8] = [
    "as",
    "increment",
    "minvalue",
    "maxvalue",
    "start",
    "cache",
    "cycle",
    "owned",
];

/// `words` (a statement's tokens without whitespace) written again with
/// the options of `CREATE SEQUENCE` or of identity columns in sqlparser's
/// order; `None` if the statement has none out of order.
pub(crate) fn reorder(words: &[&Token]) -> Option<String> {
    let mut out: Vec<String> = Vec::with_capacity(words.len());
    let mut changed = false;
    if is_create_sequence(words) {
        // CREATE [TEMP[ORARY]] SEQUENCE [IF NOT EXISTS] name: the options
        // follow the name.
        let name_end = name_end(words)?;
        out.extend(words[..name_end].iter().map(|t| t.to_string()));
        let (clauses, rest) = clauses(&words[name_end..]);
        if !rest.is_empty() {
            return None;
        }
        changed |= write_sorted(&mut out, clauses);
    } else {
        let mut i = 0;
        while i < words.len() {
            out.push(words[i].to_string());
            let identity_list = is_keyword(words[i], "identity")
                && i > 0
                && is_keyword(words[i - 1], "as")
                && matches!(words.get(i + 1), Some(Token::LParen));
            i += 1;
            if identity_list {
                let close = i + words[i..].iter().position(|t| matches!(t, Token::RParen))?;
                out.push("(".into());
                let (clauses, rest) = clauses(&words[i + 1..close]);
                if !rest.is_empty() {
                    return None;
                }
                changed |= write_sorted(&mut out, clauses);
                out.push(")".into());
                i = close + 1;
            }
        }
    }
    changed.then(|| out.join(" "))
}

/// Whether the statement is `CREATE [TEMP] SEQUENCE`.
fn is_create_sequence(words: &[&Token]) -> bool {
    let mut at = 1;
    if !words.first().is_some_and(|t| is_keyword(t, "create")) {
        return false;
    }
    if words
        .get(at)
        .is_some_and(|t| is_keyword(t, "temp") || is_keyword(t, "temporary"))
    {
        at += 1;
    }
    words.get(at).is_some_and(|t| is_keyword(t, "sequence"))
}

/// Where the sequence's name ends (the index of the first option word).
fn name_end(words: &[&Token]) -> Option<usize> {
    let mut at = words.iter().position(|t| is_keyword(t, "sequence"))? + 1;
    if words.get(at).is_some_and(|t| is_keyword(t, "if")) {
        at += 3;
    }
    // The name: words joined by periods.
    at += 1;
    while matches!(words.get(at), Some(Token::Period)) {
        at += 2;
    }
    (at <= words.len()).then_some(at)
}

/// The option clauses at the start of `words`, each as its words with the
/// index of its kind in [`ORDER`]; and what is left.
fn clauses<'a>(words: &'a [&'a Token]) -> (Vec<(usize, &'a [&'a Token])>, &'a [&'a Token]) {
    let mut found = Vec::new();
    let mut rest = words;
    while let Some(first) = rest.first() {
        let negated = is_keyword(first, "no");
        let head = if negated { rest.get(1) } else { Some(first) };
        let Some(kind) = head.and_then(|h| ORDER.iter().position(|k| is_keyword(h, k))) else {
            break;
        };
        // The clause runs to the next clause's first word.
        let mut end = 1 + usize::from(negated);
        while end < rest.len() && !starts_clause(&rest[end..]) {
            end += 1;
        }
        found.push((kind, &rest[..end]));
        rest = &rest[end..];
    }
    (found, rest)
}

/// Whether `words` start an option clause (`BY` and `WITH` belong to the
/// clause before them).
fn starts_clause(words: &[&Token]) -> bool {
    let first = words[0];
    (is_keyword(first, "no")
        && words
            .get(1)
            .is_some_and(|t| ORDER.iter().any(|k| is_keyword(t, k))))
        || ORDER.iter().any(|k| is_keyword(first, k))
}

/// Writes `clauses` in sqlparser's order; returns whether that moved any.
fn write_sorted(out: &mut Vec<String>, mut clauses: Vec<(usize, &[&Token])>) -> bool {
    let sorted = clauses.windows(2).all(|w| w[0].0 <= w[1].0);
    clauses.sort_by_key(|(kind, _)| *kind);
    for (_, words) in clauses {
        out.extend(words.iter().map(|t| t.to_string()));
    }
    !sorted
}

fn is_keyword(token: &Token, word: &str) -> bool {
    matches!(token, Token::Word(w) if w.quote_style.is_none() && w.value.eq_ignore_ascii_case(word))
}

#[cfg(test)]
mod tests {
    use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
    use datafusion::sql::sqlparser::tokenizer::Tokenizer;

    use super::*;

    fn reordered(sql: &str) -> Option<String> {
        let tokens = Tokenizer::new(&PostgreSqlDialect {}, sql)
            .tokenize()
            .unwrap();
        let words: Vec<&Token> = tokens
            .iter()
            .filter(|t| !matches!(t, Token::Whitespace(_)))
            .collect();
        reorder(&words)
    }

    #[test]
    fn create_sequence_options_are_put_in_sqlparsers_order() {
        assert_eq!(
            reordered("CREATE SEQUENCE s START 5 INCREMENT -1 MINVALUE 1 OWNED BY t.id").as_deref(),
            Some("CREATE SEQUENCE s INCREMENT - 1 MINVALUE 1 START 5 OWNED BY t . id")
        );
        assert_eq!(
            reordered("create sequence if not exists public.s no cycle as integer").as_deref(),
            Some("create sequence if not exists public . s as integer no cycle")
        );
        // Already in order: nothing to write again.
        assert_eq!(
            reordered("CREATE SEQUENCE s INCREMENT BY 2 START WITH 3"),
            None
        );
    }

    #[test]
    fn alter_sequence_takes_restart_and_any_options() {
        let parsed =
            crate::parse("ALTER SEQUENCE IF EXISTS s RESTART WITH 50 INCREMENT BY 2 OWNED BY t.id")
                .unwrap();
        let [crate::WeirStatement::AlterSequence(alter)] = parsed.as_slice() else {
            panic!("{parsed:?}");
        };
        assert!(alter.if_exists);
        assert_eq!(alter.name.to_string(), "s");
        assert_eq!(alter.restart, Some(Some(50)));
        assert_eq!(alter.options.len(), 1);
        assert_eq!(
            alter.owned_by.as_ref().map(|o| o.to_string()).as_deref(),
            Some("t.id")
        );
        let parsed = crate::parse("alter sequence s restart").unwrap();
        let [crate::WeirStatement::AlterSequence(alter)] = parsed.as_slice() else {
            panic!("{parsed:?}");
        };
        assert_eq!((alter.if_exists, alter.restart), (false, Some(None)));
        assert!(crate::parse("ALTER SEQUENCE s RESTART WITH -").is_err());
    }

    #[test]
    fn identity_options_are_put_in_sqlparsers_order() {
        assert_eq!(
            reordered(
                "CREATE TABLE t (id int GENERATED ALWAYS AS IDENTITY (START WITH 10 INCREMENT BY 5) PRIMARY KEY, v text)"
            )
            .as_deref(),
            Some(
                "CREATE TABLE t ( id int GENERATED ALWAYS AS IDENTITY ( INCREMENT BY 5 START WITH 10 ) PRIMARY KEY , v text )"
            )
        );
        assert_eq!(
            reordered("CREATE TABLE t (id int GENERATED ALWAYS AS IDENTITY)"),
            None
        );
    }
}
