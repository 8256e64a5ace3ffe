//! Top-N per partition: `ROW_NUMBER() OVER (PARTITION BY p ORDER BY o)`
//! filtered to its first rows (`rn <= n`, `rn = 1` for deduplication),
//! maintained as rows come and go.
//!
//! The input is one [`OrderedRows`] bag keyed by the partition columns
//! followed by the order columns, so each partition's rows are one run of
//! keys in `ORDER BY` order. The first change to a partition in an epoch
//! notes that partition's first `n` rows (their encodings); at the end of
//! the epoch the partitions touched are taken again and the positions
//! whose row changed are emitted, all partitions in one batch: an epoch
//! costs `O(n)` per partition it touched, plus its changes, and never
//! looks at another partition.
//!
//! A top-N per window (a `PARTITION BY` value a watermark bounds) lists
//! its partitions by window (see [`crate::window_close`]) and drops a
//! window's rows once the watermark passes it; its numbered rows stay in
//! the output, and changes to a closed window are late: dropped and
//! counted.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use datafusion::arrow::array::{
    ArrayRef, RecordBatch, RecordBatchOptions, UInt32Array, UInt64Array,
};
use datafusion::arrow::compute::{cast, take, SortOptions};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::row::{RowConverter, Rows, SortField};
use datafusion::physical_expr::PhysicalExprRef;
use weir_state::{DeltaBatches, TableSpec};

use crate::operator::{expect_tables, owned_by_keys};
use crate::ordered_rows::OrderedRows;
use crate::plan::GroupTopNSpec;
use crate::watermark::{ColumnBound, Watermarks};
use crate::window_close::Windows;
use crate::{Changes, Operator, Result};

/// The first rows of each partition of a changing input, numbered.
#[derive(Debug)]
pub struct GroupTopN {
    input: OrderedRows,
    partition: Vec<PhysicalExprRef>,
    /// Encodes partition values as the leading part of `input`'s keys.
    prefixes: RowConverter,
    fetch: usize,
    /// Whether the input only inserts: a row that falls out of its
    /// partition's first rows can then never come back, and is dropped.
    append_only: bool,
    /// Input columns followed by the row number.
    schema: SchemaRef,
    /// The first rows of each partition touched this epoch (encoded, a
    /// row held twice listed twice), as they were before its first change.
    before: HashMap<Box<[u8]>, Vec<Box<[u8]>>>,
    /// The `PARTITION BY` value a watermark bounds, if any: its windows
    /// close.
    windows: Option<Windows<Box<[u8]>>>,
    /// The partitions listed under their window in `windows`, encoded.
    windowed: HashSet<Box<[u8]>>,
}

impl GroupTopN {
    /// The first `spec.fetch` rows of each partition of rows of
    /// `input_schema` (`append_only`: an input that only inserts),
    /// numbered, as rows of `schema`.
    pub fn new(
        spec: &GroupTopNSpec,
        input_schema: SchemaRef,
        schema: SchemaRef,
        append_only: bool,
    ) -> Result<Self> {
        let mut keys: Vec<PhysicalExprRef> = spec.partition.clone();
        let mut options = vec![SortOptions::default(); spec.partition.len()];
        for sort in &spec.order {
            keys.push(sort.expr.clone());
            options.push(sort.options);
        }
        let prefixes = RowConverter::new(
            spec.partition
                .iter()
                .map(|e| Ok(SortField::new(e.data_type(&input_schema)?)))
                .collect::<Result<Vec<_>>>()?,
        )?;
        Ok(GroupTopN {
            input: OrderedRows::new(input_schema, keys, Some(options))?,
            partition: spec.partition.clone(),
            prefixes,
            fetch: spec.fetch,
            append_only,
            schema,
            before: HashMap::new(),
            windows: None,
            windowed: HashSet::new(),
        })
    }

    /// Drops the rows of the partitions of `PARTITION BY` value
    /// `window.0` once its bound `window.1` passes them, and their late
    /// changes.
    pub fn with_window(mut self, window: Option<(usize, ColumnBound)>) -> Self {
        self.windows = window.map(|(column, bound)| Windows::new(column, bound));
        self
    }

    /// The `PARTITION BY` values of `rows`, and their encodings.
    fn partition_values(&self, rows: &RecordBatch) -> Result<(Vec<ArrayRef>, Rows)> {
        let columns = self
            .partition
            .iter()
            .map(|e| e.evaluate(rows)?.into_array(rows.num_rows()))
            .collect::<Result<Vec<ArrayRef>>>()?;
        let encoded = self.prefixes.convert_columns(&columns)?;
        Ok((columns, encoded))
    }

