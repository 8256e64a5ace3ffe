//! Sources whose rows are a pure function of their index (`datagen`,
//! `nexmark`), read by the stream runtime as a [`Source`] through
//! [`SPLITS`] splits: split `s` holds every [`SPLITS`]-th block of
//! [`BLOCK_ROWS`] rows (a generator's indexes: `nexmark`'s are events, of
//! which a source emits those of its own kind), starting with block `s`,
//! and its position is the number of its indexes read. A reader emits the
//! rows of its splits in the source's order, as they fall due at the
//! source's rate (all at once, up to a batch, when it is behind): one
//! reader of every split emits exactly the rows, and batches, of a source
//! read as one sequence, and several readers share the rate, each emitting
//! its blocks' rows when they fall due.
//!
//! Readers agree on which rows are due through one [`Pace`] per source
//! while any of them reads it: a row of the source and when it fell due,
//! set when the first of them opened and moved up by any that opens
//! further on. A reader opened later (another worker's shared reader,
//! after its views' catch-up at a restart) so emits the rows due by the
//! source's clock at once, not from its own opening on; with a pace of its
//! own it would trail the others by the time it opened late, and the
//! watermark, which follows the others, would pass its rows.

use std::collections::HashMap;
use std::fmt::Debug;
use std::future::Future;
use std::ops::Range;
use std::pin::Pin;
use std::sync::{Arc, LazyLock, Mutex, Weak};
use std::task::{ready, Context, Poll};
use std::time::Duration;

use datafusion::arrow::record_batch::RecordBatch;
use datafusion::error::DataFusionError;
use futures::Stream;
use tokio::time::{Instant, Sleep};
use weir_stream::runtime::{ReadFrom, Source, SourceReader};

/// Rows as a pure function of their index: what a [`PacedSource`] reads.
pub trait RowGenerator: Debug + Send + Sync + 'static {
    /// The rows of indexes `indexes` (within [`end`](Self::end)) as one
    /// batch, in order, with only the columns `read` marks computed (the
    /// others hold any value of their type). An index may yield no row.
    fn generate(&self, indexes: Range<u64>, read: Option<&[bool]>) -> RecordBatch;

    /// How many indexes fall due per second.
    fn per_second(&self) -> u64;

    /// The index after the last, if the source ends.
    fn end(&self) -> Option<u64>;
}

/// The least a reader that is ahead of its rate waits before it looks
/// again: slow sources then emit a few rows per batch, not one.
const PACING_TICK: Duration = Duration::from_millis(10);

/// How many splits a generated source is read through.
pub const SPLITS: u32 = 256;

/// Rows per block; a split holds every [`SPLITS`]-th block.
pub const BLOCK_ROWS: u64 = 8192;

/// The index, in the source's order, of row `position` of `split`.
fn row_of(split: u32, position: u64) -> u64 {
    let block = (position / BLOCK_ROWS) * u64::from(SPLITS) + u64::from(split);
    block * BLOCK_ROWS + position % BLOCK_ROWS
}

/// The rows, as ranges in the source's order, of the first `position`
/// rows of `split`: what a view that read the split to `position` has seen.
pub fn split_rows(split: u32, position: u64) -> impl Iterator<Item = std::ops::Range<u64>> {
    (0..position.div_ceil(BLOCK_ROWS)).map(move |block| {
        let start = row_of(split, block * BLOCK_ROWS);
        start..start + (position - block * BLOCK_ROWS).min(BLOCK_ROWS)
    })
}

/// The clock of a source's readers: row `anchor.1` fell due at
/// `anchor.0`, and the rows after it fall due at the source's rate.
#[derive(Debug)]
struct Pace {
    anchor: Mutex<(Instant, u64)>,
}

/// The row before which every row is due now, at `per_second` from
/// `anchor`.
fn due_from((since, row): (Instant, u64), per_second: u64) -> u64 {
    (row as f64 + since.elapsed().as_secs_f64() * per_second as f64) as u64
}

impl Pace {
    /// The row before which every row is due now, at `per_second`.
    fn due(&self, per_second: u64) -> u64 {
        due_from(*self.anchor.lock().expect("pace lock"), per_second)
    }

    /// When `row` falls due, at `per_second`.
    fn due_at(&self, row: u64, per_second: u64) -> Instant {
        let (since, anchor) = *self.anchor.lock().expect("pace lock");
        let wait = row.saturating_sub(anchor) as f64 / per_second as f64;
        since + Duration::from_secs_f64(wait.min(1e9))
    }

