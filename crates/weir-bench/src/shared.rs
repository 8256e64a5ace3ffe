//! `weir-bench shared`: several views over one source, whose reader they
//! share, against the same views each over a source of its own.
//!
//! Both configurations read the same rows: the bid-shaped datagen source
//! of `stream.rs`, `rows` rows as fast as the views take them. In the
//! shared configuration every view reads source `bid`, so the server runs
//! one reader (one generator) for all of them; in the separate one view
//! `vN` reads source `bid_N`, an identical source of its own, so each view
//! generates the rows again, as every view did before readers were shared.
//! The views are created together, after the clock starts; a view created
//! while another already reads catches up on a reader of its own and then
//! joins the shared one (docs/architecture.md, "Sources").
//!
//! The figures: source rows per CPU-second of the server (generator
//! included) with all views caught up and checkpointed, peak resident
//! memory, and, sampled during the run, the most views one shared reader
//! served and the rows it read.

use std::time::{Duration, Instant};

use anyhow::ensure;
use tokio_postgres::Client;

use crate::server::Server;
use crate::stream::{bid_source, ensure_running, find_query, free_port, MetricsPage, QUERIES};

/// The views, in turn: each reads other columns of the source, so a
/// shared reader generates the union of what they read.
const VIEWS: &[&str] = &["agg", "max", "window"];

/// What to run.
pub struct SharedLoad {
    /// Views over the source.
    pub views: usize,
    /// Rows the source produces.
    pub rows: u64,
    /// Runs per configuration (alternating); the median is reported.
    pub repeat: usize,
    /// The server's checkpoint interval.
    pub checkpoint_interval: String,
    /// The server's `--workers`.
    pub workers: usize,
}

/// How the views read.
#[derive(Clone, Copy, PartialEq)]
enum Readers {
    /// Every view over one source: one shared reader.
    Shared,
    /// Each view over its own identical source: a reader per view.
    Separate,
}

/// Figures of one run.
struct Measured {
    wall: Duration,
    cpu: Duration,
    peak_rss_kib: u64,
    /// The most views one shared reader served at a sample.
    most_views_on_a_reader: u64,
    /// The most rows the shared readers had read at a sample, summed.
    shared_rows_read: u64,
}

/// Runs both configurations `repeat` times each, alternating, and prints
/// the median of each and their ratio.
pub async fn run(load: &SharedLoad) -> anyhow::Result<()> {
    ensure!(load.views >= 1, "--views must be at least 1");
    println!(
        "shared: {} views ({}) over {} rows, {} workers, checkpoint every {}",
        load.views,
        (0..load.views)
            .map(|i| VIEWS[i % VIEWS.len()])
            .collect::<Vec<_>>()
            .join(", "),
        load.rows,
        load.workers,
        load.checkpoint_interval
    );
    let (mut shared, mut separate) = (Vec::new(), Vec::new());
    for _ in 0..load.repeat.max(1) {
        shared.push(measure(load, Readers::Shared).await?);
        separate.push(measure(load, Readers::Separate).await?);
    }
    let shared = median(shared, load.rows);
    let separate = median(separate, load.rows);
    print("one source, its reader shared", load.rows, &shared);
    print("a source per view, a reader each", load.rows, &separate);
    println!(
        "  shared / separate: {:.2}x source rows per CPU-second, {:.2}x peak memory",
        separate.cpu.as_secs_f64() / shared.cpu.as_secs_f64(),
        shared.peak_rss_kib as f64 / separate.peak_rss_kib as f64
    );
    Ok(())
}

fn median(mut runs: Vec<Measured>, rows: u64) -> Measured {
    runs.sort_by_key(|r| r.cpu);
    if runs.len() > 1 {
        let each: Vec<String> = runs
            .iter()
            .map(|m| format!("{:.0}", rows as f64 / m.cpu.as_secs_f64()))
            .collect();
        println!("  runs (source rows per CPU-second): {}", each.join(", "));
    }
    let middle = runs.len() / 2;
    runs.swap_remove(middle)
}

