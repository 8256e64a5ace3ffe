//! Keyed state tables: rows in Arrow chunks, a key index, and the set of
//! keys changed since the last epoch.
//!
//! Rows live in immutable Arrow chunks. A delete clears the row's bit in its
//! chunk's live mask (copy-on-write, so snapshots taken earlier never
//! change); an insert appends a chunk. A [`RowIndex`] finds a key's slot
//! by hash, confirmed against the stored row; per slot the table keeps the
//! row's position and a few flags. Small and sparse chunks are merged as
//! writes go on, so the chunk count stays small.
//!
//! Memory per row: the row's Arrow data, one live bit, and 27 bytes: the
//! index's share (about 14 with the hash it keeps), the position, the
//! flags and the row's slot.
//!
//! A transaction block's private copy of a table
//! ([`StateTable::over_snapshot`]) starts with the snapshot's chunks and no
//! index entries: a key is looked up in the index, then in the chunks'
//! key orders (`order.rs`, shared with the snapshot), and a row gets its
//! slot when a write deletes it. So a block's first write to a large table
//! costs a lookup, not an index of every row.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use datafusion::arrow::array::{
    ArrayRef, AsArray, BooleanArray, Int64Array, RecordBatch, UInt32Array, UInt64Array,
};
use datafusion::arrow::buffer::{BooleanBuffer, MutableBuffer};
use datafusion::arrow::compute::{
    concat_batches, filter_record_batch, interleave_record_batch, take, take_record_batch,
};
use datafusion::arrow::datatypes::{DataType, Field, Int64Type, Schema, SchemaRef};

use crate::error::{StateError, StateResult};
use crate::order::{
    is_order_of, matching_rows, orderable, select_rows, ChunkOrders, KeySelection, Nulls,
};
use crate::row_index::{hash_keys, KeyComparer, RowIndex, Slot};
use crate::unique::{conflicts, first_duplicate, StoredChunk};

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
    /// A log: rows are only ever appended, never replaced or deleted, so
    /// they need no key; loading and merging its deltas is concatenating
    /// them.
    pub log: bool,
    /// Unique constraints besides the key: sets of visible columns whose
    /// values no two live rows may share (rows with a NULL in them
    /// excepted; see `unique.rs`).
    pub unique: Vec<Vec<usize>>,
}

impl TableSpec {
    /// A table keyed by the given visible columns.
    pub fn with_primary_key(visible: SchemaRef, key: Vec<usize>) -> Self {
        TableSpec {
            schema: visible,
            key,
            hidden_row_id: false,
            log: false,
            unique: Vec::new(),
        }
    }

    /// A log of rows of `schema` (see [`TableSpec::log`]): operator state
    /// over an input that never deletes.
    pub fn log(schema: SchemaRef) -> Self {
        TableSpec {
            schema,
            key: Vec::new(),
            hidden_row_id: false,
            log: true,
            unique: Vec::new(),
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
            log: false,
            unique: Vec::new(),
        }
    }

    /// This spec with unique constraints on `unique` (sets of visible
    /// columns).
    pub fn with_unique(mut self, unique: Vec<Vec<usize>>) -> Self {
        self.unique = unique;
        self
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

    /// Whether lookups can use an order by `columns` (visible columns of
    /// types whose order answers SQL's equality: [`orderable`]).
    pub fn can_order_by(&self, columns: &[usize]) -> bool {
        !columns.is_empty()
            && columns
                .iter()
                .all(|&c| c < self.visible_len() && orderable(self.schema.field(c).data_type()))
    }

    /// The schema of a delete batch: the key columns only.
    pub fn key_schema(&self) -> SchemaRef {
        Arc::new(self.schema.project(&self.key).expect("key columns exist"))
    }
}

/// Why a write was refused: an inserted row's key, or its values in a
/// unique constraint's columns, are already taken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyViolation {
    /// Index of the offending row in the inserted batch.
    pub row: usize,
    /// The unique constraint it breaks (an index into
    /// [`TableSpec::unique`]); `None` for the key.
    pub constraint: Option<usize>,
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
    /// Each row's index slot: a deleted or moved row needs no key lookup.
    /// [`UNINDEXED`] for a row of a table made over a snapshot that no
    /// write has touched yet.
    keys: Vec<Slot>,
    /// Live rows whose slot is [`UNINDEXED`].
    unindexed: usize,
    /// The chunk's rows in the order of key columns lookups asked for.
    orders: Arc<ChunkOrders>,
}

/// The slot of a row that has none yet (see [`StateTable::over_snapshot`]).
const UNINDEXED: Slot = Slot::MAX;

/// The slot holds a live key (its position is valid).
const LIVE: u8 = 1;
/// The slot is listed in `dirty`.
const DIRTY: u8 = 2;
/// The slot's key existed at the last delta.
const COMMITTED: u8 = 4;

/// A table's rows with a key index; the writer side of a table.
///
/// The index ([`RowIndex`]) holds a slot per live key; per slot the table
/// keeps the row's position and a few flags. A key deleted since the last
/// delta that existed at it has its key columns kept in `deleted`, so the
/// next delta names it; its slot is free at once.
///
/// A clone shares the chunks' Arrow data and copies the index and the
/// per-slot vectors.
#[derive(Debug, Clone)]
pub struct StateTable {
    spec: TableSpec,
    chunks: BTreeMap<u32, Chunk>,
    next_chunk: u32,
    index: RowIndex,
    /// Per slot: the row's position (while `LIVE`).
    positions: Vec<RowPosition>,
    /// Per slot: `LIVE`, `DIRTY`, `COMMITTED`.
    flags: Vec<u8>,
    /// Slots changed since the last delta (each with `DIRTY` set; a slot
    /// freed and handed out again may appear twice).
    dirty: Vec<Slot>,
    /// Key columns of the committed keys deleted since the last delta.
    deleted: Vec<RecordBatch>,
    live_rows: usize,
    next_row_id: u64,
    /// Whether anything was written since the last delta (even if it
    /// cancelled out: the statement still waits for its epoch).
    written: bool,
    /// Every row written since the last [`StateTable::take_changes`], with
    /// +1 (inserted) or -1 (deleted); kept only while views read the table.
    changes: Option<Vec<(RecordBatch, i64)>>,
}

/// Keys of a batch prepared for lookups: the key columns and their hashes.
struct Keys {
    columns: Vec<ArrayRef>,
    hashes: Vec<u64>,
}

impl Keys {
    fn new(batch: &RecordBatch, key: &[usize]) -> StateResult<Self> {
        let columns: Vec<ArrayRef> = key.iter().map(|&i| batch.column(i).clone()).collect();
        let hashes = hash_keys(&columns, batch.num_rows())?;
        Ok(Keys { columns, hashes })
    }

