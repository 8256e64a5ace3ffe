//! Key lookups in a table snapshot without scanning it.
//!
//! A table's rows live in immutable chunks (`table.rs`). For a set of key
//! columns, each chunk keeps its rows' order by those columns (a
//! permutation of row numbers, 4 bytes per row), built with Arrow's
//! `lexsort` ahead of lookups ([`crate::TableSnapshot::build_orders`],
//! which the server runs for each new chunk after its commit) or else the
//! first time a lookup needs it, and shared by every snapshot that holds
//! the chunk: a chunk never changes, so its order never goes
//! stale, and writes need not maintain anything (a deleted row only loses
//! its live bit, which lookups check). A lookup binary-searches each
//! chunk's order, so it costs a few comparisons per chunk, and the chunk
//! count stays small (small and sparse chunks are merged).
//!
//! This is what serves a primary key, a view's key and a secondary index
//! (`CREATE INDEX`): all are orders on some columns, differing only in
//! whether one key can match more than one row.

use std::cmp::Ordering;
use std::collections::HashSet;
use std::ops::Bound;
use std::sync::atomic::{AtomicU64, Ordering as AtomicOrdering};
use std::sync::{Arc, Mutex, OnceLock};

use datafusion::arrow::array::{
    make_comparator, Array, ArrayRef, DynComparator, RecordBatch, UInt32Array,
};
use datafusion::arrow::compute::{lexsort_to_indices, SortColumn, SortOptions};
use datafusion::arrow::datatypes::DataType;
use datafusion::arrow::error::ArrowError;

use crate::row_index::hash_keys;
use crate::StateResult;

/// The order every chunk order uses: ascending, NULLs last.
const ORDER: SortOptions = SortOptions {
    descending: false,
    nulls_first: false,
};

/// Which rows a lookup selects, by the leading columns of an order.
#[derive(Debug, Clone)]
pub enum KeySelection {
    /// Rows whose leading columns equal one of the probe rows: one array
    /// per leading column (each of that column's type), all the same
    /// length. A probe with a NULL matches nothing, as `=` does in SQL.
    Equal(Vec<ArrayRef>),
    /// Rows whose first column lies between two bounds (one-row arrays of
    /// the column's type). NULLs are in no range.
    Range {
        /// The lower bound.
        lower: Bound<ArrayRef>,
        /// The upper bound.
        upper: Bound<ArrayRef>,
    },
}

/// Whether an order of a column of type `t` can answer equality: its
/// order's equality must be SQL's. Floats are left out (`-0 = 0` in SQL,
/// not in a total order), as are nested types.
pub fn orderable(t: &DataType) -> bool {
    use DataType::*;
    matches!(
        t,
        Boolean
            | Int8
            | Int16
            | Int32
            | Int64
            | UInt8
            | UInt16
            | UInt32
            | UInt64
            | Utf8
            | LargeUtf8
            | Utf8View
            | Binary
            | LargeBinary
            | BinaryView
            | Date32
            | Date64
            | Time32(_)
            | Time64(_)
            | Timestamp(_, _)
            | Duration(_)
            | Decimal128(_, _)
            | Decimal256(_, _)
    )
}

/// Chunk orders sorted in this process (by lookups, or ahead of them).
static ORDERS_SORTED: AtomicU64 = AtomicU64::new(0);
/// Chunk orders taken from the state store with their base at recovery.
static ORDERS_LOADED: AtomicU64 = AtomicU64::new(0);

/// How many chunk orders this process has sorted, and how many it loaded
/// from the state store instead (for the server's metrics).
pub fn order_counts() -> (u64, u64) {
    (
        ORDERS_SORTED.load(AtomicOrdering::Relaxed),
        ORDERS_LOADED.load(AtomicOrdering::Relaxed),
    )
}

/// A chunk's order by some columns, once sorted.
type OrderSlot = Arc<OnceLock<UInt32Array>>;

/// The hashes of a chunk's rows' values in some columns.
type ValueHashes = Arc<HashSet<u64>>;

/// The orders of one chunk built so far, by their columns, and the hashes
/// of its rows' values in columns unique constraints check.
#[derive(Debug, Default)]
pub(crate) struct ChunkOrders {
    built: Mutex<Vec<(Vec<usize>, OrderSlot)>>,
    hashed: Mutex<Vec<(Vec<usize>, ValueHashes)>>,
}

