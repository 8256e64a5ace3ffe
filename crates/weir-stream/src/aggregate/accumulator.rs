//! Per-aggregate state of [`super::GroupedAggregate`], in columns indexed
//! by group id: one accumulator per aggregate function, never one per
//! group.
//!
//! | accumulator | aggregates | state per group | a change costs |
//! |---|---|---|---|
//! | [`Linear`] | `count`, `sum`, `avg` | a count and a sum | O(1): values are added times their weight |
//! | [`Extreme`] / [`EncodedExtreme`] | `min`, `max` of an append-only input | the current extreme | O(1) |
//! | [`ValueCounts`] | `min`, `max` of an input that deletes | every distinct value with its count, in order | O(log values) |
//! | [`DistinctValues`] | `count(DISTINCT x)` | every distinct value with its count, hashed, and a distinct count per group | O(1) |
//!
//! Every update is one loop over a batch's rows with their group ids and
//! weights; the arguments were computed by DataFusion expressions on the
//! whole batch. [`Linear`] and the extremes also merge partial states
//! (a two-phase aggregate's, [`super::PartialAggregate`]); the value
//! tables ([`super::values`]) do not.

use std::fmt::Debug;
use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayRef, ArrowPrimitiveType, AsArray, BooleanArray, Decimal128Array, Float64Array,
    Int64Array, PrimitiveArray, UInt64Array,
};
use datafusion::arrow::buffer::NullBuffer;
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{
    ArrowNativeTypeOp, DataType, Date32Type, Date64Type, Decimal128Type, Field, Float32Type,
    Float64Type, Int16Type, Int32Type, Int64Type, Int8Type, TimeUnit, TimestampMicrosecondType,
    TimestampMillisecondType, TimestampNanosecondType, TimestampSecondType, UInt16Type, UInt32Type,
    UInt64Type, UInt8Type,
};
use datafusion::arrow::error::ArrowError;
use datafusion::arrow::row::{RowConverter, SortField};
use datafusion::error::DataFusionError;
use datafusion::logical_expr::EmitTo;
use datafusion::physical_expr::aggregate::AggregateFunctionExpr;
use weir_state::{KeyId, TableSpec};

use super::values::{DistinctValues, ValueCounts, ValueTable};
use crate::Result;

/// The state of one aggregate function for every group.
pub(crate) trait GroupAccumulator: Send + Debug {
    /// Adds each row's `args` to its group (`groups[i]`) `weights[i]` times
    /// (a negative weight takes values back); rows where `mask` is false
    /// are skipped. Group ids are below `groups_len`.
    fn update(
        &mut self,
        args: &[ArrayRef],
        groups: &[KeyId],
        weights: &[i64],
        mask: Option<&BooleanArray>,
        groups_len: usize,
    ) -> Result<()>;

    /// The aggregate's value for each of `groups`.
    fn evaluate(&self, groups: &[KeyId]) -> Result<ArrayRef>;

    /// Forgets group `group`; its id may be handed out again.
    fn reset(&mut self, group: KeyId);

    /// The accumulator's columns in the group table (none by default: an
    /// accumulator whose state is a table of its own,
    /// [`GroupAccumulator::values`]).
    fn state_fields(&self) -> Vec<Field> {
        Vec::new()
    }

    /// Those columns for `groups`.
    fn state(&self, _groups: &[KeyId]) -> Result<Vec<ArrayRef>> {
        Ok(Vec::new())
    }

    /// Loads those columns (recovery) for `groups`.
    fn restore(
        &mut self,
        _groups: &[KeyId],
        _state: &[ArrayRef],
        _groups_len: usize,
    ) -> Result<()> {
        Ok(())
    }

    /// Bytes held.
    fn memory_size(&self) -> usize;

    /// Whether partial states merge ([`GroupAccumulator::merge`]), so that
    /// a two-phase aggregate may pre-aggregate rows before its exchange.
    fn merges(&self) -> bool {
        false
    }

    /// Adds partial states (one row per entry of `groups`, as
    /// [`GroupAccumulator::state`] gives them) to `groups`.
    fn merge(
        &mut self,
        _groups: &[KeyId],
        _partial: &[ArrayRef],
        _groups_len: usize,
    ) -> Result<()> {
        Err(DataFusionError::Internal(
            "an aggregate without partial states was asked to merge some".into(),
        ))
    }

