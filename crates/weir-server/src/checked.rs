//! Arithmetic that fails on overflow and division by zero, as PostgreSQL's
//! does.
//!
//! DataFusion's `+`, `-` and `*` on integers wrap around, and float
//! arithmetic gives `inf` for a division by zero or an overflow. The
//! analyzer rule [`CheckedIntegerArithmetic`] runs after type coercion and
//! replaces each such operation with a function that calls Arrow's kernels
//! (checked ones for integers; still vectorized) and then checks the
//! result: `2147483647 + 1` on `integer` columns fails with 22003 instead
//! of returning a negative number, `1.0::float8 / 0` with 22012, and a
//! float result that overflows to infinity from finite operands with
//! 22003. A `real` with another number is computed in `double
//! precision`, as PostgreSQL does. Output column names are kept as written. A division of
//! `numeric`s becomes `numeric_div.rs`'s, with PostgreSQL's digits.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, Float64Array};
use datafusion::arrow::compute::cast;
use datafusion::arrow::compute::kernels::numeric;
use datafusion::arrow::datatypes::DataType;
use datafusion::arrow::datatypes::Float64Type;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{DFSchema, DataFusionError, Result};
use datafusion::logical_expr::{
    BinaryExpr, ColumnarValue, Expr, ExprSchemable, LogicalPlan, Operator, ScalarFunctionArgs,
    ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};
use datafusion::optimizer::AnalyzerRule;

use crate::error::{SqlState, WeirError};

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
            Operator::Divide => "weir_checked_div",
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

    /// Named as the operation it stands for (`a + b`). A function's name
    /// is a string that holds its arguments' names, and planning asks for
    /// the name of every operation of a chain (`x + x + ... + x`, each an
    /// argument of the next) again and again: with whole names that is
    /// cubic in the chain's length (1,000 terms took 6 s to plan). An
    /// operand nested deeper than [`NAMED_DEPTH`] is written `(...)`, so
    /// a name costs a bounded walk. Such names are only seen inside the
    /// plan: the rule keeps each column's name as written.
    fn schema_name(&self, args: &[Expr]) -> Result<String> {
        let symbol = match self.op {
            Operator::Plus => "+",
            Operator::Minus => "-",
            Operator::Divide => "/",
            _ => "*",
        };
        let [left, right] = args else {
            return Ok(self.name.to_owned());
        };
        Ok(format!(
            "{} {symbol} {}",
            operand_name(left)?,
            operand_name(right)?
        ))
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
            Operator::Divide => numeric::div(&arrays[0], &arrays[1]),
            _ => numeric::mul(&arrays[0], &arrays[1]),
        }?;
        if is_float(&self.data_type) {
            check_float(self.op, &arrays[0], &arrays[1], &result)?;
        }
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

/// How deep an operand may nest and still be named by its text.
const NAMED_DEPTH: usize = 16;

/// An operand's part of a [`CheckedOp`]'s name: its own name, or
/// `(...)` where it nests deeper than [`NAMED_DEPTH`].
fn operand_name(operand: &Expr) -> Result<String> {
    Ok(if nests_deeper_than(operand, NAMED_DEPTH) {
        "(...)".to_owned()
    } else {
        operand.schema_name().to_string()
    })
}

/// Whether `expr` has a node more than `levels` below it; visits at most
/// the nodes within `levels` of the top.
fn nests_deeper_than(expr: &Expr, levels: usize) -> bool {
    let mut deeper = false;
    let _ = expr.apply_children(|child| {
        deeper = levels == 0 || nests_deeper_than(child, levels - 1);
        Ok(if deeper {
            TreeNodeRecursion::Stop
        } else {
            TreeNodeRecursion::Continue
        })
    });
    deeper
}

/// PostgreSQL's float errors: a division by zero is 22012, an infinite
/// result from finite operands 22003.
fn check_float(op: Operator, left: &ArrayRef, right: &ArrayRef, result: &ArrayRef) -> Result<()> {
    let as_f64 = |a: &ArrayRef| -> Result<Float64Array> {
        Ok(cast(a, &DataType::Float64)?
            .as_primitive::<Float64Type>()
            .clone())
    };
    let (left, right, result) = (as_f64(left)?, as_f64(right)?, as_f64(result)?);
    let error = |code: SqlState, message: &str| {
        Err(DataFusionError::External(Box::new(WeirError::new(
            code, message,
        ))))
    };
    for i in 0..result.len() {
        if result.is_null(i) {
            continue;
        }
        let (l, r, v) = (left.value(i), right.value(i), result.value(i));
        if op == Operator::Divide && r == 0.0 {
            return error(SqlState::DIVISION_BY_ZERO, "division by zero");
        }
        if v.is_infinite() && l.is_finite() && r.is_finite() {
            return error(
                SqlState::NUMERIC_OUT_OF_RANGE,
                "value out of range: overflow",
            );
        }
    }
    Ok(())
}

