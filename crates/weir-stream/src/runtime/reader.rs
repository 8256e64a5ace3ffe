//! Source readers: tasks that each deliver a set of one source's splits
//! to one view, with barriers in-band. The rows come from the share's
//! shared reader (`shared.rs`), or from a reader of the view's own while
//! it catches up with the shared one.
//!
//! ```text
//!  reader task ──Rows──Rows──Barrier(E, position)──Rows──▶ worker
//!       ▲                                                    │
//!       └───────────── barrier request E (unbounded) ────────┘
//! ```
//!
//! The channel to the worker is bounded: when the worker falls behind
//! (or waits for the store), `send` waits and the reader stops reading,
//! which is the back-pressure that keeps memory bounded. The split
//! positions a barrier carries are checkpointed with the epoch, and after
//! a restart the splits are opened again at exactly those positions.
//!
//! An epoch's rows are held (in views' outputs, sinks' logs, operators'
//! deltas) until its cut, and the next barrier may be late: the
//! coordinator holds it back while earlier epochs are still committing.
//! So a reader also bounds what it reads into one epoch ([`EpochReads`]):
//! once it has read its limit since its last barrier it asks for an early
//! cut and reads nothing more until the barrier comes. A fast source then
//! makes shorter epochs, and a slow store slows the source down rather
//! than letting the open epoch grow.

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use datafusion::arrow::record_batch::RecordBatch;
use datafusion::error::DataFusionError;
use futures::StreamExt;
use tokio::sync::{mpsc, oneshot, Notify};
use tokio::task::JoinHandle;
use weir_state::TableId;

use super::shared::{Join, Joined, ShareKey, SharedBatch, SharedReaders};
use super::source::{set_share, ReadFrom, Source, SourceReader};
use crate::Result;

/// How many times a feed asks to join its shared reader before it reads
/// on its own for good.
const MAX_JOIN_ROUNDS: u32 = 20;

/// How long a feed ahead of its shared reader waits before it asks again.
const AHEAD_WAIT: Duration = Duration::from_millis(50);

/// How many batches may wait in a reader's channel.
const CHANNEL_BATCHES: usize = 4;

/// The most rows a reader puts in one batch.
const MAX_BATCH_ROWS: usize = 8192;

/// How much a reader reads into one epoch, and the coordinator's signal
/// that a reader reached it (shared by every reader of a process).
#[derive(Debug)]
pub struct EpochReads {
    /// Bytes of Arrow data a reader reads between two barriers before it
    /// waits for the next one.
    limit: usize,
    /// Notified when a reader reached the limit: the open epoch should be
    /// cut now rather than at the next interval.
    cut_wanted: Notify,
}

impl EpochReads {
    /// The default limit: 64 MiB per reader.
    pub const DEFAULT_LIMIT: usize = 64 << 20;

    /// Readers that each read at most `limit` bytes into one epoch.
    pub fn new(limit: usize) -> Self {
        EpochReads {
            limit: limit.max(1),
            cut_wanted: Notify::new(),
        }
    }

    /// Resolves once a reader has asked for a cut since the last call
    /// returned (a request made while nobody waits is kept).
    pub async fn cut_wanted(&self) {
        self.cut_wanted.notified().await
    }
}

impl Default for EpochReads {
    fn default() -> Self {
        EpochReads::new(EpochReads::DEFAULT_LIMIT)
    }
}

/// What a reader sends.
#[derive(Debug)]
pub(super) enum SourceMessage {
    /// The next rows.
    Rows(RecordBatch),
    /// The positions moved past offsets that hold no row (transaction
    /// markers, records that all went to dead letters): the open epoch
    /// must commit them, although no row changed.
    Moved,
    /// Every row before this belongs to `epoch`.
    Barrier {
        /// The epoch the barrier ends.
        epoch: u64,
        /// The position of each split it reads at the barrier.
        positions: Vec<u64>,
        /// Whether rows of its source were waiting for it at the barrier
        /// (see [`SourceReader::has_rows_waiting`]).
        behind: bool,
    },
    /// The source failed; nothing follows.
    Failed(DataFusionError),
}

/// What a reader reads: one share of a source's splits for one view.
pub(super) struct ReaderSpec {
    /// The source's catalog id and name.
    pub source_id: TableId,
    pub name: String,
    pub source: Arc<dyn Source>,
    /// Every split's position as checkpointed (one per split of the
    /// source).
    pub positions: Vec<u64>,
    /// The splits it reads.
    pub splits: Vec<u32>,
    /// The columns the view reads (`None`: all).
    pub columns: Option<Vec<bool>>,
}

/// The worker's end of a running reader; dropping it stops the reader.
#[derive(Debug)]
pub(super) struct Reader {
    /// Rows and barriers from the reader.
    pub messages: mpsc::Receiver<SourceMessage>,
    barriers: mpsc::UnboundedSender<u64>,
    task: JoinHandle<()>,
}