    /// A reader opens with the source at row `first`: rows up to it were
    /// emitted before, so if they are not all due yet, they are now.
    fn open_at(&self, first: u64, per_second: u64) {
        let mut anchor = self.anchor.lock().expect("pace lock");
        if due_from(*anchor, per_second) < first {
            *anchor = (Instant::now(), first);
        }
    }
}

/// Which readers share a [`Pace`].
#[derive(Debug)]
enum PaceScope {
    /// Those of one catalog source (its id and creation time) in this
    /// process, whichever [`PacedSource`] value opened them: the server
    /// builds one per view.
    Source(u64, i64),
    /// Those opened from this value.
    Value(Mutex<Weak<Pace>>),
}

/// A catalog source: its id and creation time.
type SourceKey = (u64, i64);

/// The paces of catalog sources being read in this process.
static SOURCE_PACES: LazyLock<Mutex<HashMap<SourceKey, Weak<Pace>>>> =
    LazyLock::new(Mutex::default);

/// The pace in `slot` while a reader holds it, or a new one.
fn pace_in(slot: &mut Weak<Pace>, first: u64) -> Arc<Pace> {
    slot.upgrade().unwrap_or_else(|| {
        let pace = Arc::new(Pace {
            anchor: Mutex::new((Instant::now(), first)),
        });
        *slot = Arc::downgrade(&pace);
        pace
    })
}

/// A generator's rows, readable by the runtime.
#[derive(Debug)]
pub struct PacedSource<G> {
    generator: Arc<G>,
    pace: PaceScope,
}

impl<G: RowGenerator> PacedSource<G> {
    /// The source that emits `generator`'s rows, its readers paced
    /// together.
    pub fn new(generator: G) -> Self {
        PacedSource {
            generator: Arc::new(generator),
            pace: PaceScope::Value(Mutex::default()),
        }
    }

    /// The same, paced with every reader in this process of catalog
    /// source `id` created at `created_micros`.
    pub fn of_source(generator: G, id: u64, created_micros: i64) -> Self {
        PacedSource {
            generator: Arc::new(generator),
            pace: PaceScope::Source(id, created_micros),
        }
    }

    /// The pace its readers share, for a reader opening with the source
    /// at row `first`.
    fn pace(&self, first: u64) -> Arc<Pace> {
        let pace = match &self.pace {
            PaceScope::Value(slot) => pace_in(&mut slot.lock().expect("pace lock"), first),
            PaceScope::Source(id, created) => {
                let mut paces = SOURCE_PACES.lock().expect("paces lock");
                paces.retain(|_, pace| pace.strong_count() > 0);
                pace_in(paces.entry((*id, *created)).or_default(), first)
            }
        };
        pace.open_at(first, self.generator.per_second());
        pace
    }
}

impl<G: RowGenerator> Source for PacedSource<G> {
    fn splits(&self) -> u32 {
        SPLITS
    }

    fn split_positions(&self, offset: u64) -> Vec<u64> {
        let round = BLOCK_ROWS * u64::from(SPLITS);
        let (rounds, rest) = (offset / round, offset % round);
        (0..u64::from(SPLITS))
            .map(|split| {
                rounds * BLOCK_ROWS + rest.saturating_sub(split * BLOCK_ROWS).min(BLOCK_ROWS)
            })
            .collect()
    }

    fn open(&self, from: ReadFrom) -> weir_stream::Result<Box<dyn SourceReader>> {
        if from.positions.len() != SPLITS as usize
            || from.splits.iter().any(|&split| split >= SPLITS)
        {
            return Err(DataFusionError::Internal(format!(
                "a generated source has {SPLITS} splits, not {}",
                from.positions.len()
            )));
        }
        // The source as a whole stands at its earliest unread row: rows
        // fall due from there, whichever reader emits them.
        let first = (0..SPLITS)
            .map(|split| row_of(split, from.positions[split as usize]))
            .min()
            .unwrap_or(0);
        let bound = |split: u32| match &from.until {
            Some(until) => until.get(split as usize).copied().unwrap_or(0),
            None => u64::MAX,
        };
        Ok(Box::new(PacedReader {
            generator: self.generator.clone(),
            columns: from.columns,
            max_batch_rows: from.max_batch_rows.max(1) as u64,
            end: self.generator.end().unwrap_or(u64::MAX),
            splits: from
                .splits
                .iter()
                .map(|&split| Split {
                    split,
                    position: from.positions[split as usize],
                    until: bound(split),
                })
                .collect(),
            bounded: from.until.is_some(),
            pace: self.pace(first),
            tick: Box::pin(tokio::time::sleep(Duration::ZERO)),
            waiting: false,
        }))
    }