fn print(label: &str, rows: u64, m: &Measured) {
    println!("  {label}:");
    println!(
        "    source rows/s              {:>12.0}  ({rows} rows into every view in {:.2} s)",
        rows as f64 / m.wall.as_secs_f64(),
        m.wall.as_secs_f64()
    );
    println!(
        "    source rows per CPU-second {:>12.0}  ({:.2} CPU-s of the server)",
        rows as f64 / m.cpu.as_secs_f64(),
        m.cpu.as_secs_f64()
    );
    println!(
        "    peak resident memory       {:>9.0} MiB",
        m.peak_rss_kib as f64 / 1024.0
    );
    println!(
        "    shared readers             {:>12}  views on one reader at most; shared readers read {} rows",
        m.most_views_on_a_reader, m.shared_rows_read
    );
}

async fn measure(load: &SharedLoad, readers: Readers) -> anyhow::Result<Measured> {
    let metrics = format!("127.0.0.1:{}", free_port()?);
    let workers = load.workers.to_string();
    let server = Server::start_with(&[
        "--checkpoint-interval",
        &load.checkpoint_interval,
        "--metrics-listen",
        &metrics,
        "--workers",
        &workers,
    ])
    .await?;
    let client = server.client().await?;
    let source = |view: usize| match readers {
        Readers::Shared => "bid".to_string(),
        Readers::Separate => format!("bid_{view}"),
    };
    let mut setup = String::new();
    for view in 0..load.views {
        if view == 0 || readers == Readers::Separate {
            setup.push_str(&bid_source(&source(view), load.rows));
        }
    }
    client.batch_execute(&setup).await?;
    let mut create = String::new();
    for view in 0..load.views {
        let query = find_query(QUERIES, VIEWS[view % VIEWS.len()])?
            .replace("FROM bid ", &format!("FROM {} ", source(view)));
        create.push_str(&format!("CREATE MATERIALIZED VIEW v{view} AS {query};"));
    }
    let cpu_before = server.cpu_time()?;
    let started = Instant::now();
    client.batch_execute(&create).await?;
    let page = MetricsPage::new(&metrics);
    let (mut most_views, mut shared_rows_read) = (0, 0);
    let mut polls = 0u64;
    loop {
        let (views, rows_read) = shared_readers(&client).await?;
        most_views = most_views.max(views);
        shared_rows_read = shared_rows_read.max(rows_read);
        let mut behind = false;
        for view in 0..load.views {
            behind |= page.source_rows_in(&format!("v{view}")).await? < load.rows;
        }
        if !behind {
            break;
        }
        ensure!(
            started.elapsed() < Duration::from_secs(3600),
            "the views took more than an hour"
        );
        polls += 1;
        if polls.is_multiple_of(20) {
            for view in 0..load.views {
                ensure_running(&client, &format!("v{view}")).await?;
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    client.batch_execute("CHECKPOINT").await?;
    let wall = started.elapsed();
    let cpu = server.cpu_time()? - cpu_before;
    for view in 0..load.views {
        let counted: i64 = client
            .query_one(&format!("SELECT CAST(sum(n) AS BIGINT) FROM v{view}"), &[])
            .await?
            .get(0);
        ensure!(
            counted as u64 == load.rows,
            "view v{view} counted {counted} rows, not {}",
            load.rows
        );
    }
    Ok(Measured {
        wall,
        cpu,
        peak_rss_kib: server.peak_rss_kib()?,
        most_views_on_a_reader: most_views,
        shared_rows_read,
    })
}

/// The most views on one shared reader, and the rows all have read.
async fn shared_readers(client: &Client) -> anyhow::Result<(u64, u64)> {
    let row = client
        .query_one(
            "SELECT CAST(coalesce(max(views), 0) AS BIGINT), \
             CAST(coalesce(sum(rows_read), 0) AS BIGINT) FROM weir_shared_readers",
            &[],
        )
        .await?;
    let (views, rows_read): (i64, i64) = (row.get(0), row.get(1));
    Ok((views as u64, rows_read as u64))
}
