//! The runtime driven without a server: commands in, parts out.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use datafusion::arrow::array::Int64Array;
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::error::DataFusionError;
use futures::Stream;
use tokio::sync::mpsc;
use weir_state::{StateTable, TableSpec};

use super::*;
use crate::{Dataflow, NodeKind, NodeSpec, StreamPlan};

/// Rows `0..total` of one `bigint` column `n`; fails after `fail_after`
/// rows if set.
#[derive(Debug)]
struct Counter {
    total: u64,
    fail_after: Option<u64>,
}

struct CounterReader {
    position: u64,
    total: u64,
    fail_after: Option<u64>,
    max_batch_rows: u64,
}

fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![Field::new("n", DataType::Int64, false)]))
}

impl Source for Counter {
    fn open(&self, from: ReadFrom) -> crate::Result<Box<dyn SourceReader>> {
        Ok(Box::new(CounterReader {
            position: from.position,
            total: self.total,
            fail_after: self.fail_after,
            max_batch_rows: from.max_batch_rows as u64,
        }))
    }
}

impl Stream for CounterReader {
    type Item = crate::Result<RecordBatch>;

    fn poll_next(mut self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if self.fail_after.is_some_and(|n| self.position >= n) {
            return Poll::Ready(Some(Err(DataFusionError::Execution(
                "the counter broke".into(),
            ))));
        }
        if self.position >= self.total {
            return Poll::Ready(None);
        }
        let end = (self.position + self.max_batch_rows.min(100)).min(self.total);
        let values = Int64Array::from_iter_values(self.position as i64..end as i64);
        self.position = end;
        Poll::Ready(Some(
            RecordBatch::try_new(schema(), vec![Arc::new(values)]).map_err(Into::into),
        ))
    }
}

impl SourceReader for CounterReader {
    fn position(&self) -> u64 {
        self.position
    }
}

/// A view `SELECT n FROM s` keyed by `n` (id 10), reading `source` (id 2).
fn view(name: &str, source: Counter) -> ViewRuntime {
    let plan = StreamPlan {
        nodes: vec![NodeSpec {
            kind: NodeKind::Source {
                relation: "s".into(),
                read: None,
            },
            inputs: vec![],
            schema: schema(),
            append_only: true,
            key: None,
        }],
    };
    ViewRuntime {
        name: name.into(),
        id: 10,
        state_ids: vec![],
        dataflow: Dataflow::new(&plan).expect("dataflow"),
        output: StateTable::new(TableSpec::with_primary_key(schema(), vec![0])).expect("table"),
        sources: vec![SourceInput {
            source_id: 2,
            name: "s".into(),
            source: Arc::new(source),
            columns: None,
            position: 0,
        }],
        early: EarlyDeltas::default(),
    }
}

/// Sends barriers until `done` holds for a part; returns that part.
async fn barriers_until(
    runtime: &Runtime,
    parts: &mut mpsc::Receiver<ViewPart>,
    done: impl Fn(&ViewPart) -> bool,
) -> ViewPart {
    for epoch in 1..=200 {
        assert!(runtime.send(Command::Barrier(epoch)));
        let part = tokio::time::timeout(Duration::from_secs(10), parts.recv())
            .await
            .expect("a part within 10 s")
            .expect("the worker runs");
        assert_eq!(part.epoch, epoch);
        if done(&part) {
            return part;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("no part satisfied the condition in 200 epochs");
}

fn runtime(view_memory_bytes: usize) -> (Runtime, mpsc::Receiver<ViewPart>) {
    let runtime = Runtime::new(RuntimeConfig { view_memory_bytes });
    let parts = runtime.start(2);
    (runtime, parts)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_view_holds_exactly_the_rows_before_its_checkpointed_position() {
    let (runtime, mut parts) = runtime(usize::MAX);
    let total = 1000;
    let source = Counter {
        total,
        fail_after: None,
    };
    assert!(runtime.send(Command::Start(Box::new(view("v", source)), None)));
    let key = position_key(10, 2);
    let last = barriers_until(&runtime, &mut parts, |part| {
        let position = part.positions[&key];
        // At every cut the output holds exactly the rows read so far.
        assert_eq!(part.snapshots[&10].num_rows() as u64, position);
        assert!(part.tables.contains_key(&10));
        position == total
    })
    .await;
    assert!(last.failures.is_empty());
    let counters = runtime.status().view_counters()["v"];
    assert_eq!(counters.source_rows, total);
    assert_eq!(counters.rows_out, total);
    assert!(!runtime.status().has_rows_since_barrier());
    let operators = &runtime.status().view_operators()["v"];
    assert_eq!(operators.last().expect("output").state_rows, vec![1000]);

    // Dropped, the view leaves the parts and the status.
    assert!(runtime.send(Command::Drop("v".into())));
    let part = barriers_until(&runtime, &mut parts, |_| true).await;
    assert!(part.tables.is_empty() && part.positions.is_empty());
    assert!(runtime.status().view_counters().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_source_stops_its_view_and_the_part_says_why() {
    let (runtime, mut parts) = runtime(usize::MAX);
    let source = Counter {
        total: 1000,
        fail_after: Some(300),
    };
    assert!(runtime.send(Command::Start(Box::new(view("v", source)), None)));
    let part = barriers_until(&runtime, &mut parts, |part| !part.failures.is_empty()).await;
    assert_eq!(part.failures.len(), 1);
    let failed = &part.failures[0];
    assert_eq!(failed.view, "v");
    assert!(
        matches!(&failed.reason, FailureReason::Source { source, error: Some(_) } if source == "s"),
        "{:?}",
        failed.reason
    );
    assert!(failed.reason.to_string().contains("the counter broke"));
    assert!(
        !part.tables.contains_key(&10),
        "a failed view's state is not cut"
    );
    // The failure is reported once; the worker goes on.
    let next = barriers_until(&runtime, &mut parts, |_| true).await;
    assert!(next.failures.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_view_over_its_memory_budget_fails_alone() {
    let (runtime, mut parts) = runtime(1 << 10);
    let source = Counter {
        total: 100_000,
        fail_after: None,
    };
    assert!(runtime.send(Command::Start(Box::new(view("v", source)), None)));
    let part = barriers_until(&runtime, &mut parts, |part| !part.failures.is_empty()).await;
    let FailureReason::Error(DataFusionError::External(error)) = &part.failures[0].reason else {
        panic!("{:?}", part.failures[0].reason);
    };
    let exceeded = error
        .downcast_ref::<MemoryBudgetExceeded>()
        .expect("a memory budget error");
    assert_eq!(exceeded.view, "v");
    assert!(exceeded.used > exceeded.budget);
}
