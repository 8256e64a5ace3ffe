//! `weir-bench`: starts the release `weir` binary on a fresh data folder,
//! drives it over the PostgreSQL protocol, and prints figures.
//!
//! ```text
//! cargo build --release -p weir -p weir-bench
//! target/release/weir-bench commit --connections 50 --statements 200
//! target/release/weir-bench views --connections 8 --batches 50 --rows 500
//! target/release/weir-bench checkpoints --seconds 20
//! target/release/weir-bench stream --query agg --rows 12000000
//! target/release/weir-bench shared --views 3 --rows 30000000
//! target/release/weir-bench nexmark --query q5 --events 10000000
//! target/release/weir-bench cdc --snapshot-rows 1000000 --changes 1000000
//! target/release/weir-bench kafka --broker /var/tmp/weir-nisshi/bin/nisshi --records 1000000
//! target/release/weir-bench files --rows 3000000
//! ```

mod cdc;
mod files;
mod kafka;
mod nexmark;
mod nexmark_suite;
mod pg_sink;
mod postgres;
mod reads;
mod server;
mod shared;
mod sources;
mod stream;
mod views;
mod write;

use std::time::{Duration, Instant};

use anyhow::Context;
use clap::{Parser, Subcommand};

use crate::server::Server;

#[derive(Debug, Parser)]
#[command(about = "Benchmarks for Weir")]
struct Args {
    #[command(subcommand)]
    bench: Bench,
}

