//! [`GroupedAggregate`]: `GROUP BY` and global aggregates with columnar
//! state.
//!
//! 1. A batch's group keys are numbered by a [`KeyIndex`] (one hash lookup
//!    per row, keys encoded once per batch); per group the operator keeps
//!    its row count (the sum of its rows' weights) in a vector indexed by
//!    group id, and each aggregate keeps its state in columns indexed the
//!    same way ([`super::accumulator`]).
//! 2. Each aggregate's arguments are evaluated on the whole batch, and one
//!    loop adds them to their groups times their weights.
//! 3. Output is held back until the epoch ends ([`Operator::flush`]): then
//!    each group the epoch touched emits its row as it was before the
//!    epoch (-1) and as it is now (+1). The old rows are computed the first
//!    time the epoch touches a group. So a hot group costs one output pair
//!    per epoch, not one per batch.
//! 4. At a checkpoint, the groups changed since the last one write their
//!    state row: key, row count, each aggregate's state columns. A group
//!    whose rows are all gone is deleted then, and its id freed.
//!
//! A global aggregate has one group with no key columns, which always
//! exists (so `count(*)` over nothing is one row with 0).

use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, BooleanArray, Int64Array, RecordBatch};
use datafusion::arrow::compute::{cast, concat};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::arrow::record_batch::RecordBatchOptions;
use datafusion::error::DataFusionError;
use weir_state::{DeltaBatches, KeyId, KeyIndex, TableSpec};

use super::accumulator::{accumulator_for, GroupAccumulator};
use crate::changes::{null_as_false, UNIT_COLUMN};
use crate::operator::expect_tables;
use crate::plan::AggregateSpec;
use crate::watermark::{ColumnBound, Watermarks};
use crate::window_close::Windows;
use crate::{Changes, Operator, Result};

/// The group was touched in the current epoch.
const IN_EPOCH: u8 = 1;
/// The group changed since the last checkpoint.
const IN_DELTA: u8 = 2;
/// The group existed at the last checkpoint.
const COMMITTED: u8 = 4;
/// The group is listed under its window value (see [`Windows`]).
const WINDOWED: u8 = 8;

/// Name of the row count column of the group table.
const ROWS_COLUMN: &str = "__weir_rows";

/// What a [`GroupedAggregate`]'s input rows are.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Input {
    /// The rows being aggregated.
    Rows,
    /// Partial aggregates of the rows, from the local phases of a
    /// two-phase aggregate ([`super::PartialAggregate`]): rows shaped as
    /// the group table, inserted once each.
    Partials,
}

/// Grouped aggregation over columnar state (see the module documentation).
#[derive(Debug)]
pub struct GroupedAggregate {
    input: Input,
    spec: AggregateSpec,
    output_schema: SchemaRef,
    /// The group key columns' fields (none for a global aggregate).
    group_fields: Vec<Field>,
    keys: KeyIndex,
    /// Per group: the sum of its rows' weights.
    rows: Vec<i64>,
    accumulators: Vec<Box<dyn GroupAccumulator>>,
    /// Per group: `IN_EPOCH`, `IN_DELTA`, `COMMITTED`.
    flags: Vec<u8>,
    in_epoch: Vec<KeyId>,
    in_delta: Vec<KeyId>,
    /// Groups that existed when the epoch first touched them, and each
    /// aggregate's values then (one array per batch).
    old_groups: Vec<KeyId>,
    old_values: Vec<Vec<ArrayRef>>,
    table_schema: SchemaRef,
    /// The window group column, if a watermark bounds one.
    windows: Option<Windows>,
}

impl GroupedAggregate {
    /// Columnar aggregation of rows of `input_schema` into
    /// `output_schema`, or `None` when some aggregate has no columnar
    /// accumulator (see [`super::accumulator`]). `append_only`: the input
    /// never deletes.
    pub fn try_new(
        spec: AggregateSpec,
        input_schema: SchemaRef,
        output_schema: SchemaRef,
        append_only: bool,
    ) -> Result<Option<Self>> {
        let mut accumulators = Vec::with_capacity(spec.aggregates.len());
        for function in &spec.aggregates {
            match accumulator_for(function, &input_schema, append_only)? {
                Some(accumulator) => accumulators.push(accumulator),
                None => return Ok(None),
            }
        }
        let group_fields: Vec<Field> = spec
            .group
            .iter()
            .map(|(e, name)| Ok(Field::new(name, e.data_type(&input_schema)?, true)))
            .collect::<Result<_>>()?;
        let types: Vec<DataType> = group_fields.iter().map(|f| f.data_type().clone()).collect();
        let mut fields = if group_fields.is_empty() {
            vec![Field::new(UNIT_COLUMN, DataType::Boolean, false)]
        } else {
            group_fields.clone()
        };
        fields.push(Field::new(ROWS_COLUMN, DataType::Int64, false));
        for (i, accumulator) in accumulators.iter().enumerate() {
            for field in accumulator.state_fields() {
                let name = format!("__weir_{i}_{}", field.name());
                fields.push(field.with_name(name));
            }
        }
        let old_values = vec![Vec::new(); accumulators.len()];
        Ok(Some(GroupedAggregate {
            input: Input::Rows,
            keys: KeyIndex::new(&types).map_err(external)?,
            spec,
            output_schema,
            group_fields,
            rows: Vec::new(),
            accumulators,
            flags: Vec::new(),
            in_epoch: Vec::new(),
            in_delta: Vec::new(),
            old_groups: Vec::new(),
            old_values,
            table_schema: Arc::new(Schema::new(fields)),
            windows: None,
        }))
    }

