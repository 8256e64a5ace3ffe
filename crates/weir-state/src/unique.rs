//! Unique constraints besides a table's key (`UNIQUE`, `CREATE UNIQUE
//! INDEX`): a write may not give two live rows equal values in a
//! constraint's columns. Rows with a NULL in them never collide, as in
//! PostgreSQL.
//!
//! The stored rows are searched through each chunk's order by the
//! constraint's columns (`order.rs`: built once per chunk, shared with
//! snapshots), and only for the written rows whose values' hash the chunk
//! holds (a set of its rows' hashes, also built once per chunk); the
//! written rows among themselves through their encoded values (arrow's
//! row format) in a hash set.

use std::collections::HashSet;

use datafusion::arrow::array::{Array, ArrayRef, RecordBatch, UInt32Array};
use datafusion::arrow::buffer::BooleanBuffer;
use datafusion::arrow::compute::take;
use datafusion::arrow::row::{RowConverter, SortField};

use crate::order::{matching_rows, ChunkOrders, Nulls};
use crate::row_index::hash_keys;
use crate::StateResult;

/// One chunk of stored rows, as the check reads it.
pub(crate) struct StoredChunk<'a> {
    /// The chunk's id in its table.
    pub id: u32,
    /// The chunk's rows.
    pub batch: &'a RecordBatch,
    /// Which are live.
    pub live: &'a BooleanBuffer,
    /// Its orders, where the constraint's is built or kept.
    pub orders: &'a ChunkOrders,
}

/// Whether row `row` of chunk `chunk` is deleted by the same write.
pub(crate) type Deleted<'a> = &'a dyn Fn(u32, usize) -> bool;

/// The first row of `inserts` whose values in `columns` equal an earlier
/// inserted row's or a live stored row's (that the write does not delete).
pub(crate) fn first_duplicate(
    chunks: &[StoredChunk<'_>],
    deleted: Deleted<'_>,
    inserts: &RecordBatch,
    columns: &[usize],
) -> StateResult<Option<usize>> {
    Ok(conflicts(chunks, deleted, inserts, columns)?
        .iter()
        .position(|&c| c))
}

/// For each row of `inserts`, whether its values in `columns` (none
/// NULL) equal an earlier inserted row's or a live stored row's (that the
/// write does not delete).
pub(crate) fn conflicts(
    chunks: &[StoredChunk<'_>],
    deleted: Deleted<'_>,
    inserts: &RecordBatch,
    columns: &[usize],
) -> StateResult<Vec<bool>> {
    let probes: Vec<ArrayRef> = columns.iter().map(|&c| inserts.column(c).clone()).collect();
    let mut conflict = repeated(&probes)?;
    let hashes = hash_keys(&probes, inserts.num_rows())?;
    for chunk in chunks {
        // Only rows whose hash the chunk holds are searched for (a set
        // lookup per written row and chunk, where a search would be a
        // binary search through the chunk's order).
        let stored = chunk.orders.value_hashes(chunk.batch, columns)?;
        let candidates: Vec<u32> = (0..hashes.len() as u32)
            .filter(|&r| !conflict[r as usize] && stored.contains(&hashes[r as usize]))
            .collect();
        if candidates.is_empty() {
            continue;
        }
        let picked = UInt32Array::from(candidates.clone());
        let subset = probes
            .iter()
            .map(|p| take(p.as_ref(), &picked, None))
            .collect::<Result<Vec<_>, _>>()?;
        for (probe, row) in matching_rows(
            chunk.orders,
            chunk.batch,
            columns,
            &subset,
            Nulls::MatchNothing,
        )? {
            let row = row as usize;
            if chunk.live.value(row) && !deleted(chunk.id, row) {
                conflict[candidates[probe] as usize] = true;
            }
        }
    }
    Ok(conflict)
}

/// For each row of `probes` (one array per column), whether its values,
/// none NULL, an earlier row has too.
fn repeated(probes: &[ArrayRef]) -> StateResult<Vec<bool>> {
    let rows = probes.first().map_or(0, |p| p.len());
    let mut repeats = vec![false; rows];
    if rows < 2 {
        return Ok(repeats);
    }
    let fields = probes
        .iter()
        .map(|p| SortField::new(p.data_type().clone()))
        .collect();
    let encoded = RowConverter::new(fields)?.convert_columns(probes)?;
    let mut seen: HashSet<&[u8]> = HashSet::with_capacity(rows);
    // A per-row loop: one hash-set probe per written row, as a key
    // index's insert.
    for (row, repeat) in repeats.iter_mut().enumerate() {
        if probes.iter().any(|p| p.is_null(row)) {
            continue;
        }
        *repeat = !seen.insert(encoded.row(row).data());
    }
    Ok(repeats)
}
