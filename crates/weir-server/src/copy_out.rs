//! `COPY table | (query) TO STDOUT` in PostgreSQL's text, CSV and binary
//! formats.
//!
//! The query runs at the session's read snapshot like a SELECT, and its
//! rows stream to the client as they are produced; each row becomes one
//! CopyData message, encoded by arrow-pg's value encoder
//! through pgwire's `CopyEncoder` (the same text and binary forms a SELECT
//! sends).

use std::sync::Arc;

use arrow_pg::datatypes::arrow_schema_to_pg_fields;
use arrow_pg::encoder::encode_value;
use bytes::{BufMut, BytesMut};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::sql::sqlparser::ast::{CopySource, CopyTarget, Ident, Statement};
use futures::stream::{self, StreamExt};
use pgwire::api::portal::Format;
use pgwire::api::results::{CopyCsvOptions, CopyEncoder, CopyTextOptions, FieldInfo};
use pgwire::error::PgWireResult;
use pgwire::messages::copy::CopyData;
use pgwire::types::format::FormatOptions;

use crate::copy::{parse_format, CopyFormat};
use crate::error::{WeirError, WeirResult};
use crate::rows::RowStream;
use crate::session::{Output, Session};

/// Whether a statement is `COPY ... TO`.
pub fn is_copy_out(statement: &Statement) -> bool {
    matches!(statement, Statement::Copy { to: true, .. })
}

/// Runs `COPY ... TO STDOUT`: the rows as CopyData messages.
pub async fn run(session: &Session, statement: &Statement) -> WeirResult<Output> {
    let (source, format) = target_format(statement)?;
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
    // Column names as a SELECT sends them (the CSV header shows them).
    let (schema, rows) = session.query(&query, &None).await?;
    encode(session, &format, schema, rows)
}

/// `COPY (SUBSCRIBE ...) TO STDOUT`: `statement` is the `COPY` with the
/// subscription's place taken by a query, whose format applies to `rows`.
pub fn run_rows(
    session: &Session,
    statement: &Statement,
    schema: SchemaRef,
    rows: RowStream,
) -> WeirResult<Output> {
    let (_, format) = target_format(statement)?;
    encode(session, &format, schema, rows)
}

/// What a `COPY ... TO STDOUT` reads and the format it writes.
fn target_format(statement: &Statement) -> WeirResult<(&CopySource, CopyFormat)> {
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
    Ok((source, parse_format(options, legacy_options)?))
}

/// `rows` as the CopyData messages of `format`.
fn encode(
    session: &Session,
    format: &CopyFormat,
    schema: SchemaRef,
    rows: RowStream,
) -> WeirResult<Output> {
    let wire_format = if format.binary {
        Format::UnifiedBinary
    } else {
        Format::UnifiedText
    };
    let mut options = FormatOptions::default();
    options.time_zone = session.settings.lock().arrow_time_zone();
    let fields = Arc::new(arrow_schema_to_pg_fields(
        &schema,
        &wire_format,
        Some(Arc::new(options)),
    )?);
    let header = if format.binary {
        Some(binary_header())
    } else if format.header {
        let names: Vec<String> = schema.fields().iter().map(|f| f.name().clone()).collect();
        let line = names.join(&(format.delimiter as char).to_string()) + "\n";
        Some(CopyData::new(line.into_bytes().into()))
    } else {
        None
    };
    let columns = fields.len();
    let mut rows_out = RowEncoder {
        encoder: encoder(format, fields.clone()),
        fields,
        schema,
        binary: format.binary,
        first: true,
    };
    let data = stream::iter(header.map(Ok))
        .chain(rows.flat_map(move |batch| {
            let messages = match batch {
                Ok(batch) => rows_out.encode(&batch),
                Err(error) => vec![Err(error.into())],
            };
            stream::iter(messages)
        }))
        .boxed();
    Ok(Output::CopyOut {
        binary: format.binary,
        columns,
        data,
    })
}

/// `batch`'s rows in COPY's text format, as `COPY ... TO STDOUT` writes
/// them (in UTC): what a sink copies into PostgreSQL.
pub(crate) fn text_rows(batch: &RecordBatch) -> WeirResult<bytes::Bytes> {
    let schema = batch.schema();
    let fields = Arc::new(arrow_schema_to_pg_fields(
        &schema,
        &Format::UnifiedText,
        Some(Arc::new(FormatOptions::default())),
    )?);
    let format = CopyFormat::text();
    let mut rows = RowEncoder {
        encoder: encoder(&format, fields.clone()),
        fields,
        schema,
        binary: false,
        first: true,
    };
    let mut text = BytesMut::new();
    for message in rows.encode(batch) {
        text.put_slice(&message?.data);
    }
    Ok(text.freeze())
}

/// Encodes rows as CopyData messages, one per row (the protocol's unit),
/// with the values encoded as a SELECT's DataRows are.
struct RowEncoder {
    encoder: CopyEncoder,
    fields: Arc<Vec<FieldInfo>>,
    schema: SchemaRef,
    binary: bool,
    /// No row was encoded yet.
    first: bool,
}

impl RowEncoder {
    /// The messages of one batch's rows; encoding stops at an error (a
    /// panic included: see `panics.rs`).
    fn encode(&mut self, batch: &RecordBatch) -> Vec<PgWireResult<CopyData>> {
        let rows = (0..batch.num_rows()).map(|row| self.encode_row(batch, row));
        let mut messages: Vec<PgWireResult<CopyData>> = Vec::with_capacity(batch.num_rows());
        for message in crate::panics::guard_rows(rows) {
            let failed = message.is_err();
            messages.push(message);
            if failed {
                break;
            }
        }
        messages
    }

    /// One row's message.
    fn encode_row(&mut self, batch: &RecordBatch, row: usize) -> PgWireResult<CopyData> {
        for (column, field) in self.fields.iter().enumerate() {
            encode_value(
                &mut self.encoder,
                batch.column(column),
                row,
                self.schema.field(column),
                field,
            )?;
        }
        let mut data = self.encoder.take_copy();
        if self.binary && std::mem::take(&mut self.first) {
            // pgwire's encoder puts the file header before the first
            // row; Weir sent it already, so that an empty result is a
            // valid file too (the vendored pgwire sends it in one message
            // with the first row or the trailer, as PostgreSQL does).
            data = CopyData::new(data.data.slice(BINARY_HEADER_LEN..));
        }
        Ok(data)
    }
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

fn encoder(format: &CopyFormat, fields: Arc<Vec<FieldInfo>>) -> CopyEncoder {
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
