//! How many fraction digits a `numeric` result column is written with.
//!
//! PostgreSQL keeps a display scale with every `numeric` value: a literal's
//! own (`123.4500`), a sum's the larger of its operands', a product's
//! their sum, `round(x, 2)`'s 2; a column without a typmod keeps each
//! value's scale. Weir's `numeric` is an Arrow `Decimal128` with one
//! scale per column (an unconstrained `numeric` is DataFusion's
//! `Decimal128(38, 10)`), so written at the column's scale a value would
//! read `123.4500000000`.
//!
//! [`annotate`] works out, from the statement's plan as the planner made
//! it, the scale PostgreSQL would give each result column where the plan
//! says (literals, casts, `+ - * %`, `round`/`trunc`/`ceil`/`floor`,
//! `sum`/`min`/`max`, through projections, subqueries, joins, unions
//! and `VALUES`), and marks the column with it (`PG_NUMERIC_SCALE_KEY`):
//! a value is then written with that many fraction digits, more where the
//! value has more nonzero ones, never fewer than it holds. A column of an
//! unconstrained `numeric` table column (whose values' own scales are not
//! kept) is written with its values' significant digits: `19.90` stored
//! reads `19.9`. A quotient (`numeric_div.rs`) is written as PostgreSQL
//! writes it: with 16 significant digits, more for a quotient below 1 (20
//! fraction digits from 0.0001 to 1, at most the 20 Weir computes), fewer
//! above 10,000 (`PG_NUMERIC_QUOTIENT_KEY`). Columns the plan says nothing
//! about keep the type's scale (an average has the digits DataFusion
//! computes: the argument's scale plus 4).

use std::sync::Arc;

use arrow_pg::datatypes::{PG_NUMERIC_QUOTIENT_KEY, PG_NUMERIC_SCALE_KEY};
use arrow_pg::numeric::PgNumeric;
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::common::ScalarValue;
use datafusion::datasource::source_as_provider;
use datafusion::logical_expr::expr::{AggregateFunction, Alias, ScalarFunction};
use datafusion::logical_expr::{BinaryExpr, Cast, Expr, ExprSchemable, LogicalPlan, Operator};
use serde::{Deserialize, Serialize};

use crate::catalog::DeclaredType;
use crate::provider::SnapshotTable;

/// How a `numeric` column's values are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct DisplayScale {
    /// The fewest fraction digits a value is written with.
    pub min: u8,
    /// Whether the values are quotients, written with PostgreSQL's scale
    /// for their magnitude (at least `min`).
    #[serde(default)]
    pub quotient: bool,
}

impl DisplayScale {
    /// At least `min` fraction digits.
    fn min(min: u8) -> Self {
        DisplayScale {
            min,
            quotient: false,
        }
    }

    /// The same minimum, no longer a quotient's (the value was computed
    /// further).
    fn computed(self) -> Self {
        DisplayScale::min(self.min)
    }

    /// The scale of a value that is either `self`'s or `other`'s.
    fn either(self, other: Self) -> Self {
        DisplayScale {
            min: self.min.min(other.min),
            quotient: self.quotient && other.quotient,
        }
    }
}

/// The scale of a value that is one of `scales`' (all of them known).
fn any_of(scales: impl IntoIterator<Item = Option<DisplayScale>>) -> Option<DisplayScale> {
    let mut scales = scales.into_iter();
    let first = scales.next()??;
    scales.try_fold(first, |all, next| Some(all.either(next?)))
}

/// `numeric`'s `pg_type` OID.
const NUMERIC_OID: u32 = 1700;

/// DataFusion's type for `numeric` without a precision and scale.
pub const UNCONSTRAINED: DataType = DataType::Decimal128(
    arrow_pg::numeric::UNCONSTRAINED.0,
    arrow_pg::numeric::UNCONSTRAINED.1,
);

/// `schema` (the executed plan's columns) with the display scale of each
/// `numeric` column `plan` determines marked on it.
pub fn annotate(plan: &LogicalPlan, schema: &SchemaRef) -> SchemaRef {
    let scales = scales(plan, schema);
    if scales.iter().all(Option::is_none) {
        return schema.clone();
    }
    let fields: Vec<Field> = schema
        .fields()
        .iter()
        .zip(scales)
        .map(|(field, scale)| match scale {
            Some(scale) => {
                let mut metadata = field.metadata().clone();
                metadata.insert(PG_NUMERIC_SCALE_KEY.to_owned(), scale.min.to_string());
                if scale.quotient {
                    metadata.insert(PG_NUMERIC_QUOTIENT_KEY.to_owned(), "true".to_owned());
                }
                field.as_ref().clone().with_metadata(metadata)
            }
            None => field.as_ref().clone(),
        })
        .collect();
    Arc::new(Schema::new_with_metadata(fields, schema.metadata().clone()))
}

