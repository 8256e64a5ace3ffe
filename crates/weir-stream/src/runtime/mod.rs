//! The stream runtime: the task that runs every materialized view's
//! operators, the source readers that feed it, and the messages between
//! them and the server.
//!
//! ```text
//!             commands (table changes, Barrier(E), view starts and drops)
//!  server ─────────────────────────────────────────────────────────────▶ worker ──ViewPart(E)──▶ server's committer
//!                                       readers ──Rows, Barrier(E)──────▶   │
//!  server ◀── RuntimeStatus (rows since the last barrier, counters, operators) ┘
//! ```
//!
//! The server talks to the runtime through [`Command`]s, in order with
//! the epochs' barriers, and receives one [`ViewPart`] per epoch: the
//! views' state changes, reader positions and the views that failed in
//! it. What the runtime has done is readable at any time in its
//! [`RuntimeStatus`]. The runtime never calls into the server.
//!
//! | module | holds |
//! |---|---|
//! | `source` | the [`Source`] trait connectors implement, reader positions |
//! | `reader` | tasks delivering a share of a source's splits to a view, barriers in-band |
//! | `shared` | shared readers: one reader per share of a source, for every view that reads it |
//! | `view` | a running view: operators, output table (or sink), memory budget |
//! | `sink` | the [`Sink`] trait a sink's output goes to, and `blackhole` |
//! | `event_clock` | a view's watermarks, from its instances' event times |
//! | `worker` | the coordinator's loop: commands, readers and workers' cuts in, barriers aligned, parts out |
//! | `cluster` | the timely workers (of one process or a cluster) that run views over sources and tables as partitioned instances |
//! | `batch` | the change batches timely moves, and their exchange by key |
//! | `wire` | what crosses processes: Arrow data as IPC, errors as their message |

mod batch;
mod cluster;
mod event_clock;
mod reader;
mod shared;
mod sink;
mod source;
mod view;
mod wire;
mod worker;

#[cfg(test)]
mod tests;

pub use batch::{ChangeBatch, KeyRouter};
pub use cluster::serve_process;
pub use reader::EpochReads;
pub use shared::{SharedReaderFigures, SharedReaders};
pub use sink::{from_log_batch, log_batch, log_schema, Blackhole, EpochLog, Sink, WEIGHT_COLUMN};
pub use source::{deal_splits, position_key, ReadFrom, Source, SourceReader};
pub use view::{
    apply_output, catch_up, check_memory, deliver, is_counted, EarlyDeltas, MemoryBudgetExceeded,
    RelationChanges, SourceInput, ViewRuntime, COUNT_COLUMN,
};

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use datafusion::error::DataFusionError;
use tokio::sync::{mpsc, oneshot};
use weir_state::{TableChange, TableId, TableSnapshot};

use crate::{Changes, OperatorInfo};

/// A view being created: the changes to the relations it reads after its
/// snapshot, queued for its catch-up.
pub type PendingQueue = Arc<Mutex<Vec<RelationChanges>>>;

/// What the server tells the runtime, in order.
#[derive(Debug)]
pub enum Command {
    /// Changes to tables in the open epoch.
    Changes(RelationChanges),
    /// Every table change of `epoch` has been sent.
    Barrier(u64),
    /// From now on, queue the changes to `sources` for a view being
    /// created; reply with the current contents of the views among them.
    AddPending {
        /// Identifies the pending view.
        token: u64,
        /// Tables and views it reads.
        sources: BTreeSet<String>,
        /// Where its changes queue up.
        queue: PendingQueue,
        /// The snapshots of the views it reads.
        reply: oneshot::Sender<HashMap<String, TableSnapshot>>,
    },
    /// A pending view's creation ended without it.
    RemovePending(u64),
    /// Start running a view: created (catching up on what its pending
    /// entry `token` queued) or restored at startup.
    Start(Box<ViewRuntime>, Option<u64>),
    /// Stop and forget a view.
    Drop(String),
}

