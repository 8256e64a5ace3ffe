//! Transaction blocks: `BEGIN ... COMMIT`.
//!
//! A block reads the snapshot committed when it began. Its writes go to
//! private copies of the tables they touch, made from that snapshot at the
//! first write to each, so the block's own reads see them and no one
//! else's do. `COMMIT` takes the working lock, checks that no row the block
//! changed was changed by anyone else since its snapshot (else 40001: the
//! first committer wins, as in PostgreSQL's repeatable read), and applies
//! each table's net change to the working state, so every write of the
//! block lands in one epoch. `ROLLBACK` drops the copies; a savepoint is a
//! copy of the copies.
//!
//! `CREATE TABLE` (with its `SERIAL` and identity sequences) and `CREATE
//! INDEX` in a block (`ddl.rs`) change the block's own catalog; `COMMIT`
//! adds them to the shared one in the same epoch as the block's rows
//! (42P07 if another session took the name meanwhile), and `ROLLBACK`
//! forgets them. Other DDL is refused in a block (25001).

mod commit;
pub mod control;
pub mod ddl;
pub mod pipeline;

use std::collections::HashMap;
use std::sync::Arc;

use weir_state::{StateTable, TableId};

use crate::catalog::{Catalog, IndexDef, TableDef};
use crate::database::{Database, DbSnapshot, WorkingState};
use crate::error::{SqlState, WeirError, WeirResult};

/// An open transaction block.
#[derive(Debug)]
pub struct Transaction {
    /// The committed snapshot the block reads.
    snapshot: Arc<DbSnapshot>,
    /// The block's catalog and its private copies of the tables it wrote.
    private: WorkingState,
    /// Each written table as it was in `snapshot`, to check at commit
    /// that nobody else changed the rows the block changed.
    bases: HashMap<TableId, StateTable>,
    /// Open savepoints, oldest first.
    savepoints: Vec<Savepoint>,
    /// A statement failed: everything but the end of the block is refused.
    failed: bool,
    /// `BEGIN READ ONLY`.
    read_only: bool,
    /// Opened by the server around a multi-statement query or a
    /// pipeline of Executes (`pipeline.rs`), not by BEGIN.
    implicit: bool,
    /// The tables, indexes and sequences the block created, in order, by
    /// name.
    created: Vec<Created>,
    /// The ids of every sequence the block made (savepoints rolled back
    /// included), and where their values are: the values of those that do
    /// not commit are forgotten when the block ends.
    made_sequences: Vec<TableId>,
    sequences: Option<Arc<crate::sequences::Sequences>>,
    /// Its COMMIT applied it.
    applied: bool,
}

/// A relation a block created.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Created {
    Table(String),
    Index(String),
    Sequence(String),
}

/// The private tables and catalog as they were at `SAVEPOINT name`.
#[derive(Debug)]
struct Savepoint {
    name: String,
    tables: HashMap<TableId, StateTable>,
    catalog: Catalog,
    created: Vec<Created>,
}

impl Transaction {
    /// A block reading `snapshot`.
    pub fn new(snapshot: Arc<DbSnapshot>, read_only: bool, implicit: bool) -> Self {
        let private = WorkingState::private(snapshot.catalog.as_ref().clone());
        Transaction {
            snapshot,
            private,
            bases: HashMap::new(),
            savepoints: Vec::new(),
            failed: false,
            read_only,
            implicit,
            created: Vec::new(),
            made_sequences: Vec::new(),
            sequences: None,
            applied: false,
        }
    }

    /// Whether a statement of the block failed.
    pub fn is_failed(&self) -> bool {
        self.failed
    }

    /// Marks the block failed (25P02 until it ends or rolls back to a
    /// savepoint).
    pub fn fail(&mut self) {
        self.failed = true;
    }

    /// Whether the server opened the block around a multi-statement query.
    pub fn is_implicit(&self) -> bool {
        self.implicit
    }

    /// `BEGIN` inside a pipeline's block: the block goes on as one the
    /// client opened, with the pipeline's writes in it (as in PostgreSQL).
    pub fn make_explicit(&mut self) {
        self.implicit = false;
    }

    /// Makes the block read-only or read-write (`SET TRANSACTION`).
    pub fn set_read_only(&mut self, read_only: bool) {
        self.read_only = read_only;
    }

    /// What the block's statements read: its snapshot with its own writes
    /// (and its own tables and indexes).
    pub fn read_snapshot(&self) -> DbSnapshot {
        let mut snapshot = self.snapshot.as_ref().clone();
        for (&id, table) in &self.private.tables {
            snapshot.tables.insert(id, table.snapshot());
        }
        if !self.created.is_empty() {
            snapshot.catalog = Arc::new(self.private.catalog.clone());
        }
        snapshot
    }