    /// Closes the windows of group column `window.0` as its bound
    /// `window.1` passes them: frees them (with the values aggregates
    /// keep per group beside the group table: `count(DISTINCT)`,
    /// `min`/`max` of an input that deletes), drops their late rows, and
    /// with `EMIT ON WINDOW CLOSE` emits them only then.
    pub fn with_window(mut self, window: Option<(usize, ColumnBound)>) -> Self {
        self.windows = window.map(|(column, bound)| Windows::new(column, bound));
        self
    }

    /// Whether its rows wait for their window to close.
    fn emits_on_close(&self) -> bool {
        self.spec.emit_on_window_close
    }

    /// Lists the groups not yet listed under their window.
    fn register_windows(&mut self, groups: &[KeyId]) -> Result<()> {
        let Some(windows) = self.windows.as_mut() else {
            return Ok(());
        };
        let mut fresh = Vec::new();
        for &g in groups {
            let flags = &mut self.flags[g as usize];
            if *flags & WINDOWED == 0 {
                *flags |= WINDOWED;
                fresh.push(g);
            }
        }
        if !fresh.is_empty() {
            let values = self.keys.decode(&fresh).map_err(external)?;
            windows.register(fresh.iter().copied(), &values[windows.column])?;
        }
        Ok(())
    }

    /// Drops input rows of closed windows.
    fn drop_late(&mut self, input: Changes) -> Result<Changes> {
        let Some(windows) = self.windows.as_mut() else {
            return Ok(input);
        };
        match self.input {
            Input::Rows => {
                let values = self.spec.group[windows.column]
                    .0
                    .evaluate(&input.rows)?
                    .into_array(input.len())?;
                windows.drop_late(input, &values, None)
            }
            Input::Partials => {
                let values = input.rows.column(windows.column).clone();
                let counts = self.group_fields.len().max(1);
                windows.drop_late(input, &values, Some(counts))
            }
        }
    }

    /// The final phase of a two-phase aggregate: the same aggregate over
    /// partial aggregates of the rows instead of the rows, or `None` when
    /// some aggregate's partial states do not merge (`min`/`max` of an
    /// input that deletes).
    pub(super) fn merging_partials(mut self) -> Option<Self> {
        if !self.accumulators.iter().all(|a| a.merges()) {
            return None;
        }
        self.input = Input::Partials;
        Some(self)
    }

    /// The shape of the group table, which partial aggregates share.
    pub(super) fn table_schema(&self) -> SchemaRef {
        self.table_schema.clone()
    }

    fn is_global(&self) -> bool {
        self.group_fields.is_empty()
    }

    /// The groups of partial aggregates (inserted rows of the group
    /// table's shape), adding new groups.
    fn intern_partials(&mut self, input: &Changes) -> Result<Vec<KeyId>> {
        if input.rows.num_columns() != self.table_schema.fields().len()
            || input.weights.values().iter().any(|&w| w != 1)
        {
            return Err(DataFusionError::Internal(
                "a two-phase aggregate's partials are not inserts of group rows".into(),
            ));
        }
        let keys = &input.rows.columns()[..self.group_fields.len()];
        let probe = self.keys.prepare(keys, input.len()).map_err(external)?;
        let mut groups = Vec::with_capacity(input.len());
        self.keys.intern_all(&probe, &mut groups);
        Ok(groups)
    }

    /// Adds partial aggregates (`columns`: the group table's) to their
    /// `groups`: row counts, then each aggregate's state.
    fn merge(&mut self, groups: &[KeyId], columns: &[ArrayRef]) -> Result<()> {
        let mut column = self.group_fields.len().max(1);
        let rows = columns[column]
            .as_any()
            .downcast_ref::<Int64Array>()
            .ok_or_else(|| DataFusionError::Internal("partial row counts are not int64".into()))?;
        add_rows(&mut self.rows, groups, rows.values());
        column += 1;
        let len = self.keys.slots();
        for accumulator in &mut self.accumulators {
            let width = accumulator.state_fields().len();
            accumulator.merge(groups, &columns[column..column + width], len)?;
            column += width;
        }
        Ok(())
    }

    /// Whether group `g` has a row in the output.
    fn exists(&self, g: KeyId) -> bool {
        self.is_global() || self.rows.get(g as usize).is_some_and(|&r| r > 0)
    }

    fn grow(&mut self) {
        let len = self.keys.slots();
        if self.rows.len() < len {
            self.rows.resize(len, 0);
            self.flags.resize(len, 0);
        }
    }

