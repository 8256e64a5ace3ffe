//! The database: the working state that DML changes, the committed snapshot
//! that queries read, and the epoch coordinator that turns one into the
//! other.
//!
//! ```text
//!  DML ──lock──▶ WorkingState (open epoch E) ──cut──▶ EpochDelta(E) ──▶ StateStore::commit
//!                                                                        │ manifest written
//!  SELECT ◀── committed: Arc<DbSnapshot> (epoch E) ◀── publish ──────────┘
//! ```
//!
//! A statement that changed something waits until its epoch is committed,
//! so every acknowledged write is durable and visible to every later query.
//! Statements that wait together share an epoch (group commit).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::{watch, Mutex, MutexGuard, Notify};
use tracing::{debug, info, warn};
use weir_state::{
    EpochDelta, Manifest, StateStore, StateTable, StoreConfig, TableChange, TableId, TableSnapshot,
    TableSpec,
};

use crate::catalog::{Catalog, TableDef};
use crate::error::{SqlState, WeirError, WeirResult};
use crate::views::{PendingView, ViewRuntime};

/// Settings of the epoch machinery.
#[derive(Debug, Clone)]
pub struct EpochConfig {
    /// How often an epoch is committed when nobody is waiting.
    pub checkpoint_interval: Duration,
    /// The least time between the starts of two commits; bounds the
    /// objects written per second however many statements wait.
    pub min_commit_gap: Duration,
    /// How long a statement waits for its epoch to commit before failing.
    pub commit_timeout: Duration,
}

impl Default for EpochConfig {
    fn default() -> Self {
        EpochConfig {
            checkpoint_interval: Duration::from_secs(1),
            min_commit_gap: Duration::from_millis(2),
            commit_timeout: Duration::from_secs(30),
        }
    }
}

/// Every table and the catalog as of one committed epoch.
#[derive(Debug, Clone)]
pub struct DbSnapshot {
    /// The epoch.
    pub epoch: u64,
    /// The catalog at that epoch.
    pub catalog: Arc<Catalog>,
    /// Table contents by id.
    pub tables: HashMap<TableId, TableSnapshot>,
    /// Distinct rows of each operator state table, by id.
    pub operator_rows: HashMap<TableId, usize>,
}

/// The state DML and DDL change, one statement at a time.
#[derive(Debug)]
pub struct WorkingState {
    /// The catalog including changes not yet committed.
    pub catalog: Catalog,
    /// Tables by id.
    pub tables: HashMap<TableId, StateTable>,
    /// The epoch that changes made now belong to.
    pub epoch: u64,
    /// Running materialized views, in creation (and so dependency) order.
    pub views: Vec<ViewRuntime>,
    /// Views being created: the changes they must catch up on.
    pub pending: Vec<PendingView>,
    /// Deltas of the open epoch taken before the cut, by state table: a new
    /// view's backfilled state, gathered off the lock.
    pub early_deltas: HashMap<TableId, Vec<weir_state::DeltaBatches>>,
    catalog_changed: bool,
    /// A CHECKPOINT asked for a commit even without changes.
    forced: bool,
}

