//! `WATERMARK FOR col AS col - INTERVAL '...'` of sources and append-only
//! tables, read into the catalog's [`WatermarkDef`].

use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, Schema, TimeUnit};
use datafusion::arrow::record_batch::{RecordBatch, RecordBatchOptions};
use datafusion::common::{DFSchema, ScalarValue};
use datafusion::logical_expr::ColumnarValue;
use datafusion::sql::sqlparser::ast::{BinaryOperator, Expr};
use weir_sql::WatermarkClause;

use crate::catalog::{normalize_ident, ColumnDef, WatermarkDef};
use crate::error::{SqlState, WeirError, WeirResult};
use crate::session::Session;

const MICROS_PER_DAY: i64 = 86_400_000_000;

/// The watermark `clause` declares over `columns`: on a `timestamp` or
/// `timestamptz` column, as the column itself or the column minus a
/// constant interval without months.
pub fn watermark_def(
    session: &Session,
    columns: &[ColumnDef],
    clause: &WatermarkClause,
) -> WeirResult<WatermarkDef> {
    let column = columns
        .iter()
        .position(|c| c.name == clause.column)
        .ok_or_else(|| {
            WeirError::new(
                SqlState::UNDEFINED_COLUMN,
                format!("column \"{}\" does not exist", clause.column),
            )
        })?;
    let DataType::Timestamp(unit, _) = &columns[column].data_type else {
        return Err(WeirError::new(
            SqlState("42804"),
            format!(
                "WATERMARK FOR column \"{}\" must be timestamp or timestamptz",
                clause.column
            ),
        ));
    };
    let is_column = |e: &Expr| match e {
        Expr::Identifier(ident) => normalize_ident(ident) == clause.column,
        Expr::Nested(inner) => {
            matches!(inner.as_ref(), Expr::Identifier(i) if normalize_ident(i) == clause.column)
        }
        _ => false,
    };
    let delay = match &clause.expr {
        e if is_column(e) => 0,
        Expr::BinaryOp {
            left,
            op: BinaryOperator::Minus,
            right,
        } if is_column(left) => interval_micros(session, right)?,
        other => {
            return Err(WeirError::unsupported(format!(
                "WATERMARK FOR {0} AS {other}: the watermark must be {0} or {0} - INTERVAL '...'",
                clause.column
            )))
        }
    };
    let delay = match unit {
        TimeUnit::Second => delay / 1_000_000,
        TimeUnit::Millisecond => delay / 1_000,
        TimeUnit::Microsecond => delay,
        TimeUnit::Nanosecond => delay.saturating_mul(1_000),
    };
    Ok(WatermarkDef {
        column,
        delay,
        expr: clause.expr.to_string(),
    })
}

/// A constant interval expression in microseconds: no months (they have
/// no fixed length), not negative.
fn interval_micros(session: &Session, expr: &Expr) -> WeirResult<i64> {
    let invalid = |why: &str| {
        WeirError::new(
            SqlState("22023"),
            format!("WATERMARK FOR ... - {expr}: {why}"),
        )
    };
    let empty = DFSchema::empty();
    let logical = session
        .ctx()
        .parse_sql_expr(&format!("CAST(({expr}) AS INTERVAL)"), &empty)?;
    let physical = session.ctx().create_physical_expr(logical, &empty)?;
    let one_row = RecordBatch::try_new_with_options(
        Arc::new(Schema::empty()),
        vec![],
        &RecordBatchOptions::new().with_row_count(Some(1)),
    )?;
    let value = match physical.evaluate(&one_row)? {
        ColumnarValue::Scalar(value) => value,
        ColumnarValue::Array(array) => ScalarValue::try_from_array(&array, 0)?,
    };
    let ScalarValue::IntervalMonthDayNano(Some(interval)) = value else {
        return Err(invalid("the delay must be a constant interval"));
    };
    if interval.months != 0 {
        return Err(invalid("a delay in months or years has no fixed length"));
    }
    let micros = i64::from(interval.days) * MICROS_PER_DAY + interval.nanoseconds / 1_000;
    if micros < 0 {
        return Err(invalid("the delay cannot be negative"));
    }
    Ok(micros)
}
