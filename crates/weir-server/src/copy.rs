//! `COPY table FROM STDIN` in PostgreSQL's text and CSV formats (`COPY
//! ... TO STDOUT` is `copy_out.rs`).
//!
//! The client's data is buffered until `CopyDone`, split into fields (a
//! per-byte scanner: the formats are defined byte by byte), gathered into
//! text columns, and then stored like `INSERT ... SELECT` from those
//! columns: the same casts, defaults and constraint checks.

use std::borrow::Cow;
use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, StringBuilder};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::sql::sqlparser::ast::{
    CopyLegacyCsvOption, CopyLegacyOption, CopyOption, CopySource, CopyTarget, Statement,
};

use crate::catalog::{normalize_ident, relation_name, TableDef};
use crate::error::{SqlState, WeirError, WeirResult};

/// The most bytes one COPY may send; larger loads are split by the client.
pub const MAX_COPY_BYTES: usize = 1 << 30;

/// How the client's rows are written.
#[derive(Debug, Clone, PartialEq)]
pub struct CopyFormat {
    /// PostgreSQL's binary format.
    pub binary: bool,
    /// CSV (true) or PostgreSQL's text format (false).
    pub csv: bool,
    /// Field separator.
    pub delimiter: u8,
    /// The string that stands for NULL.
    pub null: String,
    /// Whether the first line is a header to skip.
    pub header: bool,
    /// CSV quote character.
    pub quote: u8,
    /// CSV escape character (inside quotes).
    pub escape: u8,
}

impl CopyFormat {
    pub(crate) fn text() -> Self {
        CopyFormat {
            binary: false,
            csv: false,
            delimiter: b'\t',
            null: "\\N".into(),
            header: false,
            quote: b'"',
            escape: b'"',
        }
    }

    fn make_csv(&mut self) {
        if !self.csv {
            self.csv = true;
            self.delimiter = b',';
            self.null = String::new();
        }
    }
}

/// A COPY in progress: where the rows go and the data received so far.
#[derive(Debug)]
pub struct CopyIn {
    /// The target table.
    pub table: TableDef,
    /// Indices of the columns the data holds, in order.
    pub columns: Vec<usize>,
    /// The data format.
    pub format: CopyFormat,
    /// Bytes received so far.
    pub data: Vec<u8>,
}

/// Checks a `COPY ... FROM STDIN` statement against the catalog.
pub fn start(catalog: &crate::catalog::Catalog, statement: &Statement) -> WeirResult<CopyIn> {
    let Statement::Copy {
        source,
        to,
        target,
        options,
        legacy_options,
        ..
    } = statement
    else {
        return Err(WeirError::internal("not a COPY statement"));
    };
    if *to || !matches!(target, CopyTarget::Stdin) {
        return Err(WeirError::unsupported(
            "only COPY ... FROM STDIN and COPY ... TO STDOUT are supported; use psql's \\copy for files",
        ));
    }
    let CopySource::Table {
        table_name,
        columns,
    } = source
    else {
        return Err(WeirError::unsupported("COPY FROM into a query"));
    };
    let table = catalog.table(&relation_name(table_name)?)?.clone();
    crate::dml::check_not_fed(&table)?;
    let columns = if columns.is_empty() {
        (0..table.columns.len()).collect()
    } else {
        columns
            .iter()
            .map(|c| {
                let name = normalize_ident(c);
                table.column_index(&name).ok_or_else(|| {
                    WeirError::new(
                        SqlState::UNDEFINED_COLUMN,
                        format!(
                            "column \"{name}\" of relation \"{}\" does not exist",
                            table.name
                        ),
                    )
                })
            })
            .collect::<WeirResult<_>>()?
    };
    let format = parse_format(options, legacy_options)?;
    Ok(CopyIn {
        table,
        columns,
        format,
        data: Vec::new(),
    })
}

