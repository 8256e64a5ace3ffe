//! Keyed state tables: rows in Arrow chunks, a key index, and the set of
//! keys changed since the last epoch.
//!
//! Rows live in immutable Arrow chunks. A delete clears the row's bit in its
//! chunk's live mask (copy-on-write, so snapshots taken earlier never
//! change); an insert appends a chunk. A [`KeyIndex`] numbers the keys;
//! per key id the table keeps the row's position and a few flags. Small and
//! sparse chunks are merged as writes go on, so the chunk count stays small.
//!
//! Memory per row: the row's Arrow data, one live bit, and the key index's
//! share (about 14 bytes for an integer key, the key's encoding plus 26
//! for others), plus 9 bytes of position and flags.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use datafusion::arrow::array::{
    ArrayRef, BooleanArray, Int64Array, RecordBatch, UInt32Array, UInt64Array,
};
use datafusion::arrow::buffer::{BooleanBuffer, MutableBuffer};
use datafusion::arrow::compute::{
    concat_batches, filter_record_batch, interleave_record_batch, take,
};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};

use crate::error::{StateError, StateResult};
use crate::key_index::{KeyId, KeyIndex};

/// Name of the hidden row id column of tables without a primary key.
pub const ROW_ID_COLUMN: &str = "_weir_row_id";

/// Chunks with fewer rows than this are merged once there are many of them.
const SMALL_CHUNK_ROWS: usize = 8192;
/// How many small chunks may pile up before they are merged.
const MAX_SMALL_CHUNKS: usize = 16;

/// The position of a row in a [`StateTable`]: chunk id in the high 32 bits,
/// row within the chunk in the low 32. Valid until the next write.
pub type RowPosition = u64;

fn position(chunk: u32, row: usize) -> RowPosition {
    ((chunk as u64) << 32) | row as u64
}

fn split_position(pos: RowPosition) -> (u32, usize) {
    ((pos >> 32) as u32, (pos & 0xffff_ffff) as usize)
}

/// The shape of a state table: its stored schema and key.
#[derive(Debug, Clone, PartialEq)]
pub struct TableSpec {
    /// Stored columns: the visible columns, then the hidden row id if any.
    pub schema: SchemaRef,
    /// Indices of the key columns in `schema`.
    pub key: Vec<usize>,
    /// Whether the last stored column is a row id the table assigns.
    pub hidden_row_id: bool,
}

impl TableSpec {
    /// A table keyed by the given visible columns.
    pub fn with_primary_key(visible: SchemaRef, key: Vec<usize>) -> Self {
        TableSpec {
            schema: visible,
            key,
            hidden_row_id: false,
        }
    }

    /// A table without a primary key: rows are keyed by a hidden row id.
    pub fn with_row_id(visible: SchemaRef) -> Self {
        let mut fields: Vec<_> = visible.fields().iter().cloned().collect();
        fields.push(Arc::new(Field::new(ROW_ID_COLUMN, DataType::Int64, false)));
        let key = vec![fields.len() - 1];
        TableSpec {
            schema: Arc::new(Schema::new(fields)),
            key,
            hidden_row_id: true,
        }
    }

    /// Number of visible columns.
    pub fn visible_len(&self) -> usize {
        self.schema.fields().len() - usize::from(self.hidden_row_id)
    }

    /// The schema users see: the stored one without the hidden row id.
    pub fn visible_schema(&self) -> SchemaRef {
        if self.hidden_row_id {
            let projection: Vec<usize> = (0..self.visible_len()).collect();
            Arc::new(self.schema.project(&projection).expect("prefix projection"))
        } else {
            self.schema.clone()
        }
    }

    /// The visible columns of a batch of stored rows.
    pub fn visible_columns(&self, stored: &RecordBatch) -> StateResult<RecordBatch> {
        let visible: Vec<usize> = (0..self.visible_len()).collect();
        Ok(stored.project(&visible)?)
    }

    /// The schema of a delete batch: the key columns only.
    pub fn key_schema(&self) -> SchemaRef {
        Arc::new(self.schema.project(&self.key).expect("key columns exist"))
    }
}

/// Why a write was refused: an inserted row's key is already taken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyViolation {
    /// Index of the offending row in the inserted batch.
    pub row: usize,
}

/// What [`StateTable::lookup`] found for one key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyMatch {
    /// The stored row with this key.
    pub existing: Option<RowPosition>,
    /// Whether an earlier key of the same lookup was equal.
    pub repeated: bool,
}

/// One epoch's net change to a table, ready to be encoded.
#[derive(Debug, Clone)]
pub struct DeltaBatches {
    /// Full stored rows whose key is present after the epoch.
    pub upserts: Option<RecordBatch>,
    /// Key columns of rows absent after the epoch.
    pub deletes: Option<RecordBatch>,
}

#[derive(Debug, Clone)]
struct Chunk {
    batch: RecordBatch,
    live: BooleanBuffer,
    live_rows: usize,
    /// Each row's key id: a deleted or moved row needs no key lookup.
    keys: Vec<KeyId>,
}

/// The key's row is present (its position is valid).
const LIVE: u8 = 1;
/// The key is listed in `dirty`.
const DIRTY: u8 = 2;
/// The key existed at the last delta.
const COMMITTED: u8 = 4;