/// The views' share of one checkpoint.
#[derive(Debug, Default)]
pub struct ViewPart {
    /// The epoch.
    pub epoch: u64,
    /// Every running view's output table and operator states.
    pub tables: BTreeMap<TableId, TableChange>,
    /// The output tables' contents, for readers.
    pub snapshots: HashMap<TableId, TableSnapshot>,
    /// Distinct rows of each operator state.
    pub operator_rows: HashMap<TableId, usize>,
    /// Every (view, source)'s split positions, by [`position_key`].
    pub positions: BTreeMap<String, Vec<u64>>,
    /// Views that stopped in this epoch; their tables are not in `tables`.
    pub failures: Vec<ViewFailed>,
    /// The epoch's changes of each sink that delivers after the commit
    /// (see [`EpochLog`]), by the sink's output table.
    pub sink_changes: BTreeMap<TableId, Changes>,
}

/// A view that stopped for good, and why.
#[derive(Debug)]
pub struct ViewFailed {
    /// The view.
    pub view: String,
    /// Why it stopped.
    pub reason: FailureReason,
}

/// Why a view stopped.
#[derive(Debug)]
pub enum FailureReason {
    /// Its operators or output failed (an expression error, its memory
    /// budget, state that could not be taken).
    Error(DataFusionError),
    /// A source it reads failed or its reader stopped: its position would
    /// no longer be checkpointed, so it cannot go on exactly-once.
    Source {
        /// The source.
        source: String,
        /// What the reader reported, if anything.
        error: Option<DataFusionError>,
    },
    /// It reads a view that failed.
    Input(String),
}

impl std::fmt::Display for FailureReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FailureReason::Error(e) => write!(f, "{e}"),
            FailureReason::Source {
                source,
                error: Some(e),
            } => write!(f, "its source \"{source}\" failed: {e}"),
            FailureReason::Source {
                source,
                error: None,
            } => write!(f, "its reader of source \"{source}\" stopped"),
            FailureReason::Input(view) => write!(f, "it reads \"{view}\", which failed"),
        }
    }
}

/// Rows into and out of one view since the server started.
#[derive(Debug, Default, Clone, Copy)]
pub struct ViewCounters {
    /// Input change rows processed.
    pub rows_in: u64,
    /// Output change rows produced.
    pub rows_out: u64,
    /// Rows its source readers delivered (part of `rows_in`).
    pub source_rows: u64,
}

/// Settings of the runtime.
#[derive(Debug, Clone)]
pub struct RuntimeConfig {
    /// The most bytes one view's state may hold.
    pub view_memory_bytes: usize,
    /// How many workers run the views (`--workers`): a view over sources
    /// and tables runs as one partitioned instance per worker; a view over
    /// other views runs in the coordinator, reading each source with this
    /// many readers.
    pub workers: usize,
    /// The epoch the first barrier will end.
    pub first_epoch: u64,
    /// How long an instance of a watermark node may read nothing before
    /// it stops holding its view's watermark back.
    pub watermark_idle_timeout: std::time::Duration,
    /// The processes of a timely cluster this one is process 0 of
    /// (`--cluster`); `None`: one process.
    pub cluster: Option<ClusterConfig>,
    /// Bytes a source reader reads into one epoch before it asks for a
    /// cut and waits for the barrier (`--epoch-read-limit-mb`).
    pub epoch_read_limit: usize,
}

/// The processes of a timely cluster: every process runs `--workers`
/// workers and a share of every partitioned view; process 0 also runs
/// the coordinator, which serves clients and owns the state store.
#[derive(Debug, Clone)]
pub struct ClusterConfig {
    /// This process's index in `addresses`.
    pub process: usize,
    /// Every process's `host:port` for timely's connections, process 0
    /// first.
    pub addresses: Vec<String>,
}

