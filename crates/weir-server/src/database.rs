//! The database: the working state that DML changes, the committed snapshot
//! that queries read, and the epoch coordinator that turns one into the
//! other.
//!
//! ```text
//!  DML ──lock──▶ WorkingState (open epoch E) ──cut──▶ tables' part of E ─────────┐
//!                      │ table changes, Barrier(E)                              ▼
//!                      └──────────────────────▶ stream worker ──views' part──▶ committer
//!                                                                               │ manifest written
//!  SELECT ◀── committed: Arc<DbSnapshot> (epoch E) ◀── publish ─────────────────┘
//! ```
//!
//! The coordinator cuts epochs; the committer uploads them, in order, while
//! the working state and the stream worker go on with the next epochs. At
//! most [`MAX_EPOCHS_IN_FLIGHT`] epochs are cut and not yet committed.
//!
//! A statement that changed something waits until its epoch is committed,
//! so every acknowledged write is durable and visible to every later query.
//! Statements that wait together share an epoch (group commit).

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::{mpsc, watch, Mutex, MutexGuard, Notify};
use tracing::{debug, info, warn};
use weir_state::{
    EpochDelta, Manifest, StateStore, StateTable, StoreConfig, TableChange, TableId, TableSnapshot,
    TableSpec,
};

use crate::catalog::{Catalog, TableDef, ViewFailure};
use crate::error::{SqlState, WeirError, WeirResult};
use crate::worker::{Control, ViewCounters, ViewPart, Worker};
use weir_stream::OperatorInfo;

/// How many epochs may be cut and not yet committed. Beyond that the
/// coordinator waits, the stream worker waits to hand over its state, and
/// back-pressure reaches the sources.
pub const MAX_EPOCHS_IN_FLIGHT: usize = 2;

/// The default of `--view-memory-mb`: 4 GiB, as much as all queries
/// together may use by default.
pub const DEFAULT_VIEW_MEMORY_MB: usize = 4096;

/// Settings of the database: epoch timing and the views' memory budget.
#[derive(Debug, Clone)]
pub struct DatabaseConfig {
    /// How often an epoch is committed when nobody is waiting; zero turns
    /// periodic checkpoints off (epochs are then cut only for statements
    /// that wait, `FLUSH` and `CHECKPOINT`).
    pub checkpoint_interval: Duration,
    /// The least time between the starts of two commits; bounds the
    /// objects written per second however many statements wait.
    pub min_commit_gap: Duration,
    /// How long a statement waits for its epoch to commit before failing.
    pub commit_timeout: Duration,
    /// The most bytes one materialized view's state (its operators' and
    /// its output's) may hold; a view that needs more fails alone.
    pub view_memory_bytes: usize,
}

