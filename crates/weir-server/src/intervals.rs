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
//! comparison of two intervals into a comparison of their lengths (exact
//! in a 128-bit decimal), and a difference of two timestamps into its
//! justified form, and `date ± interval` into a timestamp's (DataFusion
//! keeps a date and drops the interval's time), reading a date compared
//! with such a timestamp, or subtracted from or `BETWEEN` them, as its
//! midnight (type coercion, before, had made both sides dates). DataFusion cannot multiply or divide an interval by a
//! number at all; [`IntervalArithmetic`] plans `interval * n` and
//! `interval / n` as PostgreSQL's `interval_mul` computes them (fractions
//! of months spill into days, of days into time).

use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, AsArray, Float64Array, IntervalMonthDayNanoArray};
use datafusion::arrow::compute::kernels::cast::cast;
use datafusion::arrow::datatypes::{
    DataType, Decimal128Type, Float64Type, IntervalMonthDayNano, IntervalMonthDayNanoType,
    IntervalUnit, TimeUnit,
};
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::Transformed;
use datafusion::common::{DFSchema, DataFusionError, Result};
use datafusion::functions::utils::make_scalar_function;
use datafusion::logical_expr::planner::{ExprPlanner, PlannerResult, RawBinaryExpr};
use datafusion::logical_expr::{
    Between, BinaryExpr, ColumnarValue, Expr, ExprSchemable, LogicalPlan, Operator,
    ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};
use datafusion::optimizer::AnalyzerRule;
use datafusion::sql::sqlparser::ast::BinaryOperator as SqlOperator;

use crate::error::{SqlState, WeirError};

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
    /// `(interval, double precision)` → the interval times the number.
    Multiply,
    /// `(interval, double precision)` → the interval divided by the number.
    Divide,
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
            signature: match kind {
                Kind::Length | Kind::JustifyHours => Signature::any(1, Volatility::Immutable),
                Kind::Multiply | Kind::Divide => {
                    Signature::exact(vec![INTERVAL, DataType::Float64], Volatility::Immutable)
                }
            },
        })
    }
}

impl ScalarUDFImpl for IntervalFunction {
    fn name(&self) -> &str {
        match self.kind {
            Kind::Length => "weir_interval_length",
            Kind::JustifyHours => "weir_justify_hours",
            Kind::Multiply => "weir_interval_mul",
            Kind::Divide => "weir_interval_div",
        }
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(match self.kind {
            Kind::Length => DataType::Decimal128(38, 0),
            Kind::JustifyHours | Kind::Multiply | Kind::Divide => INTERVAL,
        })
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let compute = |inputs: &[ArrayRef]| -> Result<ArrayRef> {
            let intervals = cast(&inputs[0], &INTERVAL)?;
            let intervals = intervals.as_primitive::<IntervalMonthDayNanoType>();
            Ok(match self.kind {
                Kind::Length => Arc::new(
                    intervals
                        .unary::<_, Decimal128Type>(length)
                        .with_precision_and_scale(38, 0)?,
                ),
                Kind::JustifyHours => {
                    Arc::new(intervals.unary::<_, IntervalMonthDayNanoType>(justify_hours))
                }
                Kind::Multiply | Kind::Divide => Arc::new(scale(
                    intervals,
                    inputs[1].as_primitive::<Float64Type>(),
                    self.kind == Kind::Divide,
                )?),
            })
        };
        make_scalar_function(compute, vec![])(&args.args)
    }
}

/// `interval * factor` as PostgreSQL's `interval_mul` computes it: each
/// field scaled, the fraction of the months spilled into days (30 per
/// month) and the fraction of the days into time, to the microsecond.
fn multiply(value: IntervalMonthDayNano, factor: f64) -> Option<IntervalMonthDayNano> {
    const SECONDS_PER_DAY: f64 = 86_400.0;
    let months = value.months as f64 * factor;
    let days = value.days as f64 * factor;
    let (whole_months, whole_days) = (months.trunc(), days.trunc());
    let month_days = ((months - whole_months) * 30.0 * 1e6).round() / 1e6;
    let mut seconds =
        ((days - whole_days + month_days.fract()) * SECONDS_PER_DAY * 1e6).round() / 1e6;
    let mut day_total = whole_days + month_days.trunc();
    if seconds.abs() >= SECONDS_PER_DAY {
        let spill = (seconds / SECONDS_PER_DAY).trunc();
        day_total += spill;
        seconds -= spill * SECONDS_PER_DAY;
    }
    let nanos = ((value.nanoseconds as f64 * factor / 1e3).round() + (seconds * 1e6).round()) * 1e3;
    let fits = |v: f64, max: f64| v.is_finite() && v.abs() <= max;
    (fits(whole_months, i32::MAX as f64) && fits(day_total, i32::MAX as f64) && fits(nanos, 9.2e18))
        .then(|| IntervalMonthDayNano::new(whole_months as i32, day_total as i32, nanos as i64))
}