/// A table's rows with a key index; the writer side of a table.
///
/// A key deleted since the last delta that existed at it stays in the index
/// as a tombstone (not `LIVE`), so the next delta can name it; a key added
/// and deleted between two deltas leaves at once.
#[derive(Debug)]
pub struct StateTable {
    spec: TableSpec,
    chunks: BTreeMap<u32, Chunk>,
    next_chunk: u32,
    /// Every live key, and the tombstones of keys deleted since the last
    /// delta.
    keys: KeyIndex,
    /// Per key id: the row's position (while `LIVE`).
    positions: Vec<RowPosition>,
    /// Per key id: `LIVE`, `DIRTY`, `COMMITTED`.
    flags: Vec<u8>,
    /// Keys changed since the last delta (ids whose `DIRTY` flag is set;
    /// an id may appear twice if it was freed and handed out again).
    dirty: Vec<KeyId>,
    live_rows: usize,
    next_row_id: u64,
    /// Whether anything was written since the last delta (even if it
    /// cancelled out: the statement still waits for its epoch).
    written: bool,
    /// Every row written since the last [`StateTable::take_changes`], with
    /// +1 (inserted) or -1 (deleted); kept only while views read the table.
    changes: Option<Vec<(RecordBatch, i64)>>,
}

impl StateTable {
    /// An empty table.
    pub fn new(spec: TableSpec) -> StateResult<Self> {
        let types: Vec<DataType> = spec
            .key
            .iter()
            .map(|&i| spec.schema.field(i).data_type().clone())
            .collect();
        Ok(StateTable {
            keys: KeyIndex::new(&types)?,
            spec,
            chunks: BTreeMap::new(),
            next_chunk: 0,
            positions: Vec::new(),
            flags: Vec::new(),
            dirty: Vec::new(),
            live_rows: 0,
            next_row_id: 0,
            written: false,
            changes: None,
        })
    }

    /// The table's shape.
    pub fn spec(&self) -> &TableSpec {
        &self.spec
    }

    /// Number of live rows.
    pub fn len(&self) -> usize {
        self.live_rows
    }

    /// Whether the table has no rows.
    pub fn is_empty(&self) -> bool {
        self.live_rows == 0
    }

    /// The next hidden row id this table will hand out.
    pub fn next_row_id(&self) -> u64 {
        self.next_row_id
    }

    /// Sets the next hidden row id (recovery).
    pub fn set_next_row_id(&mut self, next: u64) {
        self.next_row_id = next;
    }

    /// Bytes the table holds allocated: its chunks, key index and
    /// per-key bookkeeping (not the rows kept for views).
    pub fn memory_size(&self) -> usize {
        let chunks: usize = self
            .chunks
            .values()
            .map(|c| c.batch.get_array_memory_size() + c.live.inner().capacity())
            .sum();
        chunks
            + self.keys.memory_size()
            + self.positions.capacity() * 8
            + self.flags.capacity()
            + self.dirty.capacity() * 4
    }

    /// Starts or stops keeping the rows each write inserts and deletes
    /// (for the views that read this table).
    pub fn track_changes(&mut self, on: bool) {
        if on != self.changes.is_some() {
            self.changes = on.then(Vec::new);
        }
    }

    /// The rows written since the last call, visible columns only, each
    /// batch with its weight (+1 inserted, -1 deleted), in write order.
    pub fn take_changes(&mut self) -> Vec<(RecordBatch, i64)> {
        self.changes
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default()
    }

    /// Whether any key changed since the last [`StateTable::take_delta`].
    pub fn is_dirty(&self) -> bool {
        self.written || !self.dirty.is_empty()
    }

    /// An immutable view of the current rows.
    pub fn snapshot(&self) -> TableSnapshot {
        let chunks = self
            .chunks
            .iter()
            .filter(|(_, c)| c.live_rows > 0)
            .map(|(&id, c)| SnapshotChunk {
                id,
                batch: c.batch.clone(),
                live: (c.live_rows < c.batch.num_rows()).then(|| c.live.clone()),
            })
            .collect();
        TableSnapshot {
            spec: Arc::new(self.spec.clone()),
            chunks: Arc::new(chunks),
            rows: self.live_rows,
        }
    }

    /// The key columns of `batch` (stored columns, or key columns only
    /// when `key` is `0..n`).
    fn key_columns(batch: &RecordBatch, key: &[usize]) -> Vec<ArrayRef> {
        key.iter().map(|&i| batch.column(i).clone()).collect()
    }

    /// The id of each key of `batch`'s `key` columns that is live.
    fn live_ids(&self, batch: &RecordBatch, key: &[usize]) -> StateResult<Vec<Option<KeyId>>> {
        let probe = self
            .keys
            .prepare(&Self::key_columns(batch, key), batch.num_rows())?;
        Ok((0..probe.len())
            .map(|row| {
                self.keys
                    .find(&probe, row)
                    .filter(|&id| self.flags[id as usize] & LIVE != 0)
            })
            .collect())
    }

    /// For each row of `keys` (a batch holding the key columns in key
    /// order): the position of the stored row with that key, if any, and
    /// whether an earlier row of `keys` has the same key.
    pub fn lookup(&self, keys: &RecordBatch) -> StateResult<Vec<KeyMatch>> {
        let all: Vec<usize> = (0..keys.num_columns()).collect();
        let probe = self
            .keys
            .prepare(&Self::key_columns(keys, &all), keys.num_rows())?;
        let found: Vec<Option<KeyId>> = (0..probe.len())
            .map(|row| {
                self.keys
                    .find(&probe, row)
                    .filter(|&id| self.flags[id as usize] & LIVE != 0)
            })
            .collect();
        let repeated = self.keys.repeated(&probe);
        Ok(found
            .iter()
            .zip(repeated)
            .map(|(id, repeated)| KeyMatch {
                existing: id.map(|id| self.positions[id as usize]),
                repeated,
            })
            .collect())
    }

