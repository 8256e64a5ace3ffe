//! [`KeyedRows`]: a multiset of rows indexed by a key, in Arrow chunks.
//!
//! Join sides and the recomputing aggregate keep their input this way. The
//! row data stays columnar: the rows of each input batch are appended as an
//! Arrow chunk, and trailing small chunks are concatenated into bigger ones
//! as they pile up. Rows are numbered in arrival order (a row's number is
//! its address); per row the store keeps plain vectors indexed by number:
//!
//! - its weight (multiplicity; 0 once all its copies are removed),
//! - the previous row of the same key (a chain per key, newest first,
//!   from `heads`; the chains are the key index, as in DataFusion's
//!   `JoinHashMap`),
//! - on an input that deletes (`updating`): its durable id (the key of its
//!   row in the checkpointed state table) and a hash of the whole row, so
//!   a deleted row is found in its key's chain by hash and then compared.
//!
//! Keys are numbered by a [`KeyIndex`]. Rows are never moved by an
//! insert; removed rows stay in place with weight 0 until they outnumber
//! the live ones, and then the store is rebuilt from the live rows
//! (amortized: at most once per as many removals as live rows).
//!
//! Memory per row: the row's Arrow data plus 12 bytes (weight, chain), plus
//! 16 on an updating input (id, hash); per key, the key index's share and
//! 8 bytes.
//!
//! Durable form: on an updating input, the rows with `__weir_weight` and
//! `__weir_row` (the id), keyed by the id; [`KeyedRows::take_delta`]
//! yields the rows whose weight changed since the last call: new and
//! changed rows as upserts, rows gone to weight 0 as deletes. On an
//! append-only input a row never changes once added, so the durable form
//! is a log of the rows with their weights ([`TableSpec::log`]): each
//! delta holds the rows added since the last, and merging deltas is
//! concatenating them.

use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayRef, Int64Array, RecordBatch, RecordBatchOptions, UInt32Array, UInt64Array,
};
use datafusion::arrow::compute::{concat_batches, interleave_record_batch};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::arrow::row::RowConverter;
use datafusion::common::hash_utils::{create_hashes, RandomState};
use datafusion::error::DataFusionError;
use datafusion::physical_expr::PhysicalExprRef;
use weir_state::{DeltaBatches, KeyId, KeyIndex, TableSpec};

use crate::changes::{as_weights, WEIGHT_COLUMN};
use crate::{Changes, Result};

/// The durable id column of rows kept by [`KeyedRows`].
pub const ROW_ID_COLUMN: &str = "__weir_row";

/// A row's number in a [`KeyedRows`].
type RowNumber = u32;

/// The end of a key's chain.
const NONE: RowNumber = RowNumber::MAX;

/// Trailing chunks are concatenated once this many rows sit in chunks
/// smaller than it.
const CHUNK_ROWS: usize = 64 * 1024;

/// Rebuilding is not worth it below this many removed rows.
const MIN_DEAD_ROWS: usize = 4096;

/// The whole-row hash (any fixed seed does: it never leaves the process).
const ROW_HASH: RandomState = RandomState::with_seed(0x5eed);

/// Stored rows found for a list of keys.
#[derive(Debug)]
pub struct KeyMatches {
    /// The rows, key after key.
    pub rows: Changes,
    /// How many rows each key contributed.
    pub counts: Vec<usize>,
}

/// A multiset of rows indexed by key (see the module documentation).
#[derive(Debug)]
pub struct KeyedRows {
    schema: SchemaRef,
    key_exprs: Vec<PhysicalExprRef>,
    keys: KeyIndex,
    /// Per key id: its newest row, or `NONE`.
    heads: Vec<RowNumber>,
    /// Per key id: how many of its rows have a positive weight.
    live_per_key: Vec<u32>,
    /// The row data, in row-number order; `starts[i]` is chunk `i`'s first row.
    chunks: Vec<RecordBatch>,
    starts: Vec<usize>,
    weights: Vec<i64>,
    next: Vec<RowNumber>,
    /// Whether rows have durable ids, so that they can leave the state.
    with_ids: bool,
    /// Durable ids (stores `with_ids` only).
    ids: Vec<u64>,
    /// Whole-row hashes, and the encoder that compares rows whose hashes
    /// are equal (updating inputs only).
    hashes: Option<Vec<u64>>,
    rows_encoder: Option<RowConverter>,
    /// Rows numbered below this were in the last delta (or restored).
    committed_rows: usize,
    /// Committed rows whose weight changed since the last delta.
    changed: Vec<RowNumber>,
    changed_flag: Vec<bool>,
    /// The id the next new row gets; ids step by `id_stride`.
    next_id: u64,
    id_stride: u64,
    live_rows: usize,
    state_schema: SchemaRef,
}