/// `intervals * factors` or `intervals / factors`; 22012 for a division
/// by zero, 22008 for a result out of range.
fn scale(
    intervals: &IntervalMonthDayNanoArray,
    factors: &Float64Array,
    divide: bool,
) -> Result<IntervalMonthDayNanoArray> {
    let error = |code, message| DataFusionError::External(Box::new(WeirError::new(code, message)));
    intervals
        .iter()
        .zip(factors.iter())
        .map(|(interval, factor)| {
            let (Some(interval), Some(factor)) = (interval, factor) else {
                return Ok(None);
            };
            if divide && factor == 0.0 {
                return Err(error(SqlState::DIVISION_BY_ZERO, "division by zero"));
            }
            let factor = if divide { 1.0 / factor } else { factor };
            multiply(interval, factor)
                .map(Some)
                .ok_or_else(|| error(SqlState("22008"), "interval out of range"))
        })
        .collect()
}

/// Plans `interval * number`, `number * interval` and `interval / number`
/// (see the module documentation).
#[derive(Debug)]
pub struct IntervalArithmetic;

impl ExprPlanner for IntervalArithmetic {
    fn plan_binary_op(
        &self,
        expr: RawBinaryExpr,
        schema: &DFSchema,
    ) -> Result<PlannerResult<RawBinaryExpr>> {
        let divide = match expr.op {
            SqlOperator::Multiply => false,
            SqlOperator::Divide => true,
            _ => return Ok(PlannerResult::Original(expr)),
        };
        let type_of = |e: &Expr| e.get_type(schema).ok();
        let (left, right) = (type_of(&expr.left), type_of(&expr.right));
        let number = |t: &Option<DataType>| t.as_ref().is_some_and(DataType::is_numeric);
        let interval = |t: &Option<DataType>| t.as_ref().is_some_and(is_interval);
        let (span, factor) = if interval(&left) && number(&right) {
            (expr.left, expr.right)
        } else if !divide && number(&left) && interval(&right) {
            (expr.right, expr.left)
        } else {
            return Ok(PlannerResult::Original(expr));
        };
        let kind = if divide { Kind::Divide } else { Kind::Multiply };
        let span = datafusion::logical_expr::cast(span, INTERVAL);
        let factor = datafusion::logical_expr::cast(factor, DataType::Float64);
        Ok(PlannerResult::Planned(
            IntervalFunction::udf(kind).call(vec![span, factor]),
        ))
    }
}

/// Registers [`IntervalArithmetic`] with `ctx`'s planner.
pub fn register(ctx: &datafusion::prelude::SessionContext) -> Result<()> {
    use datafusion::execution::FunctionRegistry;
    ctx.state_ref()
        .write()
        .register_expr_planner(Arc::new(IntervalArithmetic))
}

/// The rule (see the module documentation).
#[derive(Debug)]
struct PostgresIntervals;

fn is_interval(t: &DataType) -> bool {
    matches!(t, DataType::Interval(_))
}

