//! How SQL names the JSON types and operators: `json`/`jsonb` as column
//! and cast types ([`TaggedTextTypes`], which also plans `varchar` and
//! `uuid`), and the operators on JSON operands
//! ([`JsonOperators`]), planned as the functions of [`super::scalar`].

use std::sync::Arc;

use datafusion::arrow::datatypes::FieldRef;
use datafusion::common::{DFSchema, Result};
use datafusion::logical_expr::planner::{ExprPlanner, PlannerResult, RawBinaryExpr, TypePlanner};
use datafusion::logical_expr::{Expr, ExprSchemable};
use datafusion::sql::sqlparser::ast::{BinaryOperator, DataType as SqlType};

use super::scalar::{JsonFunction, Op};
use super::JsonKind;

/// Plans the types Weir stores as tagged text: `json` and `jsonb` (text
/// fields tagged with their kind), `varchar` ([`crate::varchar`]) and
/// `uuid` ([`crate::uuid_type`]); other types with `fallback`.
#[derive(Debug)]
pub struct TaggedTextTypes {
    /// The planner for every other type.
    pub fallback: Option<Arc<dyn TypePlanner>>,
}

impl TypePlanner for TaggedTextTypes {
    fn plan_type_field(&self, sql_type: &SqlType) -> Result<Option<FieldRef>> {
        let tagged = match sql_type {
            SqlType::JSON => Some(JsonKind::Json.field("")),
            SqlType::JSONB => Some(JsonKind::Jsonb.field("")),
            other => {
                crate::varchar::plan_type(other).or_else(|| crate::uuid_type::plan_type(other))
            }
        };
        match (tagged, &self.fallback) {
            (Some(field), _) => Ok(Some(field)),
            (None, Some(fallback)) => fallback.plan_type_field(sql_type),
            (None, None) => Ok(None),
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
        let comparison = crate::unknown_literals::is_comparison(&expr.op);
        let json_op = json_operator(&expr.op);
        if json_op.is_none() && !comparison {
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
        if let (Some(kind), Some(json_op)) = (left, json_op) {
            // `||` is JSON's only for jsonb; json || text is text's.
            if json_op != Op::Concat || kind == JsonKind::Jsonb {
                // The operand these take as JSON is read as JSON.
                let takes_json = matches!(json_op, Op::Contains | Op::ContainedBy | Op::Concat);
                let r = if takes_json && right.is_none() {
                    super::input(kind, r)
                } else {
                    r
                };
                return Ok(PlannerResult::Planned(
                    JsonFunction::udf(json_op).call(vec![l, r]),
                ));
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

/// The function a JSON operator is planned as, for a JSON left operand.
fn json_operator(op: &BinaryOperator) -> Option<Op> {
    Some(match op {
        BinaryOperator::Arrow => Op::Get,
        BinaryOperator::LongArrow => Op::GetText,
        BinaryOperator::HashArrow => Op::Path,
        BinaryOperator::HashLongArrow => Op::PathText,
        BinaryOperator::AtArrow => Op::Contains,
        BinaryOperator::ArrowAt => Op::ContainedBy,
        BinaryOperator::Question => Op::HasKey,
        BinaryOperator::QuestionPipe => Op::HasAnyKey,
        BinaryOperator::QuestionAnd => Op::HasAllKeys,
        BinaryOperator::StringConcat => Op::Concat,
        _ => return None,
    })
}
