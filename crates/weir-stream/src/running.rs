//! Running aggregates: `count`, `sum` and `avg` kept as running totals.
//!
//! These aggregates are linear: a deleted row's contribution can be taken
//! back. DataFusion's accumulators for them can *retract* values (window
//! frames slide with them), so each group keeps one accumulator per
//! aggregate, rows with positive weight are added and rows with negative
//! weight retracted. A change costs its own size, however large the group:
//! `SELECT count(*) FROM big_table` does not rescan the table.
//!
//! Durable state is one row per group: the group key, its row count and
//! each accumulator's intermediate state (`Accumulator::state`); recovery
//! merges that state into fresh accumulators. The accumulators are the
//! live state: a batch only marks the groups it touched, and their state
//! rows are brought up to date once per checkpoint
//! ([`Operator::sync_state`]), not once per batch.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, BooleanArray, Int64Array, UInt32Array};
use datafusion::arrow::compute::{filter, take};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::arrow::record_batch::{RecordBatch, RecordBatchOptions};
use datafusion::arrow::row::{RowConverter, SortField};
use datafusion::common::ScalarValue;
use datafusion::error::DataFusionError;
use datafusion::logical_expr::Accumulator;
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_expr::PhysicalExprRef;

use crate::changes::null_as_false;
use crate::plan::AggregateSpec;
use crate::{Changes, Multiset, Operator, Result};

/// Aggregate functions whose retraction is exact in any order.
const RUNNING: &[&str] = &["count", "sum", "avg"];

/// Whether every aggregate of `spec` can be kept as a running total.
pub fn is_running(spec: &AggregateSpec) -> bool {
    spec.aggregates.iter().all(|a| {
        RUNNING.contains(&a.fun().name())
            && !a.is_distinct()
            && a.order_bys().is_empty()
            && a.create_sliding_accumulator()
                .is_ok_and(|acc| acc.supports_retract_batch())
    })
}

/// One group's totals.
#[derive(Debug)]
struct Group {
    /// Sum of the weights of its rows; the group exists while positive.
    rows: i64,
    accumulators: Vec<Box<dyn Accumulator>>,
}

/// Aggregation by running totals (see the module documentation).
#[derive(Debug)]
pub struct RunningAggregate {
    spec: AggregateSpec,
    keys: Option<RowConverter>,
    groups: BTreeMap<Box<[u8]>, Group>,
    /// Groups changed since their state rows were last written.
    unsynced: BTreeSet<Box<[u8]>>,
    state: Multiset,
    group_schema: SchemaRef,
    output_schema: SchemaRef,
}

impl RunningAggregate {
    /// Running totals of rows of `input_schema`, producing `output_schema`.
    pub fn new(
        spec: AggregateSpec,
        input_schema: SchemaRef,
        output_schema: SchemaRef,
    ) -> Result<Self> {
        let group_fields: Vec<Field> = spec
            .group
            .iter()
            .map(|(e, name)| Ok(Field::new(name, e.data_type(&input_schema)?, true)))
            .collect::<Result<_>>()?;
        let keys = if group_fields.is_empty() {
            None
        } else {
            let sort = group_fields
                .iter()
                .map(|f| SortField::new(f.data_type().clone()))
                .collect();
            Some(RowConverter::new(sort)?)
        };
        // The state row: group columns, the row count, each accumulator's
        // intermediate values (typed by what an empty accumulator reports).
        let mut fields = group_fields.clone();
        fields.push(Field::new("__weir_rows", DataType::Int64, false));
        for (i, aggregate) in spec.aggregates.iter().enumerate() {
            let empty = aggregate.create_sliding_accumulator()?.state()?;
            for (j, value) in empty.iter().enumerate() {
                fields.push(Field::new(
                    format!("__weir_state_{i}_{j}"),
                    value.data_type(),
                    true,
                ));
            }
        }
        let state_schema = Arc::new(Schema::new(fields));
        let key_exprs: Vec<PhysicalExprRef> = (0..group_fields.len())
            .map(|i| Arc::new(Column::new(group_fields[i].name(), i)) as PhysicalExprRef)
            .collect();
        Ok(RunningAggregate {
            state: Multiset::new(state_schema, key_exprs, None)?,
            spec,
            keys,
            groups: BTreeMap::new(),
            unsynced: BTreeSet::new(),
            group_schema: Arc::new(Schema::new(group_fields)),
            output_schema,
        })
    }

    fn new_group(&self) -> Result<Group> {
        let accumulators = self
            .spec
            .aggregates
            .iter()
            .map(|a| a.create_sliding_accumulator())
            .collect::<Result<_>>()?;
        Ok(Group {
            rows: 0,
            accumulators,
        })
    }

