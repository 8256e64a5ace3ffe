//! Top-N per partition over an input that only inserts (a source, an
//! append-only table): `ROW_NUMBER() OVER (PARTITION BY p ORDER BY o)
//! <= n` for a small `n` ([`MAX_FETCH`]), and `= 1`, a deduplication.
//!
//! Rows never leave such an input, so a row that falls out of its
//! partition's first `n` can never come back and is dropped: the state is
//! each partition's first rows and nothing else. It is kept in columns
//! rather than in ordered maps of encoded rows ([`crate::group_top_n::GroupTopN`]'s
//! form, which serves inputs that delete):
//!
//! - partitions are interned in a [`KeyIndex`] (`partitions`), and each
//!   has `n` slots in one flat vector (`tops`) holding its first rows'
//!   ids in order;
//! - the rows held are interned in a second, ordered [`KeyIndex`]
//!   (`rows`) by their `ORDER BY` values followed by every column, so
//!   that comparing two rows' encodings compares them in `ORDER BY`
//!   order, ties broken by the whole row (as `GroupTopN` orders them);
//!   the same row held twice is one entry with two copies.
//!
//! A new row is compared with its partition's last slot (one `memcmp`)
//! and, only if it comes before it, inserted. At the end of the epoch the
//! partitions touched emit the positions whose row changed. The durable
//! table is `GroupTopN`'s (the rows held with their copies, keyed by the
//! whole row), so either operator reads what the other wrote.
//!
//! Memory: per partition, its key in the index and `4 * n + 4` bytes of
//! slots; per row held, its encoding plus about 40 bytes.
//!
//! A top-N per window (a `PARTITION BY` value a watermark bounds, such as
//! a `TUMBLE`'s `window_start`) forgets a window's partitions once the
//! watermark passes it (see [`crate::window_close`]): their rows leave the
//! state at the next checkpoint, their rows already numbered stay in the
//! output, and rows of a closed window are late: dropped and counted.

use std::sync::Arc;

use datafusion::arrow::array::{
    ArrayRef, Int64Array, RecordBatch, RecordBatchOptions, UInt64Array,
};
use datafusion::arrow::compute::{cast, SortOptions};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::arrow::row::SortField;
use datafusion::error::DataFusionError;
use datafusion::physical_expr::PhysicalExprRef;
use weir_state::{DeltaBatches, KeyId, KeyIndex, Probe, StateError, TableSpec};

use crate::changes::WEIGHT_COLUMN;
use crate::operator::{expect_tables, owned_by_keys};
use crate::plan::GroupTopNSpec;
use crate::watermark::{ColumnBound, Watermarks};
use crate::window_close::Windows;
use crate::{Changes, Operator, Result};

/// The largest `n` kept in flat slots; a larger one is a
/// [`crate::group_top_n::GroupTopN`] (slots cost `4 * n` bytes per partition, however
/// few rows it has).
pub(crate) const MAX_FETCH: usize = 16;

/// Whether a top-N of `spec` over an input (`append_only`: it only
/// inserts; with `columns` columns) runs as an [`AppendOnlyTopN`].
pub(crate) fn applies(spec: &GroupTopNSpec, append_only: bool, columns: usize) -> bool {
    append_only && spec.fetch <= MAX_FETCH && columns > 0
}

/// The first rows of each partition of an input that only inserts,
/// numbered (see the module documentation).
#[derive(Debug)]
pub struct AppendOnlyTopN {
    partition: Vec<PhysicalExprRef>,
    order: Vec<PhysicalExprRef>,
    fetch: usize,
    /// Input columns followed by the row number.
    schema: SchemaRef,
    /// The durable table: input columns followed by the copies.
    state_schema: SchemaRef,
    partitions: KeyIndex,
    /// Rows held, by `ORDER BY` values and then every column.
    rows: KeyIndex,
    /// By row id: copies held (0: gone, deleted at the next checkpoint).
    copies: Vec<i64>,
    /// By row id: the epoch that added it. A row added this epoch is in
    /// no checkpoint and in no partition's first rows before the epoch,
    /// so one pushed out again is forgotten at once.
    born: Vec<u64>,
    /// Epochs flushed so far.
    epoch: u64,
    /// `fetch` slots per partition id: its first rows' ids, in order.
    tops: Vec<KeyId>,
    /// By partition id: slots in use.
    lens: Vec<u32>,
    /// Partitions touched this epoch, each with its first rows before it
    /// (`before[start..start + len]`), and a flag per partition id.
    touched: Vec<(KeyId, usize, usize)>,
    before: Vec<KeyId>,
    is_touched: Vec<bool>,
    /// Rows whose copies changed since the last checkpoint, and a flag per
    /// row id.
    changed: Vec<KeyId>,
    is_changed: Vec<bool>,
    /// The partition column a watermark bounds, if any: its windows close.
    windows: Option<Windows>,
    /// By partition id: listed under its window value in `windows`.
    windowed: Vec<bool>,
}