    /// The visible columns of the rows at `positions`, in that order.
    pub fn rows_at(&self, positions: &[RowPosition]) -> StateResult<RecordBatch> {
        self.spec.visible_columns(&self.gather(positions)?)
    }

    fn gather(&self, positions: &[RowPosition]) -> StateResult<RecordBatch> {
        let ids: Vec<u32> = self.chunks.keys().copied().collect();
        let batches: Vec<&RecordBatch> = self.chunks.values().map(|c| &c.batch).collect();
        let indices: Vec<(usize, usize)> = positions
            .iter()
            .map(|&p| {
                let (chunk, row) = split_position(p);
                let slot = ids.binary_search(&chunk).expect("position of a live chunk");
                (slot, row)
            })
            .collect();
        if batches.is_empty() {
            return Ok(RecordBatch::new_empty(self.spec.schema.clone()));
        }
        Ok(interleave_record_batch(&batches, &indices)?)
    }

    /// Deletes the rows at `deletes`, then inserts `inserts` (visible
    /// columns, in stored types). Nothing changes if an inserted key is
    /// already present (and not deleted by this write) or appears twice.
    pub fn write(
        &mut self,
        deletes: &[RowPosition],
        inserts: Option<&RecordBatch>,
    ) -> StateResult<Result<(), KeyViolation>> {
        let inserts = match inserts {
            Some(batch) if batch.num_rows() > 0 => Some(self.with_row_ids(batch)?),
            _ => None,
        };
        let probe = match &inserts {
            Some(batch) => Some(
                self.keys
                    .prepare(&Self::key_columns(batch, &self.spec.key), batch.num_rows())?,
            ),
            None => None,
        };
        if let Some(probe) = &probe {
            let deleted: HashSet<RowPosition> = deletes.iter().copied().collect();
            let repeated = self.keys.repeated(probe);
            for (row, repeated) in repeated.into_iter().enumerate() {
                let taken = self
                    .keys
                    .find(probe, row)
                    .filter(|&id| self.flags[id as usize] & LIVE != 0)
                    .is_some_and(|id| !deleted.contains(&self.positions[id as usize]));
                if taken || repeated {
                    return Ok(Err(KeyViolation { row }));
                }
            }
        }
        self.written |= !deletes.is_empty() || inserts.is_some();
        if !deletes.is_empty() {
            let gone = match self.changes {
                Some(_) => Some(self.spec.visible_columns(&self.gather(deletes)?)?),
                None => None,
            };
            if let (Some(changes), Some(gone)) = (&mut self.changes, gone) {
                changes.push((gone, -1));
            }
            for &position in deletes {
                let id = self.key_at(position);
                self.unset_live(id, true);
            }
            self.clear_live(deletes);
        }
        if let (Some(batch), Some(probe)) = (inserts, probe) {
            if self.spec.hidden_row_id {
                self.next_row_id += batch.num_rows() as u64;
            }
            if let Some(changes) = &mut self.changes {
                changes.push((self.spec.visible_columns(&batch)?, 1));
            }
            let mut ids = Vec::new();
            self.keys.intern_all(&probe, &mut ids);
            let chunk = self.push_chunk(batch, ids.clone());
            for (row, id) in ids.into_iter().enumerate() {
                self.set_live(id, position(chunk, row), true);
            }
        }
        self.merge_chunks()?;
        Ok(Ok(()))
    }

    /// The key id of the row at `position`.
    fn key_at(&self, position: RowPosition) -> KeyId {
        let (chunk, row) = split_position(position);
        self.chunks[&chunk].keys[row]
    }

