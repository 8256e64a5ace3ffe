//! Source readers: tasks that each read a set of one source's splits for
//! one view and send the batches to the stream worker, with barriers
//! in-band.
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

use datafusion::arrow::record_batch::RecordBatch;
use datafusion::error::DataFusionError;
use futures::StreamExt;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::source::{ReadFrom, Source, SourceReader};
use crate::Result;

/// How many batches may wait in a reader's channel.
const CHANNEL_BATCHES: usize = 4;

/// The most rows a reader puts in one batch.
const MAX_BATCH_ROWS: usize = 8192;

/// What a reader sends.
#[derive(Debug)]
pub(super) enum SourceMessage {
    /// The next rows.
    Rows(RecordBatch),
    /// Every row before this belongs to `epoch`.
    Barrier {
        /// The epoch the barrier ends.
        epoch: u64,
        /// The position of each split it reads at the barrier.
        positions: Vec<u64>,
    },
    /// The source failed; nothing follows.
    Failed(DataFusionError),
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
    /// Opens `splits` of `source`, every split at its position in
    /// `positions` (one per split of the source), and reads them on the
    /// current runtime; `columns`: those the view reads (`None`: all).
    pub fn spawn(
        source: &dyn Source,
        positions: &[u64],
        splits: Vec<u32>,
        columns: Option<Vec<bool>>,
    ) -> Result<Reader> {
        let all = source.splits();
        if positions.len() != all as usize {
            return Err(DataFusionError::Internal(format!(
                "{} split positions for a source of {all} splits",
                positions.len()
            )));
        }
        let reader = source.open(ReadFrom {
            positions: positions.to_vec(),
            splits,
            columns,
            max_batch_rows: MAX_BATCH_ROWS,
        })?;
        let (sender, messages) = mpsc::channel(CHANNEL_BATCHES);
        let (barriers, requests) = mpsc::unbounded_channel();
        let task = tokio::spawn(read(reader, sender, requests));
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

/// The reader's loop: batches as the source yields them, barriers when
/// asked (first: a barrier never waits behind a source with no rows due).
/// A finished source goes on answering barriers.
async fn read(
    mut reader: Box<dyn SourceReader>,
    sender: mpsc::Sender<SourceMessage>,
    mut requests: mpsc::UnboundedReceiver<u64>,
) {
    let mut finished = false;
    loop {
        let message = tokio::select! {
            biased;
            request = requests.recv() => {
                let Some(epoch) = request else { return };
                SourceMessage::Barrier { epoch, positions: reader.positions() }
            }
            batch = reader.next(), if !finished => match batch {
                Some(Ok(rows)) => SourceMessage::Rows(rows),
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
