//! The manifest: what one committed epoch consists of.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Stable identifier of a state table. Names can be reused after a DROP; ids
/// never are.
pub type TableId = u64;

/// Where a view's reading of one source stands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ReaderPosition {
    /// The position of each of the source's splits (rows read from it).
    Splits(Vec<u64>),
    /// Rows read in the source's own order: what manifests written before
    /// sources had splits hold. The source converts it to split positions.
    Offset(u64),
}

/// A byte range of an object in the store.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileSlice {
    /// Object path relative to the state root.
    pub path: String,
    /// First byte of the slice.
    pub offset: u64,
    /// Length of the slice in bytes.
    pub len: u64,
}

/// One epoch's change to a table: the rows whose keys are present after the
/// epoch (upserts) and the keys that are absent after it (deletes).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeltaFiles {
    /// Epoch that wrote the delta.
    pub epoch: u64,
    /// Full rows to insert or replace, by key.
    pub upserts: Option<FileSlice>,
    /// Key columns of rows to delete.
    pub deletes: Option<FileSlice>,
}

/// The live files of one table: an optional base and the deltas after it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TableFiles {
    /// The merged state up to some epoch.
    pub base: Option<FileSlice>,
    /// Deltas committed after the base, oldest first.
    pub deltas: Vec<DeltaFiles>,
    /// Size of the base in bytes (0 without a base).
    pub base_bytes: u64,
    /// Total size of the deltas in bytes.
    pub delta_bytes: u64,
    /// The next hidden row id to hand out (tables without a primary key).
    pub next_row_id: u64,
    /// The base's rows sorted by the columns reads look them up by,
    /// written with the base by compaction (see [`BaseOrders`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_orders: Option<BaseOrders>,
}

/// A base's orders: for each list of columns, the base's row numbers in
/// ascending order of those columns (`order.rs`), stored as one batch of
/// `UInt32` columns after the base's rows in the same object, so that
/// recovery need not sort them again before the first lookup.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BaseOrders {
    /// Where the batch of orders is stored.
    pub slice: FileSlice,
    /// The columns of each order, one per column of the batch.
    pub columns: Vec<Vec<usize>>,
}

impl TableFiles {
    /// Every object path this table's files live in.
    pub fn paths(&self) -> impl Iterator<Item = &str> {
        let deltas = self
            .deltas
            .iter()
            .flat_map(|d| d.upserts.iter().chain(d.deletes.iter()));
        let orders = self.base_orders.iter().map(|o| &o.slice);
        self.base
            .iter()
            .chain(orders)
            .chain(deltas)
            .map(|s| s.path.as_str())
    }
}

/// A committed epoch: the catalog and the files of every table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// Format version of this manifest.
    pub version: u32,
    /// The epoch this manifest commits.
    pub epoch: u64,
    /// The server's catalog, opaque to the state layer.
    pub catalog: serde_json::Value,
    /// Live files per table.
    pub tables: BTreeMap<TableId, TableFiles>,
    /// Where every source reader stands at this epoch, by a key the
    /// server chooses; recovery rewinds readers to it.
    #[serde(default)]
    pub sources: BTreeMap<String, ReaderPosition>,
    /// The format of the operator state and view tables it names (see
    /// [`Manifest::STATE_FORMAT`]); 1 for manifests written before the
    /// field existed.
    #[serde(default = "first_state_format")]
    pub state_format: u32,
    /// Each sink's output changes of committed epochs that it has not yet
    /// delivered, oldest first: kept until the sink says it delivered
    /// them, so that a sink delivers every committed epoch exactly once
    /// across crashes.
    #[serde(default)]
    pub sinks: BTreeMap<TableId, Vec<PendingDelivery>>,
}

/// One epoch's output changes of a sink, not yet delivered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingDelivery {
    /// The epoch whose changes these are.
    pub epoch: u64,
    /// How many changes (rows with a weight).
    pub rows: u64,
    /// Where they are stored.
    pub slice: FileSlice,
}

fn first_state_format() -> u32 {
    1
}

impl Manifest {
    /// The manifest format this build writes.
    pub const VERSION: u32 = 1;

    /// The format of operator state this build writes and reads:
    ///
    /// 1. every operator state a bag of rows keyed by the whole row;
    /// 2. columnar operator state: aggregates' group tables, rows with
    ///    durable ids for join sides.
    /// 3. PostgreSQL's result types: integer literals are `integer`,
    ///    `sum(bigint)` and `avg` of integers are `numeric`, so aggregate
    ///    state and view columns of those types changed.
    /// 4. PostgreSQL's digits for quotients and averages of `numeric`s:
    ///    their columns (and the state of views over such views) have a
    ///    new scale.
    /// 5. `count(DISTINCT x)` keeps each group's distinct values with
    ///    their counts (a value table) instead of the group's input rows.
    ///
    /// A server refuses state of a newer format; views of an older one are
    /// rebuilt from their inputs at recovery.
    pub const STATE_FORMAT: u32 = 5;

    /// The manifest of an empty database before its first commit.
    pub fn empty(catalog: serde_json::Value) -> Self {
        Manifest {
            version: Self::VERSION,
            epoch: 0,
            catalog,
            tables: BTreeMap::new(),
            sources: BTreeMap::new(),
            state_format: Self::STATE_FORMAT,
            sinks: BTreeMap::new(),
        }
    }

    /// Every object this manifest names: its tables' files and its sinks'
    /// undelivered changes.
    pub fn paths(&self) -> impl Iterator<Item = &str> {
        let sinks = self.sinks.values().flatten().map(|p| p.slice.path.as_str());
        self.tables.values().flat_map(|t| t.paths()).chain(sinks)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reader_positions_read_both_forms() {
        let positions: BTreeMap<String, ReaderPosition> =
            serde_json::from_str(r#"{"1/2": 17, "1/3": [4, 0, 9]}"#).expect("parses");
        assert_eq!(positions["1/2"], ReaderPosition::Offset(17));
        assert_eq!(positions["1/3"], ReaderPosition::Splits(vec![4, 0, 9]));
        let written = serde_json::to_string(&positions).expect("serializes");
        assert_eq!(written, r#"{"1/2":17,"1/3":[4,0,9]}"#);
    }
}
