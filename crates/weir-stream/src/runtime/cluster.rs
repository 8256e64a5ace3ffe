//! The partitioned runtime: a view that reads only sources runs as one
//! instance of its dataflow per timely worker, its stateful operators
//! partitioned by key.
//!
//! ```text
//!  coordinator ──Start, Drop, Barrier(E) (the same order to every worker)──▶ worker w
//!  worker w: readers of its splits ─▶ stateless ops ─▶ exchange by key ─▶ stateful op ─▶ ... ─▶ shard
//!  shard (view v, worker w) ──output changes, Barrier(E): state deltas, positions──▶ coordinator
//! ```
//!
//! Epochs are timely timestamps. Each worker reads its share of every
//! source's splits; a reader's rows go into its input at the open epoch,
//! and when the reader delivers `Barrier(E)` the input advances to E+1.
//! A stateful operator processes the rows of the earliest epoch it has
//! not cut and holds later epochs' rows; when its input frontier passes E
//! it flushes E, takes its state delta of E and records it for the shard.
//! When the shard's frontier passes E, every operator of the worker has
//! cut E: the shard sends E's last output and a barrier carrying the
//! state deltas, the readers' split positions and the operators' figures.
//! The coordinator aligns the shards' barriers like readers' and commits.
//!
//! Timely has no back-pressure: a worker reads its readers only while
//! its shard's outbox is empty and at most one epoch is open beyond the
//! shard's frontier, so at most two epochs are in flight. A worker never
//! blocks (a blocked worker would stall every other worker's progress):
//! its shard's messages wait in the outbox until the channel takes them.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use datafusion::arrow::record_batch::RecordBatch;
use datafusion::error::DataFusionError;
use timely::container::CapacityContainerBuilder;
use timely::dataflow::channels::pact::{DistributorPact, Pipeline};
use timely::dataflow::operators::generic::Operator as _;
use timely::dataflow::operators::{Capability, Concatenate, Input, Probe};
use timely::dataflow::{InputHandle, ProbeHandle};
use tokio::sync::mpsc;
use tracing::debug;
use weir_state::{DeltaBatches, TableId};

use super::batch::{ChangeBatch, KeyRouter};
use super::reader::{Reader, SourceMessage};
use super::source::{deal_splits, position_key, ReadFrom};
use super::view::SourceInput;
use super::{FailureReason, RuntimeStatus};
use crate::dataflow::instantiate;
use crate::{Changes, NodeKind, Operator, OperatorInfo, OperatorStats, Placement};
use crate::{Result, StreamPlan};

/// The most rows a reader puts in one batch.
const MAX_BATCH_ROWS: usize = 8192;

/// What the coordinator tells every worker, in one order.
pub(super) enum ClusterCommand {
    /// Run a view.
    Start(Arc<PartitionedView>),
    /// Stop running a view.
    Drop(String),
    /// Every row of epoch E has been read up to the readers' barriers.
    Barrier(u64),
}

/// A view to run partitioned.
pub(super) struct PartitionedView {
    pub name: String,
    pub id: TableId,
    pub plan: StreamPlan,
    /// Every instance's state rows, per state table in dataflow order;
    /// `None` for a new view.
    pub state: Option<Vec<RecordBatch>>,
    pub sources: Vec<SourceInput>,
    /// The first epoch the view runs in.
    pub epoch: u64,
    /// Where worker `w` sends its shard.
    pub shards: Vec<mpsc::Sender<ShardMessage>>,
}

/// What a worker's shard of a view sends the coordinator.
pub(super) enum ShardMessage {
    /// Output changes of the open epoch.
    Rows(Changes),
    /// Everything of an epoch was sent.
    Barrier(ShardCut),
    /// The shard stopped; nothing follows.
    Failed(FailureReason),
}

/// One worker's part of a view's checkpoint.
pub(super) struct ShardCut {
    pub epoch: u64,
    /// State deltas: (state table index in dataflow order, delta).
    pub deltas: Vec<(usize, DeltaBatches)>,
    /// The split positions of its readers: (position key, split, position).
    pub positions: Vec<(String, u32, u64)>,
    /// Its operators' figures, in dataflow order.
    pub operators: Vec<OperatorInfo>,
}

