//! `avg` of `numeric`s with PostgreSQL's digits.
//!
//! DataFusion's `avg` of a decimal has the argument's scale plus 4,
//! truncated; PostgreSQL divides the sum by the count as any `numeric`
//! division (16 significant digits, rounded). [`PostgresAvg`] is
//! DataFusion's `avg` (its accumulators, its state of a count and a sum,
//! so that the stream engine's running averages merge into it as they
//! did) with the division at the end done by `numeric_div.rs`. It is
//! registered under `avg`'s name. An average has 20 fraction digits
//! where the argument's type leaves the room (an integer's, a
//! `numeric(p, s)` with up to 18 digits before the point; an unconstrained
//! `numeric`'s has 10). `avg` of floats is DataFusion's; `avg` of integers
//! averages a `numeric` of as many digits (`aggregates.rs`).
//! `avg(DISTINCT numeric)` keeps DataFusion's truncated quotient, at the
//! same scale.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, UInt64Array};
use datafusion::arrow::compute::{cast_with_options, CastOptions};
use datafusion::arrow::datatypes::{DataType, FieldRef};
use datafusion::common::{Result, ScalarValue};
use datafusion::functions_aggregate::average::Avg;
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::{
    Accumulator, AggregateUDF, AggregateUDFImpl, EmitTo, GroupsAccumulator, ReversedUDAF, Signature,
};

use crate::numeric_div::{average, QUOTIENT_SCALE};

/// `avg`, dividing `numeric` sums as PostgreSQL does.
#[derive(Debug, PartialEq, Eq, Hash, Default)]
pub struct PostgresAvg {
    inner: Avg,
}

/// The function, to register in a session.
pub fn udaf() -> AggregateUDF {
    AggregateUDF::from(PostgresAvg::default())
}

/// The type of the average of `numeric(precision, scale)` values: 20
/// fraction digits (PostgreSQL's for averages from 0.0001 up), fewer
/// where the digits before the point need the room (an average is never
/// larger than the largest value, so it always fits), never fewer than
/// the values'.
fn average_type(precision: u8, scale: i8) -> DataType {
    let before_point = i16::from(precision) - i16::from(scale);
    let room = (38 - before_point).clamp(0, i16::from(QUOTIENT_SCALE)) as i8;
    DataType::Decimal128(38, room.max(scale))
}

/// The scale of a decimal argument.
fn decimal_scale(arg: &DataType) -> Option<i8> {
    match arg {
        DataType::Decimal128(_, scale) => Some(*scale),
        _ => None,
    }
}

impl AggregateUDFImpl for PostgresAvg {
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
        match arg_types.first() {
            Some(DataType::Decimal128(precision, scale)) => Ok(average_type(*precision, *scale)),
            _ => self.inner.return_type(arg_types),
        }
    }

    fn accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        let accumulator = self.inner.accumulator(args.clone())?;
        match decimal_scale(args.expr_fields[0].data_type()) {
            Some(scale) if !args.is_distinct => Ok(Box::new(Averaged {
                inner: accumulator,
                scale,
                output: args.return_type().clone(),
            })),
            _ => Ok(accumulator),
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
        let accumulator = self.inner.create_groups_accumulator(args.clone())?;
        match decimal_scale(args.expr_fields[0].data_type()) {
            Some(scale) => Ok(Box::new(GroupsAveraged {
                inner: accumulator,
                scale,
                output: args.return_type().clone(),
            })),
            None => Ok(accumulator),
        }
    }

    fn reverse_expr(&self) -> ReversedUDAF {
        ReversedUDAF::Identical
    }
}

/// The averages of `state` (DataFusion's: counts, then sums of a scale
/// of `scale`), as `output`.
fn averages(state: &[ArrayRef], scale: i8, output: &DataType) -> Result<ArrayRef> {
    let strict = CastOptions {
        safe: false,
        ..Default::default()
    };
    let counts = cast_with_options(&state[0], &DataType::UInt64, &strict)?;
    // A sum over a wide decimal is kept in 256 bits; the average of sums
    // beyond 38 digits fails with 22003.
    let sums = cast_with_options(&state[1], &DataType::Decimal128(38, scale), &strict)
        .map_err(|_| numeric_overflow())?;
    Ok(Arc::new(average(
        sums.as_primitive(),
        counts
            .as_any()
            .downcast_ref::<UInt64Array>()
            .expect("counts"),
        output,
    )?))
}

/// 22003 for a sum that does not fit 38 digits.
fn numeric_overflow() -> datafusion::error::DataFusionError {
    datafusion::error::DataFusionError::External(Box::new(crate::error::WeirError::new(
        crate::error::SqlState::NUMERIC_OUT_OF_RANGE,
        "numeric sum out of range for its average",
    )))
}

/// DataFusion's `avg` accumulator, dividing at the end as PostgreSQL does.
#[derive(Debug)]
struct Averaged {
    inner: Box<dyn Accumulator>,
    scale: i8,
    output: DataType,
}

impl Accumulator for Averaged {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        self.inner.update_batch(values)
    }

    fn evaluate(&mut self) -> Result<ScalarValue> {
        let state = self
            .inner
            .state()?
            .iter()
            .map(ScalarValue::to_array)
            .collect::<Result<Vec<_>>>()?;
        ScalarValue::try_from_array(&averages(&state, self.scale, &self.output)?, 0)
    }

    fn size(&self) -> usize {
        self.inner.size()
    }

    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        self.inner.state()
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        self.inner.merge_batch(states)
    }

    fn retract_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        self.inner.retract_batch(values)
    }

    fn supports_retract_batch(&self) -> bool {
        self.inner.supports_retract_batch()
    }
}

/// DataFusion's `avg` groups accumulator, dividing at the end as
/// PostgreSQL does.
struct GroupsAveraged {
    inner: Box<dyn GroupsAccumulator>,
    scale: i8,
    output: DataType,
}

impl GroupsAccumulator for GroupsAveraged {
    fn update_batch(
        &mut self,
        values: &[ArrayRef],
        group_indices: &[usize],
        opt_filter: Option<&datafusion::arrow::array::BooleanArray>,
        total_num_groups: usize,
    ) -> Result<()> {
        self.inner
            .update_batch(values, group_indices, opt_filter, total_num_groups)
    }

    fn evaluate(&mut self, emit_to: EmitTo) -> Result<ArrayRef> {
        let state = self.inner.state(emit_to)?;
        averages(&state, self.scale, &self.output)
    }

    fn state(&mut self, emit_to: EmitTo) -> Result<Vec<ArrayRef>> {
        self.inner.state(emit_to)
    }

    fn merge_batch(
        &mut self,
        values: &[ArrayRef],
        group_indices: &[usize],
        total_num_groups: usize,
    ) -> Result<()> {
        self.inner
            .merge_batch(values, group_indices, total_num_groups)
    }

    fn convert_to_state(
        &self,
        values: &[ArrayRef],
        opt_filter: Option<&datafusion::arrow::array::BooleanArray>,
    ) -> Result<Vec<ArrayRef>> {
        self.inner.convert_to_state(values, opt_filter)
    }

    fn size(&self) -> usize {
        self.inner.size()
    }
}