impl WorkingState {
    /// A snapshot of the working state (DML plans read it).
    pub fn snapshot(&self) -> DbSnapshot {
        DbSnapshot {
            epoch: self.epoch,
            catalog: Arc::new(self.catalog.clone()),
            tables: self
                .tables
                .iter()
                .map(|(&id, t)| (id, t.snapshot()))
                .collect(),
            operator_rows: HashMap::new(),
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
        let id = self.catalog.next_table_id;
        self.catalog.next_table_id += 1;
        def.id = id;
        self.tables.insert(id, StateTable::new(def.spec())?);
        self.catalog.tables.insert(def.name.clone(), def);
        self.catalog_changed = true;
        Ok(id)
    }

    /// Removes a table and its rows.
    pub fn drop_table(&mut self, name: &str) {
        if let Some(def) = self.catalog.tables.remove(name) {
            self.tables.remove(&def.id);
            self.catalog_changed = true;
        }
    }

    /// Removes a materialized view, its rows and its operators.
    pub fn drop_materialized_view(&mut self, name: &str) {
        if let Some(def) = self.catalog.materialized_views.remove(name) {
            self.tables.remove(&def.id);
            self.views.retain(|v| v.name != name);
            self.catalog_changed = true;
        }
    }

    /// Marks the catalog changed (views).
    pub fn catalog_changed(&mut self) {
        self.catalog_changed = true;
    }

    fn is_dirty(&self) -> bool {
        self.forced || self.catalog_changed || self.tables.values().any(StateTable::is_dirty)
    }

    /// Closes the open epoch: takes every table's and operator's delta and
    /// the snapshot readers will see once the epoch is committed.
    /// `previous` (the last manifest) and `config` tell which operator
    /// states are due for a new base and must give their contents.
    fn cut(
        &mut self,
        previous: Option<&Manifest>,
        config: &StoreConfig,
    ) -> WeirResult<(EpochDelta, DbSnapshot)> {
        let epoch = self.epoch;
        let mut changes = BTreeMap::new();
        let mut snapshots = HashMap::new();
        for (&id, table) in self.tables.iter_mut() {
            let snapshot = table.snapshot();
            changes.insert(
                id,
                TableChange {
                    deltas: self
                        .early_deltas
                        .remove(&id)
                        .unwrap_or_default()
                        .into_iter()
                        .chain(table.take_delta()?)
                        .collect(),
                    next_row_id: table.next_row_id(),
                    snapshot: Some(snapshot.clone()),
                },
            );
            snapshots.insert(id, snapshot);
        }
        let mut operator_rows = HashMap::new();
        for view in &mut self.views {
            for (state, &id) in view.dataflow.state().into_iter().zip(&view.state_ids) {
                operator_rows.insert(id, state.distinct_rows());
                let due = config.base_due(previous.and_then(|m| m.tables.get(&id)));
                let snapshot = if due {
                    let rows = state.dump().map_err(WeirError::from_datafusion)?;
                    Some(TableSnapshot::from_rows(state.state_spec(), rows))
                } else {
                    None
                };
                let delta = state.take_delta().map_err(WeirError::from_datafusion)?;
                let early = self.early_deltas.remove(&id).unwrap_or_default();
                changes.insert(
                    id,
                    TableChange {
                        deltas: early.into_iter().chain(delta).collect(),
                        next_row_id: 0,
                        snapshot,
                    },
                );
            }
        }
        // Early deltas of a view dropped within the epoch have no table.
        self.early_deltas.clear();
        let catalog = serde_json::to_value(&self.catalog).map_err(WeirError::internal)?;
        self.epoch += 1;
        self.catalog_changed = false;
        self.forced = false;
        let delta = EpochDelta {
            epoch,
            catalog,
            tables: changes,
        };
        let snapshot = DbSnapshot {
            epoch,
            catalog: Arc::new(self.catalog.clone()),
            tables: snapshots,
            operator_rows,
        };
        Ok((delta, snapshot))
    }
}

/// One committed epoch, for the `weir_checkpoints` system table.
#[derive(Debug, Clone)]
pub struct CheckpointRecord {
    /// The epoch.
    pub epoch: u64,
    /// When its commit started.
    pub started_at: SystemTime,
    /// How long the commit took, retries included.
    pub duration: Duration,
    /// Objects written.
    pub objects: usize,
    /// Bytes written.
    pub bytes: u64,
    /// Failed attempts before it succeeded.
    pub retries: u32,
}

/// How many recent commits `weir_checkpoints` shows.
const CHECKPOINT_HISTORY: usize = 128;

/// Counters of the commit path, for `SHOW` and benchmarks.
#[derive(Debug, Default)]
pub struct CommitCounters {
    /// Epochs committed since start.
    pub epochs: AtomicU64,
    /// Objects written since start.
    pub objects: AtomicU64,
    /// Bytes written since start.
    pub bytes: AtomicU64,
}

/// Tables, epochs and durability.
#[derive(Debug)]
pub struct Database {
    working: Mutex<WorkingState>,
    committed: RwLock<Arc<DbSnapshot>>,
    committed_epoch: watch::Sender<u64>,
    commit_requested: Notify,
    store: Mutex<StateStore>,
    last_commit_error: std::sync::Mutex<Option<String>>,
    config: EpochConfig,
    /// What the commit path has done.
    pub counters: CommitCounters,
    history: std::sync::Mutex<VecDeque<CheckpointRecord>>,
    last_manifest: RwLock<Option<Arc<Manifest>>>,
    /// The working state's open epoch, readable without its lock.
    open_epoch: AtomicU64,
    store_config: StoreConfig,
}

impl Database {
    /// Opens the database from the newest committed manifest in `store`
    /// (or empty for a fresh store).
    pub async fn open(mut store: StateStore, config: EpochConfig) -> WeirResult<Arc<Self>> {
        let started = Instant::now();
        let manifest = store.recover().await?;
        let last_manifest = manifest.clone().map(Arc::new);
        let (catalog, epoch, tables) = match manifest {
            None => (Catalog::default(), 0, HashMap::new()),
            Some(manifest) => {
                let catalog: Catalog =
                    serde_json::from_value(manifest.catalog.clone()).map_err(|e| {
                        WeirError::new(SqlState::IO_ERROR, format!("unreadable catalog: {e}"))
                    })?;
                let mut tables = HashMap::new();
                let specs = catalog.tables.values().map(|t| (t.id, t.spec())).chain(
                    catalog
                        .materialized_views
                        .values()
                        .map(|v| (v.id, v.spec())),
                );
                for (id, spec) in specs {
                    let files = manifest.tables.get(&id).cloned().unwrap_or_default();
                    tables.insert(id, store.load_table(spec, &files).await?);
                }
                (catalog, manifest.epoch, tables)
            }
        };
        let working = WorkingState {
            catalog,
            tables,
            epoch: epoch + 1,
            views: Vec::new(),
            pending: Vec::new(),
            early_deltas: HashMap::new(),
            catalog_changed: false,
            forced: false,
        };
        let mut committed = working.snapshot();
        committed.epoch = epoch;
        info!(
            epoch,
            tables = working.tables.len(),
            elapsed_ms = started.elapsed().as_millis() as u64,
            "recovered state"
        );
        let store_config = store.config().clone();
        Ok(Arc::new(Database {
            store_config,
            working: Mutex::new(working),
            committed: RwLock::new(Arc::new(committed)),
            committed_epoch: watch::Sender::new(epoch),
            commit_requested: Notify::new(),
            store: Mutex::new(store),
            last_commit_error: std::sync::Mutex::new(None),
            config,
            counters: CommitCounters::default(),
            history: std::sync::Mutex::new(VecDeque::new()),
            last_manifest: RwLock::new(last_manifest),
            open_epoch: AtomicU64::new(epoch + 1),
        }))
    }