impl Reader {
    /// Starts reading `spec` on the current runtime, through the shared
    /// reader of its share in `shared` (see `shared.rs`), at most
    /// `epoch_reads`' limit into each epoch.
    pub fn spawn(
        shared: &Arc<SharedReaders>,
        spec: ReaderSpec,
        epoch_reads: Arc<EpochReads>,
    ) -> Result<Reader> {
        let all = spec.source.splits();
        if spec.positions.len() != all as usize {
            return Err(DataFusionError::Internal(format!(
                "{} split positions for a source of {all} splits",
                spec.positions.len()
            )));
        }
        let key = ShareKey {
            source: spec.source_id,
            splits: spec.splits.clone(),
        };
        let positions = spec
            .splits
            .iter()
            .map(|&s| spec.positions[s as usize])
            .collect();
        let mut feed = Feed {
            shared: shared.clone(),
            key,
            spec,
            positions,
            state: FeedState::Idle,
            rounds: 0,
        };
        feed.join()?;
        let (sender, messages) = mpsc::channel(CHANNEL_BATCHES);
        let (barriers, requests) = mpsc::unbounded_channel();
        let task = tokio::spawn(read(feed, sender, requests, epoch_reads));
        Ok(Reader {
            messages,
            barriers,
            task,
        })
    }

    /// Asks the reader to emit `Barrier(epoch)` after the rows it has sent.
    pub fn inject_barrier(&self, epoch: u64) {
        let _ = self.barriers.send(epoch);
    }
}

impl Drop for Reader {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// One view's share of a source: batches from the shared reader, or
/// from a reader of its own while it catches up with it.
struct Feed {
    shared: Arc<SharedReaders>,
    key: ShareKey,
    spec: ReaderSpec,
    /// The positions of its splits after the last batch it returned.
    positions: Vec<u64>,
    state: FeedState,
    /// How many bounded catch-ups it has read.
    rounds: u32,
}

enum FeedState {
    /// Between a reply and the next request.
    Idle,
    /// Waiting for the hub's answer.
    Joining(oneshot::Receiver<Joined>),
    /// Ahead of the hub on some split and behind on none: waiting for it
    /// to pass before asking again.
    Waiting(Pin<Box<tokio::time::Sleep>>),
    /// Reading the hub's batches; the flag is set while the hub is
    /// behind.
    Subscribed(mpsc::Receiver<SharedBatch>, Arc<AtomicBool>),
    /// Reading on its own: to the hub's positions (`bounded`), then it
    /// asks again; or for good.
    Own {
        reader: Box<dyn SourceReader>,
        bounded: bool,
    },
    /// The source has no more rows.
    Finished,
}

impl Feed {
    /// Whether rows of its source wait for it: it is on its way to the
    /// hub (joining, catching up, or ahead and waiting for the hub to
    /// pass), its hub or its own reader is behind, or batches wait in its
    /// queue. A feed at the end of its source is not.
    fn behind(&self) -> bool {
        match &self.state {
            FeedState::Idle
            | FeedState::Joining(_)
            | FeedState::Waiting(_)
            | FeedState::Own { bounded: true, .. } => true,
            FeedState::Own { reader, .. } => reader.has_rows_waiting(),
            FeedState::Subscribed(queue, hub_behind) => {
                !queue.is_empty() || hub_behind.load(Ordering::SeqCst)
            }
            FeedState::Finished => false,
        }
    }

    /// Asks the hub of its share to take it.
    fn join(&mut self) -> Result<()> {
        let (reply, answer) = oneshot::channel();
        let join = Join {
            positions: self.positions.clone(),
            columns: self.spec.columns.clone(),
            at_head: self.spec.source.starts_at_head() && self.positions.iter().all(|&p| p == 0),
            pause: self.rounds >= 2,
            reply,
        };
        self.shared.join(
            &self.key,
            &self.spec.name,
            &self.spec.source,
            self.read_from(None),
            join,
        )?;
        self.state = FeedState::Joining(answer);
        Ok(())
    }

    /// Opens a reader of its own at its positions, to `until` if given.
    fn read_own(&mut self, until: Option<Vec<u64>>) -> Result<()> {
        let bounded = until.is_some();
        let reader = self.spec.source.open(self.read_from(until.as_deref()))?;
        self.state = FeedState::Own { reader, bounded };
        Ok(())
    }

    /// A read of its splits from where it stands (the others where its
    /// view last checkpointed them: where a paced source stands), to
    /// `until` (one per split it reads) if given.
    fn read_from(&self, until: Option<&[u64]>) -> ReadFrom {
        let mut positions = self.spec.positions.clone();
        set_share(&mut positions, &self.spec.splits, &self.positions);
        let until = until.map(|share| {
            let mut all = positions.clone();
            set_share(&mut all, &self.spec.splits, share);
            all
        });
        ReadFrom {
            positions,
            splits: self.spec.splits.clone(),
            columns: self.spec.columns.clone(),
            max_batch_rows: MAX_BATCH_ROWS,
            until,
        }
    }