fn external(e: StateError) -> DataFusionError {
    DataFusionError::External(Box::new(e))
}

impl AppendOnlyTopN {
    /// The first `spec.fetch` rows (at most [`MAX_FETCH`]) of each
    /// partition of rows of `input_schema`, numbered, as rows of `schema`.
    pub fn new(spec: &GroupTopNSpec, input_schema: SchemaRef, schema: SchemaRef) -> Result<Self> {
        if !applies(spec, true, input_schema.fields().len()) {
            return Err(DataFusionError::Internal(format!(
                "an append-only top-{} over {} columns",
                spec.fetch,
                input_schema.fields().len()
            )));
        }
        let types = |exprs: &[PhysicalExprRef]| {
            exprs
                .iter()
                .map(|e| e.data_type(&input_schema))
                .collect::<Result<Vec<DataType>>>()
        };
        let partitions = KeyIndex::new(&types(&spec.partition)?).map_err(external)?;
        let order: Vec<PhysicalExprRef> = spec.order.iter().map(|s| s.expr.clone()).collect();
        let mut fields: Vec<SortField> = types(&order)?
            .into_iter()
            .zip(&spec.order)
            .map(|(t, s)| SortField::new_with_options(t, s.options))
            .collect();
        fields.extend(
            input_schema.fields().iter().map(|f| {
                SortField::new_with_options(f.data_type().clone(), SortOptions::default())
            }),
        );
        let mut state_fields: Vec<Field> = input_schema
            .fields()
            .iter()
            .map(|f| f.as_ref().clone())
            .collect();
        state_fields.push(Field::new(WEIGHT_COLUMN, DataType::Int64, false));
        Ok(AppendOnlyTopN {
            partition: spec.partition.clone(),
            order,
            fetch: spec.fetch,
            schema,
            state_schema: Arc::new(Schema::new(state_fields)),
            partitions,
            rows: KeyIndex::ordered(fields).map_err(external)?,
            copies: Vec::new(),
            born: Vec::new(),
            epoch: 0,
            tops: Vec::new(),
            lens: Vec::new(),
            touched: Vec::new(),
            before: Vec::new(),
            is_touched: Vec::new(),
            changed: Vec::new(),
            is_changed: Vec::new(),
            windows: None,
            windowed: Vec::new(),
        })
    }

    /// Forgets the partitions of `PARTITION BY` value `window.0` once its
    /// bound `window.1` passes them, and drops their late rows.
    pub fn with_window(mut self, window: Option<(usize, ColumnBound)>) -> Self {
        self.windows = window.map(|(column, bound)| Windows::new(column, bound));
        self
    }

    /// Drops the rows of `input` whose window closed.
    fn drop_late(&mut self, input: Changes) -> Result<Changes> {
        let Some(windows) = self.windows.as_mut() else {
            return Ok(input);
        };
        let values = self.partition[windows.column]
            .evaluate(&input.rows)?
            .into_array(input.len())?;
        windows.drop_late(input, &values, None)
    }