/// The coordinator's handle on the workers.
pub(super) struct Cluster {
    commands: Vec<mpsc::UnboundedSender<Arc<ClusterCommand>>>,
    workers: usize,
    _guards: timely::communication::WorkerGuards<()>,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Cluster({} workers)", self.workers)
    }
}

impl Cluster {
    /// Starts `workers` timely workers in this process; their readers run
    /// on `tokio`.
    pub fn start(
        workers: usize,
        tokio: tokio::runtime::Handle,
        status: Arc<RuntimeStatus>,
    ) -> Result<Cluster> {
        let mut commands = Vec::new();
        let mut receivers = Vec::new();
        for _ in 0..workers {
            let (sender, receiver) = mpsc::unbounded_channel();
            commands.push(sender);
            receivers.push(std::sync::Mutex::new(Some(receiver)));
        }
        let receivers = Arc::new(receivers);
        let guards = timely::execute(timely::Config::process(workers), move |worker| {
            let receiver = receivers[worker.index()]
                .lock()
                .expect("receivers lock")
                .take()
                .expect("one receiver per worker");
            let _tokio = tokio.enter();
            WorkerLoop::new(receiver, status.clone()).run(worker);
        })
        .map_err(DataFusionError::Execution)?;
        Ok(Cluster {
            commands,
            workers,
            _guards: guards,
        })
    }

    /// The number of workers.
    pub fn workers(&self) -> usize {
        self.workers
    }

    /// Sends `command` to every worker.
    pub fn send(&self, command: ClusterCommand) {
        let command = Arc::new(command);
        for worker in &self.commands {
            let _ = worker.send(command.clone());
        }
    }
}

/// Wakes a parked worker thread when a channel it polls has news.
struct Unpark(std::thread::Thread);

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
}

/// A worker's views and its command channel.
struct WorkerLoop {
    commands: mpsc::UnboundedReceiver<Arc<ClusterCommand>>,
    views: Vec<WorkerView>,
    status: Arc<RuntimeStatus>,
}

/// One view's instance in one worker.
struct WorkerView {
    name: String,
    dataflow: usize,
    feeds: Vec<Feed>,
    probe: ProbeHandle<u64>,
    shared: Rc<RefCell<Shared>>,
    shard: mpsc::Sender<ShardMessage>,
    stopped: bool,
}

/// A source's reader in one worker and the input it feeds.
struct Feed {
    source: String,
    position_key: String,
    splits: Vec<u32>,
    reader: Reader,
    input: InputHandle<u64, CapacityContainerBuilder<ChangeBatch>>,
}

/// What a view's operators in one worker share with its shard.
struct Shared {
    /// The barriers the worker has received since the view started: the
    /// epochs that are cut. (The server sends no barrier for an epoch in
    /// which no view can have changed, so they need not be consecutive.)
    /// Rows at time `t` belong to the first barrier at or after `t`.
    barriers: BTreeSet<u64>,
    /// State deltas of cut epochs: (epoch, state table index, delta).
    deltas: Vec<(u64, usize, DeltaBatches)>,
    /// Reader positions at each epoch's barrier.
    positions: BTreeMap<u64, Vec<(String, u32, u64)>>,
    /// Each node's figures.
    operators: Vec<OperatorInfo>,
    /// Messages for the coordinator, in order.
    outbox: VecDeque<ShardMessage>,
    /// Why the instance stopped, once it has.
    failure: Option<DataFusionError>,
}

impl WorkerLoop {
    fn new(
        commands: mpsc::UnboundedReceiver<Arc<ClusterCommand>>,
        status: Arc<RuntimeStatus>,
    ) -> Self {
        WorkerLoop {
            commands,
            views: Vec::new(),
            status,
        }
    }