    fn encode(&self, columns: &[ArrayRef], rows: usize) -> Result<Vec<Box<[u8]>>> {
        match &self.keys {
            None => Ok(vec![Box::default(); rows]),
            Some(converter) => Ok(converter
                .convert_columns(columns)?
                .iter()
                .map(|r| r.data().into())
                .collect()),
        }
    }

    /// The output values of a group.
    fn evaluate(group: &mut Group) -> Result<Vec<ScalarValue>> {
        group
            .accumulators
            .iter_mut()
            .map(|a| a.evaluate())
            .collect()
    }

    /// The state values of a group: its row count, then each
    /// accumulator's intermediate state.
    fn state_values(group: &mut Group) -> Result<Vec<ScalarValue>> {
        let mut state = vec![ScalarValue::Int64(Some(group.rows))];
        for accumulator in &mut group.accumulators {
            state.extend(accumulator.state()?);
        }
        Ok(state)
    }

    /// The group columns of encoded keys.
    fn decode_keys(&self, keys: &[Box<[u8]>]) -> Result<Vec<ArrayRef>> {
        match &self.keys {
            None => Ok(Vec::new()),
            Some(converter) => {
                let parser = converter.parser();
                Ok(converter.convert_rows(keys.iter().map(|k| parser.parse(k)))?)
            }
        }
    }

    /// Rows of `schema`: the group columns (rows of `group_columns` at
    /// `at`) followed by one column per value list.
    fn rows(
        schema: &SchemaRef,
        group_columns: &[ArrayRef],
        at: &UInt32Array,
        values: &[Vec<ScalarValue>],
    ) -> Result<RecordBatch> {
        let mut columns: Vec<ArrayRef> = group_columns
            .iter()
            .map(|c| Ok(take(c.as_ref(), at, None)?))
            .collect::<Result<_>>()?;
        let width = schema.fields().len() - group_columns.len();
        for c in 0..width {
            let field = schema.field(group_columns.len() + c);
            let cells = values.iter().map(|row| row[c].clone());
            let array = if values.is_empty() {
                datafusion::arrow::array::new_empty_array(field.data_type())
            } else {
                ScalarValue::iter_to_array(cells)?
            };
            let array = if array.data_type() == field.data_type() {
                array
            } else {
                datafusion::arrow::compute::cast(&array, field.data_type())?
            };
            columns.push(array);
        }
        Ok(RecordBatch::try_new_with_options(
            schema.clone(),
            columns,
            &RecordBatchOptions::new().with_row_count(Some(at.len())),
        )?)
    }
}

impl Operator for RunningAggregate {
    fn initial(&mut self) -> Result<Vec<Changes>> {
        if self.keys.is_some() {
            return Ok(Vec::new());
        }
        let mut group = self.new_group()?;
        let output = Self::evaluate(&mut group)?;
        self.groups.insert(Box::default(), group);
        self.unsynced.insert(Box::default());
        let one = UInt32Array::from(vec![0u32]);
        let no_groups: Vec<ArrayRef> = Vec::new();
        let out = Self::rows(&self.output_schema, &no_groups, &one, &[output])?;
        Ok(vec![Changes::inserts(out)])
    }

