//! The database: the working state that DML changes, the committed snapshot
//! that queries read, and the epoch coordinator that turns one into the
//! other.
//!
//! ```text
//!  DML ──lock──▶ WorkingState (open epoch E) ──cut──▶ tables' part of E ─────────┐
//!                      │ table changes, Barrier(E)                              ▼
//!                      └──────────────────────▶ stream runtime ─views' part──▶ committer
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
//!
//! One file per concern: `working.rs` (the open epoch's state and its
//! cut), `coordinator.rs` (cutting epochs), `committer.rs` (uploading
//! them in order and publishing them), `compactor.rs` (merging delta
//! chains into bases), `recovery.rs` (opening the database from the
//! newest manifest); this file holds the shared state and what sessions
//! call.

mod committer;
mod compactor;
mod coordinator;
mod recovery;
mod working;

use working::TablePart;
pub use working::WorkingState;

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

use tokio::sync::{watch, Mutex, MutexGuard, Notify};
use tracing::warn;
use weir_state::{Manifest, StateStore, StateTable, StoreConfig, TableId, TableSnapshot};

use crate::catalog::{Catalog, ViewFailure};
use crate::error::{SqlState, WeirError, WeirResult};
use weir_stream::runtime::{Command, Runtime, RuntimeConfig, ViewCounters};
use weir_stream::OperatorInfo;

/// How many epochs may be cut and not yet committed. Beyond that the
/// coordinator waits, the stream worker waits to hand over its state, and
/// back-pressure reaches the sources.
pub const MAX_EPOCHS_IN_FLIGHT: usize = 2;

/// The default of `--view-memory-mb`: 4 GiB, as much as all queries
/// together may use by default.
pub const DEFAULT_VIEW_MEMORY_MB: usize = 4096;

/// The default of `--epoch-read-limit-mb`.
pub const DEFAULT_EPOCH_READ_LIMIT_MB: usize =
    weir_stream::runtime::EpochReads::DEFAULT_LIMIT >> 20;

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
    /// Bytes a source reader reads into one epoch before it asks for a
    /// cut and waits for the barrier (`--epoch-read-limit-mb`).
    pub epoch_read_limit: usize,
    /// How many timely workers run the views that read only sources
    /// (partitioned by key); other views read each source with this many
    /// readers.
    pub workers: usize,
    /// The processes of the timely cluster this server is process 0 of
    /// (`--cluster`); `None`: one process.
    pub cluster: Option<weir_stream::runtime::ClusterConfig>,
    /// How long a reader of a source with a watermark may read nothing
    /// before it stops holding the watermark back
    /// (`--watermark-idle-timeout`).
    pub watermark_idle_timeout: Duration,
    /// The file holding the key secrets are sealed with
    /// (`--secret-key-file`); `None`: this server keeps no secrets.
    pub secret_key_file: Option<std::path::PathBuf>,
}

/// The number of cores, the default of `--workers`.
pub fn default_workers() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