    fn run(mut self, worker: &mut timely::worker::Worker) {
        let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
        let mut cx = Context::from_waker(&waker);
        loop {
            loop {
                match self.commands.poll_recv(&mut cx) {
                    Poll::Ready(Some(command)) => match &*command {
                        ClusterCommand::Start(view) => match start_view(worker, view) {
                            Ok(running) => self.views.push(running),
                            Err(e) => {
                                let index = worker.index();
                                let _ = view.shards[index]
                                    .try_send(ShardMessage::Failed(FailureReason::Error(e)));
                            }
                        },
                        ClusterCommand::Drop(name) => {
                            if let Some(i) = self.views.iter().position(|v| &v.name == name) {
                                let view = self.views.remove(i);
                                worker.drop_dataflow(view.dataflow);
                            }
                        }
                        ClusterCommand::Barrier(epoch) => {
                            debug!(worker = worker.index(), epoch, "barrier");
                            for view in &mut self.views {
                                view.shared.borrow_mut().barriers.insert(*epoch);
                                for feed in &view.feeds {
                                    feed.reader.inject_barrier(*epoch);
                                }
                            }
                        }
                    },
                    Poll::Ready(None) => {
                        for view in self.views.drain(..) {
                            worker.drop_dataflow(view.dataflow);
                        }
                        return;
                    }
                    Poll::Pending => break,
                }
            }
            for view in &mut self.views {
                view.pump(&mut cx, &self.status);
            }
            worker.step_or_park(Some(Duration::from_millis(10)));
        }
    }
}

impl WorkerView {
    /// Hands queued shard messages to the channel, and reads the readers
    /// while the view keeps up.
    fn pump(&mut self, cx: &mut Context<'_>, status: &RuntimeStatus) {
        if self.stopped {
            return;
        }
        let failure = self.shared.borrow_mut().failure.take();
        if let Some(error) = failure {
            self.stop(FailureReason::Error(error));
            return;
        }
        {
            let mut shared = self.shared.borrow_mut();
            while let Some(message) = shared.outbox.pop_front() {
                match self.shard.try_send(message) {
                    Ok(()) => {}
                    Err(mpsc::error::TrySendError::Full(message)) => {
                        // Tried again after the next step; the readers wait.
                        shared.outbox.push_front(message);
                        return;
                    }
                    Err(mpsc::error::TrySendError::Closed(_)) => {
                        self.stopped = true;
                        return;
                    }
                }
            }
        }
        // The oldest epoch not yet through the shard.
        let done = self
            .probe
            .with_frontier(|f| f.first().copied())
            .unwrap_or(u64::MAX);
        for i in 0..self.feeds.len() {
            let feed = &mut self.feeds[i];
            let mut batches = 0;
            while *feed.input.time() <= done.saturating_add(1) && batches < 16 {
                match feed.reader.messages.poll_recv(cx) {
                    Poll::Ready(Some(SourceMessage::Rows(rows))) => {
                        status.note_batch();
                        let count = rows.num_rows() as u64;
                        status.count(&self.name, |c| {
                            c.source_rows += count;
                            c.rows_in += count;
                        });
                        feed.input
                            .send_batch(&mut ChangeBatch::new(vec![Changes::inserts(rows)]));
                        batches += 1;
                    }
                    Poll::Ready(Some(SourceMessage::Barrier { epoch, positions })) => {
                        debug!(view = %self.name, epoch, time = *feed.input.time(), "reader barrier");
                        let splits = feed.splits.iter().copied().zip(positions);
                        let key = feed.position_key.clone();
                        self.shared
                            .borrow_mut()
                            .positions
                            .entry(epoch)
                            .or_default()
                            .extend(splits.map(|(split, position)| (key.clone(), split, position)));
                        if epoch >= *feed.input.time() {
                            feed.input.advance_to(epoch + 1);
                        }
                    }
                    Poll::Ready(Some(SourceMessage::Failed(error))) => {
                        let source = feed.source.clone();
                        self.stop(FailureReason::Source {
                            source,
                            error: Some(error),
                        });
                        return;
                    }
                    Poll::Ready(None) => {
                        let source = feed.source.clone();
                        self.stop(FailureReason::Source {
                            source,
                            error: None,
                        });
                        return;
                    }
                    Poll::Pending => break,
                }
            }
        }
    }

    /// The instance stops; the coordinator hears why and drops the view
    /// in every worker.
    fn stop(&mut self, reason: FailureReason) {
        self.stopped = true;
        let _ = self.shard.try_send(ShardMessage::Failed(reason));
    }
}

