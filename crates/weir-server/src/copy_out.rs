//! `COPY table | (query) TO STDOUT` in PostgreSQL's text, CSV and binary
//! formats.
//!
//! The query runs at the session's read snapshot like a SELECT; each row
//! becomes one CopyData message, encoded by arrow-pg's value encoder
//! through pgwire's `CopyEncoder` (the same text and binary forms a SELECT
//! sends).

use std::sync::Arc;

use arrow_pg::datatypes::arrow_schema_to_pg_fields;
use arrow_pg::encoder::encode_value;
use bytes::{BufMut, BytesMut};
use datafusion::sql::sqlparser::ast::{CopySource, CopyTarget, Ident, Statement};
use pgwire::api::portal::Format;
use pgwire::api::results::{CopyCsvOptions, CopyEncoder, CopyTextOptions};
use pgwire::messages::copy::CopyData;
use pgwire::types::format::FormatOptions;

use crate::copy::{parse_format, CopyFormat};
use crate::error::{WeirError, WeirResult};
use crate::session::{Output, Session};

/// Whether a statement is `COPY ... TO`.
pub fn is_copy_out(statement: &Statement) -> bool {
    matches!(statement, Statement::Copy { to: true, .. })
}

/// Runs `COPY ... TO STDOUT`: the rows as CopyData messages.
pub async fn run(session: &Session, statement: &Statement) -> WeirResult<Output> {
    let Statement::Copy {
        source,
        target,
        options,
        legacy_options,
        ..
    } = statement
    else {
        return Err(WeirError::internal("not a COPY statement"));
    };
    if !matches!(target, CopyTarget::Stdout) {
        return Err(WeirError::unsupported(
            "COPY TO a file or program; use COPY ... TO STDOUT (psql's \\copy)",
        ));
    }
    let format = parse_format(options, legacy_options)?;
    let query = match source {
        CopySource::Query(query) => Statement::Query(query.clone()),
        CopySource::Table {
            table_name,
            columns,
        } => {
            let list = if columns.is_empty() {
                "*".to_owned()
            } else {
                columns
                    .iter()
                    .map(|c| Ident::with_quote('"', crate::catalog::normalize_ident(c)).to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            let mut statements = weir_sql::parse(&format!("SELECT {list} FROM {table_name}"))?;
            let Some(weir_sql::WeirStatement::Sql(query)) = statements.pop() else {
                return Err(WeirError::internal("COPY's table did not parse as a query"));
            };
            *query
        }
    };
    session.pin_for_read();
    let plan = session
        .plan(crate::colnames::disambiguate(&query), &None)
        .await?;
    let (schema, batches) = session.collect(plan).await?;
    // Column names as a SELECT sends them (the CSV header shows them).
    let schema = crate::colnames::wire_schema(&query, schema);
    let wire_format = if format.binary {
        Format::UnifiedBinary
    } else {
        Format::UnifiedText
    };
    let fields = Arc::new(arrow_schema_to_pg_fields(
        &schema,
        &wire_format,
        Some(Arc::new(FormatOptions::default())),
    )?);
    let mut encoder = encoder(&format, fields.clone());
    let mut messages = Vec::new();
    if format.binary {
        messages.push(binary_header());
    } else if format.header {
        let names: Vec<String> = schema.fields().iter().map(|f| f.name().clone()).collect();
        let line = names.join(&(format.delimiter as char).to_string()) + "\n";
        messages.push(CopyData::new(line.into_bytes().into()));
    }
    let mut rows = 0;
    // One CopyData message per row is the protocol's unit; the values are
    // encoded as a SELECT's DataRows are.
    for batch in &batches {
        for row in 0..batch.num_rows() {
            for (column, field) in fields.iter().enumerate() {
                encode_value(
                    &mut encoder,
                    batch.column(column),
                    row,
                    schema.field(column),
                    field,
                )?;
            }
            let mut data = encoder.take_copy();
            if format.binary && rows == 0 {
                // pgwire's encoder puts the file header before the first
                // row; Weir sent it already, so that an empty result is a
                // valid file too.
                data = CopyData::new(data.data.slice(BINARY_HEADER_LEN..));
            }
            messages.push(data);
            rows += 1;
        }
    }
    Ok(Output::CopyOut {
        binary: format.binary,
        columns: fields.len(),
        data: messages,
    })
}

/// Length of the binary COPY header: signature, flags, extension length.
const BINARY_HEADER_LEN: usize = 19;

/// The binary COPY file header.
fn binary_header() -> CopyData {
    let mut header = BytesMut::with_capacity(BINARY_HEADER_LEN);
    header.put_slice(b"PGCOPY\n\xFF\r\n\x00");
    header.put_i32(0);
    header.put_i32(0);
    CopyData::new(header.freeze())
}

fn encoder(format: &CopyFormat, fields: Arc<Vec<pgwire::api::results::FieldInfo>>) -> CopyEncoder {
    let byte = |b: u8| (b as char).to_string();
    if format.binary {
        CopyEncoder::new_binary(fields)
    } else if format.csv {
        CopyEncoder::new_csv(
            fields,
            CopyCsvOptions {
                delimiter: byte(format.delimiter).into(),
                quote: byte(format.quote).into(),
                escape: byte(format.escape).into(),
                null_string: format.null.clone().into(),
                force_quote: Vec::new(),
            },
        )
    } else {
        CopyEncoder::new_text(
            fields,
            CopyTextOptions {
                delimiter: byte(format.delimiter).into(),
                null_string: format.null.clone().into(),
            },
        )
    }
}