    /// Lists the partitions of rows `rows` of `encoded` (values
    /// `columns`) not yet listed under their window.
    fn register_windows(
        &mut self,
        columns: &[ArrayRef],
        encoded: &Rows,
        rows: Vec<u32>,
    ) -> Result<()> {
        let Some(windows) = self.windows.as_mut() else {
            return Ok(());
        };
        let mut fresh = Vec::new();
        let mut rows = rows;
        rows.retain(|&row| {
            let prefix = encoded.row(row as usize).data();
            let new = !self.windowed.contains(prefix);
            if new {
                self.windowed.insert(prefix.into());
                fresh.push(Box::<[u8]>::from(prefix));
            }
            new
        });
        if !fresh.is_empty() {
            let values = take(&columns[windows.column], &UInt32Array::from(rows), None)?;
            windows.register(fresh, &values)?;
        }
        Ok(())
    }

    /// Notes the first rows of each partition of `rows` not touched yet
    /// this epoch.
    fn note_partitions(&mut self, rows: &RecordBatch) -> Result<()> {
        if self.partition.is_empty() {
            if !self.before.contains_key(&[][..]) {
                let top = self.top(&[]);
                self.before.insert(Box::default(), top);
            }
            return Ok(());
        }
        let (columns, encoded) = self.partition_values(rows)?;
        // Per row, but a row of a partition already noted costs one
        // lookup, without a copy of its encoding.
        let mut first_rows = Vec::new();
        for (row, prefix) in encoded.iter().enumerate() {
            let prefix = prefix.data();
            if !self.before.contains_key(prefix) {
                let top = self.top(prefix);
                self.before.insert(prefix.into(), top);
                first_rows.push(row as u32);
            }
        }
        // A partition noted earlier this epoch is listed already.
        self.register_windows(&columns, &encoded, first_rows)
    }

    /// The first rows of partition `prefix`, encoded, in order, each copy
    /// of a row listed once.
    fn top(&self, prefix: &[u8]) -> Vec<Box<[u8]>> {
        let mut rows = Vec::new();
        for (row, weight) in self.input.ordered_with_prefix(prefix) {
            let copies = (weight.max(0) as usize).min(self.fetch - rows.len());
            rows.extend(std::iter::repeat_n(Box::<[u8]>::from(row), copies));
            if rows.len() == self.fetch {
                break;
            }
        }
        rows
    }

    /// Numbered rows (encoded row, number, weight) as one batch of changes.
    fn decode(&self, rows: &[(&[u8], u64, i64)]) -> Result<Changes> {
        let encoded: Vec<(&[u8], i64)> = rows.iter().map(|&(row, _, w)| (row, w)).collect();
        let decoded = self.input.decode(&encoded)?;
        let numbers: ArrayRef = Arc::new(UInt64Array::from_iter_values(
            rows.iter().map(|&(_, number, _)| number),
        ));
        let number_type = self
            .schema
            .field(self.schema.fields().len() - 1)
            .data_type();
        let mut columns = decoded.rows.columns().to_vec();
        columns.push(cast(&numbers, number_type)?);
        let batch = RecordBatch::try_new_with_options(
            self.schema.clone(),
            columns,
            &RecordBatchOptions::new().with_row_count(Some(rows.len())),
        )?;
        Changes::new(batch, decoded.weights)
    }
}

impl Operator for GroupTopN {
    fn process(&mut self, _port: usize, input: Changes) -> Result<Vec<Changes>> {
        let input = match self.windows.as_mut() {
            Some(windows) => {
                let values = self.partition[windows.column]
                    .evaluate(&input.rows)?
                    .into_array(input.len())?;
                windows.drop_late(input, &values, None)?
            }
            None => input,
        };
        self.note_partitions(&input.rows)?;
        self.input.update(&input)?;
        Ok(Vec::new())
    }

    /// Drops the rows of the windows the watermark passed; their numbered
    /// rows stay in the output.
    fn advance(&mut self, watermarks: &Watermarks) -> Result<Vec<Changes>> {
        let Some(windows) = self.windows.as_mut() else {
            return Ok(Vec::new());
        };
        let (windowed, prefixes) = (&self.windowed, &self.prefixes);
        let closing = windows.closing(
            watermarks,
            |prefix| windowed.contains(prefix),
            |closing| {
                let parser = prefixes.parser();
                Ok(prefixes.convert_rows(closing.iter().map(|p| parser.parse(p)))?)
            },
        )?;
        for prefix in closing {
            self.input.keep_first(&prefix, 0);
            self.windowed.remove(&prefix);
        }
        Ok(Vec::new())
    }