impl KeyedRows {
    /// An empty store of rows of `schema`, indexed by `key_exprs`
    /// (evaluated on the rows). `updating`: rows may also be removed.
    pub fn new(schema: SchemaRef, key_exprs: Vec<PhysicalExprRef>, updating: bool) -> Result<Self> {
        let mut store = Self::removable(schema, key_exprs, updating)?;
        if updating {
            store.hashes = Some(Vec::new());
            store.rows_encoder = Some(crate::changes::row_converter(&store.schema)?);
        }
        Ok(store)
    }

    /// An empty store like [`KeyedRows::new`] of an input that never
    /// deletes, whose owner still removes rows ([`KeyedRows::remove_where`])
    /// if `with_ids`: its rows get durable ids, but no hashes to find
    /// deleted rows by.
    pub fn removable(
        schema: SchemaRef,
        key_exprs: Vec<PhysicalExprRef>,
        with_ids: bool,
    ) -> Result<Self> {
        let updating = with_ids;
        let types = key_exprs
            .iter()
            .map(|e| e.data_type(&schema))
            .collect::<Result<Vec<DataType>>>()?;
        let mut fields: Vec<Field> = schema.fields().iter().map(|f| f.as_ref().clone()).collect();
        fields.push(Field::new(WEIGHT_COLUMN, DataType::Int64, false));
        if updating {
            fields.push(Field::new(ROW_ID_COLUMN, DataType::UInt64, false));
        }
        Ok(KeyedRows {
            keys: KeyIndex::new(&types).map_err(external)?,
            schema: schema.clone(),
            key_exprs,
            heads: Vec::new(),
            live_per_key: Vec::new(),
            chunks: Vec::new(),
            starts: Vec::new(),
            weights: Vec::new(),
            next: Vec::new(),
            with_ids,
            ids: Vec::new(),
            hashes: None,
            rows_encoder: None,
            committed_rows: 0,
            changed: Vec::new(),
            changed_flag: Vec::new(),
            next_id: 0,
            id_stride: 1,
            live_rows: 0,
            state_schema: Arc::new(Schema::new(fields)),
        })
    }

    /// The schema of the rows.
    pub fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    /// The durable table's shape: the rows, their weight and their id (the
    /// key); or, on an append-only input, a log of the rows and weights.
    pub fn state_spec(&self) -> TableSpec {
        if !self.updating() {
            return TableSpec::log(self.state_schema.clone());
        }
        let id = self.state_schema.fields().len() - 1;
        TableSpec::with_primary_key(self.state_schema.clone(), vec![id])
    }

    /// The key expressions, over the stored rows.
    pub fn key_exprs(&self) -> &[PhysicalExprRef] {
        &self.key_exprs
    }

    /// Whether rows may be removed (they have durable ids).
    pub(crate) fn updating(&self) -> bool {
        self.with_ids
    }

    /// Rows with a positive weight.
    pub fn live_rows(&self) -> usize {
        self.live_rows
    }

    /// Whether no row has a positive weight.
    pub fn is_empty(&self) -> bool {
        self.live_rows == 0
    }

    /// Bytes held: row data, per-row vectors and the key index.
    pub fn memory_size(&self) -> usize {
        let data: usize = self.chunks.iter().map(|c| c.get_array_memory_size()).sum();
        data + self.keys.memory_size()
            + self.heads.capacity() * 4
            + self.live_per_key.capacity() * 4
            + self.weights.capacity() * 8
            + self.next.capacity() * 4
            + self.ids.capacity() * 8
            + self.hashes.as_ref().map_or(0, |h| h.capacity() * 8)
            + self.changed.capacity() * 4
            + self.changed_flag.capacity()
    }

    /// The key columns of `rows`.
    pub fn key_columns(&self, rows: &RecordBatch) -> Result<Vec<ArrayRef>> {
        self.key_exprs
            .iter()
            .map(|e| e.evaluate(rows)?.into_array(rows.num_rows()))
            .collect()
    }

    /// The ids of the keys of `columns` (rows of a batch of `rows` rows),
    /// `None` where no row has that key.
    pub fn find_keys(&self, columns: &[ArrayRef], rows: usize) -> Result<Vec<Option<KeyId>>> {
        self.keys.find_all(columns, rows).map_err(external)
    }

    /// Whether a live row has key `key`.
    pub fn has_key(&self, key: KeyId) -> bool {
        self.live_per_key
            .get(key as usize)
            .is_some_and(|&live| live > 0)
    }