impl Default for DatabaseConfig {
    fn default() -> Self {
        DatabaseConfig {
            checkpoint_interval: Duration::from_secs(1),
            min_commit_gap: Duration::from_millis(2),
            commit_timeout: Duration::from_secs(30),
            view_memory_bytes: DEFAULT_VIEW_MEMORY_MB << 20,
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
    /// Every source reader's position (see `views::offset_key`).
    pub offsets: BTreeMap<String, u64>,
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
    /// Views being created, by token: the relations they read (so that
    /// those tables record their changes).
    pub pending: HashMap<u64, BTreeSet<String>>,
    catalog_changed: bool,
    /// A CHECKPOINT asked for a commit even without changes.
    forced: bool,
}

impl WorkingState {
    /// A snapshot of the working state's tables (without materialized
    /// views, which the stream worker holds; see
    /// [`Database::working_snapshot`]).
    fn snapshot(&self) -> DbSnapshot {
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

    /// Marks the catalog changed (views).
    pub fn catalog_changed(&mut self) {
        self.catalog_changed = true;
    }

    fn is_dirty(&self) -> bool {
        self.forced || self.catalog_changed || self.tables.values().any(StateTable::is_dirty)
    }

    /// Closes the open epoch: takes every table's delta and the tables'
    /// snapshot readers will see once the epoch is committed.
    fn cut(&mut self) -> WeirResult<TablePart> {
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
        self.forced = false;
        Ok(TablePart {
            epoch,
            catalog: self.catalog.clone(),
            tables: changes,
            snapshots,
            through_views: true,
        })
    }
}

/// The tables' share of one checkpoint, cut under the working lock.
#[derive(Debug)]
struct TablePart {
    epoch: u64,
    catalog: Catalog,
    tables: BTreeMap<TableId, TableChange>,
    snapshots: HashMap<TableId, TableSnapshot>,
    /// Whether the epoch went through the stream worker, which then hands
    /// over the views' part; if not, no view changed in it.
    through_views: bool,
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
    /// Delta chains merged into bases since start.
    pub compactions: AtomicU64,
    /// Epochs committed without going through the stream worker (no view
    /// changed in them) since start.
    pub epochs_without_views: AtomicU64,
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
    config: DatabaseConfig,
    /// What the commit path has done.
    pub counters: CommitCounters,
    history: std::sync::Mutex<VecDeque<CheckpointRecord>>,
    last_manifest: RwLock<Option<Arc<Manifest>>>,
    /// The working state's open epoch, readable without its lock.
    open_epoch: AtomicU64,
    store_config: StoreConfig,
    /// To the stream worker, in order with the epochs' barriers.
    control: mpsc::UnboundedSender<Control>,
    /// The worker's end, until the coordinator starts it.
    control_receiver: std::sync::Mutex<Option<mpsc::UnboundedReceiver<Control>>>,
    /// Source rows arrived since the last barrier: the epoch has changes
    /// even if no table does.
    stream_dirty: AtomicBool,
    /// A message went to the stream worker (a view started, stopped,
    /// began its creation) since the last epoch that went through it.
    control_sent: AtomicBool,
    /// Views that failed, with the reason, until the catalog says so.
    failures: std::sync::Mutex<BTreeMap<String, ViewFailure>>,
    /// Rows into and out of each view.
    view_counters: std::sync::Mutex<BTreeMap<String, ViewCounters>>,
    /// Each view's operators as of its last checkpoint (kept for a failed
    /// view, until it is dropped).
    view_operators: std::sync::Mutex<BTreeMap<String, Vec<OperatorInfo>>>,
    /// Materialized views' output tables loaded at startup, until their
    /// views are restored.
    restored_outputs: std::sync::Mutex<HashMap<TableId, StateTable>>,
    /// The state format of the manifest recovered at startup.
    recovered_state_format: u32,
}

impl Database {
    /// Opens the database from the newest committed manifest in `store`
    /// (or empty for a fresh store).
    pub async fn open(mut store: StateStore, config: DatabaseConfig) -> WeirResult<Arc<Self>> {
        let started = Instant::now();
        let manifest = store.recover().await?;
        let recovered_state_format = manifest
            .as_ref()
            .map_or(Manifest::STATE_FORMAT, |m| m.state_format);
        let last_manifest = manifest.clone().map(Arc::new);
        let (catalog, epoch, tables, outputs) = match manifest {
            None => (Catalog::default(), 0, HashMap::new(), HashMap::new()),
            Some(manifest) => {
                let catalog: Catalog =
                    serde_json::from_value(manifest.catalog.clone()).map_err(|e| {
                        WeirError::new(SqlState::IO_ERROR, format!("unreadable catalog: {e}"))
                    })?;
                let mut tables = HashMap::new();
                for def in catalog.tables.values() {
                    let files = manifest.tables.get(&def.id).cloned().unwrap_or_default();
                    tables.insert(def.id, store.load_table(def.spec(), &files).await?);
                }
                let mut outputs = HashMap::new();
                for def in catalog.materialized_views.values() {
                    let files = manifest.tables.get(&def.id).cloned().unwrap_or_default();
                    outputs.insert(def.id, store.load_table(def.spec(), &files).await?);
                }
                (catalog, manifest.epoch, tables, outputs)
            }
        };
        let working = WorkingState {
            catalog,
            tables,
            epoch: epoch + 1,
            pending: HashMap::new(),
            catalog_changed: false,
            forced: false,
        };
        let mut committed = working.snapshot();
        committed.epoch = epoch;
        committed.offsets = last_manifest
            .as_ref()
            .map(|m| m.sources.clone())
            .unwrap_or_default();
        committed
            .tables
            .extend(outputs.iter().map(|(&id, t)| (id, t.snapshot())));
        info!(
            epoch,
            tables = working.tables.len(),
            views = outputs.len(),
            elapsed_ms = started.elapsed().as_millis() as u64,
            "recovered state"
        );
        let store_config = store.config().clone();
        let (control, control_receiver) = mpsc::unbounded_channel();
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
            control,
            control_receiver: std::sync::Mutex::new(Some(control_receiver)),
            stream_dirty: AtomicBool::new(false),
            control_sent: AtomicBool::new(false),
            failures: std::sync::Mutex::new(BTreeMap::new()),
            view_operators: std::sync::Mutex::new(BTreeMap::new()),
            view_counters: std::sync::Mutex::new(BTreeMap::new()),
            restored_outputs: std::sync::Mutex::new(outputs),
            recovered_state_format,
        }))
    }