#[derive(Debug, Subcommand)]
enum Bench {
    /// Recovery time: loads a table of about `--mib` MiB with COPY, commits,
    /// kills the server with SIGKILL, restarts it, and reports how long it
    /// takes until it accepts queries.
    Recovery {
        /// Approximate size of the table's data, in MiB.
        #[arg(long, default_value_t = 256)]
        mib: usize,
    },
    /// Group commit: many connections each run single-row INSERTs one after
    /// another; reports commit latency, statements/s, epochs and objects.
    Commit {
        /// Concurrent connections.
        #[arg(long, default_value_t = 50)]
        connections: usize,
        /// INSERT statements per connection.
        #[arg(long, default_value_t = 200)]
        statements: usize,
    },
    /// Materialized views: rows/s of INSERTs through a group-by view and a
    /// join view, FLUSH after a burst, and backfill time.
    Views {
        /// Concurrent connections.
        #[arg(long, default_value_t = 8)]
        connections: usize,
        /// INSERT statements per connection.
        #[arg(long, default_value_t = 50)]
        batches: usize,
        /// Rows per INSERT.
        #[arg(long, default_value_t = 500)]
        rows: usize,
        /// Distinct customers: group keys and join keys.
        #[arg(long, default_value_t = 10_000)]
        keys: usize,
    },
    /// Streaming throughput: a bid-shaped datagen source into one view, until
    /// every row is in it; reports events per second and per CPU-second of
    /// the server, peak memory and checkpoints.
    Stream {
        /// The view: filter, agg, max, window, join, topn or topn_per_key.
        #[arg(long, default_value = "agg")]
        query: String,
        /// Rows the source produces.
        #[arg(long, default_value_t = 12_000_000)]
        rows: u64,
        #[command(flatten)]
        run: RunArgs,
    },
    /// Shared readers: several views over one datagen source (one shared
    /// reader) against the same views each over its own identical source
    /// (a reader each); reports source rows per CPU-second and peak memory.
    Shared {
        /// Views: agg, max and window in turn.
        #[arg(long, default_value_t = 3)]
        views: usize,
        /// Rows the source produces.
        #[arg(long, default_value_t = 30_000_000)]
        rows: u64,
        /// Runs per configuration, alternating; the median is reported.
        #[arg(long, default_value_t = 1)]
        repeat: usize,
        /// The server's checkpoint interval.
        #[arg(long, default_value = "1s")]
        checkpoint_interval: String,
        /// The server's `--workers`.
        #[arg(long, default_value_t = 1)]
        workers: usize,
    },
    /// Nexmark: one query of `sql-tests/nexmark` as a view over the nexmark
    /// connector's streams, until every event went through it; the same
    /// figures as `stream`.
    Nexmark {
        /// The query: q0, q1, ... (those under `sql-tests/nexmark`).
        #[arg(long, default_value = "q1")]
        query: String,
        /// Events in the stream, of all three kinds.
        #[arg(long, default_value_t = 10_000_000)]
        events: u64,
        /// Run the query as a blackhole sink, whose output is discarded
        /// (as the Flink kit measures), not as a view that keeps it.
        #[arg(long)]
        blackhole: bool,
        #[command(flatten)]
        run: RunArgs,
    },
    /// Every Nexmark query at each worker count, as a markdown table
    /// against its target; `--write docs/benchmarks.md` puts the table
    /// (and the machine it ran on) in that file's suite section.
    NexmarkSuite {
        /// Events in each run's stream.
        #[arg(long, default_value_t = 10_000_000)]
        events: u64,
        /// The server's `--workers` for each column group.
        #[arg(long, value_delimiter = ',', default_values_t = [1usize, 2])]
        workers: Vec<usize>,
        /// Keep each query's output in a materialized view instead of
        /// discarding it in a blackhole sink.
        #[arg(long)]
        views: bool,
        /// The markdown file whose suite section the table replaces.
        #[arg(long)]
        write: Option<std::path::PathBuf>,
        /// The server's checkpoint interval.
        #[arg(long, default_value = "1s")]
        checkpoint_interval: String,
        /// Runs per configuration; the median is reported.
        #[arg(long, default_value_t = 1)]
        repeat: usize,
    },
    /// The write path: 128-byte rows by COPY or multi-row INSERT into a
    /// table, alone or read by a group-by view; reports rows per second and
    /// per CPU-second of the server.
    Write {
        /// `copy` or `insert`.
        #[arg(long, default_value = "copy")]
        mode: String,
        /// Rows written.
        #[arg(long, default_value_t = 2_000_000)]
        rows: usize,
        /// Rows per COPY or INSERT statement.
        #[arg(long, default_value_t = 100_000)]
        batch: usize,
        /// Concurrent connections.
        #[arg(long, default_value_t = 1)]
        connections: usize,
        /// With a group-by view over the table.
        #[arg(long)]
        view: bool,
        /// With a UNIQUE (n, id) constraint on the table.
        #[arg(long)]
        unique: bool,
        /// Afterwards, time ALTER TABLE ... ADD COLUMN over the rows.
        #[arg(long)]
        alter: bool,
    },
    /// Serving reads: pgbench with prepared statements (point reads on a
    /// table key, a view key and a secondary index, and a 10-row range) at
    /// each client count, against Weir and PostgreSQL; the point and range
    /// reads again under a datagen write load, with epoch commit latency;
    /// and the memory of idle connections. Needs pgbench and PostgreSQL.
    Reads {
        /// Client counts.
        #[arg(long, value_delimiter = ',', default_values_t = [16usize, 200])]
        clients: Vec<usize>,
        /// Seconds per pgbench run.
        #[arg(long, default_value_t = 10)]
        seconds: u64,
        /// Rows in the table; the view has a tenth as many keys.
        #[arg(long, default_value_t = 100_000)]
        rows: usize,
        /// Rows per second of the write load's source.
        #[arg(long, default_value_t = 100_000)]
        write_rate: u64,
        /// Idle connections opened to measure memory per connection.
        #[arg(long, default_value_t = 2000)]
        idle: usize,
        /// Skip the PostgreSQL runs.
        #[arg(long)]
        no_postgres: bool,
    },
    /// PostgreSQL CDC: a `postgres-cdc` table (and a group-by view over it)
    /// fed by a throwaway PostgreSQL: the snapshot, then a stream of
    /// updates and inserts; reports rows per second and per CPU-second of
    /// the server, and peak memory.
    Cdc {
        /// Rows in the upstream table before the snapshot.
        #[arg(long, default_value_t = 1_000_000)]
        snapshot_rows: u64,
        /// Row changes written upstream after it.
        #[arg(long, default_value_t = 1_000_000)]
        changes: u64,
        /// Rows each upstream transaction changes.
        #[arg(long, default_value_t = 1000)]
        transaction_rows: u64,
    },
    /// Kafka: a Kafka source into a group-by view, and a generated stream
    /// into Kafka sinks (exactly-once and at-least-once), against a
    /// nisshi broker started here; reports records per second and per
    /// CPU-second of the server, and peak memory.
    Kafka {
        /// The broker binary (nisshi).
        #[arg(long, default_value = "nisshi")]
        broker: String,
        /// Records read by the source, and rows written by each sink.
        #[arg(long, default_value_t = 1_000_000)]
        records: u64,
        /// Partitions of each topic.
        #[arg(long, default_value_t = 4)]
        partitions: i32,
    },
    /// PostgreSQL sink: a datagen source through an append-only sink, and
    /// a group-by view through an upsert sink, into a throwaway
    /// PostgreSQL; reports rows per second and per CPU-second of the
    /// server, PostgreSQL's CPU, and peak memory.
    PgSink {
        /// Rows each phase's source generates.
        #[arg(long, default_value_t = 1_000_000)]
        rows: u64,
    },
    /// Files: a datagen source into a Parquet file sink, then CSV,
    /// JSON-lines and those Parquet files through file sources into a
    /// group-by view; reports rows per second and per CPU-second of the
    /// server, and peak memory.
    Files {
        /// Rows of each format.
        #[arg(long, default_value_t = 1_000_000)]
        rows: u64,
        /// CSV and JSON files the rows are spread over.
        #[arg(long, default_value_t = 16)]
        files: u64,
    },
    /// Checkpoint overhead: a datagen source at full speed into a group-by
    /// view, with checkpoints off and at each `--interval`; reports rows/s.
    Checkpoints {
        /// Seconds measured per configuration.
        #[arg(long, default_value_t = 20)]
        seconds: u64,
        /// Distinct group keys.
        #[arg(long, default_value_t = 10_000)]
        keys: usize,
        /// Checkpoint intervals to compare (repeatable).
        #[arg(long = "interval", default_values_t = ["1s".to_string()])]
        intervals: Vec<String>,
    },
}

