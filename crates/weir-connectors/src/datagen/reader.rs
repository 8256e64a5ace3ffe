//! `datagen` as a [`Source`] of the stream runtime: a reader that emits the
//! spec's rows as they fall due at its rate (all at once, up to a batch,
//! when it is behind). Its position is the number of rows it has emitted.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use datafusion::arrow::record_batch::RecordBatch;
use futures::Stream;
use tokio::time::{Instant, Sleep};
use weir_stream::runtime::{ReadFrom, Source, SourceReader};

use super::DatagenSpec;

/// How long a reader that is ahead of its rate waits before it looks
/// again: slow sources then emit a few rows per batch, not one.
const PACING_TICK: Duration = Duration::from_millis(10);

/// A `datagen` source's spec, readable by the runtime.
#[derive(Debug, Clone)]
pub struct DatagenSource {
    spec: Arc<DatagenSpec>,
}

impl DatagenSource {
    /// The source that generates `spec`'s rows.
    pub fn new(spec: DatagenSpec) -> Self {
        DatagenSource {
            spec: Arc::new(spec),
        }
    }
}

impl Source for DatagenSource {
    fn open(&self, from: ReadFrom) -> weir_stream::Result<Box<dyn SourceReader>> {
        Ok(Box::new(DatagenReader {
            spec: self.spec.clone(),
            columns: from.columns,
            max_batch_rows: from.max_batch_rows.max(1) as u64,
            end: self.spec.total_rows().unwrap_or(u64::MAX),
            started: Instant::now(),
            first: from.position,
            position: from.position,
            tick: Box::pin(tokio::time::sleep(Duration::ZERO)),
            waiting: false,
        }))
    }
}

/// A running `datagen` reader.
struct DatagenReader {
    spec: Arc<DatagenSpec>,
    columns: Option<Vec<bool>>,
    max_batch_rows: u64,
    /// The row after the last (`u64::MAX`: unbounded).
    end: u64,
    /// When the reader opened, at row `first`: rows fall due from then on.
    started: Instant,
    first: u64,
    /// The next row to emit.
    position: u64,
    /// The wait of a reader ahead of its rate.
    tick: Pin<Box<Sleep>>,
    waiting: bool,
}

impl DatagenReader {
    /// The row before which every row is due now.
    fn due(&self) -> u64 {
        let elapsed = self.started.elapsed().as_secs_f64();
        let due = self.first as f64 + elapsed * self.spec.rows_per_second() as f64;
        (due as u64).min(self.end)
    }
}

impl Stream for DatagenReader {
    type Item = weir_stream::Result<RecordBatch>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        loop {
            if this.position >= this.end {
                return Poll::Ready(None);
            }
            let due = this.due();
            if due > this.position {
                let count = (due - this.position).min(this.max_batch_rows);
                let rows = this.spec.generate_columns(
                    this.position,
                    count as usize,
                    this.columns.as_deref(),
                );
                this.position += count;
                return Poll::Ready(Some(Ok(rows)));
            }
            if !this.waiting {
                this.tick.as_mut().reset(Instant::now() + PACING_TICK);
                this.waiting = true;
            }
            ready!(this.tick.as_mut().poll(cx));
            this.waiting = false;
        }
    }
}

impl SourceReader for DatagenReader {
    fn position(&self) -> u64 {
        self.position
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use datafusion::arrow::datatypes::{DataType, Field, Schema};
    use futures::StreamExt;

    use super::*;

    fn source(options: &[(&str, &str)]) -> DatagenSource {
        let schema = Arc::new(Schema::new(vec![Field::new("n", DataType::Int64, false)]));
        let options: BTreeMap<String, String> = options
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        DatagenSource::new(DatagenSpec::new(schema, &options, 0).expect("valid options"))
    }

    fn from(position: u64) -> ReadFrom {
        ReadFrom {
            position,
            columns: None,
            max_batch_rows: 4,
        }
    }

    #[tokio::test]
    async fn reads_in_batches_to_the_end_and_resumes_at_a_position() {
        let source = source(&[
            ("rows_per_second", "1000000"),
            ("total_rows", "10"),
            ("fields.n.kind", "sequence"),
        ]);
        let mut reader = source.open(from(0)).expect("opens");
        let mut sizes = Vec::new();
        while let Some(batch) = reader.next().await {
            sizes.push(batch.expect("rows").num_rows());
        }
        assert_eq!(sizes.iter().sum::<usize>(), 10);
        assert!(sizes.iter().all(|&n| n <= 4), "{sizes:?}");
        assert_eq!(reader.position(), 10);

        let mut resumed = source.open(from(7)).expect("opens");
        let batch = resumed.next().await.expect("a batch").expect("rows");
        let first = batch
            .column(0)
            .as_any()
            .downcast_ref::<datafusion::arrow::array::Int64Array>()
            .expect("int64")
            .value(0);
        assert_eq!(first, 8, "sequence starts at 1: row 7 is 8");
        let mut rows = batch.num_rows();
        while let Some(batch) = resumed.next().await {
            rows += batch.expect("rows").num_rows();
        }
        assert_eq!(rows, 3, "rows 7, 8 and 9");
        assert_eq!(resumed.position(), 10);
    }

    #[tokio::test(start_paused = true)]
    async fn emits_rows_no_faster_than_its_rate() {
        let source = source(&[("rows_per_second", "100")]);
        let mut reader = source.open(from(0)).expect("opens");
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
        assert_eq!(reader.position(), rows as u64);
    }
}