    /// The rows of a state table that is not a catalog table (an
    /// operator's state) at the last committed manifest; none if it names
    /// none.
    pub async fn load_state(
        &self,
        id: TableId,
        spec: TableSpec,
    ) -> WeirResult<datafusion::arrow::record_batch::RecordBatch> {
        let files = self
            .last_manifest()
            .and_then(|m| m.tables.get(&id).cloned())
            .unwrap_or_default();
        Ok(self.store.lock().await.load_rows(spec, &files).await?)
    }

    /// The state format of the manifest recovered at startup (see
    /// [`Manifest::STATE_FORMAT`]).
    pub fn recovered_state_format(&self) -> u32 {
        self.recovered_state_format
    }

    /// A materialized view's output table as loaded at startup.
    pub fn take_restored_output(&self, id: TableId) -> Option<StateTable> {
        self.restored_outputs
            .lock()
            .expect("outputs lock")
            .remove(&id)
    }

    /// The newest committed snapshot.
    pub fn committed(&self) -> Arc<DbSnapshot> {
        self.committed.read().expect("snapshot lock").clone()
    }

    /// What DML and DDL plans read: the working state's tables, and
    /// materialized views as of the last committed epoch (the stream
    /// worker, not the working state, holds their newer rows).
    pub fn working_snapshot(&self, working: &WorkingState) -> DbSnapshot {
        let mut snapshot = working.snapshot();
        let committed = self.committed();
        for def in working.catalog.materialized_views.values() {
            if let Some(table) = committed.tables.get(&def.id) {
                snapshot.tables.insert(def.id, table.clone());
            }
        }
        snapshot
    }

