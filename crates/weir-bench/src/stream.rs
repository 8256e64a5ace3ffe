//! `weir-bench stream`: one materialized view over a bid-shaped datagen
//! source, run until the source's last row is in the view; the runner
//! `weir-bench nexmark` (`nexmark.rs`) shares.
//!
//! The source is the one issue 9 measured Weir and Flink on: auctions in
//! 1..10,000, bidders, prices, three strings and an event time, generated
//! as fast as the view takes them (`rows_per_second` far above what the
//! server can process). The figures are taken from the server process:
//! events per second of wall time, events per CPU-second (user + system
//! time of the whole server, generator included, read from
//! `/proc/<pid>/stat`), peak resident memory (`VmHWM`), and the
//! checkpoints committed during the run.
//!
//! Progress is read from the server's Prometheus endpoint
//! (`weir_view_source_rows_total`), which counts the source rows into the view whether or
//! not checkpoints run, so the same command measures `--checkpoint-interval
//! off`. At the end a `CHECKPOINT` commits everything and the view is
//! checked: every source row is in it.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context};
use tokio_postgres::Client;

use crate::server::{Compute, Server};

/// The queries the benchmark knows, by name.
pub const QUERIES: &[(&str, &str)] = &[
    ("filter", "SELECT * FROM bid WHERE auction % 123 = 0"),
    (
        "agg",
        "SELECT auction, count(*) AS n, sum(price) AS total FROM bid GROUP BY auction",
    ),
    (
        "max",
        "SELECT auction, count(*) AS n, max(price) AS top FROM bid GROUP BY auction",
    ),
    (
        "window",
        "SELECT auction, date_bin(INTERVAL '10 seconds', date_time) AS window_start, count(*) AS n \
         FROM bid GROUP BY auction, date_bin(INTERVAL '10 seconds', date_time)",
    ),
    (
        "join",
        "SELECT b.auction, b.price, a.seller, a.category FROM bid b JOIN auctions a ON b.auction = a.id",
    ),
    (
        "topn",
        "SELECT auction, count(*) AS n FROM bid GROUP BY auction ORDER BY n DESC, auction LIMIT 10",
    ),
    (
        "topn_per_key",
        "SELECT auction, bidder, price FROM (SELECT auction, bidder, price, ROW_NUMBER() OVER \
         (PARTITION BY auction ORDER BY price DESC, bidder) AS rank FROM bid) WHERE rank <= 3",
    ),
];

/// Distinct auctions the source draws from; the `auctions` table has one
/// row for each.
const AUCTIONS: u64 = 10_000;

/// One streaming workload: what to create, and how to know that every
/// event went through the view.
pub struct Workload {
    /// What the run prints first.
    pub title: String,
    /// Sources and tables, created before the clock starts.
    pub setup: String,
    /// The view's query.
    pub query: String,
    /// The events the figures count: every reader of the view ends at
    /// this position (a datagen source's rows, a nexmark stream's events).
    pub events: u64,
    /// Each source's rows: how many rows into the view (from the sources
    /// it reads) mean that every event went through.
    pub source_rows: BTreeMap<String, u64>,
    /// Whether the `auctions` table changes now and then during the run.
    pub update_auctions: bool,
    /// A query over the view `v` and the bigint it must return at the end.
    pub check: Option<(String, u64)>,
    /// Run the query as a blackhole sink (`CREATE SINK v ... WITH
    /// (connector = 'blackhole')`): its output is discarded, not kept.
    pub blackhole: bool,
    /// With `blackhole`: a file sink into this folder instead (one
    /// Parquet object per epoch); the run ends once it wrote every epoch,
    /// and the folder is removed afterwards.
    pub file_sink: Option<std::path::PathBuf>,
}

/// How to run a workload.
pub struct RunOptions {
    /// `--checkpoint-interval` for the server.
    pub checkpoint_interval: String,
    /// Also run with checkpoints off and print the ratio.
    pub compare_off: bool,
    /// Runs per configuration; the median run is reported (shared machines
    /// are noisy).
    pub repeat: usize,
    /// `--workers` for the server (per process).
    pub workers: usize,
    /// Processes of a cluster, the server being process 0.
    pub processes: usize,
    /// Extra flags for the server.
    pub server_args: Vec<String>,
}

/// The SQL of query `name` in `queries` (name, SQL).
pub fn find_query<'a>(queries: &[(&str, &'a str)], name: &str) -> anyhow::Result<&'a str> {
    queries
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, sql)| *sql)
        .with_context(|| {
            let names: Vec<&str> = queries.iter().map(|(n, _)| *n).collect();
            format!("unknown query {name:?}; one of {names:?}")
        })
}