/// Builds a view's dataflow in this worker, with its state share.
fn start_view(worker: &mut timely::worker::Worker, view: &PartitionedView) -> Result<WorkerView> {
    let index = worker.index();
    let workers = worker.peers();
    let placement = Placement::new(workers);
    let plan = &view.plan;
    // The operators, each with its share of the state.
    let mut operators: Vec<Box<dyn Operator>> = Vec::with_capacity(plan.nodes.len());
    let mut table = 0;
    for node in 0..plan.nodes.len() {
        let mut operator = instantiate(plan, node)?;
        let specs = operator.state_specs();
        let tables: Vec<RecordBatch> = match &view.state {
            Some(state) => state[table..table + specs.len()].to_vec(),
            None => specs
                .iter()
                .map(|s| RecordBatch::new_empty(s.schema.clone()))
                .collect(),
        };
        table += specs.len();
        operator.restore_share(&tables, index, &placement)?;
        if view.state.is_none() && index == 0 {
            // The server applied a new view's initial output already; the
            // instance that holds partition 0 takes the state it leaves.
            operator.initial()?;
        }
        operators.push(operator);
    }
    let shared = Rc::new(RefCell::new(Shared {
        barriers: BTreeSet::new(),
        deltas: Vec::new(),
        positions: BTreeMap::new(),
        operators: (0..plan.nodes.len())
            .map(|node| OperatorInfo {
                index: node,
                name: plan.describe(node),
                stats: OperatorStats::default(),
                state_rows: operators[node].state_rows(),
                state_bytes: operators[node].memory_size(),
                instances: 1,
            })
            .collect(),
        outbox: VecDeque::new(),
        failure: None,
    }));
    // Readers of this worker's splits.
    let mut feeds = Vec::new();
    for input in &view.sources {
        let share = deal_splits(input.source.splits(), workers)
            .into_iter()
            .nth(index)
            .unwrap_or_default();
        let from = ReadFrom {
            positions: input.positions.clone(),
            splits: share.clone(),
            columns: input.columns.clone(),
            max_batch_rows: MAX_BATCH_ROWS,
        };
        let handle = InputHandle::new();
        feeds.push((
            input.name.clone(),
            Feed {
                source: input.name.clone(),
                position_key: position_key(view.id, input.source_id),
                splits: share,
                reader: Reader::spawn(input.source.as_ref(), from)?,
                input: handle,
            },
        ));
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
                    let (_, feed) = feeds
                        .iter_mut()
                        .find(|(name, _)| name == relation)
                        .expect("a partitioned view reads only its sources");
                    vec![scope.input_from(&mut feed.input)]
                }
                _ => spec.inputs.iter().map(|&i| streams[i].clone()).collect(),
            };
            let shared = shared.clone();
            let stream = match (plan.exchange(node, 0), inputs.len()) {
                (None, _) => {
                    let input = if inputs.len() == 1 {
                        inputs.into_iter().next().expect("one input")
                    } else {
                        scope.concatenate(inputs)
                    };
                    stateless(input, node, operator, shared)
                }
                (Some(exchange), 1) => {
                    let input = inputs.into_iter().next().expect("one input");
                    let core = Stateful::new(operator, node, first_table, epoch, shared);
                    input.unary_frontier::<CapacityContainerBuilder<ChangeBatch>, _, _, _>(
                        DistributorPact(move |peers| KeyRouter::new(exchange, peers)),
                        "Stateful",
                        move |_, _| {
                            let mut core = core;
                            move |(input, frontier), output| {
                                input.for_each(|cap, data| core.take(0, &cap, data));
                                core.advance(&[frontier], |cap, out| {
                                    output.session(cap).give_container(&mut ChangeBatch::new(out));
                                });
                            }
                        },
                    )
                }
                (Some(left), _) => {
                    let right = plan.exchange(node, 1).expect("a join exchanges both inputs");
                    let mut inputs = inputs.into_iter();
                    let (l, r) = (inputs.next().expect("left"), inputs.next().expect("right"));
                    let core = Stateful::new(operator, node, first_table, epoch, shared);
                    l.binary_frontier::<ChangeBatch, CapacityContainerBuilder<ChangeBatch>, _, _, _, _>(
                        r,
                        DistributorPact(move |peers| KeyRouter::new(left, peers)),
                        DistributorPact(move |peers| KeyRouter::new(right, peers)),
                        "Join",
                        move |_, _| {
                            let mut core = core;
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
        shard(last.probe_with(&probe), epoch, shared.clone());
    });
    // Rows read from now on belong to the view's first epoch.
    for (_, feed) in &mut feeds {
        feed.input.advance_to(view.epoch);
    }
    Ok(WorkerView {
        name: view.name.clone(),
        dataflow,
        feeds: feeds.into_iter().map(|(_, feed)| feed).collect(),
        probe,
        shared,
        shard: view.shards[index].clone(),
        stopped: false,
    })
}

type ChangeStream<'scope> = timely::dataflow::Stream<'scope, u64, ChangeBatch>;

/// An operator without state: each batch through it as it comes.
fn stateless<'scope>(
    input: ChangeStream<'scope>,
    node: usize,
    mut operator: Box<dyn Operator>,
    shared: Rc<RefCell<Shared>>,
) -> ChangeStream<'scope> {
    input.unary::<CapacityContainerBuilder<ChangeBatch>, _, _, _>(
        Pipeline,
        "Stateless",
        move |_, _| {
            move |input, output| {
                input.for_each(|cap, data| {
                    let mut out = Vec::new();
                    let started = Instant::now();
                    let mut rows_in = 0;
                    for changes in data.0.drain(..) {
                        rows_in += changes.len() as u64;
                        match operator.process(0, changes) {
                            Ok(produced) => out.extend(produced),
                            Err(e) => {
                                shared.borrow_mut().failure.get_or_insert(e);
                                return;
                            }
                        }
                    }
                    let mut shared = shared.borrow_mut();
                    let stats = &mut shared.operators[node].stats;
                    stats.rows_in += rows_in;
                    stats.rows_out += out.iter().map(|c| c.len() as u64).sum::<u64>();
                    stats.busy += started.elapsed();
                    drop(shared);
                    if !out.is_empty() {
                        output
                            .session(&cap)
                            .give_container(&mut ChangeBatch::new(out));
                    }
                });
            }
        },
    )
}

