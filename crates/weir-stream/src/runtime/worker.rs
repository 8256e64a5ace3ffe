//! The stream worker: one task that runs every materialized view's
//! operators and cuts their state at barriers.
//!
//! ```text
//!  server ──commands: table Changes, Barrier(E), view starts and drops──┐
//!  reader (view a, source s, splits 0, 2, ..) ──Rows, Barrier(E)─────────┼─▶ worker ──ViewPart(E)──▶ committer
//!  reader (view a, source s, splits 1, 3, ..) ──Rows, Barrier(E)─────────┘   (bounded: back-pressure)
//! ```
//!
//! The worker's inputs are the command channel (the tables' changes and
//! barriers, which the server's coordinator cuts under its working lock)
//! and one channel per source reader (a view reads each source with
//! `RuntimeConfig::workers` readers, each a share of its splits, and each
//! barrier carries its splits' positions). Records are processed as they
//! arrive: a reader's rows go through its view's operators at once, and
//! the view's output changes go on to the views that read it. When the
//! command channel delivers `Barrier(E)`, the worker injects `Barrier(E)`
//! into every reader and aligns ([`Aligner`]): an input that has
//! delivered its barrier is not read again until all have. Then every
//! view's state is exactly its query over the inputs up to their E
//! positions, and the worker hands the state changed since E-1
//! ([`ViewPart`]) to the committer and goes on with E+1 while E is
//! uploaded. The part channel holds a bounded number of epochs: when the
//! store is slower than the stream, the worker waits there, readers'
//! channels fill, and the readers slow down.
//!
//! The operators of all views run in this one task, like operators
//! chained into one task in Flink: an operator with two inputs (a join)
//! sees them in the order the task processes them, so aligning the task's
//! inputs aligns every operator.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::task::Poll;
use std::time::{Duration, Instant};

use datafusion::error::DataFusionError;
use tokio::sync::mpsc;
use tracing::{debug, error, warn};
use weir_state::{DeltaBatches, TableChange, TableId};

use super::cluster::{partitionable, Cluster, ClusterCommand, ShardCut, ShardMessage, ViewStart};
use super::event_clock::EventClock;
use super::reader::{EpochReads, Reader, ReaderSpec, SourceMessage};
use super::shared::SharedReaders;
use super::source::{deal_splits, position_key};
use super::view::{
    catch_up, check_memory, deliver, full_state, within_budget, RelationChanges, SourceInput,
    ViewRuntime,
};
use super::wire::WireChanges;
use super::{
    Command, FailureReason, PendingQueue, RuntimeConfig, RuntimeStatus, ViewFailed, ViewPart,
    WorkerFigures,
};
use crate::{Aligner, Changes, OperatorInfo, OperatorStats};

/// How often, at most, views' memory is counted within an epoch.
const MEMORY_CHECK_INTERVAL: Duration = Duration::from_millis(50);

/// How many messages may wait in a shard's channel.
const SHARD_CHANNEL: usize = 8;

struct PendingView {
    token: u64,
    sources: BTreeSet<String>,
    queue: PendingQueue,
}

/// One view's feed of a share of a source's splits (see `reader.rs`).
struct ReaderInput {
    view: String,
    source: String,
    /// Where the source's split positions go in a checkpoint.
    position_key: String,
    /// Its input to barrier alignment: the position key and the reader's
    /// number.
    key: String,
    /// The splits it reads.
    splits: Vec<u32>,
    reader: Reader,
}

/// One worker's shard of a partitioned view: its output changes and
/// barriers, an input like a reader.
struct ShardInput {
    view: String,
    key: String,
    messages: mpsc::Receiver<ShardMessage>,
}

/// What the coordinator keeps of a view that runs partitioned.
#[derive(Default)]
struct Partitioned {
    /// The state deltas of the epoch being aligned, from the shards that
    /// delivered its barrier.
    deltas: Vec<(usize, DeltaBatches)>,
    /// Each worker's share, as of its last cut.
    workers: Vec<WorkerShare>,
}

/// One worker's share of a partitioned view.
#[derive(Default)]
struct WorkerShare {
    process: usize,
    /// Source rows its readers delivered since the view started here.
    rows_read: u64,
    /// Its operators' figures.
    operators: Vec<OperatorInfo>,
}

impl Partitioned {
    /// Each worker's figures, for `weir_view_workers`.
    fn figures(&self) -> Vec<WorkerFigures> {
        self.workers
            .iter()
            .enumerate()
            .map(|(worker, share)| WorkerFigures {
                worker,
                process: share.process,
                rows_read: share.rows_read,
                state_rows: share
                    .operators
                    .iter()
                    .flat_map(|o| &o.state_rows)
                    .map(|&rows| rows as u64)
                    .sum(),
            })
            .collect()
    }
}