    /// Loads a state table that is not a catalog table (an operator's
    /// state) from the last committed manifest; empty if it names none.
    pub async fn load_state(&self, id: TableId, spec: TableSpec) -> WeirResult<StateTable> {
        let files = self
            .last_manifest()
            .and_then(|m| m.tables.get(&id).cloned())
            .unwrap_or_default();
        Ok(self.store.lock().await.load_table(spec, &files).await?)
    }

    /// The newest committed snapshot.
    pub fn committed(&self) -> Arc<DbSnapshot> {
        self.committed.read().expect("snapshot lock").clone()
    }

    /// Exclusive access to the working state. DML and DDL hold it while
    /// they compute and apply their changes, never while they wait.
    pub async fn working(&self) -> MutexGuard<'_, WorkingState> {
        self.working.lock().await
    }

    /// Waits until `epoch` is committed, asking the coordinator to commit
    /// at once.
    pub async fn wait_committed(&self, epoch: u64) -> WeirResult<()> {
        let mut committed = self.committed_epoch.subscribe();
        if *committed.borrow() >= epoch {
            return Ok(());
        }
        self.commit_requested.notify_one();
        let wait = committed.wait_for(|&e| e >= epoch);
        let outcome = tokio::time::timeout(self.config.commit_timeout, wait)
            .await
            .map(|r| r.map(|_| ()));
        match outcome {
            Ok(Ok(())) => Ok(()),
            Ok(Err(_)) => Err(WeirError::new(
                SqlState("57P01"),
                "the server is shutting down; the change was not committed",
            )),
            Err(_) => {
                let cause = self
                    .last_commit_error
                    .lock()
                    .expect("error lock")
                    .clone()
                    .unwrap_or_else(|| "no error reported".into());
                Err(WeirError::new(
                    SqlState::IO_ERROR,
                    format!(
                        "epoch {epoch} was not committed within {:?}; the state store is failing: {cause}",
                        self.config.commit_timeout
                    ),
                ))
            }
        }
    }