    /// Adds `deltas[i]` copies of each row of `rows` to a table whose last
    /// column counts its rows (a view's output without a key): a row's
    /// count changes, and the row disappears at 0. `rows` holds the other
    /// columns; equal rows may repeat. Encodes each key once.
    pub fn add_counts(&mut self, rows: &RecordBatch, deltas: &[i64]) -> StateResult<()> {
        let n = rows.num_rows();
        if n == 0 {
            return Ok(());
        }
        let probe = self.keys.prepare(rows.columns(), n)?;
        let mut ids = Vec::new();
        self.keys.intern_all(&probe, &mut ids);
        self.grow();
        // Each distinct key once: its first row here and its total delta.
        let mut order: Vec<KeyId> = Vec::new();
        let mut totals: std::collections::HashMap<KeyId, (usize, i64)> =
            std::collections::HashMap::with_capacity(n);
        for (row, (&id, &delta)) in ids.iter().zip(deltas).enumerate() {
            totals
                .entry(id)
                .and_modify(|t| t.1 += delta)
                .or_insert_with(|| {
                    order.push(id);
                    (row, delta)
                });
        }
        let live = |flags: &[u8], id: KeyId| flags[id as usize] & LIVE != 0;
        let old_positions: Vec<RowPosition> = order
            .iter()
            .filter(|&&id| live(&self.flags, id))
            .map(|&id| self.positions[id as usize])
            .collect();
        let count_column = self.spec.schema.fields().len() - 1;
        let mut old_counts = self
            .gather_column(&old_positions, count_column)?
            .into_iter();
        let (mut kept_rows, mut kept_ids, mut counts) = (Vec::new(), Vec::new(), Vec::new());
        self.written = true;
        for &id in &order {
            let (row, delta) = totals[&id];
            let was_live = live(&self.flags, id);
            let old = if was_live {
                old_counts.next().unwrap_or(0)
            } else {
                0
            };
            let count = old + delta;
            if count < 0 {
                return Err(StateError::Internal(
                    "a view row would be removed more often than it was added".into(),
                ));
            }
            match (was_live, count > 0) {
                // The count changes: the row moves to the new chunk below.
                (true, true) => self.mark_dirty(id),
                (true, false) => self.unset_live(id, true),
                (false, true) => {}
                // Added and taken away within the call: a fresh key leaves
                // again (a tombstone stays as it was).
                (false, false) => {
                    if self.flags[id as usize] == 0 {
                        self.keys.remove(id);
                    }
                }
            }
            if count > 0 {
                kept_rows.push(row as u32);
                kept_ids.push(id);
                counts.push(count);
            }
        }
        self.clear_live(&old_positions);
        if !kept_rows.is_empty() {
            let indices = UInt32Array::from(kept_rows);
            let mut columns: Vec<ArrayRef> = rows
                .columns()
                .iter()
                .map(|c| take(c.as_ref(), &indices, None))
                .collect::<Result<_, _>>()?;
            columns.push(Arc::new(Int64Array::from(counts)));
            let batch = RecordBatch::try_new(self.spec.schema.clone(), columns)?;
            let chunk = self.push_chunk(batch, kept_ids.clone());
            for (row, id) in kept_ids.into_iter().enumerate() {
                if live(&self.flags, id) {
                    self.positions[id as usize] = position(chunk, row);
                } else {
                    self.set_live(id, position(chunk, row), true);
                }
            }
        }
        self.merge_chunks()
    }

    /// Applies changes of a table keyed by some of its columns (a view's
    /// output with a key): rows with weight -1 are deleted by key, then
    /// rows with weight +1 inserted. Fails if a deleted key is absent or an
    /// inserted one present. Encodes each key once.
    pub fn apply_keyed(&mut self, rows: &RecordBatch, weights: &[i64]) -> StateResult<()> {
        let n = rows.num_rows();
        if n == 0 {
            return Ok(());
        }
        let probe = self
            .keys
            .prepare(&Self::key_columns(rows, &self.spec.key), n)?;
        let mut gone = Vec::new();
        for (row, &weight) in weights.iter().enumerate() {
            if weight < 0 {
                let id = self
                    .keys
                    .find(&probe, row)
                    .filter(|&id| self.flags[id as usize] & LIVE != 0)
                    .ok_or_else(|| {
                        StateError::Internal("a deleted key is not in the table".into())
                    })?;
                gone.push(self.positions[id as usize]);
                self.unset_live(id, true);
            }
        }
        self.written = true;
        self.clear_live(&gone);
        let added: Vec<u32> = (0..n as u32).filter(|&i| weights[i as usize] > 0).collect();
        if !added.is_empty() {
            let mut ids = Vec::with_capacity(added.len());
            for &row in &added {
                let (id, _) = self.keys.intern(&probe, row as usize);
                self.grow();
                if self.flags[id as usize] & LIVE != 0 {
                    return Err(StateError::Internal(
                        "an inserted key is already in the table".into(),
                    ));
                }
                ids.push(id);
            }
            let batch = if added.len() == n {
                rows.clone()
            } else {
                datafusion::arrow::compute::take_record_batch(rows, &UInt32Array::from(added))?
            };
            let chunk = self.push_chunk(batch, ids.clone());
            for (row, id) in ids.into_iter().enumerate() {
                self.set_live(id, position(chunk, row), true);
            }
        }
        self.merge_chunks()
    }

    /// One column of the rows at `positions`, as `i64` (counts).
    fn gather_column(&self, positions: &[RowPosition], column: usize) -> StateResult<Vec<i64>> {
        let mut out = Vec::with_capacity(positions.len());
        for &p in positions {
            let (chunk, row) = split_position(p);
            let values = self.chunks[&chunk]
                .batch
                .column(column)
                .as_any()
                .downcast_ref::<Int64Array>()
                .ok_or_else(|| StateError::Internal("the count column is not int64".into()))?;
            out.push(values.value(row));
        }
        Ok(out)
    }

    /// Makes room for every key id in the per-key vectors.
    fn grow(&mut self) {
        let slots = self.keys.slots();
        if self.positions.len() < slots {
            self.positions.resize(slots, 0);
            self.flags.resize(slots, 0);
        }
    }

    /// Records that key `id` now has the row at `position`.
    fn set_live(&mut self, id: KeyId, position: RowPosition, mark_dirty: bool) {
        let slot = id as usize;
        self.grow();
        self.positions[slot] = position;
        self.flags[slot] |= LIVE;
        self.live_rows += 1;
        if mark_dirty {
            self.mark_dirty(id);
        }
    }