/// The format a COPY statement's options ask for.
pub fn parse_format(
    options: &[CopyOption],
    legacy_options: &[CopyLegacyOption],
) -> WeirResult<CopyFormat> {
    let mut format = CopyFormat::text();
    for option in options {
        match option {
            CopyOption::Format(f) => match f.value.to_ascii_lowercase().as_str() {
                "csv" => format.make_csv(),
                "text" => {}
                "binary" => format.binary = true,
                other => return Err(WeirError::unsupported(format!("COPY format \"{other}\""))),
            },
            CopyOption::Delimiter(c) => format.delimiter = ascii(*c)?,
            CopyOption::Null(s) => format.null = s.clone(),
            CopyOption::Header(h) => format.header = *h,
            CopyOption::Quote(c) => format.quote = ascii(*c)?,
            CopyOption::Escape(c) => format.escape = ascii(*c)?,
            other => return Err(WeirError::unsupported(format!("COPY option {other}"))),
        }
    }
    for option in legacy_options {
        match option {
            CopyLegacyOption::Csv(csv_options) => {
                format.make_csv();
                for o in csv_options {
                    match o {
                        CopyLegacyCsvOption::Header => format.header = true,
                        CopyLegacyCsvOption::Quote(c) => format.quote = ascii(*c)?,
                        CopyLegacyCsvOption::Escape(c) => format.escape = ascii(*c)?,
                        other => {
                            return Err(WeirError::unsupported(format!("COPY option {other}")))
                        }
                    }
                }
            }
            CopyLegacyOption::Binary => format.binary = true,
            CopyLegacyOption::Delimiter(c) => format.delimiter = ascii(*c)?,
            CopyLegacyOption::Null(s) => format.null = s.clone(),
            other => return Err(WeirError::unsupported(format!("COPY option {other}"))),
        }
    }
    Ok(format)
}

fn ascii(c: char) -> WeirResult<u8> {
    u8::try_from(c)
        .ok()
        .filter(u8::is_ascii)
        .ok_or_else(|| WeirError::unsupported("COPY delimiters must be single-byte characters"))
}

impl CopyIn {
    /// Appends a chunk of CopyData.
    pub fn push(&mut self, bytes: &[u8]) -> WeirResult<()> {
        if self.data.len() + bytes.len() > MAX_COPY_BYTES {
            return Err(WeirError::new(
                SqlState::PROGRAM_LIMIT_EXCEEDED,
                format!("COPY data exceeds {MAX_COPY_BYTES} bytes; split the load"),
            ));
        }
        self.data.extend_from_slice(bytes);
        Ok(())
    }

    /// The received rows as columns named after the target columns: text
    /// for text and CSV (cast on insert), the columns' own types for binary.
    pub fn parse(&self) -> WeirResult<RecordBatch> {
        if self.format.binary {
            return crate::copy_binary::parse(&self.data, &self.table, &self.columns);
        }
        let mut builders: Vec<StringBuilder> =
            self.columns.iter().map(|_| StringBuilder::new()).collect();
        let text = std::str::from_utf8(&self.data).map_err(|e| {
            WeirError::new(
                SqlState("22021"),
                format!("invalid byte sequence for encoding \"UTF8\": {e}"),
            )
        })?;
        let mut line = 0;
        let mut append = |record: &[Option<Cow<str>>]| -> WeirResult<()> {
            line += 1;
            if self.format.header && line == 1 {
                return Ok(());
            }
            if record.len() != builders.len() {
                let problem = if record.len() > builders.len() {
                    "extra data after last expected column"
                } else {
                    "missing data for column"
                };
                return Err(
                    WeirError::new(SqlState::BAD_COPY_FORMAT, problem.to_string())
                        .with_detail(format!("COPY {}, line {line}", self.table.name)),
                );
            }
            for (builder, field) in builders.iter_mut().zip(record) {
                builder.append_option(field.as_deref());
            }
            Ok(())
        };
        if self.format.csv {
            for record in split_csv(text, &self.format)? {
                let record: Vec<Option<Cow<str>>> =
                    record.into_iter().map(|f| f.map(Cow::Owned)).collect();
                append(&record)?;
            }
        } else {
            for_each_text_record(text, &self.format, append)?;
        }
        text_columns(&self.table, &self.columns, &mut builders)
    }
}