    /// The table of values, for accumulators that keep every value.
    fn values(&mut self) -> Option<&mut dyn ValueTable> {
        None
    }

    /// The shape of that table, for groups of `group_fields`.
    fn values_spec(&self, _group_fields: &[Field]) -> Option<TableSpec> {
        None
    }

    /// The rows of that table.
    fn value_entries(&self) -> Option<usize> {
        None
    }
}

/// Which accumulator an aggregate gets, or `None` if it has none here
/// (the aggregate is then recomputed per group).
pub(crate) fn accumulator_for(
    function: &Arc<AggregateFunctionExpr>,
    input_schema: &datafusion::arrow::datatypes::SchemaRef,
    append_only: bool,
) -> Result<Option<Box<dyn GroupAccumulator>>> {
    if !function.order_bys().is_empty() {
        return Ok(None);
    }
    let args = function.expressions();
    let arg_types = args
        .iter()
        .map(|e| e.data_type(input_schema))
        .collect::<Result<Vec<_>>>()?;
    let name = function.fun().name();
    if function.is_distinct() {
        return Ok(match (name, arg_types.as_slice()) {
            ("count", [t]) => Some(Box::new(DistinctValues::new(t)?)),
            _ => None,
        });
    }
    let accumulator: Option<Box<dyn GroupAccumulator>> = match (name, arg_types.as_slice()) {
        ("count", [_] | []) => Some(Box::new(Linear::new(LinearKind::Count, function, None)?)),
        ("sum", [t]) => Sums::new(t)?
            .map(|sums| {
                Linear::new(LinearKind::Sum, function, Some(sums))
                    .map(|l| Box::new(l) as Box<dyn GroupAccumulator>)
            })
            .transpose()?,
        ("avg", [t @ (DataType::Float64 | DataType::Decimal128(_, _))]) => {
            let sums = Sums::new(t)?.expect("float and decimal sums exist");
            Some(Box::new(Linear::new(
                LinearKind::Avg,
                function,
                Some(sums),
            )?))
        }
        ("min" | "max", [t]) => {
            let max = name == "max";
            if append_only {
                Some(extreme(t, max)?)
            } else {
                Some(Box::new(ValueCounts::new(t, max)?))
            }
        }
        _ => None,
    };
    Ok(accumulator)
}

/// Grows a per-group vector so that every id below `len` has a slot.
pub(super) fn grow<T: Clone>(vec: &mut Vec<T>, len: usize, fill: T) {
    if vec.len() < len {
        vec.resize(len, fill);
    }
}

/// Whether row `i` counts: not masked out and (when `args` has one
/// column) not NULL.
pub(super) fn included(mask: Option<&BooleanArray>, nulls: Option<&NullBuffer>, i: usize) -> bool {
    mask.is_none_or(|m| m.value(i)) && nulls.is_none_or(|n| n.is_valid(i))
}

/// `count`, `sum` and `avg`: linear in their input, so a deleted row's
/// value is taken back by adding it with a negative weight. Per group: the
/// number of non-NULL values (for `count(*)`, rows) and their sum.
#[derive(Debug)]
pub(crate) struct Linear {
    kind: LinearKind,
    function: Arc<AggregateFunctionExpr>,
    counts: Vec<i64>,
    sums: Option<Sums>,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum LinearKind {
    Count,
    Sum,
    Avg,
}

/// The error of a `numeric` sum beyond what 128 bits hold (22003).
fn numeric_overflow() -> DataFusionError {
    DataFusionError::ArrowError(
        Box::new(ArrowError::ComputeError(
            "numeric field overflow: a sum passed 1.7e38 in magnitude, the most Weir's numeric holds"
                .into(),
        )),
        None,
    )
}

/// Running sums, in the type DataFusion sums in: integers wrap on
/// overflow, as DataFusion's `sum` does (a `bigint` sum is a `numeric`,
/// below, and `integer` sums cannot reach `bigint`'s limits); a `numeric`
/// sum that leaves the 128 bits it is held in fails with 22003 rather
/// than wrapping to a wrong value.
#[derive(Debug)]
enum Sums {
    I64(Vec<i64>),
    U64(Vec<u64>),
    F64(Vec<f64>),
    D128(Vec<i128>, DataType),
}

impl Sums {
    fn new(data_type: &DataType) -> Result<Option<Self>> {
        Ok(match data_type {
            DataType::Int64 => Some(Sums::I64(Vec::new())),
            DataType::UInt64 => Some(Sums::U64(Vec::new())),
            DataType::Float64 => Some(Sums::F64(Vec::new())),
            DataType::Decimal128(_, _) => Some(Sums::D128(Vec::new(), data_type.clone())),
            _ => None,
        })
    }

