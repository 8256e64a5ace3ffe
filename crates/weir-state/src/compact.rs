//! Background compaction: merging a table's delta chain into a new base
//! without holding up commits.
//!
//! 1. [`StateStore::compaction_jobs`] lists the tables of the newest
//!    manifest whose chains are due ([`StoreConfig`]): their files, the
//!    spec they were last committed with, and, when the caller has one,
//!    the table's in-memory snapshot at that manifest's epoch.
//!    A table whose snapshot has orders that reads use (`order.rs`) and
//!    that its base does not store is due too, even without deltas.
//! 2. [`Compactor::compact`] (no lock on the store; commits go on) writes
//!    the snapshot, or else reads the base and deltas back and applies them
//!    as recovery does, as `base/<table>/<epoch of the last delta merged>`
//!    (of the manifest, when there are no deltas), followed in the same
//!    object by the orders reads use, sorted ([`BaseOrders`]).
//!    A snapshot is the same rows for a fraction of the work (no decoding,
//!    no index to rebuild): tables and view outputs have one; operator
//!    state, which lives in the stream worker, is merged from the store.
//! 3. [`StateStore::install`] hands the new base to the store; the next
//!    commit names it in place of the base and deltas it merged, provided
//!    the chain still starts with them (otherwise the base is stale and is
//!    deleted).
//!
//! A crash at any point loses nothing: the new base is written before any
//! manifest names it (an unnamed base is swept at recovery), and the
//! objects it replaces are deleted only when no retained manifest names
//! them any more.

use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, RecordBatch};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use object_store::path::Path;
use object_store::ObjectStore;

use crate::codec;
use crate::error::StateResult;
use crate::layout::base_path;
use crate::manifest::{BaseOrders, FileSlice, TableFiles, TableId};
use crate::order::sort_order;
use crate::store::{StateStore, StoreConfig};
use crate::table::{TableSnapshot, TableSpec};

/// A table whose delta chain is due to be merged.
#[derive(Debug, Clone)]
pub struct CompactionJob {
    /// The table.
    pub table: TableId,
    /// How its rows are stored and keyed.
    pub spec: TableSpec,
    /// Its files in the newest manifest.
    pub files: TableFiles,
    /// Its contents at that manifest's epoch, if the caller holds them.
    pub snapshot: Option<TableSnapshot>,
    /// The orders to store with the new base: those the snapshot's reads
    /// have built.
    pub orders: Vec<Vec<usize>>,
    /// The epoch of that manifest.
    pub epoch: u64,
}

/// A merged base, waiting for the next commit to name it.
#[derive(Debug, Clone)]
pub struct CompactedBase {
    /// The table.
    pub table: TableId,
    /// The base the merge started from.
    pub replaces: Option<FileSlice>,
    /// How many deltas (the first ones of the chain) it merged.
    pub merged: usize,
    /// The epoch of the last delta merged.
    pub through_epoch: u64,
    /// The new base.
    pub base: FileSlice,
    /// Its orders, stored after it in the same object.
    pub orders: Option<BaseOrders>,
}

/// Reads and writes objects for compaction, beside the store's commits.
#[derive(Debug)]
pub struct Compactor {
    /// The same objects, without the commit state.
    objects: StateStore,
}

impl Compactor {
    pub(crate) fn new(store: Arc<dyn ObjectStore>, root: Path, config: StoreConfig) -> Self {
        Compactor {
            objects: StateStore::with_store(store, root, config),
        }
    }

    /// Merges `job`'s base and deltas into a new base object.
    pub async fn compact(&self, job: &CompactionJob) -> StateResult<CompactedBase> {
        // Without deltas (a rewrite for orders) the base is named by the
        // manifest's epoch, after every earlier base's last delta.
        let through_epoch = job.files.deltas.last().map_or(job.epoch, |d| d.epoch);
        // A chain that is one delta of upserts and nothing else (a new
        // view's backfilled state, a table's first load) already is a base:
        // name its slice instead of writing it again, unless orders are to
        // be stored with it.
        if let (None, [only], true) = (
            &job.files.base,
            job.files.deltas.as_slice(),
            job.orders.is_empty(),
        ) {
            if let (Some(upserts), None) = (&only.upserts, &only.deletes) {
                return Ok(CompactedBase {
                    table: job.table,
                    replaces: None,
                    merged: 1,
                    through_epoch,
                    base: upserts.clone(),
                    orders: None,
                });
            }
        }
        let rows = match &job.snapshot {
            Some(snapshot) => snapshot.stored_rows()?,
            None => self.objects.load_rows(job.spec.clone(), &job.files).await?,
        };
        let mut bytes = codec::encode(&rows)?;
        let path = base_path(self.objects.root(), job.table, through_epoch);
        let relative = self.objects.relative(&path);
        let base = FileSlice {
            path: relative.clone(),
            offset: 0,
            len: bytes.len() as u64,
        };
        let orders = match orders_batch(&rows, &job.orders)? {
            Some(batch) => {
                codec::encode_into(&batch, &mut bytes)?;
                Some(BaseOrders {
                    slice: FileSlice {
                        path: relative,
                        offset: base.len,
                        len: bytes.len() as u64 - base.len,
                    },
                    columns: job.orders.clone(),
                })
            }
            None => None,
        };
        self.objects.put(&path, bytes).await?;
        Ok(CompactedBase {
            table: job.table,
            replaces: job.files.base.clone(),
            merged: job.files.deltas.len(),
            through_epoch,
            base,
            orders,
        })
    }
}

