//! Source readers: one task per (view, source) pair that generates the
//! source's rows at its rate and sends them to the stream worker, with
//! barriers in-band.
//!
//! ```text
//!  reader task ──Rows──Rows──Barrier(E, offset)──Rows──▶ worker
//!       ▲                                                                 │
//!       └──────────────── barrier request E (unbounded) ──────────────────┘
//! ```
//!
//! The channel to the worker is bounded: when the worker falls behind
//! (or waits for the store), `send` waits and the reader stops generating,
//! which is the back-pressure that keeps memory bounded. A reader's
//! position is the number of rows it has sent; the offset a barrier
//! carries is checkpointed with the epoch, and after a restart the reader
//! starts again at exactly that row.

use std::sync::Arc;
use std::time::Duration;

use datafusion::arrow::record_batch::RecordBatch;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use weir_connectors::datagen::DatagenSpec;

/// The most rows a reader puts in one batch.
const MAX_BATCH_ROWS: u64 = 8192;

/// How many batches may wait in a reader's channel.
const CHANNEL_BATCHES: usize = 4;

/// How often a reader that is ahead of its rate looks again.
const PACING_TICK: Duration = Duration::from_millis(10);

/// What a reader sends.
#[derive(Debug)]
pub enum SourceMessage {
    /// The next rows.
    Rows(RecordBatch),
    /// Every row before this belongs to `epoch`; `offset` rows were read.
    Barrier {
        /// The epoch the barrier ends.
        epoch: u64,
        /// The reader's position at the barrier.
        offset: u64,
    },
}

/// The worker's end of a running reader; dropping it stops the reader.
#[derive(Debug)]
pub struct Reader {
    /// Rows and barriers from the reader.
    pub messages: mpsc::Receiver<SourceMessage>,
    barriers: mpsc::UnboundedSender<u64>,
    task: JoinHandle<()>,
}

impl Reader {
    /// Starts reading `spec` at row `offset` on the current runtime,
    /// generating only the `columns` it marks (all when `None`).
    pub fn spawn(spec: Arc<DatagenSpec>, columns: Option<Vec<bool>>, offset: u64) -> Reader {
        let (sender, messages) = mpsc::channel(CHANNEL_BATCHES);
        let (barriers, requests) = mpsc::unbounded_channel();
        let task = tokio::spawn(generate(spec, columns, offset, sender, requests));
        Reader {
            messages,
            barriers,
            task,
        }
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

/// The reader's loop: rows as they fall due at the source's rate (all at
/// once, up to a batch, when it is behind), barriers when asked.
async fn generate(
    spec: Arc<DatagenSpec>,
    columns: Option<Vec<bool>>,
    mut offset: u64,
    sender: mpsc::Sender<SourceMessage>,
    mut requests: mpsc::UnboundedReceiver<u64>,
) {
    let started = Instant::now();
    let first = offset;
    let rate = spec.rows_per_second() as f64;
    let end = spec.total_rows().unwrap_or(u64::MAX);
    loop {
        let due = (first + (started.elapsed().as_secs_f64() * rate) as u64).min(end);
        tokio::select! {
            biased;
            request = requests.recv() => {
                let Some(epoch) = request else { return };
                if sender.send(SourceMessage::Barrier { epoch, offset }).await.is_err() {
                    return;
                }
            }
            permit = sender.reserve(), if due > offset => {
                let Ok(permit) = permit else { return };
                let count = (due - offset).min(MAX_BATCH_ROWS);
                let rows = spec.generate_columns(offset, count as usize, columns.as_deref());
                offset += count;
                permit.send(SourceMessage::Rows(rows));
            }
            _ = tokio::time::sleep(PACING_TICK), if due <= offset => {}
        }
    }
}