    fn grow(&mut self, len: usize) {
        match self {
            Sums::I64(v) => grow(v, len, 0),
            Sums::U64(v) => grow(v, len, 0),
            Sums::F64(v) => grow(v, len, 0.0),
            Sums::D128(v, _) => grow(v, len, 0),
        }
    }

    fn reset(&mut self, g: usize) {
        match self {
            Sums::I64(v) => v[g] = 0,
            Sums::U64(v) => v[g] = 0,
            Sums::F64(v) => v[g] = 0.0,
            Sums::D128(v, _) => v[g] = 0,
        }
    }

    fn add(
        &mut self,
        arg: &ArrayRef,
        groups: &[KeyId],
        weights: &[i64],
        mask: Option<&BooleanArray>,
    ) -> Result<()> {
        let nulls = arg.logical_nulls();
        let nulls = nulls.as_ref();
        macro_rules! add {
            ($sums:expr, $t:ty, $op:expr) => {{
                let values = arg.as_primitive::<$t>().values();
                for (i, (&g, &w)) in groups.iter().zip(weights).enumerate() {
                    if included(mask, nulls, i) {
                        let slot = &mut $sums[g as usize];
                        *slot = $op(*slot, values[i], w);
                    }
                }
            }};
        }
        match self {
            Sums::I64(sums) => add!(sums, Int64Type, |s: i64, v: i64, w: i64| s
                .wrapping_add(v.wrapping_mul(w))),
            Sums::U64(sums) => add!(sums, UInt64Type, |s: u64, v: u64, w: i64| s
                .wrapping_add(v.wrapping_mul(w as u64))),
            Sums::F64(sums) => add!(sums, Float64Type, |s: f64, v: f64, w: i64| s + v * w as f64),
            Sums::D128(sums, _) => {
                let values = arg.as_primitive::<Decimal128Type>().values();
                for (i, (&g, &w)) in groups.iter().zip(weights).enumerate() {
                    if included(mask, nulls, i) {
                        let slot = &mut sums[g as usize];
                        *slot = values[i]
                            .checked_mul(i128::from(w))
                            .and_then(|v| slot.checked_add(v))
                            .ok_or_else(numeric_overflow)?;
                    }
                }
            }
        }
        Ok(())
    }

    /// The sums of `groups` (0 for a group never added to), NULL where
    /// `present` is false.
    fn array(&self, groups: &[KeyId], present: Option<&[bool]>) -> Result<ArrayRef> {
        let nulls = present.map(|p| NullBuffer::from(p.to_vec()));
        fn at<T: Copy + Default>(v: &[T], g: &KeyId) -> T {
            v.get(*g as usize).copied().unwrap_or_default()
        }
        Ok(match self {
            Sums::I64(v) => Arc::new(Int64Array::new(
                groups.iter().map(|g| at(v, g)).collect(),
                nulls,
            )),
            Sums::U64(v) => Arc::new(UInt64Array::new(
                groups.iter().map(|g| at(v, g)).collect(),
                nulls,
            )),
            Sums::F64(v) => Arc::new(Float64Array::new(
                groups.iter().map(|g| at(v, g)).collect(),
                nulls,
            )),
            Sums::D128(v, data_type) => Arc::new(
                Decimal128Array::new(groups.iter().map(|g| at(v, g)).collect(), nulls)
                    .with_data_type(data_type.clone()),
            ),
        })
    }