    /// Lists the partitions of `ids` not yet listed under their window.
    fn register_windows(&mut self, ids: &[KeyId]) -> Result<()> {
        let Some(windows) = self.windows.as_mut() else {
            return Ok(());
        };
        self.windowed.resize(self.partitions.slots(), false);
        let mut fresh = Vec::new();
        for &p in ids {
            if !std::mem::replace(&mut self.windowed[p as usize], true) {
                fresh.push(p);
            }
        }
        if !fresh.is_empty() {
            let values = self.partitions.decode(&fresh).map_err(external)?;
            windows.register(fresh.iter().copied(), &values[windows.column])?;
        }
        Ok(())
    }

    /// Forgets partition `p`: its rows' copies go (deleted at the next
    /// checkpoint), and its id may be handed out again.
    fn forget_partition(&mut self, p: KeyId) {
        let base = p as usize * self.fetch;
        let len = std::mem::replace(&mut self.lens[p as usize], 0) as usize;
        for slot in base..base + len {
            self.add_copies(self.tops[slot], -1);
        }
        self.windowed[p as usize] = false;
        self.partitions.remove(p);
    }

    /// Partition ids of `rows`' partitions (added where new), and `rows`
    /// prepared for the row index.
    fn prepare(&mut self, rows: &RecordBatch) -> Result<(Vec<KeyId>, Probe)> {
        let evaluate = |exprs: &[PhysicalExprRef]| {
            exprs
                .iter()
                .map(|e| e.evaluate(rows)?.into_array(rows.num_rows()))
                .collect::<Result<Vec<ArrayRef>>>()
        };
        let probe = self
            .partitions
            .prepare(&evaluate(&self.partition)?, rows.num_rows())
            .map_err(external)?;
        let mut ids = Vec::new();
        self.partitions.intern_all(&probe, &mut ids);
        self.register_windows(&ids)?;
        let slots = self.partitions.slots();
        self.lens.resize(slots, 0);
        self.is_touched.resize(slots, false);
        self.tops.resize(slots * self.fetch, 0);
        let mut columns = evaluate(&self.order)?;
        columns.extend(
            rows.columns()[..self.state_schema.fields().len() - 1]
                .iter()
                .cloned(),
        );
        let probe = self
            .rows
            .prepare(&columns, rows.num_rows())
            .map_err(external)?;
        Ok((ids, probe))
    }

    /// Offers row `row` of `probe` to partition `p`: kept if it comes
    /// before the partition's last row or the partition has a free slot.
    /// A row of this epoch that another pushes out is forgotten at once
    /// when `forget_fresh` (not while restoring: restored rows are in the
    /// durable table).
    fn offer(&mut self, p: KeyId, probe: &Probe, row: usize, forget_fresh: bool) {
        let base = p as usize * self.fetch;
        let len = self.lens[p as usize] as usize;
        let key = probe.encoded(row);
        let full = len == self.fetch;
        if full && key >= self.rows.encoded(self.tops[base + len - 1]) {
            return;
        }
        self.touch(p);
        let (id, new) = self.rows.intern(probe, row);
        if new {
            let slots = self.rows.slots();
            self.copies.resize(slots, 0);
            self.born.resize(slots, 0);
            self.is_changed.resize(slots, false);
            self.copies[id as usize] = 0;
            self.born[id as usize] = self.epoch;
        }
        self.add_copies(id, 1);
        let slots = &mut self.tops[base..base + self.fetch];
        let rows = &self.rows;
        let at = slots[..len].partition_point(|&held| rows.encoded(held) <= key);
        if full {
            let out = slots[self.fetch - 1];
            slots.copy_within(at..self.fetch - 1, at + 1);
            slots[at] = id;
            self.add_copies(out, -1);
            let fresh = forget_fresh && self.born[out as usize] == self.epoch;
            if fresh && self.copies[out as usize] == 0 {
                self.is_changed[out as usize] = false;
                self.rows.remove(out);
            }
        } else {
            slots.copy_within(at..len, at + 1);
            slots[at] = id;
            self.lens[p as usize] += 1;
        }
    }

    fn add_copies(&mut self, id: KeyId, by: i64) {
        self.copies[id as usize] += by;
        let flag = &mut self.is_changed[id as usize];
        if !*flag {
            *flag = true;
            self.changed.push(id);
        }
    }