    fn late_rows(&self) -> u64 {
        self.windows.as_ref().map_or(0, |w| w.late)
    }

    fn flush(&mut self) -> Result<Vec<Changes>> {
        let before = std::mem::take(&mut self.before);
        let after: Vec<Vec<Box<[u8]>>> = before.keys().map(|prefix| self.top(prefix)).collect();
        if self.append_only {
            for prefix in before.keys() {
                self.input.keep_first(prefix, self.fetch);
            }
        }
        // Only the positions whose row changed, all partitions in one
        // batch: a deduplication touches many partitions per epoch.
        let mut changed: Vec<(&[u8], u64, i64)> = Vec::new();
        for (old, new) in before.values().zip(&after) {
            for position in 0..old.len().max(new.len()) {
                let (was, is) = (old.get(position), new.get(position));
                if was == is {
                    continue;
                }
                let number = position as u64 + 1;
                if let Some(row) = was {
                    changed.push((row, number, -1));
                }
                if let Some(row) = is {
                    changed.push((row, number, 1));
                }
            }
        }
        if changed.is_empty() {
            return Ok(Vec::new());
        }
        Ok(vec![self.decode(&changed)?])
    }

    fn state_specs(&self) -> Vec<TableSpec> {
        vec![self.input.state_spec()]
    }

    fn checkpoint(&mut self) -> Result<Vec<Option<DeltaBatches>>> {
        Ok(vec![self.input.take_delta()?])
    }

    fn restore(&mut self, tables: &[RecordBatch]) -> Result<()> {
        expect_tables(tables, 1)?;
        if self.windows.is_some() && tables[0].num_rows() > 0 {
            let (columns, encoded) = self.partition_values(&tables[0])?;
            let rows = (0..tables[0].num_rows() as u32).collect();
            self.register_windows(&columns, &encoded, rows)?;
        }
        self.input.restore(&tables[0])
    }

