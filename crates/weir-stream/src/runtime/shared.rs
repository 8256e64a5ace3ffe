//! Shared source readers: one reader per source share (a set of its
//! splits), whose batches go to every view that reads that share.
//!
//! ```text
//!                          ┌──▶ subscriber queue ──▶ feed (view a) ──Rows, Barrier(E)──▶ worker
//!  source ──▶ hub task ────┤
//!   (one reader)           └──▶ subscriber queue ──▶ feed (view b) ──Rows, Barrier(E)──▶ timely worker
//! ```
//!
//! A hub reads its share once and hands each batch, with the share's
//! positions after it, to every subscriber's queue; the slowest
//! subscriber's full queue holds the hub back (back-pressure, as a
//! private reader has). Each view's feed (`reader.rs`) answers its own
//! barriers with the positions after the last batch it forwarded, so the
//! views' epochs need not cut the shared stream at the same batch.
//!
//! A feed joins a hub only where the hub stands: its positions must equal
//! the hub's between two batches. A view that starts behind (a view
//! created later, which reads the source from its beginning) catches up
//! with a bounded read of its own to the hub's positions and asks again;
//! the hub pauses for a feed that has caught up once already, so that the
//! last gap closes. A hub ends when its last subscriber leaves.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use datafusion::arrow::record_batch::RecordBatch;
use futures::StreamExt;
use tokio::sync::{mpsc, oneshot};
use weir_state::TableId;

use super::source::{set_share, ReadFrom, Source, SourceReader};
use crate::Result;

/// How many batches may wait in a subscriber's queue.
const QUEUE_BATCHES: usize = 4;

/// The longest a hub waits for a feed it paused for: the feed's last
/// catch-up should take a fraction of this, and the other views wait
/// meanwhile.
const MAX_PAUSE: Duration = Duration::from_secs(5);

/// A batch of a share and the share's positions after it, or the error
/// the source failed with (as text: every subscriber gets it).
pub(super) type SharedBatch = std::result::Result<(RecordBatch, Arc<Vec<u64>>), Arc<str>>;

/// What identifies a shared reader: the source and the splits it reads.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) struct ShareKey {
    pub source: TableId,
    pub splits: Vec<u32>,
}

/// A feed's request to join a hub.
pub(super) struct Join {
    /// The feed's positions, one per split of the share.
    pub positions: Vec<u64>,
    /// The columns its view reads (`None`: all).
    pub columns: Option<Vec<bool>>,
    /// Join wherever the hub stands (a split read for the first time of
    /// a source that starts at its head).
    pub at_head: bool,
    /// Pause the hub if the feed is behind, until it asks again: it has
    /// caught up once and the gap left is short.
    pub pause: bool,
    pub reply: oneshot::Sender<Joined>,
}

/// The hub's answer to a [`Join`].
pub(super) enum Joined {
    /// The feed reads the hub's batches from here on; `positions` are
    /// where it joined.
    Subscribed {
        queue: mpsc::Receiver<SharedBatch>,
        positions: Vec<u64>,
        /// Set while the hub is behind its source (see [`Hub::behind`]).
        hub_behind: Arc<AtomicBool>,
    },
    /// The hub stands at these other positions: the feed reads on its
    /// own to where it is behind, or waits where it is ahead, and asks
    /// again.
    Elsewhere(Vec<u64>),
    /// The hub cannot read what the feed needs: it reads on its own.
    Refused,
}

/// Every running hub of a runtime (or of a process of a cluster), by
/// share.
#[derive(Debug, Default)]
pub struct SharedReaders {
    hubs: Mutex<HashMap<ShareKey, HubHandle>>,
    next_hub: AtomicU64,
}

/// The registry's handle on a running hub.
#[derive(Debug)]
struct HubHandle {
    id: u64,
    source_name: String,
    requests: mpsc::UnboundedSender<Join>,
    figures: Arc<HubFigures>,
}

/// What a hub has done, for `weir_shared_readers`.
#[derive(Debug, Default)]
struct HubFigures {
    subscribers: AtomicUsize,
    rows_read: AtomicU64,
}

/// One running shared reader, as `weir_shared_readers` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SharedReaderFigures {
    /// The source's name.
    pub source: String,
    /// The splits it reads.
    pub splits: Vec<u32>,
    /// The views' feeds it delivers to.
    pub subscribers: usize,
    /// Rows it has read since it started.
    pub rows_read: u64,
}

