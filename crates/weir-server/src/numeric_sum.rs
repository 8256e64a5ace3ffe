//! `sum` of `numeric`s that fails on overflow.
//!
//! DataFusion's `sum` of a decimal adds with wrapping arithmetic: a sum
//! past the 128 bits Weir's `numeric` holds (about 1.7e38) turns into a
//! wrong number of the other sign. PostgreSQL's `numeric` cannot overflow
//! there; Weir cannot hold the sum, so it fails with 22003, as the stream
//! engine's running sums do (`weir_stream::aggregate::accumulator`).
//! [`NumericSum`] is DataFusion's `sum` (its types, its state, its other
//! accumulators) with checked additions for `Decimal128`, registered
//! under `sum`'s name so that views and queries plan it alike. `sum` of
//! integers stays DataFusion's: a `bigint` sum is a `numeric` sum
//! (`aggregates.rs`), and `integer` sums cannot reach `bigint`'s limits.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, BooleanArray};
use datafusion::arrow::compute::sum_checked;
use datafusion::arrow::datatypes::{DataType, Decimal128Type, FieldRef};
use datafusion::common::{DataFusionError, Result, ScalarValue};
use datafusion::functions_aggregate::sum::Sum;
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::{
    Accumulator, AggregateUDF, AggregateUDFImpl, EmitTo, GroupsAccumulator, ReversedUDAF,
    SetMonotonicity, Signature,
};
use datafusion_functions_aggregate_common::aggregate::groups_accumulator::prim_op::PrimitiveGroupsAccumulator;

use crate::error::{SqlState, WeirError};

/// `sum`, with checked additions for `numeric`s.
#[derive(Debug, PartialEq, Eq, Hash, Default)]
pub struct NumericSum {
    inner: Sum,
}

/// The function, to register in a session.
pub fn udaf() -> AggregateUDF {
    AggregateUDF::from(NumericSum::default())
}

/// Whether a sum of `args` adds `numeric`s without `DISTINCT` (a distinct
/// sum keeps DataFusion's accumulator: each value counts once, so a
/// distinct sum past 1.7e38 needs values near the limit).
fn sums_numerics(args: &AccumulatorArgs) -> bool {
    !args.is_distinct && matches!(args.return_type(), DataType::Decimal128(_, _))
}

/// 22003 for a sum that passed what a `numeric` holds.
fn numeric_overflow() -> DataFusionError {
    DataFusionError::External(Box::new(WeirError::new(
        SqlState::NUMERIC_OUT_OF_RANGE,
        "numeric field overflow: a sum passed 1.7e38 in magnitude, the most Weir's numeric holds",
    )))
}

impl AggregateUDFImpl for NumericSum {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn aliases(&self) -> &[String] {
        self.inner.aliases()
    }

    fn signature(&self) -> &Signature {
        self.inner.signature()
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        self.inner.return_type(arg_types)
    }

    fn accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        if sums_numerics(&args) {
            Ok(Box::new(CheckedSum::new(args.return_type().clone())))
        } else {
            self.inner.accumulator(args)
        }
    }

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        self.inner.state_fields(args)
    }

    fn groups_accumulator_supported(&self, args: AccumulatorArgs) -> bool {
        self.inner.groups_accumulator_supported(args)
    }

    fn create_groups_accumulator(
        &self,
        args: AccumulatorArgs,
    ) -> Result<Box<dyn GroupsAccumulator>> {
        if sums_numerics(&args) {
            Ok(Box::new(GroupsCheckedSum::new(args.return_type())))
        } else {
            self.inner.create_groups_accumulator(args)
        }
    }

    fn create_sliding_accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        if sums_numerics(&args) {
            Ok(Box::new(CheckedSum::new(args.return_type().clone())))
        } else {
            self.inner.create_sliding_accumulator(args)
        }
    }

    fn reverse_expr(&self) -> ReversedUDAF {
        ReversedUDAF::Identical
    }

    fn set_monotonicity(&self, data_type: &DataType) -> SetMonotonicity {
        self.inner.set_monotonicity(data_type)
    }
}

/// A running `numeric` sum with checked additions; it retracts too, so
/// window frames that slide use it.
#[derive(Debug)]
struct CheckedSum {
    sum: i128,
    /// The values summed (less those retracted): the sum of none is NULL.
    count: u64,
    data_type: DataType,
}

impl CheckedSum {
    fn new(data_type: DataType) -> Self {
        Self {
            sum: 0,
            count: 0,
            data_type,
        }
    }

    /// Adds `values` (negated when `sign` is -1).
    fn add(&mut self, values: &ArrayRef, sign: i128) -> Result<()> {
        let values = values.as_primitive::<Decimal128Type>();
        let added = sum_checked(values).map_err(|_| numeric_overflow())?;
        if let Some(added) = added {
            self.sum = added
                .checked_mul(sign)
                .and_then(|v| self.sum.checked_add(v))
                .ok_or_else(numeric_overflow)?;
        }
        Ok(())
    }

