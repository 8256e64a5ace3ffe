//! String literals in arithmetic, typed as PostgreSQL types them.
//!
//! In PostgreSQL a quoted literal has no type until its context gives one:
//! in `'5' + 1` it takes the other operand's type, so the sum is 6, and
//! `'a' + 1` fails with 22P02 (invalid input syntax for type integer).
//! DataFusion types the literal as text and refuses the arithmetic (42804).
//! [`UnknownLiterals`], an expression planner, casts a string literal
//! operand of `+`, `-`, `*`, `/` or `%` to the other operand's numeric type,
//! reads one compared with a `regtype` as a type name, and one compared
//! with a `uuid` as a uuid.

use std::sync::Arc;

use datafusion::common::{DFSchema, Result, ScalarValue};
use datafusion::logical_expr::planner::{ExprPlanner, PlannerResult, RawBinaryExpr};
use datafusion::logical_expr::{cast, Expr, ExprSchemable};
use datafusion::sql::sqlparser::ast::BinaryOperator;

/// The planner (see the module documentation).
#[derive(Debug)]
struct UnknownLiterals;

fn is_string_literal(expr: &Expr) -> bool {
    matches!(
        expr,
        Expr::Literal(
            ScalarValue::Utf8(Some(_))
                | ScalarValue::Utf8View(Some(_))
                | ScalarValue::LargeUtf8(Some(_)),
            _
        )
    )
}

/// Whether `op` compares its operands (`=`, `<>`, `<`, `<=`, `>`, `>=`).
pub(crate) fn is_comparison(op: &BinaryOperator) -> bool {
    matches!(
        op,
        BinaryOperator::Eq
            | BinaryOperator::NotEq
            | BinaryOperator::Lt
            | BinaryOperator::LtEq
            | BinaryOperator::Gt
            | BinaryOperator::GtEq
    )
}

impl ExprPlanner for UnknownLiterals {
    fn plan_binary_op(
        &self,
        mut expr: RawBinaryExpr,
        schema: &DFSchema,
    ) -> Result<PlannerResult<RawBinaryExpr>> {
        if is_comparison(&expr.op) {
            // A type name compared with a `regtype` (`pg_typeof(x) =
            // 'integer'`) is read as one, and a literal compared with a
            // `uuid` as a uuid.
            let reader = |e: &Expr| -> Option<fn(Expr) -> Expr> {
                let field = e.to_field(schema).ok()?.1;
                if crate::regtype::is_regtype(&field) {
                    Some(|text| crate::regtype::to_regtype().call(vec![text]))
                } else if crate::uuid_type::is_uuid(&field) {
                    Some(crate::uuid_type::input)
                } else {
                    None
                }
            };
            if is_string_literal(&expr.right) {
                if let Some(read) = reader(&expr.left) {
                    expr.right = read(expr.right);
                }
            } else if is_string_literal(&expr.left) {
                if let Some(read) = reader(&expr.right) {
                    expr.left = read(expr.left);
                }
            }
            return Ok(PlannerResult::Original(expr));
        }
        if !matches!(
            expr.op,
            BinaryOperator::Plus
                | BinaryOperator::Minus
                | BinaryOperator::Multiply
                | BinaryOperator::Divide
                | BinaryOperator::Modulo
        ) {
            return Ok(PlannerResult::Original(expr));
        }
        let numeric_type = |e: &Expr| e.get_type(schema).ok().filter(|t| t.is_numeric());
        if is_string_literal(&expr.left) && !is_string_literal(&expr.right) {
            if let Some(t) = numeric_type(&expr.right) {
                expr.left = cast(expr.left, t);
            }
        } else if is_string_literal(&expr.right) && !is_string_literal(&expr.left) {
            if let Some(t) = numeric_type(&expr.left) {
                expr.right = cast(expr.right, t);
            }
        }
        Ok(PlannerResult::Original(expr))
    }
}

/// Registers [`UnknownLiterals`] with `ctx`'s planner.
pub fn register(ctx: &datafusion::prelude::SessionContext) -> Result<()> {
    use datafusion::execution::FunctionRegistry;
    ctx.state_ref()
        .write()
        .register_expr_planner(Arc::new(UnknownLiterals))
}