/// Which input a message came from.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Input {
    Commands,
    Reader(String),
}

/// The stream worker's state.
pub(super) struct Worker {
    config: RuntimeConfig,
    status: Arc<RuntimeStatus>,
    commands: mpsc::UnboundedReceiver<Command>,
    parts: mpsc::Sender<ViewPart>,
    /// Views that failed since the last cut.
    failures: Vec<ViewFailed>,
    views: Vec<ViewRuntime>,
    pending: Vec<PendingView>,
    readers: Vec<ReaderInput>,
    /// The split positions of every running view's sources, by position
    /// key, as their readers' last barriers carried them: after the rows
    /// of every epoch up to that barrier, which is what a checkpoint
    /// records (with aligned inputs, exactly the rows processed before the
    /// checkpoint).
    positions: BTreeMap<String, Vec<u64>>,
    aligner: Aligner<Input>,
    /// The timely workers that run partitioned views (`workers` > 1).
    cluster: Option<Cluster>,
    shards: Vec<ShardInput>,
    partitioned: HashMap<String, Partitioned>,
    /// The epoch the next barrier ends.
    open_epoch: u64,
    /// Where reading the readers starts next time (fairness).
    next_reader: usize,
    /// When the barrier being aligned arrived on the command channel.
    barrier_since: Option<std::time::Instant>,
    /// An alignment that removing a view's readers completed.
    aligned_by_removal: Option<u64>,
    /// When views' memory was last counted.
    memory_checked: Instant,
    /// Each running view's watermarks.
    clocks: HashMap<String, EventClock>,
}

enum Next {
    Command(Command),
    Source(usize, Option<SourceMessage>),
    Shard(usize, Option<ShardMessage>),
    Closed,
}

impl Worker {
    /// A worker fed by `commands` that hands its parts to `parts` and
    /// reports what it does in `status`.
    pub fn new(
        config: RuntimeConfig,
        status: Arc<RuntimeStatus>,
        commands: mpsc::UnboundedReceiver<Command>,
        parts: mpsc::Sender<ViewPart>,
    ) -> Self {
        let mut aligner = Aligner::default();
        aligner.add_input(Input::Commands);
        let cluster = (config.workers > 1 || config.cluster.is_some())
            .then(|| {
                let tokio = tokio::runtime::Handle::current();
                Cluster::start(
                    config.workers,
                    config.cluster.as_ref(),
                    tokio,
                    status.clone(),
                )
            })
            .and_then(|started| match started {
                Ok(cluster) => Some(cluster),
                Err(e) if config.cluster.is_some() => {
                    // The other processes wait for this one: without it
                    // there is no cluster to run views on.
                    error!(error = %e, "cannot join the cluster; exiting");
                    std::process::exit(1);
                }
                Err(e) => {
                    warn!(error = %e, "timely workers did not start; views run on one thread");
                    None
                }
            });
        let open_epoch = config.first_epoch;
        Worker {
            cluster,
            shards: Vec::new(),
            partitioned: HashMap::new(),
            open_epoch,
            config,
            status,
            commands,
            parts,
            failures: Vec::new(),
            views: Vec::new(),
            pending: Vec::new(),
            readers: Vec::new(),
            positions: BTreeMap::new(),
            aligner,
            next_reader: 0,
            barrier_since: None,
            aligned_by_removal: None,
            memory_checked: Instant::now(),
            clocks: HashMap::new(),
        }
    }

