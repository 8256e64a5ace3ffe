//! `sum` and `avg` with PostgreSQL's result types.
//!
//! DataFusion sums `bigint` into `bigint` (wrapping on overflow) and
//! averages integers into `double precision`. PostgreSQL sums `bigint`
//! into `numeric`, which cannot overflow, and averages integers into
//! `numeric`. [`cast_arguments`] rewrites a plan as the planner made it,
//! before type coercion, and casts the argument where the types differ:
//! `sum(bigint)` sums a `numeric(38,0)`, `avg` of an integer averages a
//! `numeric` of as many digits. `sum` of `smallint`
//! and `integer` stays DataFusion's `bigint`, as in PostgreSQL. The stream
//! engine's running sums follow the same types, so a view and a query
//! agree.
//!
//! A plan rewrite rather than replacement functions: a function's
//! coercion must be idempotent (DataFusion coerces arguments that were coerced before),
//! and `sum(integer)` and `sum(bigint)` both sum an `Int64`, into
//! different types. Before coercion the argument still has its own type.

use datafusion::arrow::datatypes::DataType;
use datafusion::common::tree_node::Transformed;
use datafusion::common::{DFSchema, Result};
use datafusion::logical_expr::{Expr, ExprSchemable, LogicalPlan, WindowFunctionDefinition};

use crate::plan_rewrite::rewrite_expressions;

/// The `numeric` that `bigint`s are summed in: 38 digits hold the sum of
/// any number of `bigint`s a table can hold.
const SUMMED_BIGINT: DataType = DataType::Decimal128(38, 0);

/// The `numeric` an integer of type `arg` is averaged in: one with as many
/// digits (so that the average, never larger than the largest value, has
/// 20 fraction digits' room, `average.rs`).
fn averaged_integer(arg: &DataType) -> DataType {
    let digits = match arg {
        DataType::Int8 | DataType::UInt8 => 3,
        DataType::Int16 | DataType::UInt16 => 5,
        DataType::Int32 | DataType::UInt32 => 10,
        DataType::Int64 => 19,
        _ => 20,
    };
    DataType::Decimal128(digits, 0)
}

/// The type `function`'s argument of type `arg` is cast to, if any.
fn argument_type(function: &str, arg: &DataType) -> Option<DataType> {
    match function {
        "sum" if matches!(arg, DataType::Int64 | DataType::UInt64) => Some(SUMMED_BIGINT),
        "avg" | "mean" if arg.is_integer() => Some(averaged_integer(arg)),
        _ => None,
    }
}

/// Casts the only argument in `args` for `function`, if it needs a cast;
/// whether it did.
fn cast_argument(function: &str, args: &mut [Expr], schema: &DFSchema) -> bool {
    let [arg] = args else {
        return false;
    };
    let target = arg
        .get_type(schema)
        .ok()
        .and_then(|t| argument_type(function, &t));
    match target.and_then(|t| arg.clone().cast_to(&t, schema).ok()) {
        Some(cast) => {
            *arg = cast;
            true
        }
        None => false,
    }
}

/// `plan` with the arguments of `sum` and `avg` cast to the types
/// PostgreSQL computes them in (see the module doc).
pub fn cast_arguments(plan: LogicalPlan) -> Result<LogicalPlan> {
    rewrite_expressions(plan, &cast_aggregate_argument)
}

/// One expression node of [`cast_arguments`].
fn cast_aggregate_argument(mut e: Expr, schema: &DFSchema) -> Result<Transformed<Expr>> {
    let cast = match &mut e {
        Expr::AggregateFunction(call) => {
            cast_argument(call.func.name(), &mut call.params.args, schema)
        }
        Expr::WindowFunction(window) => match &window.fun {
            WindowFunctionDefinition::AggregateUDF(func) => {
                cast_argument(func.name(), &mut window.params.args, schema)
            }
            WindowFunctionDefinition::WindowUDF(_) => false,
        },
        _ => false,
    };
    Ok(Transformed::new_transformed(e, cast))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_bigint_sums_and_integer_averages_are_cast() {
        assert_eq!(argument_type("sum", &DataType::Int64), Some(SUMMED_BIGINT));
        assert_eq!(argument_type("sum", &DataType::Int32), None);
        assert_eq!(argument_type("sum", &DataType::Float64), None);
        assert_eq!(argument_type("sum", &DataType::Decimal128(10, 2)), None);
        assert_eq!(
            argument_type("avg", &DataType::Int16),
            Some(DataType::Decimal128(5, 0))
        );
        assert_eq!(
            argument_type("avg", &DataType::Int64),
            Some(DataType::Decimal128(19, 0))
        );
        assert_eq!(argument_type("avg", &DataType::Float32), None);
        assert_eq!(argument_type("max", &DataType::Int64), None);
    }
}