    fn process(&mut self, _port: usize, input: Changes) -> Result<Vec<Changes>> {
        let rows = input.len();
        let group_columns = self
            .spec
            .group
            .iter()
            .map(|(e, _)| e.evaluate(&input.rows)?.into_array(rows))
            .collect::<Result<Vec<_>>>()?;
        let keys = self.encode(&group_columns, rows)?;
        // Each row's slot among the touched groups, and which rows (repeated
        // by weight) each group adds and takes back. Assigning rows to
        // groups is per row, as in any hash aggregation; the values then
        // move with `take` and the accumulators' batch methods.
        let mut slots: HashMap<&[u8], usize> = HashMap::new();
        let mut first_row: Vec<u32> = Vec::new();
        let mut added: Vec<Vec<u32>> = Vec::new();
        let mut removed: Vec<Vec<u32>> = Vec::new();
        let mut net: Vec<i64> = Vec::new();
        for (row, (key, &weight)) in keys.iter().zip(input.weights.values()).enumerate() {
            let slot = *slots.entry(key.as_ref()).or_insert_with(|| {
                first_row.push(row as u32);
                added.push(Vec::new());
                removed.push(Vec::new());
                net.push(0);
                first_row.len() - 1
            });
            let list = if weight > 0 {
                &mut added[slot]
            } else {
                &mut removed[slot]
            };
            list.extend(std::iter::repeat_n(
                row as u32,
                weight.unsigned_abs() as usize,
            ));
            net[slot] += weight;
        }
        // Each aggregate's arguments, with rows its FILTER rejects masked out.
        let mut arguments: Vec<(Vec<ArrayRef>, Option<BooleanArray>)> = Vec::new();
        for (aggregate, filter_expr) in self.spec.aggregates.iter().zip(&self.spec.filters) {
            let args = aggregate
                .expressions()
                .iter()
                .map(|e| e.evaluate(&input.rows)?.into_array(rows))
                .collect::<Result<Vec<_>>>()?;
            let mask = match filter_expr {
                Some(f) => {
                    let mask = f.evaluate(&input.rows)?.into_array(rows)?;
                    let mask = mask
                        .as_any()
                        .downcast_ref::<BooleanArray>()
                        .cloned()
                        .ok_or_else(|| {
                            DataFusionError::Internal("aggregate filter is not boolean".into())
                        })?;
                    Some(null_as_false(&mask))
                }
                None => None,
            };
            arguments.push((args, mask));
        }
        let mut slot_keys: Vec<&[u8]> = vec![&[]; first_row.len()];
        for (key, &slot) in &slots {
            slot_keys[slot] = key;
        }
        let (mut old_at, mut old_out) = (Vec::new(), Vec::new());
        let (mut new_at, mut new_out) = (Vec::new(), Vec::new());
        for (slot, key) in slot_keys.iter().enumerate() {
            let mut group = match self.groups.remove(*key) {
                Some(mut group) => {
                    old_at.push(first_row[slot]);
                    old_out.push(Self::evaluate(&mut group)?);
                    group
                }
                None => self.new_group()?,
            };
            if !self.unsynced.contains(*key) {
                self.unsynced.insert((*key).into());
            }
            for (i, accumulator) in group.accumulators.iter_mut().enumerate() {
                let (args, mask) = &arguments[i];
                for (indices, add) in [(&added[slot], true), (&removed[slot], false)] {
                    if indices.is_empty() {
                        continue;
                    }
                    let mut indices = UInt32Array::from(indices.clone());
                    if let Some(mask) = mask {
                        let keep = take(mask, &indices, None)?;
                        let keep = keep
                            .as_any()
                            .downcast_ref::<BooleanArray>()
                            .expect("boolean");
                        let kept = filter(&indices, keep)?;
                        indices = kept
                            .as_any()
                            .downcast_ref::<UInt32Array>()
                            .expect("u32")
                            .clone();
                    }
                    let values: Vec<ArrayRef> = args
                        .iter()
                        .map(|a| Ok(take(a.as_ref(), &indices, None)?))
                        .collect::<Result<_>>()?;
                    if add {
                        accumulator.update_batch(&values)?;
                    } else {
                        accumulator.retract_batch(&values)?;
                    }
                }
            }
            group.rows += net[slot];
            if group.rows < 0 {
                return Err(DataFusionError::Internal(
                    "a group lost more rows than it had".into(),
                ));
            }
            if group.rows > 0 || self.keys.is_none() {
                new_at.push(first_row[slot]);
                new_out.push(Self::evaluate(&mut group)?);
                self.groups.insert(key.to_vec().into(), group);
            }
        }
        let old_at = UInt32Array::from(old_at);
        let new_at = UInt32Array::from(new_at);
        let old = Self::rows(&self.output_schema, &group_columns, &old_at, &old_out)?;
        let new = Self::rows(&self.output_schema, &group_columns, &new_at, &new_out)?;
        Ok(vec![Changes::deletes(old), Changes::inserts(new)])
    }

    fn state(&mut self) -> Vec<&mut Multiset> {
        vec![&mut self.state]
    }

    /// Replaces the state rows of the groups changed since the last sync
    /// with their accumulators' current state.
    fn sync_state(&mut self) -> Result<()> {
        if self.unsynced.is_empty() {
            return Ok(());
        }
        let keys: Vec<Box<[u8]>> = std::mem::take(&mut self.unsynced).into_iter().collect();
        let group_columns = self.decode_keys(&keys)?;
        let groups = RecordBatch::try_new_with_options(
            self.group_schema.clone(),
            group_columns.clone(),
            &RecordBatchOptions::new().with_row_count(Some(keys.len())),
        )?;
        let state_keys = self
            .state
            .encode_keys(&self.state.key_columns(&groups)?, keys.len())?;
        self.state.remove_keys(&state_keys);
        let (mut at, mut values) = (Vec::new(), Vec::new());
        for (i, key) in keys.iter().enumerate() {
            if let Some(group) = self.groups.get_mut(key) {
                at.push(i as u32);
                values.push(Self::state_values(group)?);
            }
        }
        let at = UInt32Array::from(at);
        let rows = Self::rows(self.state.schema(), &group_columns, &at, &values)?;
        self.state.update(&Changes::inserts(rows))
    }

