//! The timely-dataflow spike of issue 9: can timely carry Arrow batches
//! through an exchange into a columnar group-by, with epoch checkpoints
//! cut from the frontier, fast enough?
//!
//! `cargo run --release -p weir-stream --example timely_spike -- <workers> <rows>`
//! runs one process; `... -- <workers> <rows> <process> <processes>` runs
//! process `<process>` of a cluster on loopback ports from 2101, whose
//! exchanges carry the batches as Arrow IPC.
//!
//! Each worker generates its share of bid-shaped rows (auction in
//! 1..10,000, price), in batches of 8,192, at timestamps `epoch << 20 |
//! tick`: one tick per batch, and a new epoch every second. A batch is
//! exchanged by a hash of the auction with the runtime's `KeyRouter` (its
//! top 8 bits pick one of 256 virtual partitions, each owned by one
//! worker; one Arrow `take`, a slice per worker), then
//! aggregated (`count(*)`, `sum(price)` by auction) by the columnar
//! `GroupedAggregate`. The aggregate processes rows of the epoch its input
//! frontier is in and holds rows of later epochs; when the frontier passes
//! an epoch it flushes the epoch's output and takes its state delta (the
//! checkpoint cut). Sources are paced by a probe: a worker sends a batch
//! only while at most `LAG` of its ticks are not yet done downstream.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use datafusion::arrow::array::{ArrayRef, Int64Array, RecordBatch};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::functions_aggregate::count::count_udaf;
use datafusion::functions_aggregate::sum::sum_udaf;
use datafusion::physical_expr::aggregate::AggregateExprBuilder;
use datafusion::physical_expr::expressions::{col, lit};
use timely::container::CapacityContainerBuilder;
use timely::dataflow::channels::pact::DistributorPact;
use timely::dataflow::operators::generic::Operator as _;
use timely::dataflow::operators::{Input, Probe};
use timely::dataflow::{InputHandle, ProbeHandle};
use weir_stream::runtime::{ChangeBatch, KeyRouter};
use weir_stream::{AggregateSpec, Changes, Exchange, Operator};

const TICK_BITS: u32 = 20;
const LAG: u64 = 64;
const BATCH: usize = 8192;

fn epoch_of(t: u64) -> u64 {
    t >> TICK_BITS
}