/// `CREATE SOURCE name ...`: the bid-shaped datagen source of issue 9,
/// `rows` rows generated as fast as its readers take them.
pub fn bid_source(name: &str, rows: u64) -> String {
    format!(
        "CREATE SOURCE {name} (auction BIGINT, bidder BIGINT, price BIGINT, channel TEXT, url TEXT,
           date_time TIMESTAMP, extra TEXT) WITH (connector = 'datagen', rows_per_second = '100000000',
           total_rows = '{rows}', seed = '7', fields.auction.min = '1', fields.auction.max = '{AUCTIONS}',
           fields.bidder.min = '1', fields.bidder.max = '1000000', fields.price.min = '1',
           fields.price.max = '10000000', fields.channel.length = '8', fields.url.length = '48',
           fields.extra.length = '16');"
    )
}

/// The datagen workload: query `name` of [`QUERIES`] over `rows` rows.
pub fn datagen_workload(name: &str, rows: u64) -> anyhow::Result<Workload> {
    let query = find_query(QUERIES, name)?;
    let mut setup = bid_source("bid", rows);
    let join = name == "join";
    if join {
        setup.push_str(&format!(
            "CREATE TABLE auctions (id BIGINT PRIMARY KEY, seller BIGINT, category INT, title TEXT);
             INSERT INTO auctions SELECT a, a % 977, CAST(a % 37 AS INT), 'auction ' || a
               FROM generate_series(1, {AUCTIONS}) AS a;"
        ));
    }
    let check = match name {
        "agg" | "max" | "window" => Some(("SELECT CAST(sum(n) AS BIGINT) FROM v", rows)),
        "join" => Some(("SELECT count(*) FROM v", rows)),
        // Three bids per auction, once each auction has had three.
        "topn_per_key" if rows >= 100 * AUCTIONS => Some(("SELECT count(*) FROM v", 3 * AUCTIONS)),
        _ => None,
    };
    Ok(Workload {
        title: format!("stream: {rows} rows, query {name} ({query})"),
        setup,
        query: query.to_string(),
        events: rows,
        source_rows: BTreeMap::from([("bid".to_string(), rows)]),
        update_auctions: join,
        check: check.map(|(sql, expected)| (sql.to_string(), expected)),
        blackhole: false,
        file_sink: None,
    })
}

/// Figures of one run.
pub struct Measured {
    /// Wall time from `CREATE` until every event went through.
    pub wall: Duration,
    /// CPU time of the server (and the cluster's other processes).
    pub cpu: Duration,
    /// Peak resident memory of the server (summed over processes).
    pub peak_rss_kib: u64,
    epochs: u64,
    commit_p50_ms: f64,
    commit_p99_ms: f64,
    bytes_written: u64,
}

/// Runs the workload `options.repeat` times and returns the median run.
pub async fn measure_median(load: &Workload, options: &RunOptions) -> anyhow::Result<Measured> {
    let mut runs = Vec::new();
    for _ in 0..options.repeat.max(1) {
        runs.push(measure(load, options, &options.checkpoint_interval).await?);
    }
    Ok(median(runs, load.events))
}

/// Runs the workload (and, if asked, once more with checkpoints off) and
/// prints the figures.
pub async fn run(load: &Workload, options: &RunOptions) -> anyhow::Result<()> {
    println!(
        "{}, {} workers x {} processes",
        load.title, options.workers, options.processes
    );
    // With --compare-off the two configurations alternate, so a noisy
    // stretch of the machine hits both alike.
    let (mut ons, mut offs) = (Vec::new(), Vec::new());
    for _ in 0..options.repeat.max(1) {
        ons.push(measure(load, options, &options.checkpoint_interval).await?);
        if options.compare_off {
            offs.push(measure(load, options, "off").await?);
        }
    }
    let on = median(ons, load.events);
    print(
        &format!("checkpoint every {}", options.checkpoint_interval),
        load.events,
        &on,
    );
    if options.compare_off {
        let off = median(offs, load.events);
        print("checkpoints off", load.events, &off);
        println!(
            "  checkpoint overhead: {:.1}% more CPU per event, events/s at {:.1}% of off",
            100.0 * (on.cpu.as_secs_f64() / off.cpu.as_secs_f64() - 1.0),
            100.0 * off.wall.as_secs_f64() / on.wall.as_secs_f64()
        );
    }
    Ok(())
}

/// The run with the median events per CPU-second; with several runs, each
/// one's figure is printed first.
fn median(mut runs: Vec<Measured>, rows: u64) -> Measured {
    runs.sort_by_key(|r| r.cpu);
    if runs.len() > 1 {
        let each: Vec<String> = runs
            .iter()
            .map(|m| format!("{:.0}", rows as f64 / m.cpu.as_secs_f64()))
            .collect();
        println!("  runs (events per CPU-second): {}", each.join(", "));
    }
    let middle = runs.len() / 2;
    runs.swap_remove(middle)
}