    /// Returns once every change made before the call is committed.
    pub async fn flush(&self) -> WeirResult<()> {
        let epoch = {
            let working = self.working.lock().await;
            if working.is_dirty() {
                working.epoch
            } else {
                working.epoch - 1
            }
        };
        self.wait_committed(epoch).await
    }

    /// Commits an epoch now, even if nothing changed, and returns it once
    /// it is committed (`CHECKPOINT`).
    pub async fn checkpoint(&self) -> WeirResult<u64> {
        let epoch = {
            let mut working = self.working.lock().await;
            working.forced = true;
            working.epoch
        };
        self.wait_committed(epoch).await?;
        Ok(epoch)
    }

    /// Recent commits, oldest first.
    pub fn checkpoints(&self) -> Vec<CheckpointRecord> {
        self.history
            .lock()
            .expect("history lock")
            .iter()
            .cloned()
            .collect()
    }

    /// The manifest of the last committed epoch.
    pub fn last_manifest(&self) -> Option<Arc<Manifest>> {
        self.last_manifest.read().expect("manifest lock").clone()
    }

    /// How many closed epochs are not yet committed.
    pub fn epoch_lag(&self) -> u64 {
        self.open_epoch
            .load(Ordering::Relaxed)
            .saturating_sub(self.committed_epoch() + 1)
    }

    /// The last committed epoch.
    pub fn committed_epoch(&self) -> u64 {
        *self.committed_epoch.borrow()
    }