    /// Fails with 25006 in a read-only block; `verb` names the statement.
    pub fn check_writable(&self, verb: &str) -> WeirResult<()> {
        if self.read_only {
            return Err(WeirError::new(
                SqlState::READ_ONLY_SQL_TRANSACTION,
                format!("cannot execute {verb} in a read-only transaction"),
            ));
        }
        Ok(())
    }

    /// Adds `def` to the block's catalog, with an empty private table;
    /// returns its id in the block (`COMMIT` gives it its lasting one).
    pub fn create_table(&mut self, def: TableDef) -> WeirResult<TableId> {
        let name = def.name.clone();
        let id = self.private.create_table(def)?;
        self.created.push(Created::Table(name));
        Ok(id)
    }

    /// Adds the sequences `made` of table `def`'s columns to the block's
    /// catalog under the lasting `ids`, their values to `sequences`.
    pub fn create_sequences(
        &mut self,
        def: &mut TableDef,
        ids: &[TableId],
        made: &[crate::sequences::ddl::ColumnSequence],
        sequences: Arc<crate::sequences::Sequences>,
    ) {
        crate::sequences::ddl::add_column_sequences(
            &mut self.private.catalog,
            ids,
            &sequences,
            def,
            made,
        );
        self.created
            .extend(made.iter().map(|m| Created::Sequence(m.name.clone())));
        self.made_sequences.extend_from_slice(ids);
        self.sequences = Some(sequences);
    }

    /// Adds `index` to the block's catalog.
    pub fn create_index(&mut self, index: IndexDef) {
        self.created.push(Created::Index(index.name.clone()));
        crate::indexes::add_index(&mut self.private.catalog, index);
    }

    /// Readies the block for a write to `def`: copies its table from the
    /// block's snapshot if this is the first write to it. `verb` names the
    /// statement, for the error of a read-only block.
    pub fn prepare_write(&mut self, def: &TableDef, verb: &str) -> WeirResult<()> {
        self.check_writable(verb)?;
        if !self.private.tables.contains_key(&def.id) {
            let snapshot =
                self.snapshot.tables.get(&def.id).ok_or_else(|| {
                    WeirError::internal(format!("no snapshot of table {}", def.name))
                })?;
            let table = StateTable::over_snapshot(snapshot)?;
            self.bases.insert(def.id, table.clone());
            self.private.tables.insert(def.id, table);
        }
        Ok(())
    }

    /// The catalog the block sees.
    pub fn catalog(&self) -> &Catalog {
        &self.private.catalog
    }

    /// The block's catalog and private tables, which its writes change
    /// (after [`Transaction::prepare_write`]).
    pub fn private_state(&mut self) -> &mut WorkingState {
        &mut self.private
    }

    /// `SAVEPOINT name`.
    pub fn savepoint(&mut self, name: String) {
        self.savepoints.push(Savepoint {
            name,
            tables: self.private.tables.clone(),
            catalog: self.private.catalog.clone(),
            created: self.created.clone(),
        });
    }

    /// `RELEASE SAVEPOINT name`: forgets it and every later savepoint.
    pub fn release(&mut self, name: &str) -> WeirResult<()> {
        let at = self.find_savepoint(name)?;
        self.savepoints.truncate(at);
        Ok(())
    }

    /// `ROLLBACK TO SAVEPOINT name`: undoes what the block did since, and
    /// leaves the failed state. The savepoint stays.
    pub fn rollback_to(&mut self, name: &str) -> WeirResult<()> {
        let at = self.find_savepoint(name)?;
        self.savepoints.truncate(at + 1);
        let savepoint = &self.savepoints[at];
        self.private.tables = savepoint.tables.clone();
        self.private.catalog = savepoint.catalog.clone();
        self.created = savepoint.created.clone();
        self.failed = false;
        Ok(())
    }

    /// The newest savepoint called `name`.
    fn find_savepoint(&self, name: &str) -> WeirResult<usize> {
        self.savepoints
            .iter()
            .rposition(|s| s.name == name)
            .ok_or_else(|| {
                WeirError::new(
                    SqlState::INVALID_SAVEPOINT,
                    format!("savepoint \"{name}\" does not exist"),
                )
            })
    }

