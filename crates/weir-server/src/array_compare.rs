//! `x op ANY (array)` and `x op ALL (array)` with SQL's three-valued
//! answer, as PostgreSQL gives it.
//!
//! DataFusion plans `x = ANY (a)` as `array_has(a, x)` and the other
//! comparisons from `array_min`/`array_max`, all of which skip NULL
//! elements: `3 = ANY ('{1,NULL}')` is false where PostgreSQL's is NULL.
//! The parser writes each such comparison as `weir_compare_array(x, a,
//! 'op', 'any' | 'all')` (`weir-sql`'s `pg_forms.rs`), answered here:
//!
//! - `ANY` is true if some element compares true, else NULL if some
//!   comparison is NULL (a NULL `x` or element), else false: an empty
//!   array gives false, whatever `x` is;
//! - `ALL` is false if some element compares false, else NULL if some
//!   comparison is NULL, else true: an empty array gives true;
//! - a NULL array gives NULL.
//!
//! `x = ANY` and `x <> ALL` of a constant array are `x IN (...)` and
//! `x NOT IN (...)`, which have the same answers and a hash lookup.

use std::sync::Arc;

use datafusion::arrow::array::{
    new_null_array, Array, ArrayRef, AsArray, BooleanArray, Datum, Scalar, UInt32Array,
};
use datafusion::arrow::buffer::{BooleanBuffer, NullBuffer};
use datafusion::arrow::compute::kernels::cmp;
use datafusion::arrow::compute::take;
use datafusion::arrow::datatypes::{DataType, Field};
use datafusion::arrow::error::ArrowError;
use datafusion::common::{plan_err, DataFusionError, Result, ScalarValue};
use datafusion::logical_expr::simplify::{ExprSimplifyResult, SimplifyContext};
use datafusion::logical_expr::type_coercion::binary::comparison_coercion;
use datafusion::logical_expr::{
    in_list, ColumnarValue, Expr, ScalarFunctionArgs, ScalarUDFImpl, Signature, Volatility,
};

use crate::error::{SqlState, WeirError};
use crate::types::pg_type_name;

/// The function's name, as the parser writes it.
pub const NAME: &str = "weir_compare_array";

/// A comparison operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Comparison {
    Eq,
    NotEq,
    Lt,
    LtEq,
    Gt,
    GtEq,
}

impl Comparison {
    fn parse(op: &str) -> Option<Self> {
        Some(match op {
            "=" => Comparison::Eq,
            "<>" | "!=" => Comparison::NotEq,
            "<" => Comparison::Lt,
            "<=" => Comparison::LtEq,
            ">" => Comparison::Gt,
            ">=" => Comparison::GtEq,
            _ => return None,
        })
    }

    /// `left op right`, NULL where either side is.
    fn apply(self, left: &dyn Datum, right: &dyn Datum) -> Result<BooleanArray, ArrowError> {
        match self {
            Comparison::Eq => cmp::eq(left, right),
            Comparison::NotEq => cmp::neq(left, right),
            Comparison::Lt => cmp::lt(left, right),
            Comparison::LtEq => cmp::lt_eq(left, right),
            Comparison::Gt => cmp::gt(left, right),
            Comparison::GtEq => cmp::gt_eq(left, right),
        }
    }
}

/// The constant arguments: the operator and whether every element must
/// compare true (`ALL`) or one (`ANY`).
fn quantified(args: &[ColumnarValue]) -> Result<(Comparison, bool)> {
    let text = |value: &ColumnarValue| match value {
        ColumnarValue::Scalar(ScalarValue::Utf8(Some(text))) => Some(text.clone()),
        _ => None,
    };
    let (Some(op), Some(quantifier)) = (text(&args[2]), text(&args[3])) else {
        return plan_err!("{NAME} takes a constant operator and quantifier");
    };
    match (Comparison::parse(&op), quantifier.as_str()) {
        (Some(op), "any") => Ok((op, false)),
        (Some(op), "all") => Ok((op, true)),
        _ => plan_err!("{NAME}: no comparison {op} {quantifier}"),
    }
}

/// What one comparison's results decide: the comparisons that settle the
/// answer (a true one for `ANY`, a false one for `ALL`) and the NULL ones.
fn decisive_and_unknown(compared: &BooleanArray, all: bool) -> (BooleanBuffer, BooleanBuffer) {
    let values = if all {
        !compared.values()
    } else {
        compared.values().clone()
    };
    match compared.nulls() {
        Some(valid) => (&values & valid.inner(), !valid.inner()),
        None => (values, BooleanBuffer::new_unset(compared.len())),
    }
}