/// Plans a partitioned view again in a process other than the
/// coordinator's, from the definition the coordinator sends: the same
/// plan, and connectors for the sources it reads.
pub trait ViewBuilder: Send + Sync {
    /// Plans the view `definition` describes (see
    /// [`ViewRuntime::definition`]).
    fn build(&self, definition: &str) -> crate::Result<BuiltView>;
}

/// A view planned by a [`ViewBuilder`].
pub struct BuiltView {
    /// Its plan.
    pub plan: crate::StreamPlan,
    /// A connector for each source it reads, by name.
    pub sources: BTreeMap<String, Arc<dyn Source>>,
}

/// One worker's share of a partitioned view.
#[derive(Debug, Clone, Default)]
pub struct WorkerFigures {
    /// The worker, among all processes' workers.
    pub worker: usize,
    /// Its process.
    pub process: usize,
    /// Source rows its readers delivered since the server started.
    pub rows_read: u64,
    /// Rows its operators' state holds (over every state table).
    pub state_rows: u64,
}

/// What the runtime has done, readable by the server at any time.
#[derive(Debug, Default)]
pub struct RuntimeStatus {
    /// Source batches read, and how many had been read when the last
    /// barrier was sent: readers in the workers count batches while the
    /// coordinator cuts, so a flag cleared at a cut could hide a batch
    /// read just before it.
    batches_read: AtomicU64,
    batches_at_barrier: AtomicU64,
    counters: Mutex<BTreeMap<String, ViewCounters>>,
    operators: Mutex<BTreeMap<String, Vec<OperatorInfo>>>,
    workers: Mutex<BTreeMap<String, Vec<WorkerFigures>>>,
    /// Set when workers of other processes read sources: their batches
    /// are not counted here, so every epoch may have changes.
    remote_readers: std::sync::atomic::AtomicBool,
    /// Set when a watermark moved at the last cut: the next barrier
    /// carries it, so an epoch has work even without new rows.
    watermark_moved: std::sync::atomic::AtomicBool,
    /// The shared source readers of this process.
    shared_readers: Arc<SharedReaders>,
    /// How much each source reader reads into one epoch.
    epoch_reads: Arc<EpochReads>,
}

impl RuntimeStatus {
    /// The status of a runtime whose source readers read at most
    /// `epoch_read_limit` bytes into one epoch.
    pub(crate) fn new(epoch_read_limit: usize) -> Self {
        RuntimeStatus {
            epoch_reads: Arc::new(EpochReads::new(epoch_read_limit)),
            ..RuntimeStatus::default()
        }
    }

    /// Whether source rows arrived since the last barrier: the open epoch
    /// has changes even if no table does.
    pub fn has_rows_since_barrier(&self) -> bool {
        self.remote_readers.load(Ordering::SeqCst)
            || self.watermark_moved.load(Ordering::SeqCst)
            || self.batches_read.load(Ordering::SeqCst)
                > self.batches_at_barrier.load(Ordering::SeqCst)
    }

    /// Rows into and out of every running or failed view.
    pub fn view_counters(&self) -> BTreeMap<String, ViewCounters> {
        self.counters.lock().expect("counters lock").clone()
    }

    /// Every running or failed view's operators as of its last
    /// checkpoint, its output table last.
    pub fn view_operators(&self) -> BTreeMap<String, Vec<OperatorInfo>> {
        self.operators.lock().expect("operators lock").clone()
    }

    /// Each worker's share of every partitioned view, as of its last
    /// checkpoint.
    pub fn view_workers(&self) -> BTreeMap<String, Vec<WorkerFigures>> {
        self.workers.lock().expect("workers lock").clone()
    }

    /// Resolves once a source reader has read its limit into the open
    /// epoch and waits for the next barrier: the epoch should be cut.
    pub async fn cut_wanted(&self) {
        self.epoch_reads.cut_wanted().await
    }

    /// The shared source readers running in this process.
    pub fn shared_readers(&self) -> Vec<SharedReaderFigures> {
        self.shared_readers.figures()
    }