    /// Runs until the command channel closes or the committer goes away.
    pub async fn run(mut self) {
        loop {
            let next = self.next_input().await;
            let outcome = match next {
                Next::Closed => return,
                Next::Command(command) => self.on_command(command).await,
                Next::Source(i, Some(SourceMessage::Rows(rows))) => {
                    self.status.note_batch();
                    let reader = &self.readers[i];
                    let (view, source) = (reader.view.clone(), reader.source.clone());
                    let count = rows.num_rows() as u64;
                    self.process(RelationChanges::new(), Some((&view, &source, rows)), false);
                    self.status.count(&view, |c| c.source_rows += count);
                    Ok(())
                }
                Next::Source(_, Some(SourceMessage::Moved)) => {
                    self.status.note_batch();
                    Ok(())
                }
                // One instance: a reader that is behind holds nothing back
                // that its rows would not.
                Next::Source(
                    i,
                    Some(SourceMessage::Barrier {
                        epoch, positions, ..
                    }),
                ) => {
                    let reader = &self.readers[i];
                    if let Some(all) = self.positions.get_mut(&reader.position_key) {
                        for (&split, position) in reader.splits.iter().zip(positions) {
                            all[split as usize] = position;
                        }
                    }
                    let input = Input::Reader(self.readers[i].key.clone());
                    self.on_barrier(input, epoch).await
                }
                Next::Shard(i, Some(ShardMessage::Cut(mut cut))) => {
                    let input = Input::Reader(self.shards[i].key.clone());
                    let view = self.shards[i].view.clone();
                    let epoch = cut.epoch;
                    for changes in std::mem::take(&mut cut.rows) {
                        self.shard_rows(&view, changes.0);
                    }
                    if self.partitioned.contains_key(&view) {
                        self.shard_cut(&view, cut);
                        self.on_barrier(input, epoch).await
                    } else {
                        // Its output failed it.
                        Ok(())
                    }
                }
                Next::Shard(i, message) => {
                    let reason = match message {
                        Some(ShardMessage::Failed(failure)) => failure.into_reason(),
                        _ => FailureReason::Error(DataFusionError::Internal(
                            "a worker of the view stopped".into(),
                        )),
                    };
                    let view = self.shards[i].view.clone();
                    self.stop_failed(&view, reason);
                    Ok(())
                }
                Next::Source(i, message) => {
                    // A failed or stopped reader's position would no longer
                    // be checkpointed, so its view cannot go on
                    // exactly-once: it fails.
                    let error = match message {
                        Some(SourceMessage::Failed(e)) => Some(e),
                        _ => None,
                    };
                    let (view, source) =
                        (self.readers[i].view.clone(), self.readers[i].source.clone());
                    self.stop_failed(&view, FailureReason::Source { source, error });
                    Ok(())
                }
            };
            // A view that stopped mid-alignment may have taken the last
            // input alignment waited for.
            let outcome = match (outcome, self.aligned_by_removal.take()) {
                (Ok(()), Some(epoch)) => self.checkpoint(epoch).await,
                (outcome, _) => outcome,
            };
            if outcome.is_err() {
                debug!("committer gone; stream worker stops");
                return;
            }
        }
    }

    /// The next message from an input that is not blocked by alignment:
    /// commands first, then the readers in turn.
    async fn next_input(&mut self) -> Next {
        let Worker {
            commands,
            readers,
            shards,
            aligner,
            next_reader,
            ..
        } = self;
        std::future::poll_fn(|cx| {
            if !aligner.is_blocked(&Input::Commands) {
                match commands.poll_recv(cx) {
                    Poll::Ready(Some(command)) => return Poll::Ready(Next::Command(command)),
                    Poll::Ready(None) => return Poll::Ready(Next::Closed),
                    Poll::Pending => {}
                }
            }
            let count = readers.len();
            for step in 0..count {
                let i = (*next_reader + step) % count;
                let reader = &mut readers[i];
                if aligner.is_blocked(&Input::Reader(reader.key.clone())) {
                    continue;
                }
                if let Poll::Ready(message) = reader.reader.messages.poll_recv(cx) {
                    *next_reader = i + 1;
                    return Poll::Ready(Next::Source(i, message));
                }
            }
            for (i, shard) in shards.iter_mut().enumerate() {
                if aligner.is_blocked(&Input::Reader(shard.key.clone())) {
                    continue;
                }
                if let Poll::Ready(message) = shard.messages.poll_recv(cx) {
                    return Poll::Ready(Next::Shard(i, message));
                }
            }
            Poll::Pending
        })
        .await
    }

    async fn on_command(&mut self, command: Command) -> Result<(), Closed> {
        match command {
            Command::Changes(changes) => self.process(changes, None, false),
            Command::Barrier(epoch) => {
                self.status.note_barrier();
                self.barrier_since = Some(std::time::Instant::now());
                self.open_epoch = epoch + 1;
                let now = super::unix_micros();
                for clock in self.clocks.values_mut() {
                    clock.set_now(now);
                }
                for reader in &self.readers {
                    reader.reader.inject_barrier(epoch);
                }
                if let Some(cluster) = &self.cluster {
                    if !self.partitioned.is_empty() {
                        let watermarks = self
                            .partitioned
                            .keys()
                            .filter_map(|view| {
                                let marks = self.clocks.get(view)?.watermarks();
                                (!marks.is_empty()).then(|| (view.clone(), marks))
                            })
                            .collect();
                        cluster.send(ClusterCommand::Barrier(epoch, watermarks));
                    }
                }
                return self.on_barrier(Input::Commands, epoch).await;
            }
            Command::AddPending {
                token,
                sources,
                queue,
                reply,
            } => {
                let snapshots = self
                    .views
                    .iter()
                    .filter(|v| sources.contains(&v.name))
                    .map(|v| (v.name.clone(), v.output.snapshot()))
                    .collect();
                self.pending.push(PendingView {
                    token,
                    sources,
                    queue,
                });
                let _ = reply.send(snapshots);
            }
            Command::RemovePending(token) => self.pending.retain(|p| p.token != token),
            Command::Start(view, token) => self.start(*view, token),
            Command::Drop(name) => {
                self.remove_view(&name);
                self.status.forget(&name);
            }
        }
        Ok(())
    }