    fn reads_bounded(&self) -> bool {
        true
    }

    fn projects(&self) -> bool {
        true
    }
}

/// A split a [`PacedReader`] reads.
struct Split {
    split: u32,
    /// Its rows read.
    position: u64,
    /// Where the reader stops reading it (`u64::MAX`: never).
    until: u64,
}

/// A running reader of a [`PacedSource`].
struct PacedReader<G> {
    generator: Arc<G>,
    columns: Option<Vec<bool>>,
    max_batch_rows: u64,
    /// The row after the last (`u64::MAX`: unbounded).
    end: u64,
    /// The splits it reads.
    splits: Vec<Split>,
    /// Whether it reads to bounds: rows before them are due at once.
    bounded: bool,
    /// When rows fall due, shared with the source's other readers.
    pace: Arc<Pace>,
    /// The wait of a reader ahead of its rate.
    tick: Pin<Box<Sleep>>,
    waiting: bool,
}

impl<G: RowGenerator> PacedReader<G> {
    /// The row before which every row is due now.
    fn due(&self) -> u64 {
        if self.bounded {
            return self.end;
        }
        self.pace.due(self.generator.per_second()).min(self.end)
    }

    /// Its split whose next row comes first (of those not at their
    /// bound), and that row.
    fn next_row(&self) -> Option<(usize, u64)> {
        self.splits
            .iter()
            .enumerate()
            .filter(|(_, s)| s.position < s.until)
            .map(|(i, s)| (i, row_of(s.split, s.position)))
            .min_by_key(|&(_, row)| row)
    }
}

impl<G: RowGenerator> Stream for PacedReader<G> {
    type Item = weir_stream::Result<RecordBatch>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        loop {
            let Some((i, row)) = this.next_row().filter(|&(_, row)| row < this.end) else {
                return Poll::Ready(None);
            };
            let due = this.due();
            if due > row {
                let block_end = (row / BLOCK_ROWS + 1) * BLOCK_ROWS;
                let split = &mut this.splits[i];
                let count = (due.min(block_end) - row)
                    .min(this.max_batch_rows)
                    .min(split.until - split.position);
                split.position += count;
                let rows = this
                    .generator
                    .generate(row..row + count, this.columns.as_deref());
                if rows.num_rows() > 0 {
                    return Poll::Ready(Some(Ok(rows)));
                }
                continue;
            }
            if !this.waiting {
                // Wake when the row falls due, but not sooner than a tick:
                // a reader whose next block is far off sleeps until then.
                let due_at = this.pace.due_at(row + 1, this.generator.per_second());
                this.tick
                    .as_mut()
                    .reset(due_at.max(Instant::now() + PACING_TICK));
                this.waiting = true;
            }
            ready!(this.tick.as_mut().poll(cx));
            this.waiting = false;
        }
    }
}

impl<G: RowGenerator> SourceReader for PacedReader<G> {
    fn positions(&self) -> Vec<u64> {
        self.splits.iter().map(|s| s.position).collect()
    }

