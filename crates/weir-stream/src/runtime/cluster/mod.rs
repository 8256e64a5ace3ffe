//! The partitioned runtime: a view over sources and tables runs as one
//! instance of its dataflow per timely worker, its stateful operators
//! partitioned by key. The workers may span processes (timely's cluster
//! mode); the coordinator runs in process 0 beside worker 0.
//!
//! ```text
//!  coordinator ──Start, Drop, Barrier(E), Changes──▶ worker 0 ──control dataflow (in order)──▶ every worker (Changes: worker 0)
//!  worker 0: table changes ─▶ the view's table input (advanced at Barrier(E))
//!  worker w: readers of its splits ─▶ stateless ops ─▶ exchange by key ─▶ stateful op ─▶ ... ─▶ shard
//!  shard (view v, worker w) ──cut of E: output, state deltas, positions──▶ exchange to worker 0 ─▶ forward ─▶ coordinator
//! ```
//!
//! Commands reach every worker through a control dataflow: worker 0
//! feeds each command into its input at the next timestamp and every
//! worker applies the commands whose timestamps its frontier has passed,
//! in timestamp order. So every worker builds and drops the views'
//! dataflows in one order (timely requires it) and sees every barrier
//! after the starts before it. A table's changes go to worker 0 alone,
//! which feeds them into the view's table input at the open epoch.
//!
//! Epochs are timely timestamps. Each worker reads its share of every
//! source's splits; a reader's rows go into its input at the open epoch,
//! and when the reader delivers `Barrier(E)` the input advances to E+1.
//! A stateful operator processes the rows of the earliest epoch it has
//! not cut and holds later epochs' rows; when its input frontier passes E
//! it flushes E, takes its state delta of E and records it for the shard.
//! When the shard's frontier passes E, every operator of the worker has
//! cut E: the shard sends E's output, state deltas, the readers' split
//! positions and the operators' figures to worker 0, which hands each
//! worker's cuts to the coordinator in epoch order. The coordinator aligns
//! the workers' cuts like readers' barriers and commits.
//!
//! Timely has no back-pressure: a worker reads its readers only while at
//! most one epoch is open beyond its shard's frontier, so at most two
//! epochs are in flight; epochs advance only with the coordinator's
//! barriers. A worker never blocks (a blocked worker would stall every
//! other worker's progress): worker 0's messages for the coordinator wait
//! in an outbox until the channel takes them.

mod operators;

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use datafusion::arrow::record_batch::RecordBatch;
use datafusion::error::DataFusionError;
use serde::{Deserialize, Serialize};
use timely::container::CapacityContainerBuilder;
use timely::dataflow::channels::pact::{DistributorPact, Pipeline};
use timely::dataflow::operators::generic::Operator as _;
use timely::dataflow::operators::vec::Map;
use timely::dataflow::operators::{Concatenate, Exchange, Input, Probe};
use timely::dataflow::{InputHandle, ProbeHandle};
use tokio::sync::mpsc;
use tracing::{debug, info};
use weir_state::TableId;

use super::batch::{ChangeBatch, KeyRouter};
use super::reader::{Reader, ReaderSpec, SourceMessage};
use super::source::{deal_splits, position_key, Source};
use super::view::SourceInput;
use super::wire::{IpcBatch, WireChanges, WireDelta, WireError, WireFailure};
use super::{ClusterConfig, RuntimeStatus, ViewBuilder};
use crate::dataflow::{instantiate, two_phase};
use crate::{NodeKind, Operator, OperatorInfo, OperatorStats, Placement};
use crate::{Result, StreamPlan};
use operators::{
    forward, shard, stateful, stateless, ChangeStream, Phase, Shared, Stateful, WorkerId,
};

/// What the coordinator tells every worker, in one order.
#[derive(Clone, Serialize, Deserialize)]
pub(super) enum ClusterCommand {
    /// Run a view.
    Start(ViewStart),
    /// Stop running a view.
    Drop(String),
    /// Every row of epoch E has been read up to the readers' barriers,
    /// and every table change of E sent; the views' watermarks in force
    /// from E's cut on (by view; views without any are left out).
    Barrier(u64, BTreeMap<String, crate::watermark::Watermarks>),
    /// Changes of the open epoch to a table a view reads; for worker 0
    /// only, which feeds them into the view's dataflow.
    Changes {
        view: String,
        relation: String,
        changes: Vec<WireChanges>,
    },
}

