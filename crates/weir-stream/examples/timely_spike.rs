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
//! exchanged by a hash of the auction (its top 8 bits pick one of 256
//! virtual partitions, each owned by one worker; Arrow `take` per worker), then
//! aggregated (`count(*)`, `sum(price)` by auction) by the columnar
//! `GroupedAggregate`. The aggregate processes rows of the epoch its input
//! frontier is in and holds rows of later epochs; when the frontier passes
//! an epoch it flushes the epoch's output and takes its state delta (the
//! checkpoint cut). Sources are paced by a probe: a worker sends a batch
//! only while at most `LAG` of its ticks are not yet done downstream.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use datafusion::arrow::array::AsArray;
use datafusion::arrow::array::{ArrayRef, Int64Array, RecordBatch, UInt32Array};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::arrow::ipc::reader::StreamReader;
use datafusion::arrow::ipc::writer::StreamWriter;
use datafusion::common::hash_utils::{create_hashes, RandomState};
use datafusion::functions_aggregate::count::count_udaf;
use datafusion::functions_aggregate::sum::sum_udaf;
use datafusion::physical_expr::aggregate::AggregateExprBuilder;
use datafusion::physical_expr::expressions::{col, lit};
use timely::container::CapacityContainerBuilder;
use timely::dataflow::channels::pact::DistributorPact;
use timely::dataflow::channels::pushers::exchange::Distributor;
use timely::dataflow::channels::{ContainerBytes, Message};
use timely::dataflow::operators::generic::Operator as _;
use timely::dataflow::operators::{Input, Probe};
use timely::dataflow::{InputHandle, ProbeHandle};
use timely::progress::Stamp;
use weir_stream::{AggregateSpec, Changes, Operator};

const TICK_BITS: u32 = 20;
const LAG: u64 = 64;
const BATCH: usize = 8192;

/// A container of change batches. Between processes it travels as Arrow
/// IPC: one stream (schema and batch, the weights as a last column) per
/// `Changes`, each prefixed by its length and padded to 8 bytes as timely
/// requires. The encoding is made once, when timely asks for its length.
#[derive(Clone, Default)]
struct Batch(Vec<Changes>, std::cell::OnceCell<Vec<u8>>);

impl Batch {
    fn new(changes: Vec<Changes>) -> Self {
        Batch(changes, std::cell::OnceCell::new())
    }

    fn encoded(&self) -> &[u8] {
        self.1.get_or_init(|| {
            let mut out = Vec::new();
            for changes in &self.0 {
                let mut fields = changes.rows.schema().fields().to_vec();
                fields.push(Arc::new(Field::new("__weight", DataType::Int64, false)));
                let mut columns = changes.rows.columns().to_vec();
                columns.push(Arc::new(changes.weights.clone()));
                let batch = RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).unwrap();
                let mut ipc = Vec::new();
                let mut writer = StreamWriter::try_new(&mut ipc, &batch.schema()).unwrap();
                writer.write(&batch).unwrap();
                writer.finish().unwrap();
                drop(writer);
                out.extend_from_slice(&(ipc.len() as u64).to_le_bytes());
                out.extend_from_slice(&ipc);
                out.resize(out.len().next_multiple_of(8), 0);
            }
            out
        })
    }
}

impl timely::Accountable for Batch {
    fn record_count(&self) -> i64 {
        self.0.iter().map(|c| c.len() as i64).sum()
    }
}

impl ContainerBytes for Batch {
    fn from_bytes(bytes: timely::bytes::arc::Bytes) -> Self {
        let mut rest: &[u8] = &bytes[..];
        let mut changes = Vec::new();
        while rest.len() >= 8 {
            let len = u64::from_le_bytes(rest[..8].try_into().unwrap()) as usize;
            let ipc = &rest[8..8 + len];
            let batch = StreamReader::try_new(ipc, None)
                .unwrap()
                .next()
                .unwrap()
                .unwrap();
            let weights = batch.column(batch.num_columns() - 1).as_primitive().clone();
            let mut rows = batch;
            rows.remove_column(rows.num_columns() - 1);
            changes.push(Changes::new(rows, weights).unwrap());
            rest = &rest[(8 + len).next_multiple_of(8)..];
        }
        Batch::new(changes)
    }
    fn length_in_bytes(&self) -> usize {
        self.encoded().len()
    }
    fn into_bytes<W: std::io::Write>(&self, writer: &mut W) {
        writer.write_all(self.encoded()).unwrap();
    }
}

/// How many virtual partitions keys hash into; each belongs to one worker.
const VNODES: usize = 256;

/// Splits batches by a hash of column 0 with `take` kernels: a key's
/// virtual partition is the top 8 bits of its hash, and `owner` maps
/// virtual partitions to workers (no division per row).
struct ByKey {
    owner: [u8; VNODES],
}

impl ByKey {
    fn new(peers: usize) -> Self {
        let mut owner = [0u8; VNODES];
        for (vnode, worker) in owner.iter_mut().enumerate() {
            *worker = (vnode % peers) as u8;
        }
        ByKey { owner }
    }
}

impl Distributor<Batch> for ByKey {
    fn partition<T: Clone, P: timely::communication::Push<Message<T, Batch>>>(
        &mut self,
        container: &mut Batch,
        stamp: &Stamp<T>,
        pushers: &mut [P],
    ) {
        let peers = pushers.len();
        for changes in container.0.drain(..) {
            let mut hashes = vec![0u64; changes.len()];
            create_hashes(
                &changes.rows.columns()[..1],
                &RandomState::with_seed(0),
                &mut hashes,
            )
            .unwrap();
            let share = changes.len() / peers + changes.len() / 8;
            let mut parts: Vec<Vec<u32>> = (0..peers).map(|_| Vec::with_capacity(share)).collect();
            for (i, h) in hashes.iter().enumerate() {
                parts[self.owner[(h >> 56) as usize] as usize].push(i as u32);
            }
            for (w, rows) in parts.into_iter().enumerate() {
                if rows.is_empty() {
                    continue;
                }
                let part = changes.take(&UInt32Array::from(rows)).unwrap();
                Message::push_at(&mut Batch::new(vec![part]), stamp.clone(), &mut pushers[w]);
            }
        }
    }
    fn flush<T: Clone, P: timely::communication::Push<Message<T, Batch>>>(
        &mut self,
        _stamp: &Stamp<T>,
        _pushers: &mut [P],
    ) {
    }
}

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
        let mut input: Option<InputHandle<u64, CapacityContainerBuilder<Batch>>> =
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
                .unary_frontier::<CapacityContainerBuilder<Batch>, _, _, _>(
                    DistributorPact(ByKey::new),
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
                                    output.session(&cap).give_container(&mut Batch::new(out));
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
                    handle.send_batch(&mut Batch::new(vec![Changes::inserts(batch)]));
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
