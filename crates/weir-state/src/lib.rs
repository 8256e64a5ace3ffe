//! Weir's state layer: keyed state tables kept in memory, made durable as
//! incremental epoch deltas in an object store.
//!
//! # Brief overview
//!
//! - [`StateTable`] holds one table's rows, keyed by its primary key (or a
//!   hidden row id), and remembers which keys changed since the last epoch.
//!   [`StateTable::snapshot`] returns an immutable [`TableSnapshot`] that
//!   readers scan while writers go on.
//! - [`StateStore`] owns the object store. [`StateStore::commit`] writes one
//!   epoch: a data object with every table's delta, then the epoch's
//!   manifest. The manifest write is the commit point.
//! - [`StateStore::recover`] finds the newest complete manifest and rebuilds
//!   every table from its base and delta files.
//!
//! The object layout under the state root:
//!
//! ```text
//! manifest/<epoch>      catalog + live files per table; newest complete one wins
//! data/<epoch>-<n>      the deltas written in that epoch, all tables together
//! base/<table>/<epoch>  a table's merged state, written by background compaction
//! ```
//!
//! [`Compactor`] merges delta chains into bases beside the commits; the
//! next commit names a merged base in place of what it merged.
#![warn(missing_docs)]

mod codec;
mod compact;
mod error;
#[cfg(any(test, feature = "testing"))]
pub mod faulty;
mod history;
mod key_index;
mod layout;
mod manifest;
mod order;
mod row_index;
mod store;
mod table;
mod unique;

pub use compact::{CompactedBase, CompactionJob, Compactor};
pub use error::{StateError, StateResult};
pub use key_index::{KeyId, KeyIndex, Probe};
pub use manifest::{
    BaseOrders, DeltaFiles, FileSlice, Manifest, PendingDelivery, ReaderPosition, TableFiles,
    TableId,
};
pub use order::{order_counts, orderable, KeySelection};
pub use store::{
    open_location, CommitStats, EpochDelta, SinkChange, SliceReader, StateStore, StoreConfig,
    TableChange,
};
pub use table::{
    rows_after, DeltaBatches, KeyMatch, KeyViolation, RowPosition, StateTable, TableSnapshot,
    TableSpec, ROW_ID_COLUMN,
};