impl ClusterCommand {
    /// The workers that receive it: worker 0 for table changes, every
    /// worker for the rest.
    fn targets(&self, peers: usize) -> std::ops::Range<usize> {
        match self {
            ClusterCommand::Changes { .. } => 0..1,
            _ => 0..peers,
        }
    }
}

/// A view to run partitioned.
#[derive(Clone, Serialize, Deserialize)]
pub(super) struct ViewStart {
    pub name: String,
    pub id: TableId,
    /// The first epoch the view runs in.
    pub epoch: u64,
    /// The workers of every process, as process 0 counts them.
    pub peers: usize,
    /// What a process other than the coordinator's plans the view from
    /// (see [`ViewBuilder`]).
    pub definition: String,
    /// The sources it reads, and where.
    pub sources: Vec<SourceStart>,
    /// Every instance's state rows, per state table in dataflow order.
    pub state: Vec<IpcBatch>,
    /// What its operators did before it started here (its backfill), in
    /// dataflow order: worker 0's figures start from these.
    pub stats: Vec<OperatorStats>,
    /// In the coordinator's process: its plan, connectors and channels.
    #[serde(skip)]
    pub local: Option<Arc<LocalView>>,
}

/// A source a partitioned view reads.
#[derive(Clone, Serialize, Deserialize)]
pub(super) struct SourceStart {
    pub source_id: TableId,
    pub name: String,
    /// The columns the view reads; `None`: all.
    pub columns: Option<Vec<bool>>,
    /// Every split's position.
    pub positions: Vec<u64>,
}

/// What the coordinator's process has of a view it starts.
pub(super) struct LocalView {
    pub plan: StreamPlan,
    /// The connectors, in the order of [`ViewStart::sources`].
    pub sources: Vec<Arc<dyn Source>>,
    /// Where worker 0 sends worker `w`'s messages.
    pub shards: Vec<mpsc::Sender<ShardMessage>>,
}

impl ViewStart {
    /// A view the coordinator starts at `epoch` with `state` and its
    /// operators' figures so far (`stats`), sending each worker's messages
    /// to `shards`.
    pub fn new(
        view: &super::ViewRuntime,
        epoch: u64,
        state: Vec<RecordBatch>,
        stats: Vec<OperatorStats>,
        shards: Vec<mpsc::Sender<ShardMessage>>,
    ) -> Self {
        ViewStart {
            name: view.name.clone(),
            id: view.id,
            epoch,
            peers: shards.len(),
            definition: view.definition.clone(),
            sources: view
                .sources
                .iter()
                .map(|s| SourceStart {
                    source_id: s.source_id,
                    name: s.name.clone(),
                    columns: s.columns.clone(),
                    positions: s.positions.clone(),
                })
                .collect(),
            state: state.into_iter().map(IpcBatch).collect(),
            stats,
            local: Some(Arc::new(LocalView {
                plan: view.plan.clone(),
                sources: view.sources.iter().map(|s| s.source.clone()).collect(),
                shards,
            })),
        }
    }
}

/// What a worker's shard of a view sends the coordinator.
#[derive(Clone, Serialize, Deserialize)]
pub(super) enum ShardMessage {
    /// Everything of an epoch.
    Cut(ShardCut),
    /// The instance stopped; nothing follows.
    Failed(WireFailure),
}

/// One worker's part of a view's epoch.
#[derive(Clone, Serialize, Deserialize)]
pub(super) struct ShardCut {
    pub epoch: u64,
    /// The worker, among all processes' workers.
    pub worker: usize,
    /// Its process.
    pub process: usize,
    /// The view's output changes of the epoch from this worker.
    pub rows: Vec<WireChanges>,
    /// State deltas: (state table index in dataflow order, delta).
    pub deltas: Vec<(usize, WireDelta)>,
    /// The split positions of its readers: (position key, split, position).
    pub positions: Vec<(String, u32, u64)>,
    /// Its operators' figures, in dataflow order.
    pub operators: Vec<OperatorInfo>,
    /// Source rows its readers delivered in the epoch.
    pub rows_read: u64,
    /// Its watermark nodes' greatest event times read in the epoch:
    /// (node, time).
    pub event_times: Vec<(usize, i64)>,
    /// Whether one of its readers had rows of its source waiting at the
    /// epoch's barrier: it is behind, not idle, even if it read nothing.
    pub behind: bool,
}

