//! The timely operators of a view's instance in one worker: stateless
//! operators, stateful operators that cut their state at each barrier,
//! the shard that sends the worker's cut of each epoch, and the
//! forwarder in worker 0 that hands every worker's cuts to the
//! coordinator.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::rc::Rc;
use std::time::Instant;

use datafusion::error::DataFusionError;
use timely::container::CapacityContainerBuilder;
use timely::dataflow::channels::pact::{ParallelizationContract, Pipeline};
use timely::dataflow::operators::generic::Operator as _;
use timely::dataflow::operators::Capability;
use timely::scheduling::Activator;
use tracing::debug;
use weir_state::DeltaBatches;

use super::super::batch::ChangeBatch;
use super::super::wire::{WireChanges, WireDelta, WireError, WireFailure};
use super::{ShardCut, ShardMessage};
use crate::watermark::Watermarks;
use crate::{Changes, Operator, OperatorInfo, Result};

/// A stream of change batches between a view's operators.
pub(super) type ChangeStream<'scope> = timely::dataflow::Stream<'scope, u64, ChangeBatch>;

/// A stream of shard messages, each with the worker that sent it.
pub(super) type ReportStream<'scope> =
    timely::dataflow::StreamVec<'scope, u64, (usize, ShardMessage)>;

/// What a view's operators in one worker share with its shard and with
/// the worker loop.
pub(super) struct Shared {
    /// The barriers the worker has received since the view started: the
    /// epochs that are cut. (The server sends no barrier for an epoch in
    /// which no view can have changed, so they need not be consecutive.)
    /// Rows at time `t` belong to the first barrier at or after `t`.
    pub barriers: BTreeSet<u64>,
    /// State deltas of cut epochs: (epoch, state table index, delta).
    pub deltas: Vec<(u64, usize, DeltaBatches)>,
    /// Reader positions at each epoch's barrier.
    pub positions: BTreeMap<u64, Vec<(String, u32, u64)>>,
    /// The epochs at whose barrier one of its readers was behind.
    pub behind: BTreeSet<u64>,
    /// The watermarks each barrier carried, in force from its cut on.
    watermarks: BTreeMap<u64, Watermarks>,
    /// Watermark nodes' greatest event times, by the epoch they were
    /// read in: (epoch, node, time).
    pub event_times: Vec<(u64, usize, i64)>,
    /// Each node's figures.
    pub operators: Vec<OperatorInfo>,
    /// Source rows this worker's readers delivered since the last cut.
    pub rows_read: u64,
    /// Worker 0 only: every worker's messages for the coordinator, in
    /// order.
    pub outbox: VecDeque<(usize, ShardMessage)>,
    /// Why the instance stopped, until the shard reports it.
    failure: Option<WireFailure>,
    /// Whether the instance stopped.
    pub failed: bool,
    /// Schedules the operators that cut at barriers (the stateful ones and
    /// the shard, which also reports a failure): a barrier may arrive
    /// after their frontier has passed its epoch, and then nothing else
    /// would schedule them.
    cutters: Vec<Activator>,
}

impl Shared {
    /// Figures of the operators; nothing else yet.
    pub fn new(operators: Vec<OperatorInfo>) -> Self {
        Shared {
            barriers: BTreeSet::new(),
            deltas: Vec::new(),
            positions: BTreeMap::new(),
            behind: BTreeSet::new(),
            watermarks: BTreeMap::new(),
            event_times: Vec::new(),
            operators,
            rows_read: 0,
            outbox: VecDeque::new(),
            failure: None,
            failed: false,
            cutters: Vec::new(),
        }
    }

    /// Registers an operator that cuts at barriers.
    pub fn add_cutter(&mut self, activator: Activator) {
        self.cutters.push(activator);
    }