    fn present(values: &ArrayRef) -> u64 {
        (values.len() - values.null_count()) as u64
    }
}

impl Accumulator for CheckedSum {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        self.add(&values[0], 1)?;
        self.count += Self::present(&values[0]);
        Ok(())
    }

    fn retract_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        self.add(&values[0], -1)?;
        self.count -= Self::present(&values[0]);
        Ok(())
    }

    fn supports_retract_batch(&self) -> bool {
        true
    }

    /// Partial sums merge as values do: a NULL partial sum summed none.
    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        self.update_batch(states)
    }

    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        Ok(vec![self.evaluate()?])
    }

    fn evaluate(&mut self) -> Result<ScalarValue> {
        let sum = (self.count != 0).then_some(self.sum);
        ScalarValue::new_primitive::<Decimal128Type>(sum, &self.data_type)
    }

    fn size(&self) -> usize {
        size_of_val(self)
    }
}

/// DataFusion's groups accumulator for sums with a checked addition: the
/// addition cannot return an error, so it raises `overflowed`, and each
/// batch that raised it fails.
struct GroupsCheckedSum {
    inner: Box<dyn GroupsAccumulator>,
    overflowed: Arc<AtomicBool>,
}

impl GroupsCheckedSum {
    fn new(data_type: &DataType) -> Self {
        let overflowed = Arc::new(AtomicBool::new(false));
        let raise = Arc::clone(&overflowed);
        let inner = PrimitiveGroupsAccumulator::<Decimal128Type, _>::new(
            data_type,
            move |sum: &mut i128, value: i128| match sum.checked_add(value) {
                Some(added) => *sum = added,
                None => raise.store(true, Ordering::Relaxed),
            },
        );
        Self {
            inner: Box::new(inner),
            overflowed,
        }
    }

    /// An error if an addition since the last call overflowed.
    fn checked(&self) -> Result<()> {
        if self.overflowed.swap(false, Ordering::Relaxed) {
            Err(numeric_overflow())
        } else {
            Ok(())
        }
    }
}

impl GroupsAccumulator for GroupsCheckedSum {
    fn update_batch(
        &mut self,
        values: &[ArrayRef],
        group_indices: &[usize],
        opt_filter: Option<&BooleanArray>,
        total_num_groups: usize,
    ) -> Result<()> {
        self.inner
            .update_batch(values, group_indices, opt_filter, total_num_groups)?;
        self.checked()
    }

    fn merge_batch(
        &mut self,
        values: &[ArrayRef],
        group_indices: &[usize],
        total_num_groups: usize,
    ) -> Result<()> {
        self.inner
            .merge_batch(values, group_indices, total_num_groups)?;
        self.checked()
    }

    fn evaluate(&mut self, emit_to: EmitTo) -> Result<ArrayRef> {
        self.inner.evaluate(emit_to)
    }

    fn state(&mut self, emit_to: EmitTo) -> Result<Vec<ArrayRef>> {
        self.inner.state(emit_to)
    }

    fn convert_to_state(
        &self,
        values: &[ArrayRef],
        opt_filter: Option<&BooleanArray>,
    ) -> Result<Vec<ArrayRef>> {
        self.inner.convert_to_state(values, opt_filter)
    }

    fn size(&self) -> usize {
        self.inner.size()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::Decimal128Array;

    fn numerics(values: &[Option<i128>]) -> ArrayRef {
        Arc::new(Decimal128Array::from(values.to_vec()).with_data_type(DataType::Decimal128(38, 0)))
    }

    #[test]
    fn a_sum_past_128_bits_fails_instead_of_wrapping() {
        let mut sum = CheckedSum::new(DataType::Decimal128(38, 0));
        sum.update_batch(&[numerics(&[Some(i128::MAX - 1)])])
            .unwrap();
        assert!(sum.update_batch(&[numerics(&[Some(2)])]).is_err());
        let mut groups = GroupsCheckedSum::new(&DataType::Decimal128(38, 0));
        let within_one_batch = numerics(&[Some(i128::MAX), Some(1)]);
        assert!(groups
            .update_batch(&[within_one_batch], &[0, 0], None, 1)
            .is_err());
    }

    #[test]
    fn retracted_values_leave_the_sum_and_none_left_is_null() {
        let mut sum = CheckedSum::new(DataType::Decimal128(38, 0));
        sum.update_batch(&[numerics(&[Some(5), None, Some(7)])])
            .unwrap();
        sum.retract_batch(&[numerics(&[Some(5)])]).unwrap();
        assert_eq!(
            sum.evaluate().unwrap(),
            ScalarValue::Decimal128(Some(7), 38, 0)
        );
        sum.retract_batch(&[numerics(&[Some(7)])]).unwrap();
        assert_eq!(
            sum.evaluate().unwrap(),
            ScalarValue::Decimal128(None, 38, 0)
        );
    }
}
