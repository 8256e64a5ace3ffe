//! How SQL names the JSON types and operators: `json`/`jsonb` as column
//! and cast types ([`JsonTypes`]), and the operators on JSON operands
//! ([`JsonOperators`]), planned as the functions of [`super::scalar`].

use std::sync::Arc;

use datafusion::arrow::datatypes::FieldRef;
use datafusion::common::{DFSchema, Result};
use datafusion::logical_expr::planner::{ExprPlanner, PlannerResult, RawBinaryExpr, TypePlanner};
use datafusion::logical_expr::{Expr, ExprSchemable};
use datafusion::sql::sqlparser::ast::{BinaryOperator, DataType as SqlType};

use super::scalar::{operator_udf, Op};
use super::JsonKind;

/// Plans `json` and `jsonb` as text fields tagged with their kind, and
/// other types with `fallback`.
#[derive(Debug)]
pub struct JsonTypes {
    /// The planner for every other type.
    pub fallback: Option<Arc<dyn TypePlanner>>,
}

impl TypePlanner for JsonTypes {
    fn plan_type_field(&self, sql_type: &SqlType) -> Result<Option<FieldRef>> {
        match sql_type {
            SqlType::JSON => Ok(Some(JsonKind::Json.field(""))),
            SqlType::JSONB => Ok(Some(JsonKind::Jsonb.field(""))),
            _ => match &self.fallback {
                Some(fallback) => fallback.plan_type_field(sql_type),
                None => Ok(None),
            },
        }
    }
}

/// Plans the operators whose left operand (or, for comparisons, either
/// operand) is JSON; leaves every other operator to DataFusion.
#[derive(Debug)]
pub struct JsonOperators;

impl ExprPlanner for JsonOperators {
    fn plan_binary_op(
        &self,
        expr: RawBinaryExpr,
        schema: &DFSchema,
    ) -> Result<PlannerResult<RawBinaryExpr>> {
        // Only these operators can involve JSON; others (long AND/OR and
        // arithmetic chains among them) are passed on without computing
        // their operands' types, which costs a walk of each operand.
        let comparison = matches!(
            expr.op,
            BinaryOperator::Eq
                | BinaryOperator::NotEq
                | BinaryOperator::Lt
                | BinaryOperator::LtEq
                | BinaryOperator::Gt
                | BinaryOperator::GtEq
        );
        let json_operator = matches!(
            expr.op,
            BinaryOperator::Arrow
                | BinaryOperator::LongArrow
                | BinaryOperator::HashArrow
                | BinaryOperator::HashLongArrow
                | BinaryOperator::AtArrow
                | BinaryOperator::ArrowAt
                | BinaryOperator::Question
                | BinaryOperator::QuestionPipe
                | BinaryOperator::QuestionAnd
                | BinaryOperator::StringConcat
        );
        if !comparison && !json_operator {
            return Ok(PlannerResult::Original(expr));
        }
        let kind_of = |e: &Expr| {
            e.to_field(schema)
                .ok()
                .and_then(|(_, field)| JsonKind::of(&field))
        };
        let (left, right) = (kind_of(&expr.left), kind_of(&expr.right));
        let RawBinaryExpr {
            op,
            left: l,
            right: r,
        } = expr;
        let call =
            |op: Op, args: Vec<Expr>| Ok(PlannerResult::Planned(operator_udf(op).call(args)));
        if let Some(kind) = left {
            let json_operand = |e: Expr| match right {
                Some(_) => e,
                None => super::input(kind, e),
            };
            match op {
                BinaryOperator::Arrow => return call(Op::Get, vec![l, r]),
                BinaryOperator::LongArrow => return call(Op::GetText, vec![l, r]),
                BinaryOperator::HashArrow => return call(Op::Path, vec![l, r]),
                BinaryOperator::HashLongArrow => return call(Op::PathText, vec![l, r]),
                BinaryOperator::AtArrow => return call(Op::Contains, vec![l, json_operand(r)]),
                BinaryOperator::ArrowAt => return call(Op::ContainedBy, vec![l, json_operand(r)]),
                BinaryOperator::Question => return call(Op::HasKey, vec![l, r]),
                BinaryOperator::QuestionPipe => return call(Op::HasAnyKey, vec![l, r]),
                BinaryOperator::QuestionAnd => return call(Op::HasAllKeys, vec![l, r]),
                BinaryOperator::StringConcat if kind == JsonKind::Jsonb => {
                    return call(Op::Concat, vec![l, json_operand(r)])
                }
                _ => {}
            }
        }
        // A comparison of JSON with text reads the text as JSON, as
        // PostgreSQL reads an untyped literal: `j = '{"a":1}'` compares
        // normal forms.
        let (l, r) = match (comparison, left, right) {
            (true, Some(kind), None) => (l, super::input(kind, r)),
            (true, None, Some(kind)) => (super::input(kind, l), r),
            _ => (l, r),
        };
        Ok(PlannerResult::Original(RawBinaryExpr {
            op,
            left: l,
            right: r,
        }))
    }
}
