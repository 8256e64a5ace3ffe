//! Functions and operators whose results PostgreSQL types differently
//! from DataFusion, cast to PostgreSQL's type.
//!
//! The analyzer rule [`rule`] runs after type coercion and casts:
//!
//! - `array_length`, `array_upper`, `array_lower`, `array_ndims`,
//!   `cardinality` and `array_position` to `integer` (DataFusion's are
//!   `bigint`);
//! - `gcd` and `lcm` of `integer`s or `smallint`s to their argument's type
//!   (DataFusion computes them in `bigint`);
//! - `factorial` to `numeric` (DataFusion's is `bigint`);
//! - `date_part` to `double precision` (`extract` is `numeric`,
//!   `pg_forms.rs`);
//! - `date - date` (a number of days) to `integer`.
//!
//! Only the columns a query returns are cast (its top projection, under
//! sorts and limits): inside an expression the value keeps
//! DataFusion's type, which the expression was coerced to (DataFusion's own
//! rewrites compare `cardinality` with a `bigint`). The values are the
//! same; a cast that does not fit fails with 22003 as any cast does (an
//! `integer` `gcd` cannot exceed its arguments).

use std::sync::Arc;

use datafusion::arrow::datatypes::DataType;
use datafusion::common::config::ConfigOptions;
use datafusion::common::{DFSchema, Result};
use datafusion::logical_expr::{
    cast, BinaryExpr, Expr, ExprSchemable, LogicalPlan, Operator, Projection,
};
use datafusion::optimizer::AnalyzerRule;

/// The type PostgreSQL gives `expr`'s result, where DataFusion's differs.
fn postgres_type(expr: &Expr, schema: &DFSchema) -> Result<Option<DataType>> {
    Ok(match expr {
        Expr::ScalarFunction(call) => match call.func.name() {
            "array_length" | "array_upper" | "array_lower" | "array_ndims" | "cardinality"
            | "array_position" => Some(DataType::Int32),
            "gcd" | "lcm" => {
                let mut widest = None;
                for arg in &call.args {
                    widest = match (widest, crate::plan_rewrite::uncast(arg).get_type(schema)?) {
                        (None | Some(DataType::Int16), DataType::Int16) => Some(DataType::Int16),
                        (None | Some(DataType::Int16 | DataType::Int32), DataType::Int32) => {
                            Some(DataType::Int32)
                        }
                        (Some(DataType::Int32), DataType::Int16) => Some(DataType::Int32),
                        _ => return Ok(None),
                    };
                }
                widest
            }
            "factorial" => Some(DataType::Decimal128(38, 0)),
            "date_part" | "datepart" => Some(DataType::Float64),
            _ => None,
        },
        Expr::BinaryExpr(BinaryExpr {
            left,
            op: Operator::Minus,
            right,
        }) if left.get_type(schema)? == DataType::Date32
            && right.get_type(schema)? == DataType::Date32 =>
        {
            Some(DataType::Int32)
        }
        _ => None,
    })
}

/// The rule (see the module documentation).
#[derive(Debug)]
struct PostgresResultTypes;

/// A returned column `expr` (perhaps aliased) cast to PostgreSQL's type.
fn returned_column(expr: Expr, schema: &DFSchema) -> Result<Expr> {
    let (inner, alias) = match expr {
        Expr::Alias(alias) => (*alias.expr, Some(alias.name)),
        other => (other, None),
    };
    let name = alias.unwrap_or_else(|| inner.schema_name().to_string());
    let Some(wanted) = postgres_type(&inner, schema)? else {
        return inner.alias_if_changed(name);
    };
    if inner.get_type(schema)? == wanted {
        return inner.alias_if_changed(name);
    }
    Ok(cast(inner, wanted).alias(name))
}

/// `plan` with the columns of its top projection (under sorts and limits)
/// cast.
fn cast_returned(plan: LogicalPlan) -> Result<LogicalPlan> {
    match plan {
        LogicalPlan::Projection(projection) => {
            let schema = projection.input.schema().clone();
            let exprs = projection
                .expr
                .into_iter()
                .map(|e| returned_column(e, &schema))
                .collect::<Result<Vec<_>>>()?;
            Ok(LogicalPlan::Projection(Projection::try_new(
                exprs,
                projection.input,
            )?))
        }
        LogicalPlan::Sort(_) | LogicalPlan::Limit(_) => {
            let exprs = plan.expressions();
            let inputs = plan
                .inputs()
                .into_iter()
                .map(|input| cast_returned(input.clone()))
                .collect::<Result<Vec<_>>>()?;
            plan.with_new_exprs(exprs, inputs)
        }
        other => Ok(other),
    }
}

impl AnalyzerRule for PostgresResultTypes {
    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        cast_returned(plan)
    }

    fn name(&self) -> &str {
        "weir_postgres_result_types"
    }
}

/// The rule, ready to add to a session.
pub fn rule() -> Arc<dyn AnalyzerRule + Send + Sync> {
    Arc::new(PostgresResultTypes)
}