/// The answers from each row's `decided` (a comparison settled it) and
/// `unknown` (a comparison was NULL) bits: `!all` where decided, else NULL
/// where unknown, else `all`; NULL too where `rows_valid` says the row's
/// array is NULL.
fn answers(
    decided: BooleanBuffer,
    unknown: BooleanBuffer,
    all: bool,
    rows_valid: Option<&NullBuffer>,
) -> BooleanArray {
    let values = if all { !&decided } else { decided.clone() };
    let mut valid = &decided | &!&unknown;
    if let Some(rows) = rows_valid {
        valid = &valid & rows.inner();
    }
    BooleanArray::new(values, Some(NullBuffer::new(valid)))
}

/// Each row of `x` against every element of the one list `list`: one
/// vectorized comparison per element.
fn against_one_list(
    x: &ArrayRef,
    list: &ArrayRef,
    op: Comparison,
    all: bool,
) -> Result<BooleanArray> {
    let list = list.as_list::<i32>();
    if list.is_null(0) {
        return Ok(new_null_array(&DataType::Boolean, x.len())
            .as_boolean()
            .clone());
    }
    let elements = list.value(0);
    let mut decided = BooleanBuffer::new_unset(x.len());
    let mut unknown = BooleanBuffer::new_unset(x.len());
    for element in 0..elements.len() {
        let compared = op.apply(x, &Scalar::new(elements.slice(element, 1)))?;
        let (decisive, null) = decisive_and_unknown(&compared, all);
        decided = &decided | &decisive;
        unknown = &unknown | &null;
    }
    Ok(answers(decided, unknown, all, None))
}

/// Each row of `x` against the elements of its own row of `lists`: the
/// elements compared in one kernel call with `x` repeated to line up.
fn against_row_lists(
    x: &ArrayRef,
    lists: &ArrayRef,
    op: Comparison,
    all: bool,
) -> Result<BooleanArray> {
    let lists = lists.as_list::<i32>();
    let offsets = lists.value_offsets();
    let first = offsets[0] as usize;
    let elements = lists
        .values()
        .slice(first, offsets[lists.len()] as usize - first);
    // The row each element belongs to (a loop over elements, not rows:
    // Arrow has no kernel that repeats each row a varying number of times).
    let owners: UInt32Array = offsets
        .windows(2)
        .enumerate()
        .flat_map(|(row, ends)| std::iter::repeat_n(row as u32, (ends[1] - ends[0]) as usize))
        .collect();
    let compared = op.apply(&take(x.as_ref(), &owners, None)?, &elements)?;
    let (decisive, null) = decisive_and_unknown(&compared, all);
    // Whether any of a row's elements is set (a count per row: Arrow has
    // no kernel that reduces a list's elements).
    let any_of_row = |bits: &BooleanBuffer| {
        BooleanBuffer::collect_bool(lists.len(), |row| {
            let (start, end) = (
                offsets[row] as usize - first,
                offsets[row + 1] as usize - first,
            );
            bits.slice(start, end - start).count_set_bits() > 0
        })
    };
    Ok(answers(
        any_of_row(&decisive),
        any_of_row(&null),
        all,
        lists.nulls(),
    ))
}

/// The element type of `array` (`x`'s for an untyped NULL), if it is an
/// array.
fn element_type(x: &DataType, array: &DataType) -> Option<DataType> {
    match array {
        DataType::List(f) | DataType::LargeList(f) | DataType::FixedSizeList(f, _) => {
            Some(f.data_type().clone())
        }
        DataType::Null => Some(x.clone()),
        _ => None,
    }
}

/// `weir_compare_array(x, array, op, quantifier)`: see the module
/// documentation.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct CompareArray {
    signature: Signature,
}

impl Default for CompareArray {
    fn default() -> Self {
        CompareArray {
            signature: Signature::user_defined(Volatility::Immutable),
        }
    }
}

impl ScalarUDFImpl for CompareArray {
    fn name(&self) -> &str {
        NAME
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    /// PostgreSQL's errors for operands that cannot be compared so
    /// (DataFusion reports a failed coercion as text, without its code,
    /// so [`Self::coerce_types`] leaves such operands to this).
    fn return_type(&self, args: &[DataType]) -> Result<DataType> {
        let refuse = |code: &'static str, message: String| {
            Err(DataFusionError::External(Box::new(WeirError::new(
                SqlState(code),
                message,
            ))))
        };
        let [x, array, _, _] = args else {
            return plan_err!("{NAME} takes four arguments");
        };
        match element_type(x, array) {
            None => refuse(
                "42809",
                "op ANY/ALL (array) requires array on right side".to_owned(),
            ),
            Some(element) if comparison_coercion(x, &element).is_none() => refuse(
                "42883",
                format!(
                    "operator does not exist: {} = {}",
                    pg_type_name(x),
                    pg_type_name(&element)
                ),
            ),
            Some(_) => Ok(DataType::Boolean),
        }
    }