    /// For each key, the first row of the batch with an equal key (itself
    /// if it is the first).
    fn firsts(&self) -> Vec<usize> {
        let all: Vec<usize> = (0..self.columns.len()).collect();
        let comparer = KeyComparer::new(&self.columns, &all);
        let mut seen: hashbrown::HashTable<usize> =
            hashbrown::HashTable::with_capacity(self.hashes.len());
        (0..self.hashes.len())
            .map(|row| {
                let hash = self.hashes[row];
                let first = seen
                    .find(hash, |&other| comparer.same(row, 0, &self.columns, other))
                    .copied();
                first.unwrap_or_else(|| {
                    seen.insert_unique(hash, row, |&other| self.hashes[other]);
                    row
                })
            })
            .collect()
    }

    /// Whether each key equals an earlier key of the same batch.
    fn repeated(&self) -> Vec<bool> {
        self.firsts()
            .into_iter()
            .enumerate()
            .map(|(row, first)| first != row)
            .collect()
    }
}

/// Every row of a table of `spec` after `deltas` replayed in order from
/// empty, as [`crate::StateStore::load_rows`] loads a table from its
/// files: a log's deltas are concatenated; any other table is rebuilt by
/// key.
pub fn rows_after(spec: &TableSpec, deltas: &[DeltaBatches]) -> StateResult<RecordBatch> {
    if spec.log {
        if deltas.iter().any(|d| d.deletes.is_some()) {
            return Err(StateError::Internal(
                "a log table's delta deletes rows".into(),
            ));
        }
        let parts = deltas.iter().filter_map(|d| d.upserts.as_ref());
        return Ok(concat_batches(&spec.schema, parts)?);
    }
    let mut table = StateTable::new(spec.clone())?;
    for delta in deltas {
        table.apply_delta(delta.upserts.as_ref(), delta.deletes.as_ref())?;
    }
    table.snapshot().stored_rows()
}

impl StateTable {
    /// An empty table. A log ([`TableSpec::log`]) has no key to index its
    /// rows by: its rows are only ever concatenated
    /// ([`crate::StateStore::load_rows`]).
    pub fn new(spec: TableSpec) -> StateResult<Self> {
        if spec.log {
            return Err(StateError::Internal(
                "a log table is read as rows, not indexed".into(),
            ));
        }
        Ok(StateTable {
            spec,
            chunks: BTreeMap::new(),
            next_chunk: 0,
            index: RowIndex::default(),
            positions: Vec::new(),
            flags: Vec::new(),
            dirty: Vec::new(),
            deleted: Vec::new(),
            live_rows: 0,
            next_row_id: 0,
            written: false,
            changes: None,
        })
    }

    /// A table holding `snapshot`'s rows, every key committed and none
    /// dirty: the next [`StateTable::take_delta`] is the change since the
    /// snapshot. A table with a hidden row id hands out ids after the
    /// snapshot's largest.
    pub fn from_snapshot(snapshot: &TableSnapshot) -> StateResult<Self> {
        let mut table = StateTable::new(snapshot.spec().clone())?;
        let rows = snapshot.stored_rows()?;
        table.apply_delta(Some(&rows), None)?;
        if table.spec.hidden_row_id {
            let ids = rows
                .column(rows.num_columns() - 1)
                .as_primitive_opt::<Int64Type>()
                .ok_or_else(|| StateError::Internal("the row id column is not int64".into()))?;
            let largest = datafusion::arrow::compute::max(ids).unwrap_or(-1);
            table.next_row_id = (largest + 1) as u64;
        }
        Ok(table)
    }

