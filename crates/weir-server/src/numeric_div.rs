//! Division of `numeric`s with PostgreSQL's digits.
//!
//! DataFusion divides decimals at the dividend's scale plus 4, truncating:
//! `1 / 3::numeric` is `0.3333` and `sum(x) / count(*)` of integers keeps
//! four fraction digits. PostgreSQL gives a quotient at least 16
//! significant digits (`0.33333333333333333333`, 20 fraction digits for a
//! quotient below 1), rounded. [`NumericDiv`] computes every quotient of
//! two decimals at [`QUOTIENT_SCALE`] fraction digits (or the operands'
//! scale where larger), rounded half away from zero, in 256-bit
//! arithmetic; the checked-arithmetic rule puts it in place of `/`
//! between `numeric`s. `numeric_display.rs` then writes each quotient
//! with PostgreSQL's display scale for its magnitude. A quotient needing
//! more than the 18 digits left before the point fails with 22003, and a
//! division by zero with 22012.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, Decimal128Array, UInt64Array};
use datafusion::arrow::datatypes::{i256, DataType, Decimal128Type};
use datafusion::common::{DataFusionError, Result};
use datafusion::functions::utils::make_scalar_function;
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};

use crate::error::{SqlState, WeirError};

/// The fraction digits a quotient is computed with: PostgreSQL's 16
/// significant digits for quotients from 0.0001 up.
pub const QUOTIENT_SCALE: i8 = 20;

/// The type of a quotient of decimals with scales `left` and `right`.
pub fn quotient_type(left: i8, right: i8) -> DataType {
    DataType::Decimal128(38, QUOTIENT_SCALE.max(left).max(right).min(38))
}

/// The function `weir_numeric_div(a, b)`: `a / b` for decimals.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct NumericDiv {
    output: DataType,
    signature: Signature,
}

impl NumericDiv {
    /// The function dividing decimals of scales `left` and `right`.
    pub fn udf(left: i8, right: i8) -> ScalarUDF {
        ScalarUDF::from(NumericDiv {
            output: quotient_type(left, right),
            signature: Signature::any(2, Volatility::Immutable),
        })
    }
}

impl ScalarUDFImpl for NumericDiv {
    fn name(&self) -> &str {
        "weir_numeric_div"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(self.output.clone())
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let quotients = |arrays: &[ArrayRef]| -> Result<ArrayRef> {
            Ok(Arc::new(divide(&arrays[0], &arrays[1], &self.output)?))
        };
        make_scalar_function(quotients, vec![])(&args.args)
    }
}

/// `left / right` element by element, at `output`'s scale. A loop over
/// values: each quotient is a 256-bit division rounded at its own scale,
/// which no Arrow kernel does (Arrow's decimal division truncates).
fn divide(left: &ArrayRef, right: &ArrayRef, output: &DataType) -> Result<Decimal128Array> {
    let (
        DataType::Decimal128(_, left_scale),
        DataType::Decimal128(_, right_scale),
        DataType::Decimal128(precision, scale),
    ) = (left.data_type(), right.data_type(), output)
    else {
        return Err(DataFusionError::Internal(format!(
            "weir_numeric_div of {} and {}",
            left.data_type(),
            right.data_type()
        )));
    };
    let division = Division::new(*left_scale, *right_scale, *precision, *scale);
    let (dividends, divisors) = (
        left.as_primitive::<Decimal128Type>(),
        right.as_primitive::<Decimal128Type>(),
    );
    division.quotients(
        dividends
            .iter()
            .zip(divisors.iter())
            .map(|pair| pair.0.zip(pair.1)),
    )
}

/// The averages `sums / counts` (PostgreSQL's `avg` of `numeric`s), at
/// `output`'s scale; NULL where the count is 0.
pub fn average(
    sums: &Decimal128Array,
    counts: &UInt64Array,
    output: &DataType,
) -> Result<Decimal128Array> {
    let (DataType::Decimal128(_, sum_scale), DataType::Decimal128(precision, scale)) =
        (sums.data_type(), output)
    else {
        return Err(DataFusionError::Internal(format!(
            "average of {} as {output}",
            sums.data_type()
        )));
    };
    let division = Division::new(*sum_scale, 0, *precision, *scale);
    division.quotients(sums.iter().zip(counts.iter()).map(|pair| match pair {
        (Some(sum), Some(count)) if count > 0 => Some((sum, i128::from(count))),
        _ => None,
    }))
}

