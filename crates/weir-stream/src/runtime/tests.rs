//! The runtime driven without a server: commands in, parts out.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use datafusion::arrow::array::Int64Array;
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::error::DataFusionError;
use futures::Stream;
use tokio::sync::mpsc;
use weir_state::{StateTable, TableId, TableSpec};

use super::*;
use crate::{Dataflow, NodeKind, NodeSpec, StreamPlan};

/// Rows `0..total` of one `bigint` column `n`, through `splits` splits
/// (split `s` holds the values congruent to `s`); fails after `fail_after`
/// rows of a reader if set. Like a topic that grows, only the first
/// `available` values of each split can be read so far.
#[derive(Debug, Clone)]
struct Counter {
    total: u64,
    splits: u32,
    /// Positions after each split's last value that hold none, as a Kafka
    /// partition that ends in a transaction marker: the reader passes
    /// them with a batch without rows.
    gap: u64,
    fail_after: Option<u64>,
    /// How many readers it opened.
    opened: Arc<AtomicUsize>,
    available: Arc<AtomicU64>,
}

impl Counter {
    fn new(total: u64, splits: u32) -> Self {
        Counter {
            total,
            splits,
            gap: 0,
            fail_after: None,
            opened: Arc::default(),
            available: Arc::new(AtomicU64::new(u64::MAX)),
        }
    }
}

/// Reads its splits one after the other.
struct CounterReader {
    /// (split, values read from it)
    splits: Vec<(u32, u64)>,
    /// Each split's number of values.
    lengths: Vec<u64>,
    /// Where each split ends: after its values and the gap, or at the
    /// read's bound.
    ends: Vec<u64>,
    stride: u64,
    read: u64,
    fail_after: Option<u64>,
    max_batch_rows: u64,
    available: Arc<AtomicU64>,
    /// The wait while no value is available.
    idle: Pin<Box<tokio::time::Sleep>>,
}

fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![Field::new("n", DataType::Int64, false)]))
}

impl Source for Counter {
    fn splits(&self) -> u32 {
        self.splits
    }

    fn open(&self, from: ReadFrom) -> crate::Result<Box<dyn SourceReader>> {
        self.opened.fetch_add(1, Ordering::SeqCst);
        let stride = u64::from(self.splits);
        let until = |split: u32| from.until.as_ref().map_or(u64::MAX, |u| u[split as usize]);
        let lengths: Vec<u64> = from
            .splits
            .iter()
            .map(|&split| {
                let length = (self.total + stride - 1 - u64::from(split)) / stride;
                length.min(until(split))
            })
            .collect();
        let ends = from
            .splits
            .iter()
            .zip(&lengths)
            .map(|(&split, length)| (length + self.gap).min(until(split)))
            .collect();
        Ok(Box::new(CounterReader {
            splits: from
                .splits
                .iter()
                .map(|&split| (split, from.positions[split as usize]))
                .collect(),
            lengths,
            ends,
            stride,
            read: 0,
            fail_after: self.fail_after,
            max_batch_rows: from.max_batch_rows as u64,
            available: self.available.clone(),
            idle: Box::pin(tokio::time::sleep(Duration::ZERO)),
        }))
    }

    fn reads_bounded(&self) -> bool {
        true
    }
}

impl Stream for CounterReader {
    type Item = crate::Result<RecordBatch>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        if this.fail_after.is_some_and(|n| this.read >= n) {
            return Poll::Ready(Some(Err(DataFusionError::Execution(
                "the counter broke".into(),
            ))));
        }
        let Some(i) = (0..this.splits.len()).find(|&i| this.splits[i].1 < this.ends[i]) else {
            return Poll::Ready(None);
        };
        if let Some(i) = (0..this.splits.len())
            .find(|&i| this.splits[i].1 >= this.lengths[i] && this.splits[i].1 < this.ends[i])
        {
            // Past the values: the gap moves the position, with no rows
            // (and, like Kafka's reader, no columns).
            this.splits[i].1 = this.ends[i];
            return Poll::Ready(Some(Ok(RecordBatch::new_empty(Arc::new(Schema::empty())))));
        }
        let available = this.available.load(Ordering::SeqCst);
        let Some(i) =
            (i..this.splits.len()).find(|&i| this.splits[i].1 < this.lengths[i].min(available))
        else {
            // Looks again in a millisecond.
            let wake = tokio::time::Instant::now() + Duration::from_millis(1);
            this.idle.as_mut().reset(wake);
            let _ = this.idle.as_mut().poll(cx);
            return Poll::Pending;
        };
        let (split, position) = this.splits[i];
        let end = (position + this.max_batch_rows.min(100))
            .min(this.lengths[i])
            .min(available);
        let values = Int64Array::from_iter_values(
            (position..end).map(|k| (k * this.stride + u64::from(split)) as i64),
        );
        this.splits[i].1 = end;
        this.read += end - position;
        Poll::Ready(Some(
            RecordBatch::try_new(schema(), vec![Arc::new(values)]).map_err(Into::into),
        ))
    }
}