    fn restore(&mut self, groups: &[KeyId], state: &ArrayRef) -> Result<()> {
        macro_rules! load {
            ($sums:expr, $t:ty) => {{
                let values = state.as_primitive::<$t>();
                for (i, &g) in groups.iter().enumerate() {
                    $sums[g as usize] = if values.is_null(i) {
                        Default::default()
                    } else {
                        values.value(i)
                    };
                }
            }};
        }
        match self {
            Sums::I64(s) => load!(s, Int64Type),
            Sums::U64(s) => load!(s, UInt64Type),
            Sums::F64(s) => load!(s, Float64Type),
            Sums::D128(s, _) => load!(s, Decimal128Type),
        }
        Ok(())
    }

    fn data_type(&self) -> DataType {
        match self {
            Sums::I64(_) => DataType::Int64,
            Sums::U64(_) => DataType::UInt64,
            Sums::F64(_) => DataType::Float64,
            Sums::D128(_, t) => t.clone(),
        }
    }

    fn memory_size(&self) -> usize {
        match self {
            Sums::I64(v) => v.capacity() * 8,
            Sums::U64(v) => v.capacity() * 8,
            Sums::F64(v) => v.capacity() * 8,
            Sums::D128(v, _) => v.capacity() * 16,
        }
    }
}

impl Linear {
    fn new(
        kind: LinearKind,
        function: &Arc<AggregateFunctionExpr>,
        sums: Option<Sums>,
    ) -> Result<Self> {
        Ok(Linear {
            kind,
            function: function.clone(),
            counts: Vec::new(),
            sums,
        })
    }
}

impl GroupAccumulator for Linear {
    fn update(
        &mut self,
        args: &[ArrayRef],
        groups: &[KeyId],
        weights: &[i64],
        mask: Option<&BooleanArray>,
        groups_len: usize,
    ) -> Result<()> {
        grow(&mut self.counts, groups_len, 0);
        let nulls = args.first().and_then(|a| a.logical_nulls());
        for (i, (&g, &w)) in groups.iter().zip(weights).enumerate() {
            if included(mask, nulls.as_ref(), i) {
                self.counts[g as usize] += w;
            }
        }
        if let Some(sums) = &mut self.sums {
            sums.grow(groups_len);
            sums.add(&args[0], groups, weights, mask)?;
        }
        Ok(())
    }

    fn evaluate(&self, groups: &[KeyId]) -> Result<ArrayRef> {
        let count = |g: &KeyId| self.counts.get(*g as usize).copied().unwrap_or(0);
        let present: Vec<bool> = groups.iter().map(|g| count(g) > 0).collect();
        match self.kind {
            LinearKind::Count => Ok(Arc::new(Int64Array::from_iter_values(
                groups.iter().map(count),
            ))),
            LinearKind::Sum => {
                let sums = self.sums.as_ref().expect("sums");
                let array = sums.array(groups, Some(&present))?;
                let target = self.function.field().data_type().clone();
                if array.data_type() == &target {
                    Ok(array)
                } else {
                    Ok(cast(&array, &target)?)
                }
            }
            LinearKind::Avg => {
                // DataFusion's own `avg` turns a count and a sum into the
                // average (decimal rounding included): its groups
                // accumulator merges them as partial states. Groups
                // without values are NULL.
                let with_values: Vec<KeyId> =
                    groups.iter().copied().filter(|g| count(g) > 0).collect();
                let mut accumulator = self.function.create_groups_accumulator()?;
                let state = self.state(&with_values)?;
                let state_types: Vec<DataType> = self
                    .function
                    .state_fields()?
                    .iter()
                    .map(|f| f.data_type().clone())
                    .collect();
                let count = cast(&state[0], &state_types[0])?;
                let sum = cast(&state[1], &state_types[1])?;
                let indices: Vec<usize> = (0..with_values.len()).collect();
                accumulator.merge_batch(&[count, sum], &indices, with_values.len())?;
                let averages = accumulator.evaluate(EmitTo::All)?;
                spread(&averages, &present)
            }
        }
    }

    fn reset(&mut self, group: KeyId) {
        let g = group as usize;
        if g < self.counts.len() {
            self.counts[g] = 0;
            if let Some(sums) = &mut self.sums {
                sums.reset(g);
            }
        }
    }