    /// Starts a view: catches it up on its queue, then runs it with the
    /// others and starts its readers.
    fn start(&mut self, mut view: ViewRuntime, token: Option<u64>) {
        if let Some(token) = token {
            let Some(position) = self.pending.iter().position(|p| p.token == token) else {
                warn!(view = %view.name, "pending view vanished before it started");
                return;
            };
            let pending = self.pending.remove(position);
            let queued = std::mem::take(&mut *pending.queue.lock().expect("queue lock"));
            let budget = self.config.view_memory_bytes;
            // A sink's backfill first, then what it catches up on.
            match view.hand_over_backfill() {
                Ok(rows) => self.status.count(&view.name, |c| c.rows_out += rows as u64),
                Err(e) => {
                    self.stop_failed(&view.name, FailureReason::Error(e));
                    return;
                }
            }
            let caught_up = catch_up(&mut view.dataflow, queued)
                .and_then(|out| deliver(&mut view.output, view.sink.as_mut(), out))
                .and_then(|out| {
                    check_memory(&view.name, &view.dataflow, &view.output, budget)?;
                    Ok(out.len())
                });
            match caught_up {
                Ok(rows) => self.status.count(&view.name, |c| c.rows_out += rows as u64),
                Err(e) => {
                    self.stop_failed(&view.name, FailureReason::Error(e));
                    return;
                }
            }
        }
        let reads_views = &view.reads_views;
        let is_table = |relation: &str| !reads_views.contains(relation);
        let idle = self.config.watermark_idle_timeout;
        if let Some(cluster) = self
            .cluster
            .as_ref()
            .filter(|_| partitionable(&view.plan, &view.sources, is_table))
        {
            let peers = cluster.peers();
            // Every worker reads a source's splits; only worker 0 a
            // table's changes.
            let sources = &view.sources;
            let instances = |relation: &str| match sources.iter().any(|s| s.name == relation) {
                true => peers,
                false => 1,
            };
            let mut clock = EventClock::new(&view.plan, instances, idle);
            // The rows its backfill and catch-up read count as instance
            // 0's: the workers start from the state they left, not from
            // their rows.
            for (node, time) in view.dataflow.take_event_times() {
                clock.report(0, node, time);
            }
            self.clocks.insert(view.name.clone(), clock);
            if let Err(e) = self.start_partitioned(&mut view, peers) {
                self.stop_failed(&view.name, FailureReason::Error(e));
                return;
            }
            self.views.push(view);
            return;
        }
        let mut readers = Vec::new();
        for input in &view.sources {
            let (shared, epoch_reads) = (&self.status.shared_readers, &self.status.epoch_reads);
            match spawn_readers(
                shared,
                epoch_reads,
                &view.name,
                view.id,
                input,
                self.config.workers,
            ) {
                Ok(spawned) => readers.extend(spawned),
                Err(e) => {
                    let source = input.name.clone();
                    let reason = FailureReason::Source {
                        source,
                        error: Some(e),
                    };
                    self.stop_failed(&view.name, reason);
                    return;
                }
            }
            self.positions.insert(
                position_key(view.id, input.source_id),
                input.positions.clone(),
            );
        }
        for reader in readers {
            self.aligner.add_input(Input::Reader(reader.key.clone()));
            self.readers.push(reader);
        }
        let clock = EventClock::new(&view.plan, |_| 1, idle);
        self.clocks.insert(view.name.clone(), clock);
        self.views.push(view);
    }