    /// Exclusive access to the working state. DML and DDL hold it while
    /// they compute and apply their changes, never while they wait.
    pub async fn working(&self) -> MutexGuard<'_, WorkingState> {
        self.working.lock().await
    }

    /// Sends a message to the stream worker. Callers that change the
    /// catalog send it while they hold the working lock, so it reaches the
    /// worker before the barrier of the epoch that commits the change.
    pub fn send_control(&self, message: Control) {
        // Forgetting a pending view's queue changes no view's state.
        if !matches!(message, Control::RemovePending(_)) {
            self.control_sent.store(true, Ordering::SeqCst);
        }
        self.send_to_worker(message);
    }

    /// Sends a message to the stream worker without marking the open
    /// epoch as one that must go through it.
    fn send_to_worker(&self, message: Control) {
        if self.control.send(message).is_err() {
            warn!("the stream worker is gone");
        }
    }

    /// The store's tunables.
    pub fn store_config(&self) -> &StoreConfig {
        &self.store_config
    }

    /// Source rows arrived: the open epoch has changes.
    pub fn stream_dirty(&self) {
        self.stream_dirty.store(true, Ordering::Relaxed);
    }

    /// The stream worker took its state at a barrier.
    pub fn stream_clean(&self) {
        self.stream_dirty.store(false, Ordering::Relaxed);
    }

    /// The most bytes one view's state may hold.
    pub fn view_memory_bytes(&self) -> usize {
        self.config.view_memory_bytes
    }

    /// Records that a view failed; the next commit writes it into the
    /// catalog.
    pub fn view_failed(&self, name: &str, failure: ViewFailure) {
        self.failures
            .lock()
            .expect("failures lock")
            .insert(name.to_owned(), failure);
    }

    /// Records what a view's operators have done and hold.
    pub fn publish_operators(&self, name: &str, operators: Vec<OperatorInfo>) {
        self.view_operators
            .lock()
            .expect("operators lock")
            .insert(name.to_owned(), operators);
    }

    /// Every view's operators as last published.
    pub fn view_operators(&self) -> BTreeMap<String, Vec<OperatorInfo>> {
        self.view_operators.lock().expect("operators lock").clone()
    }

    /// Forgets a dropped view's failure, counters and operators.
    pub fn forget_view(&self, name: &str) {
        self.failures.lock().expect("failures lock").remove(name);
        self.view_operators
            .lock()
            .expect("operators lock")
            .remove(name);
        self.view_counters
            .lock()
            .expect("counters lock")
            .remove(name);
    }

    /// Counts rows a view consumed and produced.
    pub fn count_view_rows(&self, name: &str, rows_in: u64, rows_out: u64) {
        let mut counters = self.view_counters.lock().expect("counters lock");
        let entry = counters.entry(name.to_owned()).or_default();
        entry.rows_in += rows_in;
        entry.rows_out += rows_out;
    }

    /// Counts rows a view's source readers delivered.
    pub fn count_source_rows(&self, name: &str, rows: u64) {
        let mut counters = self.view_counters.lock().expect("counters lock");
        counters.entry(name.to_owned()).or_default().source_rows += rows;
    }

    /// Rows into and out of every view since the server started.
    pub fn view_counters(&self) -> BTreeMap<String, ViewCounters> {
        self.view_counters.lock().expect("counters lock").clone()
    }

    /// Marks the catalog's views that failed.
    fn record_failures(&self, catalog: &mut Catalog) -> bool {
        let failures = self.failures.lock().expect("failures lock");
        let mut changed = false;
        for (name, failure) in failures.iter() {
            if let Some(def) = catalog.materialized_views.get_mut(name) {
                if def.failed.is_none() {
                    def.failed = Some(failure.clone());
                    changed = true;
                }
            }
        }
        changed
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

    /// Returns once every change made before the call is committed
    /// (source rows included).
    pub async fn flush(&self) -> WeirResult<()> {
        let epoch = {
            let working = self.working.lock().await;
            if self.is_dirty(&working) {
                working.epoch
            } else {
                working.epoch - 1
            }
        };
        self.wait_committed(epoch).await
    }

    fn is_dirty(&self, working: &WorkingState) -> bool {
        working.is_dirty() || self.stream_dirty.load(Ordering::Relaxed)
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

    /// Runs the epoch machinery until `shutdown` turns true: starts the
    /// stream worker (on a thread of its own: its operators compute
    /// without yielding) and the committer, and cuts epochs every
    /// checkpoint interval and whenever a statement waits. At shutdown it
    /// cuts what is pending one last time and waits for its commit.
    pub async fn run_coordinator(self: Arc<Self>, mut shutdown: watch::Receiver<bool>) {
        let (parts, parts_receiver) = mpsc::channel(MAX_EPOCHS_IN_FLIGHT);
        let (tables, tables_receiver) = mpsc::unbounded_channel();
        let control = self
            .control_receiver
            .lock()
            .expect("control lock")
            .take()
            .expect("the coordinator runs once");
        let worker = Worker::new(self.clone(), control, parts);
        let runtime = tokio::runtime::Handle::current();
        std::thread::Builder::new()
            .name("weir-stream".into())
            .spawn(move || runtime.block_on(worker.run()))
            .expect("spawn the stream worker");
        let committer = tokio::spawn(self.clone().run_committer(tables_receiver, parts_receiver));
        let compactor = tokio::spawn(self.clone().run_compactor());

        let periodic = !self.config.checkpoint_interval.is_zero();
        let mut ticker = tokio::time::interval(if periodic {
            self.config.checkpoint_interval
        } else {
            Duration::from_secs(3600)
        });
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = ticker.tick(), if periodic => {}
                _ = self.commit_requested.notified() => {}
                _ = shutdown.changed() => break,
            }
            let started = Instant::now();
            self.cut_epoch(&tables).await;
            let elapsed = started.elapsed();
            if elapsed < self.config.min_commit_gap {
                tokio::time::sleep(self.config.min_commit_gap - elapsed).await;
            }
        }
        compactor.abort();
        self.cut_epoch(&tables).await;
        drop(tables);
        if tokio::time::timeout(self.config.commit_timeout, committer)
            .await
            .is_err()
        {
            warn!("the last epoch did not commit before shutdown");
        }
    }

    /// Cuts the open epoch if it holds changes: the tables' part goes to
    /// the committer, their changes and the barrier to the stream worker.
    /// Waits first while too many epochs are in flight.
    async fn cut_epoch(&self, tables: &mpsc::UnboundedSender<TablePart>) {
        let mut committed = self.committed_epoch.subscribe();
        let in_flight = |committed: u64| {
            self.open_epoch.load(Ordering::Relaxed) - 1 - committed >= MAX_EPOCHS_IN_FLIGHT as u64
        };
        if committed.wait_for(|&c| !in_flight(c)).await.is_err() {
            return;
        }
        let mut working = self.working.lock().await;
        if !self.is_dirty(&working) {
            return;
        }
        let locked = Instant::now();
        if self.record_failures(&mut working.catalog) {
            working.catalog_changed();
        }
        let changes = crate::views::take_table_changes(&mut working);
        let epoch = working.epoch;
        // An epoch in which no view can have changed (no table a view
        // reads was written, no source rows arrived, no view started or
        // stopped) commits without a round trip through the worker.
        let through_views = !changes.is_empty()
            || self.stream_dirty.load(Ordering::SeqCst)
            || self.control_sent.swap(false, Ordering::SeqCst);
        match working.cut() {
            Ok(mut part) => {
                part.through_views = through_views;
                if through_views {
                    if !changes.is_empty() {
                        self.send_to_worker(Control::Changes(changes));
                    }
                    self.send_to_worker(Control::Barrier(epoch));
                }
                let _ = tables.send(part);
                self.open_epoch.store(working.epoch, Ordering::Relaxed);
                debug!(
                    epoch,
                    cut_ms = locked.elapsed().as_secs_f64() * 1e3,
                    "cut epoch"
                );
            }
            Err(e) => warn!(epoch, error = %e, "could not cut epoch"),
        }
    }

    /// Merges delta chains into bases in the background: after each
    /// commit, every table the store says is due is written as a new base
    /// (from its committed snapshot, or merged from the store for operator
    /// state; on a blocking thread, as this is CPU work), which the next
    /// commit names in place of the chain.
    async fn run_compactor(self: Arc<Self>) {
        let mut committed = self.committed_epoch.subscribe();
        while committed.changed().await.is_ok() {
            let jobs = {
                let mut store = self.store.lock().await;
                // The committed snapshot is the newest manifest's epoch:
                // both change together, under the store's lock.
                let committed = self.committed();
                store.compaction_jobs(|id| committed.tables.get(&id).cloned())
            };
            for job in jobs {
                let table = job.table;
                let compactor = self.store.lock().await.compactor();
                let runtime = tokio::runtime::Handle::current();
                let started = Instant::now();
                let merged =
                    tokio::task::spawn_blocking(move || runtime.block_on(compactor.compact(&job)))
                        .await;
                match merged {
                    Ok(Ok(base)) => {
                        debug!(
                            table = base.table,
                            deltas = base.merged,
                            bytes = base.base.len,
                            elapsed_ms = started.elapsed().as_millis() as u64,
                            "compacted"
                        );
                        self.counters.compactions.fetch_add(1, Ordering::Relaxed);
                        self.store.lock().await.install(base).await;
                    }
                    Ok(Err(e)) => {
                        warn!(error = %e, "compaction failed; it will be tried again");
                        self.store.lock().await.release(table).await;
                    }
                    Err(e) => {
                        warn!(error = %e, "compaction task failed");
                        self.store.lock().await.release(table).await;
                    }
                }
            }
        }
    }

    /// Commits epochs in order: each one's tables' part with the stream
    /// worker's views' part, retrying with backoff until the store takes
    /// it, then publishes it to readers.
    async fn run_committer(
        self: Arc<Self>,
        mut tables: mpsc::UnboundedReceiver<TablePart>,
        mut views: mpsc::Receiver<ViewPart>,
    ) {
        while let Some(part) = tables.recv().await {
            if !part.through_views {
                let view_part = self.unchanged_views(&part).await;
                match self.commit(part, view_part).await {
                    Ok(()) => {
                        self.counters
                            .epochs_without_views
                            .fetch_add(1, Ordering::Relaxed);
                    }
                    Err(e) => warn!(error = %e, "could not commit epoch"),
                }
                continue;
            }
            let Some(view_part) = views.recv().await else {
                warn!(
                    epoch = part.epoch,
                    "the stream worker is gone; epoch not committed"
                );
                return;
            };
            if view_part.epoch != part.epoch {
                warn!(
                    tables = part.epoch,
                    views = view_part.epoch,
                    "epoch parts out of step; stopping commits"
                );
                return;
            }
            if let Err(e) = self.commit(part, view_part).await {
                warn!(error = %e, "could not commit epoch");
            }
        }
    }

    /// The views' part of an epoch that did not go through the worker: the
    /// views as committed in the epoch before (which the committer, one
    /// epoch at a time and in order, has just published), each of their
    /// tables live with no change.
    async fn unchanged_views(&self, part: &TablePart) -> ViewPart {
        let committed = self.committed();
        let store = self.store.lock().await;
        let mut views = ViewPart {
            epoch: part.epoch,
            operator_rows: committed.operator_rows.clone(),
            offsets: committed.offsets.clone(),
            ..ViewPart::default()
        };
        for def in part.catalog.materialized_views.values() {
            for &id in std::iter::once(&def.id).chain(&def.state_ids) {
                if let Some(spec) = store.spec_of(id) {
                    let unchanged = TableChange {
                        deltas: Vec::new(),
                        next_row_id: 0,
                        spec: spec.clone(),
                    };
                    views.tables.insert(id, unchanged);
                }
            }
            if let Some(snapshot) = committed.tables.get(&def.id) {
                views.snapshots.insert(def.id, snapshot.clone());
            }
        }
        views
    }

    async fn commit(&self, part: TablePart, views: ViewPart) -> WeirResult<()> {
        let TablePart {
            epoch,
            mut catalog,
            mut tables,
            mut snapshots,
            through_views: _,
        } = part;
        self.record_failures(&mut catalog);
        // A view missing from the worker's part failed, and
        // `record_failures` has said so in this epoch's catalog.
        tables.extend(views.tables);
        snapshots.extend(views.snapshots);
        let delta = EpochDelta {
            epoch,
            catalog: serde_json::to_value(&catalog).map_err(WeirError::internal)?,
            tables,
            sources: views.offsets.clone(),
        };
        let snapshot = DbSnapshot {
            epoch,
            catalog: Arc::new(catalog),
            tables: snapshots,
            operator_rows: views.operator_rows,
            offsets: views.offsets,
        };
        let started_at = SystemTime::now();
        let started = Instant::now();
        let mut retries = 0;
        let mut backoff = Duration::from_millis(10);
        let stats = loop {
            let mut store = self.store.lock().await;
            match store.commit(&delta).await {
                Ok((manifest, stats)) => {
                    // Published under the store's lock, so that the
                    // compactor sees the snapshot of the store's newest
                    // manifest.
                    *self.committed.write().expect("snapshot lock") = Arc::new(snapshot);
                    *self.last_manifest.write().expect("manifest lock") = Some(Arc::new(manifest));
                    break stats;
                }
                Err(e) => {
                    retries += 1;
                    warn!(epoch, error = %e, "commit failed; retrying");
                    *self.last_commit_error.lock().expect("error lock") = Some(e.to_string());
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(5));
                }
            }
        };
        *self.last_commit_error.lock().expect("error lock") = None;
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
        Ok(())
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
        let config = DatabaseConfig {
            checkpoint_interval: Duration::from_millis(50),
            commit_timeout: Duration::from_millis(300),
            ..DatabaseConfig::default()
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

    /// Runs SQL in `session`; returns the rows of the last statement.
    async fn sql(session: &mut crate::session::Session, text: &str) -> Vec<RecordBatch> {
        let mut rows = Vec::new();
        for statement in weir_sql::parse(text).unwrap() {
            match crate::statement::execute(session, &statement, &None).await {
                Ok(crate::session::Output::Rows { batches, .. }) => rows = batches,
                Ok(_) => rows = Vec::new(),
                Err(e) => panic!("{text}: {e}"),
            }
        }
        rows
    }

    fn first_i64(batches: &[RecordBatch]) -> i64 {
        let column =
            datafusion::arrow::compute::cast(batches[0].column(0), &DataType::Int64).unwrap();
        column
            .as_any()
            .downcast_ref::<datafusion::arrow::array::Int64Array>()
            .unwrap()
            .value(0)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_slow_store_makes_epochs_longer_not_state_bigger() {
        let dir = tempfile::tempdir().unwrap();
        let local: Arc<dyn ObjectStore> =
            Arc::new(LocalFileSystem::new_with_prefix(dir.path()).unwrap());
        let (store, faults) = FaultyStore::new(local);
        let config = DatabaseConfig {
            checkpoint_interval: Duration::from_millis(20),
            ..DatabaseConfig::default()
        };
        let state = StateStore::with_store(store, Path::default(), Default::default());
        let db = Database::open(state, config).await.unwrap();
        let (_stop, stopped) = watch::channel(false);
        tokio::spawn(db.clone().run_coordinator(stopped));
        let runtime = Arc::new(datafusion::execution::runtime_env::RuntimeEnv::default());
        let mut session = crate::session::Session::new(db.clone(), runtime, "weir".into()).unwrap();
        sql(
            &mut session,
            "CREATE SOURCE s (k INT, v BIGINT) WITH (connector = 'datagen', rows_per_second = 20000, fields.k.min = 0, fields.k.max = 9);
             CREATE MATERIALIZED VIEW m AS SELECT k, count(*) AS n, sum(v) AS total FROM s GROUP BY k",
        )
        .await;

        // Every put now takes 150 ms: a commit (data object and manifest)
        // takes 300 ms, fifteen checkpoint intervals.
        faults.lock().unwrap().put_delay = Some(Duration::from_millis(150));
        let epochs_before = db.checkpoints().len();
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(3) {
            assert!(db.epoch_lag() <= MAX_EPOCHS_IN_FLIGHT as u64);
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let slow: Vec<CheckpointRecord> = db.checkpoints()[epochs_before..].to_vec();
        assert!(slow.len() >= 3, "{} epochs committed", slow.len());
        assert!(slow
            .iter()
            .all(|c| c.duration >= Duration::from_millis(300)));
        // The stream went on at its rate, folded into state: each epoch
        // holds thousands of rows, but writes only the ten groups' rows.
        let rows_in = db.view_counters()["m"].rows_in;
        assert!(rows_in >= 30_000, "the source was not held back: {rows_in}");
        for checkpoint in &slow {
            assert!(
                checkpoint.bytes < 64 * 1024,
                "an epoch of ten groups wrote {} bytes",
                checkpoint.bytes
            );
        }

        // Back to a fast store: exactly the rows before the reader's
        // position are in the view.
        faults.lock().unwrap().put_delay = None;
        sql(&mut session, "CHECKPOINT; BEGIN").await;
        let position = first_i64(
            &sql(
                &mut session,
                "SELECT position FROM weir_source_readers WHERE view = 'm'",
            )
            .await,
        );
        let counted = first_i64(&sql(&mut session, "SELECT sum(n) FROM m").await);
        sql(&mut session, "COMMIT").await;
        assert!(position >= rows_in as i64 / 2);
        assert_eq!(counted, position);
    }
}