    /// Moves toward the shared reader at `hub`: reads on its own to it
    /// where it is behind, or waits where it is only ahead; after
    /// [`MAX_JOIN_ROUNDS`], or over a source that cannot bound a read,
    /// reads on its own for good.
    fn toward(&mut self, hub: &[u64]) -> Result<()> {
        self.rounds += 1;
        if !self.spec.source.reads_bounded() || self.rounds > MAX_JOIN_ROUNDS {
            return self.read_own(None);
        }
        let until: Vec<u64> = self
            .positions
            .iter()
            .zip(hub)
            .map(|(&at, &hub)| at.max(hub))
            .collect();
        if until == self.positions {
            self.state = FeedState::Waiting(Box::pin(tokio::time::sleep(AHEAD_WAIT)));
            return Ok(());
        }
        self.read_own(Some(until))
    }

    /// The next batch, `None` once the source has no more; a batch
    /// without rows when only the positions moved. Cancel safe: every
    /// wait is on something the feed keeps.
    async fn next(&mut self) -> Option<Result<RecordBatch>> {
        loop {
            match &mut self.state {
                FeedState::Idle => {
                    if let Err(e) = self.join() {
                        return Some(Err(e));
                    }
                }
                FeedState::Joining(answer) => {
                    let outcome = match answer.await {
                        // The hub ended as it was asked: ask again.
                        Err(_) => self.join(),
                        Ok(Joined::Subscribed {
                            queue,
                            positions,
                            hub_behind,
                        }) => {
                            self.positions = positions;
                            self.state = FeedState::Subscribed(queue, hub_behind);
                            Ok(())
                        }
                        Ok(Joined::Elsewhere(hub)) => self.toward(&hub),
                        Ok(Joined::Refused) => self.read_own(None),
                    };
                    if let Err(e) = outcome {
                        return Some(Err(e));
                    }
                }
                FeedState::Waiting(wait) => {
                    wait.as_mut().await;
                    self.state = FeedState::Idle;
                }
                FeedState::Subscribed(queue, _) => match queue.recv().await {
                    Some(Ok((rows, positions))) => {
                        let moved = *positions != self.positions;
                        self.positions = positions.to_vec();
                        if rows.num_rows() > 0 || moved {
                            return Some(Ok(rows));
                        }
                    }
                    Some(Err(message)) => {
                        return Some(Err(DataFusionError::Execution(message.to_string())))
                    }
                    // The hub finished: its source has no more rows.
                    None => self.state = FeedState::Finished,
                },
                FeedState::Own { reader, bounded } => match reader.next().await {
                    Some(Ok(rows)) => {
                        let positions = reader.positions();
                        let moved = positions != self.positions;
                        self.positions = positions;
                        if rows.num_rows() > 0 || moved {
                            return Some(Ok(rows));
                        }
                    }
                    Some(Err(e)) => return Some(Err(e)),
                    None if *bounded => {
                        self.positions = reader.positions();
                        self.state = FeedState::Idle;
                    }
                    None => self.state = FeedState::Finished,
                },
                FeedState::Finished => return None,
            }
        }
    }
}

/// The reader's loop: batches as the feed yields them, barriers when
/// asked (first: a barrier never waits behind a source with no rows due).
/// Once it has read `epoch_reads`' limit since its last barrier, it asks
/// for a cut and only waits for the barrier. A finished source goes on
/// answering barriers.
async fn read(
    mut feed: Feed,
    sender: mpsc::Sender<SourceMessage>,
    mut requests: mpsc::UnboundedReceiver<u64>,
    epoch_reads: Arc<EpochReads>,
) {
    let mut finished = false;
    let mut read_this_epoch = 0;
    loop {
        let full = read_this_epoch >= epoch_reads.limit;
        let message = tokio::select! {
            biased;
            request = requests.recv() => {
                let Some(epoch) = request else { return };
                read_this_epoch = 0;
                // A reader at its epoch's limit has rows waiting too.
                let behind = full || feed.behind();
                SourceMessage::Barrier { epoch, positions: feed.positions.clone(), behind }
            }
            batch = feed.next(), if !finished && !full => match batch {
                Some(Ok(rows)) if rows.num_rows() == 0 => SourceMessage::Moved,
                Some(Ok(rows)) => {
                    read_this_epoch += rows.get_array_memory_size();
                    if read_this_epoch >= epoch_reads.limit {
                        epoch_reads.cut_wanted.notify_one();
                    }
                    SourceMessage::Rows(rows)
                }
                Some(Err(e)) => SourceMessage::Failed(e),
                None => {
                    finished = true;
                    continue;
                }
            },
        };
        let failed = matches!(message, SourceMessage::Failed(_));
        if sender.send(message).await.is_err() || failed {
            return;
        }
    }
}
