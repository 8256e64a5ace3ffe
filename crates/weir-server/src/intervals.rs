//! Intervals compared and subtracted as PostgreSQL does.
//!
//! Arrow compares `interval` values field by field (months, then days,
//! then nanoseconds), so `interval '24 hours' = interval '1 day'` is false
//! and `interval '25 hours' > interval '1 day'` is false too. PostgreSQL
//! compares intervals by one length, a month counting 30 days and a day
//! 24 hours. And a timestamp difference is all nanoseconds in DataFusion
//! (`527:59:59`), where PostgreSQL moves whole days into the day field
//! (`21 days 23:59:59`, `justify_hours`).
//!
//! The analyzer rule [`rule`] runs after type coercion and rewrites a
//! comparison of two intervals into a comparison of their lengths
//! ([`interval_length`], exact in a 128-bit decimal), and a difference of
//! two timestamps into its justified form.

use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, AsArray, Decimal128Array};
use datafusion::arrow::compute::kernels::cast::cast;
use datafusion::arrow::datatypes::{DataType, IntervalMonthDayNano, IntervalUnit};
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::Transformed;
use datafusion::common::{DFSchema, Result, ScalarValue};
use datafusion::logical_expr::{
    BinaryExpr, ColumnarValue, Expr, ExprSchemable, LogicalPlan, Operator, ScalarFunctionArgs,
    ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};
use datafusion::optimizer::AnalyzerRule;

const NANOS_PER_DAY: i128 = 86_400_000_000_000;
const INTERVAL: DataType = DataType::Interval(IntervalUnit::MonthDayNano);

/// An interval's length in nanoseconds, a month counting 30 days.
fn length(value: IntervalMonthDayNano) -> i128 {
    (value.months as i128 * 30 + value.days as i128) * NANOS_PER_DAY + value.nanoseconds as i128
}

/// Whole days of the time part moved into the day field, keeping the
/// sign of the time part (`justify_hours`).
fn justify_hours(value: IntervalMonthDayNano) -> IntervalMonthDayNano {
    let day = NANOS_PER_DAY as i64;
    IntervalMonthDayNano::new(
        value.months,
        value.days.saturating_add((value.nanoseconds / day) as i32),
        value.nanoseconds % day,
    )
}

/// What a function of this module computes.
#[derive(Debug, PartialEq, Eq, Hash, Clone, Copy)]
enum Kind {
    /// `interval` → its length, `numeric(38, 0)` nanoseconds.
    Length,
    /// `interval` → the same interval with whole days in the day field.
    JustifyHours,
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct IntervalFunction {
    kind: Kind,
    signature: Signature,
}

impl IntervalFunction {
    fn udf(kind: Kind) -> ScalarUDF {
        ScalarUDF::new_from_impl(IntervalFunction {
            kind,
            signature: Signature::any(1, Volatility::Immutable),
        })
    }
}

impl ScalarUDFImpl for IntervalFunction {
    fn name(&self) -> &str {
        match self.kind {
            Kind::Length => "weir_interval_length",
            Kind::JustifyHours => "weir_justify_hours",
        }
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(match self.kind {
            Kind::Length => DataType::Decimal128(38, 0),
            Kind::JustifyHours => INTERVAL,
        })
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let scalar = matches!(args.args[0], ColumnarValue::Scalar(_));
        let input = args.args[0].to_array(args.number_rows.max(1))?;
        let intervals = cast(&input, &INTERVAL)?;
        let intervals =
            intervals.as_primitive::<datafusion::arrow::datatypes::IntervalMonthDayNanoType>();
        let result: ArrayRef = match self.kind {
            Kind::Length => Arc::new(
                intervals
                    .iter()
                    .map(|v| v.map(length))
                    .collect::<Decimal128Array>()
                    .with_precision_and_scale(38, 0)?,
            ),
            Kind::JustifyHours => Arc::new(
                intervals.unary::<_, datafusion::arrow::datatypes::IntervalMonthDayNanoType>(
                    justify_hours,
                ),
            ),
        };
        if scalar {
            Ok(ColumnarValue::Scalar(ScalarValue::try_from_array(
                &result, 0,
            )?))
        } else {
            Ok(ColumnarValue::Array(result))
        }
    }
}

/// The rule (see the module documentation).
#[derive(Debug)]
struct PostgresIntervals;

fn is_interval(t: &DataType) -> bool {
    matches!(t, DataType::Interval(_))
}

fn rewrite(e: Expr, schema: &DFSchema) -> Result<Transformed<Expr>> {
    let Expr::BinaryExpr(BinaryExpr { left, op, right }) = &e else {
        return Ok(Transformed::no(e));
    };
    let (Ok(l), Ok(r)) = (left.get_type(schema), right.get_type(schema)) else {
        return Ok(Transformed::no(e));
    };
    let comparison = matches!(
        op,
        Operator::Eq
            | Operator::NotEq
            | Operator::Lt
            | Operator::LtEq
            | Operator::Gt
            | Operator::GtEq
            | Operator::IsDistinctFrom
            | Operator::IsNotDistinctFrom
    );
    if comparison && is_interval(&l) && is_interval(&r) {
        let length = IntervalFunction::udf(Kind::Length);
        return Ok(Transformed::yes(Expr::BinaryExpr(BinaryExpr::new(
            Box::new(length.call(vec![left.as_ref().clone()])),
            *op,
            Box::new(length.call(vec![right.as_ref().clone()])),
        ))));
    }
    let timestamps = matches!(l, DataType::Timestamp(..)) && matches!(r, DataType::Timestamp(..));
    if *op == Operator::Minus && timestamps {
        return Ok(Transformed::yes(
            IntervalFunction::udf(Kind::JustifyHours).call(vec![e]),
        ));
    }
    Ok(Transformed::no(e))
}

impl AnalyzerRule for PostgresIntervals {
    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        crate::plan_rewrite::rewrite_expressions(plan, &rewrite)
    }

    fn name(&self) -> &str {
        "weir_postgres_intervals"
    }
}

/// The rule, ready to add to a session.
pub fn rule() -> Arc<dyn AnalyzerRule + Send + Sync> {
    Arc::new(PostgresIntervals)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lengths_count_a_month_as_30_days() {
        let day = IntervalMonthDayNano::new(0, 1, 0);
        let hours_24 = IntervalMonthDayNano::new(0, 0, NANOS_PER_DAY as i64);
        assert_eq!(length(day), length(hours_24));
        assert_eq!(
            length(IntervalMonthDayNano::new(1, 0, 0)),
            30 * NANOS_PER_DAY
        );
        assert!(length(IntervalMonthDayNano::new(0, 0, 25 * 3_600_000_000_000)) > length(day));
    }

    #[test]
    fn justify_hours_moves_whole_days() {
        let hours = 3_600_000_000_000i64;
        assert_eq!(
            justify_hours(IntervalMonthDayNano::new(
                0,
                0,
                527 * hours + 59 * 60_000_000_000 + 59_000_000_000
            )),
            IntervalMonthDayNano::new(0, 21, 23 * hours + 59 * 60_000_000_000 + 59_000_000_000)
        );
        assert_eq!(
            justify_hours(IntervalMonthDayNano::new(0, 0, -25 * hours)),
            IntervalMonthDayNano::new(0, -1, -hours)
        );
    }
}