/// For each of `schema`'s columns (`plan`'s output), how its values are
/// written, where `plan` determines it and it differs from the column
/// type's scale.
pub fn scales(plan: &LogicalPlan, schema: &Schema) -> Vec<Option<DisplayScale>> {
    schema
        .fields()
        .iter()
        .enumerate()
        .map(|(i, field)| match field.data_type() {
            DataType::Decimal128(_, type_scale) => column_scale(plan, i, 0)
                .filter(|scale| scale.quotient || i16::from(scale.min) < i16::from(*type_scale)),
            _ => None,
        })
        .collect()
}

/// The display scale of a stored column of `data_type` declared as
/// `declared`: an unconstrained `numeric`'s values are written with their
/// significant digits (each value's own scale is not kept).
pub fn stored_scale(data_type: &DataType, declared: Option<DeclaredType>) -> Option<DisplayScale> {
    let unconstrained = declared.is_none_or(|d| d.oid == NUMERIC_OID && d.typmod == -1);
    (data_type == &UNCONSTRAINED && unconstrained).then_some(DisplayScale::min(0))
}

/// The fewest fraction digits column `index` of `plan`'s output is
/// written with, if the plan determines it.
fn column_scale(plan: &LogicalPlan, index: usize, depth: usize) -> Option<DisplayScale> {
    let depth = deeper(depth)?;
    match plan {
        LogicalPlan::Projection(p) => expr_scale(p.expr.get(index)?, &p.input, depth),
        LogicalPlan::Aggregate(a) => {
            let expr = a.group_expr.iter().chain(&a.aggr_expr).nth(index)?;
            expr_scale(expr, &a.input, depth)
        }
        LogicalPlan::Window(w) => {
            let inputs = w.input.schema().fields().len();
            if index < inputs {
                column_scale(&w.input, index, depth)
            } else {
                expr_scale(w.window_expr.get(index - inputs)?, &w.input, depth)
            }
        }
        LogicalPlan::Join(j) => {
            let left = j.left.schema().fields().len();
            if index < left {
                column_scale(&j.left, index, depth)
            } else {
                column_scale(&j.right, index - left, depth)
            }
        }
        LogicalPlan::Union(u) => any_of(
            u.inputs
                .iter()
                .map(|input| column_scale(input, index, depth)),
        ),
        // The planner casts the rows' literals to their column's type;
        // each keeps the scale it was written with.
        LogicalPlan::Values(v) => any_of(
            v.values
                .iter()
                .map(|row| expr_scale(crate::plan_rewrite::uncast(row.get(index)?), plan, depth)),
        ),
        // A stored column is written as its definition says, else with
        // its type's scale.
        LogicalPlan::TableScan(scan) => {
            let column = match &scan.projection {
                Some(projection) => *projection.get(index)?,
                None => index,
            };
            let provider = source_as_provider(&scan.source).ok()?;
            let defined = (provider.as_ref() as &dyn std::any::Any)
                .downcast_ref::<SnapshotTable>()
                .and_then(|table| table.display_scale(column));
            defined.or_else(
                || match provider.schema().fields().get(column)?.data_type() {
                    DataType::Decimal128(_, scale) => {
                        u8::try_from(*scale).ok().map(DisplayScale::min)
                    }
                    _ => None,
                },
            )
        }
        LogicalPlan::Filter(_)
        | LogicalPlan::Sort(_)
        | LogicalPlan::Limit(_)
        | LogicalPlan::SubqueryAlias(_)
        | LogicalPlan::Distinct(_)
        | LogicalPlan::Repartition(_) => column_scale(plan.inputs().first()?, index, depth),
        _ => None,
    }
}