impl ChunkOrders {
    /// The hashes ([`crate::row_index::hash_keys`]) of the values in
    /// `columns` of every row of `batch` (this chunk's), computed the first
    /// time they are asked for: a unique constraint's check looks a
    /// written row's hash up here before it searches the chunk's order.
    pub(crate) fn value_hashes(
        &self,
        batch: &RecordBatch,
        columns: &[usize],
    ) -> StateResult<ValueHashes> {
        if let Some((_, hashes)) = self
            .hashed
            .lock()
            .expect("chunk hashes lock")
            .iter()
            .find(|(c, _)| c == columns)
        {
            return Ok(hashes.clone());
        }
        let values: Vec<ArrayRef> = columns.iter().map(|&c| batch.column(c).clone()).collect();
        let hashes: ValueHashes =
            Arc::new(hash_keys(&values, batch.num_rows())?.into_iter().collect());
        self.hashed
            .lock()
            .expect("chunk hashes lock")
            .push((columns.to_vec(), hashes.clone()));
        Ok(hashes)
    }

    /// Whether the order of `columns` is built.
    pub(crate) fn has(&self, columns: &[usize]) -> bool {
        let built = self.built.lock().expect("chunk orders lock");
        built
            .iter()
            .any(|(c, slot)| c == columns && slot.get().is_some())
    }

    /// The rows of `batch` (this chunk's) in the order of `columns`,
    /// sorted now if no lookup needed that order before (lookups racing
    /// to sort a chunk first each sort it; the first result is kept).
    pub(crate) fn order(
        &self,
        batch: &RecordBatch,
        columns: &[usize],
    ) -> Result<UInt32Array, ArrowError> {
        let slot = {
            let mut built = self.built.lock().expect("chunk orders lock");
            match built.iter().find(|(c, _)| c == columns) {
                Some((_, slot)) => slot.clone(),
                None => {
                    let slot = Arc::new(OnceLock::new());
                    built.push((columns.to_vec(), slot.clone()));
                    slot
                }
            }
        };
        if let Some(order) = slot.get() {
            return Ok(order.clone());
        }
        let sorted = sort_order(batch, columns)?;
        ORDERS_SORTED.fetch_add(1, AtomicOrdering::Relaxed);
        Ok(slot.get_or_init(|| sorted).clone())
    }

    /// The columns of every order built so far.
    pub(crate) fn built_columns(&self) -> Vec<Vec<usize>> {
        let built = self.built.lock().expect("chunk orders lock");
        built
            .iter()
            .filter(|(_, slot)| slot.get().is_some())
            .map(|(c, _)| c.clone())
            .collect()
    }

    /// Sets the order of `columns` to `order`, sorted elsewhere (an order
    /// stored with a base and checked by [`is_order_of`]), unless one is
    /// built already.
    pub(crate) fn seed(&self, columns: &[usize], order: UInt32Array) {
        let mut built = self.built.lock().expect("chunk orders lock");
        let seeded = match built.iter().find(|(c, _)| c == columns) {
            Some((_, slot)) => slot.set(order).is_ok(),
            None => {
                built.push((columns.to_vec(), Arc::new(OnceLock::from(order))));
                true
            }
        };
        if seeded {
            ORDERS_LOADED.fetch_add(1, AtomicOrdering::Relaxed);
        }
    }
}

/// The rows of `batch` in the order of `columns`: a permutation of its row
/// numbers, sorted with Arrow's `lexsort`.
pub(crate) fn sort_order(
    batch: &RecordBatch,
    columns: &[usize],
) -> Result<UInt32Array, ArrowError> {
    let sort: Vec<SortColumn> = columns
        .iter()
        .map(|&c| SortColumn {
            values: batch.column(c).clone(),
            options: Some(ORDER),
        })
        .collect();
    lexsort_to_indices(&sort, None)
}

/// Whether `order` is an order of `batch` by `columns` as [`sort_order`]
/// makes one: every row number once, in ascending order of the columns.
/// One pass, far cheaper than sorting again; a stored order is used only
/// if it passes. The pass loops over rows through Arrow's comparators
/// (Arrow has no kernel that checks a multi-column order), once per base
/// at recovery, not per read.
pub(crate) fn is_order_of(
    order: &UInt32Array,
    batch: &RecordBatch,
    columns: &[usize],
) -> Result<bool, ArrowError> {
    let rows = batch.num_rows();
    if order.len() != rows || order.null_count() > 0 {
        return Ok(false);
    }
    let mut seen = vec![false; rows];
    for &row in order.values().iter() {
        match seen.get_mut(row as usize) {
            Some(s) if !*s => *s = true,
            _ => return Ok(false),
        }
    }
    let comparators = columns
        .iter()
        .map(|&c| {
            let column = batch.column(c).as_ref();
            make_comparator(column, column, ORDER)
        })
        .collect::<Result<Vec<DynComparator>, _>>()?;
    let sorted = order.values().windows(2).all(|pair| {
        let (a, b) = (pair[0] as usize, pair[1] as usize);
        comparators
            .iter()
            .map(|c| c(a, b))
            .find(|o| o.is_ne())
            .unwrap_or(Ordering::Equal)
            .is_le()
    });
    Ok(sorted)
}