    /// Starts a view over sources and tables as one instance per timely
    /// worker; each worker's shard becomes an aligned input.
    fn start_partitioned(&mut self, view: &mut ViewRuntime, workers: usize) -> crate::Result<()> {
        // The workers start from the state the view holds now: as
        // restored, or as its backfill and catch-up left it (taken into
        // the deltas its first epoch commits). The coordinator keeps an
        // empty copy of the operators, for their specs.
        let state = match view.restored.take() {
            Some(state) => state,
            None => {
                view.early.take(&mut view.dataflow, &mut view.output)?;
                full_state(&view.dataflow.state_specs(), &view.early.states)?
            }
        };
        let stats = view
            .dataflow
            .operators()
            .into_iter()
            .map(|o| o.stats)
            .collect();
        view.dataflow = crate::Dataflow::new(&view.plan)?;
        let mut senders = Vec::with_capacity(workers);
        for worker in 0..workers {
            let (sender, messages) = mpsc::channel(SHARD_CHANNEL);
            senders.push(sender);
            let key = format!("{}#worker{worker}", view.id);
            self.aligner.add_input(Input::Reader(key.clone()));
            self.shards.push(ShardInput {
                view: view.name.clone(),
                key,
                messages,
            });
        }
        for input in &view.sources {
            self.positions.insert(
                position_key(view.id, input.source_id),
                input.positions.clone(),
            );
        }
        self.partitioned.insert(
            view.name.clone(),
            Partitioned {
                deltas: Vec::new(),
                workers: (0..workers).map(|_| WorkerShare::default()).collect(),
            },
        );
        let start = ViewStart::new(view, self.open_epoch, state, stats, senders);
        if let Some(cluster) = &self.cluster {
            // Workers of other processes read sources too.
            self.status
                .set_remote_readers(cluster.peers() > self.config.workers);
            cluster.send(ClusterCommand::Start(start));
        }
        Ok(())
    }

    /// A shard's output changes: into the view's output table, and on to
    /// the views and pending views that read it.
    fn shard_rows(&mut self, name: &str, changes: Changes) {
        let Some(view) = self.views.iter_mut().find(|v| v.name == name) else {
            return;
        };
        match deliver(&mut view.output, view.sink.as_mut(), vec![changes]) {
            Ok(out) => {
                self.status.count(name, |c| c.rows_out += out.len() as u64);
                if !out.is_empty() {
                    let mut changes = RelationChanges::new();
                    changes.insert(name.to_owned(), vec![out]);
                    self.process(changes, None, false);
                }
            }
            Err(e) => self.stop_failed(name, FailureReason::Error(e)),
        }
    }

    /// A shard's cut of an epoch: its state deltas wait for the others',
    /// its readers' positions are recorded.
    fn shard_cut(&mut self, name: &str, cut: ShardCut) {
        let worker = cut.worker;
        if cut.process != 0 {
            // Workers in this process counted their rows as they read them.
            self.status.count(name, |c| {
                c.source_rows += cut.rows_read;
                c.rows_in += cut.rows_read;
            });
        }
        if let Some(clock) = self.clocks.get_mut(name) {
            for (node, time) in cut.event_times {
                clock.report(worker, node, time);
            }
            if cut.behind {
                clock.behind(worker);
            }
        }
        if let Some(partitioned) = self.partitioned.get_mut(name) {
            partitioned
                .deltas
                .extend(cut.deltas.into_iter().map(|(t, d)| (t, d.into())));
            if let Some(share) = partitioned.workers.get_mut(worker) {
                share.process = cut.process;
                share.rows_read += cut.rows_read;
                share.operators = cut.operators;
            }
        }
        for (key, split, position) in cut.positions {
            if let Some(all) = self.positions.get_mut(&key) {
                if let Some(slot) = all.get_mut(split as usize) {
                    *slot = position;
                }
            }
        }
    }