/// How `stream` and `nexmark` run their workload.
#[derive(Debug, clap::Args)]
struct RunArgs {
    /// The server's checkpoint interval.
    #[arg(long, default_value = "1s")]
    checkpoint_interval: String,
    /// Also run with checkpoints off and print the overhead.
    #[arg(long)]
    compare_off: bool,
    /// Runs per configuration; the median is reported.
    #[arg(long, default_value_t = 1)]
    repeat: usize,
    /// The server's `--workers` (per process).
    #[arg(long, default_value_t = 1)]
    workers: usize,
    /// Processes of a cluster on this machine (process 0 is the
    /// server); CPU time and peak memory are summed over them.
    #[arg(long, default_value_t = 1)]
    processes: usize,
    /// More flags for the server (repeatable), e.g. `--server-arg=--view-memory-mb=512`.
    #[arg(long = "server-arg", allow_hyphen_values = true)]
    server_args: Vec<String>,
}

impl From<RunArgs> for stream::RunOptions {
    fn from(args: RunArgs) -> Self {
        stream::RunOptions {
            checkpoint_interval: args.checkpoint_interval,
            compare_off: args.compare_off,
            repeat: args.repeat,
            workers: args.workers,
            processes: args.processes,
            server_args: args.server_args,
        }
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    match Args::parse().bench {
        Bench::Recovery { mib } => recovery(mib).await,
        Bench::Commit {
            connections,
            statements,
        } => commit(connections, statements).await,
        Bench::Stream { query, rows, run } => {
            stream::run(&stream::datagen_workload(&query, rows)?, &run.into()).await
        }
        Bench::Shared {
            views,
            rows,
            repeat,
            checkpoint_interval,
            workers,
        } => {
            shared::run(&shared::SharedLoad {
                views,
                rows,
                repeat,
                checkpoint_interval,
                workers,
            })
            .await
        }
        Bench::Nexmark {
            query,
            events,
            blackhole,
            run,
        } => stream::run(&nexmark::workload(&query, events, blackhole)?, &run.into()).await,
        Bench::NexmarkSuite {
            events,
            workers,
            views,
            write,
            checkpoint_interval,
            repeat,
        } => {
            nexmark_suite::run(nexmark_suite::Suite {
                events,
                workers,
                views,
                write,
                run: stream::RunOptions {
                    checkpoint_interval,
                    compare_off: false,
                    repeat,
                    workers: 1,
                    processes: 1,
                    server_args: Vec::new(),
                },
            })
            .await
        }
        Bench::Write {
            mode,
            rows,
            batch,
            connections,
            view,
            unique,
            alter,
        } => {
            write::run(write::WriteLoad {
                mode,
                rows,
                batch,
                connections,
                view,
                unique,
                alter,
            })
            .await
        }
        Bench::Checkpoints {
            seconds,
            keys,
            intervals,
        } => {
            sources::run(sources::CheckpointLoad {
                seconds,
                keys,
                intervals,
            })
            .await
        }
        Bench::Cdc {
            snapshot_rows,
            changes,
            transaction_rows,
        } => {
            cdc::run(cdc::CdcLoad {
                snapshot_rows,
                changes,
                transaction_rows,
            })
            .await
        }
        Bench::Kafka {
            broker,
            records,
            partitions,
        } => {
            kafka::run(kafka::KafkaLoad {
                broker,
                records,
                partitions,
            })
            .await
        }
        Bench::PgSink { rows } => pg_sink::run(pg_sink::PgSinkLoad { rows }).await,
        Bench::Files { rows, files } => files::run(files::FileLoad { rows, files }).await,
        Bench::Reads {
            clients,
            seconds,
            rows,
            write_rate,
            idle,
            no_postgres,
        } => {
            reads::run(reads::ReadLoad {
                clients,
                seconds,
                rows,
                write_rate,
                idle,
                no_postgres,
            })
            .await
        }
        Bench::Views {
            connections,
            batches,
            rows,
            keys,
        } => {
            views::run(views::ViewLoad {
                connections,
                batches,
                rows,
                keys,
            })
            .await
        }
    }
}

async fn show(client: &tokio_postgres::Client, name: &str) -> anyhow::Result<u64> {
    let rows = client.simple_query(&format!("SHOW {name}")).await?;
    for message in rows {
        if let tokio_postgres::SimpleQueryMessage::Row(row) = message {
            return Ok(row.get(0).context("value")?.parse()?);
        }
    }
    anyhow::bail!("SHOW {name} returned no row")
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index]
}