fn rewrite(e: Expr, schema: &DFSchema) -> Result<Transformed<Expr>> {
    if let Expr::Between(between) = &e {
        return dates_between_timestamps(between, schema).map(|rewritten| match rewritten {
            Some(rewritten) => Transformed::yes(rewritten),
            None => Transformed::no(e),
        });
    }
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
    // `date ± interval` is a timestamp in PostgreSQL (DataFusion keeps a
    // date, dropping the interval's time: `date + interval '1 hour'`).
    // (`date + 1`, which DataFusion coerces to an interval, stays a date.)
    let written_interval = |e: &Expr, t: &DataType| match e {
        Expr::Cast(cast) => cast.expr.get_type(schema).is_ok_and(|t| is_interval(&t)),
        _ => is_interval(t),
    };
    let shifted_date = matches!(op, Operator::Plus | Operator::Minus)
        && ((l == DataType::Date32 && written_interval(right, &r))
            || (*op == Operator::Plus && written_interval(left, &l) && r == DataType::Date32));
    if shifted_date {
        let timestamp = DataType::Timestamp(TimeUnit::Nanosecond, None);
        let at_midnight = |e: &Expr, t: &DataType| -> Result<Expr> {
            if t == &DataType::Date32 {
                e.clone().cast_to(&timestamp, schema)
            } else {
                Ok(e.clone())
            }
        };
        return Ok(Transformed::yes(Expr::BinaryExpr(BinaryExpr::new(
            Box::new(at_midnight(left, &l)?),
            *op,
            Box::new(at_midnight(right, &r)?),
        ))));
    }
    // A date compared with (or subtracted from) a `date ± interval`
    // rewritten above: type coercion made both dates, the right side is
    // now a timestamp, so the date is read as its midnight, as PostgreSQL
    // reads it.
    let date_and_timestamp =
        |a: &DataType, b: &DataType| *a == DataType::Date32 && matches!(b, DataType::Timestamp(..));
    if (comparison || *op == Operator::Minus)
        && (date_and_timestamp(&l, &r) || date_and_timestamp(&r, &l))
    {
        let as_timestamp = |e: &Expr, t: &DataType, other: &DataType| -> Result<Expr> {
            if t == &DataType::Date32 {
                e.clone().cast_to(other, schema)
            } else {
                Ok(e.clone())
            }
        };
        let rewritten = Expr::BinaryExpr(BinaryExpr::new(
            Box::new(as_timestamp(left, &l, &r)?),
            *op,
            Box::new(as_timestamp(right, &r, &l)?),
        ));
        // A difference of two timestamps is justified, below.
        return rewrite(rewritten, schema).map(|t| Transformed::yes(t.data));
    }
    let timestamps = matches!(l, DataType::Timestamp(..)) && matches!(r, DataType::Timestamp(..));
    if *op == Operator::Minus && timestamps {
        return Ok(Transformed::yes(
            IntervalFunction::udf(Kind::JustifyHours).call(vec![e]),
        ));
    }
    Ok(Transformed::no(e))
}

/// `BETWEEN` whose bounds or value mix dates with timestamps (a bound
/// `date ± interval` that [`rewrite`] made a timestamp), with the dates
/// read as their midnights; `None` if it does not mix them.
fn dates_between_timestamps(between: &Between, schema: &DFSchema) -> Result<Option<Expr>> {
    let parts = [&between.expr, &between.low, &between.high];
    let types: Vec<DataType> = parts
        .iter()
        .map(|e| e.get_type(schema))
        .collect::<Result<_>>()?;
    let Some(timestamp) = types.iter().find(|t| matches!(t, DataType::Timestamp(..))) else {
        return Ok(None);
    };
    if !types.contains(&DataType::Date32) {
        return Ok(None);
    }
    let [expr, low, high] = parts.map(|e| -> Result<Box<Expr>> {
        Ok(Box::new(if e.get_type(schema)? == DataType::Date32 {
            e.as_ref().clone().cast_to(timestamp, schema)?
        } else {
            e.as_ref().clone()
        }))
    });
    Ok(Some(Expr::Between(Between {
        expr: expr?,
        negated: between.negated,
        low: low?,
        high: high?,
    })))
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
    fn multiplying_spills_fractions_down() {
        let hour = 3_600_000_000_000i64;
        assert_eq!(
            multiply(IntervalMonthDayNano::new(0, 1, 0), 2.0),
            Some(IntervalMonthDayNano::new(0, 2, 0))
        );
        assert_eq!(
            multiply(IntervalMonthDayNano::new(0, 1, 0), 0.5),
            Some(IntervalMonthDayNano::new(0, 0, 12 * hour))
        );
        assert_eq!(
            multiply(IntervalMonthDayNano::new(1, 0, 0), 1.5),
            Some(IntervalMonthDayNano::new(1, 15, 0))
        );
        assert_eq!(
            multiply(IntervalMonthDayNano::new(0, 0, hour), -3.0),
            Some(IntervalMonthDayNano::new(0, 0, -3 * hour))
        );
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