impl SharedReaders {
    /// Every running hub.
    pub fn figures(&self) -> Vec<SharedReaderFigures> {
        let hubs = self.hubs.lock().expect("hubs lock");
        let mut figures: Vec<SharedReaderFigures> = hubs
            .iter()
            .map(|(key, hub)| SharedReaderFigures {
                source: hub.source_name.clone(),
                splits: key.splits.clone(),
                subscribers: hub.figures.subscribers.load(Ordering::SeqCst),
                rows_read: hub.figures.rows_read.load(Ordering::SeqCst),
            })
            .collect();
        figures.sort_by(|a, b| (&a.source, &a.splits).cmp(&(&b.source, &b.splits)));
        figures
    }

    /// Asks the hub of `key` to take a feed. Without a hub, one starts
    /// reading `source` (named `name`) as `from` says (the feed's
    /// positions, and every other split's as its view last checkpointed
    /// them: where a paced source stands), with the feed subscribed. The
    /// reply comes on `join.reply` (dropped if the hub ended meanwhile:
    /// the feed asks again).
    pub(super) fn join(
        self: &Arc<Self>,
        key: &ShareKey,
        name: &str,
        source: &Arc<dyn Source>,
        mut from: ReadFrom,
        join: Join,
    ) -> Result<()> {
        let mut hubs = self.hubs.lock().expect("hubs lock");
        let join = match hubs.get(key) {
            Some(hub) => match hub.requests.send(join) {
                Ok(()) => return Ok(()),
                // It ended and has not yet left the registry.
                Err(mpsc::error::SendError(join)) => join,
            },
            None => join,
        };
        from.columns = from.columns.filter(|_| source.projects());
        from.until = None;
        let positions = Arc::new(join.positions.clone());
        let reader = source.open(from.clone())?;
        let (requests, receiver) = mpsc::unbounded_channel();
        let id = self.next_hub.fetch_add(1, Ordering::SeqCst);
        let figures = Arc::new(HubFigures::default());
        let hub = Hub {
            id,
            key: key.clone(),
            registry: self.clone(),
            source: source.clone(),
            reader,
            from,
            positions,
            pause_until: None,
            subscribers: Vec::new(),
            figures: figures.clone(),
            behind: Arc::default(),
        };
        hubs.insert(
            key.clone(),
            HubHandle {
                id,
                source_name: name.to_owned(),
                requests,
                figures,
            },
        );
        tokio::spawn(hub.run(receiver, join));
        Ok(())
    }
}

/// The columns two views read between them (`None`: all).
fn union(a: &Option<Vec<bool>>, b: &Option<Vec<bool>>) -> Option<Vec<bool>> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.iter().zip(b).map(|(a, b)| *a || *b).collect()),
        _ => None,
    }
}

/// A running shared reader.
struct Hub {
    id: u64,
    key: ShareKey,
    registry: Arc<SharedReaders>,
    source: Arc<dyn Source>,
    reader: Box<dyn SourceReader>,
    /// How it opened its reader; its columns: those its subscribers read,
    /// for a source that computes only those (`None`: all).
    from: ReadFrom,
    /// The share's positions after the last batch read.
    positions: Arc<Vec<u64>>,
    /// Set while it waits for a feed that is catching up (at most
    /// [`MAX_PAUSE`]).
    pause_until: Option<tokio::time::Instant>,
    subscribers: Vec<mpsc::Sender<SharedBatch>>,
    figures: Arc<HubFigures>,
    /// Whether rows of its source wait that it has not handed on: its
    /// reader has rows waiting, or it is held (delivering to a full queue,
    /// paused for a feed). Its feeds' views then wait for its rows rather
    /// than count their readers idle.
    behind: Arc<AtomicBool>,
}

impl Hub {
    async fn run(mut self, mut requests: mpsc::UnboundedReceiver<Join>, first: Join) {
        self.answer(first);
        let mut finished = false;
        let pause = tokio::time::sleep(Duration::ZERO);
        tokio::pin!(pause);
        loop {
            if let Some(until) = self.pause_until {
                pause.as_mut().reset(until);
            }
            let paused = self.pause_until.is_some();
            tokio::select! {
                biased;
                join = requests.recv() => {
                    let Some(join) = join else { return };
                    if self.answer(join) {
                        self.pause_until = None;
                    }
                    self.note_behind();
                }
                () = &mut pause, if paused => {
                    self.pause_until = None;
                    self.note_behind();
                }
                batch = self.reader.next(), if !finished && !paused => match batch {
                    Some(Ok(rows)) => {
                        self.positions = Arc::new(self.reader.positions());
                        self.figures
                            .rows_read
                            .fetch_add(rows.num_rows() as u64, Ordering::SeqCst);
                        self.behind.store(true, Ordering::SeqCst);
                        self.deliver(Ok((rows, self.positions.clone()))).await;
                        self.note_behind();
                    }
                    Some(Err(e)) => {
                        self.deliver(Err(Arc::from(e.to_string()))).await;
                        self.leave_registry();
                        return;
                    }
                    None => finished = true,
                },
            }
            if self.subscribers.is_empty() && self.leave_if_unwanted(&mut requests) {
                return;
            }
        }
    }

