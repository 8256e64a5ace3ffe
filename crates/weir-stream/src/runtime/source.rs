//! The [`Source`] trait that connectors implement, and where a reader's
//! position goes in a checkpoint.
//!
//! A source is replayable: opened again at a position it reported, it
//! yields exactly the rows that followed that position. The runtime
//! records each reader's position at every barrier, so after a crash a
//! view resumes its sources where its last checkpoint left them, with
//! nothing lost and nothing read twice.

use std::fmt::Debug;

use datafusion::arrow::record_batch::RecordBatch;
use futures::Stream;
use weir_state::TableId;

use crate::Result;

/// Where a reader starts and what it reads.
#[derive(Debug, Clone)]
pub struct ReadFrom {
    /// The position to resume from: what [`SourceReader::position`]
    /// reported at the checkpoint (0: the source's beginning).
    pub position: u64,
    /// The columns the view reads (`None`: all). A reader may fill the
    /// others with any value of their type; nothing reads them.
    pub columns: Option<Vec<bool>>,
    /// The most rows one batch may hold.
    pub max_batch_rows: usize,
}

/// A source as `CREATE SOURCE` configured it: a connector with validated
/// options.
pub trait Source: Debug + Send + Sync + 'static {
    /// Opens a reader at `from.position`.
    fn open(&self, from: ReadFrom) -> Result<Box<dyn SourceReader>>;
}

/// A running reader: a stream of row batches, each in the source's
/// schema. The stream waits while no rows are due (a rate-limited
/// generator, a quiet topic) and ends when a bounded source has no more.
/// Like any stream it must lose nothing when a `next()` is dropped before
/// it completes: the runtime drops it to answer a barrier.
pub trait SourceReader: Stream<Item = Result<RecordBatch>> + Send + Unpin {
    /// The position after the last batch the stream returned.
    fn position(&self) -> u64;
}

/// The key of a view's reader position in the manifest.
pub fn position_key(view: TableId, source: TableId) -> String {
    format!("{view}/{source}")
}