    fn has_rows_waiting(&self) -> bool {
        // `due` is within the source's end.
        self.next_row().is_some_and(|(_, row)| row < self.due())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use datafusion::arrow::array::Int64Array;
    use datafusion::arrow::datatypes::{DataType, Field, Schema};
    use futures::StreamExt;

    use super::*;
    use crate::datagen::{DatagenSource, DatagenSpec};

    fn source(options: &[(&str, &str)]) -> DatagenSource {
        let schema = Arc::new(Schema::new(vec![Field::new("n", DataType::Int64, false)]));
        let options: BTreeMap<String, String> = options
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        DatagenSource::new(DatagenSpec::new(schema, &options, 0).expect("valid options"))
    }

    /// Every split, at the positions after the source's first `offset` rows.
    fn from(source: &DatagenSource, offset: u64, max_batch_rows: usize) -> ReadFrom {
        ReadFrom {
            positions: source.split_positions(offset),
            splits: (0..SPLITS).collect(),
            columns: None,
            max_batch_rows,
            until: None,
        }
    }

    /// A reader of `share`'s splits from the source's start.
    fn open_share(source: &DatagenSource, share: &[u32]) -> Box<dyn SourceReader> {
        source
            .open(ReadFrom {
                positions: vec![0; SPLITS as usize],
                splits: share.to_vec(),
                columns: None,
                max_batch_rows: 8192,
                until: None,
            })
            .expect("opens")
    }

    /// Reads to the end; returns the sequence values in order.
    async fn read_all(reader: &mut Box<dyn SourceReader>) -> Vec<i64> {
        let mut values = Vec::new();
        while let Some(batch) = reader.next().await {
            let batch = batch.expect("rows");
            let column = batch.column(0).as_any().downcast_ref::<Int64Array>();
            values.extend(column.expect("int64").values().iter().copied());
        }
        values
    }

    fn sequence(total: u64) -> DatagenSource {
        source(&[
            ("rows_per_second", "1000000000"),
            ("total_rows", &total.to_string()),
            ("fields.n.kind", "sequence"),
        ])
    }

    #[tokio::test]
    async fn reads_in_batches_to_the_end_and_resumes_at_a_position() {
        let source = sequence(10);
        let mut reader = source.open(from(&source, 0, 4)).expect("opens");
        let mut sizes = Vec::new();
        while let Some(batch) = reader.next().await {
            sizes.push(batch.expect("rows").num_rows());
        }
        assert_eq!(sizes.iter().sum::<usize>(), 10);
        assert!(sizes.iter().all(|&n| n <= 4), "{sizes:?}");
        assert_eq!(reader.positions().iter().sum::<u64>(), 10);

        // Sequences start at 1: row 7 is 8.
        let mut resumed = source.open(from(&source, 7, 4)).expect("opens");
        assert_eq!(read_all(&mut resumed).await, vec![8, 9, 10]);
        assert_eq!(resumed.positions(), source.split_positions(10));
    }

    #[tokio::test]
    async fn a_bounded_read_stops_at_its_bound_without_waiting_for_the_rate() {
        // One row a second: unbounded, the rows after the first would take
        // minutes; a shared reader emitted them already.
        let source = source(&[("rows_per_second", "1"), ("fields.n.kind", "sequence")]);
        let offset = 3 * BLOCK_ROWS + 5;
        let mut from = from(&source, 3, 1000);
        from.until = Some(source.split_positions(offset));
        let mut reader = source.open(from).expect("opens");
        let started = std::time::Instant::now();
        let values = read_all(&mut reader).await;
        assert!(started.elapsed() < Duration::from_secs(30));
        let want: Vec<i64> = (4..=offset as i64).collect();
        assert_eq!(values, want);
        assert_eq!(reader.positions(), source.split_positions(offset));
    }

    #[test]
    fn an_offset_becomes_the_positions_of_the_rows_before_it() {
        let source = sequence(1);
        let round = BLOCK_ROWS * u64::from(SPLITS);
        for offset in [
            0,
            5,
            BLOCK_ROWS,
            BLOCK_ROWS + 3,
            round,
            3 * round + 2 * BLOCK_ROWS + 1,
        ] {
            let positions = source.split_positions(offset);
            assert_eq!(positions.len(), SPLITS as usize);
            assert_eq!(positions.iter().sum::<u64>(), offset, "offset {offset}");
            // Exactly the rows before `offset` are read: every split's next
            // row is at or after it, and the split holding row `offset`
            // stands at it.
            let next: Vec<u64> = (0..SPLITS)
                .map(|split| row_of(split, positions[split as usize]))
                .collect();
            assert!(next.iter().all(|&row| row >= offset), "offset {offset}");
            assert!(next.contains(&offset), "offset {offset}");
            let mut rows: Vec<u64> = (0..SPLITS)
                .flat_map(|split| split_rows(split, positions[split as usize]))
                .flatten()
                .collect();
            rows.sort_unstable();
            assert_eq!(rows, (0..offset).collect::<Vec<_>>(), "offset {offset}");
        }
    }

    #[tokio::test]
    async fn readers_of_disjoint_splits_emit_the_rows_of_one_reader_between_them() {
        let total = 20 * BLOCK_ROWS + 123;
        let source = sequence(total);
        let mut one = source.open(from(&source, 0, 8192)).expect("opens");
        let whole = read_all(&mut one).await;
        assert_eq!(whole, (1..=total as i64).collect::<Vec<_>>());

        // Three readers each read to a point, then four go on from the
        // positions they reached: every row exactly once.
        let mut positions = vec![0; SPLITS as usize];
        let mut seen = Vec::new();
        for (readers, batches) in [(3, Some(2)), (4, None)] {
            for share in weir_stream::runtime::deal_splits(SPLITS, readers) {
                let mut reader = source
                    .open(ReadFrom {
                        positions: positions.clone(),
                        splits: share.clone(),
                        columns: None,
                        max_batch_rows: 5000,
                        until: None,
                    })
                    .expect("opens");
                let mut values = Vec::new();
                let mut read = 0;
                while batches.is_none_or(|n| read < n) {
                    let Some(batch) = reader.next().await else {
                        break;
                    };
                    let batch = batch.expect("rows");
                    let column = batch.column(0).as_any().downcast_ref::<Int64Array>();
                    values.extend(column.expect("int64").values().iter().copied());
                    read += 1;
                }
                assert!(values.is_sorted(), "a reader emits in the source's order");
                seen.extend(values);
                for (&split, position) in share.iter().zip(reader.positions()) {
                    positions[split as usize] = position;
                }
            }
        }
        seen.sort_unstable();
        assert_eq!(seen, whole);
    }

    #[tokio::test(start_paused = true)]
    async fn emits_rows_no_faster_than_its_rate() {
        let source = source(&[("rows_per_second", "100")]);
        let mut reader = source.open(from(&source, 0, 8192)).expect("opens");
        let started = Instant::now();
        let mut rows = 0;
        while rows < 50 {
            rows += reader
                .next()
                .await
                .expect("unbounded")
                .expect("rows")
                .num_rows();
        }
        // 50 rows at 100 per second take half a second of (paused) time.
        assert!(
            started.elapsed() >= Duration::from_millis(490),
            "{:?}",
            started.elapsed()
        );
        assert_eq!(reader.positions().iter().sum::<u64>(), rows as u64);
    }

    #[tokio::test(start_paused = true)]
    async fn has_rows_waiting_while_it_is_behind_its_rate() {
        let source = source(&[("rows_per_second", "1000")]);
        let mut reader = source.open(from(&source, 0, 100)).expect("opens");
        assert!(!reader.has_rows_waiting(), "nothing is due yet");
        tokio::time::advance(Duration::from_secs(1)).await;
        // 1,000 rows are due, read 100 a batch.
        assert!(reader.has_rows_waiting());
        let mut rows = 0;
        while rows < 900 {
            rows += reader.next().await.expect("rows").expect("rows").num_rows();
            assert!(reader.has_rows_waiting(), "{rows} of 1,000 read");
        }
        rows += reader.next().await.expect("rows").expect("rows").num_rows();
        assert!(rows >= 1000);
        assert!(!reader.has_rows_waiting(), "caught up after {rows} rows");
    }

    #[tokio::test(start_paused = true)]
    async fn a_reader_opened_later_keeps_the_pace_of_those_reading() {
        let source = source(&[("rows_per_second", "1000")]);
        let shares = weir_stream::runtime::deal_splits(SPLITS, 2);
        let first = open_share(&source, &shares[0]);
        tokio::time::advance(Duration::from_secs(10)).await;
        // 10,000 rows are due by the first reader's clock: block 0
        // (split 0, the first reader's) and part of block 1 (split 1).
        let mut second = open_share(&source, &shares[1]);
        assert!(second.has_rows_waiting());
        let batch = second.next().await.expect("rows").expect("rows");
        assert_eq!(batch.num_rows() as u64, 10_000 - BLOCK_ROWS);
        // Once every reader is gone, the next one starts a pace of its own
        // at its positions.
        drop((first, second));
        tokio::time::advance(Duration::from_secs(10)).await;
        let third = open_share(&source, &shares[1]);
        assert!(!third.has_rows_waiting());
    }

    #[tokio::test(start_paused = true)]
    async fn readers_sharing_a_source_share_its_rate() {
        // 20,000 rows per second: block 0 (split 0) falls due in the first
        // 0.41 s, block 1 (split 1) in the next.
        let source = source(&[("rows_per_second", "20000")]);
        let shares = weir_stream::runtime::deal_splits(SPLITS, 2);
        let (mut even, mut odd) = (
            open_share(&source, &shares[0]),
            open_share(&source, &shares[1]),
        );
        let started = Instant::now();
        let mut rows = 0;
        while rows < BLOCK_ROWS {
            rows += even.next().await.expect("rows").expect("rows").num_rows() as u64;
        }
        let first_block = started.elapsed();
        let batch = odd.next().await.expect("rows").expect("rows");
        let column = batch.column(0).as_any().downcast_ref::<Int64Array>();
        assert_eq!(column.expect("int64").value(0), {
            // Random values: compare with the same row read as one sequence.
            let whole = source.generator.generate(BLOCK_ROWS, 1);
            whole
                .column(0)
                .as_any()
                .downcast_ref::<Int64Array>()
                .expect("int64")
                .value(0)
        });
        assert!(
            first_block >= Duration::from_millis(400),
            "block 0 at the source's rate: {first_block:?}"
        );
        assert!(
            started.elapsed() >= Duration::from_millis(409),
            "block 1's first row falls due only after block 0's: {:?}",
            started.elapsed()
        );
    }
}