    /// Records that key `id`'s row is gone. A key that existed at the last
    /// delta stays as a tombstone (if the change is to be in the next
    /// delta); any other leaves the index.
    fn unset_live(&mut self, id: KeyId, mark_dirty: bool) {
        let slot = id as usize;
        self.flags[slot] &= !LIVE;
        self.live_rows -= 1;
        if mark_dirty && self.flags[slot] & COMMITTED != 0 {
            self.mark_dirty(id);
        } else {
            self.flags[slot] = 0;
            self.keys.remove(id);
        }
    }

    fn mark_dirty(&mut self, id: KeyId) {
        let flags = &mut self.flags[id as usize];
        if *flags & DIRTY == 0 {
            *flags |= DIRTY;
            self.dirty.push(id);
        }
    }

    /// Appends the hidden row id column to a batch of visible columns.
    fn with_row_ids(&self, batch: &RecordBatch) -> StateResult<RecordBatch> {
        if !self.spec.hidden_row_id {
            return Ok(RecordBatch::try_new(
                self.spec.schema.clone(),
                batch.columns().to_vec(),
            )?);
        }
        let start = self.next_row_id as i64;
        let ids = Int64Array::from_iter_values(start..start + batch.num_rows() as i64);
        let mut columns = batch.columns().to_vec();
        columns.push(Arc::new(ids));
        Ok(RecordBatch::try_new(self.spec.schema.clone(), columns)?)
    }

    fn push_chunk(&mut self, batch: RecordBatch, keys: Vec<KeyId>) -> u32 {
        let id = self.next_chunk;
        self.next_chunk += 1;
        let rows = batch.num_rows();
        self.chunks.insert(
            id,
            Chunk {
                batch,
                live: BooleanBuffer::new_set(rows),
                live_rows: rows,
                keys,
            },
        );
        id
    }

    /// Clears the live bits of `positions`, copying each touched mask once.
    fn clear_live(&mut self, positions: &[RowPosition]) {
        let mut by_chunk: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
        for &p in positions {
            let (chunk, row) = split_position(p);
            by_chunk.entry(chunk).or_default().push(row);
        }
        for (id, rows) in by_chunk {
            let chunk = self.chunks.get_mut(&id).expect("position of a live chunk");
            let mut bits = MutableBuffer::from(chunk.live.inner().as_slice().to_vec());
            let offset = chunk.live.offset();
            for row in rows {
                let bit = offset + row;
                if bit_is_set(bits.as_slice(), bit) {
                    chunk.live_rows -= 1;
                    bits.as_slice_mut()[bit / 8] &= !(1u8 << (bit % 8));
                }
            }
            chunk.live = BooleanBuffer::new(bits.into(), offset, chunk.live.len());
            if chunk.live_rows == 0 {
                self.chunks.remove(&id);
            }
        }
    }

    /// Merges small and sparse chunks into one, re-pointing their index
    /// entries. Runs after every write; does nothing most of the time.
    fn merge_chunks(&mut self) -> StateResult<()> {
        let small: Vec<u32> = self
            .chunks
            .iter()
            .filter(|(_, c)| c.batch.num_rows() < SMALL_CHUNK_ROWS)
            .map(|(&id, _)| id)
            .collect();
        let mut victims: Vec<u32> = if small.len() > MAX_SMALL_CHUNKS {
            small
        } else {
            Vec::new()
        };
        victims.extend(
            self.chunks
                .iter()
                .filter(|(_, c)| {
                    c.batch.num_rows() >= SMALL_CHUNK_ROWS && c.live_rows * 2 < c.batch.num_rows()
                })
                .map(|(&id, _)| id),
        );
        if victims.is_empty() {
            return Ok(());
        }
        let mut parts = Vec::with_capacity(victims.len());
        let mut ids = Vec::new();
        for id in &victims {
            let chunk = self.chunks.remove(id).expect("victim exists");
            ids.extend(chunk.live.set_indices().map(|row| chunk.keys[row]));
            parts.push(filter_record_batch(
                &chunk.batch,
                &BooleanArray::new(chunk.live, None),
            )?);
        }
        let merged = concat_batches(&self.spec.schema, &parts)?;
        if merged.num_rows() == 0 {
            return Ok(());
        }
        let chunk = self.push_chunk(merged, ids.clone());
        for (row, id) in ids.into_iter().enumerate() {
            self.positions[id as usize] = position(chunk, row);
        }
        Ok(())
    }

    /// The net change since the last call, or `None` if nothing changed.
    pub fn take_delta(&mut self) -> StateResult<Option<DeltaBatches>> {
        self.written = false;
        let mut present = Vec::new();
        let mut absent = Vec::new();
        for id in std::mem::take(&mut self.dirty) {
            let flags = &mut self.flags[id as usize];
            if *flags & DIRTY == 0 {
                continue;
            }
            *flags &= !DIRTY;
            if *flags & LIVE != 0 {
                *flags |= COMMITTED;
                present.push(self.positions[id as usize]);
            } else {
                absent.push(id);
            }
        }
        if present.is_empty() && absent.is_empty() {
            return Ok(None);
        }
        let upserts = if present.is_empty() {
            None
        } else {
            present.sort_unstable();
            Some(self.gather(&present)?)
        };
        let deletes = if absent.is_empty() {
            None
        } else {
            let columns = self.keys.decode(&absent)?;
            for &id in &absent {
                self.flags[id as usize] = 0;
                self.keys.remove(id);
            }
            Some(RecordBatch::try_new(self.spec.key_schema(), columns)?)
        };
        Ok(Some(DeltaBatches { upserts, deletes }))
    }

