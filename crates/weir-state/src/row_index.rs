//! [`RowIndex`]: a table's key index that stores no keys. Each entry is a
//! slot number; the key itself is in the table's row, which the index
//! compares against when hashes meet.
//!
//! A key is hashed from its Arrow columns with DataFusion's vectorized
//! `create_hashes` (no per-row encoding), and equal hashes are confirmed by
//! comparing the probed row's key columns with the stored row's, with
//! Arrow's comparators. Inserting a key that is not there compares nothing.
//!
//! Memory per key: about 5 bytes of hash table (at its load factor, about
//! 6) and the 8-byte hash kept for growing it.

use std::cell::RefCell;
use std::collections::HashMap;

use datafusion::arrow::array::ArrayRef;
use datafusion::arrow::array::{make_comparator, DynComparator};
use datafusion::arrow::compute::SortOptions;
use datafusion::common::hash_utils::{create_hashes, RandomState};
use hashbrown::HashTable;

use crate::error::StateResult;

/// A slot of a [`RowIndex`]: dense from 0, reused after removal.
pub type Slot = u32;

/// The hash of keys (any fixed seed does: it never leaves the process).
const KEY_HASH: RandomState = RandomState::with_seed(0x6b65_7973);

/// Key slots by hash (see the module documentation).
#[derive(Debug, Default, Clone)]
pub struct RowIndex {
    table: HashTable<Slot>,
    /// Per slot: its key's hash (for growing the table).
    hashes: Vec<u64>,
    free: Vec<Slot>,
}

impl RowIndex {
    /// One more than the largest slot handed out.
    pub fn slots(&self) -> usize {
        self.hashes.len()
    }

    /// Bytes held allocated.
    pub fn memory_size(&self) -> usize {
        self.table.allocation_size() + self.hashes.capacity() * 8 + self.free.capacity() * 4
    }

    /// The slot whose key hashes to `hash` and for which `same` holds
    /// (asked only of slots whose whole hash is equal).
    pub fn find(&self, hash: u64, same: impl FnMut(Slot) -> bool) -> Option<Slot> {
        let mut same = same;
        self.table
            .find(hash, |&slot| {
                self.hashes[slot as usize] == hash && same(slot)
            })
            .copied()
    }

    /// A new slot for a key hashing to `hash`, which the caller knows is
    /// not held.
    pub fn insert(&mut self, hash: u64) -> Slot {
        let slot = match self.free.pop() {
            Some(slot) => {
                self.hashes[slot as usize] = hash;
                slot
            }
            None => {
                self.hashes.push(hash);
                (self.hashes.len() - 1) as Slot
            }
        };
        let hashes = &self.hashes;
        self.table
            .insert_unique(hash, slot, |&other| hashes[other as usize]);
        slot
    }

    /// Removes the key in `slot`; the slot may be handed out again.
    pub fn remove(&mut self, slot: Slot) {
        let hash = self.hashes[slot as usize];
        if let Ok(entry) = self.table.find_entry(hash, |&other| other == slot) {
            entry.remove();
            self.free.push(slot);
        }
    }

    /// Sizes the table for `additional` more keys.
    pub fn reserve(&mut self, additional: usize) {
        let hashes = &self.hashes;
        self.table
            .reserve(additional, |&other| hashes[other as usize]);
    }
}

/// The hash of each row's key in `columns` (`rows` rows).
pub fn hash_keys(columns: &[ArrayRef], rows: usize) -> StateResult<Vec<u64>> {
    let mut hashes = vec![0; rows];
    if !columns.is_empty() {
        create_hashes(columns, &KEY_HASH, &mut hashes)
            .map_err(|e| crate::error::StateError::Internal(e.to_string()))?;
    }
    Ok(hashes)
}

/// Compares the key columns of probed rows with those of stored batches,
/// building Arrow comparators per stored batch the first time it is met.
pub struct KeyComparer<'a> {
    probe: &'a [ArrayRef],
    /// Which columns of a stored batch hold the key, in key order.
    key: &'a [usize],
    comparators: RefCell<HashMap<usize, Vec<DynComparator>>>,
}

impl<'a> KeyComparer<'a> {
    /// A comparer of the keys in `probe` with stored batches' `key`
    /// columns.
    pub fn new(probe: &'a [ArrayRef], key: &'a [usize]) -> Self {
        KeyComparer {
            probe,
            key,
            comparators: RefCell::new(HashMap::new()),
        }
    }

    /// Whether probed row `row` has the same key as row `at` of `stored`
    /// (a batch's columns), the batch the caller knows as `batch_id`. NULLs
    /// equal each other, floats compare by their total order (as they
    /// hash).
    pub fn same(&self, row: usize, batch_id: usize, stored: &[ArrayRef], at: usize) -> bool {
        let mut cache = self.comparators.borrow_mut();
        let comparators = cache.entry(batch_id).or_insert_with(|| {
            self.probe
                .iter()
                .zip(self.key)
                .map(|(probe, &column)| {
                    make_comparator(
                        probe.as_ref(),
                        stored[column].as_ref(),
                        SortOptions::default(),
                    )
                    .expect("key columns of one type compare")
                })
                .collect()
        });
        comparators.iter().all(|compare| compare(row, at).is_eq())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    use datafusion::arrow::array::{Float64Array, RecordBatch, StringArray};
    use datafusion::arrow::datatypes::{DataType, Field, Schema};

    #[test]
    fn keys_are_found_by_hash_and_comparison_and_slots_are_reused() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("s", DataType::Utf8, true),
            Field::new("f", DataType::Float64, true),
        ]));
        let stored = RecordBatch::try_new(
            schema,
            vec![
                Arc::new(StringArray::from(vec![Some("a"), None, Some("a")])),
                Arc::new(Float64Array::from(vec![Some(1.0), Some(f64::NAN), None])),
            ],
        )
        .unwrap();
        let hashes = hash_keys(stored.columns(), 3).unwrap();
        let mut index = RowIndex::default();
        let slots: Vec<Slot> = hashes.iter().map(|&h| index.insert(h)).collect();
        let probe: Vec<ArrayRef> = vec![
            Arc::new(StringArray::from(vec![None, Some("a"), Some("b")])),
            Arc::new(Float64Array::from(vec![Some(f64::NAN), None, Some(1.0)])),
        ];
        let probe_hashes = hash_keys(&probe, 3).unwrap();
        let key = [0, 1];
        let comparer = KeyComparer::new(&probe, &key);
        let find = |index: &RowIndex, row: usize| {
            index.find(probe_hashes[row], |slot| {
                comparer.same(
                    row,
                    0,
                    stored.columns(),
                    slots.iter().position(|&s| s == slot).unwrap(),
                )
            })
        };
        assert_eq!(
            find(&index, 0),
            Some(slots[1]),
            "NULL and NaN match themselves"
        );
        assert_eq!(find(&index, 1), Some(slots[2]));
        assert_eq!(find(&index, 2), None);
        index.remove(slots[1]);
        assert_eq!(find(&index, 0), None);
        assert_eq!(index.insert(7), slots[1], "the slot is reused");
    }
}