    /// Adds `changes`: rows with positive weight are appended, rows with
    /// negative weight are taken from equal stored rows (an error if there
    /// are none: a consistent input never removes what it did not add).
    /// Returns the id of each change row's key.
    pub fn update(&mut self, changes: &Changes) -> Result<Vec<KeyId>> {
        let columns = self.key_columns(&changes.rows)?;
        let probe = self
            .keys
            .prepare(&columns, changes.len())
            .map_err(external)?;
        let mut key_ids = Vec::new();
        self.keys.intern_all(&probe, &mut key_ids);
        if self.heads.len() < self.keys.slots() {
            self.heads.resize(self.keys.slots(), NONE);
            self.live_per_key.resize(self.keys.slots(), 0);
        }
        let weights = changes.weights.values();
        let removals = weights.iter().any(|&w| w < 0);
        if removals && self.hashes.is_none() {
            return Err(DataFusionError::Internal(
                "rows removed from an input planned as append-only".into(),
            ));
        }
        let row_hashes = match &self.hashes {
            Some(_) => Some(row_hashes(&changes.rows)?),
            None => None,
        };
        // Additions first, so a removal in the same batch finds its row.
        let added: Vec<u32> = (0..changes.len() as u32)
            .filter(|&i| weights[i as usize] > 0)
            .collect();
        if !added.is_empty() {
            let rows = if added.len() == changes.len() {
                changes.rows.clone()
            } else {
                take_rows(&changes.rows, &UInt32Array::from(added.clone()))?
            };
            self.append(
                rows,
                added.iter().map(|&i| {
                    let i = i as usize;
                    (
                        key_ids[i],
                        weights[i],
                        row_hashes.as_ref().map_or(0, |h| h[i]),
                    )
                }),
            )?;
        }
        if removals {
            let row_hashes = row_hashes.expect("updating inputs hash rows");
            self.remove(changes, &key_ids, &row_hashes)?;
        }
        Ok(key_ids)
    }

    /// Appends `rows`, given each row's key id, weight and hash.
    fn append(
        &mut self,
        rows: RecordBatch,
        meta: impl Iterator<Item = (KeyId, i64, u64)>,
    ) -> Result<()> {
        let first = self.weights.len();
        if first + rows.num_rows() >= NONE as usize {
            return Err(DataFusionError::ResourcesExhausted(
                "an operator state holds more than 4 billion rows".into(),
            ));
        }
        for (offset, (key, weight, hash)) in meta.enumerate() {
            let number = (first + offset) as RowNumber;
            let key = key as usize;
            self.next.push(self.heads[key]);
            self.heads[key] = number;
            self.live_per_key[key] += 1;
            self.weights.push(weight);
            if let Some(hashes) = &mut self.hashes {
                hashes.push(hash);
            }
            if self.with_ids {
                self.ids.push(self.next_id);
                self.next_id += self.id_stride;
            }
        }
        self.live_rows += rows.num_rows();
        self.starts.push(first);
        self.chunks.push(rows);
        self.coalesce_tail()
    }

    /// Concatenates the trailing small chunks once they hold
    /// [`CHUNK_ROWS`] rows between them (row numbers do not change).
    fn coalesce_tail(&mut self) -> Result<()> {
        let mut tail = self.chunks.len();
        let mut rows = 0;
        while tail > 0 && self.chunks[tail - 1].num_rows() < CHUNK_ROWS {
            tail -= 1;
            rows += self.chunks[tail].num_rows();
        }
        if rows < CHUNK_ROWS || self.chunks.len() - tail < 2 {
            return Ok(());
        }
        let merged = concat_batches(&self.schema, &self.chunks[tail..])?;
        self.chunks.truncate(tail);
        self.starts.truncate(tail + 1);
        self.chunks.push(merged);
        Ok(())
    }

    /// Takes the rows of `changes` with negative weight from equal stored
    /// rows under their keys: candidates are found by hash along each
    /// key's chain, then compared all at once by their row encodings.
    fn remove(&mut self, changes: &Changes, key_ids: &[KeyId], row_hashes: &[u64]) -> Result<()> {
        let hashes = self.hashes.as_ref().expect("updating inputs hash rows");
        let weights = changes.weights.values();
        let mut probes: Vec<u32> = Vec::new();
        let mut candidates: Vec<RowNumber> = Vec::new();
        for (i, &weight) in weights.iter().enumerate() {
            if weight >= 0 {
                continue;
            }
            let mut at = self.heads.get(key_ids[i] as usize).copied().unwrap_or(NONE);
            while at != NONE {
                if self.weights[at as usize] > 0 && hashes[at as usize] == row_hashes[i] {
                    probes.push(i as u32);
                    candidates.push(at);
                }
                at = self.next[at as usize];
            }
        }
        let equal = self.equal_rows(&changes.rows, &probes, &candidates)?;
        let mut owed: Vec<i64> = weights.iter().map(|&w| (-w).max(0)).collect();
        for ((&probe, &row), same) in probes.iter().zip(&candidates).zip(equal) {
            let owed = &mut owed[probe as usize];
            let have = self.weights[row as usize];
            if !same || *owed == 0 || have == 0 {
                continue;
            }
            let taken = (*owed).min(have);
            self.set_weight(row, have - taken, key_ids[probe as usize]);
            *owed -= taken;
        }
        if owed.iter().any(|&o| o > 0) {
            return Err(DataFusionError::Internal(
                "a row was removed more often than it was added".into(),
            ));
        }
        Ok(())
    }