    /// Notes partition `p`'s first rows before its first change this epoch.
    fn touch(&mut self, p: KeyId) {
        if self.is_touched[p as usize] {
            return;
        }
        self.is_touched[p as usize] = true;
        let base = p as usize * self.fetch;
        let len = self.lens[p as usize] as usize;
        self.touched.push((p, self.before.len(), len));
        self.before.extend_from_slice(&self.tops[base..base + len]);
    }

    /// Rows `ids` as input columns (dropping the leading `ORDER BY` values
    /// of their encoding).
    fn decode(&self, ids: &[KeyId]) -> Result<Vec<ArrayRef>> {
        let mut columns = self.rows.decode(ids).map_err(external)?;
        Ok(columns.split_off(self.order.len()))
    }
}

impl AppendOnlyTopN {
    /// Offers every row of `input` to its partition.
    fn insert(&mut self, input: &Changes, forget_fresh: bool) -> Result<()> {
        let (partitions, probe) = self.prepare(&input.rows)?;
        for (row, (&p, &weight)) in partitions.iter().zip(input.weights.values()).enumerate() {
            if weight < 0 {
                return Err(DataFusionError::Internal(
                    "a top-N over an input planned as append-only saw a deletion".into(),
                ));
            }
            for _ in 0..weight {
                self.offer(p, &probe, row, forget_fresh);
            }
        }
        Ok(())
    }
}

impl Operator for AppendOnlyTopN {
    fn process(&mut self, _port: usize, input: Changes) -> Result<Vec<Changes>> {
        let input = self.drop_late(input)?;
        self.insert(&input, true)?;
        Ok(Vec::new())
    }

    /// Forgets the partitions of the windows the watermark passed; their
    /// rows stay in the output.
    fn advance(&mut self, watermarks: &Watermarks) -> Result<Vec<Changes>> {
        let Some(windows) = self.windows.as_mut() else {
            return Ok(Vec::new());
        };
        let (windowed, partitions) = (&self.windowed, &self.partitions);
        let closing = windows.closing(
            watermarks,
            |&p| windowed[p as usize],
            |ids| partitions.decode(ids).map_err(external),
        )?;
        for p in closing {
            self.forget_partition(p);
        }
        Ok(Vec::new())
    }

    fn late_rows(&self) -> u64 {
        self.windows.as_ref().map_or(0, |w| w.late)
    }

    fn flush(&mut self) -> Result<Vec<Changes>> {
        let mut ids = Vec::new();
        let mut numbers = Vec::new();
        let mut weights = Vec::new();
        for &(p, start, len) in &self.touched {
            self.is_touched[p as usize] = false;
            let old = &self.before[start..start + len];
            let base = p as usize * self.fetch;
            let new = &self.tops[base..base + self.lens[p as usize] as usize];
            for position in 0..old.len().max(new.len()) {
                let (was, is) = (old.get(position), new.get(position));
                if was == is {
                    continue;
                }
                let number = position as u64 + 1;
                for (row, weight) in [(was, -1), (is, 1)] {
                    if let Some(&id) = row {
                        ids.push(id);
                        numbers.push(number);
                        weights.push(weight);
                    }
                }
            }
        }
        self.touched.clear();
        self.before.clear();
        self.epoch += 1;
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let mut columns = self.decode(&ids)?;
        let numbers: ArrayRef = Arc::new(UInt64Array::from(numbers));
        let number_type = self
            .schema
            .field(self.schema.fields().len() - 1)
            .data_type();
        columns.push(cast(&numbers, number_type)?);
        let batch = RecordBatch::try_new_with_options(
            self.schema.clone(),
            columns,
            &RecordBatchOptions::new().with_row_count(Some(ids.len())),
        )?;
        Ok(vec![Changes::new(batch, Int64Array::from(weights))?])
    }

    fn state_specs(&self) -> Vec<TableSpec> {
        let width = self.state_schema.fields().len();
        vec![TableSpec::with_primary_key(
            self.state_schema.clone(),
            (0..width - 1).collect(),
        )]
    }