    /// Pushes changes through every view in dependency order. `source`
    /// rows go only to the view whose reader read them. At the end of an
    /// epoch every view also flushes, after the views it reads did (their
    /// flushed output is part of its input).
    fn process(
        &mut self,
        mut changes: RelationChanges,
        source: Option<(&str, &str, datafusion::arrow::record_batch::RecordBatch)>,
        end_of_epoch: bool,
    ) {
        let source = source.map(|(view, name, rows)| (view, name, Changes::inserts(rows)));
        if changes.is_empty() && source.is_none() && !end_of_epoch {
            return;
        }
        // Views' memory is counted at each epoch's end and in between at
        // most every MEMORY_CHECK_INTERVAL (counting walks their chunks).
        let budget = self.config.view_memory_bytes;
        let check = end_of_epoch || self.memory_checked.elapsed() >= MEMORY_CHECK_INTERVAL;
        if check {
            self.memory_checked = Instant::now();
        }
        let mut failed = Vec::new();
        let clocks = &self.clocks;
        for view in self.views.iter_mut() {
            let own = source
                .as_ref()
                .filter(|(owner, _, _)| *owner == view.name)
                .map(|(_, name, rows)| (*name, rows));
            let changes_of = |relation: &str| -> Vec<Changes> {
                match own {
                    Some((name, rows)) if name == relation => vec![rows.clone()],
                    _ => changes.get(relation).cloned().unwrap_or_default(),
                }
            };
            let reads: BTreeSet<String> = view.dataflow.sources();
            if self.partitioned.contains_key(&view.name) {
                // Its operators run in the workers, which get its tables'
                // changes through worker 0; its output arrives from its
                // shards.
                if let Some(cluster) = &self.cluster {
                    for relation in &reads {
                        let Some(batches) = changes.get(relation).filter(|c| !c.is_empty()) else {
                            continue;
                        };
                        let rows: usize = batches.iter().map(Changes::len).sum();
                        self.status.count(&view.name, |c| c.rows_in += rows as u64);
                        cluster.send(ClusterCommand::Changes {
                            view: view.name.clone(),
                            relation: relation.clone(),
                            changes: batches.iter().cloned().map(WireChanges).collect(),
                        });
                    }
                }
                continue;
            }
            if reads.iter().any(|r| failed.iter().any(|(f, _)| f == r)) {
                // Stopped below with the view it reads.
                continue;
            }
            let rows_in: usize = reads
                .iter()
                .map(|r| changes_of(r).iter().map(Changes::len).sum::<usize>())
                .sum();
            if rows_in == 0 && !end_of_epoch {
                continue;
            }
            let mut step = || {
                let mut out = Vec::new();
                for relation in &reads {
                    for part in changes_of(relation) {
                        out.extend(view.dataflow.push(relation, part)?);
                    }
                }
                if end_of_epoch {
                    let watermarks = clocks
                        .get(&view.name)
                        .map(EventClock::watermarks)
                        .unwrap_or_default();
                    out.extend(view.dataflow.flush_with(&watermarks)?);
                }
                let out = deliver(&mut view.output, view.sink.as_mut(), out)?;
                if check {
                    check_memory(&view.name, &view.dataflow, &view.output, budget)?;
                }
                Ok(out)
            };
            let outcome = step();
            match outcome {
                Ok(out) => {
                    self.status.count(&view.name, |c| {
                        c.rows_in += rows_in as u64;
                        c.rows_out += out.len() as u64;
                    });
                    if !out.is_empty() {
                        changes.insert(view.name.clone(), vec![out]);
                    }
                }
                Err(e) => failed.push((view.name.clone(), FailureReason::Error(e))),
            }
        }
        for (name, failure) in failed {
            if self.views.iter().any(|v| v.name == name) {
                self.stop_failed(&name, failure);
            }
        }
        for pending in &self.pending {
            let relevant: RelationChanges = changes
                .iter()
                .filter(|(name, _)| pending.sources.contains(*name))
                .map(|(name, c)| (name.clone(), c.clone()))
                .collect();
            if !relevant.is_empty() {
                pending.queue.lock().expect("queue lock").push(relevant);
            }
        }
    }

    /// A failed view stops for good: its operators, state and readers go,
    /// and the next part tells the committer, which records the failure in
    /// the catalog. Views that read a failed view fail with it.
    fn stop_failed(&mut self, name: &str, reason: FailureReason) {
        warn!(view = %name, %reason, "materialized view failed");
        self.status.note_failure();
        self.failures.push(ViewFailed {
            view: name.to_owned(),
            reason,
        });
        self.remove_view(name);
        let readers: Vec<String> = self
            .views
            .iter_mut()
            .filter(|v| v.dataflow.sources().contains(name))
            .map(|v| v.name.clone())
            .collect();
        for reader in readers {
            self.stop_failed(&reader, FailureReason::Input(name.to_owned()));
        }
    }

    /// Stops running a view: its operators and its readers go. If that
    /// completes an alignment (a view failed while the barrier waited for
    /// its reader), the run loop checkpoints next.
    fn remove_view(&mut self, name: &str) {
        if let Some(view) = self.views.iter().find(|v| v.name == name) {
            for input in &view.sources {
                self.positions
                    .remove(&position_key(view.id, input.source_id));
            }
        }
        self.views.retain(|v| v.name != name);
        self.clocks.remove(name);
        if self.partitioned.remove(name).is_some() {
            if let Some(cluster) = &self.cluster {
                cluster.send(ClusterCommand::Drop(name.to_owned()));
            }
            if self.partitioned.is_empty() {
                self.status.set_remote_readers(false);
            }
        }
        let mut gone: Vec<String> = self
            .readers
            .iter()
            .filter(|r| r.view == name)
            .map(|r| r.key.clone())
            .collect();
        gone.extend(
            self.shards
                .iter()
                .filter(|s| s.view == name)
                .map(|s| s.key.clone()),
        );
        self.readers.retain(|r| r.view != name);
        self.shards.retain(|s| s.view != name);
        for key in gone {
            if let Some(epoch) = self.aligner.remove_input(&Input::Reader(key)) {
                self.aligned_by_removal = Some(epoch);
            }
        }
    }