/// The fewest fraction digits `expr`, evaluated over `input`'s rows, is
/// written with, if it can be told.
pub(crate) fn expr_scale(expr: &Expr, input: &LogicalPlan, depth: usize) -> Option<DisplayScale> {
    let depth = deeper(depth)?;
    match expr {
        Expr::Alias(Alias { expr, .. }) | Expr::Negative(expr) => expr_scale(expr, input, depth),
        Expr::Literal(value, _) => literal_scale(value),
        Expr::Column(column) => {
            let index = input.schema().index_of_column(column).ok()?;
            // An integer is a numeric of scale 0 (the planner's type for a
            // computed decimal column may differ from the executed one).
            column_scale(input, index, depth).or_else(|| {
                input
                    .schema()
                    .field(index)
                    .data_type()
                    .is_integer()
                    .then_some(DisplayScale::min(0))
            })
        }
        Expr::Cast(Cast { expr, field }) => cast_scale(expr, field.data_type(), input, depth),
        Expr::TryCast(cast) => cast_scale(&cast.expr, cast.field.data_type(), input, depth),
        Expr::BinaryExpr(BinaryExpr { left, op, right }) => {
            let (left, right) = (
                expr_scale(left, input, depth)?,
                expr_scale(right, input, depth)?,
            );
            match op {
                Operator::Plus | Operator::Minus | Operator::Modulo => {
                    Some(DisplayScale::min(left.min.max(right.min)))
                }
                Operator::Multiply => left.min.checked_add(right.min).map(DisplayScale::min),
                Operator::Divide => Some(DisplayScale {
                    min: left.min.max(right.min),
                    quotient: true,
                }),
                _ => None,
            }
        }
        Expr::ScalarFunction(call) => function_scale(call, input, depth),
        Expr::AggregateFunction(AggregateFunction { func, params }) => match func.name() {
            "count" => Some(DisplayScale::min(0)),
            "min" | "max" | "first_value" | "last_value" => {
                expr_scale(params.args.first()?, input, depth)
            }
            "sum" => expr_scale(params.args.first()?, input, depth).map(DisplayScale::computed),
            "avg" | "mean" => {
                expr_scale(params.args.first()?, input, depth).map(|arg| DisplayScale {
                    min: arg.min,
                    quotient: true,
                })
            }
            _ => None,
        },
        Expr::WindowFunction(window) => match window.fun.name() {
            "min" | "max" | "first_value" | "last_value" | "lag" | "lead" => {
                expr_scale(window.params.args.first()?, input, depth)
            }
            "avg" | "mean" => {
                expr_scale(window.params.args.first()?, input, depth).map(|arg| DisplayScale {
                    min: arg.min,
                    quotient: true,
                })
            }
            "sum" => {
                expr_scale(window.params.args.first()?, input, depth).map(DisplayScale::computed)
            }
            _ => None,
        },
        Expr::Case(case) => any_of(
            case.when_then_expr
                .iter()
                .map(|(_, then)| then.as_ref())
                .chain(case.else_expr.as_deref())
                .map(|e| expr_scale(e, input, depth)),
        ),
        Expr::ScalarSubquery(subquery) => column_scale(&subquery.subquery, 0, depth),
        _ => None,
    }
}

/// How deeply the rules look into a plan and its expressions: beyond it
/// a column keeps its type's scale (a 3,000-term chain must not exhaust
/// the stack).
const MAX_DEPTH: usize = 256;

/// `depth` one level deeper, if still within [`MAX_DEPTH`].
fn deeper(depth: usize) -> Option<usize> {
    (depth < MAX_DEPTH).then_some(depth + 1)
}

/// The scale of a literal as PostgreSQL reads it: an integer's is 0, a
/// decimal's its written fraction digits.
fn literal_scale(value: &ScalarValue) -> Option<DisplayScale> {
    match value {
        ScalarValue::Decimal128(_, _, scale) => u8::try_from(*scale).ok().map(DisplayScale::min),
        v if v.data_type().is_integer() => Some(DisplayScale::min(0)),
        _ => None,
    }
}

/// The scale of `expr` cast to `target`: a `numeric(p, s)`'s is `s`; to
/// an unconstrained `numeric` a value keeps its own (an integer's 0, a
/// decimal's, a text literal's written digits, a float's significant
/// ones).
fn cast_scale(
    expr: &Expr,
    target: &DataType,
    input: &LogicalPlan,
    depth: usize,
) -> Option<DisplayScale> {
    if target != &UNCONSTRAINED {
        return match target {
            DataType::Decimal128(_, scale) => u8::try_from(*scale).ok().map(DisplayScale::min),
            _ => None,
        };
    }
    match expr {
        Expr::Literal(ScalarValue::Utf8(Some(text)), _) => {
            let (_, scale) = PgNumeric::parse(text).ok()?.precision_and_scale();
            u8::try_from(scale).ok().map(DisplayScale::min)
        }
        _ => match expr.get_type(input.schema()).ok()? {
            t if t.is_integer() || t.is_floating() => Some(DisplayScale::min(0)),
            DataType::Decimal128(..) => expr_scale(expr, input, depth),
            _ => None,
        },
    }
}