    fn checkpoint(&mut self) -> Result<Vec<Option<DeltaBatches>>> {
        if self.changed.is_empty() {
            return Ok(vec![None]);
        }
        // An id is listed once per time it was marked; one whose flag is
        // down was forgotten (and maybe handed out again and listed anew).
        let mut changed = std::mem::take(&mut self.changed);
        changed.retain(|&id| std::mem::replace(&mut self.is_changed[id as usize], false));
        let (held, gone): (Vec<KeyId>, Vec<KeyId>) = changed
            .into_iter()
            .partition(|&id| self.copies[id as usize] > 0);
        let upserts = (!held.is_empty())
            .then(|| {
                let mut columns = self.decode(&held)?;
                let copies = held.iter().map(|&id| self.copies[id as usize]);
                columns.push(Arc::new(Int64Array::from_iter_values(copies)));
                Ok::<_, DataFusionError>(RecordBatch::try_new(self.state_schema.clone(), columns)?)
            })
            .transpose()?;
        let deletes = (!gone.is_empty())
            .then(|| {
                let key_schema = self.state_specs()[0].key_schema();
                Ok::<_, DataFusionError>(RecordBatch::try_new(key_schema, self.decode(&gone)?)?)
            })
            .transpose()?;
        for id in gone {
            self.rows.remove(id);
        }
        Ok(vec![Some(DeltaBatches { upserts, deletes })])
    }

    fn restore(&mut self, tables: &[RecordBatch]) -> Result<()> {
        expect_tables(tables, 1)?;
        let stored = &tables[0];
        let width = self.state_schema.fields().len() - 1;
        let input_fields = self.state_schema.fields()[..width].to_vec();
        let rows = RecordBatch::try_new(
            Arc::new(Schema::new(input_fields)),
            stored.columns()[..width].to_vec(),
        )?;
        let copies = crate::changes::as_weights(stored.column(width))?;
        self.insert(&Changes::new(rows, copies)?, false)?;
        // What was restored is durable already; rows a smaller `n` drops
        // stay changed, to be deleted at the next checkpoint.
        self.changed.retain(|&id| {
            let held = self.copies[id as usize] > 0;
            if held {
                self.is_changed[id as usize] = false;
            }
            !held
        });
        for &(p, _, _) in &self.touched {
            self.is_touched[p as usize] = false;
        }
        self.touched.clear();
        self.before.clear();
        self.epoch += 1;
        Ok(())
    }

    /// Runs partitioned by the `PARTITION BY` values, as
    /// [`crate::group_top_n::GroupTopN`] does.
    fn restore_share(
        &mut self,
        tables: &[RecordBatch],
        instance: usize,
        placement: &crate::Placement,
    ) -> Result<()> {
        expect_tables(tables, 1)?;
        let mine = owned_by_keys(&tables[0], &self.partition, instance, placement)?;
        self.restore(&[mine])
    }

    fn memory_size(&self) -> usize {
        self.partitions.memory_size()
            + self.rows.memory_size()
            + (self.copies.capacity() + self.born.capacity()) * 8
            + (self.tops.capacity() + self.lens.capacity() + self.before.capacity()) * 4
            + self.touched.capacity() * 24
            + self.changed.capacity() * 4
            + self.is_touched.capacity()
            + self.is_changed.capacity()
            + self.windowed.capacity()
            + self.windows.as_ref().map_or(0, Windows::memory_size)
    }