async fn commit(connections: usize, statements: usize) -> anyhow::Result<()> {
    let server = Server::start().await?;
    let setup = server.client().await?;
    setup
        .batch_execute(
            "CREATE TABLE events (conn INT, seq INT, payload TEXT, PRIMARY KEY (conn, seq))",
        )
        .await?;
    let epochs_before = show(&setup, "epochs_committed").await?;
    let objects_before = show(&setup, "objects_written").await?;
    let started = Instant::now();
    let mut tasks = Vec::new();
    for conn in 0..connections {
        let client = server.client().await?;
        tasks.push(tokio::spawn(async move {
            let insert = client
                .prepare("INSERT INTO events VALUES ($1, $2, $3)")
                .await?;
            let mut latencies = Vec::with_capacity(statements);
            for seq in 0..statements {
                let t = Instant::now();
                client
                    .execute(&insert, &[&(conn as i32), &(seq as i32), &"payload"])
                    .await?;
                latencies.push(t.elapsed());
            }
            Ok::<_, tokio_postgres::Error>(latencies)
        }));
    }
    let mut latencies = Vec::new();
    for task in tasks {
        latencies.extend(task.await??);
    }
    let elapsed = started.elapsed();
    let epochs = show(&setup, "epochs_committed").await? - epochs_before;
    let objects = show(&setup, "objects_written").await? - objects_before;
    let rows: i64 = setup
        .query_one("SELECT count(*) FROM events", &[])
        .await?
        .get(0);
    anyhow::ensure!(
        rows as usize == connections * statements,
        "lost rows: {rows}"
    );
    latencies.sort();
    let total = latencies.len();
    println!("group commit: {connections} connections x {statements} single-row INSERTs");
    println!("  statements          {total}");
    println!("  elapsed             {:.2} s", elapsed.as_secs_f64());
    println!(
        "  statements/s        {:.0}",
        total as f64 / elapsed.as_secs_f64()
    );
    println!(
        "  commit latency p50  {:.2} ms",
        percentile(&latencies, 0.50).as_secs_f64() * 1e3
    );
    println!(
        "  commit latency p99  {:.2} ms",
        percentile(&latencies, 0.99).as_secs_f64() * 1e3
    );
    println!(
        "  epochs committed    {epochs} ({:.1} statements per epoch)",
        total as f64 / epochs.max(1) as f64
    );
    println!(
        "  objects written     {objects} ({:.0} per second)",
        objects as f64 / elapsed.as_secs_f64()
    );
    // A single statement alone: latency when nobody else is writing.
    let mut alone = Vec::new();
    for seq in 0..50 {
        let t = Instant::now();
        setup
            .execute("INSERT INTO events VALUES (-1, $1, 'alone')", &[&seq])
            .await?;
        alone.push(t.elapsed());
    }
    alone.sort();
    println!(
        "  single INSERT alone p50 {:.2} ms",
        percentile(&alone, 0.5).as_secs_f64() * 1e3
    );
    drop(server);
    Ok(())
}