impl Default for DatabaseConfig {
    fn default() -> Self {
        DatabaseConfig {
            checkpoint_interval: Duration::from_secs(1),
            min_commit_gap: Duration::from_millis(2),
            commit_timeout: Duration::from_secs(30),
            view_memory_bytes: DEFAULT_VIEW_MEMORY_MB << 20,
            epoch_read_limit: DEFAULT_EPOCH_READ_LIMIT_MB << 20,
            workers: default_workers(),
            cluster: None,
            watermark_idle_timeout: Duration::from_secs(5),
            secret_key_file: None,
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
    /// Every (view, source)'s split positions (see
    /// `runtime::position_key`), and the position of each table a
    /// connector feeds (see [`table_position_key`]).
    pub offsets: BTreeMap<String, Vec<u64>>,
}

impl DbSnapshot {
    /// Where table `id`, which a connector feeds, stood in its upstream
    /// at this epoch (0: its snapshot was not complete).
    pub fn table_position(&self, id: TableId) -> u64 {
        self.offsets
            .get(&table_position_key(id))
            .and_then(|p| p.first().copied())
            .unwrap_or(0)
    }
}

/// The key of a connector-fed table's upstream position in the manifest's
/// positions.
pub fn table_position_key(id: TableId) -> String {
    format!("table/{id}")
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
    /// The oldest committed epoch the store keeps (`SUBSCRIBE ... AS OF`
    /// reaches back to it).
    pub oldest_retained_epoch: AtomicU64,
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
    /// Prepared point reads served without the planner since start
    /// (`point_read.rs`).
    pub point_reads: AtomicU64,
    /// Executions of prepared queries that reused a kept plan
    /// (`plan_cache.rs`).
    pub plans_reused: AtomicU64,
    /// Idle sessions' DataFusion contexts dropped (`idle.rs`).
    pub contexts_released: AtomicU64,
    /// Chunks sorted for lookups after their commit, before a read asked
    /// (`order_builder.rs`).
    pub chunks_sorted_ahead: AtomicU64,
    /// Session-scoped advisory locks (`pg_advisory_lock`).
    pub advisory_locks: Arc<crate::functions::AdvisoryLocks>,
    history: std::sync::Mutex<VecDeque<CheckpointRecord>>,
    last_manifest: RwLock<Option<Arc<Manifest>>>,
    /// The working state's open epoch, readable without its lock.
    open_epoch: AtomicU64,
    store_config: StoreConfig,
    /// Reads the store's objects without its lock.
    slice_reader: weir_state::SliceReader,
    /// The stream runtime: commands go to it in order with the epochs'
    /// barriers; the coordinator starts it.
    runtime: Runtime,
    /// A message went to the stream worker (a view started, stopped,
    /// began its creation) since the last epoch that went through it.
    control_sent: AtomicBool,
    /// Views that failed, with the reason, until the catalog says so.
    failures: std::sync::Mutex<BTreeMap<String, ViewFailure>>,
    /// Materialized views' output tables loaded at startup, until their
    /// views are restored.
    restored_outputs: std::sync::Mutex<HashMap<TableId, StateTable>>,
    /// The state format of the manifest recovered at startup.
    recovered_state_format: u32,
    /// Where each sink that delivers committed epochs stands.
    pub sink_deliveries: crate::sink::SinkDeliveries,
    /// Where each table a connector feeds stands in its ingest.
    pub cdc: crate::cdc::CdcStatuses,
    /// How each file source's listing goes.
    pub file_listings: crate::file_source::ListingStates,
    /// Every sequence's value (`sequences/mod.rs`).
    pub sequences: Arc<crate::sequences::Sequences>,
}

impl Database {
    /// Whether the server is process 0 of a cluster (`--cluster`).
    pub fn is_cluster(&self) -> bool {
        self.config.cluster.is_some()
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

    /// Sends a command to the stream runtime. Callers that change the
    /// catalog send it while they hold the working lock, so it reaches the
    /// runtime before the barrier of the epoch that commits the change.
    pub fn send_control(&self, command: Command) {
        // Forgetting a pending view's queue changes no view's state.
        if !matches!(command, Command::RemovePending(_)) {
            self.control_sent.store(true, Ordering::SeqCst);
        }
        self.send_to_worker(command);
    }

    /// Sends a command to the stream runtime without marking the open
    /// epoch as one that must go through it.
    fn send_to_worker(&self, command: Command) {
        if !self.runtime.send(command) {
            warn!("the stream worker is gone");
        }
    }

    /// The store's tunables.
    pub fn store_config(&self) -> &StoreConfig {
        &self.store_config
    }

    /// The file holding the key secrets are sealed with.
    pub fn secret_key_file(&self) -> WeirResult<&std::path::Path> {
        self.config.secret_key_file.as_deref().ok_or_else(|| {
            WeirError::new(
                SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE,
                "this server has no secret key file (--secret-key-file)",
            )
        })
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

    /// Forgets a dropped view's failure.
    pub fn forget_failure(&self, name: &str) {
        self.failures.lock().expect("failures lock").remove(name);
    }

    /// Every running or failed view's operators as of its last checkpoint.
    pub fn view_operators(&self) -> BTreeMap<String, Vec<OperatorInfo>> {
        self.runtime.status().view_operators()
    }

    /// Each worker's share of every partitioned view.
    pub fn view_workers(&self) -> BTreeMap<String, Vec<weir_stream::runtime::WorkerFigures>> {
        self.runtime.status().view_workers()
    }

    /// The shared source readers running in this process.
    pub fn shared_readers(&self) -> Vec<weir_stream::runtime::SharedReaderFigures> {
        self.runtime.status().shared_readers()
    }

    /// Rows into and out of every view since the server started.
    pub fn view_counters(&self) -> BTreeMap<String, ViewCounters> {
        self.runtime.status().view_counters()
    }

    /// Whether source rows arrived since the stream runtime's last
    /// barrier: the open epoch has changes even if no table does.
    fn stream_dirty(&self) -> bool {
        self.runtime.status().has_rows_since_barrier()
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

    /// Hears of every committed epoch.
    pub fn subscribe_committed(&self) -> watch::Receiver<u64> {
        self.committed_epoch.subscribe()
    }

    /// A reader of stored objects that neither holds up commits nor waits
    /// for them.
    pub fn slice_reader(&self) -> &weir_state::SliceReader {
        &self.slice_reader
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::{ColumnDef, TableDef};
    use datafusion::arrow::array::{Int32Array, RecordBatch};
    use datafusion::arrow::datatypes::DataType;
    use object_store::local::LocalFileSystem;
    use object_store::path::Path;
    use object_store::ObjectStore;
    use std::time::Instant;
    use weir_state::faulty::FaultyStore;

    /// A running database over a local folder whose store fails as the
    /// returned faults say; it runs while the sender lives.
    struct FaultyDatabase {
        db: Arc<Database>,
        faults: Arc<std::sync::Mutex<weir_state::faulty::Faults>>,
        _dir: tempfile::TempDir,
        _stop: watch::Sender<bool>,
    }

    async fn open_faulty(config: DatabaseConfig) -> FaultyDatabase {
        let dir = tempfile::tempdir().unwrap();
        let local: Arc<dyn ObjectStore> =
            Arc::new(LocalFileSystem::new_with_prefix(dir.path()).unwrap());
        let (store, faults) = FaultyStore::new(local);
        let state = StateStore::with_store(store, Path::default(), Default::default());
        let db = Database::open(state, config).await.unwrap();
        let (stop, stopped) = watch::channel(false);
        tokio::spawn(db.clone().run_coordinator(stopped));
        FaultyDatabase {
            db,
            faults,
            _dir: dir,
            _stop: stop,
        }
    }

    #[tokio::test]
    async fn writes_wait_while_the_store_fails_and_commit_once_it_is_back() {
        let FaultyDatabase { db, faults, .. } = &open_faulty(DatabaseConfig {
            checkpoint_interval: Duration::from_millis(50),
            commit_timeout: Duration::from_millis(300),
            ..DatabaseConfig::default()
        })
        .await;

        let def = TableDef {
            append_only: false,
            watermark: None,
            id: 0,
            name: "t".into(),
            columns: vec![ColumnDef {
                identity: None,
                display_scale: None,
                name: "x".into(),
                data_type: DataType::Int32,
                nullable: false,
                default: None,
                max_chars: None,
                declared: None,
                json: None,
            }],
            primary_key: vec![0],
            connector: None,
            unique: Vec::new(),
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
                Ok(crate::session::Output::Rows { rows: stream, .. }) => {
                    rows = crate::rows::collect(stream).await.unwrap()
                }
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
        let FaultyDatabase { db, faults, .. } = &open_faulty(DatabaseConfig {
            checkpoint_interval: Duration::from_millis(20),
            ..DatabaseConfig::default()
        })
        .await;
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
        // The epochs in flight when the store slowed down may have made
        // some of their puts before it did.
        let slowed = epochs_before + MAX_EPOCHS_IN_FLIGHT;
        let slow: Vec<CheckpointRecord> = db.checkpoints()[slowed..].to_vec();
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