/// `rows` sorted by each of `orders`: one `UInt32` column of row numbers
/// per order, or `None` without orders.
fn orders_batch(rows: &RecordBatch, orders: &[Vec<usize>]) -> StateResult<Option<RecordBatch>> {
    if orders.is_empty() {
        return Ok(None);
    }
    let mut fields = Vec::with_capacity(orders.len());
    let mut columns: Vec<ArrayRef> = Vec::with_capacity(orders.len());
    for (i, order) in orders.iter().enumerate() {
        fields.push(Field::new(format!("order_{i}"), DataType::UInt32, false));
        columns.push(Arc::new(sort_order(rows, order)?));
    }
    Ok(Some(RecordBatch::try_new(
        Arc::new(Schema::new(fields)),
        columns,
    )?))
}

impl StateStore {
    /// The tables of the newest manifest whose delta chains are due for a
    /// merge, and neither being merged nor merged and waiting for a commit
    /// to name the result. Their files stay pinned (garbage
    /// collection keeps them) until [`StateStore::install`] or
    /// [`StateStore::release`].
    /// `snapshot` gives a table's contents at the newest manifest's epoch
    /// where the caller holds them.
    pub fn compaction_jobs(
        &mut self,
        snapshot: impl Fn(TableId) -> Option<TableSnapshot>,
    ) -> Vec<CompactionJob> {
        let Some(manifest) = self.newest() else {
            return Vec::new();
        };
        let jobs: Vec<CompactionJob> = manifest
            .tables
            .iter()
            .filter(|(id, _)| !self.pinned.contains_key(id) && !self.installed.contains_key(id))
            .filter_map(|(&id, files)| {
                let snapshot = snapshot(id);
                let orders = snapshot
                    .as_ref()
                    .map_or_else(Vec::new, |s| s.built_orders());
                let stored = files.base_orders.as_ref().map(|o| o.columns.as_slice());
                let orders_missing = orders
                    .iter()
                    .any(|order| !stored.is_some_and(|s| s.contains(order)));
                let has_rows = files.base.is_some() || !files.deltas.is_empty();
                let due = self.config().needs_base(files) || orders_missing && has_rows;
                if !due {
                    return None;
                }
                Some(CompactionJob {
                    table: id,
                    spec: self.spec_of(id)?.clone(),
                    files: files.clone(),
                    snapshot,
                    orders,
                    epoch: manifest.epoch,
                })
            })
            .collect();
        for job in &jobs {
            self.pinned.insert(job.table, job.files.clone());
        }
        jobs
    }

    /// A handle that merges chains while commits go on.
    pub fn compactor(&self) -> Compactor {
        Compactor::new(
            self.object_store(),
            self.root().clone(),
            self.config().clone(),
        )
    }
}

/// Replaces the merged part of `files` with `compacted`'s base, if the
/// chain still starts with what was merged. Returns whether it did.
pub(crate) fn apply(files: &mut TableFiles, compacted: &CompactedBase) -> bool {
    let still_there = files.base == compacted.replaces
        && match compacted.merged {
            // A rewrite of the base alone, for its orders.
            0 => files.base.is_some(),
            merged => files
                .deltas
                .get(merged - 1)
                .is_some_and(|d| d.epoch == compacted.through_epoch),
        };
    if !still_there {
        return false;
    }
    files.deltas.drain(..compacted.merged);
    files.base = Some(compacted.base.clone());
    files.base_orders = compacted.orders.clone();
    files.base_bytes = compacted.base.len;
    files.delta_bytes = files
        .deltas
        .iter()
        .flat_map(|d| d.upserts.iter().chain(d.deletes.iter()))
        .map(|s| s.len)
        .sum();
    true
}