impl SourceReader for CounterReader {
    fn positions(&self) -> Vec<u64> {
        self.splits.iter().map(|&(_, position)| position).collect()
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
    view_of(name, plan, vec![], source)
}

/// A new view `name` (id 10) running `plan` over `source` (id 2, relation
/// `s`), its output keyed by its first column, its operator states
/// `state_ids`.
fn view_of(name: &str, plan: StreamPlan, state_ids: Vec<TableId>, source: Counter) -> ViewRuntime {
    let output = plan.nodes.last().expect("a node").schema.clone();
    let splits = source.splits;
    ViewRuntime {
        name: name.into(),
        id: 10,
        state_ids,
        dataflow: Dataflow::new(&plan).expect("dataflow"),
        plan,
        definition: String::new(),
        reads_views: Default::default(),
        restored: None,
        output: StateTable::new(TableSpec::with_primary_key(output, vec![0])).expect("table"),
        sink: None,
        sources: vec![SourceInput {
            source_id: 2,
            name: "s".into(),
            source: Arc::new(source),
            columns: None,
            positions: vec![0; splits as usize],
        }],
        early: EarlyDeltas::default(),
    }
}

/// The runtime's parts, and the epoch the next barrier ends.
struct Parts {
    receiver: mpsc::Receiver<ViewPart>,
    next_epoch: u64,
}

/// Sends barriers until `done` holds for a part; returns that part.
async fn barriers_until(
    runtime: &Runtime,
    parts: &mut Parts,
    mut done: impl FnMut(&ViewPart) -> bool,
) -> ViewPart {
    for _ in 0..200 {
        let epoch = parts.next_epoch;
        parts.next_epoch += 1;
        assert!(runtime.send(Command::Barrier(epoch)));
        let part = tokio::time::timeout(Duration::from_secs(10), parts.receiver.recv())
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

fn runtime(view_memory_bytes: usize, workers: usize) -> (Runtime, Parts) {
    runtime_reading(view_memory_bytes, workers, EpochReads::DEFAULT_LIMIT)
}

/// [`runtime`] whose readers read at most `epoch_read_limit` bytes into
/// an epoch.
fn runtime_reading(
    view_memory_bytes: usize,
    workers: usize,
    epoch_read_limit: usize,
) -> (Runtime, Parts) {
    let runtime = Runtime::new(RuntimeConfig {
        watermark_idle_timeout: std::time::Duration::from_secs(10),
        view_memory_bytes,
        workers,
        first_epoch: 1,
        cluster: None,
        epoch_read_limit,
    });
    let parts = Parts {
        receiver: runtime.start(2),
        next_epoch: 1,
    };
    (runtime, parts)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_view_holds_exactly_the_rows_before_its_checkpointed_position() {
    // Two readers share the source's four splits.
    let (runtime, mut parts) = runtime(usize::MAX, 2);
    let total = 20_000;
    let source = Counter::new(total, 4);
    assert!(runtime.send(Command::Start(Box::new(view("v", source)), None)));
    let key = position_key(10, 2);
    let last = barriers_until(&runtime, &mut parts, |part| {
        let positions = &part.positions[&key];
        assert_eq!(positions.len(), 4);
        // At every cut the output holds exactly the rows read so far: the
        // first `position` values of each split.
        let mut expected: Vec<i64> = (0..4u64)
            .flat_map(|split| (0..positions[split as usize]).map(move |k| (k * 4 + split) as i64))
            .collect();
        expected.sort_unstable();
        let stored = part.snapshots[&10].stored_rows().expect("rows");
        let column = stored
            .column(0)
            .as_any()
            .downcast_ref::<Int64Array>()
            .expect("n");
        let mut held: Vec<i64> = column.values().to_vec();
        held.sort_unstable();
        assert_eq!(held, expected);
        assert!(part.tables.contains_key(&10));
        positions.iter().sum::<u64>() == total
    })
    .await;
    assert!(last.failures.is_empty());
    assert!(
        last.epoch > 1,
        "the rows took several epochs, so cuts fell between batches"
    );
    let counters = runtime.status().view_counters()["v"];
    assert_eq!(counters.source_rows, total);
    assert_eq!(counters.rows_out, total);
    // A batch read between the server's barrier and the readers' counts
    // as read since it (one epoch more goes through the views, never one
    // less); after one more barrier with the source at its end, none is.
    barriers_until(&runtime, &mut parts, |_| true).await;
    assert!(!runtime.status().has_rows_since_barrier());
    let operators = &runtime.status().view_operators()["v"];
    assert_eq!(operators.last().expect("output").state_rows, vec![20_000]);

    // Dropped, the view leaves the parts and the status.
    assert!(runtime.send(Command::Drop("v".into())));
    let part = barriers_until(&runtime, &mut parts, |_| true).await;
    assert!(part.tables.is_empty() && part.positions.is_empty());
    assert!(runtime.status().view_counters().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_source_stops_its_view_and_the_part_says_why() {
    // One worker: the coordinator reads the source; two: a timely worker.
    for workers in [1, 2] {
        let (runtime, mut parts) = runtime(usize::MAX, workers);
        let source = Counter {
            fail_after: Some(300),
            ..Counter::new(1000, 1)
        };
        assert!(runtime.send(Command::Start(Box::new(view("v", source)), None)));
        let part = barriers_until(&runtime, &mut parts, |part| !part.failures.is_empty()).await;
        assert_eq!(part.failures.len(), 1);
        let failed = &part.failures[0];
        assert_eq!(failed.view, "v");
        assert!(
            matches!(&failed.reason, FailureReason::Source { source, error: Some(_) } if source == "s"),
            "{workers} workers: {:?}",
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
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_at_its_epoch_limit_asks_for_a_cut_and_waits_for_the_barrier() {
    // A limit of one byte: each reader reads one batch (at most 8,192
    // rows) into an epoch.
    const BATCH: u64 = 8192;
    for workers in [1, 2] {
        let (runtime, mut parts) = runtime_reading(usize::MAX, workers, 1);
        let source = Counter::new(10_000_000, 2);
        assert!(runtime.send(Command::Start(Box::new(view("v", source)), None)));
        tokio::time::timeout(Duration::from_secs(10), runtime.status().cut_wanted())
            .await
            .expect("a reader asks for a cut");
        let read = || {
            let counters = runtime.status().view_counters();
            counters.get("v").map_or(0, |c| c.source_rows)
        };
        let readers = workers as u64;
        tokio::time::sleep(Duration::from_millis(200)).await;
        let mut before = read();
        assert!(
            before > 0 && before <= readers * BATCH,
            "{workers} workers: {before} rows read before the first barrier"
        );
        // Each barrier lets every reader read one batch more.
        for epoch in 1..=3u64 {
            barriers_until(&runtime, &mut parts, |_| true).await;
            let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
            while read() == before && tokio::time::Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
            let now = read();
            assert!(
                now > before && now <= (epoch + 1) * readers * BATCH,
                "{workers} workers, after barrier {epoch}: {now} rows read (before it: {before})"
            );
            before = now;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_view_over_its_memory_budget_fails_alone() {
    for workers in [1, 2] {
        let (runtime, mut parts) = runtime(1 << 10, workers);
        let source = Counter::new(100_000, 1);
        assert!(runtime.send(Command::Start(Box::new(view("v", source)), None)));
        let part = barriers_until(&runtime, &mut parts, |part| !part.failures.is_empty()).await;
        let FailureReason::Error(DataFusionError::External(error)) = &part.failures[0].reason
        else {
            panic!("{workers} workers: {:?}", part.failures[0].reason);
        };
        let exceeded = error
            .downcast_ref::<MemoryBudgetExceeded>()
            .expect("a memory budget error");
        assert_eq!(exceeded.view, "v");
        assert!(exceeded.used > exceeded.budget);
    }
}

/// `SELECT n % 10 AS k, count(*) AS c FROM s GROUP BY n % 10` (id 10,
/// group state id 11), reading `source` (id 2).
fn grouped_view(source: Counter) -> ViewRuntime {
    use datafusion::functions_aggregate::count::count_udaf;
    use datafusion::logical_expr::Operator as BinOp;
    use datafusion::physical_expr::aggregate::AggregateExprBuilder;
    use datafusion::physical_expr::expressions::{binary, col, lit};

    let input = schema();
    let key = binary(col("n", &input).unwrap(), BinOp::Modulo, lit(10i64), &input).unwrap();
    let count = AggregateExprBuilder::new(count_udaf(), vec![lit(1i64)])
        .schema(input.clone())
        .alias("c")
        .build()
        .unwrap();
    let output = Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, true),
        Field::new("c", DataType::Int64, false),
    ]));
    let plan = StreamPlan {
        nodes: vec![
            NodeSpec {
                kind: NodeKind::Source {
                    relation: "s".into(),
                    read: None,
                },
                inputs: vec![],
                schema: input,
                append_only: true,
                key: None,
            },
            NodeSpec {
                kind: NodeKind::Aggregate(crate::AggregateSpec {
                    group: vec![(key, "k".into())],
                    aggregates: vec![Arc::new(count)],
                    filters: vec![None],
                    emit_on_window_close: false,
                }),
                inputs: vec![0],
                schema: output,
                append_only: false,
                key: Some(vec![0]),
            },
        ],
    };
    view_of("g", plan, vec![11], source)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_view_over_sources_runs_partitioned_and_cuts_exactly() {
    let (runtime, mut parts) = runtime(usize::MAX, 2);
    let total = 30_000;
    let source = Counter::new(total, 8);
    assert!(runtime.send(Command::Start(Box::new(grouped_view(source)), None)));
    grouped_view_cuts_exactly(&runtime, &mut parts, total).await;
}

/// Checks every part of the grouped view of [`grouped_view`] over
/// `total` values of 8 splits, run by two workers, until it has read
/// them all.
async fn grouped_view_cuts_exactly(runtime: &Runtime, parts: &mut Parts, total: u64) {
    let key = position_key(10, 2);
    let mut group_rows_written = 0;
    let last = barriers_until(runtime, parts, |part| {
        let positions = &part.positions[&key];
        // At every cut the groups count exactly the values read so far.
        let mut expected = [0i64; 10];
        for split in 0..8u64 {
            for k in 0..positions[split as usize] {
                expected[((k * 8 + split) % 10) as usize] += 1;
            }
        }
        let stored = part.snapshots[&10].stored_rows().expect("rows");
        let mut counted = [0i64; 10];
        let ks = stored
            .column(0)
            .as_any()
            .downcast_ref::<Int64Array>()
            .expect("k");
        let cs = stored
            .column(1)
            .as_any()
            .downcast_ref::<Int64Array>()
            .expect("c");
        for row in 0..stored.num_rows() {
            counted[ks.value(row) as usize] = cs.value(row);
        }
        assert_eq!(counted, expected, "epoch {}", part.epoch);
        // Both workers' state deltas reach the part.
        group_rows_written += part.tables[&11]
            .deltas
            .iter()
            .map(|d| d.upserts.as_ref().map_or(0, |u| u.num_rows()))
            .sum::<usize>();
        positions.iter().sum::<u64>() == total
    })
    .await;
    assert!(last.failures.is_empty());
    assert!(group_rows_written >= 10, "{group_rows_written}");
    let operators = &runtime.status().view_operators()["g"];
    let aggregate = &operators[1];
    assert_eq!(aggregate.instances, 2, "{operators:?}");
    assert_eq!(aggregate.stats.rows_in, total);
    assert_eq!(aggregate.state_rows, vec![10]);
    assert_eq!(runtime.status().view_counters()["g"].source_rows, total);
    // Each worker read its own splits and holds its own groups.
    let workers = &runtime.status().view_workers()["g"];
    assert_eq!(workers.len(), 2);
    assert_eq!(workers.iter().map(|w| w.rows_read).sum::<u64>(), total);
    assert_eq!(workers.iter().map(|w| w.state_rows).sum::<u64>(), 10);
    for worker in workers {
        assert!(worker.rows_read > 0 && worker.state_rows > 0, "{workers:?}");
    }
}

/// Plans [`grouped_view`] again, as a cluster's other processes do.
struct GroupedBuilder {
    total: u64,
}

impl ViewBuilder for GroupedBuilder {
    fn build(&self, _definition: &str) -> crate::Result<BuiltView> {
        let view = grouped_view(Counter::new(self.total, 8));
        let source = view.sources[0].source.clone();
        Ok(BuiltView {
            plan: view.plan,
            sources: [("s".to_owned(), source)].into(),
        })
    }
}

fn loopback_address() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().expect("address").to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_view_runs_across_two_processes_of_a_cluster() {
    // Process 1 runs in a thread of this test: the same timely cluster
    // over loopback TCP as two processes, each with one worker.
    let total = 30_000;
    let addresses = vec![loopback_address(), loopback_address()];
    let remote = ClusterConfig {
        process: 1,
        addresses: addresses.clone(),
    };
    let tokio = tokio::runtime::Handle::current();
    let process_1 = std::thread::spawn(move || {
        serve_process(
            1,
            EpochReads::DEFAULT_LIMIT,
            &remote,
            Arc::new(GroupedBuilder { total }),
            tokio,
        )
    });
    let runtime = Runtime::new(RuntimeConfig {
        watermark_idle_timeout: std::time::Duration::from_secs(10),
        view_memory_bytes: usize::MAX,
        workers: 1,
        first_epoch: 1,
        cluster: Some(ClusterConfig {
            process: 0,
            addresses,
        }),
        epoch_read_limit: EpochReads::DEFAULT_LIMIT,
    });
    let mut parts = Parts {
        receiver: runtime.start(2),
        next_epoch: 1,
    };
    let source = Counter::new(total, 8);
    assert!(runtime.send(Command::Start(Box::new(grouped_view(source)), None)));
    grouped_view_cuts_exactly(&runtime, &mut parts, total).await;
    let workers = &runtime.status().view_workers()["g"];
    let processes: Vec<usize> = workers.iter().map(|w| w.process).collect();
    assert_eq!(processes, vec![0, 1]);
    // Dropping the runtime shuts the cluster down: process 1 returns.
    drop(runtime);
    drop(parts);
    let joined = tokio::task::spawn_blocking(move || process_1.join())
        .await
        .expect("join task");
    joined
        .expect("process 1 ran")
        .expect("process 1 shut down cleanly");
}

/// View `name` (id `id`) of [`view`] over `source`.
fn view_with_id(name: &str, id: TableId, source: Counter) -> ViewRuntime {
    let mut view = view(name, source);
    view.id = id;
    view
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn positions_past_offsets_without_rows_reach_the_views_and_end_a_catch_up() {
    for workers in [1, 2] {
        let (runtime, mut parts) = runtime(usize::MAX, workers);
        let mut source = Counter::new(400, 4);
        source.gap = 3;
        let at_end = |id: TableId| {
            move |part: &ViewPart| {
                part.positions
                    .get(&position_key(id, 2))
                    .is_some_and(|p| p == &vec![103; 4])
            }
        };
        let first = view_with_id("a", 10, source.clone());
        assert!(runtime.send(Command::Start(Box::new(first), None)));
        let part = barriers_until(&runtime, &mut parts, at_end(10)).await;
        assert_eq!(
            part.snapshots[&10].stored_rows().expect("rows").num_rows(),
            400
        );
        // The second view catches up to the shared reader's positions,
        // which stand past the gap: its bounded read ends there.
        let second = view_with_id("b", 12, source.clone());
        assert!(runtime.send(Command::Start(Box::new(second), None)));
        let part = barriers_until(&runtime, &mut parts, at_end(12)).await;
        assert_eq!(
            part.snapshots[&12].stored_rows().expect("rows").num_rows(),
            400
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn positions_that_move_without_rows_give_the_open_epoch_work() {
    // A topic whose records were all read but whose last offsets hold
    // transaction markers: the reader passes them with no rows, and the
    // server must cut an epoch to commit the new positions.
    for workers in [1, 2] {
        let (runtime, mut parts) = runtime(usize::MAX, workers);
        let mut source = Counter::new(0, 4);
        source.gap = 3;
        assert!(runtime.send(Command::Start(
            Box::new(view_with_id("a", 10, source)),
            None
        )));
        let waited = std::time::Instant::now();
        while !runtime.status().has_rows_since_barrier() {
            assert!(
                waited.elapsed() < Duration::from_secs(10),
                "positions moved past the gap, yet the epoch has no work"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        barriers_until(&runtime, &mut parts, |part| {
            part.positions.get(&position_key(10, 2)) == Some(&vec![3; 4])
        })
        .await;
        // Once committed, the positions no longer give epochs work.
        barriers_until(&runtime, &mut parts, |_| true).await;
        assert!(!runtime.status().has_rows_since_barrier());
    }
}

/// Sends barriers until views 10 and 12 over `total` values of `splits`
/// splits hold them all, checking at every cut that each holds exactly
/// the values before its positions.
async fn both_views_read_everything(runtime: &Runtime, parts: &mut Parts, total: u64, splits: u64) {
    barriers_until(runtime, parts, |part| {
        let mut done = true;
        for id in [10, 12] {
            let positions = &part.positions[&position_key(id, 2)];
            let mut expected: Vec<i64> = (0..splits)
                .flat_map(|split| {
                    (0..positions[split as usize]).map(move |k| (k * splits + split) as i64)
                })
                .collect();
            expected.sort_unstable();
            let stored = part.snapshots[&id].stored_rows().expect("rows");
            let column = stored
                .column(0)
                .as_any()
                .downcast_ref::<Int64Array>()
                .expect("n");
            let mut held: Vec<i64> = column.values().to_vec();
            held.sort_unstable();
            assert_eq!(held, expected, "view {id} at epoch {}", part.epoch);
            done &= positions.iter().sum::<u64>() == total;
        }
        done
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn views_at_the_same_positions_share_one_reader() {
    // One worker reads the four splits as one share; two, two shares.
    for workers in [1, 2] {
        let (runtime, mut parts) = runtime(usize::MAX, workers);
        let total = 20_000;
        let source = Counter::new(total, 4);
        source.available.store(0, Ordering::SeqCst);
        for (name, id) in [("a", 10), ("b", 12)] {
            let view = view_with_id(name, id, source.clone());
            assert!(runtime.send(Command::Start(Box::new(view), None)));
        }
        barriers_until(&runtime, &mut parts, |_| true).await;
        source.available.store(u64::MAX, Ordering::SeqCst);
        both_views_read_everything(&runtime, &mut parts, total, 4).await;
        // One reader per share, delivering to both views.
        assert_eq!(source.opened.load(Ordering::SeqCst), workers);
        let shared = runtime.status().shared_readers();
        assert_eq!(shared.len(), workers, "{shared:?}");
        for reader in &shared {
            assert_eq!((reader.source.as_str(), reader.subscribers), ("s", 2));
        }
        assert_eq!(shared.iter().map(|r| r.rows_read).sum::<u64>(), total);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_view_created_later_catches_up_and_then_shares_the_reader() {
    for workers in [1, 2] {
        let (runtime, mut parts) = runtime(usize::MAX, workers);
        let total = 20_000;
        let source = Counter::new(total, 4);
        // The first view reads what the source has so far.
        source.available.store(1000, Ordering::SeqCst);
        let first = view_with_id("a", 10, source.clone());
        assert!(runtime.send(Command::Start(Box::new(first), None)));
        barriers_until(&runtime, &mut parts, |part| {
            part.positions[&position_key(10, 2)].iter().sum::<u64>() == 4000
        })
        .await;
        // The second starts at the beginning: it reads to where the shared
        // reader stands on its own, then joins it.
        let second = view_with_id("b", 12, source.clone());
        assert!(runtime.send(Command::Start(Box::new(second), None)));
        barriers_until(&runtime, &mut parts, |part| {
            part.positions
                .get(&position_key(12, 2))
                .is_some_and(|p| p.iter().sum::<u64>() == 4000)
        })
        .await;
        source.available.store(u64::MAX, Ordering::SeqCst);
        both_views_read_everything(&runtime, &mut parts, total, 4).await;
        // Per share: the shared reader and the second view's catch-up.
        assert_eq!(source.opened.load(Ordering::SeqCst), 2 * workers);
        let shared = runtime.status().shared_readers();
        assert_eq!(shared.len(), workers, "{shared:?}");
        assert!(shared.iter().all(|r| r.subscribers == 2), "{shared:?}");
        // The shared readers read every value once.
        assert_eq!(shared.iter().map(|r| r.rows_read).sum::<u64>(), total);
    }
}