    /// Whether row `probes[j]` of `rows` equals stored row `stored[j]`,
    /// for every `j`.
    fn equal_rows(
        &self,
        rows: &RecordBatch,
        probes: &[u32],
        stored: &[RowNumber],
    ) -> Result<Vec<bool>> {
        if stored.is_empty() {
            return Ok(Vec::new());
        }
        let Some(encoder) = &self.rows_encoder else {
            return Ok(vec![false; stored.len()]);
        };
        if self.schema.fields().is_empty() {
            return Ok(vec![true; stored.len()]);
        }
        let theirs = self.gather(stored)?;
        let ours = take_rows(rows, &UInt32Array::from(probes.to_vec()))?;
        let theirs = encoder.convert_columns(theirs.columns())?;
        let ours = encoder.convert_columns(ours.columns())?;
        Ok((0..stored.len())
            .map(|j| theirs.row(j) == ours.row(j))
            .collect())
    }

    fn set_weight(&mut self, row: RowNumber, weight: i64, key: KeyId) {
        let slot = row as usize;
        let before = self.weights[slot];
        self.weights[slot] = weight;
        if before > 0 && weight == 0 {
            self.live_rows -= 1;
            self.live_per_key[key as usize] -= 1;
        }
        if slot < self.committed_rows {
            if self.changed_flag.len() < self.committed_rows {
                self.changed_flag.resize(self.committed_rows, false);
            }
            if !self.changed_flag[slot] {
                self.changed_flag[slot] = true;
                self.changed.push(row);
            }
        }
    }

    /// Columns `reads` of the stored rows with numbers `rows`, in that
    /// order, in a batch of the rows' schema whose other columns are NULL.
    fn gather_columns(&self, rows: &[RowNumber], reads: &[usize]) -> Result<RecordBatch> {
        if self.chunks.is_empty() || rows.is_empty() {
            return self.gather(rows);
        }
        let projected: Vec<RecordBatch> = self
            .chunks
            .iter()
            .map(|chunk| chunk.project(reads))
            .collect::<std::result::Result<_, _>>()?;
        let indices = self.chunk_indices(rows);
        let chunks: Vec<&RecordBatch> = projected.iter().collect();
        let gathered = if reads.is_empty() {
            Vec::new()
        } else {
            interleave_record_batch(&chunks, &indices)?
                .columns()
                .to_vec()
        };
        let mut columns: Vec<ArrayRef> = self
            .schema
            .fields()
            .iter()
            .map(|f| datafusion::arrow::array::new_null_array(f.data_type(), rows.len()))
            .collect();
        for (column, &read) in gathered.into_iter().zip(reads) {
            columns[read] = column;
        }
        // Columns not read are NULL, whatever their field says.
        let nullable = Schema::new(
            self.schema
                .fields()
                .iter()
                .map(|f| f.as_ref().clone().with_nullable(true))
                .collect::<Vec<_>>(),
        );
        Ok(RecordBatch::try_new_with_options(
            Arc::new(nullable),
            columns,
            &RecordBatchOptions::new().with_row_count(Some(rows.len())),
        )?)
    }

    /// Each row number's chunk and place in it.
    fn chunk_indices(&self, rows: &[RowNumber]) -> Vec<(usize, usize)> {
        rows.iter()
            .map(|&row| {
                let row = row as usize;
                let chunk = self.starts.partition_point(|&s| s <= row) - 1;
                (chunk, row - self.starts[chunk])
            })
            .collect()
    }

    /// The stored rows with numbers `rows`, in that order.
    fn gather(&self, rows: &[RowNumber]) -> Result<RecordBatch> {
        if rows.is_empty() || self.chunks.is_empty() {
            return Ok(RecordBatch::new_empty(self.schema.clone()));
        }
        if self.schema.fields().is_empty() {
            return Ok(RecordBatch::try_new_with_options(
                self.schema.clone(),
                Vec::new(),
                &RecordBatchOptions::new().with_row_count(Some(rows.len())),
            )?);
        }
        let indices = self.chunk_indices(rows);
        let chunks: Vec<&RecordBatch> = self.chunks.iter().collect();
        Ok(interleave_record_batch(&chunks, &indices)?)
    }

    /// Every live row of the keys `keys` (each key once), with its weight.
    pub fn rows_with_keys(&self, keys: impl IntoIterator<Item = KeyId>) -> Result<Changes> {
        let mut found = Vec::new();
        for key in keys {
            let mut at = self.heads.get(key as usize).copied().unwrap_or(NONE);
            while at != NONE {
                if self.weights[at as usize] > 0 {
                    found.push(at);
                }
                at = self.next[at as usize];
            }
        }
        self.changes_at(&found)
    }

