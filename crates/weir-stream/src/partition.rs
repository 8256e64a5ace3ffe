//! Partitioning by key, for operators that run as several instances: a
//! key hashes into one of [`VNODES`] virtual partitions, and a
//! [`Placement`] gives each virtual partition to one worker.
//!
//! The number of virtual partitions never changes, so state can be cut by
//! virtual partition and dealt to however many workers a restart has: a
//! worker restores the state rows whose keys hash into its partitions
//! ([`Placement::owned_rows`]), the same rows an exchange sends it
//! ([`Placement::split`]). Both hash the key columns with the same seed,
//! so a key's input rows and its state rows meet in one worker.

use datafusion::arrow::array::{ArrayRef, BooleanArray, UInt32Array};
use datafusion::arrow::compute::filter_record_batch;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::hash_utils::{create_hashes, RandomState};

use crate::{Changes, Result};

/// How many virtual partitions keys hash into.
pub const VNODES: usize = 256;

/// The hash that places keys; any process of a cluster computes the same.
const PLACEMENT_HASH: RandomState = RandomState::with_seed(0x7765_6972);

/// Each row's virtual partition: the top 8 bits of the hash of its key
/// columns. Rows of an empty key all fall in partition 0.
pub fn vnodes(keys: &[ArrayRef], num_rows: usize) -> Result<Vec<u8>> {
    let mut hashes = vec![0u64; num_rows];
    if !keys.is_empty() {
        create_hashes(keys, &PLACEMENT_HASH, &mut hashes)?;
    }
    Ok(hashes.iter().map(|h| (h >> 56) as u8).collect())
}

/// Which worker owns each virtual partition: partition `v` belongs to
/// worker `v % workers`.
#[derive(Debug, Clone)]
pub struct Placement {
    owner: [u16; VNODES],
    workers: usize,
}

impl Placement {
    /// The placement over `workers` workers (at least 1, at most
    /// [`VNODES`]).
    pub fn new(workers: usize) -> Self {
        let workers = workers.clamp(1, VNODES);
        let mut owner = [0u16; VNODES];
        for (vnode, worker) in owner.iter_mut().enumerate() {
            *worker = (vnode % workers) as u16;
        }
        Placement { owner, workers }
    }

    /// How many workers share the partitions.
    pub fn workers(&self) -> usize {
        self.workers
    }

    /// The worker that owns virtual partition `vnode`.
    pub fn owner(&self, vnode: u8) -> usize {
        usize::from(self.owner[usize::from(vnode)])
    }

    /// Splits `changes` among the workers that own its rows' keys (`keys`:
    /// the key columns, one value per row): the rows are put in worker
    /// order with one `take`, and each worker's share is a slice of it.
    /// Entry `w` is worker `w`'s share, `None` if it gets no row.
    pub fn split(&self, changes: &Changes, keys: &[ArrayRef]) -> Result<Vec<Option<Changes>>> {
        let rows = changes.len();
        let owners: Vec<u16> = vnodes(keys, rows)?
            .into_iter()
            .map(|v| self.owner[usize::from(v)])
            .collect();
        // A counting sort by owner: where each worker's rows start.
        let mut starts = vec![0usize; self.workers + 1];
        for &owner in &owners {
            starts[usize::from(owner) + 1] += 1;
        }
        for w in 0..self.workers {
            starts[w + 1] += starts[w];
        }
        let mut shares: Vec<Option<Changes>> = vec![None; self.workers];
        if let Some(only) = (0..self.workers).find(|&w| starts[w + 1] - starts[w] == rows) {
            if rows > 0 {
                shares[only] = Some(changes.clone());
            }
            return Ok(shares);
        }
        let mut next = starts.clone();
        let mut order = vec![0u32; rows];
        for (row, &owner) in owners.iter().enumerate() {
            let slot = &mut next[usize::from(owner)];
            order[*slot] = row as u32;
            *slot += 1;
        }
        let sorted = changes.take(&UInt32Array::from(order))?;
        for (w, share) in shares.iter_mut().enumerate() {
            let len = starts[w + 1] - starts[w];
            if len > 0 {
                *share = Some(sorted.slice(starts[w], len));
            }
        }
        Ok(shares)
    }