    fn note_watermark_moved(&self) {
        self.watermark_moved.store(true, Ordering::SeqCst);
    }

    fn set_remote_readers(&self, remote: bool) {
        self.remote_readers.store(remote, Ordering::SeqCst);
    }

    fn publish_workers(&self, view: &str, workers: Vec<WorkerFigures>) {
        self.workers
            .lock()
            .expect("workers lock")
            .insert(view.to_owned(), workers);
    }

    /// A source batch was read.
    fn note_batch(&self) {
        self.batches_read.fetch_add(1, Ordering::SeqCst);
    }

    /// A view failed: the next epoch goes through the views even if no
    /// rows arrive, so that its checkpoint reports the failure.
    fn note_failure(&self) {
        self.batches_read.fetch_add(1, Ordering::SeqCst);
    }

    /// A barrier was sent: batches read from now on are in later epochs
    /// (or in this one, which then counts them twice: one epoch more goes
    /// through the views, never one less).
    fn note_barrier(&self) {
        self.watermark_moved.store(false, Ordering::SeqCst);
        let read = self.batches_read.load(Ordering::SeqCst);
        self.batches_at_barrier.store(read, Ordering::SeqCst);
    }

    fn count(&self, view: &str, update: impl FnOnce(&mut ViewCounters)) {
        let mut counters = self.counters.lock().expect("counters lock");
        update(counters.entry(view.to_owned()).or_default());
    }

    fn publish_operators(&self, view: &str, operators: Vec<OperatorInfo>) {
        self.operators
            .lock()
            .expect("operators lock")
            .insert(view.to_owned(), operators);
    }

    fn forget(&self, view: &str) {
        self.counters.lock().expect("counters lock").remove(view);
        self.operators.lock().expect("operators lock").remove(view);
        self.workers.lock().expect("workers lock").remove(view);
    }
}

/// The server's handle on the runtime.
#[derive(Debug)]
pub struct Runtime {
    commands: mpsc::UnboundedSender<Command>,
    status: Arc<RuntimeStatus>,
    /// The worker's inputs until [`Runtime::start`] runs it.
    unstarted: Mutex<Option<(mpsc::UnboundedReceiver<Command>, RuntimeConfig)>>,
}

impl Runtime {
    /// A runtime that queues commands until it starts.
    pub fn new(config: RuntimeConfig) -> Self {
        let (commands, receiver) = mpsc::unbounded_channel();
        Runtime {
            commands,
            status: Arc::new(RuntimeStatus::new(config.epoch_read_limit)),
            unstarted: Mutex::new(Some((receiver, config))),
        }
    }

    /// Starts the worker on a thread of its own (its operators compute
    /// without yielding), driven by the current tokio runtime. Returns the
    /// receiver of its parts, one per epoch; at most `parts_in_flight`
    /// wait in it before the worker, and then the sources, wait.
    ///
    /// # Panics
    /// If called twice.
    pub fn start(&self, parts_in_flight: usize) -> mpsc::Receiver<ViewPart> {
        let (commands, config) = self
            .unstarted
            .lock()
            .expect("runtime lock")
            .take()
            .expect("the runtime starts once");
        let (parts, receiver) = mpsc::channel(parts_in_flight);
        let worker = worker::Worker::new(config, self.status.clone(), commands, parts);
        let tokio = tokio::runtime::Handle::current();
        std::thread::Builder::new()
            .name("weir-stream".into())
            .spawn(move || tokio.block_on(worker.run()))
            .expect("spawn the stream worker");
        receiver
    }

    /// Sends a command; false if the worker is gone (shutdown).
    pub fn send(&self, command: Command) -> bool {
        self.commands.send(command).is_ok()
    }

    /// What the runtime has done.
    pub fn status(&self) -> &RuntimeStatus {
        &self.status
    }
}

/// The time now in Unix microseconds (0 before 1970): an epoch's `now()`.
pub fn unix_micros() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
}