    /// Removes the live rows of `keys` that `keep` (given them as a batch
    /// of their columns `reads`, the others NULL, and each one's key) does
    /// not keep, walking each key's chain once (rows a watermark made
    /// useless); returns the keys that kept rows.
    /// Only on a store that keeps rows by id (`updating`), whose durable
    /// rows can be deleted.
    pub fn remove_where(
        &mut self,
        keys: &[KeyId],
        reads: &[usize],
        keep: impl FnOnce(&RecordBatch, &[KeyId]) -> Result<datafusion::arrow::array::BooleanArray>,
    ) -> Result<Vec<KeyId>> {
        if !self.updating() {
            return Err(DataFusionError::Internal(
                "rows removed from a store of an append-only input".into(),
            ));
        }
        let (mut rows, mut owners) = (Vec::new(), Vec::new());
        for &key in keys {
            let mut at = self.heads.get(key as usize).copied().unwrap_or(NONE);
            while at != NONE {
                if self.weights[at as usize] > 0 {
                    rows.push(at);
                    owners.push(key);
                }
                at = self.next[at as usize];
            }
        }
        if rows.is_empty() {
            return Ok(Vec::new());
        }
        let kept = keep(&self.gather_columns(&rows, reads)?, &owners)?;
        let mut kept_keys = Vec::new();
        for ((&row, &key), kept) in rows.iter().zip(&owners).zip(kept.values().iter()) {
            if kept {
                kept_keys.push(key);
            } else {
                self.set_weight(row, 0, key);
            }
        }
        kept_keys.dedup();
        Ok(kept_keys)
    }

    /// The live rows of each of `keys` in turn (a key may come more than
    /// once), and how many rows each contributed.
    pub fn rows_with_keys_each(&self, keys: &[KeyId]) -> Result<KeyMatches> {
        let mut found = Vec::new();
        let mut counts = Vec::with_capacity(keys.len());
        for &key in keys {
            let before = found.len();
            let mut at = self.heads.get(key as usize).copied().unwrap_or(NONE);
            while at != NONE {
                if self.weights[at as usize] > 0 {
                    found.push(at);
                }
                at = self.next[at as usize];
            }
            counts.push(found.len() - before);
        }
        Ok(KeyMatches {
            rows: self.changes_at(&found)?,
            counts,
        })
    }

    /// Every live row whose key is not among `keys`, and those rows' keys.
    pub fn rows_without_keys(&self, keys: &[KeyId]) -> Result<(Changes, Vec<KeyId>)> {
        let mut excluded = vec![false; self.heads.len()];
        for &key in keys {
            if let Some(slot) = excluded.get_mut(key as usize) {
                *slot = true;
            }
        }
        let others: Vec<KeyId> = self
            .keys()
            .into_iter()
            .filter(|&k| !excluded[k as usize])
            .collect();
        Ok((self.rows_with_keys(others.iter().copied())?, others))
    }

    /// Every key with a live row, in id order.
    pub fn keys(&self) -> Vec<KeyId> {
        (0..self.heads.len() as KeyId)
            .filter(|&k| self.has_key(k))
            .collect()
    }

    /// The live rows `rows` as changes with their weights.
    fn changes_at(&self, rows: &[RowNumber]) -> Result<Changes> {
        let batch = self.gather(rows)?;
        let weights = Int64Array::from_iter_values(rows.iter().map(|&r| self.weights[r as usize]));
        Changes::new(batch, weights)
    }

    /// The rows whose weight changed since the last call: present ones as
    /// upserts, vanished ones as deletes (by id). Rebuilds the store when
    /// removed rows outnumber live ones.
    pub fn take_delta(&mut self) -> Result<Option<DeltaBatches>> {
        let new: Vec<RowNumber> = (self.committed_rows..self.weights.len())
            .filter(|&r| self.weights[r] > 0)
            .map(|r| r as RowNumber)
            .collect();
        let mut present = Vec::new();
        let mut absent = Vec::new();
        for &row in &self.changed {
            self.changed_flag[row as usize] = false;
            if self.weights[row as usize] > 0 {
                present.push(row);
            } else {
                absent.push(self.ids[row as usize]);
            }
        }
        self.changed.clear();
        present.extend(new);
        self.committed_rows = self.weights.len();
        let upserts = if present.is_empty() {
            None
        } else {
            Some(self.durable_rows(&present)?)
        };
        // An append-only store never changes a row, so it never deletes one.
        let deletes = if absent.is_empty() {
            None
        } else {
            let key = Arc::new(Schema::new(vec![Field::new(
                ROW_ID_COLUMN,
                DataType::UInt64,
                false,
            )]));
            Some(RecordBatch::try_new(
                key,
                vec![Arc::new(UInt64Array::from(absent)) as ArrayRef],
            )?)
        };
        self.rebuild_if_sparse()?;
        Ok((upserts.is_some() || deletes.is_some()).then_some(DeltaBatches { upserts, deletes }))
    }