/// The text columns `builders` hold, named as `def`'s columns `columns`:
/// what COPY's text is cast from.
pub(crate) fn text_columns(
    def: &TableDef,
    columns: &[usize],
    builders: &mut [StringBuilder],
) -> WeirResult<RecordBatch> {
    let fields: Vec<Field> = columns
        .iter()
        .map(|&c| Field::new(&def.columns[c].name, DataType::Utf8, true))
        .collect();
    let arrays: Vec<ArrayRef> = builders
        .iter_mut()
        .map(|b| Arc::new(b.finish()) as ArrayRef)
        .collect();
    Ok(RecordBatch::try_new(Arc::new(Schema::new(fields)), arrays)?)
}

/// Splits PostgreSQL text format: one row per line, fields separated by the
/// delimiter, backslash escapes, `\N` (or the NULL string) for NULL, and an
/// optional `\.` end marker. Hands each record's fields to `record`; a
/// line without backslashes (most are) is split in place, without copying
/// its fields.
pub(crate) fn for_each_text_record(
    text: &str,
    format: &CopyFormat,
    mut record: impl FnMut(&[Option<Cow<str>>]) -> WeirResult<()>,
) -> WeirResult<()> {
    let delimiter = format.delimiter as char;
    let mut fields: Vec<Option<Cow<str>>> = Vec::new();
    for line in text.split('\n') {
        let line = line.strip_suffix('\r').unwrap_or(line);
        if line == "\\." {
            break;
        }
        if line.is_empty() {
            continue;
        }
        fields.clear();
        if line.contains('\\') {
            fields.extend(
                unescape_text_line(line, format)
                    .into_iter()
                    .map(|f| f.map(Cow::Owned)),
            );
        } else {
            fields.extend(
                line.split(delimiter)
                    .map(|f| (f != format.null).then_some(Cow::Borrowed(f))),
            );
        }
        record(&fields)?;
    }
    Ok(())
}

/// The fields of one text-format line that holds backslash escapes.
fn unescape_text_line(line: &str, format: &CopyFormat) -> Vec<Option<String>> {
    let delimiter = format.delimiter as char;
    let mut fields = Vec::new();
    let mut raw = String::new();
    let mut chars = line.chars().peekable();
    let mut field = String::new();
    loop {
        match chars.next() {
            None => {
                fields.push(finish_text_field(&raw, field, format));
                break;
            }
            Some(c) if c == delimiter => {
                fields.push(finish_text_field(&raw, std::mem::take(&mut field), format));
                raw.clear();
            }
            Some('\\') => {
                raw.push('\\');
                let Some(next) = chars.next() else {
                    field.push('\\');
                    continue;
                };
                raw.push(next);
                match next {
                    'n' => field.push('\n'),
                    't' => field.push('\t'),
                    'r' => field.push('\r'),
                    'b' => field.push('\u{8}'),
                    'f' => field.push('\u{c}'),
                    'v' => field.push('\u{b}'),
                    'x' => {
                        let mut value = 0u32;
                        let mut digits = 0;
                        while digits < 2 {
                            match chars.peek().and_then(|d| d.to_digit(16)) {
                                Some(d) => {
                                    value = value * 16 + d;
                                    raw.push(chars.next().expect("peeked"));
                                    digits += 1;
                                }
                                None => break,
                            }
                        }
                        if digits == 0 {
                            field.push('x');
                        } else {
                            field.push(char::from_u32(value).unwrap_or('\u{fffd}'));
                        }
                    }
                    d @ '0'..='7' => {
                        let mut value = d.to_digit(8).expect("octal digit");
                        for _ in 0..2 {
                            match chars.peek().and_then(|d| d.to_digit(8)) {
                                Some(d) => {
                                    value = value * 8 + d;
                                    raw.push(chars.next().expect("peeked"));
                                }
                                None => break,
                            }
                        }
                        field.push(char::from_u32(value).unwrap_or('\u{fffd}'));
                    }
                    other => field.push(other),
                }
            }
            Some(c) => {
                raw.push(c);
                field.push(c);
            }
        }
    }
    fields
}