/// The coordinator's handle on the workers.
pub(super) struct Cluster {
    commands: mpsc::UnboundedSender<ClusterCommand>,
    peers: usize,
    _guards: timely::communication::WorkerGuards<()>,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Cluster({} workers)", self.peers)
    }
}

/// The timely configuration: `workers` threads in this process, and the
/// other processes of `cluster`, if any.
fn timely_config(workers: usize, cluster: Option<&ClusterConfig>) -> timely::Config {
    let communication = match cluster {
        None => timely::CommunicationConfig::Process(workers),
        Some(cluster) => timely::CommunicationConfig::Cluster {
            threads: workers,
            process: cluster.process,
            addresses: cluster.addresses.clone(),
            report: false,
            zerocopy: false,
        },
    };
    timely::Config {
        communication,
        worker: timely::WorkerConfig::default(),
    }
}

impl Cluster {
    /// Starts `workers` timely workers in this process (process 0 of
    /// `cluster`, which waits for the others to connect); their readers
    /// run on `tokio`.
    pub fn start(
        workers: usize,
        cluster: Option<&ClusterConfig>,
        tokio: tokio::runtime::Handle,
        status: Arc<RuntimeStatus>,
    ) -> Result<Cluster> {
        let processes = cluster.map_or(1, |c| c.addresses.len());
        if processes > 1 {
            info!(processes, "waiting for the cluster's processes to connect");
        }
        let (commands, receiver) = mpsc::unbounded_channel();
        let receiver = std::sync::Mutex::new(Some(receiver));
        let guards = timely::execute(timely_config(workers, cluster), move |worker| {
            let commands = match worker.index() {
                0 => receiver.lock().expect("receiver lock").take(),
                _ => None,
            };
            let _tokio = tokio.enter();
            WorkerLoop::new(worker, commands, status.clone(), None, 0).run(worker);
        })
        .map_err(DataFusionError::Execution)?;
        Ok(Cluster {
            commands,
            peers: workers * processes,
            _guards: guards,
        })
    }

    /// The number of workers of every process.
    pub fn peers(&self) -> usize {
        self.peers
    }

    /// Sends `command` to every worker.
    pub fn send(&self, command: ClusterCommand) {
        let _ = self.commands.send(command);
    }
}

/// Runs process `cluster.process` (not 0) of a cluster: `workers` timely
/// workers that run their share of every partitioned view, planned by
/// `builder`, their source readers reading at most `epoch_read_limit`
/// bytes into an epoch. Returns when process 0 shuts the cluster down; a
/// lost connection panics in timely's threads.
pub fn serve_process(
    workers: usize,
    epoch_read_limit: usize,
    cluster: &ClusterConfig,
    builder: Arc<dyn ViewBuilder>,
    tokio: tokio::runtime::Handle,
) -> Result<()> {
    if cluster.process == 0 {
        return Err(DataFusionError::Configuration(
            "process 0 of a cluster is the server".into(),
        ));
    }
    let process = cluster.process;
    // No cut can be asked of another process's coordinator: a reader at
    // its limit here waits for the next periodic barrier.
    let status = Arc::new(RuntimeStatus::new(epoch_read_limit));
    let guards = timely::execute(timely_config(workers, Some(cluster)), move |worker| {
        let _tokio = tokio.enter();
        WorkerLoop::new(worker, None, status.clone(), Some(builder.clone()), process).run(worker);
    })
    .map_err(DataFusionError::Execution)?;
    for outcome in guards.join() {
        outcome.map_err(DataFusionError::Execution)?;
    }
    Ok(())
}

/// Wakes a parked worker thread when a channel it polls has news.
struct Unpark(std::thread::Thread);

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
}

/// The commands every worker receives.
type ControlInput = InputHandle<u64, CapacityContainerBuilder<Vec<ClusterCommand>>>;

