//! `numeric` cast to text with PostgreSQL's display scale.
//!
//! Weir's `numeric` has one scale per column (an unconstrained one is
//! `Decimal128(38, 10)`), so Arrow's cast to text wrote `100::numeric` as
//! `100.0000000000`. PostgreSQL writes a value with its display scale:
//! `100`, `1.50`, `2.5000000000000000` for `10::numeric / 4`. The result
//! columns of a query get that scale from `numeric_display.rs`, which
//! works it out from the plan; [`NumericText`] applies the same rules to a
//! cast to text inside the query (`x::text`, `'total: ' || x`): the
//! analyzer rule [`rule`] puts `weir_numeric_text` in place of each cast
//! of a `numeric` to text whose display scale the plan determines, and
//! leaves the others to Arrow's cast.

use std::sync::Arc;

use arrow_pg::numeric::PgNumeric;
use datafusion::arrow::array::{ArrayRef, AsArray, StringArray};
use datafusion::arrow::datatypes::{DataType, Decimal128Type};
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::Transformed;
use datafusion::common::{DataFusionError, Result};
use datafusion::functions::utils::make_scalar_function;
use datafusion::logical_expr::{
    Cast, ColumnarValue, Expr, ExprSchemable, LogicalPlan, ScalarFunctionArgs, ScalarUDF,
    ScalarUDFImpl, Signature, Volatility,
};
use datafusion::optimizer::AnalyzerRule;

use crate::numeric_display::{expr_scale, DisplayScale};

/// The function `weir_numeric_text(x)`: a `numeric` written as text with
/// a display scale.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct NumericText {
    scale: DisplayScale,
    signature: Signature,
}

impl NumericText {
    /// The function writing `numeric`s with `scale`.
    pub fn udf(scale: DisplayScale) -> ScalarUDF {
        ScalarUDF::from(NumericText {
            scale,
            signature: Signature::any(1, Volatility::Immutable),
        })
    }
}

impl ScalarUDFImpl for NumericText {
    fn name(&self) -> &str {
        "weir_numeric_text"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Utf8)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let scale = self.scale;
        let texts = move |arrays: &[ArrayRef]| -> Result<ArrayRef> {
            Ok(Arc::new(write(&arrays[0], scale)?))
        };
        make_scalar_function(texts, vec![])(&args.args)
    }
}

/// Each of `values` (decimals) as PostgreSQL writes it with `scale`, as
/// the wire encoder writes a result column marked with it. A loop over
/// values: each is formatted on its own, as any cast to text does.
fn write(values: &ArrayRef, scale: DisplayScale) -> Result<StringArray> {
    let DataType::Decimal128(_, type_scale) = values.data_type() else {
        return Err(DataFusionError::Internal(format!(
            "weir_numeric_text of {}",
            values.data_type()
        )));
    };
    let type_scale = *type_scale;
    let max = usize::try_from(type_scale).unwrap_or(0);
    let min = usize::from(scale.min);
    Ok(values
        .as_primitive::<Decimal128Type>()
        .iter()
        .map(|value| {
            value.map(|v| {
                PgNumeric::from_i128(v, type_scale)
                    .with_display_scale(min, scale.quotient, max)
                    .to_text()
            })
        })
        .collect())
}

/// Puts [`NumericText`] in place of the casts of `numeric` to text whose
/// display scale the plan determines (see the module doc). Runs after
/// type coercion, which adds the casts of `'...' || x`.
#[derive(Debug)]
pub struct NumericTextCasts;

impl AnalyzerRule for NumericTextCasts {
    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        // Nodes with one input only: a join's expressions read both
        // inputs, which the scale rules do not follow.
        crate::plan_rewrite::rewrite_expressions_over_input(plan, &text_cast)
    }

    fn name(&self) -> &str {
        "weir_numeric_text"
    }
}

/// `e`, if it is a cast of a `numeric` over `input`'s rows to plain text
/// with a display scale the plan determines, as [`NumericText`].
fn text_cast(e: Expr, input: &LogicalPlan) -> Result<Transformed<Expr>> {
    let Expr::Cast(Cast { expr, field }) = &e else {
        return Ok(Transformed::no(e));
    };
    // A tagged text (`varchar`) keeps its cast, which `casts.rs` rewrites.
    if field.data_type() != &DataType::Utf8 || !field.metadata().is_empty() {
        return Ok(Transformed::no(e));
    }
    if !matches!(expr.get_type(input.schema()), Ok(DataType::Decimal128(..))) {
        return Ok(Transformed::no(e));
    }
    match expr_scale(expr, input, 0) {
        Some(scale) => {
            let inner = expr.as_ref().clone();
            Ok(Transformed::yes(NumericText::udf(scale).call(vec![inner])))
        }
        None => Ok(Transformed::no(e)),
    }
}

/// The rule, ready to add to a session.
pub fn rule() -> Arc<dyn AnalyzerRule + Send + Sync> {
    Arc::new(NumericTextCasts)
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::Decimal128Array;

    fn written(values: &[i128], type_scale: i8, min: u8, quotient: bool) -> Vec<String> {
        let array: ArrayRef = Arc::new(
            Decimal128Array::from(values.to_vec())
                .with_precision_and_scale(38, type_scale)
                .unwrap(),
        );
        let texts = write(&array, DisplayScale { min, quotient }).unwrap();
        texts.iter().map(|t| t.unwrap().to_owned()).collect()
    }

    #[test]
    fn values_are_written_with_their_display_scale() {
        // 100, 1.5 and 19.9 at scale 10, written with at least 0 and 2 digits.
        let values = [100_0000000000, 1_5000000000, 19_9000000000];
        assert_eq!(written(&values, 10, 0, false), ["100", "1.5", "19.9"]);
        assert_eq!(written(&values, 10, 2, false), ["100.00", "1.50", "19.90"]);
        // A quotient: 16 significant digits.
        assert_eq!(
            written(&[2_50000000000000000000], 20, 0, true),
            ["2.5000000000000000"]
        );
    }
}