    /// Rows `rows` in the durable form.
    fn durable_rows(&self, rows: &[RowNumber]) -> Result<RecordBatch> {
        let batch = self.gather(rows)?;
        let mut columns = batch.columns().to_vec();
        columns.push(Arc::new(Int64Array::from_iter_values(
            rows.iter().map(|&r| self.weights[r as usize]),
        )));
        if self.updating() {
            columns.push(Arc::new(UInt64Array::from_iter_values(
                rows.iter().map(|&r| self.ids[r as usize]),
            )));
        }
        Ok(RecordBatch::try_new_with_options(
            self.state_schema.clone(),
            columns,
            &RecordBatchOptions::new().with_row_count(Some(rows.len())),
        )?)
    }

    /// Rebuilds the store from its live rows once removed rows outnumber
    /// them. Runs right after a delta, when every row is committed. (An
    /// append-only store has no removed rows.) Keys without live rows
    /// leave the key index (their ids may be handed out again, as after
    /// any removal); the others keep their ids, which owners hold across
    /// deltas (a window join's and a temporal filter's keys by time).
    fn rebuild_if_sparse(&mut self) -> Result<()> {
        let dead = self.weights.len() - self.live_rows;
        if dead < MIN_DEAD_ROWS || dead < self.live_rows {
            return Ok(());
        }
        let live: Vec<RowNumber> = (0..self.weights.len() as RowNumber)
            .filter(|&r| self.weights[r as usize] > 0)
            .collect();
        let durable = self.durable_rows(&live)?;
        for (key, (&head, &rows)) in self.heads.iter().zip(&self.live_per_key).enumerate() {
            // A key holds an id from its first row on.
            if head != NONE && rows == 0 {
                self.keys.remove(key as KeyId);
            }
        }
        self.clear_rows();
        self.restore(&durable)
    }

    /// Forgets every row, keeping the keys.
    fn clear_rows(&mut self) {
        self.heads.clear();
        self.live_per_key.clear();
        self.chunks.clear();
        self.starts.clear();
        self.weights.clear();
        self.next.clear();
        self.ids.clear();
        if let Some(hashes) = &mut self.hashes {
            hashes.clear();
        }
        self.changed.clear();
        self.changed_flag.clear();
        self.committed_rows = 0;
        self.live_rows = 0;
    }

    /// Makes this store instance `instance` of `instances` that share one
    /// durable table (an operator partitioned by key): its new rows get
    /// the ids from `floor` on that are congruent to `instance`, so no two
    /// instances give out the same id. `floor` must be above every id in
    /// the durable table (every instance's, not only its own rows'); call
    /// it after [`KeyedRows::restore`].
    pub fn share_ids(&mut self, instance: usize, instances: usize, floor: u64) {
        let stride = instances.max(1) as u64;
        let base = self.next_id.max(floor).next_multiple_of(stride);
        self.next_id = base + instance as u64 % stride;
        self.id_stride = stride;
    }

    /// The key columns of rows in the durable form: what places them in a
    /// virtual partition.
    pub fn stored_keys(&self, state: &RecordBatch) -> Result<Vec<ArrayRef>> {
        self.key_columns(&self.stored_rows(state)?)
    }

    /// Rows in the durable form as rows of the store's schema.
    pub fn stored_rows(&self, state: &RecordBatch) -> Result<RecordBatch> {
        let width = self.schema.fields().len();
        Ok(RecordBatch::try_new_with_options(
            self.schema.clone(),
            state.columns()[..width.min(state.num_columns())].to_vec(),
            &RecordBatchOptions::new().with_row_count(Some(state.num_rows())),
        )?)
    }

    /// Loads this instance's share of a durable table that `placement`'s
    /// instances share: the rows whose keys it owns (`by_key`; otherwise
    /// the operator runs as one instance and every row is in partition 0),
    /// and new ids above every id in the table.
    pub fn restore_share(
        &mut self,
        state: &RecordBatch,
        instance: usize,
        placement: &crate::Placement,
        by_key: bool,
    ) -> Result<()> {
        let keys = if by_key {
            self.stored_keys(state)?
        } else {
            Vec::new()
        };
        self.restore(&placement.owned_rows(instance, state, &keys)?)?;
        let floor = if self.updating() && state.num_rows() > 0 {
            let ids = state.column(state.num_columns() - 1);
            let ids = ids
                .as_any()
                .downcast_ref::<UInt64Array>()
                .ok_or_else(|| DataFusionError::Internal("row ids are not uint64".into()))?;
            datafusion::arrow::compute::max(ids).map_or(0, |max| max + 1)
        } else {
            0
        };
        self.share_ids(instance, placement.workers(), floor);
        Ok(())
    }