    /// A barrier arrived, with the view's watermarks: every operator that
    /// cuts at barriers looks again.
    pub fn barrier(&mut self, epoch: u64, watermarks: Watermarks) {
        self.barriers.insert(epoch);
        self.watermarks.insert(epoch, watermarks);
        self.wake_cutters();
    }

    /// The watermarks in force from barrier `epoch`'s cut on.
    fn watermarks_at(&self, epoch: u64) -> Watermarks {
        self.watermarks
            .range(..=epoch)
            .next_back()
            .map(|(_, w)| w.clone())
            .unwrap_or_default()
    }

    /// Forgets what the cuts up to `epoch` needed.
    fn cut_done(&mut self, epoch: u64) {
        self.barriers = self.barriers.split_off(&(epoch + 1));
        // The last watermarks stay: later barriers without any fall back
        // on them.
        let later = self.watermarks.split_off(&epoch);
        self.watermarks = later;
    }

    fn wake_cutters(&self) {
        for cutter in &self.cutters {
            cutter.activate();
        }
    }

    /// The instance stops; its shard tells the coordinator why (the first
    /// reason only).
    pub fn fail(&mut self, failure: WireFailure) {
        if !self.failed {
            self.failed = true;
            self.failure = Some(failure);
            self.wake_cutters();
        }
    }

    fn fail_with(&mut self, error: DataFusionError) {
        self.fail(WireFailure::Error(WireError::new(error)));
    }
}

/// An operator without state: each batch through it as it comes.
pub(super) fn stateless<'scope>(
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
                                shared.borrow_mut().fail_with(e);
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

/// A stateful operator with one input, `pact` bringing its rows (an
/// exchange by key, or none for the local phase of a two-phase
/// aggregate).
pub(super) fn stateful<'scope, P>(
    input: ChangeStream<'scope>,
    pact: P,
    name: &str,
    core: Stateful,
    shared: Rc<RefCell<Shared>>,
) -> ChangeStream<'scope>
where
    P: ParallelizationContract<u64, ChangeBatch>,
{
    let scope = input.scope();
    input.unary_frontier::<CapacityContainerBuilder<ChangeBatch>, _, _, _>(
        pact,
        name,
        move |capability, info| {
            let activator = scope.activator_for(info.address.clone());
            shared.borrow_mut().add_cutter(activator);
            let mut core = core;
            core.hold(capability);
            move |(input, frontier), output| {
                input.for_each(|cap, data| core.take(0, &cap, data));
                core.advance(&[frontier], |cap, out| {
                    output
                        .session(cap)
                        .give_container(&mut ChangeBatch::new(out));
                });
            }
        },
    )
}

/// Which figures of its plan node a [`Stateful`] instance records.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Phase {
    /// The node's only operator: all of them.
    Whole,
    /// The local phase of a two-phase aggregate: the node's input rows
    /// and time.
    Local,
    /// The final phase of a two-phase aggregate: the node's output rows,
    /// state and time.
    Final,
}

/// A stateful operator's instance: it processes the rows of the earliest
/// epoch it has not cut, holds later epochs' rows, and cuts each epoch
/// its input frontier has passed.
pub(super) struct Stateful {
    operator: Box<dyn Operator>,
    phase: Phase,
    node: usize,
    first_table: usize,
    /// The earliest epoch not cut.
    open: u64,
    held: BTreeMap<u64, Vec<(usize, Changes)>>,
    caps: BTreeMap<u64, Capability<u64>>,
    /// A capability for the earliest epoch not cut: the output a cut
    /// makes without input in its epoch (windows the watermark closes)
    /// goes out under it.
    open_cap: Option<Capability<u64>>,
    shared: Rc<RefCell<Shared>>,
    failed: bool,
}