    /// Runs partitioned by the `PARTITION BY` values: an instance takes
    /// the stored rows whose partition values its partitions hold, as the
    /// exchange sends it their changes.
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
        self.input.memory_size()
            + self
                .before
                .iter()
                .map(|(prefix, rows)| prefix.len() + rows.iter().map(|r| r.len()).sum::<usize>())
                .sum::<usize>()
            // Each listed partition's encoding, in the set and in the list.
            + self.windowed.iter().map(|p| 2 * p.len() + 40).sum::<usize>()
            + self.windows.as_ref().map_or(0, Windows::memory_size)
    }

    fn state_rows(&self) -> Vec<usize> {
        vec![self.input.distinct_rows()]
    }
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::array::{Int32Array, Int64Array};
    use datafusion::arrow::compute::SortOptions;
    use datafusion::arrow::datatypes::{DataType, Field, Schema};
    use datafusion::physical_expr::expressions::col;
    use datafusion::physical_expr::PhysicalSortExpr;

    use super::*;
    use crate::testing::{int_bound, kv, kv_schema, net};

    /// The first two `v` (descending) of each `k`, numbered.
    fn top_two(append_only: bool) -> GroupTopN {
        let input = kv_schema();
        let spec = GroupTopNSpec {
            partition: vec![col("k", &input).unwrap()],
            order: vec![PhysicalSortExpr::new(
                col("v", &input).unwrap(),
                SortOptions::new(true, false),
            )],
            fetch: 2,
        };
        let mut fields: Vec<Field> = input.fields().iter().map(|f| f.as_ref().clone()).collect();
        fields.push(Field::new("rn", DataType::UInt64, false));
        GroupTopN::new(&spec, input, Arc::new(Schema::new(fields)), append_only).unwrap()
    }

    fn epoch(op: &mut GroupTopN, changes: Changes) -> Vec<(String, i64)> {
        let mut out = op.process(0, changes).unwrap();
        out.extend(op.flush().unwrap());
        net(&out)
    }

    #[test]
    fn each_partition_keeps_its_first_rows_numbered() {
        let mut op = top_two(false);
        let first = epoch(
            &mut op,
            kv(&[
                (Some(1), Some(10), 1),
                (Some(1), Some(30), 1),
                (Some(1), Some(20), 1),
                (Some(2), Some(5), 2),
            ]),
        );
        let rows = |r: &[(&str, i64)]| -> Vec<(String, i64)> {
            r.iter().map(|(s, w)| (s.to_string(), *w)).collect()
        };
        assert_eq!(
            first,
            rows(&[("1,20,2", 1), ("1,30,1", 1), ("2,5,1", 1), ("2,5,2", 1)])
        );
        // A new first row in partition 1 pushes the others down; partition
        // 2 is not touched.
        assert_eq!(
            epoch(&mut op, kv(&[(Some(1), Some(40), 1)])),
            rows(&[("1,20,2", -1), ("1,30,1", -1), ("1,30,2", 1), ("1,40,1", 1)])
        );
        // An update within a partition's first rows renumbers in place.
        assert_eq!(
            epoch(
                &mut op,
                kv(&[(Some(2), Some(5), -1), (Some(2), Some(50), 1)])
            ),
            rows(&[("2,5,1", -1), ("2,50,1", 1)])
        );
        // Deleting a first row brings the next one up.
        assert_eq!(
            epoch(&mut op, kv(&[(Some(1), Some(40), -1)])),
            rows(&[("1,20,2", 1), ("1,30,1", 1), ("1,30,2", -1), ("1,40,1", -1)])
        );
    }

    #[test]
    fn over_an_input_that_only_inserts_rows_beyond_the_first_are_dropped() {
        let mut op = top_two(true);
        let rows: Vec<(Option<i32>, Option<i32>, i64)> =
            (0..50).map(|v| (Some(v % 3), Some(v), 1)).collect();
        let out = epoch(&mut op, kv(&rows));
        assert_eq!(out.len(), 6, "two rows for each of three partitions");
        assert_eq!(op.state_rows(), vec![6], "only those are kept");
        let more = epoch(
            &mut op,
            kv(&[(Some(0), Some(100), 1), (Some(1), Some(-5), 1)]),
        );
        let rows = |r: &[(&str, i64)]| -> Vec<(String, i64)> {
            r.iter().map(|(s, w)| (s.to_string(), *w)).collect()
        };
        assert_eq!(
            more,
            rows(&[
                ("0,100,1", 1),
                ("0,45,2", -1),
                ("0,48,1", -1),
                ("0,48,2", 1)
            ])
        );
        assert_eq!(op.state_rows(), vec![6]);
    }

    #[test]
    fn a_closed_window_drops_its_rows_and_its_late_changes() {
        // The window is `k`, bounded by watermark node 7; the input updates.
        let windowed = || top_two(false).with_window(Some((0, int_bound(7))));
        let mut op = windowed();
        let rows = [
            (Some(1), Some(10), 1),
            (Some(1), Some(30), 1),
            (Some(1), Some(20), 1),
            (Some(2), Some(5), 1),
            (None, Some(7), 1),
        ];
        assert_eq!(epoch(&mut op, kv(&rows)).len(), 4);
        op.checkpoint().unwrap();
        assert_eq!(op.state_rows(), vec![5]);

        // Window 1 closes: its three rows go (deleted at the checkpoint),
        // nothing leaves the output, and a change to it is late.
        assert!(op.advance(&Watermarks::from([(7, 2)])).unwrap().is_empty());
        assert_eq!(op.state_rows(), vec![2]);
        let delta = op.checkpoint().unwrap().remove(0).expect("a delta");
        assert_eq!(delta.deletes.map_or(0, |d| d.num_rows()), 3);
        assert!(epoch(&mut op, kv(&[(Some(1), Some(30), -1)])).is_empty());
        assert_eq!(op.late_rows(), 1);
        // An open window still changes.
        assert_eq!(
            epoch(&mut op, kv(&[(Some(2), Some(6), 1)])),
            vec![
                ("2,5,1".to_owned(), -1),
                ("2,5,2".to_owned(), 1),
                ("2,6,1".to_owned(), 1)
            ]
        );

        // Restored, it lists its partitions again; the NULL window stays.
        let mut restored = windowed();
        let schema = restored.state_specs()[0].schema.clone();
        let stored = RecordBatch::try_new(
            schema,
            vec![
                Arc::new(Int32Array::from(vec![Some(2), Some(3), None])),
                Arc::new(Int32Array::from(vec![5, 1, 7])),
                Arc::new(Int64Array::from(vec![1, 1, 1])),
            ],
        )
        .unwrap();
        restored.restore(&[stored]).unwrap();
        restored.advance(&Watermarks::from([(7, 3)])).unwrap();
        assert_eq!(restored.state_rows(), vec![2]);
    }
}