    /// Runs the epoch coordinator until `shutdown` turns true, then commits
    /// what is pending one last time.
    pub async fn run_coordinator(self: Arc<Self>, mut shutdown: watch::Receiver<bool>) {
        let mut ticker = tokio::time::interval(self.config.checkpoint_interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = ticker.tick() => {}
                _ = self.commit_requested.notified() => {}
                _ = shutdown.changed() => break,
            }
            let started = Instant::now();
            self.commit_pending().await;
            let elapsed = started.elapsed();
            if elapsed < self.config.min_commit_gap {
                tokio::time::sleep(self.config.min_commit_gap - elapsed).await;
            }
        }
        self.commit_pending().await;
    }

    /// Commits the open epoch if it holds changes, retrying with backoff
    /// until the store takes it.
    async fn commit_pending(&self) {
        let cut = {
            let mut working = self.working.lock().await;
            if !working.is_dirty() {
                return;
            }
            let locked = Instant::now();
            crate::views::run_epoch(&mut working);
            let processed = locked.elapsed();
            let previous = self.last_manifest();
            let cut = working.cut(previous.as_deref(), &self.store_config);
            self.open_epoch.store(working.epoch, Ordering::Relaxed);
            debug!(
                epoch = working.epoch - 1,
                views_ms = processed.as_secs_f64() * 1e3,
                cut_ms = (locked.elapsed() - processed).as_secs_f64() * 1e3,
                "cut epoch"
            );
            cut
        };
        let (delta, snapshot) = match cut {
            Ok(cut) => cut,
            Err(e) => {
                warn!(error = %e, "could not cut epoch");
                return;
            }
        };
        let started_at = SystemTime::now();
        let started = Instant::now();
        let mut retries = 0;
        let mut backoff = Duration::from_millis(10);
        let (manifest, stats) = loop {
            let result = self.store.lock().await.commit(&delta).await;
            match result {
                Ok(done) => break done,
                Err(e) => {
                    retries += 1;
                    warn!(epoch = delta.epoch, error = %e, "commit failed; retrying");
                    *self.last_commit_error.lock().expect("error lock") = Some(e.to_string());
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(5));
                }
            }
        };
        *self.last_commit_error.lock().expect("error lock") = None;
        let epoch = snapshot.epoch;
        *self.committed.write().expect("snapshot lock") = Arc::new(snapshot);
        *self.last_manifest.write().expect("manifest lock") = Some(Arc::new(manifest));
        let mut history = self.history.lock().expect("history lock");
        if history.len() == CHECKPOINT_HISTORY {
            history.pop_front();
        }
        history.push_back(CheckpointRecord {
            epoch,
            started_at,
            duration: started.elapsed(),
            objects: stats.objects,
            bytes: stats.bytes,
            retries,
        });
        drop(history);
        self.counters.epochs.fetch_add(1, Ordering::Relaxed);
        self.counters
            .objects
            .fetch_add(stats.objects as u64, Ordering::Relaxed);
        self.counters
            .bytes
            .fetch_add(stats.bytes, Ordering::Relaxed);
        self.committed_epoch.send_replace(epoch);
        debug!(
            epoch,
            objects = stats.objects,
            bytes = stats.bytes,
            "committed epoch"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::ColumnDef;
    use datafusion::arrow::array::{Int32Array, RecordBatch};
    use datafusion::arrow::datatypes::DataType;
    use object_store::local::LocalFileSystem;
    use object_store::path::Path;
    use object_store::ObjectStore;
    use weir_state::faulty::FaultyStore;

    #[tokio::test]
    async fn writes_wait_while_the_store_fails_and_commit_once_it_is_back() {
        let dir = tempfile::tempdir().unwrap();
        let local: Arc<dyn ObjectStore> =
            Arc::new(LocalFileSystem::new_with_prefix(dir.path()).unwrap());
        let (store, faults) = FaultyStore::new(local);
        let config = EpochConfig {
            checkpoint_interval: Duration::from_millis(50),
            commit_timeout: Duration::from_millis(300),
            ..EpochConfig::default()
        };
        let state = StateStore::with_store(store, Path::default(), Default::default());
        let db = Database::open(state, config).await.unwrap();
        let (_stop, stopped) = watch::channel(false);
        tokio::spawn(db.clone().run_coordinator(stopped));

        let def = TableDef {
            id: 0,
            name: "t".into(),
            columns: vec![ColumnDef {
                name: "x".into(),
                data_type: DataType::Int32,
                nullable: false,
                default: None,
                max_chars: None,
            }],
            primary_key: vec![0],
        };
        let (id, epoch) = {
            let mut working = db.working().await;
            (working.create_table(def.clone()).unwrap(), working.epoch)
        };
        db.wait_committed(epoch).await.unwrap();

        faults.lock().unwrap().put = Some("manifest/".into());
        let epoch = {
            let mut working = db.working().await;
            let rows =
                RecordBatch::try_new(def.schema(), vec![Arc::new(Int32Array::from(vec![7]))])
                    .unwrap();
            working
                .table_mut(id)
                .unwrap()
                .write(&[], Some(&rows))
                .unwrap()
                .unwrap();
            working.epoch
        };
        let err = db.wait_committed(epoch).await.unwrap_err();
        assert_eq!(err.code, SqlState::IO_ERROR, "{err}");
        assert!(err.message.contains("injected fault"), "{err}");
        assert_eq!(
            db.committed().tables[&id].num_rows(),
            0,
            "readers keep the last epoch"
        );

        faults.lock().unwrap().put = None;
        let mut committed = false;
        for _ in 0..30 {
            if db.wait_committed(epoch).await.is_ok() {
                committed = true;
                break;
            }
        }
        assert!(committed, "the epoch commits once the store is back");
        assert_eq!(db.committed().tables[&id].num_rows(), 1);
    }
}