    /// Replays a committed delta (recovery): removes `deletes` by key, then
    /// inserts or replaces `upserts` by key. Does not mark keys dirty.
    pub fn apply_delta(
        &mut self,
        upserts: Option<&RecordBatch>,
        deletes: Option<&RecordBatch>,
    ) -> StateResult<()> {
        let mut stale = Vec::new();
        if let Some(deletes) = deletes {
            let all: Vec<usize> = (0..deletes.num_columns()).collect();
            for id in self.live_ids(deletes, &all)?.into_iter().flatten() {
                stale.push(self.positions[id as usize]);
                self.unset_live(id, false);
            }
        }
        if let Some(upserts) = upserts.filter(|u| u.num_rows() > 0) {
            let probe = self.keys.prepare(
                &Self::key_columns(upserts, &self.spec.key),
                upserts.num_rows(),
            )?;
            let chunk = self.next_chunk;
            let mut ids = Vec::with_capacity(probe.len());
            for row in 0..probe.len() {
                let (id, _) = self.keys.intern(&probe, row);
                if self.flags.get(id as usize).is_some_and(|f| f & LIVE != 0) {
                    stale.push(self.positions[id as usize]);
                    self.live_rows -= 1;
                }
                self.set_live(id, position(chunk, row), false);
                self.flags[id as usize] |= COMMITTED;
                ids.push(id);
            }
            self.clear_live(&stale);
            self.push_chunk(upserts.clone(), ids);
        } else {
            self.clear_live(&stale);
        }
        self.merge_chunks()
    }
}

fn bit_is_set(bytes: &[u8], bit: usize) -> bool {
    bytes[bit / 8] & (1u8 << (bit % 8)) != 0
}

#[derive(Debug, Clone)]
struct SnapshotChunk {
    id: u32,
    batch: RecordBatch,
    /// `None` when every row of the chunk is live.
    live: Option<BooleanBuffer>,
}

/// An immutable view of a table at one moment; cheap to clone.
#[derive(Debug, Clone)]
pub struct TableSnapshot {
    spec: Arc<TableSpec>,
    chunks: Arc<Vec<SnapshotChunk>>,
    rows: usize,
}

impl TableSnapshot {
    /// A snapshot holding exactly `rows` (all stored columns of `spec`).
    pub fn from_rows(spec: TableSpec, rows: RecordBatch) -> Self {
        let count = rows.num_rows();
        TableSnapshot {
            spec: Arc::new(spec),
            chunks: Arc::new(vec![SnapshotChunk {
                id: 0,
                batch: rows,
                live: None,
            }]),
            rows: count,
        }
    }

    /// Number of live rows.
    pub fn num_rows(&self) -> usize {
        self.rows
    }

    /// The table's shape.
    pub fn spec(&self) -> &TableSpec {
        &self.spec
    }

    /// The live rows' visible columns, projected by `projection` (indices
    /// into the visible schema). With `with_positions`, a last `UInt64`
    /// column holds each row's [`RowPosition`].
    pub fn scan(
        &self,
        projection: Option<&[usize]>,
        with_positions: bool,
    ) -> StateResult<Vec<RecordBatch>> {
        let visible: Vec<usize> = (0..self.spec.visible_len()).collect();
        let projection = projection.unwrap_or(&visible);
        let mut out = Vec::with_capacity(self.chunks.len());
        for chunk in self.chunks.iter() {
            let projected = chunk.batch.project(projection)?;
            let (mut batch, rows): (RecordBatch, Vec<u64>) = match &chunk.live {
                None => {
                    let rows = if with_positions {
                        (0..chunk.batch.num_rows())
                            .map(|r| position(chunk.id, r))
                            .collect()
                    } else {
                        Vec::new()
                    };
                    (projected, rows)
                }
                Some(live) => {
                    let rows = if with_positions {
                        live.set_indices().map(|r| position(chunk.id, r)).collect()
                    } else {
                        Vec::new()
                    };
                    let mask = BooleanArray::new(live.clone(), None);
                    (filter_record_batch(&projected, &mask)?, rows)
                }
            };
            if with_positions {
                let mut fields: Vec<_> = batch.schema().fields().iter().cloned().collect();
                fields.push(Arc::new(Field::new("position", DataType::UInt64, false)));
                let mut columns = batch.columns().to_vec();
                columns.push(Arc::new(UInt64Array::from(rows)));
                batch = RecordBatch::try_new(Arc::new(Schema::new(fields)), columns)?;
            }
            out.push(batch);
        }
        Ok(out)
    }