    fn state_fields(&self) -> Vec<Field> {
        let mut fields = vec![Field::new("count", DataType::Int64, false)];
        if let Some(sums) = &self.sums {
            fields.push(Field::new("sum", sums.data_type(), true));
        }
        fields
    }

    fn state(&self, groups: &[KeyId]) -> Result<Vec<ArrayRef>> {
        let count = |g: &KeyId| self.counts.get(*g as usize).copied().unwrap_or(0);
        let mut columns: Vec<ArrayRef> = vec![Arc::new(Int64Array::from_iter_values(
            groups.iter().map(count),
        ))];
        if let Some(sums) = &self.sums {
            // The sum as it is, even where the count is not positive: a
            // two-phase aggregate's partial state may take back more rows
            // than it adds, and their values with them.
            columns.push(sums.array(groups, None)?);
        }
        Ok(columns)
    }

    fn restore(&mut self, groups: &[KeyId], state: &[ArrayRef], groups_len: usize) -> Result<()> {
        grow(&mut self.counts, groups_len, 0);
        let counts = state[0].as_primitive::<Int64Type>();
        for (i, &g) in groups.iter().enumerate() {
            self.counts[g as usize] = counts.value(i);
        }
        if let Some(sums) = &mut self.sums {
            sums.grow(groups_len);
            sums.restore(groups, &state[1])?;
        }
        Ok(())
    }

    fn memory_size(&self) -> usize {
        self.counts.capacity() * 8 + self.sums.as_ref().map_or(0, Sums::memory_size)
    }

    fn merges(&self) -> bool {
        true
    }

    fn merge(&mut self, groups: &[KeyId], partial: &[ArrayRef], groups_len: usize) -> Result<()> {
        grow(&mut self.counts, groups_len, 0);
        let counts = partial[0].as_primitive::<Int64Type>().values();
        for (&g, &count) in groups.iter().zip(counts.iter()) {
            self.counts[g as usize] += count;
        }
        if let Some(sums) = &mut self.sums {
            sums.grow(groups_len);
            sums.add(&partial[1], groups, &vec![1; groups.len()], None)?;
        }
        Ok(())
    }
}

/// `min` or `max` of an append-only input of a primitive type: the extreme
/// so far, per group.
pub(crate) struct Extreme<T: ArrowPrimitiveType> {
    max: bool,
    data_type: DataType,
    values: Vec<T::Native>,
    set: Vec<bool>,
}

/// An [`Extreme`] for `data_type`, or an [`EncodedExtreme`] for types that
/// are not primitive.
fn extreme(data_type: &DataType, max: bool) -> Result<Box<dyn GroupAccumulator>> {
    macro_rules! primitive {
        ($t:ty) => {
            Box::new(Extreme::<$t> {
                max,
                data_type: data_type.clone(),
                values: Vec::new(),
                set: Vec::new(),
            })
        };
    }
    Ok(match data_type {
        DataType::Int8 => primitive!(Int8Type),
        DataType::Int16 => primitive!(Int16Type),
        DataType::Int32 => primitive!(Int32Type),
        DataType::Int64 => primitive!(Int64Type),
        DataType::UInt8 => primitive!(UInt8Type),
        DataType::UInt16 => primitive!(UInt16Type),
        DataType::UInt32 => primitive!(UInt32Type),
        DataType::UInt64 => primitive!(UInt64Type),
        DataType::Float32 => primitive!(Float32Type),
        DataType::Float64 => primitive!(Float64Type),
        DataType::Date32 => primitive!(Date32Type),
        DataType::Date64 => primitive!(Date64Type),
        DataType::Decimal128(_, _) => primitive!(Decimal128Type),
        DataType::Timestamp(TimeUnit::Second, _) => primitive!(TimestampSecondType),
        DataType::Timestamp(TimeUnit::Millisecond, _) => primitive!(TimestampMillisecondType),
        DataType::Timestamp(TimeUnit::Microsecond, _) => primitive!(TimestampMicrosecondType),
        DataType::Timestamp(TimeUnit::Nanosecond, _) => primitive!(TimestampNanosecondType),
        _ => Box::new(EncodedExtreme::new(data_type, max)?),
    })
}

impl<T: ArrowPrimitiveType> Debug for Extreme<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Extreme")
            .field("max", &self.max)
            .field("data_type", &self.data_type)
            .field("groups", &self.values.len())
            .finish()
    }
}