    /// `x` and the elements are compared in the type both coerce to, as
    /// `x = element` would be.
    fn coerce_types(&self, args: &[DataType]) -> Result<Vec<DataType>> {
        let [x, array, _, _] = args else {
            return plan_err!("{NAME} takes four arguments");
        };
        let common = element_type(x, array).and_then(|e| comparison_coercion(x, &e));
        let Some(common) = common else {
            return Ok(args.to_vec());
        };
        let list = DataType::List(Arc::new(Field::new_list_field(common.clone(), true)));
        Ok(vec![common, list, DataType::Utf8, DataType::Utf8])
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let (op, all) = quantified(&args.args)?;
        let (x, x_scalar) = crate::functions::argument_array(&args.args[0])?;
        let answers = match &args.args[1] {
            ColumnarValue::Scalar(list) => against_one_list(&x, &list.to_array()?, op, all)?,
            ColumnarValue::Array(lists) => {
                let x = match x_scalar {
                    true => args.args[0].to_array(lists.len())?,
                    false => x,
                };
                return Ok(ColumnarValue::Array(Arc::new(against_row_lists(
                    &x, lists, op, all,
                )?)));
            }
        };
        crate::functions::shaped(Arc::new(answers), x_scalar)
    }

    /// `x = ANY` / `x <> ALL` of a constant array as `x [NOT] IN (...)`.
    fn simplify(&self, args: Vec<Expr>, _info: &SimplifyContext) -> Result<ExprSimplifyResult> {
        let list_in = match (&args[1], &args[2], &args[3]) {
            (
                Expr::Literal(ScalarValue::List(list), _),
                Expr::Literal(ScalarValue::Utf8(Some(op)), _),
                Expr::Literal(ScalarValue::Utf8(Some(quantifier)), _),
            ) if !list.is_null(0) => match (Comparison::parse(op), quantifier.as_str()) {
                (Some(Comparison::Eq), "any") => Some((list.value(0), false)),
                (Some(Comparison::NotEq), "all") => Some((list.value(0), true)),
                _ => None,
            },
            _ => None,
        };
        let Some((elements, negated)) = list_in else {
            return Ok(ExprSimplifyResult::Original(args));
        };
        let elements = (0..elements.len())
            .map(|i| {
                Ok(Expr::Literal(
                    ScalarValue::try_from_array(&elements, i)?,
                    None,
                ))
            })
            .collect::<Result<Vec<_>>>()?;
        let x = args.into_iter().next().expect("four arguments");
        Ok(ExprSimplifyResult::Simplified(in_list(
            x, elements, negated,
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{Int64Array, ListArray};
    use datafusion::arrow::datatypes::Int64Type;

    fn lists() -> ArrayRef {
        Arc::new(ListArray::from_iter_primitive::<Int64Type, _, _>(vec![
            Some(vec![Some(1), None]),
            Some(vec![Some(3)]),
            Some(vec![]),
            None,
            Some(vec![Some(1), Some(2)]),
        ]))
    }

    fn x() -> ArrayRef {
        Arc::new(Int64Array::from(vec![
            Some(3),
            Some(3),
            None,
            Some(1),
            None,
        ]))
    }

    #[test]
    fn any_is_null_where_no_element_matched_and_one_was_null() {
        let got = against_row_lists(&x(), &lists(), Comparison::Eq, false).unwrap();
        let want = BooleanArray::from(vec![None, Some(true), Some(false), None, None]);
        assert_eq!(got, want);
    }

    #[test]
    fn all_is_false_once_an_element_fails_and_true_when_empty() {
        let got = against_row_lists(&x(), &lists(), Comparison::Gt, true).unwrap();
        // 3 > 1 and 3 > NULL: NULL; 3 > 3: false; NULL > (nothing): true.
        let want = BooleanArray::from(vec![None, Some(false), Some(true), None, None]);
        assert_eq!(got, want);
    }

    #[test]
    fn one_list_against_every_row_answers_as_row_lists_do() {
        let list: ArrayRef = Arc::new(ListArray::from_iter_primitive::<Int64Type, _, _>(vec![
            Some(vec![Some(2), None]),
        ]));
        let x: ArrayRef = Arc::new(Int64Array::from(vec![Some(2), Some(5), Some(0), None]));
        let got = against_one_list(&x, &list, Comparison::Lt, false).unwrap();
        // 2 < 2 no, 2 < NULL unknown; 0 < 2 true.
        let want = BooleanArray::from(vec![None, None, Some(true), None]);
        assert_eq!(got, want);
    }
}