    /// Loads rows in the durable form (recovery, or a rebuild); they count
    /// as committed.
    pub fn restore(&mut self, state: &RecordBatch) -> Result<()> {
        let width = self.schema.fields().len();
        if state.num_columns() != self.state_schema.fields().len() {
            return Err(DataFusionError::Internal(format!(
                "operator state with {} columns for rows of {width}",
                state.num_columns()
            )));
        }
        let rows = RecordBatch::try_new_with_options(
            self.schema.clone(),
            state.columns()[..width].to_vec(),
            &RecordBatchOptions::new().with_row_count(Some(state.num_rows())),
        )?;
        let weights = as_weights(state.column(width))?;
        if rows.num_rows() > 0 {
            let changes = Changes::new(rows, weights)?;
            let first = self.weights.len();
            self.update(&changes)?;
            if self.updating() {
                let ids = state
                    .column(width + 1)
                    .as_any()
                    .downcast_ref::<UInt64Array>()
                    .cloned()
                    .ok_or_else(|| DataFusionError::Internal("row ids are not uint64".into()))?;
                for (offset, &id) in ids.values().iter().enumerate() {
                    self.ids[first + offset] = id;
                    self.next_id = self.next_id.max(id + 1);
                }
            }
        }
        self.committed_rows = self.weights.len();
        Ok(())
    }
}

/// A hash of each whole row of `rows`.
fn row_hashes(rows: &RecordBatch) -> Result<Vec<u64>> {
    let mut hashes = vec![0; rows.num_rows()];
    if rows.num_columns() > 0 {
        create_hashes(rows.columns(), &ROW_HASH, &mut hashes)?;
    }
    Ok(hashes)
}

/// The rows of `batch` at `indices`; also for batches without columns.
fn take_rows(batch: &RecordBatch, indices: &UInt32Array) -> Result<RecordBatch> {
    if batch.num_columns() == 0 {
        return Ok(RecordBatch::try_new_with_options(
            batch.schema(),
            Vec::new(),
            &RecordBatchOptions::new().with_row_count(Some(indices.len())),
        )?);
    }
    Ok(datafusion::arrow::compute::take_record_batch(
        batch, indices,
    )?)
}