    /// Applies the block's tables, indexes and writes to the working state
    /// in one epoch and waits until that epoch is committed. Fails,
    /// changing nothing, with 40001 if another transaction changed a row
    /// this one changed since the block's snapshot, and with 42P07 if
    /// another session took the name of a relation the block created.
    pub async fn commit(mut self, db: &Database) -> WeirResult<()> {
        let mut changes = Vec::new();
        for (&id, table) in self.private.tables.iter_mut() {
            if let Some(delta) = table.take_delta()? {
                changes.push((id, delta));
            }
        }
        if changes.is_empty() && self.created.is_empty() {
            return Ok(());
        }
        let mut working = db.working().await;
        self.check_created(&working.catalog)?;
        let created_tables: HashMap<TableId, &TableDef> = self
            .created
            .iter()
            .filter_map(|c| match c {
                Created::Table(name) => self.private.catalog.tables.get(name),
                Created::Index(_) | Created::Sequence(_) => None,
            })
            .map(|def| (def.id, def))
            .collect();
        let mut writes = Vec::with_capacity(changes.len());
        for (id, delta) in &changes {
            if created_tables.contains_key(id) {
                continue;
            }
            let name = self.table_name(*id);
            let Some(current) = working.tables.get(id) else {
                return Err(WeirError::new(
                    SqlState::SERIALIZATION_FAILURE,
                    format!("could not serialize access: table \"{name}\" was dropped"),
                ));
            };
            let base = &self.bases[id];
            let (deletes, inserts) = commit::plan_write(&name, base, current, delta)?;
            // Rows other sessions committed since the block's snapshot may
            // hold the values the block's rows give a unique constraint.
            if let Some(def) = working.catalog.tables.get(&name) {
                let kept = current.check_unique(&deletes, inserts.as_ref())?;
                if let Some(rows) = &inserts {
                    crate::dml::check_write(def, rows, kept)?;
                }
            }
            writes.push((*id, (deletes, inserts)));
        }
        // Every table checked: now nothing can fail half-way.
        self.apply_created(&mut working, &changes)?;
        self.applied = true;
        for (id, (deletes, inserts)) in writes {
            let name = self.table_name(id);
            working
                .table_mut(id)?
                .write(&deletes, inserts.as_ref())?
                .map_err(|_| {
                    WeirError::internal(format!("a checked commit violates a key of \"{name}\""))
                })?;
        }
        let epoch = working.epoch;
        drop(working);
        db.wait_committed(epoch).await
    }

    /// Fails if `shared` (the working catalog) no longer has room for
    /// what the block created: 42P07 for a name another session took,
    /// 40001 for an index whose relation was dropped.
    fn check_created(&self, shared: &Catalog) -> WeirResult<()> {
        for created in &self.created {
            let (Created::Table(name) | Created::Index(name) | Created::Sequence(name)) = created;
            if shared.kind_of(name).is_some() || shared.names_index(name) {
                return Err(crate::ddl::duplicate_relation(name));
            }
            // A created table's unique constraints name indexes too.
            if let Created::Table(table) = created {
                for unique in &self.private.catalog.tables[table].unique {
                    if shared.kind_of(&unique.name).is_some() || shared.names_index(&unique.name) {
                        return Err(crate::ddl::duplicate_relation(&unique.name));
                    }
                }
            }
            if let Created::Index(name) = created {
                let relation = &self.private.catalog.indexes[name].relation;
                let ours = self.created.contains(&Created::Table(relation.clone()));
                if !ours && shared.kind_of(relation).is_none() {
                    return Err(WeirError::new(
                        SqlState::SERIALIZATION_FAILURE,
                        format!("could not serialize access: \"{relation}\" was dropped"),
                    ));
                }
            }
        }
        Ok(())
    }

    /// Creates the block's tables (with their rows, from `changes`) and
    /// indexes in `working`, under lasting ids, in the order the block
    /// made them.
    fn apply_created(
        &self,
        working: &mut WorkingState,
        changes: &[(TableId, weir_state::DeltaBatches)],
    ) -> WeirResult<()> {
        for created in &self.created {
            match created {
                Created::Table(name) => {
                    let def = &self.private.catalog.tables[name];
                    let id = working.create_table(def.clone())?;
                    let rows = changes.iter().find(|(block_id, _)| *block_id == def.id);
                    if let Some(rows) = rows.and_then(|(_, delta)| delta.upserts.as_ref()) {
                        let rows = def.spec().visible_columns(rows)?;
                        working
                            .table_mut(id)?
                            .write(&[], Some(&rows))?
                            .map_err(|_| {
                                WeirError::internal(format!(
                                    "a new table's rows violate \"{name}\"'s key"
                                ))
                            })?;
                    }
                }
                Created::Index(name) => {
                    let index = self.private.catalog.indexes[name].clone();
                    crate::indexes::add_index(&mut working.catalog, index);
                    working.catalog_changed();
                }
                Created::Sequence(name) => {
                    let sequence = self.private.catalog.sequences[name].clone();
                    working.catalog.sequences.insert(name.clone(), sequence);
                    working.catalog_changed();
                }
            }
        }
        Ok(())
    }

    fn table_name(&self, id: TableId) -> String {
        self.private
            .catalog
            .tables
            .values()
            .find(|t| t.id == id)
            .map_or_else(|| format!("#{id}"), |t| t.name.clone())
    }
}

impl Drop for Transaction {
    /// Forgets the values of the sequences the block made that did not
    /// commit with it (rolled back, or its savepoint was).
    fn drop(&mut self) {
        let Some(sequences) = &self.sequences else {
            return;
        };
        for &id in &self.made_sequences {
            let kept = self.applied && self.private.catalog.sequences.values().any(|s| s.id == id);
            if !kept {
                sequences.forget(id);
            }
        }
    }
}