/// The scales of one division's operands and result.
struct Division {
    left_scale: i32,
    right_scale: i32,
    /// The result's precision.
    precision: u8,
    /// The result's scale: every quotient is rounded at PostgreSQL's
    /// scale for it, at most this.
    scale: i32,
    /// The magnitude a result must stay below.
    limit: i256,
}

impl Division {
    /// Dividing decimals of scales `left_scale` by `right_scale` into
    /// `numeric(precision, scale)`.
    fn new(left_scale: i8, right_scale: i8, precision: u8, scale: i8) -> Self {
        Division {
            left_scale: i32::from(left_scale),
            right_scale: i32::from(right_scale),
            precision,
            scale: i32::from(scale),
            limit: i256::from_i128(10).wrapping_pow(u32::from(precision)),
        }
    }

    /// The quotient of each pair of `pairs` (NULL for none) as a decimal
    /// array of the result's type.
    fn quotients(
        &self,
        pairs: impl Iterator<Item = Option<(i128, i128)>>,
    ) -> Result<Decimal128Array> {
        let quotients = pairs
            .map(|pair| pair.map(|(a, b)| self.quotient(a, b)).transpose())
            .collect::<std::result::Result<Decimal128Array, WeirError>>()
            .map_err(|e| DataFusionError::External(Box::new(e)))?;
        let scale = i8::try_from(self.scale).expect("a decimal scale");
        Ok(quotients.with_precision_and_scale(self.precision, scale)?)
    }

    /// `a / 10^left_scale` divided by `b / 10^right_scale`, rounded half
    /// away from zero at PostgreSQL's scale for it, as an integer at
    /// `scale`.
    fn quotient(&self, a: i128, b: i128) -> std::result::Result<i128, WeirError> {
        if b == 0 {
            return Err(WeirError::new(
                SqlState::DIVISION_BY_ZERO,
                "division by zero",
            ));
        }
        let rounding = self.rounding_scale(a, b);
        // a * 10^(rounding - ls + rs) / b, with the power on whichever side
        // keeps it whole.
        let shift = rounding - self.left_scale + self.right_scale;
        let (mut dividend, mut divisor) = (i256::from_i128(a), i256::from_i128(b));
        if shift >= 0 {
            dividend = dividend
                .checked_mul(power_of_ten(shift)?)
                .ok_or_else(out_of_range)?;
        } else {
            divisor = divisor
                .checked_mul(power_of_ten(-shift)?)
                .ok_or_else(out_of_range)?;
        }
        let mut q = dividend.wrapping_div(divisor);
        let r = dividend.wrapping_rem(divisor);
        if r.wrapping_abs().wrapping_mul(i256::from_i128(2)) >= divisor.wrapping_abs() {
            q = if dividend.is_negative() != divisor.is_negative() {
                q.wrapping_sub(i256::ONE)
            } else {
                q.wrapping_add(i256::ONE)
            };
        }
        let q = q
            .checked_mul(power_of_ten(self.scale - rounding)?)
            .ok_or_else(out_of_range)?;
        if q.wrapping_abs() >= self.limit {
            return Err(out_of_range());
        }
        q.to_i128().ok_or_else(out_of_range)
    }

    /// PostgreSQL's result scale for `a / b` (`select_div_scale`): 16
    /// significant digits of the quotient's estimated magnitude, at least
    /// the operands' scales; at most [`Division::scale`].
    fn rounding_scale(&self, a: i128, b: i128) -> i32 {
        let (weight_a, first_a) = leading_digit(a, self.left_scale);
        let (weight_b, first_b) = leading_digit(b, self.right_scale);
        // With equal first digits PostgreSQL assumes the smaller quotient.
        let weight = weight_a - weight_b - i32::from(first_a <= first_b);
        (16 - 4 * weight)
            .max(self.left_scale)
            .max(self.right_scale)
            .clamp(0, self.scale)
    }
}