async fn recovery(mib: usize) -> anyhow::Result<()> {
    const ROW_BYTES: usize = 128;
    let rows = mib * (1 << 20) / ROW_BYTES;
    let mut server = Server::start().await?;
    let client = server.client().await?;
    client
        .batch_execute("CREATE TABLE big (id BIGINT PRIMARY KEY, n BIGINT, payload TEXT)")
        .await?;
    let load = Instant::now();
    let chunk = 200_000;
    let mut id = 0;
    while id < rows {
        let end = (id + chunk).min(rows);
        write::copy_rows(&client, id, end).await?;
        id = end;
    }
    let loaded = load.elapsed();
    // Two views: running totals per group, and a recomputing aggregate
    // over 1% of the rows; their operator state is recovered too.
    let backfill = Instant::now();
    client
        .batch_execute(
            "CREATE MATERIALIZED VIEW per_n AS SELECT n, count(*) AS c, sum(id) AS s FROM big GROUP BY n;
             CREATE MATERIALIZED VIEW sampled AS SELECT n, max(id) AS top FROM big WHERE id % 100 = 0 GROUP BY n;
             CHECKPOINT",
        )
        .await?;
    let backfilled = backfill.elapsed();
    let before: i64 = client
        .query_one("SELECT c FROM per_n WHERE n = 1", &[])
        .await?
        .get(0);
    // A point read by the table's key: the first sorts every chunk by the
    // key; compaction then stores that order with the table's base.
    let by_key = "SELECT payload FROM big WHERE id = $1";
    let first_read = Instant::now();
    client.query_one(by_key, &[&7i64]).await?;
    let first_read = first_read.elapsed();
    let stored = Instant::now();
    while server.relations_with_stored_orders() == 0 {
        anyhow::ensure!(
            stored.elapsed() < Duration::from_secs(300),
            "the key's order was not stored with the base"
        );
        client.batch_execute("CHECKPOINT").await?;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let stored = stored.elapsed();
    let state_bytes = server.state_bytes();
    println!(
        "recovery: {rows} rows of {ROW_BYTES} bytes, state folder {:.0} MiB",
        state_bytes as f64 / (1 << 20) as f64
    );
    println!("  load with COPY       {:.1} s", loaded.as_secs_f64());
    println!("  create two views     {:.1} s", backfilled.as_secs_f64());
    println!(
        "  first read by key    {:.0} ms (sorts the table by its key); the order stored with the base {:.1} s later",
        first_read.as_secs_f64() * 1e3,
        stored.as_secs_f64()
    );
    let restart = server.restart_after_kill().await?;
    let client = server.client().await?;
    // Caught up: a write after the restart is in the views once it returns.
    client
        .execute(
            "INSERT INTO big VALUES ($1, 1, 'after restart')",
            &[&(rows as i64)],
        )
        .await?;
    let after: i64 = client
        .query_one("SELECT c FROM per_n WHERE n = 1", &[])
        .await?
        .get(0);
    anyhow::ensure!(after == before + 1, "view per_n: {before} then {after}");
    let caught_up = restart.elapsed_since_start();
    // The first read by key after the restart, on a session that has
    // planned statements already (as the read before the restart was).
    let read_after = Instant::now();
    client.query_one(by_key, &[&7i64]).await?;
    let read_after = read_after.elapsed();
    let count: i64 = client
        .query_one("SELECT count(*) FROM big", &[])
        .await?
        .get(0);
    anyhow::ensure!(
        count as usize == rows + 1,
        "recovered {count} of {rows} rows"
    );
    println!(
        "  restart until queries are accepted      {:.2} s",
        restart.accepting.as_secs_f64()
    );
    println!(
        "  restart until views take new writes     {:.2} s",
        caught_up.as_secs_f64()
    );
    println!(
        "  first read by key after the restart     {:.1} ms (the order loaded with the base)",
        read_after.as_secs_f64() * 1e3
    );
    Ok(())
}