impl<T: ArrowPrimitiveType> Extreme<T> {
    fn better(&self, candidate: T::Native, current: T::Native) -> bool {
        if self.max {
            candidate.is_gt(current)
        } else {
            candidate.is_lt(current)
        }
    }
}

impl<T: ArrowPrimitiveType> GroupAccumulator for Extreme<T> {
    fn update(
        &mut self,
        args: &[ArrayRef],
        groups: &[KeyId],
        weights: &[i64],
        mask: Option<&BooleanArray>,
        groups_len: usize,
    ) -> Result<()> {
        grow(&mut self.values, groups_len, T::Native::default());
        grow(&mut self.set, groups_len, false);
        let array = args[0].as_primitive::<T>();
        let nulls = array.logical_nulls();
        let values = array.values();
        for (i, (&g, &w)) in groups.iter().zip(weights).enumerate() {
            if !included(mask, nulls.as_ref(), i) {
                continue;
            }
            if w < 0 {
                return Err(retraction());
            }
            let g = g as usize;
            let v = values[i];
            if !self.set[g] || self.better(v, self.values[g]) {
                self.values[g] = v;
                self.set[g] = true;
            }
        }
        Ok(())
    }

    fn evaluate(&self, groups: &[KeyId]) -> Result<ArrayRef> {
        let at = |g: &KeyId| *g as usize;
        let values = groups
            .iter()
            .map(|g| self.values.get(at(g)).copied().unwrap_or_default())
            .collect();
        let nulls = NullBuffer::from(
            groups
                .iter()
                .map(|g| self.set.get(at(g)).copied().unwrap_or(false))
                .collect::<Vec<bool>>(),
        );
        Ok(Arc::new(
            PrimitiveArray::<T>::new(values, Some(nulls)).with_data_type(self.data_type.clone()),
        ))
    }

    fn reset(&mut self, group: KeyId) {
        if let Some(set) = self.set.get_mut(group as usize) {
            *set = false;
        }
    }

    fn state_fields(&self) -> Vec<Field> {
        vec![Field::new("extreme", self.data_type.clone(), true)]
    }

    fn state(&self, groups: &[KeyId]) -> Result<Vec<ArrayRef>> {
        Ok(vec![self.evaluate(groups)?])
    }

    fn restore(&mut self, groups: &[KeyId], state: &[ArrayRef], groups_len: usize) -> Result<()> {
        grow(&mut self.values, groups_len, T::Native::default());
        grow(&mut self.set, groups_len, false);
        let array = state[0].as_primitive::<T>();
        for (i, &g) in groups.iter().enumerate() {
            self.set[g as usize] = array.is_valid(i);
            self.values[g as usize] = array.values()[i];
        }
        Ok(())
    }

    fn memory_size(&self) -> usize {
        self.values.capacity() * std::mem::size_of::<T::Native>() + self.set.capacity()
    }

    fn merges(&self) -> bool {
        true
    }

    fn merge(&mut self, groups: &[KeyId], partial: &[ArrayRef], groups_len: usize) -> Result<()> {
        self.update(partial, groups, &vec![1; groups.len()], None, groups_len)
    }
}

/// The values of `groups` from their `arrow-row` encodings by
/// `converter`, as `encoding(g)` gives them; NULL for a group without one.
pub(super) fn decode_values<'a>(
    converter: &RowConverter,
    groups: &[KeyId],
    encoding: impl Fn(KeyId) -> Option<&'a [u8]>,
) -> Result<ArrayRef> {
    let parser = converter.parser();
    let mut present = Vec::with_capacity(groups.len());
    let mut rows = Vec::new();
    for &g in groups {
        match encoding(g) {
            Some(bytes) => {
                present.push(true);
                rows.push(parser.parse(bytes));
            }
            None => present.push(false),
        }
    }
    let found = converter.convert_rows(rows)?.remove(0);
    spread(&found, &present)
}