fn finish_text_field(raw: &str, field: String, format: &CopyFormat) -> Option<String> {
    (raw != format.null).then_some(field)
}

/// Splits CSV: quoted fields may hold delimiters, quotes (doubled or
/// escaped) and newlines; an unquoted field equal to the NULL string is
/// NULL.
fn split_csv(text: &str, format: &CopyFormat) -> WeirResult<Vec<Vec<Option<String>>>> {
    let (delimiter, quote, escape) = (
        format.delimiter as char,
        format.quote as char,
        format.escape as char,
    );
    let mut records = Vec::new();
    let mut chars = text.chars().peekable();
    let mut record: Vec<Option<String>> = Vec::new();
    let mut field = String::new();
    let mut quoted = false;
    let mut in_quotes = false;
    let mut line_start = true;
    while let Some(c) = chars.next() {
        if in_quotes {
            if c == escape && chars.peek() == Some(&quote) {
                chars.next();
                field.push(quote);
            } else if c == quote {
                in_quotes = false;
            } else {
                field.push(c);
            }
            continue;
        }
        if line_start && c == '\\' && chars.peek() == Some(&'.') {
            let mut rest = chars.clone();
            rest.next();
            if matches!(rest.peek(), None | Some('\n') | Some('\r')) {
                break;
            }
        }
        line_start = false;
        match c {
            c if c == quote => {
                in_quotes = true;
                quoted = true;
            }
            c if c == delimiter => {
                record.push(finish_csv_field(std::mem::take(&mut field), quoted, format));
                quoted = false;
            }
            '\r' if chars.peek() == Some(&'\n') => {}
            '\n' => {
                record.push(finish_csv_field(std::mem::take(&mut field), quoted, format));
                quoted = false;
                records.push(std::mem::take(&mut record));
                line_start = true;
            }
            other => field.push(other),
        }
    }
    if in_quotes {
        return Err(WeirError::new(
            SqlState::BAD_COPY_FORMAT,
            "unterminated CSV quoted field",
        ));
    }
    if !field.is_empty() || quoted || !record.is_empty() {
        record.push(finish_csv_field(field, quoted, format));
        records.push(record);
    }
    Ok(records)
}

fn finish_csv_field(field: String, quoted: bool, format: &CopyFormat) -> Option<String> {
    (quoted || field != format.null).then_some(field)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_format_escapes_and_nulls() {
        let format = CopyFormat::text();
        let mut rows: Vec<Vec<Option<String>>> = Vec::new();
        for_each_text_record(
            "1\ta\\tb\t\\N\n2\tx\\\\y\t\\101\n3\tplain\t\\N\n\\.\n4\tafter\tend\n",
            &format,
            |fields| {
                rows.push(
                    fields
                        .iter()
                        .map(|f| f.as_deref().map(str::to_owned))
                        .collect(),
                );
                Ok(())
            },
        )
        .unwrap();
        assert_eq!(
            rows,
            vec![
                vec![Some("1".into()), Some("a\tb".into()), None],
                vec![Some("2".into()), Some("x\\y".into()), Some("A".into())],
                vec![Some("3".into()), Some("plain".into()), None],
            ]
        );
    }

    #[test]
    fn csv_quotes_newlines_and_nulls() {
        let mut format = CopyFormat::text();
        format.make_csv();
        let rows = split_csv("1,\"a,b\",\n2,\"say \"\"hi\"\"\nthere\",\"\"\n", &format).unwrap();
        assert_eq!(
            rows,
            vec![
                vec![Some("1".into()), Some("a,b".into()), None],
                vec![
                    Some("2".into()),
                    Some("say \"hi\"\nthere".into()),
                    Some(String::new())
                ],
            ]
        );
        assert!(split_csv("1,\"open\n", &format).is_err());
    }
}