/// The scale of a function's result: `round(x, n)` and `trunc(x, n)` have
/// `n` digits, `round`, `trunc`, `ceil` and `floor` of one argument none,
/// `abs` its argument's.
fn function_scale(
    call: &ScalarFunction,
    input: &LogicalPlan,
    depth: usize,
) -> Option<DisplayScale> {
    match (call.func.name(), call.args.as_slice()) {
        ("round" | "trunc", [_, Expr::Literal(digits, _)]) => {
            let digits = digits.cast_to(&DataType::Int64).ok()?;
            match digits {
                ScalarValue::Int64(Some(n)) => u8::try_from(n.max(0)).ok().map(DisplayScale::min),
                _ => None,
            }
        }
        ("round" | "trunc" | "ceil" | "ceiling" | "floor", [_]) => Some(DisplayScale::min(0)),
        ("abs", [arg]) => expr_scale(arg, input, depth),
        ("coalesce" | "nullif" | "greatest" | "least", args) => {
            any_of(args.iter().map(|a| expr_scale(a, input, depth)))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::prelude::{SessionConfig, SessionContext};

    /// How `sql`'s result columns are marked (`"2"`: at least 2 digits,
    /// `"2q"`: a quotient's, at least 2), its decimal literals read as
    /// `numeric` (as Weir's sessions read them).
    async fn displayed(sql: &str) -> Vec<Option<String>> {
        let config =
            SessionConfig::new().set_bool("datafusion.sql_parser.parse_float_as_decimal", true);
        let ctx = SessionContext::new_with_config(config);
        let plan = ctx.state().create_logical_plan(sql).await.unwrap();
        let frame = ctx.execute_logical_plan(plan.clone()).await.unwrap();
        let executed = frame.execute_stream().await.unwrap().schema();
        annotate(&plan, &executed)
            .fields()
            .iter()
            .map(|f| {
                let min = f.metadata().get(PG_NUMERIC_SCALE_KEY)?;
                let quotient = f.metadata().contains_key(PG_NUMERIC_QUOTIENT_KEY);
                Some(format!("{min}{}", if quotient { "q" } else { "" }))
            })
            .collect()
    }

    fn marks(marks: &[Option<&str>]) -> Vec<Option<String>> {
        marks.iter().map(|m| m.map(str::to_owned)).collect()
    }

    #[tokio::test]
    async fn literals_and_casts_keep_their_written_scale() {
        assert_eq!(
            displayed(
                "SELECT 123.4500::numeric, 2::numeric * 3.25, '1.50'::numeric, 1.5::numeric(10, 4)"
            )
            .await,
            marks(&[Some("4"), Some("2"), Some("2"), None])
        );
    }

    #[tokio::test]
    async fn subqueries_functions_aggregates_and_quotients() {
        assert_eq!(
            displayed(
                "SELECT sum(x::numeric), max(x::numeric), min(x::numeric) * 2 \
                 FROM (VALUES (1.5), (2.25)) v(x)"
            )
            .await,
            marks(&[Some("1"), Some("1"), Some("1")])
        );
        assert_eq!(
            displayed(
                "SELECT ceil(x::numeric), x::numeric / 3, max(x::numeric / 3) * 1 \
                 FROM (VALUES (1.5)) v(x) GROUP BY x"
            )
            .await,
            marks(&[Some("0"), Some("1q"), Some("1")])
        );
    }

    #[test]
    fn only_unconstrained_stored_numerics_drop_trailing_zeros() {
        let declared = |typmod| {
            Some(DeclaredType {
                oid: NUMERIC_OID,
                typmod,
            })
        };
        let significant = Some(DisplayScale::min(0));
        assert_eq!(stored_scale(&UNCONSTRAINED, declared(-1)), significant);
        assert_eq!(stored_scale(&UNCONSTRAINED, None), significant);
        let typmod = (38 << 16) + 10 + 4;
        assert_eq!(stored_scale(&UNCONSTRAINED, declared(typmod)), None);
        assert_eq!(stored_scale(&DataType::Decimal128(10, 2), None), None);
    }
}