    /// Answers a feed's request; true if it subscribed.
    fn answer(&mut self, join: Join) -> bool {
        let here = self.positions.clone();
        let behind = join.positions.iter().zip(here.iter()).all(|(f, h)| f <= h);
        let subscribes = join.at_head || join.positions == *here;
        if subscribes && !self.reads_columns(&join.columns) {
            // Read on from here with its columns too.
            let mut from = self.from.clone();
            from.columns = union(&from.columns, &join.columns);
            set_share(&mut from.positions, &self.key.splits, &here);
            match self.source.open(from.clone()) {
                Ok(reader) => {
                    self.reader = reader;
                    self.from = from;
                }
                // The feed reads on its own (and fails there, if it must).
                Err(_) => {
                    let _ = join.reply.send(Joined::Refused);
                    return false;
                }
            }
        }
        let reply = if subscribes {
            let (sender, queue) = mpsc::channel(QUEUE_BATCHES);
            self.subscribers.push(sender);
            self.note_subscribers();
            Joined::Subscribed {
                queue,
                positions: here.to_vec(),
                hub_behind: self.behind.clone(),
            }
        } else {
            Joined::Elsewhere(here.to_vec())
        };
        let subscribed = matches!(reply, Joined::Subscribed { .. });
        if join.reply.send(reply).is_err() && subscribed {
            // The feed went away while it asked.
            self.subscribers.pop();
            self.note_subscribers();
            return false;
        }
        if !subscribed && behind && join.pause {
            self.pause_until = Some(tokio::time::Instant::now() + MAX_PAUSE);
        }
        subscribed
    }

    /// Whether it computes every column of `columns`.
    fn reads_columns(&self, columns: &Option<Vec<bool>>) -> bool {
        match (&self.from.columns, columns) {
            (None, _) => true,
            (Some(_), None) => false,
            (Some(read), Some(wanted)) => wanted.iter().zip(read).all(|(w, r)| !w || *r),
        }
    }

    /// Hands a batch to every subscriber; those gone are dropped.
    async fn deliver(&mut self, batch: SharedBatch) {
        let mut gone = Vec::new();
        for (i, subscriber) in self.subscribers.iter().enumerate() {
            if subscriber.send(batch.clone()).await.is_err() {
                gone.push(i);
            }
        }
        for i in gone.into_iter().rev() {
            self.subscribers.remove(i);
        }
        self.note_subscribers();
    }

    /// Notes whether it is behind now: paused, or its reader has rows
    /// waiting.
    fn note_behind(&self) {
        let behind = self.pause_until.is_some() || self.reader.has_rows_waiting();
        self.behind.store(behind, Ordering::SeqCst);
    }

    fn note_subscribers(&self) {
        self.figures
            .subscribers
            .store(self.subscribers.len(), Ordering::SeqCst);
    }

    /// With no subscriber left, leaves the registry unless a request came
    /// in meanwhile; true if it left.
    fn leave_if_unwanted(&mut self, requests: &mut mpsc::UnboundedReceiver<Join>) -> bool {
        let mut hubs = self.registry.hubs.lock().expect("hubs lock");
        if !requests.is_empty() {
            return false;
        }
        self.remove_from(&mut hubs);
        true
    }

    /// Leaves the registry (the source failed): later feeds open it anew.
    fn leave_registry(&self) {
        self.remove_from(&mut self.registry.hubs.lock().expect("hubs lock"));
    }

    /// Removes its own entry from the registry's `hubs` (a newer hub of
    /// its share may stand there).
    fn remove_from(&self, hubs: &mut HashMap<ShareKey, HubHandle>) {
        if hubs.get(&self.key).is_some_and(|hub| hub.id == self.id) {
            hubs.remove(&self.key);
        }
    }
}