impl Stateful {
    /// Node `node`'s operator (or one `phase` of it), whose state tables
    /// start at `first_table` of the view's, running from `epoch`.
    pub fn new(
        (operator, phase): (Box<dyn Operator>, Phase),
        node: usize,
        first_table: usize,
        epoch: u64,
        shared: Rc<RefCell<Shared>>,
    ) -> Self {
        Stateful {
            operator,
            phase,
            node,
            first_table,
            open: epoch,
            held: BTreeMap::new(),
            caps: BTreeMap::new(),
            open_cap: None,
            shared,
            failed: false,
        }
    }

    /// Keeps the operator's initial capability, for its open epoch.
    pub fn hold(&mut self, mut capability: Capability<u64>) {
        capability.downgrade(&self.open);
        self.open_cap = Some(capability);
    }

    /// Takes a message of input `port`.
    pub fn take(
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
    pub fn advance(
        &mut self,
        frontiers: &[&timely::progress::frontier::MutableAntichain<u64>],
        mut emit: impl FnMut(&Capability<u64>, Vec<Changes>),
    ) {
        if self.failed {
            self.held.clear();
            self.caps.clear();
            self.open_cap = None;
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
            self.open_cap = None;
            self.shared.borrow_mut().fail_with(e);
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
            if let Some(barrier) = complete {
                out.extend(self.operator.flush()?);
                let watermarks = self.shared.borrow().watermarks_at(barrier);
                out.extend(self.operator.advance(&watermarks)?);
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
                let cap = cap.or(earliest).or_else(|| self.open_cap.clone());
                let cap = cap.ok_or_else(|| {
                    DataFusionError::Internal("output in an epoch without input".into())
                })?;
                emit(&cap, std::mem::take(&mut out));
            }
            let mut shared = self.shared.borrow_mut();
            let info = &mut shared.operators[self.node];
            if self.phase != Phase::Final {
                info.stats.rows_in += rows_in;
            }
            if self.phase != Phase::Local {
                info.stats.rows_out += rows_out;
            }
            info.stats.busy += started.elapsed();
            let Some(barrier) = complete else {
                return Ok(());
            };
            let deltas = self.operator.checkpoint()?;
            if self.phase != Phase::Local {
                info.state_rows = self.operator.state_rows();
                info.state_bytes = self.operator.memory_size();
                info.late_rows = self.operator.late_rows();
                info.watermark_micros = self.operator.watermark_micros();
            }
            if let Some((node, time)) = self.operator.take_event_time() {
                shared.event_times.push((barrier, node, time));
            }
            for (i, delta) in deltas.into_iter().enumerate() {
                if let Some(delta) = delta {
                    shared.deltas.push((barrier, self.first_table + i, delta));
                }
            }
            drop(shared);
            self.caps = self.caps.split_off(&(barrier + 1));
            self.open = barrier + 1;
            if let Some(cap) = self.open_cap.as_mut() {
                cap.downgrade(&self.open);
            }
        }
    }
}

/// Who a worker is, for the cuts it sends.
#[derive(Debug, Clone, Copy)]
pub(super) struct WorkerId {
    /// Its index among all workers of all processes.
    pub index: usize,
    /// Its process.
    pub process: usize,
}

/// The end of a view's dataflow in one worker: when the frontier passes
/// an epoch, every operator upstream has cut it, and the shard sends one
/// message with the epoch's output changes, state deltas, reader
/// positions and figures, timestamped with the epoch. It holds a
/// capability for the oldest epoch it has not cut; a failure goes out
/// under it, and then the shard stops.
pub(super) fn shard<'scope>(
    input: ChangeStream<'scope>,
    view: String,
    epoch: u64,
    worker: WorkerId,
    shared: Rc<RefCell<Shared>>,
) -> ReportStream<'scope> {
    let scope = input.scope();
    input.unary_frontier::<CapacityContainerBuilder<Vec<(usize, ShardMessage)>>, _, _, _>(
        Pipeline,
        "Shard",
        move |mut capability, info| {
            shared
                .borrow_mut()
                .add_cutter(scope.activator_for(info.address.clone()));
            capability.downgrade(&epoch);
            let mut capability = Some(capability);
            let mut open = epoch;
            let mut held: BTreeMap<u64, Vec<Changes>> = BTreeMap::new();
            let mut rows: Vec<WireChanges> = Vec::new();
            move |(input, frontier), output| {
                input.for_each(|cap, data| {
                    let Some(&time) = cap.least() else { return };
                    held.entry(time).or_default().append(&mut data.0);
                });
                let Some(cap) = capability.as_mut() else {
                    held.clear();
                    return;
                };
                let mut shared = shared.borrow_mut();
                if let Some(failure) = shared.failure.take() {
                    output
                        .session(cap)
                        .give((worker.index, ShardMessage::Failed(failure)));
                    capability = None;
                    held.clear();
                    return;
                }
                let passed = frontier.frontier().first().copied().unwrap_or(u64::MAX);
                loop {
                    let target = shared.barriers.range(open..).next().copied();
                    let due: Vec<u64> = held
                        .keys()
                        .copied()
                        .filter(|&t| t == open || target.is_some_and(|b| t <= b))
                        .collect();
                    for time in due {
                        let changes = held.remove(&time).unwrap_or_default();
                        rows.extend(changes.into_iter().map(WireChanges));
                    }
                    let Some(barrier) = target.filter(|&b| b < passed) else {
                        return;
                    };
                    let (mine, later): (Vec<_>, Vec<_>) =
                        shared.deltas.drain(..).partition(|(e, _, _)| *e <= barrier);
                    shared.deltas = later;
                    let (cut_times, later): (Vec<_>, Vec<_>) = shared
                        .event_times
                        .drain(..)
                        .partition(|(e, _, _)| *e <= barrier);
                    shared.event_times = later;
                    let later = shared.behind.split_off(&(barrier + 1));
                    let behind = !std::mem::replace(&mut shared.behind, later).is_empty();
                    let later = shared.positions.split_off(&(barrier + 1));
                    let positions = std::mem::replace(&mut shared.positions, later)
                        .into_values()
                        .flatten()
                        .collect();
                    let cut = ShardCut {
                        epoch: barrier,
                        worker: worker.index,
                        process: worker.process,
                        rows: std::mem::take(&mut rows),
                        deltas: mine
                            .into_iter()
                            .map(|(_, t, d)| (t, WireDelta::from(d)))
                            .collect(),
                        positions,
                        operators: shared.operators.clone(),
                        rows_read: std::mem::take(&mut shared.rows_read),
                        event_times: cut_times.into_iter().map(|(_, n, t)| (n, t)).collect(),
                        behind,
                    };
                    debug!(%view, epoch = barrier, worker = worker.index, "shard cut");
                    output
                        .session(&cap.delayed(&barrier))
                        .give((worker.index, ShardMessage::Cut(cut)));
                    cap.downgrade(&(barrier + 1));
                    shared.cut_done(barrier);
                    open = barrier + 1;
                }
            }
        },
    )
}

/// Every worker's shard messages, gathered in worker 0: the messages of
/// an epoch go to the outbox once the frontier has passed it, so the
/// coordinator hears each worker's epochs in order.
pub(super) fn forward(reports: ReportStream<'_>, shared: Rc<RefCell<Shared>>) {
    let mut pending: BTreeMap<u64, Vec<(usize, ShardMessage)>> = BTreeMap::new();
    reports.sink(Pipeline, "Forward", move |(input, frontier)| {
        input.for_each(|cap, data| {
            let Some(&time) = cap.least() else { return };
            pending.entry(time).or_default().append(data);
        });
        let passed = frontier.frontier().first().copied().unwrap_or(u64::MAX);
        let later = pending.split_off(&passed);
        let ready = std::mem::replace(&mut pending, later);
        if !ready.is_empty() {
            shared
                .borrow_mut()
                .outbox
                .extend(ready.into_values().flatten());
        }
    });
}