fn is_float(data_type: &DataType) -> bool {
    matches!(data_type, DataType::Float32 | DataType::Float64)
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

/// `binary` (`+ - * /`) computed in `double precision` where DataFusion
/// coerced a `real` and another number to `real`: PostgreSQL computes
/// `real` with an integer or a `numeric` in `double precision`.
fn real_widened(binary: BinaryExpr, schema: &DFSchema) -> Result<BinaryExpr> {
    let coerced_to_real = |e: &Expr| match e {
        Expr::Cast(cast) if cast.field.data_type() == &DataType::Float32 => cast
            .expr
            .get_type(schema)
            .map(|t| t != DataType::Float32)
            .unwrap_or(false),
        _ => false,
    };
    if !coerced_to_real(&binary.left) && !coerced_to_real(&binary.right) {
        return Ok(binary);
    }
    let widened = |e: Expr| -> Result<Expr> {
        match e {
            Expr::Cast(cast) if cast.field.data_type() == &DataType::Float32 => {
                cast.expr.cast_to(&DataType::Float64, schema)
            }
            other => other.cast_to(&DataType::Float64, schema),
        }
    };
    Ok(BinaryExpr::new(
        Box::new(widened(*binary.left)?),
        binary.op,
        Box::new(widened(*binary.right)?),
    ))
}

impl CheckedIntegerArithmetic {
    /// Rewrites one expression node (see the module documentation).
    fn rewrite_expr(e: Expr, schema: &DFSchema) -> Result<Transformed<Expr>> {
        let Expr::BinaryExpr(binary) = e else {
            return Ok(Transformed::no(e));
        };
        if !matches!(
            binary.op,
            Operator::Plus | Operator::Minus | Operator::Multiply | Operator::Divide
        ) {
            return Ok(Transformed::no(Expr::BinaryExpr(binary)));
        }
        let binary = real_widened(binary, schema)?;
        let types = (
            operand_type(&binary.left, schema),
            operand_type(&binary.right, schema),
        );
        match types {
            (Ok(DataType::Decimal128(_, l)), Ok(DataType::Decimal128(_, r)))
                if binary.op == Operator::Divide =>
            {
                let BinaryExpr { left, right, .. } = binary;
                let udf = crate::numeric_div::NumericDiv::udf(l, r);
                Ok(Transformed::yes(udf.call(vec![*left, *right])))
            }
            (Ok(l), Ok(r))
                if l == r
                    && (is_float(&l) || (is_integer(&l) && binary.op != Operator::Divide)) =>
            {
                let BinaryExpr { left, op, right } = binary;
                let udf = CheckedOp::udf(op, l);
                Ok(Transformed::yes(udf.call(vec![*left, *right])))
            }
            _ => Ok(Transformed::no(Expr::BinaryExpr(binary))),
        }
    }
}

impl AnalyzerRule for CheckedIntegerArithmetic {
    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        crate::plan_rewrite::rewrite_expressions(plan, &Self::rewrite_expr)
    }

    fn name(&self) -> &str {
        "weir_checked_integer_arithmetic"
    }
}

/// The rule, ready to add to a session.
pub fn rule() -> Arc<dyn AnalyzerRule + Send + Sync> {
    Arc::new(CheckedIntegerArithmetic)
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::logical_expr::col;

    #[test]
    fn a_long_chain_is_named_in_bounded_text() {
        let add = CheckedOp::udf(Operator::Plus, DataType::Int64);
        let chain = (0..200).fold(col("x"), |sum, _| add.call(vec![sum, col("x")]));
        let name = chain.schema_name().to_string();
        assert!(name.starts_with("(...) + x"), "{name}");
        assert!(name.len() < 200, "{} bytes: {name}", name.len());
        // A short one reads as written.
        let short = add.call(vec![add.call(vec![col("a"), col("b")]), col("c")]);
        assert_eq!(short.schema_name().to_string(), "a + b + c");
    }
}