/// `values` (one per true entry of `present`) spread over all entries, NULL
/// where `present` is false.
fn spread(values: &ArrayRef, present: &[bool]) -> Result<ArrayRef> {
    let mut next = 0u32;
    let indices: datafusion::arrow::array::UInt32Array = present
        .iter()
        .map(|&p| {
            p.then(|| {
                next += 1;
                next - 1
            })
        })
        .collect();
    Ok(datafusion::arrow::compute::take(values, &indices, None)?)
}

fn retraction() -> DataFusionError {
    DataFusionError::Internal("min/max of an input planned as append-only saw a deletion".into())
}

/// `min` or `max` of an append-only input of any other type (strings,
/// booleans, ...): the extreme's `arrow-row` encoding per group, which
/// compares as the values do.
#[derive(Debug)]
pub(crate) struct EncodedExtreme {
    max: bool,
    data_type: DataType,
    converter: RowConverter,
    values: Vec<Option<Box<[u8]>>>,
    bytes: usize,
}

impl EncodedExtreme {
    fn new(data_type: &DataType, max: bool) -> Result<Self> {
        Ok(EncodedExtreme {
            max,
            data_type: data_type.clone(),
            converter: RowConverter::new(vec![SortField::new(data_type.clone())])?,
            values: Vec::new(),
            bytes: 0,
        })
    }
}

impl GroupAccumulator for EncodedExtreme {
    fn update(
        &mut self,
        args: &[ArrayRef],
        groups: &[KeyId],
        weights: &[i64],
        mask: Option<&BooleanArray>,
        groups_len: usize,
    ) -> Result<()> {
        grow(&mut self.values, groups_len, None);
        let nulls = args[0].logical_nulls();
        let rows = self.converter.convert_columns(&args[..1])?;
        for (i, (&g, &w)) in groups.iter().zip(weights).enumerate() {
            if !included(mask, nulls.as_ref(), i) {
                continue;
            }
            if w < 0 {
                return Err(retraction());
            }
            let candidate = rows.row(i);
            let candidate = candidate.as_ref();
            let slot = &mut self.values[g as usize];
            let replace = match slot {
                None => true,
                Some(current) => {
                    let order = candidate.cmp(current.as_ref());
                    if self.max {
                        order.is_gt()
                    } else {
                        order.is_lt()
                    }
                }
            };
            if replace {
                self.bytes += candidate.len();
                self.bytes -= slot.as_ref().map_or(0, |s| s.len());
                *slot = Some(candidate.into());
            }
        }
        Ok(())
    }

    fn evaluate(&self, groups: &[KeyId]) -> Result<ArrayRef> {
        decode_values(&self.converter, groups, |g| {
            self.values.get(g as usize).and_then(|v| v.as_deref())
        })
    }

    fn reset(&mut self, group: KeyId) {
        if let Some(slot) = self.values.get_mut(group as usize) {
            self.bytes -= slot.as_ref().map_or(0, |s| s.len());
            *slot = None;
        }
    }

    fn state_fields(&self) -> Vec<Field> {
        vec![Field::new("extreme", self.data_type.clone(), true)]
    }

    fn state(&self, groups: &[KeyId]) -> Result<Vec<ArrayRef>> {
        Ok(vec![self.evaluate(groups)?])
    }

    fn restore(&mut self, groups: &[KeyId], state: &[ArrayRef], groups_len: usize) -> Result<()> {
        grow(&mut self.values, groups_len, None);
        let rows = self.converter.convert_columns(&state[..1])?;
        for (i, &g) in groups.iter().enumerate() {
            if state[0].is_valid(i) {
                let bytes: Box<[u8]> = rows.row(i).as_ref().into();
                self.bytes += bytes.len();
                self.values[g as usize] = Some(bytes);
            }
        }
        Ok(())
    }

    fn memory_size(&self) -> usize {
        self.values.capacity() * 16 + self.bytes + self.converter.size()
    }

    fn merges(&self) -> bool {
        true
    }

    fn merge(&mut self, groups: &[KeyId], partial: &[ArrayRef], groups_len: usize) -> Result<()> {
        self.update(partial, groups, &vec![1; groups.len()], None, groups_len)
    }
}