fn print(label: &str, rows: u64, m: &Measured) {
    println!("  {label}:");
    println!(
        "    events/s              {:>12.0}  ({rows} events in {:.2} s)",
        rows as f64 / m.wall.as_secs_f64(),
        m.wall.as_secs_f64()
    );
    println!(
        "    events per CPU-second {:>12.0}  ({:.2} CPU-s of the server)",
        rows as f64 / m.cpu.as_secs_f64(),
        m.cpu.as_secs_f64()
    );
    println!(
        "    peak resident memory  {:>9.0} MiB",
        m.peak_rss_kib as f64 / 1024.0
    );
    println!(
        "    checkpoints           {:>12}  (commit p50 {:.1} ms, p99 {:.1} ms, {:.1} MiB written)",
        m.epochs,
        m.commit_p50_ms,
        m.commit_p99_ms,
        m.bytes_written as f64 / (1 << 20) as f64
    );
}

async fn measure(
    load: &Workload,
    options: &RunOptions,
    interval: &str,
) -> anyhow::Result<Measured> {
    let metrics_port = free_port()?;
    let metrics = format!("127.0.0.1:{metrics_port}");
    let mut args = vec![
        "--checkpoint-interval".to_string(),
        interval.to_string(),
        "--metrics-listen".to_string(),
        metrics.clone(),
        "--workers".to_string(),
        options.workers.to_string(),
    ];
    args.extend(options.server_args.iter().cloned());
    // The other processes of a cluster start first: the server's timely
    // workers wait for them to connect.
    let mut computes = Vec::new();
    if options.processes > 1 {
        let addresses: Vec<String> = (0..options.processes)
            .map(|_| free_port().map(|port| format!("127.0.0.1:{port}")))
            .collect::<anyhow::Result<_>>()?;
        let cluster = addresses.join(",");
        for process in 1..options.processes {
            computes.push(Compute::start(&cluster, process, options.workers)?);
        }
        args.extend(["--cluster".into(), cluster, "--process".into(), "0".into()]);
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let server = Server::start_with(&args).await?;
    let cpu_time = || -> anyhow::Result<Duration> {
        let mut total = server.cpu_time()?;
        for compute in &computes {
            total += compute.cpu_time()?;
        }
        Ok(total)
    };
    let client = server.client().await?;
    client.batch_execute(&load.setup).await?;
    let epochs_before = crate::show(&client, "epochs_committed").await?;
    let bytes_before = crate::show(&client, "bytes_written").await?;
    let cpu_before = cpu_time()?;
    let started = Instant::now();
    let sink = match &load.file_sink {
        Some(folder) => format!(
            "connector = 'filesystem', path = '{}', format = 'parquet'",
            folder.display()
        ),
        None => "connector = 'blackhole'".to_owned(),
    };
    let create = match load.blackhole {
        true => format!("CREATE SINK v AS {} WITH ({sink})", load.query),
        false => format!("CREATE MATERIALIZED VIEW v AS {}", load.query),
    };
    client.batch_execute(&create).await?;
    // The join's table changes now and then while the stream runs.
    let updater = if load.update_auctions {
        let client = server.client().await?;
        Some(tokio::spawn(async move {
            let mut id = 1i64;
            loop {
                client
                    .execute(
                        "UPDATE auctions SET seller = seller + 1 WHERE id = $1",
                        &[&id],
                    )
                    .await?;
                id = id % AUCTIONS as i64 + 1;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            #[allow(unreachable_code)]
            Ok::<(), anyhow::Error>(())
        }))
    } else {
        None
    };
    let mut source_rows = 0;
    for row in client
        .query(
            "SELECT source FROM weir_source_readers WHERE view = 'v'",
            &[],
        )
        .await?
    {
        let source: String = row.get(0);
        source_rows += load
            .source_rows
            .get(&source)
            .with_context(|| format!("the view reads an unexpected source {source}"))?;
    }
    let http = MetricsPage::new(&metrics);
    let mut polls = 0u64;
    loop {
        let rows_in = http.source_rows_in("v").await?;
        if rows_in >= source_rows {
            break;
        }
        ensure!(
            started.elapsed() < Duration::from_secs(3600),
            "the view took more than an hour"
        );
        // A failed view reads no more: stop rather than wait for rows
        // that never come.
        polls += 1;
        if polls.is_multiple_of(20) {
            ensure_running(&client, "v").await?;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Every row read; a checkpoint now waits until every row went
    // through the view and its epoch committed (rows in a partitioned
    // view's workers may still be on their way when read).
    if let Some(updater) = updater {
        updater.abort();
    }
    client.batch_execute("CHECKPOINT").await?;
    if load.file_sink.is_some() {
        wait_delivered(&client).await?;
    }
    let wall = started.elapsed();
    let cpu = cpu_time()? - cpu_before;
    verify(&client, load).await?;
    if let Some(folder) = &load.file_sink {
        std::fs::remove_dir_all(folder)
            .with_context(|| format!("removing the sink's folder {}", folder.display()))?;
    }
    let epochs = crate::show(&client, "epochs_committed").await? - epochs_before;
    let bytes_written = crate::show(&client, "bytes_written").await? - bytes_before;
    let (commit_p50_ms, commit_p99_ms) = commit_percentiles(&client).await?;
    Ok(Measured {
        wall,
        cpu,
        peak_rss_kib: server.peak_rss_kib()?
            + computes
                .iter()
                .map(Compute::peak_rss_kib)
                .sum::<anyhow::Result<u64>>()?,
        epochs,
        commit_p50_ms,
        commit_p99_ms,
        bytes_written,
    })
}

/// Fails if view or sink `view` stopped being maintained, with its error.
pub async fn ensure_running(client: &Client, view: &str) -> anyhow::Result<()> {
    let failed = client
        .query_opt(
            "SELECT sqlstate, error FROM weir_views WHERE view = $1 AND failed",
            &[&view],
        )
        .await?;
    if let Some(row) = failed {
        let (sqlstate, error): (String, String) = (row.get(0), row.get(1));
        bail!("view {view} failed: {error} (SQLSTATE {sqlstate})");
    }
    Ok(())
}

/// Waits until sink `v` delivered every committed epoch.
async fn wait_delivered(client: &Client) -> anyhow::Result<()> {
    let started = Instant::now();
    loop {
        let row = client
            .query_one(
                "SELECT CAST(pending_epochs AS BIGINT), last_error FROM weir_sink_deliveries \
                 WHERE sink = 'v'",
                &[],
            )
            .await?;
        let pending: i64 = row.get(0);
        if pending == 0 {
            return Ok(());
        }
        let error: Option<String> = row.get(1);
        ensure!(
            started.elapsed() < Duration::from_secs(600),
            "the sink still has {pending} epochs to deliver (last error: {error:?})"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Checks the view against what the sources produced.
async fn verify(client: &Client, load: &Workload) -> anyhow::Result<()> {
    let positions: Vec<i64> = client
        .query(
            "SELECT CAST(position AS BIGINT) FROM weir_source_readers WHERE view = 'v'",
            &[],
        )
        .await?
        .iter()
        .map(|row| row.get(0))
        .collect();
    ensure!(
        !positions.is_empty() && positions.iter().all(|&p| p as u64 == load.events),
        "the readers stand at {positions:?}, not at {}",
        load.events
    );
    if let Some((check, want)) = &load.check {
        let counted: i64 = client.query_one(check.as_str(), &[]).await?.get(0);
        ensure!(
            counted as u64 == *want,
            "{check} returned {counted}, not {want}"
        );
    }
    Ok(())
}

async fn commit_percentiles(client: &Client) -> anyhow::Result<(f64, f64)> {
    let mut durations: Vec<f64> = client
        .query(
            "SELECT CAST(duration_ms AS DOUBLE) FROM weir_checkpoints",
            &[],
        )
        .await?
        .iter()
        .map(|r| r.get(0))
        .collect();
    durations.sort_by(f64::total_cmp);
    let at = |p: f64| {
        durations
            .get(((durations.len() as f64 - 1.0) * p).round() as usize)
            .copied()
            .unwrap_or(0.0)
    };
    Ok((at(0.5), at(0.99)))
}

/// A TCP port on 127.0.0.1 that was free a moment ago.
pub fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// A reader of the server's `/metrics` page over plain HTTP/1.0.
pub struct MetricsPage {
    address: String,
}

impl MetricsPage {
    /// The page served at `address` (host:port).
    pub fn new(address: &str) -> MetricsPage {
        MetricsPage {
            address: address.to_string(),
        }
    }

    /// Source rows into view `view` since the server started.
    pub async fn source_rows_in(&self, view: &str) -> anyhow::Result<u64> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut socket = tokio::net::TcpStream::connect(&self.address).await?;
        socket
            .write_all(b"GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n")
            .await?;
        let mut page = String::new();
        socket.read_to_string(&mut page).await?;
        Ok(page
            .lines()
            .find_map(|line| {
                line.strip_prefix("weir_view_source_rows_total{view=\"")?
                    .strip_prefix(view)?
                    .strip_prefix("\"} ")
            })
            .map(|n| n.trim().parse())
            .transpose()?
            .unwrap_or(0))
    }
}