    fn restored(&mut self) -> Result<()> {
        self.groups.clear();
        self.unsynced.clear();
        let all: Vec<(&[u8], i64)> = self.state.ordered().collect();
        let saved = self.state.decode(&all)?.rows;
        let width = self.group_schema.fields().len();
        let group_columns: Vec<ArrayRef> = saved.columns()[..width].to_vec();
        let keys = self.encode(&group_columns, saved.num_rows())?;
        let counts = saved
            .column(width)
            .as_any()
            .downcast_ref::<Int64Array>()
            .cloned()
            .ok_or_else(|| DataFusionError::Internal("group row count is not int64".into()))?;
        for (row, key) in keys.into_iter().enumerate() {
            let mut group = self.new_group()?;
            group.rows = counts.value(row);
            let mut column = width + 1;
            for accumulator in &mut group.accumulators {
                let n = accumulator.state()?.len();
                let states: Vec<ArrayRef> = saved.columns()[column..column + n]
                    .iter()
                    .map(|c| c.slice(row, 1))
                    .collect();
                accumulator.merge_batch(&states)?;
                column += n;
            }
            self.groups.insert(key, group);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aggregate::Aggregate;
    use crate::testing::{group_by_k, kv, kv_schema, net};
    use datafusion::functions_aggregate::average::avg_udaf;
    use datafusion::functions_aggregate::count::count_udaf;
    use datafusion::functions_aggregate::sum::sum_udaf;
    use datafusion::logical_expr::Operator as BinOp;
    use datafusion::physical_expr::aggregate::AggregateExprBuilder;
    use datafusion::physical_expr::expressions::{binary, cast, col, lit};

    fn spec(grouped: bool) -> (AggregateSpec, SchemaRef) {
        let schema = kv_schema();
        let v = col("v", &schema).unwrap();
        let as_type = |t: DataType| cast(v.clone(), &schema, t).unwrap();
        let build = |udaf, arg: PhysicalExprRef, name: &str| {
            Arc::new(
                AggregateExprBuilder::new(udaf, vec![arg])
                    .schema(schema.clone())
                    .alias(name)
                    .build()
                    .unwrap(),
            )
        };
        let aggregates = vec![
            build(count_udaf(), v.clone(), "n"),
            build(sum_udaf(), as_type(DataType::Int64), "s"),
            build(avg_udaf(), as_type(DataType::Float64), "a"),
            build(sum_udaf(), as_type(DataType::Int64), "big"),
        ];
        let big = binary(v.clone(), BinOp::Gt, lit(5), &schema).unwrap();
        let filters = vec![None, None, None, Some(big)];
        let (group, mut fields) = group_by_k(grouped);
        for a in &aggregates {
            fields.push(a.field().as_ref().clone());
        }
        let spec = AggregateSpec {
            group,
            aggregates,
            filters,
        };
        (spec, Arc::new(Schema::new(fields)))
    }

    /// Running totals give what recomputing each group gives, through
    /// inserts, duplicates, NULLs, deletes down to empty groups, and a
    /// restore from the durable state.
    #[test]
    fn running_totals_match_recomputation() {
        for grouped in [true, false] {
            let (spec, out) = spec(grouped);
            assert!(is_running(&spec));
            let mut running =
                RunningAggregate::new(spec.clone(), kv_schema(), out.clone()).unwrap();
            let mut recompute = Aggregate::new(spec.clone(), kv_schema(), out.clone()).unwrap();
            let mut a = running.initial().unwrap();
            let mut b = recompute.initial().unwrap();
            let steps = [
                kv(&[
                    (Some(1), Some(4), 1),
                    (Some(1), Some(9), 2),
                    (None, None, 1),
                    (Some(2), Some(7), 1),
                ]),
                kv(&[(Some(1), Some(9), -1), (Some(3), None, 3)]),
                kv(&[
                    (Some(1), Some(4), -1),
                    (Some(1), Some(9), -1),
                    (Some(2), Some(6), 1),
                ]),
            ];
            for step in &steps[..2] {
                a.extend(running.process(0, step.clone()).unwrap());
                b.extend(recompute.process(0, step.clone()).unwrap());
                assert_eq!(net(&a), net(&b), "grouped: {grouped}");
            }
            let mut copy = RunningAggregate::new(spec, kv_schema(), out).unwrap();
            running.sync_state().unwrap();
            copy.state()[0]
                .restore(&running.state()[0].dump().unwrap())
                .unwrap();
            copy.restored().unwrap();
            let mut c = a.clone();
            a.extend(running.process(0, steps[2].clone()).unwrap());
            b.extend(recompute.process(0, steps[2].clone()).unwrap());
            c.extend(copy.process(0, steps[2].clone()).unwrap());
            assert_eq!(net(&a), net(&b), "grouped: {grouped}");
            assert_eq!(net(&c), net(&b), "restored, grouped: {grouped}");
        }
    }
}