fn main() {
    let mut args = std::env::args().skip(1);
    let workers: usize = args.next().map_or(1, |w| w.parse().unwrap());
    let rows: u64 = args.next().map_or(12_000_000, |r| r.parse().unwrap());
    // `<process> <processes>`: one of a cluster on loopback ports 2101...
    let process: usize = args.next().map_or(0, |p| p.parse().unwrap());
    let processes: usize = args.next().map_or(1, |p| p.parse().unwrap());
    let config = if processes > 1 {
        timely::Config {
            communication: timely::CommunicationConfig::Cluster {
                threads: workers,
                process,
                addresses: (0..processes)
                    .map(|p| format!("127.0.0.1:{}", 2101 + p))
                    .collect(),
                report: false,
                zerocopy: false,
            },
            worker: timely::WorkerConfig::default(),
        }
    } else {
        timely::Config::process(workers)
    };
    let started = Instant::now();
    let cpu_before = cpu_seconds();
    let guards = timely::execute(config, move |worker| {
        let index = worker.index() as u64;
        let peers = worker.peers() as u64;
        let schema = Arc::new(Schema::new(vec![
            Field::new("auction", DataType::Int64, false),
            Field::new("price", DataType::Int64, false),
        ]));
        let mut input: Option<InputHandle<u64, CapacityContainerBuilder<ChangeBatch>>> =
            Some(InputHandle::new());
        let probe = ProbeHandle::new();
        let stats = std::rc::Rc::new(std::cell::RefCell::new((0usize, 0usize, 0u64)));
        let stats_in = stats.clone();
        let schema_in = schema.clone();
        worker.dataflow::<u64, _, _>(|scope| {
            let spec = aggregate_spec(&schema_in);
            let out_schema = Arc::new(Schema::new(vec![
                Field::new("auction", DataType::Int64, true),
                Field::new("n", DataType::Int64, false),
                Field::new("total", DataType::Int64, true),
            ]));
            scope
                .input_from(input.as_mut().unwrap())
                .unary_frontier::<CapacityContainerBuilder<ChangeBatch>, _, _, _>(
                    DistributorPact({
                        let auction = col("auction", &schema_in).unwrap();
                        move |peers| KeyRouter::new(Exchange::Hash(vec![auction]), peers)
                    }),
                    "GroupBy",
                    move |_cap, _info| {
                        let mut op = weir_stream::GroupedAggregate::try_new(
                            spec,
                            schema_in.clone(),
                            out_schema,
                            true,
                        )
                        .unwrap()
                        .unwrap();
                        // Rows of epochs after the current one, and the
                        // capability each epoch's output goes out under.
                        let mut stash: BTreeMap<u64, Vec<Changes>> = BTreeMap::new();
                        let mut caps: BTreeMap<u64, timely::dataflow::operators::Capability<u64>> =
                            BTreeMap::new();
                        let mut current = 0u64;
                        move |(input, frontier), output| {
                            input.for_each(|cap, data| {
                                let time = *cap.least().unwrap();
                                let epoch = epoch_of(time);
                                let end = (epoch << TICK_BITS) | ((1 << TICK_BITS) - 1);
                                caps.entry(epoch).or_insert_with(|| cap.delayed(&end, 0));
                                for changes in data.0.drain(..) {
                                    if epoch == current {
                                        op.process(0, changes).unwrap();
                                    } else {
                                        stash.entry(epoch).or_default().push(changes);
                                    }
                                }
                            });
                            let held: usize = stash.values().flatten().map(Changes::len).sum();
                            let mut s = stats_in.borrow_mut();
                            s.1 = s.1.max(held);
                            // Every epoch the frontier has passed is cut.
                            let passed = frontier
                                .frontier()
                                .first()
                                .map_or(u64::MAX, |&t| epoch_of(t));
                            while current < passed {
                                let out = op.flush().unwrap();
                                let deltas = op.checkpoint().unwrap();
                                s.0 += 1;
                                s.2 += deltas
                                    .iter()
                                    .flatten()
                                    .map(|d| d.upserts.as_ref().map_or(0, |u| u.num_rows()) as u64)
                                    .sum::<u64>();
                                if let Some(cap) = caps.remove(&current) {
                                    output
                                        .session(&cap)
                                        .give_container(&mut ChangeBatch::new(out));
                                }
                                // The next epoch with rows, or where the frontier is.
                                current = stash
                                    .keys()
                                    .chain(caps.keys())
                                    .copied()
                                    .min()
                                    .unwrap_or(passed)
                                    .min(passed);
                                for changes in stash.remove(&current).unwrap_or_default() {
                                    op.process(0, changes).unwrap();
                                }
                            }
                        }
                    },
                )
                .probe_with(&probe);
        });
        // This worker's rows: blocks of BATCH rows dealt round-robin.
        let mut block = index;
        let blocks = rows.div_ceil(BATCH as u64);
        let (mut epoch, mut tick) = (0u64, 0u64);
        let mut epoch_started = Instant::now();
        let (mut waits, mut waited) = (0u64, Duration::ZERO);
        while !probe.done() {
            if let Some(handle) = input.as_mut() {
                if epoch_started.elapsed() >= Duration::from_secs(1) {
                    epoch += 1;
                    tick = 0;
                    epoch_started = Instant::now();
                    handle.advance_to(epoch << TICK_BITS);
                }
                let now = (epoch << TICK_BITS) | tick;
                let lagging = tick >= LAG && probe.less_than(&(now - LAG));
                if !lagging {
                    let from = block * BATCH as u64;
                    let count = (rows - from).min(BATCH as u64) as usize;
                    let batch = generate(&schema, from, count);
                    handle.send_batch(&mut ChangeBatch::new(vec![Changes::inserts(batch)]));
                    block += peers;
                    tick += 1;
                    handle.advance_to((epoch << TICK_BITS) | tick);
                }
                if block >= blocks {
                    // Done: closing the input ends the last epoch.
                    input = None;
                }
                if lagging {
                    // Wait for downstream progress without spinning.
                    waits += 1;
                    let parked = Instant::now();
                    worker.step_or_park(Some(Duration::from_millis(1)));
                    waited += parked.elapsed();
                    continue;
                }
                worker.step();
            } else {
                worker.step_or_park(Some(Duration::from_millis(10)));
            }
        }
        let s = stats.borrow();
        eprintln!(
            "worker {index}: waited {waits} times, {:.2} s",
            waited.as_secs_f64()
        );
        (s.0, s.1, s.2)
    })
    .unwrap();
    let results: Vec<(usize, usize, u64)> = guards.join().into_iter().map(|r| r.unwrap()).collect();
    let wall = started.elapsed();
    let cpu = cpu_seconds() - cpu_before;
    let cuts: usize = results.iter().map(|r| r.0).max().unwrap_or(0);
    let held: usize = results.iter().map(|r| r.1).max().unwrap_or(0);
    let state_rows: u64 = results.iter().map(|r| r.2).sum();
    println!(
        "process {process} of {processes}, workers {workers}: {rows} rows in {:.2} s, {:.0} events/s, {:.2} CPU-s, {:.0} events per CPU-second, peak {:.0} MiB, {cuts} epochs cut, at most {held} rows held behind the frontier, {state_rows} group rows checkpointed",
        wall.as_secs_f64(),
        rows as f64 / wall.as_secs_f64(),
        cpu,
        rows as f64 / cpu,
        peak_rss_mib()
    );
}

fn aggregate_spec(schema: &Arc<Schema>) -> AggregateSpec {
    let count = AggregateExprBuilder::new(count_udaf(), vec![lit(1i64)])
        .schema(schema.clone())
        .alias("n")
        .build()
        .unwrap();
    let sum = AggregateExprBuilder::new(sum_udaf(), vec![col("price", schema).unwrap()])
        .schema(schema.clone())
        .alias("total")
        .build()
        .unwrap();
    AggregateSpec {
        group: vec![(col("auction", schema).unwrap(), "auction".into())],
        aggregates: vec![Arc::new(count), Arc::new(sum)],
        filters: vec![None, None],
        emit_on_window_close: false,
    }
}

/// Rows `from..from + count`: auction in 1..10,000 and a price, drawn
/// from the row number (SplitMix64), as the datagen source does.
fn generate(schema: &Arc<Schema>, from: u64, count: usize) -> RecordBatch {
    let mix = |mut z: u64| {
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    };
    let rows = from..from + count as u64;
    let auction: ArrayRef =
        Arc::new(Int64Array::from_iter_values(rows.clone().map(|i| {
            1 + (mix(i.wrapping_mul(0x9E37_79B9_7F4A_7C15)) % 10_000) as i64
        })));
    let price: ArrayRef = Arc::new(Int64Array::from_iter_values(
        rows.map(|i| 1 + (mix(i ^ 0x5555) % 10_000_000) as i64),
    ));
    RecordBatch::try_new(schema.clone(), vec![auction, price]).unwrap()
}

fn cpu_seconds() -> f64 {
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    let t = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
    t(usage.ru_utime) + t(usage.ru_stime)
}

fn peak_rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    kib / 1024.0
}
