//! RisingWave's `FORMAT kind ENCODE encoding [(key = 'value', ...)]`
//! after a source's or sink's `WITH (...)`, read into the options Weir's
//! connectors take (Flink's names): for a source, `FORMAT PLAIN ENCODE
//! JSON` is `format = 'json'` (also `CSV`, `AVRO`, `PARQUET`); for a sink,
//! `FORMAT PLAIN` is `type = 'append-only'` and `FORMAT UPSERT` is `type =
//! 'upsert'`. `ENCODE CSV`'s `delimiter` becomes `csv.delimiter` and
//! `without_header = 'false'` becomes `csv.header = 'true'` (`'true'` is
//! Weir's default: no header line); other encode options pass through.

use datafusion::sql::sqlparser::tokenizer::{Token, TokenWithSpan};

use crate::parse::{parse_options, ParseError};

/// What the clause belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    /// `CREATE SOURCE`.
    Source,
    /// `CREATE SINK`.
    Sink,
}

impl Role {
    /// The formats it takes, for errors.
    fn takes(self) -> &'static str {
        match self {
            Role::Source => "source takes FORMAT PLAIN",
            Role::Sink => "sink takes FORMAT PLAIN or FORMAT UPSERT",
        }
    }

    /// The encodings it reads or writes, for errors.
    fn encodes(self) -> &'static str {
        match self {
            Role::Source => "source reads JSON, CSV, AVRO or PARQUET",
            Role::Sink => "sink writes JSON (Kafka) or PARQUET (files)",
        }
    }
}

/// The options the clause in `tokens` (from `FORMAT` on) stands for.
pub(crate) fn options(
    tokens: &[&TokenWithSpan],
    role: Role,
) -> Result<Vec<(String, String)>, ParseError> {
    let syntax = || {
        ParseError::Syntax(
            "expected FORMAT kind ENCODE encoding [(options)] after WITH (...)".into(),
        )
    };
    let words: Vec<&TokenWithSpan> = tokens
        .iter()
        .copied()
        .filter(|t| !matches!(t.token, Token::Whitespace(_)))
        .collect();
    let word = |i: usize| match words.get(i).map(|t| &t.token) {
        Some(Token::Word(w)) if w.quote_style.is_none() => Some(w.value.to_ascii_uppercase()),
        _ => None,
    };
    if word(0).as_deref() != Some("FORMAT") || word(2).as_deref() != Some("ENCODE") {
        return Err(syntax());
    }
    let (kind, encoding) = (word(1).ok_or_else(syntax)?, word(3).ok_or_else(syntax)?);
    let encode_options = match words.get(4) {
        None => Vec::new(),
        Some(_) => parse_options(&words[4..])?,
    };
    let mut options = Vec::new();
    match (role, kind.as_str()) {
        (Role::Source, "PLAIN") => {}
        (Role::Sink, "PLAIN") => options.push(("type".into(), "append-only".into())),
        (Role::Sink, "UPSERT") => options.push(("type".into(), "upsert".into())),
        (_, other) => {
            return Err(ParseError::Unsupported(format!(
                "FORMAT {other} is not supported: a {}",
                role.takes()
            )))
        }
    }
    let format = match (role, encoding.as_str()) {
        (_, "JSON") => "json",
        (_, "PARQUET") => "parquet",
        (Role::Source, "CSV") => "csv",
        (Role::Source, "AVRO") => "avro",
        (_, other) => {
            return Err(ParseError::Unsupported(format!(
                "ENCODE {other} is not supported here: a {}",
                role.encodes()
            )))
        }
    };
    options.push(("format".into(), format.into()));
    for (key, value) in encode_options {
        options.push(match key.as_str() {
            "without_header" => match value.to_ascii_lowercase().as_str() {
                "true" => continue,
                "false" => ("csv.header".into(), "true".into()),
                _ => {
                    return Err(ParseError::Syntax(format!(
                        "without_header = '{value}': use 'true' or 'false'"
                    )))
                }
            },
            "delimiter" => ("csv.delimiter".into(), value),
            "schema.registry" => {
                return Err(ParseError::Unsupported(
                    "schema.registry: Weir has no schema registry client; give the writer \
                     schema in avro.schema (with format 'avro-confluent' in WITH for \
                     Confluent's framing)"
                        .into(),
                ))
            }
            _ => (key, value),
        });
    }
    Ok(options)
}

/// `with` (the `WITH` options) and `clause` (the clause's) as one list:
/// an option both give must agree.
pub(crate) fn merge(
    mut with: Vec<(String, String)>,
    clause: Vec<(String, String)>,
) -> Result<Vec<(String, String)>, ParseError> {
    for (key, value) in clause {
        match with.iter().find(|(k, _)| canonical(k) == canonical(&key)) {
            // `format = 'avro-confluent'` in WITH refines ENCODE AVRO.
            Some((_, given)) if key == "format" && given.starts_with(value.as_str()) => {}
            Some((given_key, given)) if !given.eq_ignore_ascii_case(&value) => {
                return Err(ParseError::Syntax(format!(
                    "{given_key} = '{given}' in WITH disagrees with the FORMAT ... ENCODE clause ('{value}')"
                )))
            }
            Some(_) => {}
            None => with.push((key, value)),
        }
    }
    Ok(with)
}

/// The name connectors know option `key` by, where they take aliases.
fn canonical(key: &str) -> &str {
    match key {
        "value.format" | "encode" => "format",
        "csv.field-delimiter" => "csv.delimiter",
        other => other,
    }
}
