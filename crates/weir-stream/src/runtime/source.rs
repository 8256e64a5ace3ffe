//! The [`Source`] trait that connectors implement, and where a reader's
//! position goes in a checkpoint.
//!
//! A source is replayable: opened again at a position it reported, it
//! yields exactly the rows that followed that position. The runtime
//! records each reader's position at every barrier, so after a crash a
//! view resumes its sources where its last checkpoint left them, with
//! nothing lost and nothing read twice.
//!
//! A source is read through a fixed number of splits (a generator's row
//! blocks, later a topic's partitions), each with its own position, and a
//! reader reads any set of them. How many readers share a source
//! (`--workers`) can change between restarts: the splits are dealt out
//! again and every split resumes at its own position.

use std::fmt::Debug;

use datafusion::arrow::record_batch::RecordBatch;
use futures::Stream;
use weir_state::TableId;

use crate::Result;

/// Where a reader starts and what it reads.
#[derive(Debug, Clone)]
pub struct ReadFrom {
    /// The position of every split of the source, to resume from: what
    /// [`SourceReader::positions`] reported at the checkpoint (0: the
    /// split's beginning). Splits other readers read tell a paced source
    /// where the source as a whole stands.
    pub positions: Vec<u64>,
    /// The splits this reader reads.
    pub splits: Vec<u32>,
    /// The columns the view reads (`None`: all). A reader may fill the
    /// others with any value of their type; nothing reads them.
    pub columns: Option<Vec<bool>>,
    /// The most rows one batch may hold.
    pub max_batch_rows: usize,
    /// Where to stop (one position per split of the source): a bounded
    /// read, which ends its stream once every split it reads stands there
    /// and emits the rows before that as fast as it can (a shared reader
    /// emitted them already). Only for a source that
    /// [reads bounded](Source::reads_bounded).
    pub until: Option<Vec<u64>>,
}

/// A source as `CREATE SOURCE` configured it: a connector with validated
/// options.
pub trait Source: Debug + Send + Sync + 'static {
    /// How many splits the source is read through; fixed for the source's
    /// life, whatever the number of readers.
    fn splits(&self) -> u32 {
        1
    }

    /// The position of every split after the first `offset` rows in the
    /// source's own order: how a position checkpointed before sources had
    /// splits carries on.
    fn split_positions(&self, offset: u64) -> Vec<u64> {
        vec![offset]
    }

    /// Opens a reader of `from.splits`, each at its position in
    /// `from.positions`.
    fn open(&self, from: ReadFrom) -> Result<Box<dyn SourceReader>>;

    /// Whether a reader honours [`ReadFrom::until`]. A view that starts
    /// behind the source's shared reader catches up with a bounded read
    /// and then joins it; over a source that cannot bound a read, it
    /// keeps a reader of its own.
    fn reads_bounded(&self) -> bool {
        false
    }

    /// Whether [`ReadFrom::columns`] changes what a reader does (a
    /// generator computes only the columns read): then only views that
    /// read the same columns share a reader.
    fn projects(&self) -> bool {
        false
    }

    /// Whether a split read for the first time (position 0) starts where
    /// the source stands now (Kafka's `latest`) rather than at its
    /// beginning: a view that has read nothing then joins the shared
    /// reader where it is.
    fn starts_at_head(&self) -> bool {
        false
    }
}

/// A running reader: a stream of row batches, each in the source's
/// schema. Positions only grow, split by split: a reader at positions
/// `p` has read every row a reader at positions `q <= p` has. The stream waits while no rows are due (a rate-limited
/// generator, a quiet topic) and ends when a bounded source has no more.
/// A batch without rows (of any schema) says only that the positions
/// moved past offsets that hold no row (a Kafka transaction marker): the
/// runtime takes the positions and passes no batch on.
/// Like any stream it must lose nothing when a `next()` is dropped before
/// it completes: the runtime drops it to answer a barrier.
pub trait SourceReader: Stream<Item = Result<RecordBatch>> + Send + Unpin {
    /// The position of each split it reads after the last batch the stream
    /// returned, in the order of [`ReadFrom::splits`].
    fn positions(&self) -> Vec<u64>;

    /// Whether rows its source already holds for it are still unread: the
    /// reader is behind, not idle, so its view's watermark waits for it
    /// however long it reads nothing (see `event_clock.rs`). `false`, the
    /// default, leaves idleness to the time since it last read a row.
    fn has_rows_waiting(&self) -> bool {
        false
    }
}

/// Deals `splits` out to `readers` readers (split `s` to reader
/// `s % readers`); readers beyond the number of splits get none and are
/// left out.
pub fn deal_splits(splits: u32, readers: usize) -> Vec<Vec<u32>> {
    let readers = readers.clamp(1, splits.max(1) as usize);
    let mut dealt = vec![Vec::new(); readers];
    for split in 0..splits {
        dealt[split as usize % readers].push(split);
    }
    dealt
}

/// Sets the positions of `splits` in `all` (one per split of the source)
/// to `share` (one per split of `splits`).
pub(super) fn set_share(all: &mut [u64], splits: &[u32], share: &[u64]) {
    for (&split, &position) in splits.iter().zip(share) {
        all[split as usize] = position;
    }
}

/// The key of a view's reader position in the manifest.
pub fn position_key(view: TableId, source: TableId) -> String {
    format!("{view}/{source}")
}
