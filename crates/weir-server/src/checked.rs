//! Integer arithmetic that fails on overflow, as PostgreSQL's does.
//!
//! DataFusion's `+`, `-` and `*` on integers wrap around. The analyzer rule
//! [`CheckedIntegerArithmetic`] runs after type coercion and replaces each
//! such operation on integer operands with a function that calls Arrow's
//! checked kernels (still vectorized), so `2147483647 + 1` on `integer`
//! columns fails with 22003 instead of returning a negative number. Output
//! column names are kept as written.

use std::sync::Arc;

use datafusion::arrow::compute::kernels::numeric;
use datafusion::arrow::datatypes::DataType;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::Result;
use datafusion::logical_expr::expr_rewriter::NamePreserver;
use datafusion::logical_expr::utils::merge_schema;
use datafusion::logical_expr::{
    BinaryExpr, ColumnarValue, Expr, ExprSchemable, LogicalPlan, Operator, ScalarFunctionArgs,
    ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};
use datafusion::optimizer::AnalyzerRule;

/// A checked integer operation.
#[derive(Debug, PartialEq, Eq, Hash)]
struct CheckedOp {
    op: Operator,
    name: &'static str,
    signature: Signature,
}

impl CheckedOp {
    fn udf(op: Operator) -> ScalarUDF {
        let name = match op {
            Operator::Plus => "weir_checked_add",
            Operator::Minus => "weir_checked_sub",
            _ => "weir_checked_mul",
        };
        ScalarUDF::from(CheckedOp {
            op,
            name,
            signature: Signature::any(2, Volatility::Immutable),
        })
    }
}

impl ScalarUDFImpl for CheckedOp {
    fn name(&self) -> &str {
        self.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        Ok(arg_types[0].clone())
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let scalar = args
            .args
            .iter()
            .all(|a| matches!(a, ColumnarValue::Scalar(_)));
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let result = match self.op {
            Operator::Plus => numeric::add(&arrays[0], &arrays[1]),
            Operator::Minus => numeric::sub(&arrays[0], &arrays[1]),
            _ => numeric::mul(&arrays[0], &arrays[1]),
        }?;
        let value = ColumnarValue::Array(result);
        if scalar {
            Ok(ColumnarValue::Scalar(
                datafusion::common::ScalarValue::try_from_array(&value.into_array(1)?, 0)?,
            ))
        } else {
            Ok(value)
        }
    }
}

fn is_integer(data_type: &DataType) -> bool {
    matches!(
        data_type,
        DataType::Int8 | DataType::Int16 | DataType::Int32 | DataType::Int64
    )
}

/// Replaces integer `+ - *` with checked functions.
#[derive(Debug)]
pub struct CheckedIntegerArithmetic {
    add: ScalarUDF,
    sub: ScalarUDF,
    mul: ScalarUDF,
}

impl Default for CheckedIntegerArithmetic {
    fn default() -> Self {
        CheckedIntegerArithmetic {
            add: CheckedOp::udf(Operator::Plus),
            sub: CheckedOp::udf(Operator::Minus),
            mul: CheckedOp::udf(Operator::Multiply),
        }
    }
}

impl CheckedIntegerArithmetic {
    fn rewrite_plan(&self, plan: LogicalPlan) -> Result<Transformed<LogicalPlan>> {
        let schema = merge_schema(&plan.inputs());
        let preserver = NamePreserver::new(&plan);
        plan.map_expressions(|expr| {
            let name = preserver.save(&expr);
            let rewritten = expr.transform_up(|e| {
                let Expr::BinaryExpr(BinaryExpr { left, op, right }) = &e else {
                    return Ok(Transformed::no(e));
                };
                let udf = match op {
                    Operator::Plus => &self.add,
                    Operator::Minus => &self.sub,
                    Operator::Multiply => &self.mul,
                    _ => return Ok(Transformed::no(e)),
                };
                let (Ok(l), Ok(r)) = (left.get_type(&schema), right.get_type(&schema)) else {
                    return Ok(Transformed::no(e));
                };
                if l == r && is_integer(&l) {
                    let args = vec![left.as_ref().clone(), right.as_ref().clone()];
                    Ok(Transformed::yes(udf.call(args)))
                } else {
                    Ok(Transformed::no(e))
                }
            })?;
            Ok(rewritten.update_data(|e| name.restore(e)))
        })?
        .map_data(|plan| plan.recompute_schema())
    }
}

impl AnalyzerRule for CheckedIntegerArithmetic {
    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        Ok(plan
            .transform_up_with_subqueries(|plan| self.rewrite_plan(plan))?
            .data)
    }

    fn name(&self) -> &str {
        "weir_checked_integer_arithmetic"
    }
}

/// The rule, ready to add to a session.
pub fn rule() -> Arc<dyn AnalyzerRule + Send + Sync> {
    Arc::new(CheckedIntegerArithmetic::default())
}