fn external(e: weir_state::StateError) -> DataFusionError {
    DataFusionError::External(Box::new(e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{kv, kv_schema, net, rows};
    use datafusion::physical_expr::expressions::col;

    fn store(updating: bool) -> KeyedRows {
        let schema = kv_schema();
        KeyedRows::new(schema.clone(), vec![col("k", &schema).unwrap()], updating).unwrap()
    }

    fn keys_of(store: &KeyedRows, k: &[Option<i32>]) -> Vec<KeyId> {
        let batch = kv(&k.iter().map(|&k| (k, None, 1)).collect::<Vec<_>>());
        let columns = store.key_columns(&batch.rows).unwrap();
        store
            .find_keys(&columns, k.len())
            .unwrap()
            .into_iter()
            .flatten()
            .collect()
    }

    #[test]
    fn rows_are_found_by_key_with_their_multiplicity() {
        let mut store = store(true);
        store
            .update(&kv(&[
                (Some(1), Some(10), 2),
                (Some(2), Some(20), 1),
                (None, Some(0), 1),
            ]))
            .unwrap();
        store.update(&kv(&[(Some(1), Some(11), 1)])).unwrap();
        let one = keys_of(&store, &[Some(1)]);
        let found = store.rows_with_keys(one.iter().copied()).unwrap();
        assert_eq!(net(&[found]), rows(&[("1,10", 2), ("1,11", 1)]));
        let null = keys_of(&store, &[None]);
        assert_eq!(
            net(&[store.rows_with_keys(null).unwrap()]),
            rows(&[("NULL,0", 1)]),
            "NULL is a key like any other here; joins decide whether it matches"
        );
        store
            .update(&kv(&[(Some(1), Some(10), -1), (Some(1), Some(11), -1)]))
            .unwrap();
        assert_eq!(
            net(&[store.rows_with_keys(one.iter().copied()).unwrap()]),
            rows(&[("1,10", 1)])
        );
        assert_eq!(store.live_rows(), 3);
        let err = store.update(&kv(&[(Some(2), Some(99), -1)])).unwrap_err();
        assert!(err.to_string().contains("removed more often"), "{err}");
    }

    /// Applies a delta to the durable table, as a commit and recovery do.
    fn replay(durable: &mut weir_state::StateTable, delta: Option<DeltaBatches>) {
        if let Some(delta) = delta {
            durable
                .apply_delta(delta.upserts.as_ref(), delta.deletes.as_ref())
                .unwrap();
        }
    }

    #[test]
    fn instances_sharing_a_table_give_out_disjoint_ids() {
        // Two instances fill one durable table; after a restart three
        // instances share it, each restoring part of it.
        let ids_of = |delta: &DeltaBatches| -> Vec<u64> {
            let upserts = delta.upserts.as_ref().expect("rows");
            let ids = upserts.column(upserts.num_columns() - 1);
            ids.as_any()
                .downcast_ref::<UInt64Array>()
                .unwrap()
                .values()
                .to_vec()
        };
        let mut durable = weir_state::StateTable::new(store(true).state_spec()).unwrap();
        let mut given = Vec::new();
        for instance in 0..2 {
            let mut part = store(true);
            part.share_ids(instance, 2, 0);
            let rows: Vec<_> = (0..100)
                .map(|i| (Some(i), Some(instance as i32), 1))
                .collect();
            part.update(&kv(&rows)).unwrap();
            let delta = part.take_delta().unwrap().expect("a delta");
            given.extend(ids_of(&delta));
            replay(&mut durable, Some(delta));
        }
        let stored = durable.snapshot().stored_rows().unwrap();
        let floor = given.iter().max().unwrap() + 1;
        for instance in 0..3 {
            let mut part = store(true);
            let mine = (0..stored.num_rows())
                .filter(|row| row % 3 == instance)
                .map(|row| row as u32)
                .collect::<Vec<_>>();
            part.restore(&take_rows(&stored, &UInt32Array::from(mine)).unwrap())
                .unwrap();
            part.share_ids(instance, 3, floor);
            let rows: Vec<_> = (0..50).map(|i| (Some(i), Some(9), 1)).collect();
            part.update(&kv(&rows)).unwrap();
            given.extend(ids_of(&part.take_delta().unwrap().expect("a delta")));
        }
        let distinct: std::collections::BTreeSet<u64> = given.iter().copied().collect();
        assert_eq!(given.len(), 350);
        assert_eq!(distinct.len(), 350, "no id given out twice");
    }

    #[test]
    fn deltas_replay_into_the_same_rows_also_across_a_rebuild() {
        let mut store = store(true);
        let mut durable = weir_state::StateTable::new(store.state_spec()).unwrap();
        let inserts: Vec<_> = (0..10_000).map(|i| (Some(i % 7), Some(i), 1)).collect();
        store.update(&kv(&inserts)).unwrap();
        replay(&mut durable, store.take_delta().unwrap());
        assert_eq!(durable.len(), 10_000);
        let deletes: Vec<_> = (0..9_000).map(|i| (Some(i % 7), Some(i), -1)).collect();
        store.update(&kv(&deletes)).unwrap();
        replay(&mut durable, store.take_delta().unwrap());
        assert_eq!(store.weights.len(), 1000, "rebuilt from its live rows");
        store
            .update(&kv(&[(Some(9_997 % 7), Some(9_997), -1)]))
            .unwrap();
        replay(&mut durable, store.take_delta().unwrap());
        assert!(store.take_delta().unwrap().is_none());

        let mut replica = self::store(true);
        replica
            .restore(&durable.snapshot().stored_rows().unwrap())
            .unwrap();
        let all: Vec<Option<i32>> = (0..7).map(Some).collect();
        let a = store.rows_with_keys(keys_of(&store, &all)).unwrap();
        let b = replica.rows_with_keys(keys_of(&replica, &all)).unwrap();
        assert_eq!(a.len(), 999);
        assert_eq!(net(&[a]), net(&[b]));
        // Ids continue after the restored ones: new rows do not overwrite them.
        replica.update(&kv(&[(Some(1), Some(1), 1)])).unwrap();
        let delta = replica.take_delta().unwrap().unwrap();
        replay(&mut durable, Some(delta));
        assert_eq!(durable.len(), 1000);
    }

    #[test]
    fn an_append_only_store_checkpoints_a_log_of_its_rows() {
        let mut store = store(false);
        assert!(store.state_spec().log);
        let mut log = Vec::new();
        for i in 0..3 {
            store
                .update(&kv(&[(Some(i), Some(10 * i), 1), (Some(1), Some(i), 2)]))
                .unwrap();
            let delta = store.take_delta().unwrap().unwrap();
            assert!(delta.deletes.is_none());
            log.push(delta.upserts.unwrap());
        }
        assert!(store.take_delta().unwrap().is_none());
        let all = datafusion::arrow::compute::concat_batches(&log[0].schema(), &log).unwrap();
        assert_eq!(all.num_rows(), 6);
        let mut replica = self::store(false);
        replica.restore(&all).unwrap();
        let keys: Vec<Option<i32>> = (0..3).map(Some).collect();
        let a = store.rows_with_keys(keys_of(&store, &keys)).unwrap();
        let b = replica.rows_with_keys(keys_of(&replica, &keys)).unwrap();
        assert_eq!(net(&[a]), net(&[b]));
    }

    #[test]
    fn an_append_only_store_refuses_removals() {
        let mut store = store(false);
        store.update(&kv(&[(Some(1), Some(1), 1)])).unwrap();
        assert!(store.update(&kv(&[(Some(1), Some(1), -1)])).is_err());
    }

    #[test]
    fn small_batches_are_coalesced_into_big_chunks() {
        let mut store = store(false);
        for i in 0..200 {
            let batch: Vec<_> = (0..1000)
                .map(|j| (Some(j % 10), Some(i * 1000 + j), 1))
                .collect();
            store.update(&kv(&batch)).unwrap();
        }
        assert!(store.chunks.len() < 10, "{} chunks", store.chunks.len());
        let key = keys_of(&store, &[Some(3)]);
        assert_eq!(store.rows_with_keys(key).unwrap().len(), 20_000);
    }
}
