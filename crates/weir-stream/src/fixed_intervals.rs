//! `timestamp ± interval` by integer addition where the interval is a
//! constant of fixed length.
//!
//! Arrow adds an `interval` (months, days, nanoseconds) to a timestamp one
//! value at a time through calendar arithmetic (chrono), since a month has
//! no fixed length; that was a fifth of the CPU of Nexmark q5, whose `HOP`
//! computes every row's `window_end` as `window_start + INTERVAL '10'
//! SECOND`. A constant interval without months, added to a timestamp
//! without a time zone (whose days all have 24 hours), is a fixed number
//! of the timestamp's units: [`fixed_interval_arithmetic`] rewrites such
//! an addition or subtraction into one of a `duration` literal, which
//! Arrow computes as a checked integer addition over the whole array. The
//! result, its type and its overflow error are those of the calendar
//! arithmetic.
//!
//! Filters, projections (where `TUMBLE` and `HOP` compute `window_end`)
//! and join conditions apply it to their expressions when they are
//! instantiated; the stream plan keeps the expressions as planned, so that
//! the watermark analysis still reads their intervals. Other operators'
//! expressions (group keys, orderings) keep Arrow's arithmetic.

use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, Schema};
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::ScalarValue;
use datafusion::logical_expr::Operator as BinaryOp;
use datafusion::physical_expr::expressions::{BinaryExpr, Literal};
use datafusion::physical_expr::PhysicalExprRef;

use crate::watermark::interval_in_units;
use crate::Result;

/// `expr` over rows of `schema` with each `timestamp ± constant interval`
/// of fixed length computed as `timestamp ± duration`.
pub fn fixed_interval_arithmetic(
    expr: &PhysicalExprRef,
    schema: &Schema,
) -> Result<PhysicalExprRef> {
    let rewritten = Arc::clone(expr).transform_up(|node| {
        let Some(binary) = node.downcast_ref::<BinaryExpr>() else {
            return Ok(Transformed::no(node));
        };
        if !matches!(binary.op(), BinaryOp::Plus | BinaryOp::Minus) {
            return Ok(Transformed::no(node));
        }
        let Some(literal) = binary.right().downcast_ref::<Literal>() else {
            return Ok(Transformed::no(node));
        };
        let ScalarValue::IntervalMonthDayNano(Some(interval)) = literal.value() else {
            return Ok(Transformed::no(node));
        };
        let time_type = binary.left().data_type(schema)?;
        let DataType::Timestamp(unit, None) = &time_type else {
            return Ok(Transformed::no(node));
        };
        let Some(units) = interval_in_units(*interval, &time_type) else {
            return Ok(Transformed::no(node));
        };
        let duration = ScalarValue::Int64(Some(units)).cast_to(&DataType::Duration(*unit))?;
        let fixed: PhysicalExprRef = Arc::new(BinaryExpr::new(
            Arc::clone(binary.left()),
            *binary.op(),
            Arc::new(Literal::new(duration)),
        ));
        Ok(Transformed::yes(fixed))
    })?;
    Ok(rewritten.data)
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::array::{Array, ArrayRef, TimestampMicrosecondArray};
    use datafusion::arrow::datatypes::{Field, IntervalMonthDayNano, TimeUnit};
    use datafusion::arrow::record_batch::RecordBatch;
    use datafusion::physical_expr::expressions::Column;

    use super::*;

    fn micros() -> DataType {
        DataType::Timestamp(TimeUnit::Microsecond, None)
    }

    /// `ts op interval` over a timestamp column `ts`.
    fn shifted(op: BinaryOp, interval: IntervalMonthDayNano) -> PhysicalExprRef {
        Arc::new(BinaryExpr::new(
            Arc::new(Column::new("ts", 0)),
            op,
            Arc::new(Literal::new(ScalarValue::IntervalMonthDayNano(Some(
                interval,
            )))),
        ))
    }

    fn evaluate(expr: &PhysicalExprRef, times: ArrayRef) -> ArrayRef {
        let schema = Arc::new(Schema::new(vec![Field::new(
            "ts",
            times.data_type().clone(),
            true,
        )]));
        let batch = RecordBatch::try_new(schema, vec![times]).unwrap();
        expr.evaluate(&batch)
            .unwrap()
            .into_array(batch.num_rows())
            .unwrap()
    }

    #[test]
    fn fixed_intervals_add_as_durations_with_the_calendar_result() {
        let schema = Schema::new(vec![Field::new("ts", micros(), true)]);
        let times: ArrayRef = Arc::new(TimestampMicrosecondArray::from(vec![
            Some(1_700_000_000_123_456),
            None,
            Some(-86_400_000_001),
            Some(0),
        ]));
        // 1 day, 2 hours and 5 microseconds.
        let interval = IntervalMonthDayNano::new(0, 1, 7_200_000_005_000);
        for op in [BinaryOp::Plus, BinaryOp::Minus] {
            let planned = shifted(op, interval);
            let fixed = fixed_interval_arithmetic(&planned, &schema).unwrap();
            let added = fixed.downcast_ref::<BinaryExpr>().unwrap().right();
            assert_eq!(
                added.data_type(&schema).unwrap(),
                DataType::Duration(TimeUnit::Microsecond),
                "{op}: rewritten to a duration: {fixed}"
            );
            let want = evaluate(&planned, times.clone());
            let got = evaluate(&fixed, times.clone());
            assert_eq!(got.as_ref(), want.as_ref(), "{op}");
            assert_eq!(got.data_type(), &micros());
        }
    }

    #[test]
    fn months_zones_and_fractions_of_a_unit_keep_the_calendar_arithmetic() {
        let zoned = DataType::Timestamp(TimeUnit::Microsecond, Some("Europe/Paris".into()));
        let cases = [
            (IntervalMonthDayNano::new(1, 0, 0), micros()),
            (IntervalMonthDayNano::new(0, 1, 0), zoned),
            (IntervalMonthDayNano::new(0, 0, 1), micros()),
        ];
        for (interval, time_type) in cases {
            let schema = Schema::new(vec![Field::new("ts", time_type, true)]);
            let planned = shifted(BinaryOp::Plus, interval);
            let kept = fixed_interval_arithmetic(&planned, &schema).unwrap();
            assert_eq!(kept.to_string(), planned.to_string(), "{interval:?}");
        }
    }

    #[test]
    fn overflow_fails_as_the_calendar_arithmetic_does() {
        let schema = Schema::new(vec![Field::new("ts", micros(), true)]);
        let times: ArrayRef = Arc::new(TimestampMicrosecondArray::from(vec![i64::MAX - 1]));
        let interval = IntervalMonthDayNano::new(0, 0, 1_000_000);
        let planned = shifted(BinaryOp::Plus, interval);
        let fixed = fixed_interval_arithmetic(&planned, &schema).unwrap();
        let batch = RecordBatch::try_new(Arc::new(schema), vec![times]).unwrap();
        assert!(planned.evaluate(&batch).is_err());
        assert!(fixed.evaluate(&batch).is_err());
    }
}