    async fn on_barrier(&mut self, input: Input, epoch: u64) -> Result<(), Closed> {
        match self.aligner.on_barrier(&input, epoch) {
            Ok(Some(epoch)) => self.checkpoint(epoch).await,
            Ok(None) => Ok(()),
            Err(mismatch) => {
                // Readers join only between barriers, so this is a bug in a
                // producer; the barrier is ignored rather than mixing epochs.
                warn!(?input, ?mismatch, "barrier out of order ignored");
                Ok(())
            }
        }
    }

    /// Every input delivered `Barrier(epoch)`: hand the views' state
    /// changes since the last barrier to the committer.
    async fn checkpoint(&mut self, epoch: u64) -> Result<(), Closed> {
        let started = std::time::Instant::now();
        self.process(RelationChanges::new(), None, true);
        let part = self.cut(epoch);
        let cut = started.elapsed();
        self.parts.send(part).await.map_err(|_| Closed)?;
        let aligned = self
            .barrier_since
            .take()
            .map_or(0.0, |since| (started - since).as_secs_f64() * 1e3);
        debug!(
            epoch,
            align_ms = aligned,
            cut_ms = cut.as_secs_f64() * 1e3,
            handed_over_ms = started.elapsed().as_secs_f64() * 1e3,
            "views checkpointed"
        );
        Ok(())
    }

    /// The views' state changes since the last barrier. A view whose
    /// state cannot be taken fails (and so leaves the manifest with its
    /// failure recorded) rather than taking the others down with it.
    fn cut(&mut self, epoch: u64) -> ViewPart {
        let mut part = ViewPart {
            epoch,
            ..ViewPart::default()
        };
        let mut failed = Vec::new();
        let budget = self.config.view_memory_bytes;
        for view in &mut self.views {
            let outcome = match self.partitioned.get_mut(&view.name) {
                Some(partitioned) => {
                    let figures = merged_operators(view, &partitioned.workers);
                    self.status.publish_operators(&view.name, figures.clone());
                    self.status
                        .publish_workers(&view.name, partitioned.figures());
                    cut_partitioned(view, partitioned, &figures, budget, &mut part)
                }
                None => {
                    if let Some(clock) = self.clocks.get_mut(&view.name) {
                        for (node, time) in view.dataflow.take_event_times() {
                            clock.report(0, node, time);
                        }
                    }
                    self.status.publish_operators(&view.name, operators(view));
                    cut_view(view, &mut part)
                }
            };
            if let Err(e) = outcome {
                failed.push((view.name.clone(), FailureReason::Error(e)));
            }
        }
        for (name, failure) in failed {
            self.stop_failed(&name, failure);
        }
        let mut moved = false;
        for clock in self.clocks.values_mut() {
            moved |= clock.tick() | clock.follows_now();
        }
        if moved {
            // The next barrier carries them (or the next `now()`), even
            // without new rows.
            self.status.note_watermark_moved();
        }
        let running: BTreeSet<TableId> = self
            .views
            .iter()
            .flat_map(|v| std::iter::once(v.id).chain(v.state_ids.iter().copied()))
            .collect();
        part.tables.retain(|id, _| running.contains(id));
        part.positions = self.positions.clone();
        part.failures = std::mem::take(&mut self.failures);
        part
    }
}

/// Starts the readers of one source of a view: `workers` of them, each
/// reading a share of the source's splits from its checkpointed position.
fn spawn_readers(
    shared: &Arc<SharedReaders>,
    epoch_reads: &Arc<EpochReads>,
    view: &str,
    view_id: TableId,
    input: &SourceInput,
    workers: usize,
) -> crate::Result<Vec<ReaderInput>> {
    let position_key = position_key(view_id, input.source_id);
    let mut readers = Vec::new();
    for (number, share) in deal_splits(input.source.splits(), workers)
        .into_iter()
        .enumerate()
    {
        let reader = Reader::spawn(
            shared,
            ReaderSpec {
                source_id: input.source_id,
                name: input.name.clone(),
                source: input.source.clone(),
                positions: input.positions.clone(),
                splits: share.clone(),
                columns: input.columns.clone(),
            },
            epoch_reads.clone(),
        )?;
        readers.push(ReaderInput {
            view: view.to_owned(),
            source: input.name.clone(),
            key: format!("{position_key}#{number}"),
            position_key: position_key.clone(),
            splits: share,
            reader,
        });
    }
    Ok(readers)
}

/// What each of a view's operators has done and holds, and its output
/// table as a last entry.
fn operators(view: &ViewRuntime) -> Vec<OperatorInfo> {
    with_output(view, view.dataflow.operators())
}