/// A stateful operator's instance: it processes the rows of the earliest
/// epoch it has not cut, holds later epochs' rows, and cuts each epoch
/// its input frontier has passed.
struct Stateful {
    operator: Box<dyn Operator>,
    node: usize,
    first_table: usize,
    /// The earliest epoch not cut.
    open: u64,
    held: BTreeMap<u64, Vec<(usize, Changes)>>,
    caps: BTreeMap<u64, Capability<u64>>,
    shared: Rc<RefCell<Shared>>,
    failed: bool,
}

impl Stateful {
    fn new(
        operator: Box<dyn Operator>,
        node: usize,
        first_table: usize,
        epoch: u64,
        shared: Rc<RefCell<Shared>>,
    ) -> Self {
        Stateful {
            operator,
            node,
            first_table,
            open: epoch,
            held: BTreeMap::new(),
            caps: BTreeMap::new(),
            shared,
            failed: false,
        }
    }

    /// Takes a message of input `port`.
    fn take(
        &mut self,
        port: usize,
        cap: &timely::dataflow::operators::InputCapability<u64>,
        data: &mut ChangeBatch,
    ) {
        let Some(&time) = cap.least() else { return };
        self.caps
            .entry(time)
            .or_insert_with(|| cap.delayed(&time, 0));
        let held = self.held.entry(time).or_default();
        held.extend(data.0.drain(..).map(|changes| (port, changes)));
    }

    /// Processes what it may and cuts every epoch the frontiers passed;
    /// `emit` sends output under an epoch's capability.
    fn advance(
        &mut self,
        frontiers: &[&timely::progress::frontier::MutableAntichain<u64>],
        mut emit: impl FnMut(&Capability<u64>, Vec<Changes>),
    ) {
        if self.failed {
            self.held.clear();
            self.caps.clear();
            return;
        }
        let passed = frontiers
            .iter()
            .map(|f| f.frontier().first().copied().unwrap_or(u64::MAX))
            .min()
            .unwrap_or(u64::MAX);
        if let Err(e) = self.step(passed, &mut emit) {
            self.failed = true;
            self.held.clear();
            self.caps.clear();
            self.shared.borrow_mut().failure.get_or_insert(e);
        }
    }