    /// Every live row with all stored columns, as one batch (base files).
    pub fn stored_rows(&self) -> StateResult<RecordBatch> {
        let mut parts = Vec::with_capacity(self.chunks.len());
        for chunk in self.chunks.iter() {
            parts.push(match &chunk.live {
                None => chunk.batch.clone(),
                Some(live) => {
                    filter_record_batch(&chunk.batch, &BooleanArray::new(live.clone(), None))?
                }
            });
        }
        Ok(concat_batches(&self.spec.schema, &parts)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{Array, AsArray, StringArray};
    use datafusion::arrow::datatypes::Int32Type;

    fn keyed() -> TableSpec {
        let schema = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int32, false),
            Field::new("v", DataType::Utf8, true),
        ]));
        TableSpec::with_primary_key(schema, vec![0])
    }

    fn rows(spec: &TableSpec, keys: &[i32], value: &str) -> RecordBatch {
        RecordBatch::try_new(
            spec.visible_schema(),
            vec![
                Arc::new(datafusion::arrow::array::Int32Array::from(keys.to_vec())),
                Arc::new(StringArray::from(vec![value; keys.len()])),
            ],
        )
        .unwrap()
    }

    fn keys_of(snapshot: &TableSnapshot) -> Vec<i32> {
        let mut keys: Vec<i32> = snapshot
            .scan(Some(&[0]), false)
            .unwrap()
            .iter()
            .flat_map(|b| b.column(0).as_primitive::<Int32Type>().values().to_vec())
            .collect();
        keys.sort();
        keys
    }

    fn positions_of(table: &StateTable, keys: &[i32]) -> Vec<RowPosition> {
        let batch = rows(table.spec(), keys, "").project(&[0]).unwrap();
        table
            .lookup(&batch)
            .unwrap()
            .iter()
            .filter_map(|m| m.existing)
            .collect()
    }

    #[test]
    fn duplicate_keys_are_refused_without_changing_anything() {
        let spec = keyed();
        let mut table = StateTable::new(spec.clone()).unwrap();
        table
            .write(&[], Some(&rows(&spec, &[1, 2], "a")))
            .unwrap()
            .unwrap();
        let clash = table.write(&[], Some(&rows(&spec, &[3, 2], "b"))).unwrap();
        assert_eq!(clash, Err(KeyViolation { row: 1 }));
        let twice = table.write(&[], Some(&rows(&spec, &[4, 4], "b"))).unwrap();
        assert_eq!(twice, Err(KeyViolation { row: 1 }));
        assert_eq!(keys_of(&table.snapshot()), vec![1, 2]);
        // Replacing a row by deleting it in the same write is allowed.
        let old = positions_of(&table, &[2]);
        table
            .write(&old, Some(&rows(&spec, &[2], "new")))
            .unwrap()
            .unwrap();
        assert_eq!(table.len(), 2);
    }

    #[test]
    fn snapshots_do_not_see_later_writes() {
        let spec = keyed();
        let mut table = StateTable::new(spec.clone()).unwrap();
        table
            .write(&[], Some(&rows(&spec, &[1, 2, 3], "a")))
            .unwrap()
            .unwrap();
        let before = table.snapshot();
        let doomed = positions_of(&table, &[2]);
        table
            .write(&doomed, Some(&rows(&spec, &[9], "z")))
            .unwrap()
            .unwrap();
        assert_eq!(keys_of(&before), vec![1, 2, 3]);
        assert_eq!(keys_of(&table.snapshot()), vec![1, 3, 9]);
    }

    #[test]
    fn deltas_are_net_changes_and_replay_to_the_same_table() {
        let spec = keyed();
        let mut table = StateTable::new(spec.clone()).unwrap();
        let mut replica = StateTable::new(spec.clone()).unwrap();
        table
            .write(&[], Some(&rows(&spec, &[1, 2, 3], "a")))
            .unwrap()
            .unwrap();
        let delta = table.take_delta().unwrap().unwrap();
        assert_eq!(delta.upserts.as_ref().unwrap().num_rows(), 3);
        assert!(delta.deletes.is_none());
        replica.apply_delta(delta.upserts.as_ref(), None).unwrap();
        // Insert and delete within one epoch leaves no trace; updating a
        // key is one upsert.
        table
            .write(&[], Some(&rows(&spec, &[4], "t")))
            .unwrap()
            .unwrap();
        let four = positions_of(&table, &[4]);
        table.write(&four, None).unwrap().unwrap();
        let one = positions_of(&table, &[1, 3]);
        table
            .write(&one, Some(&rows(&spec, &[1], "b")))
            .unwrap()
            .unwrap();
        let delta = table.take_delta().unwrap().unwrap();
        assert_eq!(delta.upserts.as_ref().unwrap().num_rows(), 1);
        let deleted = delta.deletes.as_ref().unwrap();
        let mut deleted_keys = deleted
            .column(0)
            .as_primitive::<Int32Type>()
            .values()
            .to_vec();
        deleted_keys.sort();
        assert_eq!(deleted_keys, vec![3], "key 4 came and went: no change");
        replica
            .apply_delta(delta.upserts.as_ref(), delta.deletes.as_ref())
            .unwrap();
        assert_eq!(keys_of(&replica.snapshot()), keys_of(&table.snapshot()));
        assert!(table.take_delta().unwrap().is_none());
        // A write that cancels out still makes the table dirty (its
        // statement waits for an epoch), but its delta is empty.
        table
            .write(&[], Some(&rows(&spec, &[9], "t")))
            .unwrap()
            .unwrap();
        let nine = positions_of(&table, &[9]);
        table.write(&nine, None).unwrap().unwrap();
        assert!(table.is_dirty());
        assert!(table.take_delta().unwrap().is_none());
        assert!(!table.is_dirty());
    }

    fn counted() -> TableSpec {
        let schema = Arc::new(Schema::new(vec![
            Field::new("v", DataType::Utf8, true),
            Field::new("__weir_count", DataType::Int64, false),
        ]));
        TableSpec::with_primary_key(schema, vec![0])
    }

    fn strings(values: &[Option<&str>]) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![Field::new("v", DataType::Utf8, true)]));
        RecordBatch::try_new(schema, vec![Arc::new(StringArray::from(values.to_vec()))]).unwrap()
    }

    /// Each row of a counted table with its count, sorted.
    fn counts_of(table: &StateTable) -> Vec<(Option<String>, i64)> {
        let mut out = Vec::new();
        for batch in table.snapshot().scan(None, false).unwrap() {
            let v = batch.column(0).as_string::<i32>();
            let n = batch
                .column(1)
                .as_primitive::<datafusion::arrow::datatypes::Int64Type>();
            for i in 0..batch.num_rows() {
                out.push((v.is_valid(i).then(|| v.value(i).to_owned()), n.value(i)));
            }
        }
        out.sort();
        out
    }

    #[test]
    fn counted_rows_sum_their_weights_and_leave_at_zero() {
        let mut table = StateTable::new(counted()).unwrap();
        let mut replica = StateTable::new(counted()).unwrap();
        let mut replay = |table: &mut StateTable| {
            if let Some(d) = table.take_delta().unwrap() {
                replica
                    .apply_delta(d.upserts.as_ref(), d.deletes.as_ref())
                    .unwrap();
            }
            counts_of(&replica)
        };
        table
            .add_counts(
                &strings(&[Some("a"), Some("b"), Some("a"), None]),
                &[1, 1, 2, 1],
            )
            .unwrap();
        let expected = vec![(None, 1), (Some("a".into()), 3), (Some("b".into()), 1)];
        assert_eq!(counts_of(&table), expected);
        assert_eq!(replay(&mut table), expected);
        // b goes away, c comes and goes within one call, a loses one.
        table
            .add_counts(
                &strings(&[Some("b"), Some("c"), Some("a"), Some("c")]),
                &[-1, 1, -1, -1],
            )
            .unwrap();
        let expected = vec![(None, 1), (Some("a".into()), 2)];
        assert_eq!(counts_of(&table), expected);
        assert_eq!(table.len(), 2);
        assert_eq!(replay(&mut table), expected);
        // A deleted row comes back in the next call before any delta.
        table.add_counts(&strings(&[None]), &[-1]).unwrap();
        table.add_counts(&strings(&[None]), &[4]).unwrap();
        assert_eq!(replay(&mut table), vec![(None, 4), (Some("a".into()), 2)]);
        let err = table
            .add_counts(&strings(&[Some("zz")]), &[-1])
            .unwrap_err();
        assert!(err.to_string().contains("removed more often"), "{err}");
    }

    #[test]
    fn keyed_changes_replace_rows_by_key() {
        let spec = keyed();
        let mut table = StateTable::new(spec.clone()).unwrap();
        table
            .apply_keyed(&rows(&spec, &[1, 2], "a"), &[1, 1])
            .unwrap();
        let update = datafusion::arrow::compute::concat_batches(
            &spec.schema,
            &[rows(&spec, &[1], "a"), rows(&spec, &[1], "b")],
        )
        .unwrap();
        table.apply_keyed(&update, &[-1, 1]).unwrap();
        assert_eq!(keys_of(&table.snapshot()), vec![1, 2]);
        let now = table.rows_at(&positions_of(&table, &[1])).unwrap();
        assert_eq!(now.column(1).as_string::<i32>().value(0), "b");
        assert!(table.apply_keyed(&rows(&spec, &[7], "x"), &[-1]).is_err());
        assert!(table.apply_keyed(&rows(&spec, &[2], "x"), &[1]).is_err());
    }

    #[test]
    fn tables_without_a_key_number_their_rows() {
        let schema = Arc::new(Schema::new(vec![Field::new("v", DataType::Utf8, true)]));
        let spec = TableSpec::with_row_id(schema);
        let mut table = StateTable::new(spec.clone()).unwrap();
        let batch = RecordBatch::try_new(
            spec.visible_schema(),
            vec![Arc::new(StringArray::from(vec!["x", "x", "y"]))],
        )
        .unwrap();
        table.write(&[], Some(&batch)).unwrap().unwrap();
        table.write(&[], Some(&batch)).unwrap().unwrap();
        assert_eq!(table.len(), 6);
        assert_eq!(table.next_row_id(), 6);
        let scanned = table.snapshot().scan(None, false).unwrap();
        assert_eq!(scanned[0].num_columns(), 1, "the row id stays hidden");
    }

    #[test]
    fn many_small_writes_are_merged_and_stay_findable() {
        let spec = keyed();
        let mut table = StateTable::new(spec.clone()).unwrap();
        for k in 0..1000 {
            table
                .write(&[], Some(&rows(&spec, &[k], "v")))
                .unwrap()
                .unwrap();
            if k % 3 == 0 {
                let p = positions_of(&table, &[k]);
                table.write(&p, None).unwrap().unwrap();
            }
        }
        assert!(
            table.chunks.len() <= MAX_SMALL_CHUNKS + 1,
            "{} chunks",
            table.chunks.len()
        );
        let expected: Vec<i32> = (0..1000).filter(|k| k % 3 != 0).collect();
        assert_eq!(keys_of(&table.snapshot()), expected);
        assert_eq!(positions_of(&table, &expected).len(), expected.len());
        let rows_at = table.rows_at(&positions_of(&table, &[998])).unwrap();
        assert_eq!(rows_at.column(0).as_primitive::<Int32Type>().value(0), 998);
    }
}
