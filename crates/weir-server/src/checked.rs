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
use datafusion::common::{DFSchema, Result};
use datafusion::logical_expr::expr_rewriter::NamePreserver;
use datafusion::logical_expr::utils::merge_schema;
use datafusion::logical_expr::{
    BinaryExpr, ColumnarValue, Expr, ExprSchemable, LogicalPlan, Operator, ScalarFunctionArgs,
    ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};
use datafusion::optimizer::AnalyzerRule;

/// A checked integer operation on operands of type `data_type`.
#[derive(Debug, PartialEq, Eq, Hash)]
struct CheckedOp {
    op: Operator,
    name: &'static str,
    data_type: DataType,
    signature: Signature,
}

impl CheckedOp {
    fn udf(op: Operator, data_type: DataType) -> ScalarUDF {
        let name = match op {
            Operator::Plus => "weir_checked_add",
            Operator::Minus => "weir_checked_sub",
            _ => "weir_checked_mul",
        };
        ScalarUDF::from(CheckedOp {
            op,
            name,
            data_type,
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
pub struct CheckedIntegerArithmetic;

/// The type of an operand, found without walking the operand's tree where
/// it can be: a checked operation knows its type, and so do columns,
/// literals and casts. (`get_type` of a function call formats the call's
/// name, so asking it at every level of `1 + 1 + ... + 1` cost the cube of
/// the terms: 2 s for 250 terms.)
fn operand_type(expr: &Expr, schema: &DFSchema) -> Result<DataType> {
    match expr {
        Expr::ScalarFunction(call) => {
            let function: &dyn std::any::Any = call.func.inner().as_ref();
            match function.downcast_ref::<CheckedOp>() {
                Some(checked) => Ok(checked.data_type.clone()),
                None => expr.get_type(schema),
            }
        }
        Expr::Cast(cast) => Ok(cast.field.data_type().clone()),
        Expr::TryCast(cast) => Ok(cast.field.data_type().clone()),
        _ => expr.get_type(schema),
    }
}

impl CheckedIntegerArithmetic {
    fn rewrite_plan(&self, plan: LogicalPlan) -> Result<Transformed<LogicalPlan>> {
        let schema = merge_schema(&plan.inputs());
        let preserver = NamePreserver::new(&plan);
        plan.map_expressions(|expr| {
            let name = preserver.save(&expr);
            let rewritten = expr.transform_up(|e| {
                let Expr::BinaryExpr(binary) = e else {
                    return Ok(Transformed::no(e));
                };
                if !matches!(
                    binary.op,
                    Operator::Plus | Operator::Minus | Operator::Multiply
                ) {
                    return Ok(Transformed::no(Expr::BinaryExpr(binary)));
                }
                let types = (
                    operand_type(&binary.left, &schema),
                    operand_type(&binary.right, &schema),
                );
                match types {
                    (Ok(l), Ok(r)) if l == r && is_integer(&l) => {
                        let BinaryExpr { left, op, right } = binary;
                        let udf = CheckedOp::udf(op, l);
                        Ok(Transformed::yes(udf.call(vec![*left, *right])))
                    }
                    _ => Ok(Transformed::no(Expr::BinaryExpr(binary))),
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
    Arc::new(CheckedIntegerArithmetic)
}
