//! Checks every written batch passes: NOT NULL, `varchar(n)`, unique keys.

use datafusion::arrow::array::{Array, AsArray, RecordBatch};
use datafusion::arrow::compute::concat_batches;
use datafusion::arrow::util::display::{ArrayFormatter, FormatOptions};
use weir_state::KeyViolation;

use crate::catalog::TableDef;
use crate::error::{SqlState, WeirError, WeirResult};

/// One batch with exactly the table's schema: checks NOT NULL (23502).
pub fn conform(def: &TableDef, batches: &[RecordBatch]) -> WeirResult<RecordBatch> {
    let schema = def.schema();
    let Some(first) = batches.first() else {
        return Ok(RecordBatch::new_empty(schema));
    };
    let batch = concat_batches(&first.schema(), batches)?;
    for (i, column) in def.columns.iter().enumerate() {
        if let Some(limit) = column.max_chars {
            check_char_limit(batch.column(i), limit)?;
        }
        if !column.nullable && batch.column(i).null_count() > 0 {
            return Err(WeirError::new(
                SqlState::NOT_NULL_VIOLATION,
                format!(
                    "null value in column \"{}\" of relation \"{}\" violates not-null constraint",
                    column.name, def.name
                ),
            ));
        }
    }
    Ok(RecordBatch::try_new(schema, batch.columns().to_vec())?)
}

/// `varchar(n)`: no value longer than `limit` characters (22001). The byte
/// lengths come from a kernel; only values with more bytes than `limit`
/// need their characters counted.
pub(super) fn check_char_limit(column: &dyn Array, limit: u64) -> WeirResult<()> {
    let Some(strings) = column.as_string_opt::<i32>() else {
        return Ok(());
    };
    let bytes = datafusion::arrow::compute::kernels::length::length(strings)?;
    let bytes = bytes.as_primitive::<datafusion::arrow::datatypes::Int32Type>();
    for (i, n) in bytes.iter().enumerate() {
        if n.is_some_and(|n| n as u64 > limit) && strings.value(i).chars().count() as u64 > limit {
            return Err(WeirError::new(
                SqlState("22001"),
                format!("value too long for type character varying({limit})"),
            ));
        }
    }
    Ok(())
}

/// Turns a refused write into PostgreSQL's unique-violation error.
pub fn check_write(
    def: &TableDef,
    rows: &RecordBatch,
    result: Result<(), KeyViolation>,
) -> WeirResult<()> {
    match result {
        Ok(()) => Ok(()),
        Err(violation) => Err(violation_error(def, rows, &violation, "already exists")?),
    }
}

/// 23505 for `violation` of `def`'s key or one of its unique constraints
/// by a row of `rows` (the table's columns), with the row's values in its
/// detail: `Key (a, b)=(1, 2) <what>.`
pub fn violation_error(
    def: &TableDef,
    rows: &RecordBatch,
    violation: &KeyViolation,
    what: &str,
) -> WeirResult<WeirError> {
    let (name, columns) = match violation.constraint.and_then(|i| def.unique.get(i)) {
        Some(unique) => (unique.name.clone(), unique.columns.as_slice()),
        None => (format!("{}_pkey", def.name), def.primary_key.as_slice()),
    };
    let options = FormatOptions::default().with_null("null");
    let mut values = Vec::new();
    for &k in columns {
        let formatter = ArrayFormatter::try_new(rows.column(k).as_ref(), &options)?;
        values.push(formatter.value(violation.row).to_string());
    }
    let names: Vec<&str> = columns
        .iter()
        .map(|&k| def.columns[k].name.as_str())
        .collect();
    Ok(WeirError::new(
        SqlState::UNIQUE_VIOLATION,
        format!("duplicate key value violates unique constraint \"{name}\""),
    )
    .with_detail(format!(
        "Key ({})=({}) {what}.",
        names.join(", "),
        values.join(", ")
    )))
}