    fn state_rows(&self) -> Vec<usize> {
        vec![self.rows.len()]
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use datafusion::arrow::array::{Array, AsArray, Int32Array};
    use datafusion::arrow::datatypes::{Int32Type, Int64Type};
    use datafusion::physical_expr::expressions::col;
    use datafusion::physical_expr::PhysicalSortExpr;

    use super::*;
    use crate::group_top_n::GroupTopN;
    use crate::testing::{int_bound, kv, kv_schema, net};

    /// Row (k, v) of the durable table, with its copies.
    type Durable = BTreeMap<(Option<i32>, Option<i32>), i64>;

    /// The first `fetch` rows of each `k`, by `v` (descending with
    /// `descending`), numbered.
    fn spec(fetch: usize, descending: bool) -> (GroupTopNSpec, SchemaRef) {
        let input = kv_schema();
        let spec = GroupTopNSpec {
            partition: vec![col("k", &input).unwrap()],
            order: vec![PhysicalSortExpr::new(
                col("v", &input).unwrap(),
                SortOptions::new(descending, false),
            )],
            fetch,
        };
        let mut fields: Vec<Field> = input.fields().iter().map(|f| f.as_ref().clone()).collect();
        fields.push(Field::new("rn", DataType::UInt64, false));
        (spec, Arc::new(Schema::new(fields)))
    }

    fn epoch(op: &mut dyn Operator, changes: Changes) -> Vec<(String, i64)> {
        let mut out = op.process(0, changes).unwrap();
        out.extend(op.flush().unwrap());
        net(&out)
    }

    /// Applies `op`'s checkpoint delta to `durable`.
    fn checkpoint(op: &mut dyn Operator, durable: &mut Durable) {
        let Some(delta) = op.checkpoint().unwrap().remove(0) else {
            return;
        };
        let key = |batch: &RecordBatch, i: usize| {
            let column = |c: usize| {
                let array = batch.column(c).as_primitive::<Int32Type>();
                array.is_valid(i).then(|| array.value(i))
            };
            (column(0), column(1))
        };
        if let Some(deletes) = delta.deletes {
            for i in 0..deletes.num_rows() {
                durable.remove(&key(&deletes, i));
            }
        }
        if let Some(upserts) = delta.upserts {
            let copies = upserts.column(2).as_primitive::<Int64Type>();
            for i in 0..upserts.num_rows() {
                durable.insert(key(&upserts, i), copies.value(i));
            }
        }
    }

    fn durable_batch(op: &dyn Operator, durable: &Durable) -> RecordBatch {
        let schema = op.state_specs()[0].schema.clone();
        let ks: Int32Array = durable.keys().map(|k| k.0).collect();
        let vs: Int32Array = durable.keys().map(|k| k.1).collect();
        let copies: Int64Array = durable.values().copied().collect();
        RecordBatch::try_new(schema, vec![Arc::new(ks), Arc::new(vs), Arc::new(copies)]).unwrap()
    }

    /// Random inserts, NULLs and duplicate rows included.
    fn random_epoch(seed: &mut u64) -> Vec<(Option<i32>, Option<i32>, i64)> {
        let mut next = |n: u64| {
            *seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (*seed >> 33) % n
        };
        (0..next(40))
            .map(|_| {
                let k = (next(6) != 0).then(|| next(5) as i32);
                let v = (next(8) != 0).then(|| next(20) as i32);
                (k, v, 1 + next(2) as i64)
            })
            .collect()
    }

    #[test]
    fn matches_the_general_top_n_and_reads_its_state() {
        let mut seed = 7;
        let mut epochs_with_output = 0;
        for fetch in [1, 2, 3] {
            for descending in [false, true] {
                let (spec, schema) = spec(fetch, descending);
                let mut general = GroupTopN::new(&spec, kv_schema(), schema.clone(), true).unwrap();
                let mut flat = AppendOnlyTopN::new(&spec, kv_schema(), schema.clone()).unwrap();
                let (mut general_state, mut flat_state) = (Durable::new(), Durable::new());
                for round in 0..30 {
                    let rows = random_epoch(&mut seed);
                    let expected = epoch(&mut general, kv(&rows));
                    assert_eq!(epoch(&mut flat, kv(&rows)), expected, "round {round}");
                    epochs_with_output += usize::from(!expected.is_empty());
                    checkpoint(&mut general, &mut general_state);
                    checkpoint(&mut flat, &mut flat_state);
                    assert_eq!(flat_state, general_state, "round {round}");
                    assert_eq!(flat.state_rows(), vec![flat_state.len()]);
                    if round % 10 == 9 {
                        // A restart reads the state the general operator wrote.
                        flat = AppendOnlyTopN::new(&spec, kv_schema(), schema.clone()).unwrap();
                        flat.restore(&[durable_batch(&flat, &general_state)])
                            .unwrap();
                        checkpoint(&mut flat, &mut flat_state);
                        assert_eq!(flat_state, general_state);
                    }
                }
            }
        }
        assert!(
            epochs_with_output > 40,
            "{epochs_with_output} epochs changed a top-N"
        );
    }

    #[test]
    fn rows_pushed_out_in_their_own_epoch_are_forgotten_at_once() {
        let (spec, schema) = spec(1, true);
        let mut op = AppendOnlyTopN::new(&spec, kv_schema(), schema).unwrap();
        let mut durable = Durable::new();
        let rising: Vec<_> = (0..1000).map(|v| (Some(1), Some(v), 1)).collect();
        op.process(0, kv(&rising)).unwrap();
        assert_eq!(op.state_rows(), vec![1], "only the greatest is held");
        op.flush().unwrap();
        checkpoint(&mut op, &mut durable);
        assert_eq!(
            durable.into_iter().collect::<Vec<_>>(),
            vec![((Some(1), Some(999)), 1)]
        );
        // The held row, pushed out in a later epoch, stays until the
        // checkpoint deletes it.
        op.process(0, kv(&[(Some(1), Some(1000), 1), (Some(1), Some(1001), 1)]))
            .unwrap();
        assert_eq!(op.state_rows(), vec![2]);
    }

    #[test]
    fn a_closed_window_is_forgotten_and_its_late_rows_dropped() {
        // The greatest `v` per window `k`, whose bound is watermark node 7.
        let (spec, schema) = spec(1, true);
        let windowed = || {
            AppendOnlyTopN::new(&spec, kv_schema(), schema.clone())
                .unwrap()
                .with_window(Some((0, int_bound(7))))
        };
        let mut op = windowed();
        let mut durable = Durable::new();
        let rows: Vec<_> = (1..=3)
            .flat_map(|w| (0..10).map(move |v| (Some(w), Some(v), 1)))
            .chain([(None, Some(5), 1)])
            .collect();
        assert_eq!(epoch(&mut op, kv(&rows)).len(), 4);
        checkpoint(&mut op, &mut durable);
        assert_eq!(durable.len(), 4);

        // Windows 1 and 2 close: their rows leave at the next checkpoint,
        // and nothing leaves the output.
        let out = op.advance(&Watermarks::from([(7, 3)])).unwrap();
        assert!(out.is_empty());
        checkpoint(&mut op, &mut durable);
        assert_eq!(
            durable.keys().copied().collect::<Vec<_>>(),
            vec![(None, Some(5)), (Some(3), Some(9))]
        );
        assert_eq!(op.state_rows(), vec![2]);

        // A row of a closed window is late; an open one's still counts.
        let out = epoch(
            &mut op,
            kv(&[(Some(1), Some(99), 1), (Some(3), Some(50), 1)]),
        );
        assert_eq!(
            out,
            vec![("3,50,1".to_owned(), 1), ("3,9,1".to_owned(), -1)]
        );
        assert_eq!(op.late_rows(), 1);

        // A new window may take a forgotten partition's id; only the
        // windows below the bound go, the NULL window never.
        epoch(&mut op, kv(&[(Some(4), Some(1), 1), (Some(5), Some(1), 1)]));
        checkpoint(&mut op, &mut durable);
        op.advance(&Watermarks::from([(7, 5)])).unwrap();
        checkpoint(&mut op, &mut durable);
        assert_eq!(
            durable.keys().copied().collect::<Vec<_>>(),
            vec![(None, Some(5)), (Some(5), Some(1))]
        );
        // Restored, it still knows which windows to close.
        let mut op = windowed();
        op.restore(&[durable_batch(&op, &durable)]).unwrap();
        op.advance(&Watermarks::from([(7, 6)])).unwrap();
        checkpoint(&mut op, &mut durable);
        assert_eq!(
            durable.keys().copied().collect::<Vec<_>>(),
            vec![(None, Some(5))]
        );
    }

    #[test]
    fn a_deletion_is_refused() {
        let (spec, schema) = spec(1, false);
        let mut op = AppendOnlyTopN::new(&spec, kv_schema(), schema).unwrap();
        epoch(&mut op, kv(&[(Some(1), Some(2), 1)]));
        assert!(op.process(0, kv(&[(Some(1), Some(2), -1)])).is_err());
    }
}