    /// A table holding `snapshot`'s rows as [`StateTable::from_snapshot`]
    /// does, without indexing them: it shares the snapshot's chunks (and
    /// their key orders), and a row enters the index only when a write
    /// deletes it. What a transaction block writes to; a table whose key
    /// has no order (a floating-point column) is indexed at once.
    pub fn over_snapshot(snapshot: &TableSnapshot) -> StateResult<Self> {
        let spec = snapshot.spec();
        let key_ordered = spec
            .key
            .iter()
            .all(|&c| orderable(spec.schema.field(c).data_type()));
        if !key_ordered {
            return StateTable::from_snapshot(snapshot);
        }
        let mut table = StateTable::new(spec.clone())?;
        let mut largest_row_id = -1;
        for chunk in snapshot.chunks.iter() {
            let rows = chunk.batch.num_rows();
            let live = chunk
                .live
                .clone()
                .unwrap_or_else(|| BooleanBuffer::new_set(rows));
            let live_rows = live.count_set_bits();
            if spec.hidden_row_id {
                let ids = chunk
                    .batch
                    .column(chunk.batch.num_columns() - 1)
                    .as_primitive_opt::<Int64Type>()
                    .ok_or_else(|| StateError::Internal("the row id column is not int64".into()))?;
                largest_row_id =
                    largest_row_id.max(datafusion::arrow::compute::max(ids).unwrap_or(-1));
            }
            table.chunks.insert(
                chunk.id,
                Chunk {
                    batch: chunk.batch.clone(),
                    live,
                    live_rows,
                    keys: vec![UNINDEXED; rows],
                    unindexed: live_rows,
                    orders: chunk.orders.clone(),
                },
            );
            table.next_chunk = table.next_chunk.max(chunk.id + 1);
            table.live_rows += live_rows;
        }
        // Any id above every stored one is fresh (the snapshot's dead rows
        // included).
        table.next_row_id = (largest_row_id + 1) as u64;
        Ok(table)
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
            .map(|c| {
                c.batch.get_array_memory_size() + c.live.inner().capacity() + c.keys.capacity() * 4
            })
            .sum();
        let deleted: usize = self.deleted.iter().map(|b| b.get_array_memory_size()).sum();
        chunks
            + deleted
            + self.index.memory_size()
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
        self.written || !self.dirty.is_empty() || !self.deleted.is_empty()
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
                orders: c.orders.clone(),
            })
            .collect();
        TableSnapshot {
            spec: Arc::new(self.spec.clone()),
            chunks: Arc::new(chunks),
            rows: self.live_rows,
        }
    }

    /// The live slot of each key of `keys`, if any.
    fn find_all(&self, keys: &Keys) -> Vec<Option<Slot>> {
        let comparer = KeyComparer::new(&keys.columns, &self.spec.key);
        (0..keys.hashes.len())
            .map(|row| {
                self.index.find(keys.hashes[row], |slot| {
                    let (chunk, at) = split_position(self.positions[slot as usize]);
                    comparer.same(row, chunk as usize, self.chunks[&chunk].batch.columns(), at)
                })
            })
            .collect()
    }

    /// For each row of `keys` (a batch holding the key columns in key
    /// order): the position of the stored row with that key, if any, and
    /// whether an earlier row of `keys` has the same key.
    pub fn lookup(&self, keys: &RecordBatch) -> StateResult<Vec<KeyMatch>> {
        let all: Vec<usize> = (0..keys.num_columns()).collect();
        let keys = Keys::new(keys, &all)?;
        let found = self.find_positions(&keys)?;
        Ok(found
            .into_iter()
            .zip(keys.repeated())
            .map(|(existing, repeated)| KeyMatch { existing, repeated })
            .collect())
    }

    /// The position of the live row with each key of `keys`, if any: in
    /// the index, else among the rows not indexed yet.
    fn find_positions(&self, keys: &Keys) -> StateResult<Vec<Option<RowPosition>>> {
        let mut found: Vec<Option<RowPosition>> = self
            .find_all(keys)
            .into_iter()
            .map(|slot| slot.map(|s| self.positions[s as usize]))
            .collect();
        let missing: Vec<u32> = (0..found.len() as u32)
            .filter(|&i| found[i as usize].is_none())
            .collect();
        if missing.is_empty() || !self.chunks.values().any(|c| c.unindexed > 0) {
            return Ok(found);
        }
        let indices = UInt32Array::from(missing.clone());
        let probes = keys
            .columns
            .iter()
            .map(|c| take(c.as_ref(), &indices, None))
            .collect::<Result<Vec<_>, _>>()?;
        for (&id, chunk) in self.chunks.iter().filter(|(_, c)| c.unindexed > 0) {
            for (probe, row) in matching_rows(
                &chunk.orders,
                &chunk.batch,
                &self.spec.key,
                &probes,
                Nulls::MatchNulls,
            )? {
                let row = row as usize;
                if chunk.live.value(row) && chunk.keys[row] == UNINDEXED {
                    found[missing[probe] as usize] = Some(position(id, row));
                }
            }
        }
        Ok(found)
    }

    /// Gives each row at `positions` that has no slot yet one: live,
    /// committed (it was in the snapshot), clean.
    fn index_rows(&mut self, positions: &[RowPosition]) -> StateResult<()> {
        let mut lacking: Vec<RowPosition> = positions
            .iter()
            .copied()
            .filter(|&p| self.slot_at(p) == UNINDEXED)
            .collect();
        if lacking.is_empty() {
            return Ok(());
        }
        lacking.sort_unstable();
        lacking.dedup();
        let keys = self.gather_columns(&lacking, &self.spec.key)?;
        let hashes = hash_keys(keys.columns(), keys.num_rows())?;
        self.index.reserve(lacking.len());
        let slots: Vec<Slot> = hashes.iter().map(|&h| self.index.insert(h)).collect();
        self.grow();
        for (&p, slot) in lacking.iter().zip(slots) {
            self.positions[slot as usize] = p;
            self.flags[slot as usize] = LIVE | COMMITTED;
            let (id, row) = split_position(p);
            let chunk = self.chunks.get_mut(&id).expect("position of a live chunk");
            chunk.keys[row] = slot;
            chunk.unindexed -= 1;
        }
        Ok(())
    }

    /// Indexes every live row not indexed yet (before the bulk paths,
    /// which find keys in the index alone).
    fn index_all(&mut self) -> StateResult<()> {
        let all: Vec<u32> = self.chunks.keys().copied().collect();
        self.index_chunks(&all)
    }

    /// Indexes the live rows of chunks `ids` that are not indexed yet.
    fn index_chunks(&mut self, ids: &[u32]) -> StateResult<()> {
        let lacking: Vec<RowPosition> = ids
            .iter()
            .map(|&id| (id, &self.chunks[&id]))
            .filter(|(_, c)| c.unindexed > 0)
            .flat_map(|(id, c)| {
                c.live
                    .set_indices()
                    .filter(|&row| c.keys[row] == UNINDEXED)
                    .map(move |row| position(id, row))
            })
            .collect();
        self.index_rows(&lacking)
    }

    /// The visible columns of the rows at `positions`, in that order.
    pub fn rows_at(&self, positions: &[RowPosition]) -> StateResult<RecordBatch> {
        self.spec.visible_columns(&self.gather(positions)?)
    }

    /// The stored rows at `positions`, in that order.
    fn gather(&self, positions: &[RowPosition]) -> StateResult<RecordBatch> {
        let all: Vec<usize> = (0..self.spec.schema.fields().len()).collect();
        self.gather_columns(positions, &all)
    }

    /// Columns `columns` of the stored rows at `positions`, in that order.
    fn gather_columns(
        &self,
        positions: &[RowPosition],
        columns: &[usize],
    ) -> StateResult<RecordBatch> {
        let ids: Vec<u32> = self.chunks.keys().copied().collect();
        let batches = self
            .chunks
            .values()
            .map(|c| c.batch.project(columns))
            .collect::<Result<Vec<_>, _>>()?;
        let batches: Vec<&RecordBatch> = batches.iter().collect();
        let indices: Vec<(usize, usize)> = positions
            .iter()
            .map(|&p| {
                let (chunk, row) = split_position(p);
                let slot = ids.binary_search(&chunk).expect("position of a live chunk");
                (slot, row)
            })
            .collect();
        if batches.is_empty() {
            return Ok(RecordBatch::new_empty(Arc::new(
                self.spec.schema.project(columns)?,
            )));
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
        let keys = match &inserts {
            Some(batch) => Some(Keys::new(batch, &self.spec.key)?),
            None => None,
        };
        if let Some(keys) = &keys {
            let deleted: HashSet<RowPosition> = deletes.iter().copied().collect();
            // New hidden row ids are above every stored one: only the
            // index can hold them (rows inserted earlier).
            let found = if self.spec.hidden_row_id {
                self.find_all(keys)
                    .into_iter()
                    .map(|slot| slot.map(|s| self.positions[s as usize]))
                    .collect()
            } else {
                self.find_positions(keys)?
            };
            for (row, (existing, repeated)) in found.iter().zip(keys.repeated()).enumerate() {
                let taken = existing.is_some_and(|p| !deleted.contains(&p));
                if taken || repeated {
                    return Ok(Err(KeyViolation {
                        row,
                        constraint: None,
                    }));
                }
            }
        }
        if let Some(batch) = &inserts {
            if let Some(violation) = self.unique_violation(deletes, batch)? {
                return Ok(Err(violation));
            }
        }
        self.written |= !deletes.is_empty() || inserts.is_some();
        self.delete_positions(deletes, true)?;
        if let (Some(batch), Some(keys)) = (inserts, keys) {
            if self.spec.hidden_row_id {
                self.next_row_id += batch.num_rows() as u64;
            }
            if let Some(changes) = &mut self.changes {
                changes.push((self.spec.visible_columns(&batch)?, 1));
            }
            self.insert_new(batch, &keys.hashes);
        }
        self.merge_chunks()?;
        Ok(Ok(()))
    }

    /// Whether [`StateTable::write`] of `deletes` and `inserts` would keep
    /// the unique constraints (not the key, which the caller checked):
    /// a transaction block's commit checks every table before it writes
    /// any.
    pub fn check_unique(
        &self,
        deletes: &[RowPosition],
        inserts: Option<&RecordBatch>,
    ) -> StateResult<Result<(), KeyViolation>> {
        let Some(batch) = inserts.filter(|b| b.num_rows() > 0) else {
            return Ok(Ok(()));
        };
        Ok(match self.unique_violation(deletes, batch)? {
            Some(violation) => Err(violation),
            None => Ok(()),
        })
    }

    /// For each row of `inserts`, whether its values in unique constraint
    /// `constraint`'s columns are held by a live row or an earlier row of
    /// `inserts` (`INSERT ... ON CONFLICT DO NOTHING` leaves those out).
    pub fn unique_conflicts(
        &self,
        inserts: &RecordBatch,
        constraint: usize,
    ) -> StateResult<Vec<bool>> {
        let Some(columns) = self.spec.unique.get(constraint) else {
            return Ok(vec![false; inserts.num_rows()]);
        };
        conflicts(&self.stored_chunks(), &|_, _| false, inserts, columns)
    }

    /// The chunks as a unique constraint's check reads them.
    fn stored_chunks(&self) -> Vec<StoredChunk<'_>> {
        self.chunks
            .iter()
            .map(|(&id, chunk)| StoredChunk {
                id,
                batch: &chunk.batch,
                live: &chunk.live,
                orders: &chunk.orders,
            })
            .collect()
    }

    /// The first row of `inserts` that breaks a unique constraint once
    /// `deletes` are gone.
    fn unique_violation(
        &self,
        deletes: &[RowPosition],
        inserts: &RecordBatch,
    ) -> StateResult<Option<KeyViolation>> {
        if self.spec.unique.is_empty() {
            return Ok(None);
        }
        let deleted: HashSet<RowPosition> = deletes.iter().copied().collect();
        let deleted = |chunk: u32, row: usize| deleted.contains(&position(chunk, row));
        let chunks = self.stored_chunks();
        for (i, columns) in self.spec.unique.iter().enumerate() {
            if let Some(row) = first_duplicate(&chunks, &deleted, inserts, columns)? {
                return Ok(Some(KeyViolation {
                    row,
                    constraint: Some(i),
                }));
            }
        }
        Ok(None)
    }

    /// Deletes every row, as [`StateTable::write`] deletes rows (a source
    /// that starts its table over).
    pub fn clear(&mut self) -> StateResult<()> {
        let live: Vec<RowPosition> = self
            .chunks
            .iter()
            .flat_map(|(&id, c)| c.live.set_indices().map(move |row| position(id, row)))
            .collect();
        self.written |= !live.is_empty();
        self.delete_positions(&live, true)?;
        self.merge_chunks()
    }

    /// Deletes the rows at `positions` (their keys leave the index);
    /// `track`: keep what a delta and the views reading the table need.
    fn delete_positions(&mut self, positions: &[RowPosition], track: bool) -> StateResult<()> {
        if positions.is_empty() {
            return Ok(());
        }
        self.index_rows(positions)?;
        // The deleted rows, for the views reading the table; else only
        // their keys, for the next delta.
        let gone = match (track, &self.changes) {
            (true, Some(_)) => Some(self.gather(positions)?),
            (true, None) if self.any_committed(positions) => {
                Some(self.gather_columns(positions, &self.spec.key)?)
            }
            _ => None,
        };
        if let (Some(changes), Some(gone)) = (&mut self.changes, &gone) {
            changes.push((self.spec.visible_columns(gone)?, -1));
        }
        let mut committed = Vec::new();
        for (i, &position) in positions.iter().enumerate() {
            let slot = self.slot_at(position);
            if track && self.flags[slot as usize] & COMMITTED != 0 {
                committed.push(i as u32);
            }
            self.flags[slot as usize] = 0;
            self.index.remove(slot);
            self.live_rows -= 1;
        }
        if let (false, Some(gone)) = (committed.is_empty(), gone) {
            let keys = if self.changes.is_some() {
                gone.project(&self.spec.key)?
            } else {
                gone
            };
            let keys = if committed.len() == positions.len() {
                keys
            } else {
                take_record_batch(&keys, &UInt32Array::from(committed))?
            };
            self.deleted.push(keys);
        }
        self.clear_live(positions);
        Ok(())
    }

    /// Whether some row at `positions` has a key that existed at the last
    /// delta.
    fn any_committed(&self, positions: &[RowPosition]) -> bool {
        positions
            .iter()
            .any(|&p| self.flags[self.slot_at(p) as usize] & COMMITTED != 0)
    }

    /// Appends `batch` (stored columns) whose keys, hashing to `hashes`,
    /// are not in the table; each becomes a live, dirty key.
    fn insert_new(&mut self, batch: RecordBatch, hashes: &[u64]) {
        self.index.reserve(hashes.len());
        let slots: Vec<Slot> = hashes.iter().map(|&h| self.index.insert(h)).collect();
        self.grow();
        // The chunk `push_chunk` adds next.
        let chunk = self.next_chunk;
        for (row, &slot) in slots.iter().enumerate() {
            let s = slot as usize;
            self.positions[s] = position(chunk, row);
            self.flags[s] = LIVE;
            self.live_rows += 1;
            self.mark_dirty(slot);
        }
        self.push_chunk(batch, slots);
    }

    /// The slot of the row at `position`.
    fn slot_at(&self, position: RowPosition) -> Slot {
        let (chunk, row) = split_position(position);
        self.chunks[&chunk].keys[row]
    }

    /// Adds `deltas[i]` copies of each row of `rows` to a table whose last
    /// column counts its rows (a view's output without a key): a row's
    /// count changes, and the row disappears at 0. `rows` holds the other
    /// columns; equal rows may repeat. Hashes each row once.
    pub fn add_counts(&mut self, rows: &RecordBatch, deltas: &[i64]) -> StateResult<()> {
        self.index_all()?;
        let n = rows.num_rows();
        if n == 0 {
            return Ok(());
        }
        let all: Vec<usize> = (0..rows.num_columns()).collect();
        let keys = Keys::new(rows, &all)?;
        let found = self.find_all(&keys);
        // Each distinct row once: the first of its copies here, its total.
        let mut order: Vec<usize> = Vec::new();
        let mut totals: Vec<i64> = vec![0; n];
        for (row, (first, &delta)) in keys.firsts().into_iter().zip(deltas).enumerate() {
            if first == row {
                order.push(row);
            }
            totals[first] += delta;
        }
        let existing: Vec<RowPosition> = order
            .iter()
            .filter_map(|&row| found[row].map(|slot| self.positions[slot as usize]))
            .collect();
        let count_column = self.spec.schema.fields().len() - 1;
        let old_counts = self.gather_columns(&existing, &[count_column])?;
        let mut old_counts = old_counts
            .column(0)
            .as_primitive_opt::<Int64Type>()
            .ok_or_else(|| StateError::Internal("the count column is not int64".into()))?
            .values()
            .iter();
        let (mut kept, mut counts) = (Vec::new(), Vec::new());
        for &row in &order {
            let old = match found[row] {
                Some(_) => *old_counts.next().expect("one count per stored row"),
                None => 0,
            };
            let count = old + totals[row];
            if count < 0 {
                return Err(StateError::Internal(
                    "a view row would be removed more often than it was added".into(),
                ));
            }
            if count > 0 {
                kept.push(row as u32);
                counts.push(count);
            }
        }
        self.written = true;
        // A changed count is a delete of the row and an insert of the row
        // with its new count.
        self.delete_positions(&existing, true)?;
        if !kept.is_empty() {
            let indices = UInt32Array::from(kept);
            let mut columns: Vec<ArrayRef> = rows
                .columns()
                .iter()
                .map(|c| take(c.as_ref(), &indices, None))
                .collect::<Result<_, _>>()?;
            columns.push(Arc::new(Int64Array::from(counts)));
            let batch = RecordBatch::try_new(self.spec.schema.clone(), columns)?;
            let hashes: Vec<u64> = indices
                .values()
                .iter()
                .map(|&r| keys.hashes[r as usize])
                .collect();
            self.insert_new(batch, &hashes);
        }
        self.merge_chunks()
    }

    /// Applies changes of a table keyed by some of its columns (a view's
    /// output with a key): rows with weight -1 are deleted by key, then
    /// rows with weight +1 inserted ([`StateTable::write`]). Fails if a
    /// deleted key is absent or an inserted one present.
    pub fn apply_keyed(&mut self, rows: &RecordBatch, weights: &[i64]) -> StateResult<()> {
        if rows.num_rows() == 0 {
            return Ok(());
        }
        self.index_all()?;
        let (removed, added): (Vec<u32>, Vec<u32>) =
            (0..rows.num_rows() as u32).partition(|&i| weights[i as usize] < 0);
        let removed = take_record_batch(rows, &UInt32Array::from(removed))?;
        let keys = Keys::new(&removed, &self.spec.key)?;
        let gone = self
            .find_all(&keys)
            .into_iter()
            .map(|slot| {
                slot.map(|s| self.positions[s as usize])
                    .ok_or_else(|| StateError::Internal("a deleted key is not in the table".into()))
            })
            .collect::<StateResult<Vec<RowPosition>>>()?;
        let added = take_record_batch(rows, &UInt32Array::from(added))?;
        self.write(&gone, Some(&added))?
            .map_err(|_| StateError::Internal("an inserted key is already in the table".into()))
    }

    /// Makes room for every slot in the per-slot vectors.
    fn grow(&mut self) {
        let slots = self.index.slots();
        if self.positions.len() < slots {
            self.positions.resize(slots, 0);
            self.flags.resize(slots, 0);
        }
    }

    fn mark_dirty(&mut self, slot: Slot) {
        let flags = &mut self.flags[slot as usize];
        if *flags & DIRTY == 0 {
            *flags |= DIRTY;
            self.dirty.push(slot);
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

    fn push_chunk(&mut self, batch: RecordBatch, keys: Vec<Slot>) -> u32 {
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
                unindexed: 0,
                orders: Arc::default(),
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
            // A snapshot's chunks in a table over it are left as the
            // shared table left them (merging would index their rows).
            .filter(|(_, c)| c.batch.num_rows() < SMALL_CHUNK_ROWS && c.unindexed == 0)
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
        self.index_chunks(&victims)?;
        let mut parts = Vec::with_capacity(victims.len());
        let mut slots = Vec::new();
        for id in &victims {
            let chunk = self.chunks.remove(id).expect("victim exists");
            slots.extend(chunk.live.set_indices().map(|row| chunk.keys[row]));
            parts.push(filter_record_batch(
                &chunk.batch,
                &BooleanArray::new(chunk.live, None),
            )?);
        }
        let merged = concat_batches(&self.spec.schema, &parts)?;
        if merged.num_rows() == 0 {
            return Ok(());
        }
        let chunk = self.push_chunk(merged, slots.clone());
        for (row, slot) in slots.into_iter().enumerate() {
            self.positions[slot as usize] = position(chunk, row);
        }
        Ok(())
    }

    /// The net change since the last call, or `None` if nothing changed.
    pub fn take_delta(&mut self) -> StateResult<Option<DeltaBatches>> {
        self.written = false;
        let mut present = Vec::new();
        for slot in std::mem::take(&mut self.dirty) {
            let flags = &mut self.flags[slot as usize];
            if *flags & DIRTY == 0 {
                continue;
            }
            *flags &= !DIRTY;
            if *flags & LIVE != 0 {
                *flags |= COMMITTED;
                present.push(self.positions[slot as usize]);
            }
        }
        // A deleted key that is back is an upsert alone.
        let mut deleted = Vec::new();
        for keys in std::mem::take(&mut self.deleted) {
            let all: Vec<usize> = (0..keys.num_columns()).collect();
            let absent: BooleanArray = self
                .find_all(&Keys::new(&keys, &all)?)
                .iter()
                .map(|slot| Some(slot.is_none()))
                .collect();
            let keys = filter_record_batch(&keys, &absent)?;
            if keys.num_rows() > 0 {
                deleted.push(keys);
            }
        }
        if present.is_empty() && deleted.is_empty() {
            return Ok(None);
        }
        let upserts = if present.is_empty() {
            None
        } else {
            present.sort_unstable();
            Some(self.gather(&present)?)
        };
        let deletes = if deleted.is_empty() {
            None
        } else {
            Some(concat_batches(&self.spec.key_schema(), &deleted)?)
        };
        Ok(Some(DeltaBatches { upserts, deletes }))
    }

    /// Gives the table's one chunk (a base just loaded into an empty
    /// table) the orders stored with that base: each `(columns, order)`
    /// is checked to be an order of the chunk by those columns
    /// ([`crate::order::is_order_of`]) and kept if it is, so that lookups
    /// after a restart need not sort the base again. Returns how many were
    /// kept; an order that fails the check is left out (the first lookup
    /// sorts it).
    pub fn seed_orders(&self, orders: Vec<(Vec<usize>, UInt32Array)>) -> StateResult<usize> {
        let chunks: Vec<&Chunk> = self.chunks.values().collect();
        let [chunk] = chunks.as_slice() else {
            return Ok(0);
        };
        let mut kept = 0;
        for (columns, order) in orders {
            if self.spec.can_order_by(&columns) && is_order_of(&order, &chunk.batch, &columns)? {
                chunk.orders.seed(&columns, order);
                kept += 1;
            }
        }
        Ok(kept)
    }

    /// Replays a committed delta (recovery): removes `deletes` by key, then
    /// inserts or replaces `upserts` by key. Does not mark keys dirty.
    pub fn apply_delta(
        &mut self,
        upserts: Option<&RecordBatch>,
        deletes: Option<&RecordBatch>,
    ) -> StateResult<()> {
        // Keys are found among rows not indexed yet too (a table over a
        // snapshot), so only the rows a delta replaces or deletes enter
        // the index.
        if let Some(deletes) = deletes.filter(|d| d.num_rows() > 0) {
            let all: Vec<usize> = (0..deletes.num_columns()).collect();
            let found = self.find_positions(&Keys::new(deletes, &all)?)?;
            let gone: Vec<RowPosition> = found.into_iter().flatten().collect();
            self.delete_positions(&gone, false)?;
        }
        if let Some(upserts) = upserts.filter(|u| u.num_rows() > 0) {
            let keys = Keys::new(upserts, &self.spec.key)?;
            let replaced: Vec<RowPosition> =
                self.find_positions(&keys)?.into_iter().flatten().collect();
            self.delete_positions(&replaced, false)?;
            self.insert_new(upserts.clone(), &keys.hashes);
            // Recovered rows are what the last delta left: committed, clean.
            for slot in std::mem::take(&mut self.dirty) {
                let flags = &mut self.flags[slot as usize];
                *flags = (*flags & !DIRTY) | COMMITTED;
            }
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
    orders: Arc<ChunkOrders>,
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
                orders: Arc::default(),
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
                batch = with_position_column(&batch, rows)?;
            }
            out.push(batch);
        }
        Ok(out)
    }

    /// The columns of every order some chunk has built (the orders reads
    /// use), each once.
    pub fn built_orders(&self) -> Vec<Vec<usize>> {
        let mut all: Vec<Vec<usize>> = Vec::new();
        for chunk in self.chunks.iter() {
            for columns in chunk.orders.built_columns() {
                // A unique check may sort by columns lookups cannot use;
                // recovery would refuse such an order, so it is not kept.
                if self.spec.can_order_by(&columns) && !all.contains(&columns) {
                    all.push(columns);
                }
            }
        }
        all
    }

    /// Whether some chunk has its order by `columns` built (a lookup used
    /// it, or [`TableSnapshot::build_orders`] made it).
    pub fn has_orders(&self, columns: &[usize]) -> bool {
        self.chunks.iter().any(|chunk| chunk.orders.has(columns))
    }

    /// Sorts every chunk whose order by `columns` no lookup has built
    /// yet, so that lookups find it ready; returns how many it sorted.
    /// Columns that cannot be looked up by order are left alone.
    pub fn build_orders(&self, columns: &[usize]) -> StateResult<usize> {
        if !self.spec.can_order_by(columns) {
            return Ok(0);
        }
        let mut sorted = 0;
        for chunk in self.chunks.iter() {
            if !chunk.orders.has(columns) {
                chunk.orders.order(&chunk.batch, columns)?;
                sorted += 1;
            }
        }
        Ok(sorted)
    }

    /// The live rows that `selection` selects on the leading columns of
    /// `columns` (visible column indices), found through each chunk's
    /// order by `columns` (`order.rs`) rather than a scan; projected, and
    /// with positions, as in [`TableSnapshot::scan`]. `None` if those
    /// columns cannot be looked up by order ([`crate::order::orderable`]).
    pub fn select(
        &self,
        columns: &[usize],
        selection: &KeySelection,
        projection: Option<&[usize]>,
        with_positions: bool,
    ) -> StateResult<Option<Vec<RecordBatch>>> {
        if !self.spec.can_order_by(columns) {
            return Ok(None);
        }
        let visible: Vec<usize> = (0..self.spec.visible_len()).collect();
        let projection = projection.unwrap_or(&visible);
        let mut out = Vec::new();
        for chunk in self.chunks.iter() {
            let mut rows = select_rows(&chunk.orders, &chunk.batch, columns, selection)?;
            if let Some(live) = &chunk.live {
                rows.retain(|&r| live.value(r as usize));
            }
            if rows.is_empty() {
                continue;
            }
            let projected = chunk.batch.project(projection)?;
            let positions: Vec<u64> = if with_positions {
                rows.iter()
                    .map(|&r| position(chunk.id, r as usize))
                    .collect()
            } else {
                Vec::new()
            };
            let mut batch = take_record_batch(&projected, &UInt32Array::from(rows))?;
            if with_positions {
                batch = with_position_column(&batch, positions)?;
            }
            out.push(batch);
        }
        Ok(Some(out))
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

/// `batch` with a last `UInt64` column of each row's [`RowPosition`].
fn with_position_column(batch: &RecordBatch, positions: Vec<u64>) -> StateResult<RecordBatch> {
    let mut fields: Vec<_> = batch.schema().fields().iter().cloned().collect();
    fields.push(Arc::new(Field::new("position", DataType::UInt64, false)));
    let mut columns = batch.columns().to_vec();
    columns.push(Arc::new(UInt64Array::from(positions)));
    Ok(RecordBatch::try_new(
        Arc::new(Schema::new(fields)),
        columns,
    )?)
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

    /// Values of `v` for `keys`, one row each (NULL where `None`).
    fn valued(spec: &TableSpec, keys: &[i32], values: &[Option<&str>]) -> RecordBatch {
        RecordBatch::try_new(
            spec.visible_schema(),
            vec![
                Arc::new(datafusion::arrow::array::Int32Array::from(keys.to_vec())),
                Arc::new(StringArray::from(values.to_vec())),
            ],
        )
        .unwrap()
    }

    #[test]
    fn unique_columns_refuse_repeated_values_but_not_nulls() {
        let spec = keyed().with_unique(vec![vec![1]]);
        let mut table = StateTable::new(spec.clone()).unwrap();
        let clash = |row| {
            Err(KeyViolation {
                row,
                constraint: Some(0),
            })
        };
        // NULLs never collide; two equal values in one write do.
        let first = valued(&spec, &[1, 2, 3], &[Some("a"), None, None]);
        assert_eq!(table.write(&[], Some(&first)).unwrap(), Ok(()));
        let twice = valued(&spec, &[4, 5], &[Some("b"), Some("b")]);
        assert_eq!(table.write(&[], Some(&twice)).unwrap(), clash(1));
        // A stored value, in this epoch's chunk or a committed one.
        let again = valued(&spec, &[6], &[Some("a")]);
        assert_eq!(table.write(&[], Some(&again)).unwrap(), clash(0));
        table.take_delta().unwrap();
        assert_eq!(table.write(&[], Some(&again)).unwrap(), clash(0));
        assert_eq!(table.check_unique(&[], Some(&again)).unwrap(), clash(0));
        // Moving the value from row 1 to row 6 in one write is allowed.
        let at = table.lookup(&again.project(&[0]).unwrap()).unwrap();
        assert!(at[0].existing.is_none());
        let one = table
            .lookup(&valued(&spec, &[1], &[None]).project(&[0]).unwrap())
            .unwrap()[0]
            .existing
            .unwrap();
        let moved = valued(&spec, &[1, 6], &[Some("z"), Some("a")]);
        assert_eq!(table.write(&[one], Some(&moved)).unwrap(), Ok(()));
        // Nothing failed half-way: every refused write left no row.
        assert_eq!(keys_of(&table.snapshot()), vec![1, 2, 3, 6]);
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

    /// Each live row as (key, value), sorted.
    fn contents(snapshot: &TableSnapshot) -> Vec<(i32, String)> {
        let mut all = Vec::new();
        for batch in snapshot.scan(None, false).unwrap() {
            let keys = batch.column(0).as_primitive::<Int32Type>();
            let values = batch.column(1).as_string::<i32>();
            all.extend((0..batch.num_rows()).map(|i| (keys.value(i), values.value(i).to_owned())));
        }
        all.sort();
        all
    }

    /// A delta as sorted upserted (key, value) pairs and deleted keys.
    fn delta_contents(delta: Option<DeltaBatches>) -> (Vec<(i32, String)>, Vec<i32>) {
        let Some(delta) = delta else {
            return (Vec::new(), Vec::new());
        };
        let upserts = delta
            .upserts
            .map(|b| contents(&TableSnapshot::from_rows(keyed(), b)))
            .unwrap_or_default();
        let mut deletes: Vec<i32> = delta
            .deletes
            .iter()
            .flat_map(|b| b.column(0).as_primitive::<Int32Type>().values().to_vec())
            .collect();
        deletes.sort();
        (upserts, deletes)
    }

    /// Deltas replayed over a snapshot find keys that hold NULLs (a view
    /// keyed by nullable columns) as the key index does: NULL is the same
    /// key as NULL.
    #[test]
    fn deltas_over_a_snapshot_find_keys_that_hold_nulls() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int32, true),
            Field::new("v", DataType::Utf8, true),
        ]));
        let spec = TableSpec::with_primary_key(schema, vec![0, 1]);
        let batch = |keys: Vec<Option<i32>>, values: Vec<Option<&str>>| {
            RecordBatch::try_new(
                spec.visible_schema(),
                vec![
                    Arc::new(datafusion::arrow::array::Int32Array::from(keys)),
                    Arc::new(StringArray::from(values)),
                ],
            )
            .unwrap()
        };
        let mut shared = StateTable::new(spec.clone()).unwrap();
        let stored = batch(
            vec![None, Some(1), None, Some(2)],
            vec![Some("a"), None, None, Some("b")],
        );
        shared.apply_delta(Some(&stored), None).unwrap();
        let snapshot = shared.snapshot();
        let mut copy = StateTable::from_snapshot(&snapshot).unwrap();
        let mut lazy = StateTable::over_snapshot(&snapshot).unwrap();
        assert!(lazy.chunks.values().all(|c| c.unindexed == c.live_rows));
        // An upsert of rows already there, and deletes of keys with NULLs.
        let upserts = batch(vec![None, Some(1)], vec![Some("a"), None]);
        let deletes = batch(vec![None, Some(2)], vec![None, Some("b")]);
        for table in [&mut copy, &mut lazy] {
            table.apply_delta(Some(&upserts), Some(&deletes)).unwrap();
            assert_eq!(table.len(), 2);
            let found = table.lookup(&stored).unwrap();
            let present: Vec<bool> = found.iter().map(|m| m.existing.is_some()).collect();
            assert_eq!(present, [true, true, false, false]);
        }
        let rows = |table: &StateTable| {
            let rows = table.snapshot().stored_rows().unwrap();
            let mut listed: Vec<String> = (0..rows.num_rows())
                .map(|i| format!("{:?}", rows.slice(i, 1).columns()))
                .collect();
            listed.sort();
            listed
        };
        assert_eq!(rows(&lazy), rows(&copy));
    }

    #[test]
    fn a_table_over_a_snapshot_writes_as_an_indexed_copy_does() {
        let spec = keyed();
        // A shared table of several chunks, some rows deleted.
        let mut shared = StateTable::new(spec.clone()).unwrap();
        for start in (0..20_000).step_by(5_000) {
            let keys: Vec<i32> = (start..start + 5_000).collect();
            shared
                .write(&[], Some(&rows(&spec, &keys, "s")))
                .unwrap()
                .unwrap();
        }
        let gone = positions_of(&shared, &(0..20_000).step_by(7).collect::<Vec<_>>());
        shared.write(&gone, None).unwrap().unwrap();
        let snapshot = shared.snapshot();
        let mut copy = StateTable::from_snapshot(&snapshot).unwrap();
        let mut lazy = StateTable::over_snapshot(&snapshot).unwrap();
        assert!(lazy.chunks.values().all(|c| c.unindexed == c.live_rows));

        let mut seed: u64 = 0x5eed;
        let mut next = |n: u64| {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (seed >> 33) % n
        };
        let (mut inserted, mut updated, mut deleted, mut refused) = (0, 0, 0, 0);
        for step in 0..400 {
            let count = 1 + next(40) as usize;
            let keys: Vec<i32> = (0..count).map(|_| next(24_000) as i32).collect();
            let value = format!("v{step}");
            match next(4) {
                // Insert a few keys, which may exist: refused alike.
                0 => {
                    let batch = rows(&spec, &keys[..1 + count % 2], &value);
                    let a = copy.write(&[], Some(&batch)).unwrap();
                    let b = lazy.write(&[], Some(&batch)).unwrap();
                    assert_eq!(a, b, "insert at step {step}");
                    match a {
                        Ok(()) => inserted += 1,
                        Err(_) => refused += 1,
                    }
                }
                // Update (delete by key and insert the same keys) or delete.
                kind => {
                    let mut keys = keys;
                    keys.sort();
                    keys.dedup();
                    let probe = rows(&spec, &keys, "").project(&[0]).unwrap();
                    let found = |table: &StateTable| -> Vec<Option<RowPosition>> {
                        let matches = table.lookup(&probe).unwrap();
                        matches.iter().map(|m| m.existing).collect()
                    };
                    let (a, b) = (found(&copy), found(&lazy));
                    let is_some = |f: &[Option<RowPosition>]| -> Vec<bool> {
                        f.iter().map(Option::is_some).collect()
                    };
                    assert_eq!(is_some(&a), is_some(&b), "lookup at step {step}");
                    let present: Vec<i32> = keys
                        .iter()
                        .zip(&a)
                        .filter(|(_, p)| p.is_some())
                        .map(|(&k, _)| k)
                        .collect();
                    let (a, b): (Vec<_>, Vec<_>) = (
                        a.into_iter().flatten().collect(),
                        b.into_iter().flatten().collect(),
                    );
                    let inserts = (kind < 3).then(|| rows(&spec, &present, &value));
                    copy.write(&a, inserts.as_ref()).unwrap().unwrap();
                    lazy.write(&b, inserts.as_ref()).unwrap().unwrap();
                    if kind < 3 {
                        updated += present.len();
                    } else {
                        deleted += a.len();
                    }
                }
            }
            assert_eq!(copy.len(), lazy.len(), "rows at step {step}");
            if step % 50 == 49 {
                assert_eq!(contents(&copy.snapshot()), contents(&lazy.snapshot()));
                let saved = lazy.clone();
                assert_eq!(
                    delta_contents(copy.clone().take_delta().unwrap()),
                    delta_contents(lazy.take_delta().unwrap()),
                    "delta at step {step}"
                );
                lazy = saved;
            }
        }
        assert!(
            inserted > 20 && refused > 20 && updated > 1_000 && deleted > 500,
            "{inserted} inserted, {refused} refused, {updated} updated, {deleted} deleted"
        );
        // Untouched rows stayed out of the index.
        assert!(lazy.index.slots() < 10_000, "{} slots", lazy.index.slots());
        assert_eq!(
            delta_contents(copy.take_delta().unwrap()),
            delta_contents(lazy.take_delta().unwrap())
        );
        // Clearing reaches rows never indexed.
        copy.clear().unwrap();
        lazy.clear().unwrap();
        assert_eq!(lazy.len(), 0);
        assert_eq!(
            delta_contents(copy.take_delta().unwrap()),
            delta_contents(lazy.take_delta().unwrap())
        );
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
        assert_eq!(
            clash,
            Err(KeyViolation {
                row: 1,
                constraint: None
            })
        );
        let twice = table.write(&[], Some(&rows(&spec, &[4, 4], "b"))).unwrap();
        assert_eq!(
            twice,
            Err(KeyViolation {
                row: 1,
                constraint: None
            })
        );
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
    fn clear_deletes_committed_and_new_rows_into_the_delta() {
        let spec = keyed();
        let mut table = StateTable::new(spec.clone()).unwrap();
        table
            .write(&[], Some(&rows(&spec, &[1, 2], "a")))
            .unwrap()
            .unwrap();
        table.take_delta().unwrap();
        table
            .write(&[], Some(&rows(&spec, &[3], "b")))
            .unwrap()
            .unwrap();
        table.clear().unwrap();
        assert_eq!(table.len(), 0);
        assert!(keys_of(&table.snapshot()).is_empty());
        let delta = table.take_delta().unwrap().expect("a delta");
        let deleted = delta.deletes.expect("deleted keys");
        assert_eq!(deleted.num_rows(), 2, "the committed keys 1 and 2 leave");
        // The table takes its keys again.
        table
            .write(&[], Some(&rows(&spec, &[1, 3], "c")))
            .unwrap()
            .unwrap();
        assert_eq!(keys_of(&table.snapshot()), vec![1, 3]);
    }

    /// Values of column 1 (`v`) of the rows `selection` selects by key,
    /// sorted, with each row's key.
    fn selected(snapshot: &TableSnapshot, selection: &KeySelection) -> Vec<(i32, String)> {
        let mut found: Vec<(i32, String)> = snapshot
            .select(&[0], selection, None, false)
            .unwrap()
            .expect("an integer key can be ordered")
            .iter()
            .flat_map(|b| {
                let keys = b.column(0).as_primitive::<Int32Type>().clone();
                let values = b.column(1).as_string::<i32>().clone();
                (0..b.num_rows())
                    .map(move |r| (keys.value(r), values.value(r).to_owned()))
                    .collect::<Vec<_>>()
            })
            .collect();
        found.sort();
        found
    }

    #[test]
    fn lookups_by_order_see_only_live_rows_of_their_snapshot() {
        use datafusion::arrow::array::Int32Array;
        use std::ops::Bound;
        let spec = keyed();
        let mut table = StateTable::new(spec.clone()).unwrap();
        // Three chunks; key 2 is replaced (its old row stays, dead, in
        // the first chunk) and key 5 deleted.
        table
            .write(&[], Some(&rows(&spec, &[5, 1, 2, 9], "a")))
            .unwrap()
            .unwrap();
        table
            .write(&[], Some(&rows(&spec, &[7, 3], "b")))
            .unwrap()
            .unwrap();
        let before = table.snapshot();
        let gone = positions_of(&table, &[2, 5]);
        table
            .write(&gone, Some(&rows(&spec, &[2], "c")))
            .unwrap()
            .unwrap();
        let after = table.snapshot();
        let keys = |k: Vec<Option<i32>>| KeySelection::Equal(vec![Arc::new(Int32Array::from(k))]);
        let one = |k: i32| -> ArrayRef { Arc::new(Int32Array::from(vec![k])) };
        let s = |k: i32, v: &str| (k, v.to_owned());
        assert_eq!(selected(&after, &keys(vec![Some(2)])), vec![s(2, "c")]);
        assert_eq!(selected(&before, &keys(vec![Some(2)])), vec![s(2, "a")]);
        assert_eq!(selected(&after, &keys(vec![Some(5)])), vec![]);
        assert_eq!(selected(&before, &keys(vec![Some(5)])), vec![s(5, "a")]);
        // An IN list, with a repeat, a miss and a NULL.
        assert_eq!(
            selected(
                &after,
                &keys(vec![Some(7), None, Some(4), Some(1), Some(7)])
            ),
            vec![s(1, "a"), s(7, "b")]
        );
        let range = KeySelection::Range {
            lower: Bound::Excluded(one(1)),
            upper: Bound::Included(one(7)),
        };
        assert_eq!(
            selected(&after, &range),
            vec![s(2, "c"), s(3, "b"), s(7, "b")]
        );
        let open = KeySelection::Range {
            lower: Bound::Included(one(3)),
            upper: Bound::Unbounded,
        };
        assert_eq!(
            selected(&after, &open),
            vec![s(3, "b"), s(7, "b"), s(9, "a")]
        );
        // A float column is not looked up by order.
        let floats = TableSpec::with_primary_key(
            Arc::new(Schema::new(vec![Field::new("f", DataType::Float64, false)])),
            vec![0],
        );
        let empty = StateTable::new(floats).unwrap().snapshot();
        assert!(empty
            .select(&[0], &keys(vec![Some(1)]), None, false)
            .unwrap()
            .is_none());
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