/// A worker's views and where its commands come from.
struct WorkerLoop {
    /// Worker 0 only: the coordinator's commands.
    commands: Option<mpsc::UnboundedReceiver<ClusterCommand>>,
    /// Worker 0 only: the control dataflow's input.
    control: Option<ControlInput>,
    /// The control dataflow's progress at this worker.
    control_probe: ProbeHandle<u64>,
    /// Commands received, by timestamp.
    received: Rc<RefCell<BTreeMap<u64, Vec<ClusterCommand>>>>,
    views: Vec<WorkerView>,
    status: Arc<RuntimeStatus>,
    /// Plans views in processes other than the coordinator's.
    builder: Option<Arc<dyn ViewBuilder>>,
    process: usize,
}

/// One view's instance in one worker.
struct WorkerView {
    name: String,
    dataflow: usize,
    feeds: Vec<Feed>,
    probe: ProbeHandle<u64>,
    shared: Rc<RefCell<Shared>>,
    /// Worker 0 only: where every worker's messages go.
    shards: Option<Vec<mpsc::Sender<ShardMessage>>>,
    /// Worker 0 only: the inputs of the tables it reads.
    tables: Vec<TableFeed>,
}

/// A table's changes into a view's dataflow, fed by worker 0 (the other
/// workers close theirs at once).
struct TableFeed {
    relation: String,
    input: InputHandle<u64, CapacityContainerBuilder<ChangeBatch>>,
}

/// A source's reader in one worker and the input it feeds.
struct Feed {
    source: String,
    position_key: String,
    splits: Vec<u32>,
    reader: Option<Reader>,
    input: InputHandle<u64, CapacityContainerBuilder<ChangeBatch>>,
}

impl WorkerLoop {
    /// Builds the control dataflow (every worker, in the same order).
    fn new(
        worker: &mut timely::worker::Worker,
        commands: Option<mpsc::UnboundedReceiver<ClusterCommand>>,
        status: Arc<RuntimeStatus>,
        builder: Option<Arc<dyn ViewBuilder>>,
        process: usize,
    ) -> Self {
        let mut control = ControlInput::new();
        let control_probe = ProbeHandle::new();
        let received: Rc<RefCell<BTreeMap<u64, Vec<ClusterCommand>>>> = Rc::default();
        let sink = received.clone();
        let peers = worker.peers();
        worker.dataflow::<u64, _, _>(|scope| {
            scope
                .input_from(&mut control)
                .flat_map(move |command| {
                    command
                        .targets(peers)
                        .map(move |worker| (worker, command.clone()))
                })
                .exchange(|(worker, _)| *worker as u64)
                .map(|(_, command)| command)
                .probe_with(&control_probe)
                .sink(Pipeline, "Commands", move |(input, _)| {
                    input.for_each(|cap, data| {
                        let Some(&time) = cap.least() else { return };
                        sink.borrow_mut().entry(time).or_default().append(data);
                    });
                });
        });
        // Only worker 0 feeds commands; the others' inputs close at once.
        let control = (worker.index() == 0).then_some(control);
        WorkerLoop {
            commands,
            control,
            control_probe,
            received,
            views: Vec::new(),
            status,
            builder,
            process,
        }
    }

    fn run(mut self, worker: &mut timely::worker::Worker) {
        let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
        let mut cx = Context::from_waker(&waker);
        loop {
            self.feed_commands(&mut cx);
            let complete = self.control_probe.with_frontier(|f| f.first().copied());
            let ready = {
                let mut received = self.received.borrow_mut();
                let later = match complete {
                    Some(time) => received.split_off(&time),
                    None => BTreeMap::new(),
                };
                std::mem::replace(&mut *received, later)
            };
            for command in ready.into_values().flatten() {
                self.apply(worker, command);
            }
            if complete.is_none() {
                // The coordinator shut down.
                for view in self.views.drain(..) {
                    worker.drop_dataflow(view.dataflow);
                }
                return;
            }
            for view in &mut self.views {
                view.pump(&mut cx, &self.status);
            }
            worker.step_or_park(Some(Duration::from_millis(10)));
        }
    }