/// The weight (position in base-10000 digits, 0 for the units) and value
/// of the first nonzero base-10000 digit of `raw / 10^scale`; `(0, 0)` for
/// zero, as PostgreSQL takes them.
fn leading_digit(raw: i128, scale: i32) -> (i32, u128) {
    let magnitude = raw.unsigned_abs();
    if magnitude == 0 {
        return (0, 0);
    }
    let exponent = magnitude.ilog10() as i32 - scale;
    let weight = exponent.div_euclid(4);
    let below = scale + 4 * weight;
    let first = if below >= 0 {
        magnitude / 10u128.pow(below as u32)
    } else {
        magnitude * 10u128.pow(below.unsigned_abs())
    };
    (weight, first)
}

/// `10^exponent`, for an exponent up to 76.
fn power_of_ten(exponent: i32) -> std::result::Result<i256, WeirError> {
    u32::try_from(exponent)
        .ok()
        .and_then(|e| i256::from_i128(10).checked_pow(e))
        .ok_or_else(out_of_range)
}

/// 22003 for a quotient beyond the digits a `numeric` result holds.
fn out_of_range() -> WeirError {
    WeirError::new(
        SqlState::NUMERIC_OUT_OF_RANGE,
        "value overflows numeric format",
    )
    .with_detail(
        "A quotient of numerics is kept with 20 fraction digits and up to 18 before the point.",
    )
    .with_hint("Cast an operand to double precision for larger quotients.")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn div(a: i128, a_scale: i8, b: i128, b_scale: i8) -> std::result::Result<String, String> {
        let left: ArrayRef = Arc::new(
            Decimal128Array::from(vec![a])
                .with_precision_and_scale(38, a_scale)
                .unwrap(),
        );
        let right: ArrayRef = Arc::new(
            Decimal128Array::from(vec![b])
                .with_precision_and_scale(38, b_scale)
                .unwrap(),
        );
        let output = quotient_type(a_scale, b_scale);
        let DataType::Decimal128(_, scale) = output else {
            unreachable!()
        };
        match divide(&left, &right, &output) {
            Ok(q) => Ok(arrow_pg::numeric::PgNumeric::from_i128(q.value(0), scale).to_text()),
            Err(e) => Err(e.to_string()),
        }
    }

    #[test]
    fn quotients_are_rounded_at_postgresql_scale() {
        assert_eq!(div(1, 0, 3, 0).unwrap(), "0.33333333333333333333");
        assert_eq!(div(2, 0, 3, 0).unwrap(), "0.66666666666666666667");
        assert_eq!(div(-2, 0, 3, 0).unwrap(), "-0.66666666666666666667");
        assert_eq!(div(2, 0, -3, 0).unwrap(), "-0.66666666666666666667");
        assert_eq!(div(1, 0, 8, 0).unwrap(), "0.12500000000000000000");
        // 16 digits from 1 up, 12 from 10,000 up, rounded there.
        assert_eq!(div(10, 0, 3, 0).unwrap(), "3.33333333333333330000");
        assert_eq!(
            div(123456789, 0, 7, 0).unwrap(),
            "17636684.14285714285700000000"
        );
        // Equal first digits: PostgreSQL assumes a quotient below 1.
        assert_eq!(div(3125, 3, 3, 0).unwrap(), "1.04166666666666666667");
        assert_eq!(div(15, 1, 5, 2).unwrap(), "30.00000000000000000000");
    }

    #[test]
    fn leading_digits_are_base_10000() {
        assert_eq!(leading_digit(20000, 0), (1, 2));
        assert_eq!(leading_digit(3125, 3), (0, 3));
        assert_eq!(leading_digit(125, 3), (-1, 1250));
        assert_eq!(leading_digit(33, 6), (-2, 3300));
        assert_eq!(leading_digit(-7, 0), (0, 7));
        assert_eq!(leading_digit(0, 4), (0, 0));
    }

    #[test]
    fn zero_divisors_and_huge_quotients_fail() {
        assert!(div(1, 0, 0, 0).unwrap_err().contains("division by zero"));
        let huge = 10i128.pow(30);
        assert!(div(huge, 0, 1, 0).unwrap_err().contains("overflows"));
        assert_eq!(div(10i128.pow(17), 0, 1, 0).unwrap().len(), 18 + 1 + 20);
    }
}