/// The row numbers of `batch` that `selection` selects on the order of
/// `columns`, each once (the live bits are the caller's).
pub(crate) fn select_rows(
    orders: &ChunkOrders,
    batch: &RecordBatch,
    columns: &[usize],
    selection: &KeySelection,
) -> Result<Vec<u32>, ArrowError> {
    let order = orders.order(batch, columns)?;
    let order = order.values();
    let mut rows = Vec::new();
    match selection {
        KeySelection::Equal(probes) => {
            rows = equal_rows(order, batch, columns, probes, Nulls::MatchNothing)?
                .into_iter()
                .map(|(_, row)| row)
                .collect();
            // An `IN` list may name a key twice.
            if probes.first().is_some_and(|p| p.len() > 1) {
                rows.sort_unstable();
                rows.dedup();
            }
        }
        KeySelection::Range { lower, upper } => {
            let column = batch.column(columns[0]);
            let bound = |value: &ArrayRef| make_comparator(column.as_ref(), value.as_ref(), ORDER);
            let start = match lower {
                Bound::Unbounded => 0,
                Bound::Included(v) => {
                    let c = bound(v)?;
                    order.partition_point(|&r| c(r as usize, 0).is_lt())
                }
                Bound::Excluded(v) => {
                    let c = bound(v)?;
                    order.partition_point(|&r| c(r as usize, 0).is_le())
                }
            };
            let end = match upper {
                Bound::Unbounded => order.partition_point(|&r| column.is_valid(r as usize)),
                Bound::Included(v) => {
                    let c = bound(v)?;
                    order.partition_point(|&r| c(r as usize, 0).is_le())
                }
                Bound::Excluded(v) => {
                    let c = bound(v)?;
                    order.partition_point(|&r| c(r as usize, 0).is_lt())
                }
            };
            if start < end {
                rows.extend_from_slice(&order[start..end]);
            }
        }
    }
    Ok(rows)
}

/// For each probe row of `probes` (one array per column of `columns`),
/// the rows of `batch` whose columns equal it, as (probe, row) pairs in
/// probe order; live or not (the live bits are the caller's).
pub(crate) fn matching_rows(
    orders: &ChunkOrders,
    batch: &RecordBatch,
    columns: &[usize],
    probes: &[ArrayRef],
    nulls: Nulls,
) -> Result<Vec<(usize, u32)>, ArrowError> {
    let order = orders.order(batch, columns)?;
    equal_rows(order.values(), batch, columns, probes, nulls)
}

/// What a NULL in a probe matches.
#[derive(Clone, Copy, PartialEq)]
pub(crate) enum Nulls {
    /// Nothing (SQL's `=`: lookups, unique constraints).
    MatchNothing,
    /// A NULL in the same column: a key's identity, as the key index
    /// ([`crate::row_index`]) treats them.
    MatchNulls,
}

/// [`matching_rows`] on an order already at hand.
fn equal_rows(
    order: &[u32],
    batch: &RecordBatch,
    columns: &[usize],
    probes: &[ArrayRef],
    nulls: Nulls,
) -> Result<Vec<(usize, u32)>, ArrowError> {
    let comparators = probes
        .iter()
        .zip(columns)
        .map(|(probe, &c)| make_comparator(batch.column(c).as_ref(), probe.as_ref(), ORDER))
        .collect::<Result<Vec<DynComparator>, _>>()?;
    let count = probes.first().map_or(0, |p| p.len());
    let mut rows = Vec::new();
    for probe in 0..count {
        if nulls == Nulls::MatchNothing && probes.iter().any(|p| p.is_null(probe)) {
            continue;
        }
        let compare = |row: &u32| {
            comparators
                .iter()
                .map(|c| c(*row as usize, probe))
                .find(|o| o.is_ne())
                .unwrap_or(Ordering::Equal)
        };
        let (start, end) = equal_range(order, compare);
        rows.extend(order[start..end].iter().map(|&row| (probe, row)));
    }
    Ok(rows)
}

/// The positions in `order` of the rows `compare` finds equal to the
/// probe (`Less`: the row sorts before it).
fn equal_range(order: &[u32], compare: impl Fn(&u32) -> Ordering) -> (usize, usize) {
    let start = order.partition_point(|r| compare(r).is_lt());
    let end = start + order[start..].partition_point(|r| compare(r).is_le());
    (start, end)
}