    /// The output rows of `groups`: their keys and each aggregate's value.
    fn output_rows(&self, groups: &[KeyId], values: Option<Vec<ArrayRef>>) -> Result<RecordBatch> {
        let mut columns = self.keys.decode(groups).map_err(external)?;
        let values = match values {
            Some(values) => values,
            None => self
                .accumulators
                .iter()
                .map(|a| a.evaluate(groups))
                .collect::<Result<_>>()?,
        };
        columns.extend(values);
        let columns = columns
            .into_iter()
            .zip(self.output_schema.fields())
            .map(|(c, f)| {
                if c.data_type() == f.data_type() {
                    Ok(c)
                } else {
                    Ok(cast(&c, f.data_type())?)
                }
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(RecordBatch::try_new_with_options(
            self.output_schema.clone(),
            columns,
            &RecordBatchOptions::new().with_row_count(Some(groups.len())),
        )?)
    }

    /// Marks the groups of a batch touched; remembers the output of those
    /// the epoch touches for the first time.
    fn touch(&mut self, groups: &[KeyId]) -> Result<()> {
        let mut fresh = Vec::new();
        for &g in groups {
            let flags = &mut self.flags[g as usize];
            if *flags & IN_EPOCH == 0 {
                *flags |= IN_EPOCH;
                self.in_epoch.push(g);
                fresh.push(g);
            }
            if *flags & IN_DELTA == 0 {
                *flags |= IN_DELTA;
                self.in_delta.push(g);
            }
        }
        let existing: Vec<KeyId> = fresh.into_iter().filter(|&g| self.exists(g)).collect();
        if !existing.is_empty() && !self.emits_on_close() {
            for (accumulator, old) in self.accumulators.iter().zip(&mut self.old_values) {
                old.push(accumulator.evaluate(&existing)?);
            }
            self.old_groups.extend(existing);
        }
        Ok(())
    }

    /// The group table's rows for `groups`.
    fn state_rows_of(&self, groups: &[KeyId]) -> Result<RecordBatch> {
        group_table_rows(
            &self.table_schema,
            &self.keys,
            self.is_global(),
            groups,
            &self.rows,
            &self.accumulators,
        )
    }

    fn group_spec(&self) -> TableSpec {
        let key = (0..self.group_fields.len().max(1)).collect();
        TableSpec::with_primary_key(self.table_schema.clone(), key)
    }
}

impl Operator for GroupedAggregate {
    fn initial(&mut self) -> Result<Vec<Changes>> {
        if !self.is_global() {
            return Ok(Vec::new());
        }
        let probe = self.keys.prepare(&[], 1).map_err(external)?;
        let (group, _) = self.keys.intern(&probe, 0);
        self.grow();
        self.flags[group as usize] |= IN_DELTA;
        self.in_delta.push(group);
        Ok(vec![Changes::inserts(self.output_rows(&[group], None)?)])
    }

    fn process(&mut self, _port: usize, input: Changes) -> Result<Vec<Changes>> {
        let input = self.drop_late(input)?;
        if input.is_empty() {
            return Ok(Vec::new());
        }
        let groups = match self.input {
            Input::Rows => intern_groups(&self.spec, &mut self.keys, &input)?,
            Input::Partials => self.intern_partials(&input)?,
        };
        self.grow();
        self.register_windows(&groups)?;
        self.touch(&groups)?;
        match self.input {
            Input::Rows => {
                add_rows(&mut self.rows, &groups, input.weights.values());
                let len = self.keys.slots();
                accumulate(&self.spec, &mut self.accumulators, &input, &groups, len)?;
            }
            Input::Partials => self.merge(&groups, input.rows.columns())?,
        }
        if groups.iter().any(|&g| self.rows[g as usize] < 0) {
            return Err(DataFusionError::Internal(
                "a group lost more rows than it had".into(),
            ));
        }
        Ok(Vec::new())
    }

    fn flush(&mut self) -> Result<Vec<Changes>> {
        let touched = std::mem::take(&mut self.in_epoch);
        for &g in &touched {
            self.flags[g as usize] &= !IN_EPOCH;
        }
        if self.emits_on_close() {
            // Rows come out when their window closes (`advance`).
            return Ok(Vec::new());
        }
        let old_groups = std::mem::take(&mut self.old_groups);
        let old_values = self
            .old_values
            .iter_mut()
            .map(|chunks| {
                let parts: Vec<&dyn datafusion::arrow::array::Array> =
                    chunks.iter().map(|c| c.as_ref()).collect();
                let merged = concat(&parts);
                chunks.clear();
                merged
            })
            .collect::<std::result::Result<Vec<_>, _>>();
        let mut out = Vec::with_capacity(2);
        if !old_groups.is_empty() {
            let old = self.output_rows(&old_groups, Some(old_values?))?;
            out.push(Changes::deletes(old));
        }
        let now: Vec<KeyId> = touched.into_iter().filter(|&g| self.exists(g)).collect();
        if !now.is_empty() {
            out.push(Changes::inserts(self.output_rows(&now, None)?));
        }
        Ok(out)
    }

    fn advance(&mut self, watermarks: &Watermarks) -> Result<Vec<Changes>> {
        let Some(windows) = self.windows.as_mut() else {
            return Ok(Vec::new());
        };
        let (flags, keys) = (&self.flags, &self.keys);
        let closing = windows.closing(
            watermarks,
            |&g| flags[g as usize] & WINDOWED != 0,
            |ids| keys.decode(ids).map_err(external),
        )?;
        if closing.is_empty() {
            return Ok(Vec::new());
        }
        let mut out = Vec::new();
        if self.emits_on_close() {
            let present: Vec<KeyId> = closing
                .iter()
                .copied()
                .filter(|&g| self.exists(g))
                .collect();
            if !present.is_empty() {
                out.push(Changes::inserts(self.output_rows(&present, None)?));
            }
        }
        for accumulator in &mut self.accumulators {
            if let Some(values) = accumulator.values() {
                values.forget(&closing);
            }
        }
        // Freed at the next checkpoint, like a group whose rows are gone.
        for g in closing {
            self.rows[g as usize] = 0;
            let flags = &mut self.flags[g as usize];
            *flags &= !WINDOWED;
            if *flags & IN_DELTA == 0 {
                *flags |= IN_DELTA;
                self.in_delta.push(g);
            }
        }
        Ok(out)
    }

    fn late_rows(&self) -> u64 {
        self.windows.as_ref().map_or(0, |w| w.late)
    }

    fn state_specs(&self) -> Vec<TableSpec> {
        let mut specs = vec![self.group_spec()];
        for accumulator in &self.accumulators {
            specs.extend(accumulator.values_spec(&self.group_fields));
        }
        specs
    }

    fn checkpoint(&mut self) -> Result<Vec<Option<DeltaBatches>>> {
        let mut deltas = vec![None];
        for accumulator in &mut self.accumulators {
            if let Some(values) = accumulator.values() {
                deltas.push(values.take_delta(&self.keys, &self.group_fields)?);
            }
        }
        let changed = std::mem::take(&mut self.in_delta);
        let (mut present, mut gone, mut freed) = (Vec::new(), Vec::new(), Vec::new());
        for g in changed {
            let exists = self.exists(g);
            let flags = &mut self.flags[g as usize];
            if *flags & IN_DELTA == 0 {
                continue;
            }
            *flags &= !IN_DELTA;
            if exists {
                *flags |= COMMITTED;
                present.push(g);
            } else {
                if *flags & COMMITTED != 0 {
                    gone.push(g);
                }
                freed.push(g);
            }
        }
        let upserts = (!present.is_empty())
            .then(|| self.state_rows_of(&present))
            .transpose()?;
        let deletes = if gone.is_empty() {
            None
        } else {
            let columns = self.keys.decode(&gone).map_err(external)?;
            Some(RecordBatch::try_new(
                self.group_spec().key_schema(),
                columns,
            )?)
        };
        for g in freed {
            self.keys.remove(g);
            self.rows[g as usize] = 0;
            self.flags[g as usize] = 0;
            for accumulator in &mut self.accumulators {
                accumulator.reset(g);
            }
        }
        if upserts.is_some() || deletes.is_some() {
            deltas[0] = Some(DeltaBatches { upserts, deletes });
        }
        Ok(deltas)
    }

    fn restore_share(
        &mut self,
        tables: &[RecordBatch],
        instance: usize,
        placement: &crate::Placement,
    ) -> Result<()> {
        // Every state table leads with the group columns (a global
        // aggregate's with a placeholder, and it runs as one instance).
        let groups = if self.is_global() {
            0
        } else {
            self.group_fields.len()
        };
        let mine = tables
            .iter()
            .map(|stored| {
                let keys = &stored.columns()[..groups.min(stored.num_columns())];
                placement.owned_rows(instance, stored, keys)
            })
            .collect::<Result<Vec<_>>>()?;
        self.restore(&mine)
    }

    fn restore(&mut self, tables: &[RecordBatch]) -> Result<()> {
        expect_tables(tables, self.state_specs().len())?;
        let groups_table = &tables[0];
        let width = self.group_fields.len();
        let n = groups_table.num_rows();
        let key_columns: Vec<ArrayRef> = groups_table.columns()[..width].to_vec();
        let probe = self.keys.prepare(&key_columns, n).map_err(external)?;
        let mut groups = Vec::new();
        self.keys.intern_all(&probe, &mut groups);
        self.grow();
        let key_width = width.max(1);
        let rows = groups_table
            .column(key_width)
            .as_any()
            .downcast_ref::<Int64Array>()
            .ok_or_else(|| DataFusionError::Internal("group row counts are not int64".into()))?;
        for (i, &g) in groups.iter().enumerate() {
            self.rows[g as usize] = rows.value(i);
            self.flags[g as usize] = COMMITTED;
        }
        self.register_windows(&groups)?;
        let mut column = key_width + 1;
        let len = self.keys.slots();
        let mut side = 1;
        for accumulator in &mut self.accumulators {
            let count = accumulator.state_fields().len();
            accumulator.restore(
                &groups,
                &groups_table.columns()[column..column + count],
                len,
            )?;
            column += count;
            if let Some(values) = accumulator.values() {
                let table = &tables[side];
                side += 1;
                let keys: Vec<ArrayRef> = table.columns()[..width].to_vec();
                let probe = self
                    .keys
                    .prepare(&keys, table.num_rows())
                    .map_err(external)?;
                let mut ids = Vec::new();
                self.keys.intern_all(&probe, &mut ids);
                values.restore_values(&ids, table)?;
            }
        }
        self.grow();
        Ok(())
    }

    fn memory_size(&self) -> usize {
        let held: usize = self
            .old_values
            .iter()
            .flatten()
            .map(|a| a.get_array_memory_size())
            .sum();
        self.keys.memory_size()
            + self.rows.capacity() * 8
            + self.flags.capacity()
            + (self.in_epoch.capacity() + self.in_delta.capacity() + self.old_groups.capacity()) * 4
            + self
                .accumulators
                .iter()
                .map(|a| a.memory_size())
                .sum::<usize>()
            + held
            + self.windows.as_ref().map_or(0, Windows::memory_size)
    }

    fn state_rows(&self) -> Vec<usize> {
        let mut rows = vec![self.keys.len()];
        rows.extend(self.accumulators.iter().filter_map(|a| a.value_entries()));
        rows
    }
}

/// Rows of the group table in `schema` for `groups`: their key columns
/// from `keys` (a placeholder column for a `global` aggregate), their row
/// counts (`rows`, indexed by group id) and each aggregate's state.
pub(super) fn group_table_rows(
    schema: &SchemaRef,
    keys: &KeyIndex,
    global: bool,
    groups: &[KeyId],
    rows: &[i64],
    accumulators: &[Box<dyn GroupAccumulator>],
) -> Result<RecordBatch> {
    let mut columns = if global {
        vec![Arc::new(BooleanArray::from(vec![true; groups.len()])) as ArrayRef]
    } else {
        keys.decode(groups).map_err(external)?
    };
    columns.push(Arc::new(Int64Array::from_iter_values(
        groups.iter().map(|&g| rows[g as usize]),
    )));
    for accumulator in accumulators {
        columns.extend(accumulator.state(groups)?);
    }
    Ok(RecordBatch::try_new(schema.clone(), columns)?)
}

/// Adds each row's count (`counts[i]`) to its group's (`groups[i]`).
pub(super) fn add_rows(rows: &mut [i64], groups: &[KeyId], counts: &[i64]) {
    for (&g, &count) in groups.iter().zip(counts) {
        rows[g as usize] += count;
    }
}

/// The group ids of the rows of `input` in `keys`, adding new groups: the
/// group expressions evaluated on the whole batch, one lookup per row.
pub(super) fn intern_groups(
    spec: &AggregateSpec,
    keys: &mut KeyIndex,
    input: &Changes,
) -> Result<Vec<KeyId>> {
    let n = input.len();
    let columns = spec
        .group
        .iter()
        .map(|(e, _)| e.evaluate(&input.rows)?.into_array(n))
        .collect::<Result<Vec<_>>>()?;
    let probe = keys.prepare(&columns, n).map_err(external)?;
    let mut groups = Vec::with_capacity(n);
    keys.intern_all(&probe, &mut groups);
    Ok(groups)
}

/// Adds the rows of `input` (their groups: `groups`, below `groups_len`)
/// to each aggregate's state: its arguments and `FILTER` evaluated on the
/// whole batch, then one update with the rows' weights.
pub(super) fn accumulate(
    spec: &AggregateSpec,
    accumulators: &mut [Box<dyn GroupAccumulator>],
    input: &Changes,
    groups: &[KeyId],
    groups_len: usize,
) -> Result<()> {
    let n = input.len();
    let weights = input.weights.values();
    for (i, accumulator) in accumulators.iter_mut().enumerate() {
        let args = spec.aggregates[i]
            .expressions()
            .iter()
            .map(|e| e.evaluate(&input.rows)?.into_array(n))
            .collect::<Result<Vec<_>>>()?;
        let mask = match &spec.filters[i] {
            Some(filter) => {
                let mask = filter.evaluate(&input.rows)?.into_array(n)?;
                let mask = mask
                    .as_any()
                    .downcast_ref::<BooleanArray>()
                    .ok_or_else(|| {
                        DataFusionError::Internal("aggregate filter is not boolean".into())
                    })?;
                Some(null_as_false(mask))
            }
            None => None,
        };
        accumulator.update(&args, groups, weights, mask.as_ref(), groups_len)?;
    }
    Ok(())
}

pub(super) fn external(e: weir_state::StateError) -> DataFusionError {
    DataFusionError::External(Box::new(e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aggregate::RecomputeAggregate;
    use crate::testing::{group_by_k, kv, kv_schema, net, rows};
    use datafusion::functions_aggregate::average::avg_udaf;
    use datafusion::functions_aggregate::count::count_udaf;
    use datafusion::functions_aggregate::min_max::{max_udaf, min_udaf};
    use datafusion::functions_aggregate::sum::sum_udaf;
    use datafusion::logical_expr::Operator as BinOp;
    use datafusion::physical_expr::aggregate::AggregateExprBuilder;
    use datafusion::physical_expr::expressions::{binary, cast, col, lit};
    use datafusion::physical_expr::PhysicalExprRef;

    /// count, sum, avg, min, max and a filtered sum over `(k, v)`.
    fn spec(grouped: bool) -> (AggregateSpec, SchemaRef) {
        let (spec, out) = spec_with_distinct(grouped);
        let aggregates = spec.aggregates[..6].to_vec();
        let mut fields: Vec<Field> = out.fields()[..spec.group.len()]
            .iter()
            .map(|f| f.as_ref().clone())
            .collect();
        fields.extend(aggregates.iter().map(|a| a.field().as_ref().clone()));
        let spec = AggregateSpec {
            filters: spec.filters[..6].to_vec(),
            emit_on_window_close: false,
            aggregates,
            group: spec.group,
        };
        (spec, Arc::new(Schema::new(fields)))
    }

    /// [`spec`] and plain and filtered `count(DISTINCT v)`.
    fn spec_with_distinct(grouped: bool) -> (AggregateSpec, SchemaRef) {
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
        let distinct = |udaf, arg: PhysicalExprRef, name: &str| {
            Arc::new(
                AggregateExprBuilder::new(udaf, vec![arg])
                    .schema(schema.clone())
                    .alias(name)
                    .distinct()
                    .build()
                    .unwrap(),
            )
        };
        let aggregates = vec![
            build(count_udaf(), v.clone(), "n"),
            build(sum_udaf(), as_type(DataType::Int64), "s"),
            build(avg_udaf(), as_type(DataType::Float64), "a"),
            build(min_udaf(), v.clone(), "lo"),
            build(max_udaf(), v.clone(), "hi"),
            build(sum_udaf(), as_type(DataType::Int64), "big"),
            distinct(count_udaf(), v.clone(), "dv"),
            distinct(count_udaf(), v.clone(), "big_dv"),
        ];
        let big = binary(v.clone(), BinOp::Gt, lit(5), &schema).unwrap();
        let filters = vec![
            None,
            None,
            None,
            None,
            None,
            Some(big.clone()),
            None,
            Some(big),
        ];
        let (group, mut fields) = group_by_k(grouped);
        for a in &aggregates {
            fields.push(a.field().as_ref().clone());
        }
        let spec = AggregateSpec {
            group,
            aggregates,
            filters,
            emit_on_window_close: false,
        };
        (spec, Arc::new(Schema::new(fields)))
    }

    /// Pushes each epoch's batches through `op` and flushes; returns all
    /// output.
    fn run(op: &mut dyn Operator, epochs: &[Vec<Changes>]) -> Vec<Changes> {
        let mut out = op.initial().unwrap();
        for epoch in epochs {
            for batch in epoch {
                out.extend(op.process(0, batch.clone()).unwrap());
            }
            out.extend(op.flush().unwrap());
        }
        out
    }

    /// The operator's state after a checkpoint, loaded into a fresh one
    /// through state tables, as a restart does.
    fn restored(op: &mut GroupedAggregate, fresh: &mut GroupedAggregate) {
        let specs = op.state_specs();
        let deltas = op.checkpoint().unwrap();
        let tables: Vec<RecordBatch> = specs
            .into_iter()
            .zip(deltas)
            .map(|(spec, delta)| {
                let mut table = weir_state::StateTable::new(spec).unwrap();
                if let Some(delta) = delta {
                    table
                        .apply_delta(delta.upserts.as_ref(), delta.deletes.as_ref())
                        .unwrap();
                }
                table.snapshot().stored_rows().unwrap()
            })
            .collect();
        fresh.restore(&tables).unwrap();
    }

    /// Columnar state gives what recomputing each group gives, through
    /// inserts, duplicates, NULLs, deletes of the current minimum and
    /// maximum, groups emptied and refilled, several batches per epoch and
    /// a restore from the durable state.
    #[test]
    fn state_rows_fall_in_the_partition_their_input_rows_are_sent_to() {
        // Run as several instances, a group's input rows are exchanged by
        // the hash of its group values, and after a restart an instance
        // takes the state rows whose leading group columns hash into its
        // partitions: the two must agree, or a group's rows and its state
        // would meet in different instances.
        let (spec, out) = spec(true);
        let exchange = crate::Exchange::Hash(spec.group.iter().map(|(e, _)| e.clone()).collect());
        let groups = spec.group.len();
        let mut op = GroupedAggregate::try_new(spec, kv_schema(), out, false)
            .unwrap()
            .unwrap();
        let input: Vec<(Option<i32>, Option<i32>, i64)> = (0..200)
            .map(|i| ((i % 37 != 0).then_some(i % 53), Some(i), 1))
            .collect();
        let input = kv(&input);
        run(&mut op, &[vec![input.clone()]]);
        let routed = crate::vnodes(&exchange.keys(&input.rows).unwrap(), input.len()).unwrap();
        let key_of = |column: &ArrayRef, row: usize| {
            datafusion::arrow::util::display::array_value_to_string(column, row).unwrap()
        };
        let mut partition_of_key = std::collections::HashMap::new();
        for (row, &vnode) in routed.iter().enumerate() {
            partition_of_key.insert(key_of(input.rows.column(0), row), vnode);
        }
        let deltas = op.checkpoint().unwrap();
        let mut checked = 0;
        for delta in deltas.into_iter().flatten() {
            let state = delta.upserts.expect("new state rows");
            let placed = crate::vnodes(&state.columns()[..groups], state.num_rows()).unwrap();
            for (row, vnode) in placed.into_iter().enumerate() {
                assert_eq!(partition_of_key[&key_of(state.column(0), row)], vnode);
                checked += 1;
            }
        }
        assert!(
            checked > 53,
            "group rows and min/max values checked: {checked}"
        );
    }

    #[test]
    fn columnar_state_matches_recomputation_under_deletes() {
        let epochs = [
            vec![
                kv(&[
                    (Some(1), Some(4), 1),
                    (Some(1), Some(9), 2),
                    (None, None, 1),
                ]),
                kv(&[(Some(2), Some(7), 1), (Some(2), Some(3), 1)]),
            ],
            vec![kv(&[
                (Some(1), Some(9), -1),
                (Some(3), None, 3),
                (Some(2), Some(3), -1),
            ])],
            vec![
                kv(&[(Some(1), Some(9), -1)]),
                kv(&[(Some(1), Some(4), -1), (Some(2), Some(6), 1)]),
            ],
            vec![kv(&[(Some(1), Some(12), 1), (Some(3), None, -3)])],
        ];
        for grouped in [true, false] {
            let (spec, out) = spec_with_distinct(grouped);
            let mut columnar =
                GroupedAggregate::try_new(spec.clone(), kv_schema(), out.clone(), false)
                    .unwrap()
                    .expect("every aggregate is columnar");
            let mut recompute =
                RecomputeAggregate::new(spec.clone(), kv_schema(), out.clone(), false).unwrap();
            let a = run(&mut columnar, &epochs[..2]);
            let b = run(&mut recompute, &epochs[..2]);
            assert_eq!(net(&a), net(&b), "grouped: {grouped}");

            let mut copy = GroupedAggregate::try_new(spec.clone(), kv_schema(), out.clone(), false)
                .unwrap()
                .unwrap();
            restored(&mut columnar, &mut copy);
            let mut c = a.clone();
            let (mut a, mut b) = (a, b);
            for epoch in &epochs[2..] {
                for batch in epoch {
                    a.extend(columnar.process(0, batch.clone()).unwrap());
                    b.extend(recompute.process(0, batch.clone()).unwrap());
                    c.extend(copy.process(0, batch.clone()).unwrap());
                }
                a.extend(columnar.flush().unwrap());
                b.extend(recompute.flush().unwrap());
                c.extend(copy.flush().unwrap());
                assert_eq!(net(&a), net(&b), "grouped: {grouped}");
                assert_eq!(net(&c), net(&b), "restored, grouped: {grouped}");
            }
        }
    }

    /// [`spec`] without `min` and `max`: aggregates whose partials merge
    /// when the input deletes.
    fn linear_spec(grouped: bool) -> (AggregateSpec, SchemaRef) {
        let (spec, _) = spec(grouped);
        let keep: Vec<bool> = spec
            .aggregates
            .iter()
            .map(|a| !matches!(a.fun().name(), "min" | "max"))
            .collect();
        fn pick<T: Clone>(items: &[T], keep: &[bool]) -> Vec<T> {
            let kept = items.iter().zip(keep).filter(|(_, k)| **k);
            kept.map(|(item, _)| item.clone()).collect()
        }
        let spec = AggregateSpec {
            aggregates: pick(&spec.aggregates, &keep),
            filters: pick(&spec.filters, &keep),
            emit_on_window_close: false,
            group: spec.group,
        };
        let (_, mut fields) = group_by_k(grouped);
        fields.extend(spec.aggregates.iter().map(|a| a.field().as_ref().clone()));
        (spec, Arc::new(Schema::new(fields)))
    }

    /// Two local phases, each taking every other batch, and one final
    /// phase give what the aggregate gives in one phase: through deletes
    /// (for the aggregates whose partials merge under them), for a global
    /// aggregate, and with partials handed on early.
    #[test]
    fn two_phases_give_what_one_gives() {
        let deleting = vec![
            vec![
                kv(&[(Some(1), Some(4), 1), (Some(1), Some(9), 2)]),
                kv(&[(Some(2), Some(7), 1), (None, None, 1)]),
                kv(&[(Some(2), Some(3), 1), (Some(3), Some(1), 1)]),
            ],
            // A group loses more rows in one instance than it gains there.
            vec![
                kv(&[(Some(1), Some(9), -2), (Some(3), None, 3)]),
                kv(&[(Some(1), Some(5), 1), (Some(2), Some(3), -1)]),
            ],
            vec![
                kv(&[(Some(1), Some(4), -1), (Some(3), None, -3)]),
                kv(&[(Some(1), Some(5), -1), (Some(3), Some(1), -1)]),
            ],
        ];
        let appending = vec![
            vec![
                kv(&[(Some(1), Some(4), 1), (Some(2), Some(9), 1)]),
                kv(&[
                    (Some(3), None, 1),
                    (None, Some(7), 1),
                    (Some(1), Some(2), 1),
                ]),
                kv(&[(Some(4), Some(8), 1)]),
            ],
            vec![
                kv(&[(Some(2), Some(11), 1), (Some(5), Some(0), 1)]),
                kv(&[(Some(1), Some(-3), 1), (Some(3), Some(6), 1)]),
            ],
        ];
        let mut checked = 0;
        for grouped in [true, false] {
            let (extremes, _) = spec(grouped);
            assert!(
                crate::aggregate::two_phase(extremes, kv_schema(), spec(grouped).1, false, None)
                    .unwrap()
                    .is_none(),
                "min and max of an input that deletes keep their values in one place"
            );
            let cases = [
                (linear_spec(grouped), false, &deleting),
                (spec(grouped), true, &appending),
            ];
            for ((spec, out), append_only, epochs) in cases {
                let two_phase = || {
                    crate::aggregate::two_phase(
                        spec.clone(),
                        kv_schema(),
                        out.clone(),
                        append_only,
                        None,
                    )
                    .unwrap()
                    .expect("these partials merge")
                };
                let (first, mut merge) = two_phase();
                let mut locals = [first, two_phase().0.with_max_groups(2)];
                let mut whole =
                    GroupedAggregate::try_new(spec.clone(), kv_schema(), out, append_only)
                        .unwrap()
                        .unwrap();
                let mut a = whole.initial().unwrap();
                let mut b = merge.initial().unwrap();
                let mut partials = Vec::new();
                for epoch in epochs.iter() {
                    for (i, batch) in epoch.iter().enumerate() {
                        a.extend(whole.process(0, batch.clone()).unwrap());
                        partials.extend(locals[i % 2].process(0, batch.clone()).unwrap());
                    }
                    for local in &mut locals {
                        partials.extend(local.flush().unwrap());
                    }
                    for partial in partials.drain(..) {
                        b.extend(merge.process(0, partial).unwrap());
                    }
                    a.extend(whole.flush().unwrap());
                    b.extend(merge.flush().unwrap());
                    assert_eq!(net(&a), net(&b), "grouped: {grouped}");
                    assert_eq!(whole.state_rows(), merge.state_rows());
                    checked += 1;
                }
            }
        }
        assert_eq!(checked, 10);
    }

    #[test]
    fn an_epoch_emits_each_touched_group_once() {
        let (spec, out) = spec(true);
        let mut op = GroupedAggregate::try_new(spec, kv_schema(), out, true)
            .unwrap()
            .unwrap();
        let batches: Vec<Changes> = (0..50).map(|i| kv(&[(Some(1), Some(i), 1)])).collect();
        for batch in &batches {
            assert!(op.process(0, batch.clone()).unwrap().is_empty());
        }
        let flushed = op.flush().unwrap();
        assert_eq!(flushed.iter().map(Changes::len).sum::<usize>(), 1);
        assert_eq!(net(&flushed), rows(&[("1,50,1225,24.5,0,49,1210", 1)]));
        op.process(0, kv(&[(Some(1), Some(100), 1)])).unwrap();
        let next = op.flush().unwrap();
        assert_eq!(
            net(&next),
            rows(&[
                ("1,50,1225,24.5,0,49,1210", -1),
                ("1,51,1325,25.980392156862745,0,100,1310", 1)
            ])
        );
    }

    #[test]
    fn append_only_min_and_max_keep_one_value_per_group_and_refuse_deletes() {
        let (spec, out) = spec(true);
        let mut op = GroupedAggregate::try_new(spec, kv_schema(), out, true)
            .unwrap()
            .unwrap();
        assert_eq!(op.state_specs().len(), 1, "no table of values");
        run(
            &mut op,
            &[vec![kv(&[(Some(1), Some(3), 1), (Some(1), Some(8), 1)])]],
        );
        let err = op.process(0, kv(&[(Some(1), Some(8), -1)])).unwrap_err();
        assert!(err.to_string().contains("append-only"), "{err}");
    }

    #[test]
    fn emptied_groups_leave_the_state_at_the_next_checkpoint() {
        let (spec, out) = spec(true);
        let mut op = GroupedAggregate::try_new(spec, kv_schema(), out, false)
            .unwrap()
            .unwrap();
        run(
            &mut op,
            &[vec![kv(&[(Some(1), Some(3), 1), (Some(2), Some(5), 1)])]],
        );
        let first = op.checkpoint().unwrap();
        assert_eq!(
            first[0]
                .as_ref()
                .unwrap()
                .upserts
                .as_ref()
                .unwrap()
                .num_rows(),
            2
        );
        assert_eq!(op.state_rows(), vec![2, 2, 2]);
        run(&mut op, &[vec![kv(&[(Some(1), Some(3), -1)])]]);
        let second = op.checkpoint().unwrap();
        let groups = second[0].as_ref().unwrap();
        assert_eq!(groups.deletes.as_ref().unwrap().num_rows(), 1);
        assert_eq!(
            op.state_rows(),
            vec![1, 1, 1],
            "the group's id is free again"
        );
        for values in &second[1..] {
            assert_eq!(
                values
                    .as_ref()
                    .unwrap()
                    .deletes
                    .as_ref()
                    .unwrap()
                    .num_rows(),
                1
            );
        }
    }
}