    fn step(
        &mut self,
        passed: u64,
        emit: &mut impl FnMut(&Capability<u64>, Vec<Changes>),
    ) -> Result<()> {
        loop {
            let started = Instant::now();
            let target = self
                .shared
                .borrow()
                .barriers
                .range(self.open..)
                .next()
                .copied();
            let (mut rows_in, mut out) = (0, Vec::new());
            let due: Vec<u64> = self
                .held
                .keys()
                .copied()
                .filter(|&t| t == self.open || target.is_some_and(|b| t <= b))
                .collect();
            let mut cap = None;
            for time in due {
                for (port, changes) in self.held.remove(&time).unwrap_or_default() {
                    rows_in += changes.len() as u64;
                    out.extend(self.operator.process(port, changes)?);
                }
                cap = cap.or_else(|| self.caps.get(&time).cloned());
            }
            let complete = target.filter(|&b| b < passed);
            if complete.is_some() {
                out.extend(self.operator.flush()?);
            }
            let rows_out: u64 = out.iter().map(|c| c.len() as u64).sum();
            if !out.is_empty() {
                // Output goes out at the earliest time of the cut's rows.
                let last = target.unwrap_or(self.open).max(self.open);
                let earliest = self
                    .caps
                    .range(self.open..=last)
                    .next()
                    .map(|(_, c)| c.clone());
                let cap = cap.or(earliest).ok_or_else(|| {
                    DataFusionError::Internal("output in an epoch without input".into())
                })?;
                emit(&cap, std::mem::take(&mut out));
            }
            let mut shared = self.shared.borrow_mut();
            let info = &mut shared.operators[self.node];
            info.stats.rows_in += rows_in;
            info.stats.rows_out += rows_out;
            info.stats.busy += started.elapsed();
            let Some(barrier) = complete else {
                return Ok(());
            };
            let deltas = self.operator.checkpoint()?;
            info.state_rows = self.operator.state_rows();
            info.state_bytes = self.operator.memory_size();
            for (i, delta) in deltas.into_iter().enumerate() {
                if let Some(delta) = delta {
                    shared.deltas.push((barrier, self.first_table + i, delta));
                }
            }
            drop(shared);
            self.caps = self.caps.split_off(&(barrier + 1));
            self.open = barrier + 1;
        }
    }
}

/// The end of a view's dataflow in one worker: output changes go to the
/// coordinator as they come, and when the frontier passes an epoch, a
/// barrier with the worker's cut of it.
fn shard(input: ChangeStream<'_>, epoch: u64, shared: Rc<RefCell<Shared>>) {
    let mut open = epoch;
    let mut held: BTreeMap<u64, Vec<Changes>> = BTreeMap::new();
    input.sink(Pipeline, "Shard", move |(input, frontier)| {
        let mut shared = shared.borrow_mut();
        input.for_each(|cap, data| {
            let Some(&time) = cap.least() else { return };
            held.entry(time).or_default().append(&mut data.0);
        });
        let passed = frontier.frontier().first().copied().unwrap_or(u64::MAX);
        loop {
            let target = shared.barriers.range(open..).next().copied();
            let due: Vec<u64> = held
                .keys()
                .copied()
                .filter(|&t| t == open || target.is_some_and(|b| t <= b))
                .collect();
            for time in due {
                for changes in held.remove(&time).unwrap_or_default() {
                    shared.outbox.push_back(ShardMessage::Rows(changes));
                }
            }
            let Some(barrier) = target.filter(|&b| b < passed) else {
                return;
            };
            // Every operator upstream has cut `barrier`.
            let (mine, later): (Vec<_>, Vec<_>) =
                shared.deltas.drain(..).partition(|(e, _, _)| *e <= barrier);
            shared.deltas = later;
            let later = shared.positions.split_off(&(barrier + 1));
            let positions = std::mem::replace(&mut shared.positions, later)
                .into_values()
                .flatten()
                .collect();
            let cut = ShardCut {
                epoch: barrier,
                deltas: mine.into_iter().map(|(_, t, d)| (t, d)).collect(),
                positions,
                operators: shared.operators.clone(),
            };
            debug!(epoch = barrier, "shard cut");
            shared.outbox.push_back(ShardMessage::Barrier(cut));
            shared.barriers = shared.barriers.split_off(&(barrier + 1));
            open = barrier + 1;
        }
    });
}

/// Whether a view runs partitioned: it reads only sources (no table or
/// view, whose changes the coordinator feeds in order with its other
/// views), and has no constant rows (which one instance alone must emit).
pub(super) fn partitionable(plan: &StreamPlan, sources: &[SourceInput]) -> bool {
    !sources.is_empty()
        && plan.nodes.iter().all(|node| match &node.kind {
            NodeKind::Source { relation, .. } => sources.iter().any(|s| &s.name == relation),
            NodeKind::Values { .. } => false,
            _ => true,
        })
}