/// A partitioned view's operators: every worker's figures summed, node by
/// node, and its output table last.
fn merged_operators(view: &ViewRuntime, workers: &[WorkerShare]) -> Vec<OperatorInfo> {
    let mut merged: Vec<OperatorInfo> = Vec::new();
    for share in workers {
        for (node, info) in share.operators.iter().enumerate() {
            match merged.get_mut(node) {
                None => merged.push(info.clone()),
                Some(sum) => {
                    sum.stats.rows_in += info.stats.rows_in;
                    sum.stats.rows_out += info.stats.rows_out;
                    sum.stats.busy += info.stats.busy;
                    for (rows, more) in sum.state_rows.iter_mut().zip(&info.state_rows) {
                        *rows += more;
                    }
                    sum.state_bytes += info.state_bytes;
                    sum.instances += info.instances;
                    sum.late_rows += info.late_rows;
                    sum.watermark_micros = sum.watermark_micros.max(info.watermark_micros);
                }
            }
        }
    }
    with_output(view, merged)
}

/// `operators` with the view's output table as a last entry.
fn with_output(view: &ViewRuntime, mut operators: Vec<OperatorInfo>) -> Vec<OperatorInfo> {
    let rows_in = operators.last().map_or(0, |o| o.stats.rows_out);
    operators.push(OperatorInfo {
        index: operators.len(),
        name: "Output".into(),
        stats: OperatorStats {
            rows_in,
            rows_out: 0,
            busy: Duration::ZERO,
        },
        state_rows: vec![view.output.len()],
        state_bytes: view.output.memory_size(),
        instances: 1,
        late_rows: 0,
        watermark_micros: None,
    });
    operators
}

/// Adds a partitioned view's output table and its shards' state deltas
/// to `part`, after checking its memory: its workers' state and its
/// output table (`figures`, output last).
fn cut_partitioned(
    view: &mut ViewRuntime,
    partitioned: &mut Partitioned,
    figures: &[OperatorInfo],
    budget: usize,
    part: &mut ViewPart,
) -> datafusion::error::Result<()> {
    let used = figures.iter().map(|o| o.state_bytes).sum();
    within_budget(&view.name, used, budget)?;
    let mut deltas: Vec<Vec<DeltaBatches>> = vec![Vec::new(); view.state_ids.len()];
    for (table, delta) in partitioned.deltas.drain(..) {
        if let Some(slot) = deltas.get_mut(table) {
            slot.push(delta);
        }
    }
    let operators = &figures[..figures.len().saturating_sub(1)];
    let mut rows: Vec<usize> = operators
        .iter()
        .flat_map(|o| o.state_rows.iter().copied())
        .collect();
    rows.resize(view.state_ids.len(), 0);
    add_tables(view, deltas, rows, part)
}

/// Adds one view's output table and operator state changes to `part`.
fn cut_view(view: &mut ViewRuntime, part: &mut ViewPart) -> datafusion::error::Result<()> {
    let deltas = view.dataflow.checkpoint()?;
    let deltas = deltas
        .into_iter()
        .map(|d| d.into_iter().collect())
        .collect();
    let operators = view.dataflow.operators();
    let rows = operators.into_iter().flat_map(|o| o.state_rows).collect();
    add_tables(view, deltas, rows, part)
}

/// Adds a view's output table (its delta and snapshot) and its operator
/// states (`deltas` and distinct `rows` of each, in dataflow order) to
/// `part`, after the deltas its creation took early.
fn add_tables(
    view: &mut ViewRuntime,
    deltas: Vec<Vec<DeltaBatches>>,
    rows: Vec<usize>,
    part: &mut ViewPart,
) -> datafusion::error::Result<()> {
    if let Some(sink) = view.sink.as_mut() {
        if let Some(changes) = sink.cut(part.epoch)? {
            part.sink_changes.insert(view.id, changes);
        }
    }
    let snapshot = view.output.snapshot();
    let early = std::mem::take(&mut view.early);
    part.tables.insert(
        view.id,
        TableChange {
            deltas: early
                .output
                .into_iter()
                .chain(view.output.take_delta().map_err(external)?)
                .collect(),
            next_row_id: 0,
            spec: view.output.spec().clone(),
        },
    );
    part.snapshots.insert(view.id, snapshot);
    let mut early_states = early.states.into_iter();
    let specs = view.dataflow.state_specs();
    for (((delta, spec), rows), &id) in deltas.into_iter().zip(specs).zip(rows).zip(&view.state_ids)
    {
        part.operator_rows.insert(id, rows);
        let early = early_states.next().unwrap_or_default();
        part.tables.insert(
            id,
            TableChange {
                deltas: early.into_iter().chain(delta).collect(),
                next_row_id: 0,
                spec,
            },
        );
    }
    Ok(())
}

/// The committer is gone (shutdown).
struct Closed;

fn external(e: weir_state::StateError) -> DataFusionError {
    DataFusionError::External(Box::new(e))
}