    /// Worker 0: each of the coordinator's commands into the control
    /// dataflow at a timestamp of its own.
    fn feed_commands(&mut self, cx: &mut Context<'_>) {
        let (Some(commands), Some(control)) = (&mut self.commands, &mut self.control) else {
            return;
        };
        loop {
            match commands.poll_recv(cx) {
                Poll::Ready(Some(command)) => {
                    control.send(command);
                    let next = *control.time() + 1;
                    control.advance_to(next);
                }
                Poll::Ready(None) => {
                    self.commands = None;
                    self.control = None;
                    return;
                }
                Poll::Pending => return,
            }
        }
    }

    fn apply(&mut self, worker: &mut timely::worker::Worker, command: ClusterCommand) {
        match command {
            ClusterCommand::Start(start) => {
                debug!(worker = worker.index(), view = %start.name, epoch = start.epoch, "start");
                let id = WorkerId {
                    index: worker.index(),
                    process: self.process,
                };
                match start_view(worker, &start, self.builder.as_deref(), id, &self.status) {
                    Ok(running) => self.views.push(running),
                    Err(e) => {
                        // Every worker fails alike (the same plan and
                        // state), and none built the dataflow; worker 0
                        // tells the coordinator.
                        if let Some(local) = start.local.as_ref().filter(|_| id.index == 0) {
                            let failure = WireFailure::Error(WireError::new(e));
                            let _ = local.shards[0].try_send(ShardMessage::Failed(failure));
                        }
                    }
                }
            }
            ClusterCommand::Drop(name) => {
                if let Some(i) = self.views.iter().position(|v| v.name == name) {
                    let view = self.views.remove(i);
                    worker.drop_dataflow(view.dataflow);
                }
            }
            ClusterCommand::Barrier(epoch, mut watermarks) => {
                debug!(worker = worker.index(), epoch, "barrier");
                for view in &mut self.views {
                    let marks = watermarks.remove(&view.name).unwrap_or_default();
                    view.shared.borrow_mut().barrier(epoch, marks);
                    for feed in &view.feeds {
                        if let Some(reader) = &feed.reader {
                            reader.inject_barrier(epoch);
                        }
                    }
                    // Every table change of the epoch came before.
                    for table in &mut view.tables {
                        if epoch >= *table.input.time() {
                            table.input.advance_to(epoch + 1);
                        }
                    }
                }
            }
            ClusterCommand::Changes {
                view,
                relation,
                changes,
            } => {
                let Some(view) = self.views.iter_mut().find(|v| v.name == view) else {
                    return;
                };
                if let Some(table) = view.tables.iter_mut().find(|t| t.relation == relation) {
                    let changes = changes.into_iter().map(|c| c.0).collect();
                    table.input.send_batch(&mut ChangeBatch::new(changes));
                }
            }
        }
    }
}

impl WorkerView {
    /// Hands worker 0's messages to the coordinator, and reads the
    /// readers while the view keeps up.
    fn pump(&mut self, cx: &mut Context<'_>, status: &RuntimeStatus) {
        if let Some(shards) = &self.shards {
            let mut shared = self.shared.borrow_mut();
            while let Some((worker, message)) = shared.outbox.pop_front() {
                match shards[worker].try_send(message) {
                    Ok(()) => {}
                    Err(mpsc::error::TrySendError::Full(message)) => {
                        // Tried again after the next step.
                        shared.outbox.push_front((worker, message));
                        break;
                    }
                    Err(mpsc::error::TrySendError::Closed(_)) => {
                        shared.outbox.clear();
                        break;
                    }
                }
            }
        }
        if self.shared.borrow().failed {
            // Its inputs close, so that they hold back no frontier: the
            // other workers' cuts and this failure reach the coordinator.
            self.feeds.clear();
            self.tables.clear();
            return;
        }
        // The oldest epoch not yet through the shard.
        let done = self
            .probe
            .with_frontier(|f| f.first().copied())
            .unwrap_or(u64::MAX);
        for feed in &mut self.feeds {
            let Some(reader) = &mut feed.reader else {
                continue;
            };
            let mut batches = 0;
            while *feed.input.time() <= done.saturating_add(1) && batches < 16 {
                match reader.messages.poll_recv(cx) {
                    Poll::Ready(Some(SourceMessage::Rows(rows))) => {
                        // Counted here in the coordinator's process (where
                        // the status is read), at the cut for the others.
                        status.note_batch();
                        let count = rows.num_rows() as u64;
                        status.count(&self.name, |c| {
                            c.source_rows += count;
                            c.rows_in += count;
                        });
                        self.shared.borrow_mut().rows_read += count;
                        feed.input
                            .send_batch(&mut ChangeBatch::new(vec![crate::Changes::inserts(rows)]));
                        batches += 1;
                    }
                    Poll::Ready(Some(SourceMessage::Moved)) => status.note_batch(),
                    Poll::Ready(Some(SourceMessage::Barrier {
                        epoch,
                        positions,
                        behind,
                    })) => {
                        debug!(view = %self.name, epoch, time = *feed.input.time(), "reader barrier");
                        let splits = feed.splits.iter().copied().zip(positions);
                        let key = feed.position_key.clone();
                        {
                            let mut shared = self.shared.borrow_mut();
                            if behind {
                                shared.behind.insert(epoch);
                            }
                            shared.positions.entry(epoch).or_default().extend(
                                splits.map(|(split, position)| (key.clone(), split, position)),
                            );
                        }
                        if epoch >= *feed.input.time() {
                            feed.input.advance_to(epoch + 1);
                        }
                    }
                    Poll::Ready(Some(SourceMessage::Failed(error))) => {
                        status.note_failure();
                        let failure = WireFailure::Source {
                            source: feed.source.clone(),
                            error: Some(WireError::new(error)),
                        };
                        self.shared.borrow_mut().fail(failure);
                        return;
                    }
                    Poll::Ready(None) => {
                        status.note_failure();
                        let failure = WireFailure::Source {
                            source: feed.source.clone(),
                            error: None,
                        };
                        self.shared.borrow_mut().fail(failure);
                        return;
                    }
                    Poll::Pending => break,
                }
            }
        }
    }
}

