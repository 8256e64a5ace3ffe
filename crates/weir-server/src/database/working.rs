//! The working state: what DML and DDL change in the open epoch, and the
//! cut that closes it.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use weir_state::{StateTable, TableChange, TableId, TableSnapshot};

use crate::catalog::{Catalog, TableDef};
use crate::error::{WeirError, WeirResult};

use super::*;

/// The state DML and DDL change, one statement at a time.
#[derive(Debug)]
pub struct WorkingState {
    /// The catalog including changes not yet committed.
    pub catalog: Catalog,
    /// Tables by id.
    pub tables: HashMap<TableId, StateTable>,
    /// The epoch that changes made now belong to.
    pub epoch: u64,
    /// Views being created, by token: the relations they read (so that
    /// those tables record their changes).
    pub pending: HashMap<u64, BTreeSet<String>>,
    /// Where each table a connector feeds stands in its upstream (a
    /// PostgreSQL LSN; 0 until its snapshot is complete), as of the
    /// changes in `tables`: checkpointed with them in one manifest.
    pub table_positions: BTreeMap<TableId, u64>,
    pub(super) catalog_changed: bool,
    /// A table position moved since the last cut.
    pub(super) positions_moved: bool,
    /// A CHECKPOINT asked for a commit even without changes.
    pub(super) forced: bool,
}

impl WorkingState {
    /// A transaction block's private state: `catalog` and no tables yet
    /// (the block adds copies of the tables it writes to `tables`).
    pub fn private(catalog: Catalog) -> Self {
        WorkingState {
            catalog,
            tables: HashMap::new(),
            epoch: 0,
            pending: HashMap::new(),
            table_positions: BTreeMap::new(),
            catalog_changed: false,
            positions_moved: false,
            forced: false,
        }
    }

    /// A snapshot of the working state's tables (without materialized
    /// views, which the stream worker holds; see
    /// [`Database::working_snapshot`]).
    pub(super) fn snapshot(&self) -> DbSnapshot {
        DbSnapshot {
            epoch: self.epoch,
            catalog: Arc::new(self.catalog.clone()),
            tables: self
                .tables
                .iter()
                .map(|(&id, t)| (id, t.snapshot()))
                .collect(),
            operator_rows: HashMap::new(),
            offsets: BTreeMap::new(),
        }
    }

    /// The state table of a catalog table.
    pub fn table_mut(&mut self, id: TableId) -> WeirResult<&mut StateTable> {
        self.tables
            .get_mut(&id)
            .ok_or_else(|| WeirError::internal(format!("no state for table id {id}")))
    }

    /// Adds a table to the catalog; returns its id.
    pub fn create_table(&mut self, mut def: TableDef) -> WeirResult<TableId> {
        let id = self.catalog.take_id();
        def.id = id;
        // Its unique constraints' ids (their OIDs derive from them).
        for unique in &mut def.unique {
            if self.catalog.kind_of(&unique.name).is_some()
                || self.catalog.names_index(&unique.name)
            {
                return Err(crate::ddl::duplicate_relation(&unique.name));
            }
            unique.id = self.catalog.take_id();
        }
        self.tables.insert(id, StateTable::new(def.spec())?);
        self.catalog.tables.insert(def.name.clone(), def);
        self.catalog_changed = true;
        Ok(id)
    }

    /// Puts `def` with its rows `state` in place of table `name` (an
    /// `ALTER TABLE` that wrote the table again): under a new id, so that
    /// the epoch's commit drops the old table's state and stores the new
    /// one whole.
    pub fn replace_table(&mut self, name: &str, mut def: TableDef, state: StateTable) -> TableId {
        if let Some(old) = self.catalog.tables.remove(name) {
            self.tables.remove(&old.id);
            self.table_positions.remove(&old.id);
        }
        let id = self.catalog.take_id();
        def.id = id;
        self.tables.insert(id, state);
        self.catalog.tables.insert(def.name.clone(), def);
        self.catalog_changed = true;
        id
    }

    /// Records that `table`'s rows include its upstream's changes up to
    /// `position`.
    pub fn set_table_position(&mut self, table: TableId, position: u64) {
        if self.table_positions.insert(table, position) != Some(position) {
            self.positions_moved = true;
        }
    }

    /// Removes a table and its rows.
    pub fn drop_table(&mut self, name: &str) {
        if let Some(def) = self.catalog.tables.remove(name) {
            self.tables.remove(&def.id);
            self.table_positions.remove(&def.id);
            self.catalog_changed = true;
        }
    }

    /// Marks the catalog changed (views).
    pub fn catalog_changed(&mut self) {
        self.catalog_changed = true;
    }

    pub(super) fn is_dirty(&self) -> bool {
        self.forced
            || self.catalog_changed
            || self.positions_moved
            || self.tables.values().any(StateTable::is_dirty)
    }

    /// Closes the open epoch: takes every table's delta and the tables'
    /// snapshot readers will see once the epoch is committed.
    pub(super) fn cut(&mut self) -> WeirResult<TablePart> {
        let epoch = self.epoch;
        let mut changes = BTreeMap::new();
        let mut snapshots = HashMap::new();
        for (&id, table) in self.tables.iter_mut() {
            let snapshot = table.snapshot();
            changes.insert(
                id,
                TableChange {
                    deltas: table.take_delta()?.into_iter().collect(),
                    next_row_id: table.next_row_id(),
                    spec: table.spec().clone(),
                },
            );
            snapshots.insert(id, snapshot);
        }
        self.epoch += 1;
        self.catalog_changed = false;
        self.positions_moved = false;
        self.forced = false;
        Ok(TablePart {
            epoch,
            catalog: self.catalog.clone(),
            tables: changes,
            snapshots,
            table_positions: self.table_positions.clone(),
            sequences: BTreeMap::new(),
            through_views: true,
        })
    }
}

/// The tables' share of one checkpoint, cut under the working lock.
#[derive(Debug)]
pub(super) struct TablePart {
    pub(super) epoch: u64,
    pub(super) catalog: Catalog,
    pub(super) tables: BTreeMap<TableId, TableChange>,
    pub(super) snapshots: HashMap<TableId, TableSnapshot>,
    /// Where the tables connectors feed stand (see
    /// [`WorkingState::table_positions`]).
    pub(super) table_positions: BTreeMap<TableId, u64>,
    /// Every sequence's value at the cut (filled in by the coordinator).
    pub(super) sequences: BTreeMap<TableId, crate::sequences::SequenceValue>,
    /// Whether the epoch went through the stream worker, which then hands
    /// over the views' part; if not, no view changed in it.
    pub(super) through_views: bool,
}