    /// The rows of `rows` whose keys (`keys`, one value per row) `worker`
    /// owns: its share of a state table at a restore.
    pub fn owned_rows(
        &self,
        worker: usize,
        rows: &RecordBatch,
        keys: &[ArrayRef],
    ) -> Result<RecordBatch> {
        let mask: BooleanArray = vnodes(keys, rows.num_rows())?
            .into_iter()
            .map(|v| Some(self.owner(v) == worker))
            .collect();
        Ok(filter_record_batch(rows, &mask)?)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use datafusion::arrow::array::{Int64Array, StringArray};
    use datafusion::arrow::datatypes::{DataType, Field, Schema};

    use super::*;

    fn changes(keys: &[i64]) -> Changes {
        let schema = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int64, true),
            Field::new("s", DataType::Utf8, true),
        ]));
        let rows = RecordBatch::try_new(
            schema,
            vec![
                Arc::new(Int64Array::from_iter_values(keys.iter().copied())),
                Arc::new(StringArray::from_iter_values(
                    keys.iter().map(|k| format!("row {k}")),
                )),
            ],
        )
        .unwrap();
        let weights =
            Int64Array::from_iter_values(keys.iter().map(|&k| if k % 3 == 0 { -1 } else { 1 }));
        Changes::new(rows, weights).unwrap()
    }

    fn keys_of(changes: &Changes) -> Vec<i64> {
        let column = changes
            .rows
            .column(0)
            .as_any()
            .downcast_ref::<Int64Array>()
            .unwrap();
        column.values().to_vec()
    }

    #[test]
    fn every_row_goes_to_the_owner_of_its_key_once() {
        let keys: Vec<i64> = (0..5000).map(|i| (i * 7919) % 1000).collect();
        let input = changes(&keys);
        for workers in [1, 2, 3, 8] {
            let placement = Placement::new(workers);
            let shares = placement.split(&input, &input.rows.columns()[..1]).unwrap();
            assert_eq!(shares.len(), workers);
            let mut seen = Vec::new();
            for (worker, share) in shares.iter().enumerate() {
                let Some(share) = share else { continue };
                // Rows keep their values and weights, and their order.
                let vnodes = vnodes(&share.rows.columns()[..1], share.len()).unwrap();
                assert!(vnodes.iter().all(|&v| placement.owner(v) == worker));
                for (i, k) in keys_of(share).into_iter().enumerate() {
                    let weight = share.weights.value(i);
                    assert_eq!(weight, if k % 3 == 0 { -1 } else { 1 });
                    seen.push(k);
                }
            }
            let mut expected = keys.clone();
            expected.sort_unstable();
            seen.sort_unstable();
            assert_eq!(seen, expected, "{workers} workers");
            if workers > 1 {
                assert!(
                    shares.iter().all(Option::is_some),
                    "1000 keys reach every one of {workers} workers"
                );
            }
        }
    }

    #[test]
    fn a_key_lands_where_its_state_is_restored() {
        // The input rows of a key and the state rows holding the same key
        // (here: the same column, in a batch of another shape) meet in one
        // worker, for any number of workers.
        let keys: Vec<i64> = (0..300).collect();
        let input = changes(&keys);
        let state = RecordBatch::try_new(
            Arc::new(Schema::new(vec![Field::new("k", DataType::Int64, true)])),
            vec![Arc::new(Int64Array::from_iter_values(keys.iter().copied()))],
        )
        .unwrap();
        for workers in [1, 2, 5] {
            let placement = Placement::new(workers);
            let shares = placement.split(&input, &input.rows.columns()[..1]).unwrap();
            for (worker, share) in shares.into_iter().enumerate() {
                let owned = placement
                    .owned_rows(worker, &state, &state.columns()[..1])
                    .unwrap();
                let restored = owned
                    .column(0)
                    .as_any()
                    .downcast_ref::<Int64Array>()
                    .unwrap();
                let mut routed = share.map(|s| keys_of(&s)).unwrap_or_default();
                routed.sort_unstable();
                assert_eq!(restored.values().to_vec(), routed);
            }
        }
    }

    #[test]
    fn rows_without_a_key_go_to_one_worker() {
        let input = changes(&[1, 2, 3]);
        let shares = Placement::new(4).split(&input, &[]).unwrap();
        assert_eq!(shares[0].as_ref().map(Changes::len), Some(3));
        assert!(shares[1..].iter().all(Option::is_none));
    }
}