/// The plan and connectors of a view starting in this worker: the
/// coordinator's in its process, planned again from the definition in
/// another.
fn plan_of(
    start: &ViewStart,
    builder: Option<&dyn ViewBuilder>,
) -> Result<(StreamPlan, Vec<Arc<dyn Source>>)> {
    if let Some(local) = &start.local {
        return Ok((local.plan.clone(), local.sources.clone()));
    }
    let builder = builder.ok_or_else(|| {
        DataFusionError::Internal("a view started without a plan or a builder".into())
    })?;
    let mut built = builder.build(&start.definition)?;
    let sources = start
        .sources
        .iter()
        .map(|s| {
            built.sources.remove(&s.name).ok_or_else(|| {
                DataFusionError::Internal(format!(
                    "view \"{}\": source \"{}\" not found when planned again",
                    start.name, s.name
                ))
            })
        })
        .collect::<Result<_>>()?;
    Ok((built.plan, sources))
}

/// Builds a view's dataflow in this worker, with its state share, then
/// starts its readers.
fn start_view(
    worker: &mut timely::worker::Worker,
    view: &ViewStart,
    builder: Option<&dyn ViewBuilder>,
    id: WorkerId,
    status: &RuntimeStatus,
) -> Result<WorkerView> {
    let planned = plan_of(view, builder);
    let (plan, connectors) = match planned {
        Ok(planned) => planned,
        // The coordinator planned it; a process that cannot would build
        // a different set of dataflows than the others, which timely
        // cannot run: the process stops, and with it the cluster.
        Err(e) if view.local.is_none() => panic!(
            "process {} cannot plan view \"{}\" as the coordinator did: {e}",
            id.process, view.name
        ),
        Err(e) => return Err(e),
    };
    let workers = worker.peers();
    // Timely numbers workers as if every process ran as many.
    assert_eq!(
        workers, view.peers,
        "process {} counts {workers} workers in the cluster, process 0 {}: every process needs the same --workers",
        id.process, view.peers
    );
    let placement = Placement::new(workers);
    let state: Vec<RecordBatch> = view.state.iter().map(|t| t.0.clone()).collect();
    // The operators, each with its share of the state.
    let mut operators: Vec<Box<dyn Operator>> = Vec::with_capacity(plan.nodes.len());
    // Aggregates that pre-aggregate before their exchange: per node, the
    // local phase and the exchange of its partials.
    let mut local_phases: Vec<Option<(Box<dyn Operator>, crate::Exchange)>> =
        Vec::with_capacity(plan.nodes.len());
    let mut table = 0;
    for node in 0..plan.nodes.len() {
        let phases = match workers {
            1 => None,
            _ => two_phase(&plan, node)?,
        };
        let mut operator = match phases {
            Some(phases) => {
                local_phases.push(Some((phases.local, phases.exchange)));
                phases.merge
            }
            None => {
                local_phases.push(None);
                instantiate(&plan, node)?
            }
        };
        let specs = operator.state_specs();
        let tables = state.get(table..table + specs.len()).ok_or_else(|| {
            DataFusionError::Internal(format!(
                "view \"{}\": {} state tables for a plan of more",
                view.name,
                state.len()
            ))
        })?;
        table += specs.len();
        operator.restore_share(tables, id.index, &placement)?;
        operators.push(operator);
    }
    // The watermarks the state was cut under are in force again.
    let restored: crate::watermark::Watermarks =
        operators.iter().filter_map(|o| o.watermark()).collect();
    for operator in &mut operators {
        operator.advance(&restored)?;
    }
    let shared = Rc::new(RefCell::new(Shared::new(
        (0..plan.nodes.len())
            .map(|node| OperatorInfo {
                index: node,
                name: plan.describe(node),
                stats: match id.index {
                    0 => view.stats.get(node).cloned().unwrap_or_default(),
                    _ => OperatorStats::default(),
                },
                state_rows: operators[node].state_rows(),
                state_bytes: operators[node].memory_size(),
                instances: 1,
                late_rows: operators[node].late_rows(),
                watermark_micros: operators[node].watermark_micros(),
            })
            .collect(),
    )));
    // This worker's share of each source's splits.
    let mut feeds: Vec<Feed> = view
        .sources
        .iter()
        .zip(&connectors)
        .map(|(input, source)| Feed {
            source: input.name.clone(),
            position_key: position_key(view.id, input.source_id),
            splits: deal_splits(source.splits(), workers)
                .into_iter()
                .nth(id.index)
                .unwrap_or_default(),
            reader: None,
            input: InputHandle::new(),
        })
        .collect();
    // An input for each table it reads.
    let mut table_feeds: Vec<TableFeed> = Vec::new();
    for spec in &plan.nodes {
        if let NodeKind::Source { relation, .. } = &spec.kind {
            let known = feeds.iter().any(|f| &f.source == relation)
                || table_feeds.iter().any(|t| &t.relation == relation);
            if !known {
                table_feeds.push(TableFeed {
                    relation: relation.clone(),
                    input: InputHandle::new(),
                });
            }
        }
    }
    let probe = ProbeHandle::new();
    let dataflow = worker.next_dataflow_index();
    let epoch = view.epoch;
    worker.dataflow::<u64, _, _>(|scope| {
        let mut streams: Vec<ChangeStream<'_>> = Vec::with_capacity(plan.nodes.len());
        let mut operators = operators.into_iter();
        let mut first_table = 0;
        for (node, spec) in plan.nodes.iter().enumerate() {
            let operator = operators.next().expect("one operator per node");
            let tables = operator.state_specs().len();
            let inputs: Vec<_> = match &spec.kind {
                NodeKind::Source { relation, .. } => {
                    let input = match feeds.iter_mut().find(|feed| &feed.source == relation) {
                        Some(feed) => &mut feed.input,
                        None => {
                            let table = table_feeds
                                .iter_mut()
                                .find(|table| &table.relation == relation)
                                .expect("an input for every relation");
                            &mut table.input
                        }
                    };
                    vec![scope.input_from(input)]
                }
                _ => spec.inputs.iter().map(|&i| streams[i].clone()).collect(),
            };
            let shared = shared.clone();
            let stream = match (plan.exchange(node, 0), inputs.len()) {
                (None, 1) if plan.cuts_in_place(node) => {
                    let input = inputs.into_iter().next().expect("one input");
                    let core = (operator, Phase::Whole);
                    let core = Stateful::new(core, node, first_table, epoch, shared.clone());
                    stateful(input, Pipeline, "InPlace", core, shared)
                }
                (None, _) => {
                    let input = if inputs.len() == 1 {
                        inputs.into_iter().next().expect("one input")
                    } else {
                        scope.concatenate(inputs)
                    };
                    stateless(input, node, operator, shared)
                }
                (Some(exchange), 1) => {
                    let mut input = inputs.into_iter().next().expect("one input");
                    let (exchange, phase) = match local_phases[node].take() {
                        Some((local, partials)) => {
                            let core = (local, Phase::Local);
                            let core = Stateful::new(core, node, first_table, epoch, shared.clone());
                            input = stateful(input, Pipeline, "Local", core, shared.clone());
                            (partials, Phase::Final)
                        }
                        None => (exchange, Phase::Whole),
                    };
                    let core = (operator, phase);
                    let core = Stateful::new(core, node, first_table, epoch, shared.clone());
                    let pact = DistributorPact(move |peers| KeyRouter::new(exchange, peers));
                    stateful(input, pact, "Stateful", core, shared)
                }
                (Some(left), _) => {
                    let right = plan.exchange(node, 1).expect("a join exchanges both inputs");
                    let mut inputs = inputs.into_iter();
                    let (l, r) = (inputs.next().expect("left"), inputs.next().expect("right"));
                    let core = (operator, Phase::Whole);
                    let core = Stateful::new(core, node, first_table, epoch, shared.clone());
                    l.binary_frontier::<ChangeBatch, CapacityContainerBuilder<ChangeBatch>, _, _, _, _>(
                        r,
                        DistributorPact(move |peers| KeyRouter::new(left, peers)),
                        DistributorPact(move |peers| KeyRouter::new(right, peers)),
                        "Join",
                        move |capability, info| {
                            let activator = scope.activator_for(info.address.clone());
                            shared.borrow_mut().add_cutter(activator);
                            let mut core = core;
                            core.hold(capability);
                            move |(left, left_frontier), (right, right_frontier), output| {
                                left.for_each(|cap, data| core.take(0, &cap, data));
                                right.for_each(|cap, data| core.take(1, &cap, data));
                                core.advance(&[left_frontier, right_frontier], |cap, out| {
                                    output.session(cap).give_container(&mut ChangeBatch::new(out));
                                });
                            }
                        },
                    )
                }
            };
            first_table += tables;
            streams.push(stream);
        }
        let last = streams.pop().expect("a plan has nodes");
        let reports = shard(
            last.probe_with(&probe),
            view.name.clone(),
            epoch,
            id,
            shared.clone(),
        );
        forward(reports.exchange(|_| 0), shared.clone());
    });
    // Only worker 0 feeds tables' changes.
    if id.index != 0 {
        table_feeds.clear();
    }
    for table in &mut table_feeds {
        table.input.advance_to(view.epoch);
    }
    // Rows read from now on belong to the view's first epoch.
    for (feed, (input, source)) in feeds.iter_mut().zip(view.sources.iter().zip(&connectors)) {
        feed.input.advance_to(view.epoch);
        let read = Reader::spawn(
            &status.shared_readers,
            ReaderSpec {
                source_id: input.source_id,
                name: input.name.clone(),
                source: source.clone(),
                positions: input.positions.clone(),
                splits: feed.splits.clone(),
                columns: input.columns.clone(),
            },
            status.epoch_reads.clone(),
        );
        match read {
            Ok(reader) => feed.reader = Some(reader),
            Err(e) => {
                let failure = WireFailure::Source {
                    source: input.name.clone(),
                    error: Some(WireError::new(e)),
                };
                shared.borrow_mut().fail(failure);
            }
        }
    }
    Ok(WorkerView {
        name: view.name.clone(),
        dataflow,
        feeds,
        probe,
        shared,
        shards: view
            .local
            .as_ref()
            .filter(|_| id.index == 0)
            .map(|local| local.shards.clone()),
        tables: table_feeds,
    })
}

/// Whether a view runs partitioned: it reads only sources and tables
/// (`is_table`), not other views (whose output the coordinator feeds to
/// the views that read it within the same epoch), and has no constant
/// rows (which one instance alone must emit).
pub(super) fn partitionable(
    plan: &StreamPlan,
    sources: &[SourceInput],
    is_table: impl Fn(&str) -> bool,
) -> bool {
    plan.nodes.iter().all(|node| match &node.kind {
        NodeKind::Source { relation, .. } => {
            sources.iter().any(|s| &s.name == relation) || is_table(relation)
        }
        NodeKind::Values { .. } => false,
        _ => true,
    })
}
